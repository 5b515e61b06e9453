/* callring.h: the Inference Monitor: the only code that moves a function's ring counters (head, ready_end, taken, done) and its calls' states, for the engine that fills elements and the worker that takes and recycles them. */
#ifndef SRPC_CALLRING_H
#define SRPC_CALLRING_H

#include <stdint.h>

#include "core/wait.h"
#include "server/server_state.h"

/* ---------------------------------------------------------------- engine side (lock held) */

/* Whether every element is in use (a request now gets BUSY). */
static inline int srpc_ring_full(const srpc_fn_t *fn) { return fn->head - fn->done >= fn->capacity; }

/* The element the next claim or reservation gets. */
static inline uint64_t srpc_ring_next(const srpc_fn_t *fn) { return fn->head; }
/* The next element, claimed to be filled at once (srpc_ring_fill_locked); the caller checked
 * srpc_ring_full. */
uint64_t srpc_ring_claim_locked(srpc_server_t *srv, srpc_fn_t *fn);
/* The next element, reserved for a multi-segment request reassembled in place (RESERVED): later
 * elements wait behind it. ct_idx: its call; now: since when. */
uint64_t srpc_ring_reserve_locked(srpc_server_t *srv, srpc_fn_t *fn, uint32_t ct_idx, uint64_t now);
/* Element seq (claimed, or reserved) now holds its whole request of len bytes (dev_in: where):
 * RX_COMPLETE, and with it every settled element behind it becomes ready. Returns how many
 * calls became ready (the caller wakes the worker: srpc_ring_notify). */
unsigned srpc_ring_fill_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t seq, uint32_t ct_idx, uint32_t len,
                               int dev_in, uint64_t now);
/* A reserved element whose request will never complete: VOID, skipped and recycled. Returns
 * how many calls became ready behind it. */
unsigned srpc_ring_void_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t seq);
/* Refuses the call of element seq (RX_COMPLETE): it is never run, and is answered ERROR code
 * with msg (may be NULL) as text when its turn comes (its copy from GPU memory failed, a bad
 * cost key). The first refusal of a call stands. */
void srpc_ring_refuse_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t seq, int code, const char *msg);
/* The reserved element that holds fn's queue back: 1 with *seq and *ct_idx when the first
 * element not yet settled is RESERVED since min_age_ns before now and a call behind it is
 * complete, else 0. */
int srpc_ring_blocked_by_reserved_locked(srpc_server_t *srv, const srpc_fn_t *fn, uint64_t now, uint64_t min_age_ns,
                                         uint64_t *seq, uint32_t *ct_idx);

/* Wakes the worker when calls became ready. Any thread. */
static inline void srpc_ring_notify(srpc_server_t *srv)
{
    atomic_fetch_add(&srv->ready_gen, 1);
    if (atomic_load(&srv->worker_sleeping))
        srpc_futex_wake(&srv->ready_gen);
}

/* ---------------------------------------------------------------- worker side */

/* Calls ready to hand over from fn->taken on (at most max_batch, RX_COMPLETE and consecutive),
 * after skipping VOID elements. Lock held, worker thread. */
uint32_t srpc_ring_available_locked(srpc_server_t *srv, srpc_fn_t *fn);
/* Hands the count calls from fn->taken to the worker. Lock held, worker thread. */
void srpc_ring_take_locked(srpc_server_t *srv, srpc_fn_t *fn, uint32_t count);
/* The oldest element handed out and not yet recycled: 1 with *first, else 0 (nothing out).
 * Lock held, worker thread. */
int srpc_ring_oldest_out_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t *first);
/* The n calls from element first (the oldest handed out) were answered: recycled. Lock held,
 * worker thread. */
void srpc_ring_recycle_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t first, uint32_t n);

/* A handed-out call's work is done, then its reply sent (worker thread, no lock: elements in
 * [done, taken) are the worker's). */
static inline void srpc_call_work_complete_w(srpc_call_t *c) { c->state = CALL_WORK_COMPLETE; }
static inline void srpc_call_tx_complete_w(srpc_call_t *c, int code, uint32_t len)
{
    c->state = CALL_TX_COMPLETE;
    c->code = (uint16_t)code;
    c->out_len = len;
}

#endif /* SRPC_CALLRING_H */
