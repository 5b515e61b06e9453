/* engine.c: the server's receive path (see engine.h): decode, check, dispatch each datagram of a burst; the expiry timers. */
#include "server/engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tunables.h"
#include "core/wire.h"
#include "server/callring.h"
#include "server/cost.h"
#include "server/gpu_rx.h"
#include "server/keytab.h"
#include "server/partial.h"
#include "server/reply.h"
#include "server/sessions.h"

/* The timers are due within a period of now (a partial message or a rejection was added). */
static void timers_soon(srpc_server_t *srv, uint64_t at)
{
    if (srv->rx.next_timer_ns > at)
        srv->rx.next_timer_ns = at;
}

/* A new call-table entry, making room by evicting the oldest rejection or cached reply when the
 * table is full; CT_NONE (counted) when there is none to evict. */
static uint32_t insert_entry(srpc_server_t *srv, const srpc_call_key_t *k, uint8_t state)
{
    uint32_t i = ct_insert(&srv->ct, k, state);
    if (i == CT_NONE && srpc_reply_evict_one_locked(srv) == 0)
        i = ct_insert(&srv->ct, k, state);
    if (i == CT_NONE)
        ST_ADD(srv, drops[SRPC_DROP_TABLE_FULL], 1);
    else if (k->version >= SRPC_VERSION_4) /* what the worker signs its reply with (version 5: k_s2c) */
        memcpy(srv->ct.e[i].secret, srv->rx.auth_secret, SRPC_AUTH_SECRET_LEN);
    return i;
}

/* Answers the first segment seen of a message with an error; for a multi-segment message the
 * rest of its segments are then ignored (docs/PROTOCOL.md: "the message's other segments are then
 * ignored"). */
#define reject(srv, k, h, now, code, ...)                                                           \
    do {                                                                                           \
        srpc_reply_error_rx((srv), (k), (code), __VA_ARGS__);                                      \
        if ((h)->nseg > 1) {                                                                       \
            srpc_reply_remember_rejection_locked((srv), (k), (h), (code), (now));                  \
            timers_soon((srv), (now) + (uint64_t)(srv)->cfg.reasm_timeout_us * 1000);             \
        }                                                                                          \
    } while (0)

#define COST_UNKNOWN (-1) /* fill computes the call's cost (else: known already, e.g. from its class) */

/* The call of element seq (its request of len bytes complete, where dev_in says) becomes
 * RX_COMPLETE and gets its admission cost (aux: its header's; cost: COST_UNKNOWN, or the cost
 * already computed from the request, by cost_class). A table's keys in a request still being
 * copied out of GPU memory are read once the copy is done (srpc_gpu_rx_finish_locked). */
static void fill(srpc_server_t *srv, srpc_fn_t *fn, uint64_t seq, uint32_t ct_idx, uint32_t len, int dev_in,
                 int copying, uint16_t aux, int64_t cost, uint64_t now)
{
    srv->rx.ready += srpc_ring_fill_locked(srv, fn, seq, ct_idx, len, dev_in, now);
    if (cost != COST_UNKNOWN)
        fn->calls[seq % fn->capacity].cost = (uint32_t)cost;
    else if (fn->cost_from != SRPC_COST_NONE && !(copying && fn->cost_from == SRPC_COST_TABLE))
        srpc_cost_admit_locked(srv, fn, seq, aux);
}

/* Copies a whole request (host data, or dev != 0: its device address) into the next element of
 * the function's input TQs and marks it RX_COMPLETE. The caller checked that there is room. */
static void enqueue(srpc_server_t *srv, srpc_fn_t *fn, uint32_t ct_idx, const uint8_t *data, uint32_t len,
                    uint64_t dev, uint16_t aux, int64_t cost, uint64_t now)
{
    if (unlikely(dev) && srpc_gpu_rx_copy_in_locked(srv, fn, srpc_ring_next(fn), dev, len) != 0) {
        srpc_call_key_t k = srv->ct.e[ct_idx].key;
        ct_remove(&srv->ct, ct_idx);
        srpc_reply_error_rx(srv, &k, SRPC_E_INTERNAL, "copy from GPU memory failed: %s", srpc_gpu_last_error());
        return;
    }
    const uint64_t seq = srpc_ring_claim_locked(srv, fn);
    /* Cannot fail: new_call checked len against the function's sizes (raw: len <= in_size[0],
     * one input; fixed: len == the sum of in_size). */
    if (!dev)
        (void)srpc_tq_scatter(fn->in_tq, fn->in_size, fn->n_in, seq, data, len);
    ct_entry_t *e = &srv->ct.e[ct_idx];
    e->state = CT_QUEUED;
    e->u.queued.seq = seq;
    FN_ADD(fn, calls, 1); /* the server's total is their sum (srpc_server_stats) */
    fill(srv, fn, seq, ct_idx, len, dev && fn->gpu_device >= 0 ? SRPC_DEV_IN_DEVICE : SRPC_DEV_IN_HOST, dev != 0,
         aux, cost, now);
}

/* The record of the class that a call to fn, a function whose classes are by cost, falls in,
 * from its whole request (len bytes at req; host memory: server.c refuses classes by cost where
 * requests arrive in device memory), moved up past each class whose queue is at its spill limit
 * (calls not yet answered), with its cost in *cost (for fill: computed once); NULL when a cost
 * key is bad, the call answered BAD_REQUEST alone. */
static srpc_fn_t *cost_class(srpc_server_t *srv, srpc_fn_t *fn, const srpc_call_key_t *k, const uint8_t *req,
                             uint32_t len, uint16_t aux, int64_t *cost)
{
    char why[SRPC_ERRMSG_MAX + 1];
    uint32_t v;
    int c = srpc_cost_class(fn, req, len, aux, &v, why, sizeof(why));
    if (c < 0) {
        srpc_reply_error_rx(srv, k, SRPC_E_BAD_REQUEST, "%s", why);
        return NULL;
    }
    *cost = v;
    srpc_fn_t *cls = srv->fns[fn->first_fi + (uint32_t)c];
    while ((uint32_t)c + 1 < fn->n_classes && fn->class_spill[c] && cls->head - cls->done >= fn->class_spill[c])
        cls = srv->fns[fn->first_fi + (uint32_t)++c];
    return cls;
}

/* A segment of a call the table knows. */
static void known_call(srpc_server_t *srv, uint32_t idx, const srpc_hdr_t *h, uint32_t seg, const uint8_t *data,
                       uint32_t dlen, uint64_t now)
{
    ct_entry_t *e = &srv->ct.e[idx];
    switch (e->state) {
    case CT_QUEUED:
        ST_ADD(srv, drops[SRPC_DROP_DUPLICATE], 1);
        return;
    case CT_DONE:
        if (h->seq == 0)
            srpc_reply_resend_locked(srv, idx);
        else
            ST_ADD(srv, drops[SRPC_DROP_DUPLICATE], 1);
        return;
    case CT_REJECTED:
        srpc_reply_rejected_segment_locked(srv, idx, h);
        return;
    case CT_PARTIAL:
        break;
    default:
        return;
    }
    int r = srpc_reasm_add(&e->u.partial, h, seg, data, dlen);
    if (r == -EALREADY) {
        ST_ADD(srv, drops[SRPC_DROP_DUPLICATE], 1);
        return;
    }
    if (r < 0) { /* disagrees with the message: docs/PROTOCOL.md drops the whole message */
        ST_ADD(srv, drops[SRPC_DROP_INCONSISTENT], 1);
        srv->rx.ready += srpc_partial_drop_locked(srv, idx);
        return;
    }
    if (r == 0)
        return;
    srpc_fn_t *fn = srpc_fn_lookup(srv, h->func_id, e->aux);
    int64_t cost = COST_UNKNOWN;
    if (unlikely(fn->class_by_cost)) { /* never placed (partial.c): its class from the whole message */
        srpc_call_key_t k = e->key;
        srpc_fn_t *cls = cost_class(srv, fn, &k, e->u.partial.buf, e->u.partial.msg_len, e->aux, &cost);
        if (!cls) {
            srv->rx.ready += srpc_partial_drop_locked(srv, idx);
            return;
        }
        fn = cls;
    }
    if (!e->placed && srpc_ring_full(fn)) {
        srpc_call_key_t k = e->key;
        srv->rx.ready += srpc_partial_drop_locked(srv, idx);
        srpc_reply_error_rx(srv, &k, SRPC_E_BUSY, "queue of function %u is full", h->func_id);
        return;
    }
    uint64_t seq;
    srpc_reasm_t msg;
    const uint32_t len = e->u.partial.msg_len;
    if (srpc_partial_finish_locked(srv, idx, &seq, &msg)) { /* already in its element */
        e->state = CT_QUEUED;
        e->u.queued.seq = seq;
        FN_ADD(fn, calls, 1); /* the server's total is their sum (srpc_server_stats) */
        fill(srv, fn, seq, idx, len, SRPC_DEV_IN_HOST, 0, e->aux, COST_UNKNOWN, now); /* placed: not by cost */
        return;
    }
    enqueue(srv, fn, idx, msg.buf, msg.msg_len, 0, e->aux, cost, now);
    srpc_partial_free_buf_locked(srv, &msg);
}

/* The first segment seen of a new call (dev: see enqueue; one-segment requests only). Returns its
 * call-table entry when it was queued (it will run), else CT_NONE (refused, or still arriving). */
static uint32_t new_call(srpc_server_t *srv, const srpc_call_key_t *k, const srpc_hdr_t *h, uint32_t seg,
                     const uint8_t *data, uint32_t dlen, uint64_t dev, uint64_t now)
{
    if (unlikely(atomic_load_explicit(&srv->draining, memory_order_relaxed))) {
        reject(srv, k, h, now, SRPC_E_DRAINING, "server draining: no new calls");
        return CT_NONE;
    }
    srpc_fn_t *fn = srpc_fn_lookup(srv, h->func_id, h->aux); /* its aux class's queue, if it has classes */
    if (unlikely(!fn)) {
        reject(srv, k, h, now, SRPC_E_UNKNOWN_FUNCTION, "no function %u", h->func_id);
        return CT_NONE;
    }
    const uint32_t limit = fn->raw ? fn->req_bytes : srv->cfg.max_message;
    if (unlikely(h->msg_len > limit || h->msg_len > srv->cfg.max_message)) {
        reject(srv, k, h, now, SRPC_E_TOO_LARGE, "request of %u bytes, limit %u", h->msg_len,
               limit < srv->cfg.max_message ? limit : srv->cfg.max_message);
        return CT_NONE;
    }
    if (unlikely(!fn->raw && h->msg_len != fn->req_bytes)) {
        reject(srv, k, h, now, SRPC_E_BAD_REQUEST, "function %u takes %u bytes, got %u", h->func_id, fn->req_bytes,
               h->msg_len);
        return CT_NONE;
    }
    if (h->nseg == 1) {
        int64_t cost = COST_UNKNOWN;
        if (unlikely(fn->class_by_cost) && !(fn = cost_class(srv, fn, k, data, dlen, h->aux, &cost)))
            return CT_NONE;
        if (unlikely(srpc_ring_full(fn))) {
            srpc_reply_error_rx(srv, k, SRPC_E_BUSY, "queue of function %u is full", h->func_id);
            return CT_NONE;
        }
        uint32_t idx = insert_entry(srv, k, CT_QUEUED);
        if (idx != CT_NONE)
            enqueue(srv, fn, idx, data, dlen, dev, h->aux, cost, now);
        return idx != CT_NONE && srv->ct.e[idx].state != CT_FREE ? idx : CT_NONE; /* (enqueue frees it on a
                                                                                    failed copy from a GPU) */
    }
    if (unlikely(dev)) { /* the transport hands on device addresses of one-segment requests only */
        ST_ADD(srv, drops[SRPC_DROP_BAD_SEGMENT], 1);
        return CT_NONE;
    }
    int why = srpc_partial_admit_locked(srv, &k->addr, h->msg_len, h->nseg);
    if (unlikely(why)) {
        ST_ADD(srv, drops[why], 1);
        return CT_NONE;
    }
    uint32_t idx = insert_entry(srv, k, CT_PARTIAL);
    if (idx == CT_NONE)
        return CT_NONE;
    srv->ct.e[idx].aux = h->aux;
    if (srpc_partial_start_locked(srv, idx, fn, h, seg, now) != 0) {
        ST_ADD(srv, drops[SRPC_DROP_MEM_CAP], 1);
        return CT_NONE;
    }
    timers_soon(srv, now + SRPC_TIMER_PERIOD_US * 1000ull); /* expiry, and unblocking its queue */
    srpc_reasm_add(&srv->ct.e[idx].u.partial, h, seg, data, dlen); /* first segment: cannot fail */
    return CT_NONE;
}

/* Whether the first segment seen of a new call keyed k may go on: its key has not expired and may
 * call the function; else it is answered FORBIDDEN (docs/PROTOCOL-v4.md) and counted. Checked
 * before the function is looked up, so a key learns nothing of functions it may not call. rx. */
static int authorised(srpc_server_t *srv, const srpc_key_t *key, const srpc_call_key_t *k, const srpc_hdr_t *h,
                      uint64_t now)
{
    if (unlikely(key->expires_ms && srpc_auth_now_ms64() >= key->expires_ms)) {
        ST_ADD(srv, auth_expired, 1);
        reject(srv, k, h, now, SRPC_E_FORBIDDEN, "key %u has expired", key->id);
        return 0;
    }
    if (unlikely(!srpc_key_allows(key, h->func_id))) {
        ST_ADD(srv, auth_forbidden, 1);
        reject(srv, k, h, now, SRPC_E_FORBIDDEN, "key %u may not call function %u", key->id, h->func_id);
        return 0;
    }
    return 1;
}

/* A large segment seq of the message keyed k came: the rest of it is expected next, in place. rx. */
static void expect_after(srpc_server_t *srv, const srpc_call_key_t *k, uint16_t seq)
{
    srv->rx.direct_hint = 1;
    srv->rx.pred_key = *k;
    srv->rx.pred_seq = (uint16_t)(seq + 1);
    srv->rx.pred_on = 1;
}

/* Sends the len bytes at d to dst as one datagram (version 5's answers before a session, and
 * NO_SESSION: never larger than what came). rx and lock held. */
static void send_raw(srpc_server_t *srv, const struct sockaddr *dst, const uint8_t *d, size_t len)
{
    const struct iovec iv = {(void *)d, len};
    srpc_tx_msg_t m = {.dst = dst,
                       .dstlen = dst->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
                       .hdr = {.type = SRPC_TX_RAW}, .pieces = &iv, .npieces = 1, .len = (uint32_t)len};
    if (srpc_tp_send(srv->tp, &m, 1) < 1)
        ST_ADD(srv, drops[SRPC_DROP_TX_FAILED], 1);
}

/* A version 5 datagram of a handshake type (docs/PROTOCOL-v5.md): an INIT is answered (ACCEPT,
 * or COOKIE under load) or dropped; the others never go to a server. rx and lock held. */
static void v5_handshake(srpc_server_t *srv, const uint8_t *hb, const uint8_t *data, uint32_t total, uint64_t dev,
                         const struct sockaddr *src, uint64_t now)
{
    if ((hb[SRPC_OFF_VER_TYPE] & 0x0f) != SRPC_V5_INIT) {
        ST_ADD(srv, drops[SRPC_DROP_NOT_REQUEST], 1);
        return;
    }
    if (total != SRPC_V5_INIT_LEN || dev || !data) {
        ST_ADD(srv, drops[SRPC_DROP_BAD_HEADER], 1);
        return;
    }
    uint8_t init[SRPC_V5_INIT_LEN], out[SRPC_V5_INIT_LEN];
    memcpy(init, hb, SRPC_HDR_LEN);
    memcpy(init + SRPC_HDR_LEN, data, SRPC_V5_INIT_BODY);
    size_t n = 0;
    const int r = srpc_sessions_on_init(srv->sessions, srv->keys, init, sizeof(init), src, srpc_auth_now_ms64(),
                                        now / 1000000u, out, &n);
    if (r) {
        ST_ADD(srv, drops[r], 1);
        return;
    }
    if (n && n <= total)
        send_raw(srv, src, out, n);
}

#define V5_SHORT (-1) /* v5_open: too short for its session's suite (SRPC_DROP_SHORT is 0) */

/* Version 5: once call k of session s's line is queued (it will run), its line notes it, so that no
 * datagram of it starts it again after it has left the reply cache (sessions.h). rx and lock held. */
static void note_ran(srpc_server_t *srv, const srpc_session_t *s, const srpc_call_key_t *k)
{
    const uint32_t j = ct_find(&srv->ct, k);
    if (j != CT_NONE && (srv->ct.e[j].state == CT_QUEUED || srv->ct.e[j].state == CT_DONE))
        srpc_sessions_call_ran(srv->sessions, s, k->req_id);
}

/* A version 5 data datagram's session, tag and counter (its *dlen bytes at data before the
 * trailer; *dlen then loses an AEGIS-128L session's tag half; decrypted in place in an encrypting
 * session): 0 with *key its key and *sess its session; else the drop reason (V5_SHORT: short). A
 * datagram of a session not here, or not from the address the session was made from, is answered
 * NO_SESSION (at the rate sessions.c allows) and never run. rx and lock held. */
static int v5_open(srpc_server_t *srv, const srpc_hdr_t *h, const uint8_t *hb, uint8_t *data, uint32_t *dlen,
                   const struct sockaddr *src, uint64_t now, srpc_key_t **key, const srpc_session_t **sess)
{
    const uint8_t *tr = data + *dlen; /* the trailer: the datagram's last 32 bytes, whatever the suite */
    const uint64_t id = srpc_v5_trailer_session(tr), counter = srpc_v5_trailer_counter(tr), mono = now / 1000000u;
    srpc_session_t *s = srpc_sessions_find(srv->sessions, srv->keys, id, mono);
    const int moved = s && !srpc_sessions_from(s, src); /* not from where its INIT came: no such session there */
    if (!s || moved) {
        if (h->type == SRPC_REQUEST && srpc_sessions_may_refuse(srv->sessions, src, mono)) {
            uint8_t ns[SRPC_V5_NO_SESSION_LEN];
            srpc_v5_no_session_make(ns, h, id);
            send_raw(srv, src, ns, sizeof(ns));
        }
        return moved ? SRPC_DROP_AUTH_ADDRESS   /* the session is another address's */
                     : SRPC_DROP_AUTH_UNKNOWN_KEY; /* no such session: counted with unknown keys */
    }
    const int r = srpc_sessions_fresh(srv->sessions, s, counter, mono); /* before the tag: a replay costs no AEAD */
    if (r)
        return r;
    const uint32_t head = srpc_v5_tail_len(s->keys.encrypt) - SRPC_V5_TRAILER_LEN; /* AEGIS-128L: its tag's first half */
    if (*dlen < head)
        return V5_SHORT;
    *dlen -= head;
    if (srpc_v5_open(&s->keys, 1, hb, data, *dlen, data + *dlen) < 0)
        return SRPC_DROP_AUTH_BAD_TAG;
    if (srpc_sessions_take(srv->sessions, s, counter, mono) != 0)
        return SRPC_DROP_AUTH_REPLAY;
    *key = srpc_keytab_key(srv->keys, s->key_id); /* there: srpc_sessions_find checked */
    *sess = s;
    return *key ? 0 : SRPC_DROP_AUTH_UNKNOWN_KEY;
}

/* One datagram from src, hostile until checked: total bytes, its header at hb, the rest at
 * data, or at the device address dev (data unused); trunc: longer than what is here. rx and
 * lock held. */
static void process_datagram(srpc_server_t *srv, const uint8_t *hb, const uint8_t *data_in, uint32_t total,
                             int trunc, const struct sockaddr *src, uint64_t dev, uint64_t now)
{
    ST_ADD(srv, rx_datagrams, 1);
    ST_ADD(srv, rx_bytes, total);
    if (unlikely(srv->allow.n && !srpc_allowlist_match(&srv->allow, src))) {
        ST_ADD(srv, drops[SRPC_DROP_NOT_ALLOWED], 1);
        return;
    }
    if (unlikely(trunc)) {
        ST_ADD(srv, drops[SRPC_DROP_TRUNCATED], 1);
        return;
    }
    if (unlikely(srv->sessions && total >= SRPC_HDR_LEN && hb[SRPC_OFF_VER_TYPE] >> 4 == SRPC_VERSION_5 &&
                 (hb[SRPC_OFF_VER_TYPE] & 0x0f) > SRPC_ERROR)) {
        v5_handshake(srv, hb, data_in, total, dev, src, now);
        return;
    }
    srpc_hdr_t h;
    int r = srpc_hdr_decode(hb, total < SRPC_HDR_LEN ? total : SRPC_HDR_LEN, &h);
    if (unlikely(r < 0)) {
        ST_ADD(srv, drops[r == -EMSGSIZE ? SRPC_DROP_SHORT : r == -EPROTO ? SRPC_DROP_BAD_SEGMENT
                          : r == -EILSEQ ? SRPC_DROP_BAD_CHECK : SRPC_DROP_BAD_HEADER], 1);
        return;
    }
    if (unlikely(h.type != SRPC_REQUEST)) {
        ST_ADD(srv, drops[SRPC_DROP_NOT_REQUEST], 1);
        return;
    }
    /* A one-segment request whose data stayed in GPU memory: dev is its address and the data
     * slot is unused. A known call never reads it: a duplicate reads no data, and a partial
     * message disagrees with it (nseg) before any copy. */
    const uint8_t *data = dev ? NULL : data_in;
    uint32_t dlen = total - SRPC_HDR_LEN;
    srpc_key_t *akey = NULL;
    const srpc_session_t *sess = NULL; /* version 5 */
    const int keyed = h.version >= SRPC_VERSION_4; /* a server with keys takes versions 4 and 5 alone */
    if (srv->auth_on != keyed || (h.version == SRPC_VERSION_5 && !srv->sessions)) {
        ST_ADD(srv, drops[srv->auth_on && !keyed ? SRPC_DROP_AUTH_MISSING : SRPC_DROP_BAD_HEADER], 1);
        return;
    }
    if (srv->auth_on) { /* key, tag, time, replay window: before any other field or data byte is believed */
        const uint32_t tail = srpc_tail_len(h.version);
        if (!data || dlen < tail) { /* (device data: never versions 4 and 5) */
            ST_ADD(srv, drops[SRPC_DROP_SHORT], 1);
            return;
        }
        dlen -= tail;
        if (h.version == SRPC_VERSION_5) { /* the session's (docs/PROTOCOL-v5.md); the data decrypted in place */
            r = v5_open(srv, &h, hb, (uint8_t *)data, &dlen, src, now, &akey, &sess);
        } else if (!srv->keys->legacy_v4) { /* version 4 only where the table takes its legacy mode */
            r = SRPC_DROP_AUTH_V4_OFF;
        } else {
            srpc_auth_fields_t f;
            const uint64_t wall_ms = srpc_auth_now_ms64(); /* the datagrams' clock; windows age on now (monotonic) */
            r = srpc_keytab_verify(srv->keys, hb, data, dlen, data + dlen, wall_ms, &akey, &f);
            if (r == 0)
                r = srpc_keytab_commit(srv->keys, akey, &f, wall_ms, now / 1000000u);
        }
        if (unlikely(r)) {
            ST_ADD(srv, drops[r == V5_SHORT ? SRPC_DROP_SHORT : r], 1);
            return;
        }
        ST_ADD(srv, auth_ok, 1);
    }
    if (h.version == SRPC_VERSION_3) { /* the data check, before any data byte is believed */
        r = data ? srpc_data_check(&h, hb, data, &dlen) : -EMSGSIZE; /* (device data: never v3) */
        if (unlikely(r < 0)) {
            ST_ADD(srv, drops[r == -EILSEQ ? SRPC_DROP_BAD_DATA_CHECK : SRPC_DROP_SHORT], 1);
            return;
        }
    }
    uint32_t seg;
    if (unlikely(srpc_seg_check(&h, dlen, &seg) < 0)) {
        ST_ADD(srv, drops[SRPC_DROP_BAD_SEGMENT], 1);
        return;
    }
    if (unlikely(src->sa_family != AF_INET && src->sa_family != AF_INET6))
        return;
    srpc_call_key_t k;
    ct_key_from_sockaddr(&k, src, &h);
    if (akey) {
        k.key_id = akey->id;
        if (sess) { /* version 5: a call is its session's line's; its replies are sealed with k_s2c */
            k.session = sess->lineage;
            k.seal_session = sess->keys.session;
            k.encrypt = sess->keys.encrypt;
            srv->rx.auth_secret = sess->keys.s2c;
        } else {
            srv->rx.auth_secret = akey->secret; /* its replies are signed with it */
        }
    }
    uint32_t idx = ct_find(&srv->ct, &k);
    /* In place: not for version 4 (its tag is checked on the burst path only, for now). */
    if (h.nseg > 1 && dlen >= SRPC_DIRECT_MIN && !srv->rx.direct_off && !srv->auth_on &&
        srpc_tp_can_recv_into(srv->tp))
        expect_after(srv, &k, h.seq);
    if (idx != CT_NONE) {
        if (akey && srv->ct.e[idx].state != CT_QUEUED) { /* the key's secret as of now (a reload may change
                                                            it); version 5: the latest session of its line */
            memcpy(srv->ct.e[idx].secret, srv->rx.auth_secret, SRPC_AUTH_SECRET_LEN);
            srv->ct.e[idx].key.seal_session = k.seal_session;
            srv->ct.e[idx].key.encrypt = k.encrypt;
        }
        if (sess && (srv->ct.e[idx].state == CT_DONE || srv->ct.e[idx].state == CT_REJECTED))
            srv->ct.e[idx].key.addr = k.addr; /* version 5: answered where this datagram came from (a call
                                                 still arriving keeps its first address: its memory is
                                                 counted there; a running one: the worker reads it) */
        const int arriving = sess && srv->ct.e[idx].state == CT_PARTIAL;
        known_call(srv, idx, &h, seg, data, dlen, now);
        if (arriving)
            note_ran(srv, sess, &k);
    } else if (sess && !srpc_sessions_call_fresh(srv->sessions, sess, h.req_id)) {
        ST_ADD(srv, drops[SRPC_DROP_AUTH_STALE], 1); /* its line ran it, and it has left the reply cache: a
                                                        datagram held back on the way, never run again */
    } else if (akey && !authorised(srv, akey, &k, &h, now)) {
        /* refused FORBIDDEN */
    } else {
        const uint32_t queued = new_call(srv, &k, &h, seg, data, dlen, dev, now);
        if (sess && queued != CT_NONE)
            srpc_sessions_call_ran(srv->sessions, sess, h.req_id); /* it will run: never again (sessions.h) */
    }
    srv->rx.auth_secret = NULL;
}

/* An entry of n datagrams came: a coalesced run puts the receiver in run mode (the expected
 * segments are received as one run, rx_run) for the next SRPC_RUN_MODE_HOLD entries of one
 * datagram (a run's odd datagram alone does not end it; a sender that stops coalescing does). rx. */
static void note_run(srpc_server_t *srv, unsigned n)
{
    if (n > 1)
        srv->rx.run_mode = SRPC_RUN_MODE_HOLD;
    else if (srv->rx.run_mode)
        srv->rx.run_mode--;
}

/* Entry i of the burst: its datagram, or each of those coalesced into it, in order. rx and lock held. */
static void process_entry(srpc_server_t *srv, unsigned i, uint64_t now)
{
    const srpc_rx_t *rx = &srv->rx.slots;
    const struct sockaddr *src = (const struct sockaddr *)&rx->src[i];
    const unsigned n = srpc_rx_dgrams(rx, i);
    note_run(srv, n);
    if (n > 1)
        ST_ADD(srv, rx_coalesced, n);
    for (unsigned j = 0; j < n; j++) {
        const srpc_rx_dg_t d = srpc_rx_dgram(rx, i, j);
        process_datagram(srv, d.hdr, d.data, d.len, rx->trunc[i], src, rx->dev[i], now);
    }
}

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
        known_call(srv, idx, &h, seg, dst, dlen, srpc_now_ns()); /* marks the segment; copies nothing */
        expect_after(srv, &k, h.seq);
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
    known_call(srv, idx, h, seg, place->iov_base, (uint32_t)place->iov_len, now);
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
        process_entry(srv, 0, now); /* notes the run */
        srpc_srv_unlock(srv);
        return (int)cnt;
    }
    note_run(srv, cnt);
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
            process_datagram(srv, srpc_rx_hdr(rx, j), srpc_rx_data(rx, j), len, 0, src, 0, now);
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
            process_entry(srv, (unsigned)i, now);
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
static int rx_in_place_step(srpc_server_t *srv)
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

/* What a burst leaves behind: its error replies go out, the worker learns of its calls. */
static void end_of_burst(srpc_server_t *srv)
{
    if (srv->rx.errq.n)
        srpc_reply_errors_flush_rx(srv);
    if (srv->rx.ready) {
        srv->rx.ready = 0;
        srpc_ring_notify(srv);
    }
}

/* A reload's table (srpc_server_set_keys) replaces the one in use, the windows handed over. rx. */
static void keys_reload(srpc_server_t *srv)
{
    if (!atomic_load_explicit(&srv->keys_next, memory_order_relaxed))
        return;
    srpc_keytab_t *next = atomic_exchange_explicit(&srv->keys_next, NULL, memory_order_acquire);
    if (!next)
        return;
    srpc_keytab_adopt(next, srv->keys, srpc_now_ns() / 1000000u);
    srpc_keytab_destroy(srv->keys);
    srv->keys = next;
    if (srv->sessions) { /* once per reload, not per datagram */
        srpc_srv_lock(srv);
        srpc_sessions_note_skew(srv->sessions, next->skew_ms);
        srpc_srv_unlock(srv);
    }
    ST_ADD(srv, auth_reloads, 1);
}

typedef struct {
    uint64_t *line;    /* sorted: lines with calls arriving or running */
    uint64_t *any;     /* sorted: lines with any calls in the table (answered ones included) */
    uint32_t n, n_any;
} lines_t;

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* What the call table held of line's calls (enum srpc_line_calls; the sweep's sorted lists). */
static int line_busy(void *ctx, uint64_t line)
{
    const lines_t *l = ctx;
    if (l->n && bsearch(&line, l->line, l->n, sizeof(uint64_t), cmp_u64))
        return SRPC_LINE_RUNNING;
    return l->n_any && bsearch(&line, l->any, l->n_any, sizeof(uint64_t), cmp_u64) ? SRPC_LINE_ANSWERED
                                                                                   : SRPC_LINE_IDLE;
}

/* Forgets version 5's sessions past their time, once a second, but none whose line still has
 * calls in the call table that are arriving or running: a resume naming it must still find it,
 * so that a call's resend is that call. A line whose calls are all answered (their replies
 * cached) does not hold its sessions: one silent for SRPC_V5_QUOTA_IDLE_MS (2 s) may make room
 * for a new session when its key's quota or the table is full, leaving a tombstone that a resume
 * naming it follows to the line (sessions.h), freed here once the line has no calls left. Run by
 * the timers (at least every SRPC_TIMER_IDLE_US) and after a receive that took datagrams (keyed
 * traffic never takes the in-place path), now the time already read there: only when it is due is
 * the clock read again. rx. */
static void sessions_sweep(srpc_server_t *srv, uint64_t now)
{
    if (now / 1000000u < srv->sessions_swept_ms + 1000) /* (a now read before the last sweep's: not due) */
        return;
    /* Due: the time read afresh, so that no session is aged on a now older than its own stamps (the
     * caller's may have been read before another rx owner's receive). Once a second at most. */
    const uint64_t ms = srpc_now_ns() / 1000000u;
    srv->sessions_swept_ms = ms;
    srpc_srv_lock(srv);
    lines_t l = {malloc(2 * (size_t)srv->ct.used * sizeof(uint64_t) + 1), NULL, 0, 0};
    if (l.line) {
        l.any = l.line + srv->ct.used;
        for (uint32_t i = 0, seen = 0; i < srv->ct.max_entries && seen < srv->ct.used; i++) {
            const uint8_t st = srv->ct.e[i].state;
            if (st == CT_FREE)
                continue;
            seen++;
            if (!srv->ct.e[i].key.session)
                continue;
            l.any[l.n_any++] = srv->ct.e[i].key.session;
            if (st == CT_PARTIAL || st == CT_QUEUED)
                l.line[l.n++] = srv->ct.e[i].key.session;
        }
        qsort(l.line, l.n, sizeof(uint64_t), cmp_u64);
        qsort(l.any, l.n_any, sizeof(uint64_t), cmp_u64);
        srpc_sessions_mark(srv->sessions, line_busy, &l);
        srpc_sessions_expire(srv->sessions, ms);
        free(l.line);
    } /* (no memory: nothing forgotten this time) */
    srpc_srv_unlock(srv);
}

int srpc_engine_rx_step_rx(srpc_server_t *srv)
{
    SRPC_ASSERT_RX(srv);
    if (srv->auth_on)
        keys_reload(srv);
    srpc_rx_t *rx = &srv->rx.slots;
    int n = 0, r = -1;
    uint64_t took_ns = 0; /* when a burst took datagrams: the session sweep's now */
    while (srv->rx.direct_hint && n < (int)rx->burst && (r = rx_in_place_step(srv)) > 0) {
        n += r;
        ST_ADD(srv, rx_receives, 1);
    }
    if (r < 0) { /* the next datagram takes the burst path (one only, if in place may follow); r > 0: a
                  * burst's worth came in place, r == 0: nothing waits */
        srpc_CUcontext saved;
        const int entered = srpc_gpu_rx_enter_rx(srv, &saved); /* the copies out of GPU memory */
        int m = srpc_tp_rx_burst(srv->tp, rx, srv->rx.direct_hint ? 1 : rx->burst);
        if (m > 0) {
            ST_ADD(srv, rx_receives, 1);
            srv->rx.direct_hint = 0; /* process_datagram sets it again for large segments */
            const uint64_t now = srpc_now_ns();
            took_ns = now;
            srpc_srv_lock(srv);
            for (int i = 0; i < m; i++)
                process_entry(srv, (unsigned)i, now);
            if (srv->rx.dev_copies)
                srpc_gpu_rx_finish_locked(srv); /* before the worker may see the calls */
            srpc_srv_unlock(srv);
            n += m;
        }
        srpc_tp_rx_release(srv->tp); /* the frames whose data was copied from */
        srpc_gpu_rx_leave_rx(srv, entered, saved);
    }
    end_of_burst(srv);
    if (took_ns && srv->sessions) /* (and from the timers: a worker kept busy may not run them for a while) */
        sessions_sweep(srv, took_ns);
    return n;
}

void srpc_engine_timers_rx(srpc_server_t *srv, uint64_t now)
{
    SRPC_ASSERT_RX(srv);
    if (srv->sessions) /* here and when datagrams came, not on every receive step: a clock read per
                          empty poll is 70 ns on some VMs */
        sessions_sweep(srv, now);
    srpc_srv_lock(srv);
    unsigned ready = srpc_partial_unblock_locked(srv, now);
    ready += srpc_partial_expire_locked(srv, now);
    srpc_reply_expire_locked(srv, now);
    /* Next: every period while messages are partial (their expiry, and the queues they hold
     * back); else when the oldest cached reply or rejection expires, at least every idle period. */
    uint64_t next = now + SRPC_TIMER_IDLE_US * 1000ull;
    if (srpc_partial_pending_locked(srv)) {
        next = now + SRPC_TIMER_PERIOD_US * 1000ull;
    } else {
        uint64_t t = srpc_reply_next_expiry_locked(srv);
        if (t < next)
            next = t;
    }
    srv->rx.next_timer_ns = next;
    srpc_srv_unlock(srv);
    if (ready) {
        srpc_ring_notify(srv);
        /* A worker asleep in poll() on the transport (block mode) would not see the calls
         * until a datagram came: wake it. */
        uint64_t one = 1;
        if (write(srv->wakefd, &one, sizeof(one)) < 0) { /* the counter is set already */ }
    }
}

int64_t srpc_engine_timers_in_rx(const srpc_server_t *srv, uint64_t now, int64_t max_us)
{
    SRPC_ASSERT_RX(srv);
    if (now >= srv->rx.next_timer_ns)
        return 0;
    uint64_t us = (srv->rx.next_timer_ns - now) / 1000 + 1;
    return max_us >= 0 && us > (uint64_t)max_us ? max_us : (int64_t)us;
}

int srpc_engine_feed(srpc_server_t *srv, const uint8_t *dgram, size_t len, const struct sockaddr *src,
                     socklen_t srclen)
{
    if (!srv || (!dgram && len) || !src || srclen > (socklen_t)sizeof(struct sockaddr_storage) || len > UINT32_MAX)
        return -EINVAL;
    srpc_rx_lock(srv);
    if (srv->auth_on)
        keys_reload(srv);
    srpc_rx_t *rx = &srv->rx.slots;
    size_t h = len < SRPC_HDR_LEN ? len : SRPC_HDR_LEN, d = len - h;
    int trunc = d > rx->data_cap;
    if (h)
        memcpy(srpc_rx_hdr(rx, 0), dgram, h);
    if (d)
        memcpy(srpc_rx_data(rx, 0), dgram + h, trunc ? rx->data_cap : d);
    memset(&rx->src[0], 0, sizeof(rx->src[0]));
    memcpy(&rx->src[0], src, srclen);
    rx->srclen[0] = srclen;
    rx->len[0] = (uint32_t)len;
    rx->trunc[0] = (uint8_t)trunc;
    rx->dev[0] = 0;
    rx->gso[0] = 0;
    srpc_srv_lock(srv);
    process_entry(srv, 0, srpc_now_ns());
    srpc_srv_unlock(srv);
    end_of_burst(srv);
    srpc_rx_unlock(srv);
    return 0;
}

void srpc_engine_run_timers(srpc_server_t *srv, uint64_t now_ns)
{
    srpc_rx_lock(srv);
    srpc_engine_timers_rx(srv, now_ns);
    srpc_rx_unlock(srv);
}
