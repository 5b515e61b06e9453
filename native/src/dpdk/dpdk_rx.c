/* dpdk_rx.c: a DPDK port's receive path: bursts of frames checked (frame.h), the control header split from the payload (by the port into two pools, or in software), datagrams placed in the transport-neutral slots (a GPU payload's device address handed on, its frame held), ARP answered and senders learned. The receiving thread only. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/tunables.h"
#include "core/wire.h"
#include "dpdk/dpdk_port.h"
#include "dpdk/dpdk_split_emulation.h"
#include "gpu/gpu_driver.h"
#include "splitrpc_gpu.h"

#define ALL_ON_HOST MAX_FRAME_SEGS /* copy_out's dev_from for a frame wholly in host memory */

/* Copies frame bytes [off, off + len) out of the segments to dst (host). Segments from index
 * dev_from on lie in GPU memory: copied device to host on the port's stream (complete after
 * rx_burst's synchronisation). 0, or -EIO when such a copy failed. */
static int copy_out(const srpc_dpdk_port_t *p, unsigned dev_from, uint8_t *dst, const struct iovec *seg,
                    unsigned nseg, size_t off, size_t len)
{
    for (unsigned i = 0; i < nseg && len; i++) {
        if (off >= seg[i].iov_len) {
            off -= seg[i].iov_len;
            continue;
        }
        size_t take = seg[i].iov_len - off < len ? seg[i].iov_len - off : len;
        const uint8_t *src = (const uint8_t *)seg[i].iov_base + off;
        if (i < dev_from)
            memcpy(dst, src, take);
        else if (srpc_gpu_copy_dtoh(dst, (uint64_t)(uintptr_t)src, take, p->stream) != 0)
            return -EIO;
        dst += take;
        len -= take;
        off = 0;
    }
    return 0;
}

static void answer_arp(srpc_dpdk_port_t *p, const srpc_frame_info_t *info)
{
    uint8_t f[SRPC_ARP_FRAME_LEN];
    if (srpc_frame_build_arp(f, 1, &p->self, info->peer.mac, info->peer.ip) != 0)
        return;
    pthread_mutex_lock(&p->tx_lock);
    if (srpc_dpdk_send_frame_locked(p, f, sizeof(f)) == 0)
        p->st.arp_replies++;
    pthread_mutex_unlock(&p->tx_lock);
}

/* Where the data of a datagram whose payload lies in GPU memory (segments 1 on) goes, its
 * splitrpc header already in the header slot: 1 when its address is handed on (rx->dev[i], the
 * frame to be held), 0 when it was copied to the data slot, -1 when the copy failed. Only the
 * raw type and nseg fields decide it; the engine decodes and checks the header once, and
 * drops a bad one without reading the data. */
static int place_dev_data(srpc_dpdk_port_t *p, srpc_rx_t *rx, unsigned i, const struct iovec *seg, unsigned nseg,
                          const srpc_frame_info_t *info, uint32_t dlen)
{
    const size_t data_off = info->payload_off + SRPC_HDR_LEN;
    const uint8_t *hb = srpc_rx_hdr(rx, i);
    /* Version 3's data check and version 4's tag are read on the host: such data is copied there
     * (no GPU-side check yet). */
    if (dlen && (hb[SRPC_OFF_VER_TYPE] & 0x0f) == SRPC_REQUEST && (hb[SRPC_OFF_VER_TYPE] >> 4) < SRPC_VERSION_3 &&
        hb[SRPC_OFF_NSEG] == 0 &&
        hb[SRPC_OFF_NSEG + 1] == 1 && nseg == 2 && data_off == seg[0].iov_len && seg[1].iov_len == dlen) {
        rx->dev[i] = (uint64_t)(uintptr_t)seg[1].iov_base; /* a whole request, in one device buffer */
        p->st.rx_device_payloads++;
        return 1;
    }
    /* Segments of larger messages (reassembled on the host), and whatever the engine will drop. */
    uint32_t n = dlen > rx->data_cap ? (uint32_t)rx->data_cap : dlen;
    if (n && copy_out(p, 1, srpc_rx_data(rx, i), seg, nseg, data_off, n) != 0)
        return -1;
    p->st.rx_device_to_host += n != 0;
    return 0;
}

/* One received frame: 1 when it filled slot i of rx, else 0 (dropped, or ARP). *hold: the frame
 * must stay until srpc_dpdk_rx_release (its data is handed on as a device address). */
static int take_frame(srpc_dpdk_port_t *p, struct rte_mbuf *m, srpc_rx_t *rx, unsigned i, int *hold)
{
    struct iovec seg[MAX_FRAME_SEGS];
    unsigned nseg = 0;
    for (struct rte_mbuf *s = m; s; s = s->next) {
        if (nseg == MAX_FRAME_SEGS) {
            p->st.drops[SRPC_FRAME_SHORT]++; /* a chain longer than any frame we accept */
            return 0;
        }
        seg[nseg++] = (struct iovec){rte_pktmbuf_mtod(s, void *), s->data_len};
    }
    unsigned flags = 0;
    if ((p->rx_csum || p->st.rx_split_emulated) && (m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_GOOD &&
        (m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_GOOD)
        flags |= SRPC_FRAME_CSUM_CHECKED;
    /* Payload bytes in GPU memory: the host reads the first segment only, and cannot sum them. */
    const int on_dev = p->gpu >= 0 && m->pkt_len > m->data_len;
    if (on_dev && !(flags & SRPC_FRAME_CSUM_CHECKED)) {
        p->st.drops[SRPC_FRAME_UDP_CHECKSUM]++;
        return 0;
    }
    srpc_frame_info_t info;
    int kind = srpc_frame_parse(seg, nseg, &p->self, flags, &info);
    if (kind < 0) {
        p->st.drops[-kind < SRPC_FRAME_DROP_MAX ? -kind : 0]++;
        return 0;
    }
    if (kind != SRPC_FRAME_UDP) { /* ARP: learn the sender, answer a question */
        srpc_dpdk_neighbour_add(p, info.peer.ip, info.peer.mac);
        p->last_learned.ip = 0; /* the table may have changed under the next datagram's sender */
        if (kind == SRPC_FRAME_ARP_REQUEST)
            answer_arp(p, &info);
        return 0;
    }
    /* Learn the sender (the reply goes to its MAC). The lock is taken only when the sender is
     * not the one learned last, so a stream of requests from one client takes none. */
    if (info.peer.ip != p->last_learned.ip || memcmp(info.peer.mac, p->last_learned.mac, 6) != 0) {
        pthread_mutex_lock(&p->tx_lock);
        if (srpc_neigh_set(p, info.peer.ip, info.peer.mac) == 0) {
            p->last_learned.ip = info.peer.ip;
            memcpy(p->last_learned.mac, info.peer.mac, 6);
        }
        pthread_mutex_unlock(&p->tx_lock);
    }
    uint32_t len = info.payload_len;
    uint32_t hlen = len < SRPC_HDR_LEN ? len : SRPC_HDR_LEN;
    uint32_t dlen = len - hlen;
    int trunc = dlen > rx->data_cap;
    rx->dev[i] = 0;
    if (on_dev && info.payload_off + hlen > seg[0].iov_len) { /* a split that cut the splitrpc header */
        p->st.drops[SRPC_FRAME_SHORT]++;
        return 0;
    }
    copy_out(p, ALL_ON_HOST, srpc_rx_hdr(rx, i), seg, nseg, info.payload_off, hlen);
    if (on_dev) {
        int r = place_dev_data(p, rx, i, seg, nseg, &info, dlen);
        if (r < 0)
            return 0; /* the copy's error is in srpc_gpu_last_error; the client retransmits */
        *hold = r;
    } else {
        copy_out(p, ALL_ON_HOST, srpc_rx_data(rx, i), seg, nseg, info.payload_off + hlen, trunc ? rx->data_cap : dlen);
    }
    if (trunc)
        p->st.rx_too_big++;
    struct sockaddr_in *src = (struct sockaddr_in *)&rx->src[i];
    memset(src, 0, sizeof(*src));
    src->sin_family = AF_INET;
    src->sin_addr.s_addr = htonl(info.peer.ip);
    src->sin_port = htons(info.peer.port);
    rx->srclen[i] = sizeof(*src);
    rx->len[i] = len;
    rx->trunc[i] = (uint8_t)trunc;
    return 1;
}

void srpc_dpdk_rx_release(srpc_dpdk_port_t *p)
{
    if (p && p->n_held) {
        rte_pktmbuf_free_bulk(p->held, p->n_held);
        p->n_held = 0;
    }
}

int srpc_dpdk_payload_device(const srpc_dpdk_port_t *p)
{
    return p ? p->gpu : -1;
}

int srpc_dpdk_rx_burst(srpc_dpdk_port_t *p, srpc_rx_t *rx, unsigned max)
{
    if (!p || !rx)
        return -EINVAL;
    srpc_dpdk_rx_release(p);
    if (p->gpu < 0)
        return srpc_dpdk_rx_burst_current(p, rx, max);
    srpc_CUcontext saved; /* the receiving thread may be a worker with a context of its own */
    int rc = srpc_gpu_enter(p->gpu, &saved);
    if (rc == 0)
        rc = srpc_dpdk_rx_burst_current(p, rx, max);
    srpc_gpu_leave(saved);
    return rc;
}

int srpc_dpdk_rx_burst_current(srpc_dpdk_port_t *p, srpc_rx_t *rx, unsigned max)
{
    if (max == 0 || max > rx->burst)
        max = rx->burst;
    if (p->gpu >= 0 && p->held_cap < max) {
        struct rte_mbuf **h = realloc(p->held, max * sizeof(*h));
        if (!h)
            return -ENOMEM;
        p->held = h;
        p->held_cap = max;
    }
    const uint16_t ctl = SRPC_FRAME_HLEN + SRPC_HDR_LEN;
    unsigned got = 0;
    struct rte_mbuf *m[RX_CHUNK];
    while (got < max) {
        unsigned want = max - got < RX_CHUNK ? max - got : RX_CHUNK;
        uint16_t k = rte_eth_rx_burst(p->port_id, 0, m, (uint16_t)want);
        p->st.rx_frames += k;
        if (p->st.rx_split_emulated) {
            for (uint16_t j = 0; j < k; j++)
                srpc_split_emulate(m[j], p->data_pool, ctl, p->gpu >= 0, p->stream, &p->self);
            if (p->gpu >= 0 && k && srpc_gpu_stream_drain(p->stream) != 0) { /* the mbufs are freed after it */
                rte_pktmbuf_free_bulk(m, k);
                return -EIO; /* srpc_gpu_last_error says why */
            }
        }
        for (uint16_t j = 0; j < k; j++) {
            int hold = 0;
            got += (unsigned)take_frame(p, m[j], rx, got, &hold);
            if (hold)
                p->held[p->n_held++] = m[j];
            else
                rte_pktmbuf_free(m[j]);
        }
        if (k < want)
            break;
    }
    if (p->gpu >= 0 && got && srpc_gpu_stream_drain(p->stream) != 0) /* the device-to-host copies */
        return -EIO;
    return (int)got;
}
