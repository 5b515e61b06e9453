/* dpdk_tx.c: a DPDK port's send path: a message cut into segments, each one frame (Ethernet, IPv4 and UDP headers and the control header in a header mbuf, chained to the segment's data, or copied into one mbuf), signed or sealed as the transport asks, checksums by the port where it can; raw frames (ARP); a full TX queue waited on a while, then failed. Any thread (tx_lock). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <time.h>

#include "core/auth.h"
#include "core/clock.h"
#include "core/session.h"
#include "core/tunables.h"
#include "core/wire.h"
#include "dpdk/dpdk_port.h"

/* Hands n mbufs to the port; frees and counts what it does not take. */
static int tx_all(srpc_dpdk_port_t *p, struct rte_mbuf **m, unsigned n)
{
    unsigned done = 0;
    uint64_t give_up = 0;
    for (int idle = 0; done < n;) {
        uint16_t k = rte_eth_tx_burst(p->port_id, 0, m + done, (uint16_t)(n - done));
        done += k;
        idle = k ? 0 : idle + 1;
        if (idle < TX_RETRIES)
            continue;
        /* The queue stays full: a slow peer (a memif whose other end is busy), not a lost one.
         * Wait for room a while, 20 us at a time, before failing the send. */
        uint64_t now = srpc_now_ns();
        if (!give_up)
            give_up = now + SRPC_TX_FULL_WAIT_US * 1000ull;
        else if (now >= give_up)
            break;
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
        idle = TX_RETRIES - 1; /* one try after each pause */
    }
    p->st.tx_frames += done;
    if (done < n) {
        p->st.tx_failed += n - done;
        rte_pktmbuf_free_bulk(m + done, n - done);
        return -EAGAIN;
    }
    return 0;
}

int srpc_dpdk_send_frame_locked(srpc_dpdk_port_t *p, const void *frame, size_t len)
{
    struct rte_mbuf *m = rte_pktmbuf_alloc(p->pool);
    if (!m)
        return -ENOBUFS;
    char *d = len <= UINT16_MAX ? rte_pktmbuf_append(m, (uint16_t)len) : NULL;
    if (!d) {
        rte_pktmbuf_free(m);
        return -EMSGSIZE;
    }
    memcpy(d, frame, len);
    return tx_all(p, &m, 1);
}

int srpc_dpdk_send_frame(srpc_dpdk_port_t *p, const void *frame, size_t len)
{
    if (!p || !frame)
        return -EINVAL;
    pthread_mutex_lock(&p->tx_lock);
    int rc = srpc_dpdk_send_frame_locked(p, frame, len);
    pthread_mutex_unlock(&p->tx_lock);
    return rc;
}

/* Copies the next len bytes of the pieces (cursor *pi, *poff) to dst. */
static int gather(uint8_t *dst, uint32_t len, const struct iovec *pieces, int n, int *pi, size_t *poff)
{
    while (len) {
        if (*pi >= n)
            return -EINVAL; /* pieces shorter than msg_len */
        size_t avail = pieces[*pi].iov_len - *poff;
        size_t take = avail < len ? avail : len;
        memcpy(dst, (const uint8_t *)pieces[*pi].iov_base + *poff, take);
        dst += take;
        len -= (uint32_t)take;
        *poff += take;
        if (*poff == pieces[*pi].iov_len) {
            (*pi)++;
            *poff = 0;
        }
    }
    return 0;
}

/* Asks the port to compute frame h's IPv4 and UDP checksums, where it can (p->tx_csum). */
static void tx_offload(const srpc_dpdk_port_t *p, struct rte_mbuf *h)
{
    if (p->tx_csum) {
        h->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_UDP_CKSUM;
        h->l2_len = SRPC_ETH_HLEN;
        h->l3_len = SRPC_IP4_HLEN;
    }
}

/* Builds one frame and returns its head, or NULL after freeing h and d: the 64-byte control
 * part (Ethernet, IPv4, UDP, srpc header) in h, chained to d holding the segment's data and, for
 * version 3, its data check, for version 4 its trailer signed as auth says, for version 5 its
 * session's trailer (the data encrypted in place in an encrypting session) (or all in h when
 * d == h, for a port that cannot send chains). *rc gets the error. */
static struct rte_mbuf *fill_frame(srpc_dpdk_port_t *p, struct rte_mbuf *h, struct rte_mbuf *d,
                                   const srpc_endpoint_t *dst, const srpc_hdr_t *sh, uint32_t len,
                                   const struct iovec *pieces, int n, int *pi, size_t *poff,
                                   const srpc_tx_auth_t *auth, int *rc)
{
    const uint32_t check = sh->version == SRPC_VERSION_5 && auth ? srpc_v5_tail_len(auth->encrypt)
                                                                  : srpc_tail_len(sh->version);
    const uint32_t wire = len + check; /* after the header */
    if (d != h && wire == 0) { /* no data: no payload mbuf */
        rte_pktmbuf_free(d);
        d = h;
    }
    uint8_t *ctl = (uint8_t *)rte_pktmbuf_append(h, SRPC_FRAME_HLEN + SRPC_HDR_LEN);
    uint8_t *data = wire ? (uint8_t *)rte_pktmbuf_append(d, (uint16_t)wire) : NULL;
    *rc = !ctl || (wire && !data) ? -EMSGSIZE : 0;
    if (!*rc) {
        srpc_hdr_encode(sh, ctl + SRPC_FRAME_HLEN);
        *rc = gather(data, len, pieces, n, pi, poff);
    }
    if (!*rc && sh->version == SRPC_VERSION_3) /* the CRC-32C of the header and the data, after the data */
        srpc_put_data_check(data + len, srpc_crc32c(srpc_crc32c(0, ctl + SRPC_FRAME_HLEN, SRPC_HDR_LEN), data, len));
    if (!*rc && sh->version == SRPC_VERSION_4) { /* the trailer: key, sender, counter, time, tag */
        const struct iovec signed_part[2] = {{ctl + SRPC_FRAME_HLEN, SRPC_HDR_LEN}, {data, len}};
        *rc = srpc_auth_sign_iov(auth->key_id, auth->secret, auth->sender, auth->counter, signed_part, 2, data + len);
    }
    if (!*rc && sh->version == SRPC_VERSION_5) { /* session, counter and tag after the data (docs/PROTOCOL-v5.md) */
        const struct iovec plain = {data, len};
        *rc = srpc_v5_seal_key(auth->secret, auth->sender, auth->encrypt,
                               __atomic_add_fetch(auth->counter, 1, __ATOMIC_RELAXED), ctl + SRPC_FRAME_HLEN, &plain,
                               len ? 1 : 0, data, data + len);
    }
    if (!*rc) {
        struct iovec payload[2] = {{ctl + SRPC_FRAME_HLEN, SRPC_HDR_LEN}, {data, wire}};
        *rc = srpc_frame_build_udp(ctl, &p->self, dst, payload, 2, p->ip_id++,
                                   p->tx_csum ? SRPC_FRAME_CSUM_OFFLOAD : 0);
    }
    if (!*rc && d != h && rte_pktmbuf_chain(h, d) != 0)
        *rc = -EMSGSIZE;
    if (*rc) {
        rte_pktmbuf_free(h);
        if (d != h)
            rte_pktmbuf_free(d);
        return NULL;
    }
    tx_offload(p, h);
    return h;
}

/* One frame whose UDP payload is the msg_len bytes of the pieces as they are (SRPC_TX_RAW:
 * version 5's handshake datagrams and NO_SESSION, all small): 1, or the error. tx_lock held. */
static int send_raw(srpc_dpdk_port_t *p, const srpc_endpoint_t *to, const struct iovec *pieces, int n,
                    uint32_t msg_len)
{
    if (msg_len == 0 || SRPC_IP4_HLEN + SRPC_UDP_HLEN + (uint64_t)msg_len > p->mtu ||
        SRPC_FRAME_HLEN + (uint64_t)msg_len > UINT16_MAX)
        return -EMSGSIZE;
    struct rte_mbuf *h = rte_pktmbuf_alloc(p->pool);
    if (!h)
        return -ENOBUFS;
    uint8_t *ctl = (uint8_t *)rte_pktmbuf_append(h, (uint16_t)(SRPC_FRAME_HLEN + msg_len));
    int pi = 0, rc = ctl ? 0 : -EMSGSIZE;
    size_t poff = 0;
    if (!rc)
        rc = gather(ctl + SRPC_FRAME_HLEN, msg_len, pieces, n, &pi, &poff);
    if (!rc) {
        const struct iovec payload = {ctl + SRPC_FRAME_HLEN, msg_len};
        rc = srpc_frame_build_udp(ctl, &p->self, to, &payload, 1, p->ip_id++, p->tx_csum ? SRPC_FRAME_CSUM_OFFLOAD : 0);
    }
    if (rc) {
        rte_pktmbuf_free(h);
        return rc;
    }
    tx_offload(p, h);
    rc = tx_all(p, &h, 1);
    return rc ? rc : 1;
}

/* tx_lock held. auth: how a version 4 message is signed or a version 5 one sealed (NULL: neither). */
static int send_msg(srpc_dpdk_port_t *p, const struct sockaddr_in *sin, const srpc_hdr_t *tmpl,
                    const struct iovec *pieces, int n, uint32_t msg_len, uint32_t seg_size,
                    const srpc_tx_auth_t *auth)
{
    if ((tmpl->version == SRPC_VERSION_4 || tmpl->version == SRPC_VERSION_5) &&
        (!auth || !auth->secret || !auth->counter))
        return -EINVAL; /* never sent unsigned or unsealed */
    srpc_endpoint_t to = {.ip = ntohl(sin->sin_addr.s_addr), .port = ntohs(sin->sin_port)};
    struct neigh *nb = srpc_neigh_find(p, to.ip);
    if (!nb || nb->ip != to.ip) {
        p->st.no_neighbour++;
        return -EHOSTUNREACH;
    }
    memcpy(to.mac, nb->mac, 6);
    if (tmpl->type == SRPC_TX_RAW)
        return send_raw(p, &to, pieces, n, msg_len);
    seg_size = srpc_seg_data_max(tmpl->version, seg_size);
    const int aegis = tmpl->version == SRPC_VERSION_5 && (auth->encrypt & SRPC_V5_FLAG_AEGIS);
    if (aegis) /* AEGIS-128L's tag is 16 bytes longer */
        seg_size = seg_size > SRPC_V5_AEGIS_TAG_HEAD + 1 ? seg_size - SRPC_V5_AEGIS_TAG_HEAD : 1;
    uint32_t nseg = srpc_seg_count(msg_len, seg_size);
    if (nseg > UINT16_MAX)
        return -EMSGSIZE;
    uint64_t biggest = (nseg > 1 ? seg_size : msg_len) + srpc_tail_len(tmpl->version) +
                       (aegis ? SRPC_V5_AEGIS_TAG_HEAD : 0);
    if (SRPC_IP4_HLEN + SRPC_UDP_HLEN + SRPC_HDR_LEN + biggest > p->mtu)
        return -EMSGSIZE;

    srpc_hdr_t sh = *tmpl;
    sh.nseg = (uint16_t)nseg;
    sh.msg_len = msg_len;
    const unsigned per = p->multi_seg ? 2 : 1; /* mbufs per frame */
    struct rte_mbuf *m[TX_CHUNK * 2], *frames[TX_CHUNK];
    int pi = 0, rc = 0;
    size_t poff = 0;
    uint32_t sent = 0;
    while (sent < nseg) {
        unsigned cnt = nseg - sent < TX_CHUNK ? nseg - sent : TX_CHUNK;
        if (rte_pktmbuf_alloc_bulk(p->pool, m, cnt * per) != 0)
            return sent ? -EAGAIN : -ENOBUFS;
        for (unsigned i = 0; i < cnt; i++) {
            uint32_t seq = sent + i;
            sh.seq = (uint16_t)seq;
            frames[i] = fill_frame(p, m[i * per], m[i * per + per - 1], &to, &sh,
                                   srpc_seg_len(msg_len, seg_size, seq), pieces, n, &pi, &poff, auth, &rc);
            if (!frames[i]) { /* built frames own their payload mbufs; the unused ones are loose */
                rte_pktmbuf_free_bulk(frames, i);
                if ((i + 1) * per < cnt * per)
                    rte_pktmbuf_free_bulk(m + (i + 1) * per, cnt * per - (i + 1) * per);
                return rc;
            }
        }
        rc = tx_all(p, frames, cnt);
        sent += cnt;
        if (rc)
            return rc;
    }
    return (int)nseg;
}

int srpc_dpdk_send_msg(srpc_dpdk_port_t *p, const struct sockaddr *dst, socklen_t dstlen, const srpc_hdr_t *tmpl,
                       const struct iovec *pieces, int n, uint32_t msg_len, uint32_t seg_size)
{
    if (!p || !dst || !tmpl || (n && !pieces) || n < 0 || seg_size == 0 || seg_size > SRPC_MAX_SEG_DATA)
        return -EINVAL;
    if (dst->sa_family != AF_INET || dstlen < (socklen_t)sizeof(struct sockaddr_in))
        return -EAFNOSUPPORT;
    pthread_mutex_lock(&p->tx_lock);
    int rc = send_msg(p, (const struct sockaddr_in *)dst, tmpl, pieces, n, msg_len, seg_size, NULL);
    pthread_mutex_unlock(&p->tx_lock);
    return rc;
}

int srpc_dpdk_send_tx_msg(srpc_dpdk_port_t *p, const struct sockaddr *dst, socklen_t dstlen, const srpc_tx_msg_t *m)
{
    const int raw = m->hdr.type == SRPC_TX_RAW; /* one datagram as it is: not cut, no seg_size */
    if (!p || !dst || (m->npieces && !m->pieces) || m->npieces < 0 ||
        (!raw && (m->seg_size == 0 || m->seg_size > SRPC_MAX_SEG_DATA)))
        return -EINVAL;
    if (dst->sa_family != AF_INET || dstlen < (socklen_t)sizeof(struct sockaddr_in))
        return -EAFNOSUPPORT;
    pthread_mutex_lock(&p->tx_lock);
    int rc = send_msg(p, (const struct sockaddr_in *)dst, &m->hdr, m->pieces, m->npieces, m->len, m->seg_size,
                      &m->auth);
    pthread_mutex_unlock(&p->tx_lock);
    return rc;
}
