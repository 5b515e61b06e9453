/* admit.c: a checked datagram's call (see admit.h): the call table's entry made (room made by evicting a rejection or a cached reply), a new call checked against its function (draining, unknown function, sizes, its class by cost, a full queue) and its request queued in the next Tensor Queue element (from host memory or a GPU's), or its partial message started; a known call's segment added, its duplicate dropped, its reply sent again. */
#include <errno.h>
#include <string.h>

#include "core/tunables.h"
#include "core/wire.h"
#include "server/admit.h"
#include "server/callring.h"
#include "server/cost.h"
#include "server/gpu_rx.h"
#include "server/partial.h"

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

void srpc_admit_known_rx(srpc_server_t *srv, uint32_t idx, const srpc_hdr_t *h, uint32_t seg, const uint8_t *data,
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

uint32_t srpc_admit_new_rx(srpc_server_t *srv, const srpc_call_key_t *k, const srpc_hdr_t *h, uint32_t seg,
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
    srpc_timers_soon(srv, now + SRPC_TIMER_PERIOD_US * 1000ull); /* expiry, and unblocking its queue */
    srpc_reasm_add(&srv->ct.e[idx].u.partial, h, seg, data, dlen); /* first segment: cannot fail */
    return CT_NONE;
}
