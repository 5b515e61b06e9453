/* batcher.h: which ready calls form the next batch: functions visited round-robin (those with max_inflight batches out skipped), up to max_batch consecutive calls, held back up to max_delay_us to fill, bounded by max_batch_cost; calls past their deadline and refused calls (a failed copy from GPU memory, a bad cost key) set apart to be answered, not run. */
#ifndef SRPC_BATCHER_H
#define SRPC_BATCHER_H

#include <stdint.h>

#include "server/server_state.h"

/* What srpc_batcher_take_locked found. */
enum srpc_take {
    SRPC_TAKE_NONE = 0,  /* no batch is due (*hold_until_ns: the earliest held one, or 0) */
    SRPC_TAKE_BATCH,     /* a batch to run */
    SRPC_TAKE_SATURATED, /* a batch to run, and its function's queue is still at least half full */
    SRPC_TAKE_OVERDUE,   /* calls past their function's deadline: complete them with DEADLINE */
    SRPC_TAKE_REFUSED    /* refused calls (srpc_ring_refuse_locked): complete them with status 0,
                            which sends each its own error */
};

/* The functions with a batch due at now (none overdue: 0 then), as the caller's policy sees them:
 * up to SRPC_MAX_FUNCS views, and in fi[] each one's index in srv->fns. Lock held, worker. */
uint32_t srpc_batcher_due_locked(srpc_server_t *srv, uint64_t now, srpc_sched_view_t *view, uint32_t *fi);

/* Takes the next batch that is due at now into *b (its function in *fn). prefer: the index in
 * srv->fns of the function the caller's policy chose (-1: the built-in policy decides), cap: at
 * most this many calls (0: no cap). Lock held, worker. */
enum srpc_take srpc_batcher_take_locked(srpc_server_t *srv, srpc_batch_t *b, srpc_fn_t **fn, uint64_t now,
                                        uint64_t *hold_until_ns, int prefer, uint32_t cap);

#endif /* SRPC_BATCHER_H */
