/* callring.c: the Inference Monitor (see callring.h): ring counters and call states of every function's Tensor Queues. */
#include "server/callring.h"

#include <stdlib.h>
#include <string.h>

static srpc_call_t *call_at(const srpc_fn_t *fn, uint64_t seq) { return &fn->calls[seq % fn->capacity]; }

/* srv->queued_set holds fn exactly while it has settled calls not yet taken. After every move of
 * taken or ready_end. Lock held. */
static void mark(srpc_server_t *srv, const srpc_fn_t *fn)
{
    srpc_bitset_put(srv->queued_set, fn->fi, fn->taken < fn->ready_end);
}

/* Recycles VOID elements the counters have reached. worker = 1 on the worker thread, which
 * alone may look at the elements it has been handed. Lock held. */
static void retire_voids(srpc_fn_t *fn, int worker)
{
    /* Elements in [done, taken) belong to the worker: VOID ones there were skipped by
     * srpc_ring_available_locked and are recycled when the batches before them are. */
    while (worker && fn->done < fn->taken && call_at(fn, fn->done)->state == CALL_VOID)
        call_at(fn, fn->done++)->state = CALL_READY;
    /* Nothing handed out: a VOID element next in line is taken and recycled at once. */
    while (fn->done == fn->taken && fn->taken < fn->ready_end && call_at(fn, fn->taken)->state == CALL_VOID) {
        call_at(fn, fn->taken)->state = CALL_READY;
        fn->done++;
        fn->taken++;
    }
}

/* A ring left empty by the recycling of its last batch starts its next call in the element of
 * that batch's last call rather than in the one after it: every counter moves on by
 * period - 1, where period is how many elements on every Tensor Queue of the function is at the
 * same address again (at least capacity: element seq lies at (seq * size) modulo the ring's
 * bytes), so the rules of srpc_fn_t still hold and the next call's elements and views are those
 * of the last one (none moves when the period is too long to know, fn->period 0).
 * A function that sees a call now and then (many functions with the load spread over them, or
 * one call at a time) then keeps touching the same element and views, which stay in cache,
 * instead of the next element of its ring each time (with 1,024 functions at the default sizes,
 * 800 MiB touched in turn). A batch of several calls still moves on by all but one, so batches
 * go round the ring and across its end as before. A reply held from that element is sent before
 * a batch reusing it is handed out (srpc_reply_hold_check_w). Lock held, worker. */
static void rewind_if_idle(srpc_fn_t *fn)
{
    if (fn->head != fn->done || fn->head == 0 || fn->period == 0)
        return;
    const uint64_t k = fn->period - 1;
    fn->head += k;
    fn->ready_end += k;
    fn->taken += k;
    fn->done += k;
}

/* Moves ready_end over the settled elements that follow it (RX_COMPLETE or VOID) and makes
 * the RX_COMPLETE ones available to the worker; returns how many. Lock held. */
static unsigned settle(srpc_server_t *srv, srpc_fn_t *fn)
{
    unsigned ready = 0;
    for (; fn->ready_end < fn->head; fn->ready_end++) {
        uint8_t st = call_at(fn, fn->ready_end)->state;
        if (st == CALL_RX_COMPLETE)
            ready++;
        else if (st != CALL_VOID)
            break; /* RESERVED: later calls wait, so batches keep arrival order */
    }
    retire_voids(fn, 0);
    mark(srv, fn);
    if (ready)
        atomic_fetch_add(&srv->n_ready, ready);
    return ready;
}

uint64_t srpc_ring_claim_locked(srpc_server_t *srv, srpc_fn_t *fn)
{
    SRPC_ASSERT_LOCKED(srv);
    return fn->head++;
}

uint64_t srpc_ring_reserve_locked(srpc_server_t *srv, srpc_fn_t *fn, uint32_t ct_idx, uint64_t now)
{
    SRPC_ASSERT_LOCKED(srv);
    uint64_t seq = fn->head++;
    srpc_call_t *c = call_at(fn, seq);
    c->state = CALL_RESERVED;
    c->dev_in = SRPC_DEV_IN_HOST;
    c->refused = 0; /* also if it ends VOID: never a stale refusal */
    c->ct_idx = ct_idx;
    c->rx_ns = now;
    fn->reserved++;
    return seq;
}

unsigned srpc_ring_fill_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t seq, uint32_t ct_idx, uint32_t len,
                               int dev_in, uint64_t now)
{
    SRPC_ASSERT_LOCKED(srv);
    srpc_call_t *c = call_at(fn, seq);
    if (c->state == CALL_RESERVED)
        fn->reserved--;
    c->state = CALL_RX_COMPLETE;
    c->dev_in = (uint8_t)dev_in;
    c->refused = 0;
    c->ct_idx = ct_idx;
    c->in_len = len;
    c->rx_ns = now;
    return settle(srv, fn);
}

unsigned srpc_ring_void_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t seq)
{
    SRPC_ASSERT_LOCKED(srv);
    srpc_call_t *c = call_at(fn, seq);
    if (c->state == CALL_RESERVED)
        fn->reserved--;
    c->state = CALL_VOID;
    return settle(srv, fn);
}

void srpc_ring_refuse_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t seq, int code, const char *msg)
{
    SRPC_ASSERT_LOCKED(srv);
    srpc_call_t *c = call_at(fn, seq);
    if (c->refused)
        return;
    c->refused = 1;
    c->fail_code = (uint16_t)code;
    free(c->fail_msg);
    c->fail_msg = msg ? strndup(msg, SRPC_ERRMSG_MAX) : NULL; /* NULL (no text) if out of memory */
    fn->refused++;
}

int srpc_ring_blocked_by_reserved_locked(srpc_server_t *srv, const srpc_fn_t *fn, uint64_t now, uint64_t min_age_ns,
                                         uint64_t *seq, uint32_t *ct_idx)
{
    SRPC_ASSERT_LOCKED(srv);
    if (!fn->reserved || fn->ready_end >= fn->head)
        return 0;
    const srpc_call_t *c = call_at(fn, fn->ready_end);
    if (c->state != CALL_RESERVED || now - c->rx_ns < min_age_ns)
        return 0;
    for (uint64_t s = fn->ready_end + 1; s < fn->head; s++)
        if (call_at(fn, s)->state == CALL_RX_COMPLETE) {
            *seq = fn->ready_end;
            *ct_idx = c->ct_idx;
            return 1;
        }
    return 0; /* nobody waits behind it */
}

uint32_t srpc_ring_available_locked(srpc_server_t *srv, srpc_fn_t *fn)
{
    SRPC_ASSERT_LOCKED(srv);
    retire_voids(fn, 1);
    while (fn->taken < fn->ready_end && call_at(fn, fn->taken)->state == CALL_VOID)
        fn->taken++; /* a batch is out: recycled when it completes */
    mark(srv, fn);
    uint32_t n = 0;
    while (n < fn->max_batch && fn->taken + n < fn->ready_end && call_at(fn, fn->taken + n)->state == CALL_RX_COMPLETE)
        n++;
    return n;
}

void srpc_ring_take_locked(srpc_server_t *srv, srpc_fn_t *fn, uint32_t count)
{
    SRPC_ASSERT_LOCKED(srv);
    if (unlikely(fn->refused))
        for (uint32_t i = 0; i < count; i++)
            fn->refused -= call_at(fn, fn->taken + i)->refused;
    fn->taken += count;
    mark(srv, fn);
    atomic_fetch_sub(&srv->n_ready, count);
}

int srpc_ring_oldest_out_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t *first)
{
    SRPC_ASSERT_LOCKED(srv);
    retire_voids(fn, 1);
    mark(srv, fn);
    *first = fn->done;
    return fn->done < fn->taken;
}

void srpc_ring_recycle_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t first, uint32_t n)
{
    SRPC_ASSERT_LOCKED(srv);
    assert(first == fn->done && n <= fn->taken - fn->done); /* batches finish oldest first */
    for (uint32_t i = 0; i < n; i++)
        call_at(fn, first + i)->state = CALL_READY;
    fn->done += n;
    retire_voids(fn, 1);
    rewind_if_idle(fn);
    mark(srv, fn);
}
