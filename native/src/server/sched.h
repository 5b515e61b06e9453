/* sched.h: the scheduler seam: among the functions with a batch due, which one the worker takes next: round robin (the default: work-conserving, every function in turn), strict priority, weighted fair share of the work done, or earliest deadline first. */
#ifndef SRPC_SCHED_H
#define SRPC_SCHED_H

#include <stdint.h>

#include "server/server_state.h"

/* The rank of fn's due batch under the server's policy: the batcher takes the function of the
 * lowest rank, the first in round-robin order among equals (under SRPC_SCHED_RR every rank is
 * 0, so that is the next one in turn). Lock held, worker. */
uint64_t srpc_sched_rank_locked(const srpc_server_t *srv, const srpc_fn_t *fn);

/* Batch b of fn was just taken (its rank was rank; b->cost holds its calls' admission costs
 * where fn has them): the fair-share clocks move on. Lock held, worker. */
void srpc_sched_taken_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t rank, const srpc_batch_t *b);

#endif /* SRPC_SCHED_H */
