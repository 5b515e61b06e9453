/* rx_in_place.c: the in-place receive of large segments (see rx_in_place.h): a datagram's header and source peeked and checked, then its data received straight into its place in the message being reassembled; the segments expected next scattered into their places with one receive (each alone, or coalesced runs laid out as one); a misprediction handed back to the burst path. */
#include <errno.h>
#include <string.h>

#include "core/tunables.h"
#include "core/wire.h"
#include "server/admit.h"
#include "server/datagram.h"
#include "server/partial.h"
#include "server/rx_in_place.h"

/* Receives the next datagram straight into its place in a message being reassembled, when it
 * is a large, new, consistent segment of one: its header and source are peeked first and
 * checked, and the lock is held across the receive so the buffer cannot expire meanwhile.
 * Returns 1 when a datagram was handled, 0 when none was waiting, -1 when the next one must
 * take the burst path. rx. */
static int rx_direct(srpc_server_t *srv)
{
    srpc_transport_t *tp = srv->tp;
    uint8_t *hb = srpc_rx_hdr(&srv->rx.slots, 0);
    struct sockaddr_storage src;
    int len = tp->ops->peek(tp, hb, &src);
    if (len == -EAGAIN)
        return 0;
    if (len == -ENOTSUP)
        srv->rx.direct_off = 1; /* a fault injector: every datagram takes the burst path */
    if (len < 0)
        return -1;
    srpc_hdr_t h;
    uint32_t seg;
    if (len < SRPC_HDR_LEN + SRPC_DIRECT_MIN || len > SRPC_HDR_LEN + SRPC_MAX_SEG_DATA ||
        srpc_hdr_decode(hb, SRPC_HDR_LEN, &h) < 0 || h.version >= SRPC_VERSION_4)
        return -1; /* the burst path takes (and counts) it */
    const uint32_t tail_len = h.version == SRPC_VERSION_3 ? SRPC_DATA_CHECK_LEN : 0; /* version 3's check */
    if (h.type != SRPC_REQUEST || h.nseg < 2 || srpc_seg_check(&h, (size_t)len - SRPC_HDR_LEN - tail_len, &seg) < 0 ||
        (src.ss_family != AF_INET && src.ss_family != AF_INET6) ||
        (srv->allow.n && !srpc_allowlist_match(&srv->allow, (struct sockaddr *)&src)))
        return -1; /* the burst path takes (and counts) it */
    const uint32_t dlen = (uint32_t)len - SRPC_HDR_LEN - tail_len;
    srpc_call_key_t k;
    ct_key_from_sockaddr(&k, (struct sockaddr *)&src, &h);
    srpc_srv_lock(srv);
    uint32_t idx = ct_find(&srv->ct, &k);
    uint8_t *dst = idx != CT_NONE && srv->ct.e[idx].state == CT_PARTIAL
                       ? srpc_reasm_slot(&srv->ct.e[idx].u.partial, &h, seg, dlen) : NULL;
    if (!dst) {
        srpc_srv_unlock(srv);
        return -1;
    }
    uint8_t peeked[SRPC_HDR_LEN], tail[SRPC_DATA_CHECK_LEN];
    memcpy(peeked, hb, SRPC_HDR_LEN);
    int got = tp->ops->recv_into(tp, hb, dst, dlen, tail, tail_len);
    ST_ADD(srv, rx_datagrams, 1);
    ST_ADD(srv, rx_bytes, got > 0 ? (uint64_t)got : 0);
    if (unlikely(got != len || memcmp(peeked, hb, SRPC_HDR_LEN) != 0)) {
        /* Not the datagram peeked (cannot happen with one receiver): its bytes may sit in the
         * slot, which stays unmarked, so the real segment overwrites them later. */
        ST_ADD(srv, drops[SRPC_DROP_INCONSISTENT], 1);
    } else if (tail_len && !srpc_data_check_ok(hb, dst, dlen, tail)) {
        ST_ADD(srv, drops[SRPC_DROP_BAD_DATA_CHECK], 1); /* unmarked, as above: a retransmission overwrites it */
    } else {
        ST_ADD(srv, rx_in_place, 1);
        srpc_admit_known_rx(srv, idx, &h, seg, dst, dlen, srpc_now_ns()); /* marks the segment; copies nothing */
        srpc_dgram_expect_after_rx(srv, &k, h.seq);
    }
    srpc_srv_unlock(srv);
    return 1;
}

/* Whether a datagram of len bytes from src, its header at hb, its data in place and its tail
 * (version 3's data check) at tail, is the segment seq of message idx that place was chosen
 * for, whole in it: checked as the burst path checks a datagram (header, version 3's data
 * check, segment, sender), then *h, *k and *seg describe it. Reads only the datagram and the
 * call table. rx and lock held. */
static int is_expected(srpc_server_t *srv, const uint8_t *hb, uint32_t len, const uint8_t *tail,
                       const struct sockaddr *src, const struct iovec *place, uint32_t idx, uint16_t seq,
                       srpc_hdr_t *h, srpc_call_key_t *k, uint32_t *seg)
{
    if (len < SRPC_HDR_LEN || srpc_hdr_decode(hb, SRPC_HDR_LEN, h) < 0 || h->type != SRPC_REQUEST || h->seq != seq ||
        h->version >= SRPC_VERSION_4)
        return 0; /* versions 4 and 5: the burst path checks their tags */
    const uint32_t tail_len = h->version == SRPC_VERSION_3 ? SRPC_DATA_CHECK_LEN : 0;
    if (len != SRPC_HDR_LEN + place->iov_len + tail_len || srpc_seg_check(h, place->iov_len, seg) < 0 ||
        (src->sa_family != AF_INET && src->sa_family != AF_INET6) ||
        (srv->allow.n && !srpc_allowlist_match(&srv->allow, src)))
        return 0;
    if (tail_len && !srpc_data_check_ok(hb, place->iov_base, (uint32_t)place->iov_len, tail))
        return 0; /* the burst path counts it */
    ct_key_from_sockaddr(k, src, h);
    return ct_find(&srv->ct, k) == idx &&
           srpc_reasm_slot(&srv->ct.e[idx].u.partial, h, *seg, (uint32_t)place->iov_len) == place->iov_base;
}

/* Datagram j of a scattered receive, expected (seq of message idx, partial message number gen,
 * keyed key) and checked by is_expected, is handled in its place, unless its message went away
 * within the burst (an earlier datagram disagreed with it): the place may be freed, or another
 * message's by now (a buffer comes back from the pool), so the datagram is dropped unread.
 * rx and lock held. */
static void handle_expected(srpc_server_t *srv, uint32_t idx, const srpc_call_key_t *key, uint32_t gen,
                            const srpc_hdr_t *h, uint32_t seg, const struct iovec *place, uint32_t len, uint64_t now)
{
    ST_ADD(srv, rx_datagrams, 1);
    ST_ADD(srv, rx_bytes, len);
    const ct_entry_t *e = &srv->ct.e[idx];
    if (ct_find(&srv->ct, key) != idx || e->state != CT_PARTIAL || e->gen != gen) {
        ST_ADD(srv, drops[SRPC_DROP_INCONSISTENT], 1);
        return;
    }
    ST_ADD(srv, rx_in_place, 1);
    srpc_admit_known_rx(srv, idx, h, seg, place->iov_base, (uint32_t)place->iov_len, now);
}

/* A scattered receive returned m <= 0 (lock held, released here): 0, nothing waits; an error
 * ends the prediction (-ENOTSUP, a fault injector: every datagram takes the burst path from
 * now on), and the caller peeks. rx. */
static int receive_failed(srpc_server_t *srv, int m)
{
    srpc_srv_unlock(srv);
    if (m == 0)
        return 0;
    if (m == -ENOTSUP)
        srv->rx.direct_off = 1;
    srv->rx.pred_on = 0;
    return -1;
}

/* After a scattered receive with `others` datagrams that were not the ones expected: the
 * prediction stops, and the next SRPC_SCATTER_BACKOFF datagrams take the peek path. rx. */
static void mispredicted(srpc_server_t *srv, unsigned others)
{
    ST_ADD(srv, rx_unscattered, others);
    srv->rx.direct_hint = 0; /* process_datagram sets it again for large segments */
    srv->rx.pred_on = 0;
    srv->rx.scatter_skip = SRPC_SCATTER_BACKOFF;
}

/* rx_scatter's receive when the sender's runs come coalesced (rx.run_mode): one entry laid out
 * as the n expected segments at place (seq), header and tail of each in its header slot. When
 * every datagram of the run is as long as its place says, each is checked; one that is another
 * is copied to its data slot (all before any is handled) and takes the burst path; a run laid
 * out otherwise is made whole and takes the burst path entire. Lock held on entry, released on
 * return. Returns the datagrams handled, 0 when none waited, -1 when the caller peeks. rx. */
static int rx_run(srpc_server_t *srv, uint32_t idx, const srpc_call_key_t *key, uint32_t gen,
                  const struct iovec *place, const uint16_t *seq, unsigned n)
{
    srpc_rx_t *rx = &srv->rx.slots;
    const uint32_t tail_len = key->version == SRPC_VERSION_3 ? SRPC_DATA_CHECK_LEN : 0;
    unsigned nr = 0;
    size_t bytes = 0; /* a coalesced run holds at most 64 datagrams and 65535 bytes */
    while (nr < n && nr < 64 && bytes + SRPC_HDR_LEN + place[nr].iov_len + tail_len <= 65535)
        bytes += SRPC_HDR_LEN + place[nr++].iov_len + tail_len;
    if (nr == 0)
        nr = 1;
    int m = srv->tp->ops->rx_run(srv->tp, rx, nr, place, tail_len);
    if (m <= 0)
        return receive_failed(srv, m);
    const uint32_t total = rx->len[0], g = rx->gso[0];
    const unsigned cnt = srpc_rx_dgrams(rx, 0);
    int laid = !rx->trunc[0] && cnt <= nr;
    for (unsigned j = 0; laid && j < cnt; j++)
        laid = (cnt == 1 ? total : j + 1 < cnt ? g : total - (cnt - 1) * g) ==
               SRPC_HDR_LEN + place[j].iov_len + tail_len;
    const uint64_t now = srpc_now_ns();
    if (!laid) {
        srpc_rx_unrun(rx, nr, place, tail_len);
        mispredicted(srv, cnt);
        srpc_dgram_entry_rx(srv, 0, now); /* notes the run */
        srpc_srv_unlock(srv);
        return (int)cnt;
    }
    srpc_dgram_note_run_rx(srv, cnt);
    if (cnt > 1)
        ST_ADD(srv, rx_coalesced, cnt);
    const struct sockaddr *src = (const struct sockaddr *)&rx->src[0];
    srpc_hdr_t hs[SRPC_SCATTER_MAX];
    uint32_t segs[SRPC_SCATTER_MAX];
    uint8_t expected[SRPC_SCATTER_MAX];
    unsigned others = 0;
    for (unsigned j = 0; j < cnt; j++) { /* all moved out before any is handled */
        srpc_call_key_t k;
        const uint32_t len = SRPC_HDR_LEN + (uint32_t)place[j].iov_len + tail_len;
        expected[j] = (uint8_t)is_expected(srv, srpc_rx_hdr(rx, j), len, srpc_rx_tail(rx, j), src, &place[j], idx,
                                           seq[j], &hs[j], &k, &segs[j]);
        if (!expected[j]) {
            memcpy(srpc_rx_data(rx, j), place[j].iov_base, place[j].iov_len);
            memcpy(srpc_rx_data(rx, j) + place[j].iov_len, srpc_rx_tail(rx, j), tail_len);
            others++;
        }
    }
    if (others)
        mispredicted(srv, others);
    for (unsigned j = 0; j < cnt; j++) {
        const uint32_t len = SRPC_HDR_LEN + (uint32_t)place[j].iov_len + tail_len;
        if (!expected[j]) {
            srpc_dgram_process_rx(srv, srpc_rx_hdr(rx, j), srpc_rx_data(rx, j), len, 0, src, 0, now);
            continue;
        }
        handle_expected(srv, idx, key, gen, &hs[j], segs[j], &place[j], len, now);
        if (!others)
            srv->rx.pred_seq = (uint16_t)(seq[j] + 1);
    }
    srpc_srv_unlock(srv);
    return (int)cnt;
}

/* rx_scatter's receive when each datagram comes alone: up to n entries with one recvmmsg, entry
 * i's data straight into place[i] (seq[i]); an entry that is another (or a coalesced run) is
 * made whole in its data slot (all before any is handled) and takes the burst path. Lock held
 * on entry, released on return. Returns the datagrams handled, 0 when none waited, -1 when the
 * caller peeks. rx. */
static int rx_each(srpc_server_t *srv, uint32_t idx, const srpc_call_key_t *key, uint32_t gen,
                   const struct iovec *place, const uint16_t *seq, unsigned n)
{
    srpc_rx_t *rx = &srv->rx.slots;
    int m = srv->tp->ops->rx_into(srv->tp, rx, n, place);
    if (m <= 0)
        return receive_failed(srv, m);
    srpc_hdr_t hs[SRPC_SCATTER_MAX];
    uint32_t segs[SRPC_SCATTER_MAX];
    uint8_t expected[SRPC_SCATTER_MAX];
    unsigned others = 0;
    for (int i = 0; i < m; i++) { /* all moved out before any is handled */
        const unsigned e = (unsigned)i;
        srpc_call_key_t k;
        expected[i] = (uint8_t)(!rx->trunc[i] && srpc_rx_dgrams(rx, e) == 1 &&
                                is_expected(srv, srpc_rx_hdr(rx, e), rx->len[i], srpc_rx_data(rx, e) + place[i].iov_len,
                                            (const struct sockaddr *)&rx->src[i], &place[i], idx, seq[i], &hs[i], &k,
                                            &segs[i]));
        if (!expected[i]) {
            srpc_rx_unscatter(rx, e, &place[i]);
            others += srpc_rx_dgrams(rx, e); /* counted in datagrams, as rx_run counts */
        }
    }
    if (others)
        mispredicted(srv, others);
    const uint64_t now = srpc_now_ns();
    for (int i = 0; i < m; i++) {
        if (!expected[i]) {
            srpc_dgram_entry_rx(srv, (unsigned)i, now);
            continue;
        }
        handle_expected(srv, idx, key, gen, &hs[i], segs[i], &place[i], rx->len[i], now);
        if (!others)
            srv->rx.pred_seq = (uint16_t)(seq[i] + 1);
    }
    srpc_srv_unlock(srv);
    return m;
}

/* Receives the segments expected next (srv->rx.pred_*), each into its place in the message
 * being reassembled: as a run while runs come coalesced (rx_run), else datagram by datagram
 * (rx_each). The lock is held across the receive so the places cannot go away meanwhile.
 * Returns the datagrams handled (0: none waited), or -1 when no segment is expected (the
 * caller peeks). rx. */
static int rx_scatter(srpc_server_t *srv)
{
    const srpc_rx_t *rx = &srv->rx.slots;
    struct iovec place[SRPC_SCATTER_MAX];
    uint16_t seq[SRPC_SCATTER_MAX];
    const unsigned max = rx->burst < SRPC_SCATTER_MAX ? rx->burst : SRPC_SCATTER_MAX;
    srpc_srv_lock(srv);
    const srpc_call_key_t key = srv->rx.pred_key; /* process_datagram may expect another message */
    const uint32_t idx = ct_find(&srv->ct, &key);
    if (idx == CT_NONE || srv->ct.e[idx].state != CT_PARTIAL) {
        srv->rx.pred_on = 0;
        srpc_srv_unlock(srv);
        return -1;
    }
    const srpc_reasm_t *msg = &srv->ct.e[idx].u.partial;
    const uint32_t gen = srv->ct.e[idx].gen;
    srpc_hdr_t h = {.msg_len = msg->msg_len, .nseg = msg->nseg};
    unsigned n = 0;
    for (uint32_t q = srv->rx.pred_seq; q < msg->nseg && n < max; q++) {
        h.seq = (uint16_t)q;
        const uint32_t len = q + 1 < msg->nseg ? msg->seg_size : msg->msg_len - q * msg->seg_size;
        uint8_t *p = srpc_reasm_slot(msg, &h, msg->seg_size, len);
        if (p) {
            place[n] = (struct iovec){p, len};
            seq[n++] = (uint16_t)q;
        }
    }
    if (n == 0) {
        srv->rx.pred_on = 0;
        srpc_srv_unlock(srv);
        return -1;
    }
    return srv->rx.run_mode && srv->tp->ops->rx_run ? rx_run(srv, idx, &key, gen, place, seq, n)
                                                     : rx_each(srv, idx, &key, gen, place, seq, n);
}

/* One step of in-place receive: the expected segments scattered, or the next datagram peeked. rx. */
int srpc_rx_in_place_step_rx(srpc_server_t *srv)
{
    if (srv->rx.pred_on && !srv->rx.scatter_skip && srpc_tp_can_rx_into(srv->tp)) {
        int r = rx_scatter(srv);
        if (r != -1)
            return r;
    }
    if (srv->rx.scatter_skip)
        srv->rx.scatter_skip--;
    return rx_direct(srv);
}
