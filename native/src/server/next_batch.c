/* next_batch.c: the worker's wait for its next batch (srpc_server_next_batch): finishing batches in flight, taking the next one due, receiving inline meanwhile, running native functions' batches inline; and srpc_server_complete_next, one call per batch for a worker loop, whose replies may go out with the next batches'. */
#include <errno.h>
#include <stdio.h>

#include "core/tunables.h"
#include "server/batcher.h"
#include "server/completion.h"
#include "server/reply.h"
#include "server/rx_owner.h"
#include "server/server_state.h"

/* Puts the decision to the caller's policy when more than one function has a batch due: the
 * index in srv->fns of its choice (and *cap), or -1 for the built-in policy. The policy runs with
 * no lock held; the calls it saw stay queued (only this thread takes them). Worker. */
static int ask_policy_w(srpc_server_t *srv, uint64_t now, uint32_t *cap)
{
    srpc_sched_view_t *view = srv->sched_view;
    uint32_t *fi = srv->sched_fi;
    srpc_srv_lock(srv);
    const uint32_t n = srpc_batcher_due_locked(srv, now, view, fi);
    srpc_srv_unlock(srv);
    if (n < 2)
        return -1;
    ST_ADD(srv, sched_asked, 1);
    *cap = 0;
    const int r = srv->sched_fn(srv->sched_ctx, view, n, cap);
    if (r >= 0 && (uint32_t)r < n)
        return (int)fi[r];
    if (r != -1)
        ST_ADD(srv, sched_errors, 1);
    *cap = 0;
    return -1;
}

/* Runs batch b of a native function here and completes it: its replies join those held, which
 * go out when no batch is ready or SRPC_REPLY_HOLD_CALLS are held, so that a burst's replies leave
 * together. While the callback runs the worker counts as away (rx_owner.c), so that the engine
 * thread takes over receiving if it runs longer than rx_takeover_us, as for a Python callback;
 * its time is what the hold counts on for fn's next batch (srpc_reply_hold_check_w). Returns the
 * time the callback returned. Worker. */
static uint64_t run_native_w(srpc_server_t *srv, srpc_fn_t *fn, srpc_batch_t *b)
{
    const int state = atomic_load_explicit(&srv->rx.w_state, memory_order_relaxed);
    const uint64_t t0 = srpc_now_ns();
    atomic_store_explicit(&srv->rx.w_away_since, t0, memory_order_release);
    atomic_store_explicit(&srv->rx.w_state, W_AWAY, memory_order_release);
    const int code = fn->native(fn->native_ctx, srv, b);
    atomic_store_explicit(&srv->rx.w_state, state, memory_order_release);
    const uint64_t t1 = srpc_now_ns();
    fn->away_ns = t1 - t0;
    const int bad = code < 0 || code >= SRPC_E_MAX;
    const char *msg = !code ? NULL : bad ? "the native function returned an invalid code" : "the native function failed";
    if (srpc_completion_complete_w(srv, b, bad ? SRPC_E_INTERNAL : code, msg) != 0 && !fn->native_misused) {
        fn->native_misused = 1; /* it completed or deferred its own batch: not allowed */
        fprintf(stderr, "splitrpc: the native function of func_id %u completed or deferred its own batch "
                        "(srpc_native_fn may only fail calls): its calls' replies are its own doing\n", fn->func_id);
    }
    return t1;
}

int srpc_server_next_batch(srpc_server_t *srv, srpc_batch_t *b, int64_t timeout_us)
{
    if (!srv || !b)
        return -EINVAL;
    SRPC_OWNER_SET(srv->worker);
    const uint64_t start = srpc_now_ns();
    srpc_rx_owner_back_w(srv, start);
    const uint64_t spin_ns = (uint64_t)srv->cfg.spin_us * 1000;
    /* Beyond ~100 days a timeout is as good as none (and start + timeout cannot overflow). */
    const uint64_t deadline = timeout_us < 0 || timeout_us > (INT64_C(1) << 43) ? UINT64_MAX
                                                                               : start + (uint64_t)timeout_us * 1000;
    uint64_t hold = 0;
    unsigned seen_gen = 0; /* ready_gen at the last take: newer calls end a hold early */
    for (;;) {
        if (atomic_load(&srv->stopping)) {
            srpc_reply_hold_flush_w(srv);
            return srpc_rx_owner_leave_w(srv, NULL, 0, -ESHUTDOWN);
        }
        if (srv->inflight)
            srpc_completion_poll_w(srv);
        uint64_t now = srpc_now_ns();
        if (atomic_load_explicit(&srv->n_ready, memory_order_acquire) > 0 &&
            (!hold || now >= hold || atomic_load(&srv->ready_gen) != seen_gen)) {
            /* One call alone: no backlog, and no syscall on the lowest-latency path. Replies kept
             * at the last hand-out: the worker is going through a backlog of quick batches, and
             * the clients waiting for those replies send nothing new before the flush, which
             * comes within 8 replies or about reply_hold_us; receiving now would mostly find
             * nothing (with batches of one call, a syscall per call). Slow batches flush at every
             * hand-out, so they never skip it. */
            if (atomic_load(&srv->n_ready) > 1 && !(srv->held->b.n && srv->held->kept)) {
                srpc_rx_owner_catch_up_w(srv);
                now = srpc_now_ns();
            }
            seen_gen = atomic_load(&srv->ready_gen);
            uint32_t cap = 0;
            const int prefer = srv->sched_fn ? ask_policy_w(srv, now, &cap) : -1;
            srpc_fn_t *fn = NULL;
            srpc_srv_lock(srv);
            const enum srpc_take got = srpc_batcher_take_locked(srv, b, &fn, now, &hold, prefer, cap);
            srpc_srv_unlock(srv);
            switch (got) {
            case SRPC_TAKE_OVERDUE: /* answered DEADLINE here, never handed to the function */
                srpc_completion_complete_w(srv, b, SRPC_E_DEADLINE, "queued longer than the function's deadline");
                continue;
            case SRPC_TAKE_REFUSED: /* each call gets the error it was refused with */
                srpc_completion_complete_w(srv, b, 0, NULL);
                continue;
            case SRPC_TAKE_BATCH:
            case SRPC_TAKE_SATURATED: /* the replies held go now, or with the next batches' */
                srpc_reply_hold_check_w(srv, fn, b, now);
                if (fn->native) { /* run to completion: no hand-out, no other thread */
                    if (run_native_w(srv, fn, b) >= deadline) { /* the caller's timeout holds under native load too */
                        srpc_reply_hold_flush_w(srv);
                        return srpc_rx_owner_leave_w(srv, NULL, 0, -ETIMEDOUT);
                    }
                    continue;
                }
                return srpc_rx_owner_leave_w(srv, fn, got == SRPC_TAKE_SATURATED, 0);
            case SRPC_TAKE_NONE:
                break;
            }
        }
        srpc_reply_hold_flush_w(srv); /* no batch to hand out now: nothing to hold the replies for */
        if (now >= deadline)
            return srpc_rx_owner_leave_w(srv, NULL, 0, -ETIMEDOUT);
        /* A GPU function's batches in flight finish when the GPU writes a done word, which wakes
         * nobody: poll. So is a transport with nothing to sleep on. A host function's are
         * finished by srpc_server_finish, which wakes us; a word written directly is looked for
         * every SRPC_DEFER_CHECK_US. */
        const int spin = srv->cfg.wait_mode == SRPC_WAIT_POLL || srv->inflight_gpu || srv->tp->wait_fd < 0 ||
                         (srv->cfg.wait_mode == SRPC_WAIT_ADAPTIVE && now - start < spin_ns);
        uint64_t until = hold && hold < deadline ? hold : deadline;
        if (srv->inflight && until > now + SRPC_DEFER_CHECK_US * 1000ull)
            until = now + SRPC_DEFER_CHECK_US * 1000ull;
        srpc_rx_owner_wait_w(srv, spin, now, until);
        if (hold && srpc_now_ns() >= hold)
            hold = 0;
    }
}

int srpc_server_complete_next(srpc_server_t *srv, srpc_batch_t *b, int status, const char *msg, int64_t timeout_us)
{
    int r = srpc_completion_complete_w(srv, b, status, msg); /* its replies held: next_batch sends them */
    if (r) {
        if (srv && srv->held)
            srpc_reply_hold_flush_w(srv); /* a worker loop that stops here strands none */
        return r;
    }
    if (!atomic_load_explicit(&srv->n_ready, memory_order_relaxed))
        srpc_reply_hold_flush_w(srv); /* no batch ready: they go now, before next_batch's own work */
    return srpc_server_next_batch(srv, b, timeout_us);
}
