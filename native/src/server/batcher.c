/* batcher.c: which ready calls form the next batch (see batcher.h). */
#include "server/batcher.h"

#include <string.h>

#include "server/callring.h"
#include "server/sched.h"

/* The calls at the head of fn's queue that waited longer than its deadline (at most max). */
static uint32_t overdue(const srpc_fn_t *fn, uint64_t avail, uint64_t now)
{
    uint32_t n = 0;
    while (fn->deadline_ns && n < avail && n < fn->max_batch &&
           now - fn->calls[(fn->taken + n) % fn->capacity].rx_ns > fn->deadline_ns)
        n++;
    return n;
}

/* Refused calls (a failed copy from GPU memory, a bad cost key) are never run: a batch stops
 * before the first of them, and a batch of them alone is answered with each call's error.
 * Returns how many of the count calls from the head of fn's queue to take, and sets *refused
 * when they are such calls. */
static uint32_t cut_at_refused(const srpc_fn_t *fn, uint32_t count, int *refused)
{
    *refused = 0;
    if (__builtin_expect(fn->refused == 0, 1))
        return count;
    const uint8_t head = fn->calls[fn->taken % fn->capacity].refused;
    uint32_t n = 1;
    while (n < count && fn->calls[(fn->taken + n) % fn->capacity].refused == head)
        n++;
    *refused = head;
    return n;
}

/* A batch's calls cost at most max_batch_cost together (the first call alone may cost more).
 * Returns how many of the count calls from the head of fn's queue to take. */
static uint32_t cut_at_cost(const srpc_fn_t *fn, uint32_t count)
{
    if (!fn->max_batch_cost)
        return count;
    uint64_t sum = fn->calls[fn->taken % fn->capacity].cost;
    uint32_t n = 1;
    while (n < count && (sum += fn->calls[(fn->taken + n) % fn->capacity].cost) <= fn->max_batch_cost)
        n++;
    return n;
}

/* Counts the queue delay of the count calls from element first, whose batch starts now, in the
 * function's counters (the server's are their sum: srpc_server_stats). */
static void record_queue_delay(srpc_fn_t *fn, uint64_t first, uint32_t count, uint64_t now)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint64_t rx = fn->calls[(first + i) % fn->capacity].rx_ns;
        uint64_t d = now > rx ? now - rx : 0;
        sum += d;
        FN_ADD(fn, queue_delay_hist[srpc_delay_bucket(d)], 1);
    }
    FN_ADD(fn, queue_delay_sum_ns, sum);
}

/* Fills *b with the count calls from fn->taken: pointers into every Tensor Queue (and device TQ),
 * the raw lengths, the ring position; marks the batch open on its first record. */
static void describe(srpc_fn_t *fn, srpc_batch_t *b, uint32_t count)
{
    memset(b, 0, sizeof(*b));
    b->func_id = fn->func_id;
    b->aux_class = fn->aux_class;
    b->count = count;
    b->first_seq = fn->taken;
    b->gpu_device = fn->gpu_device;
    for (uint32_t k = 0; k < fn->n_in; k++) {
        b->in[k] = srpc_tq_elem(fn->in_tq[k], fn->taken);
        if (fn->in_dtq[k])
            b->din[k] = srpc_dtq_elem(fn->in_dtq[k], fn->taken);
    }
    for (uint32_t k = 0; k < fn->n_out; k++) {
        b->out[k] = srpc_tq_elem(fn->out_tq[k], fn->taken);
        if (fn->out_dtq[k])
            b->dout[k] = srpc_dtq_elem(fn->out_dtq[k], fn->taken);
    }
    srpc_call_t *c0 = &fn->calls[fn->taken % fn->capacity];
    c0->batch_seq = fn->taken;
    c0->batch_n = count;
    c0->batch_open = 1;
    __atomic_store_n(&fn->done_words[fn->taken % fn->capacity], 0, __ATOMIC_RELAXED);
    if (fn->batch_cost) {
        for (uint32_t i = 0; i < count; i++)
            fn->batch_cost[i] = fn->calls[(fn->taken + i) % fn->capacity].cost;
        b->cost = fn->batch_cost;
    }
    if (fn->raw) {
        for (uint32_t i = 0; i < count; i++) {
            fn->batch_in_len[i] = fn->calls[(fn->taken + i) % fn->capacity].in_len;
            fn->batch_out_len[i] = 0;
        }
        b->in_len = fn->batch_in_len;
        b->out_len = fn->batch_out_len;
    }
    b->pos = fn->period ? fn->taken % fn->period : UINT64_MAX;
}

/* Hands the next count calls of fn out as batch *b (refused: they are such calls). */
static enum srpc_take take(srpc_server_t *srv, srpc_fn_t *fn, uint32_t fi, srpc_batch_t *b, uint64_t avail,
                           uint32_t late, uint64_t rank, srpc_fn_t **fn_out, uint64_t now, uint32_t cap)
{
    int refused;
    if (cap && avail > cap)
        avail = cap;
    uint32_t count = cut_at_refused(fn, (uint32_t)(avail < fn->max_batch ? avail : fn->max_batch), &refused);
    if (!refused)
        count = cut_at_cost(fn, count);
    describe(fn, b, count);
    srpc_ring_take_locked(srv, fn, count);
    srv->rr = fi + 1;
    *fn_out = fn;
    if (refused)
        return SRPC_TAKE_REFUSED;
    if (late)
        return SRPC_TAKE_OVERDUE;
    srpc_sched_taken_locked(srv, fn, rank, b);
    ST_ADD(srv, batch_calls, count); /* batches and the histograms: per function, summed on read */
    FN_ADD(fn, batches, 1);
    FN_ADD(fn, batch_calls, count);
    FN_ADD(fn, batch_hist[count < SRPC_BATCH_HIST ? count : SRPC_BATCH_HIST - 1], 1);
    record_queue_delay(fn, b->first_seq, count, now);
    return fn->head - fn->taken >= (fn->capacity + 1) / 2 ? SRPC_TAKE_SATURATED : SRPC_TAKE_BATCH;
}

/* Whether fn can hand out a batch at all now: 0 when its executor is at its limit or nothing is
 * ready; else the ready calls (at most max_batch), with *late the overdue ones among them. */
static uint64_t ready_now(srpc_server_t *srv, srpc_fn_t *fn, uint64_t now, uint32_t *late)
{
    *late = 0;
    if (fn->max_inflight && fn->inflight >= fn->max_inflight)
        return 0; /* its executor is busy: its calls wait, and fill its next batch */
    uint64_t avail = srpc_ring_available_locked(srv, fn);
    if (avail)
        *late = overdue(fn, avail, now);
    return avail;
}

/* Whether fn's batch is held back to fill (max_delay_us) at now; sets *hold to the earliest due. */
static int held(const srpc_fn_t *fn, uint64_t avail, uint64_t now, uint64_t *hold)
{
    if (avail >= fn->max_batch || !fn->max_delay_us)
        return 0;
    uint64_t due = fn->calls[fn->taken % fn->capacity].rx_ns + (uint64_t)fn->max_delay_us * 1000;
    if (now >= due)
        return 0;
    if (!*hold || due < *hold)
        *hold = due;
    return 1;
}

uint32_t srpc_batcher_due_locked(srpc_server_t *srv, uint64_t now, srpc_sched_view_t *view, uint32_t *fi)
{
    SRPC_ASSERT_LOCKED(srv);
    uint32_t n = 0;
    uint64_t hold = 0, looks = 0;
    SRPC_BITSET_FOR_FROM(srv->queued_set, srv->nfns, 0, j) { /* the queues with calls: no other can be due */
        srpc_fn_t *fn = srv->fns[j];
        uint32_t late;
        looks++;
        uint64_t avail = ready_now(srv, fn, now, &late);
        if (late) {
            ST_ADD(srv, sched_looks, looks);
            return 0; /* answered first, whatever a policy says */
        }
        if (!avail || held(fn, avail, now, &hold))
            continue;
        srpc_sched_view_t *v = &view[n];
        *v = (srpc_sched_view_t){.func_id = fn->func_id, .aux_class = fn->aux_class, .queued = (uint32_t)(fn->ready_end - fn->taken),
                                 .inflight = fn->inflight, .priority = fn->priority, .weight = fn->weight,
                                 .deadline_ns = fn->deadline_ns};
        const uint64_t rx = fn->calls[fn->taken % fn->capacity].rx_ns;
        v->oldest_wait_ns = now > rx ? now - rx : 0;
        for (uint64_t s = fn->taken; fn->cost_from != SRPC_COST_NONE && s < fn->ready_end; s++)
            v->queued_cost += fn->calls[s % fn->capacity].cost;
        fi[n++] = j;
    }
    ST_ADD(srv, sched_looks, looks);
    return n;
}

enum srpc_take srpc_batcher_take_locked(srpc_server_t *srv, srpc_batch_t *b, srpc_fn_t **fn_out, uint64_t now,
                                        uint64_t *hold_until_ns, int prefer, uint32_t cap)
{
    SRPC_ASSERT_LOCKED(srv);
    *hold_until_ns = 0;
    if (prefer >= 0 && (uint32_t)prefer < srv->nfns) { /* the caller's policy chose it just now */
        srpc_fn_t *fn = srv->fns[prefer];
        uint32_t late;
        uint64_t avail = ready_now(srv, fn, now, &late), ignored = 0;
        if (avail && !late && !held(fn, avail, now, &ignored))
            return take(srv, fn, (uint32_t)prefer, b, avail, 0, srpc_sched_rank_locked(srv, fn), fn_out, now,
                        cap);
    }
    const int rr = srv->cfg.sched == SRPC_SCHED_RR;
    srpc_fn_t *best = NULL;
    uint32_t best_fi = 0;
    uint64_t best_avail = 0, best_rank = 0, looks = 0;
    enum srpc_take got = SRPC_TAKE_NONE;
    /* The queues with calls, in turn from the round-robin cursor: no other can have a batch. */
    SRPC_BITSET_FOR_FROM(srv->queued_set, srv->nfns, srv->nfns ? srv->rr % srv->nfns : 0, fi) {
        srpc_fn_t *fn = srv->fns[fi];
        uint32_t late;
        looks++;
        uint64_t avail = ready_now(srv, fn, now, &late);
        if (avail == 0)
            continue;
        if (late) { /* a batch of the overdue calls alone, answered at once whatever the policy */
            got = take(srv, fn, fi, b, late, late, 0, fn_out, now, 0);
            goto out;
        }
        if (held(fn, avail, now, hold_until_ns))
            continue;
        if (rr) { /* the next in turn: no ranking */
            got = take(srv, fn, fi, b, avail, 0, 0, fn_out, now, 0);
            goto out;
        }
        const uint64_t rank = srpc_sched_rank_locked(srv, fn);
        if (!best || rank < best_rank) {
            best = fn;
            best_fi = fi;
            best_avail = avail;
            best_rank = rank;
        }
    }
    if (best)
        got = take(srv, best, best_fi, b, best_avail, 0, best_rank, fn_out, now, 0);
out:
    ST_ADD(srv, sched_looks, looks);
    return got;
}
