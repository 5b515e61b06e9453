/* udp_tx.c: the kernel UDP transport's send path: messages of several calls cut into segments (header, the pieces a segment spans, version 3's data check, version 4's trailer or version 5's seal), gathered into sendmmsg calls, runs to one destination coalesced for the kernel to cut (UDP_SEGMENT) where it can, through the TX injector in testing builds. Any thread. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/auth.h"
#include "core/session.h"
#include "core/tunables.h"
#include "core/wire.h"
#include "transport/udp_sock.h"

/* Datagrams built and not yet handed to the socket; owner[i]: the message of datagram i. */
typedef struct tx_batch {
    uint8_t hdr[TX_BURST][SRPC_HDR_LEN];
    uint8_t check[TX_BURST][TAIL_MAX]; /* version 3's data check, version 4's trailer or 5's tail */
    uint8_t *enc[TX_BURST]; /* version 5, an encrypting session: the datagram's ciphertext (malloc) */
    struct iovec iov[TX_BURST][TX_MAX_IOV];
    struct mmsghdr mm[TX_BURST];
    unsigned owner[TX_BURST];
    uint32_t len[TX_BURST]; /* each datagram's bytes */
    unsigned cnt;
} tx_batch_t;

static int same_dst(const struct msghdr *a, const struct msghdr *b)
{
    return a->msg_namelen == b->msg_namelen &&
           (a->msg_name == b->msg_name || memcmp(a->msg_name, b->msg_name, a->msg_namelen) == 0);
}

/* send_all of the batch with runs of datagrams to one destination, of one length L (the last
 * of a run may be shorter), handed to the kernel as one buffer that it cuts at L (UDP_SEGMENT):
 * one pass down the stack for the run instead of one per datagram. *done counts datagrams. A
 * send the kernel refuses for the option turns it off on this socket, and the rest go one by
 * one. */
static int send_coalesced(srpc_udp_t *u, tx_batch_t *b, unsigned *done)
{
    struct mmsghdr gm[TX_BURST];
    struct iovec giov[TX_BURST * TX_MAX_IOV];
    unsigned first[TX_BURST + 1]; /* datagram index that each coalesced message starts at */
    union {
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } ctl[TX_BURST];
    unsigned g = 0, nio = 0;
    const size_t seg_max = __atomic_load_n(&u->gso_seg_max, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < b->cnt;) {
        const struct msghdr *h0 = &b->mm[i].msg_hdr;
        const size_t L = b->len[i];
        size_t total = 0;
        unsigned j = i;
        first[g] = i;
        gm[g].msg_hdr = (struct msghdr){.msg_name = h0->msg_name, .msg_namelen = h0->msg_namelen,
                                        .msg_iov = giov + nio};
        gm[g].msg_len = 0;
        do { /* datagram j joins the run */
            const struct msghdr *h = &b->mm[j].msg_hdr;
            memcpy(giov + nio, h->msg_iov, h->msg_iovlen * sizeof(struct iovec));
            nio += (unsigned)h->msg_iovlen;
            gm[g].msg_hdr.msg_iovlen += h->msg_iovlen;
            total += b->len[j];
            if (b->len[j++] < L)
                break; /* a shorter one ends a run */
        } while (L <= seg_max && j < b->cnt && j - i < SRPC_GSO_MAX_SEGS && same_dst(h0, &b->mm[j].msg_hdr) &&
                 b->len[j] <= L && total + b->len[j] <= SRPC_GSO_MAX_BYTES);
        if (j - i > 1) { /* several: the kernel cuts them at L */
            gm[g].msg_hdr.msg_control = ctl[g].buf;
            gm[g].msg_hdr.msg_controllen = sizeof(ctl[g].buf);
            struct cmsghdr *c = CMSG_FIRSTHDR(&gm[g].msg_hdr);
            c->cmsg_level = SOL_UDP;
            c->cmsg_type = UDP_SEGMENT;
            c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            const uint16_t seg = (uint16_t)L;
            memcpy(CMSG_DATA(c), &seg, sizeof(seg));
        }
        g++;
        i = j;
    }
    first[g] = b->cnt;
    unsigned gdone = 0;
    int r = srpc_udp_send_socket(u->fd, gm, g, &gdone);
    *done = first[gdone];
    uint64_t coalesced = 0;
    for (unsigned k = 0; k < gdone; k++)
        coalesced += first[k + 1] - first[k] > 1 ? first[k + 1] - first[k] : 0;
    if (coalesced)
        __atomic_fetch_add(&u->tx_coalesced, coalesced, __ATOMIC_RELAXED);
    const int refused = r == -EMSGSIZE || r == -EINVAL || r == -EIO || r == -EOPNOTSUPP;
    if (refused && first[gdone + 1] - first[gdone] > 1) {
        /* The kernel refused a run it would have taken one datagram at a time. -EMSGSIZE (-EINVAL
         * on kernels before 2024's stable updates): L is more than the route's MTU takes whole
         * (IP fragments a single datagram, never a cut one), so runs of that length go one by
         * one from now on; -EIO or -EOPNOTSUPP: the device cannot (no checksum offload), so none
         * are coalesced any more. The rest of the batch goes one datagram per message; a
         * failure then is the datagrams' own. (A full buffer or an ICMP error changes nothing.) */
        const unsigned L = b->len[*done];
        if (r == -EMSGSIZE || r == -EINVAL) {
            if (L <= __atomic_load_n(&u->gso_seg_max, __ATOMIC_RELAXED))
                __atomic_store_n(&u->gso_seg_max, L - 1, __ATOMIC_RELAXED);
        } else {
            __atomic_store_n(&u->gso, 0, __ATOMIC_RELAXED);
        }
        unsigned rest = 0;
        r = srpc_udp_send_socket(u->fd, b->mm + *done, b->cnt - *done, &rest);
        *done += rest;
    }
    return r;
}

/* Sends what the batch holds; each owner's result counts its datagrams taken, or becomes the
 * error of the first one refused. */
static void tx_flush(srpc_udp_t *u, tx_batch_t *b, srpc_tx_msg_t *msgs)
{
    unsigned done = 0;
    int r;
#ifdef SRPC_FAULT_INJECTION
    if (u->tx_faults)
        r = srpc_udp_send_faulty(u, b->mm, b->cnt, &done);
    else
#endif
    if (b->cnt > 1 && __atomic_load_n(&u->gso, __ATOMIC_RELAXED))
        r = send_coalesced(u, b, &done);
    else
        r = srpc_udp_send_socket(u->fd, b->mm, b->cnt, &done);
    for (unsigned i = 0; i < b->cnt; i++) {
        free(b->enc[i]);
        b->enc[i] = NULL;
        srpc_tx_msg_t *m = &msgs[b->owner[i]];
        if (i < done) {
            if (m->result >= 0)
                m->result++;
        } else if (m->result >= 0) {
            m->result = r < 0 ? r : -EIO;
        }
    }
    b->cnt = 0;
}

/* 0 when msg can be cut into datagrams (its segment count in *nseg, each segment's data bytes
 * in *seg), else -errno. */
static int tx_check(const srpc_tx_msg_t *m, uint32_t *nseg, uint32_t *seg)
{
    if (m->seg_size == 0 || m->seg_size > SRPC_MAX_SEG_DATA || m->npieces < 0 || m->npieces > SRPC_TX_MAX_PIECES ||
        (m->npieces && !m->pieces))
        return -EINVAL;
    uint64_t have = 0;
    for (int k = 0; k < m->npieces; k++)
        have += m->pieces[k].iov_len;
    if (have < m->len)
        return -EINVAL; /* pieces shorter than the message */
    *seg = srpc_seg_data_max(m->hdr.version, m->seg_size);
    if (m->hdr.version == SRPC_VERSION_5 && (m->auth.encrypt & SRPC_V5_FLAG_AEGIS)) /* its tag: 16 bytes longer */
        *seg = *seg > SRPC_V5_AEGIS_TAG_HEAD + 1 ? *seg - SRPC_V5_AEGIS_TAG_HEAD : 1;
    *nseg = srpc_seg_count(m->len, *seg);
    return *nseg > UINT16_MAX ? -EMSGSIZE : 0;
}

/* A message sent as it is (SRPC_TX_RAW): its one piece is the datagram. */
static void tx_raw(srpc_udp_t *u, tx_batch_t *b, srpc_tx_msg_t *msgs, unsigned i)
{
    srpc_tx_msg_t *m = &msgs[i];
    if (m->npieces != 1 || !m->pieces || m->pieces[0].iov_len != m->len || m->len > SRPC_HDR_LEN + SRPC_MAX_SEG_DATA) {
        m->result = -EINVAL;
        return;
    }
    m->result = 0;
    if (b->cnt == TX_BURST)
        tx_flush(u, b, msgs);
    const unsigned d = b->cnt;
    b->iov[d][0] = m->pieces[0];
    b->len[d] = m->len;
    b->enc[d] = NULL;
    b->mm[d].msg_hdr = (struct msghdr){.msg_name = (void *)m->dst, .msg_namelen = m->dst ? m->dstlen : 0,
                                      .msg_iov = b->iov[d], .msg_iovlen = 1};
    b->mm[d].msg_len = 0;
    b->owner[d] = i;
    b->cnt++;
}

int srpc_udp_send(srpc_udp_t *u, srpc_tx_msg_t *msgs, unsigned n)
{
    tx_batch_t b;
    b.cnt = 0;
    for (unsigned i = 0; i < n; i++) {
        srpc_tx_msg_t *m = &msgs[i];
        if (m->hdr.type == SRPC_TX_RAW) {
            tx_raw(u, &b, msgs, i);
            continue;
        }
        uint32_t nseg = 0, seg = 0;
        m->result = tx_check(m, &nseg, &seg);
        if (m->result < 0)
            continue;
        srpc_hdr_t h = m->hdr;
        h.nseg = (uint16_t)nseg;
        h.msg_len = m->len;
        const int v3 = h.version == SRPC_VERSION_3, v4 = h.version == SRPC_VERSION_4, v5 = h.version == SRPC_VERSION_5;
        if ((v4 || v5) && (!m->auth.secret || !m->auth.counter || srpc_auth_available() < 0 ||
                           (v5 && srpc_v5_available() < 0))) {
            m->result = -EINVAL; /* never sent unsigned */
            continue;
        }
        int piece = 0;      /* cursor into the pieces */
        size_t piece_off = 0;
        for (uint32_t seq = 0; seq < nseg && m->result >= 0; seq++) {
            if (b.cnt == TX_BURST)
                tx_flush(u, &b, msgs);
            const unsigned d = b.cnt;
            h.seq = (uint16_t)seq;
            srpc_hdr_encode(&h, b.hdr[d]);
            int k = 0;
            b.iov[d][k++] = (struct iovec){b.hdr[d], SRPC_HDR_LEN};
            const uint32_t dlen = srpc_seg_len(m->len, seg, seq);
            const uint32_t tail = v5 ? srpc_v5_tail_len(m->auth.encrypt) : srpc_tail_len(h.version);
            b.len[d] = SRPC_HDR_LEN + dlen + tail;
            b.enc[d] = NULL;
            /* Cannot run out of iovecs: a segment spans at most npieces <= SRPC_TX_MAX_PIECES. */
            for (uint32_t need = dlen; need > 0;) {
                size_t take = m->pieces[piece].iov_len - piece_off;
                if (take > need)
                    take = need;
                if (take)
                    b.iov[d][k++] = (struct iovec){(uint8_t *)m->pieces[piece].iov_base + piece_off, take};
                need -= (uint32_t)take;
                piece_off += take;
                if (piece_off == m->pieces[piece].iov_len) {
                    piece++;
                    piece_off = 0;
                }
            }
            if (v3) { /* the CRC-32C of the header and the segment's data, after the data */
                uint32_t crc = 0;
                for (int j = 0; j < k; j++)
                    crc = srpc_crc32c(crc, b.iov[d][j].iov_base, b.iov[d][j].iov_len);
                srpc_put_data_check(b.check[d], crc);
                b.iov[d][k++] = (struct iovec){b.check[d], SRPC_DATA_CHECK_LEN};
            } else if (v4) { /* the trailer: key, sender, counter, time and the tag over all before it */
                srpc_auth_sign_iov(m->auth.key_id, m->auth.secret, m->auth.sender, m->auth.counter, b.iov[d], k,
                                   b.check[d]);
                b.iov[d][k++] = (struct iovec){b.check[d], SRPC_AUTH_TRAILER_LEN};
            } else if (v5) { /* the session's trailer; an encrypting session's data as ciphertext */
                if ((m->auth.encrypt & SRPC_V5_FLAG_ENCRYPT) && dlen && !(b.enc[d] = malloc(dlen))) {
                    m->result = -ENOMEM;
                    break;
                }
                if (srpc_v5_seal_key(m->auth.secret, m->auth.sender, m->auth.encrypt,
                                     __atomic_add_fetch(m->auth.counter, 1, __ATOMIC_RELAXED), b.hdr[d], b.iov[d] + 1,
                                     k - 1, b.enc[d], b.check[d]) < 0) {
                    free(b.enc[d]); /* never sent unsealed */
                    b.enc[d] = NULL;
                    m->result = -EINVAL;
                    break;
                }
                if (b.enc[d]) {
                    b.iov[d][1] = (struct iovec){b.enc[d], dlen};
                    k = 2;
                }
                b.iov[d][k++] = (struct iovec){b.check[d], tail};
            }
            b.mm[d].msg_hdr = (struct msghdr){.msg_name = (void *)m->dst, .msg_namelen = m->dst ? m->dstlen : 0,
                                              .msg_iov = b.iov[d], .msg_iovlen = (size_t)k};
            b.mm[d].msg_len = 0;
            b.owner[d] = i;
            b.cnt++;
        }
    }
    if (b.cnt)
        tx_flush(u, &b, msgs);
    int whole = 0;
    for (unsigned i = 0; i < n; i++)
        whole += msgs[i].result >= 0;
    return whole;
}

int srpc_udp_send_msg(srpc_udp_t *u, const struct sockaddr *dst, socklen_t dstlen,
                      const srpc_hdr_t *tmpl, const struct iovec *pieces, int n,
                      uint32_t msg_len, uint32_t seg_size)
{
    srpc_tx_msg_t m = {.dst = dst, .dstlen = dstlen, .hdr = *tmpl, .pieces = pieces, .npieces = n,
                       .len = msg_len, .seg_size = seg_size};
    srpc_udp_send(u, &m, 1);
    return m.result;
}
