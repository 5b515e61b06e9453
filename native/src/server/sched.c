/* sched.c: the scheduler seam (see sched.h). */
#include "server/sched.h"

#include "core/tunables.h"

const char *srpc_sched_name(int policy)
{
    static const char *const names[SRPC_SCHED_MAX] = {
        [SRPC_SCHED_RR] = "rr", [SRPC_SCHED_PRIORITY] = "priority", [SRPC_SCHED_FAIR] = "fair", [SRPC_SCHED_EDF] = "edf"};
    return policy >= 0 && policy < SRPC_SCHED_MAX ? names[policy] : NULL;
}

uint64_t srpc_sched_rank_locked(const srpc_server_t *srv, const srpc_fn_t *fn)
{
    SRPC_ASSERT_LOCKED(srv);
    switch (srv->cfg.sched) {
    case SRPC_SCHED_PRIORITY: /* the highest priority first */
        return UINT32_MAX - (uint64_t)fn->priority;
    case SRPC_SCHED_FAIR: { /* the least work done per unit of weight; a function that was idle
                               starts from the clock, not from its old credit */
        return fn->vtime > srv->vclock ? fn->vtime : srv->vclock;
    }
    case SRPC_SCHED_EDF: { /* the oldest call's deadline, earliest first */
        const uint64_t rx = fn->calls[fn->taken % fn->capacity].rx_ns;
        return rx + (fn->deadline_ns ? fn->deadline_ns : SRPC_EDF_NO_DEADLINE_US * 1000ull);
    }
    default:
        return 0;
    }
}

void srpc_sched_taken_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t rank, const srpc_batch_t *b)
{
    SRPC_ASSERT_LOCKED(srv);
    if (srv->cfg.sched != SRPC_SCHED_FAIR)
        return;
    /* Work is the batch's admission cost where the function has one, else its count of calls. */
    uint64_t work = 0;
    if (b->cost)
        for (uint32_t i = 0; i < b->count; i++)
            work += b->cost[i];
    else
        work = b->count;
    srv->vclock = rank;
    fn->vtime = rank + (work ? work : 1) * SRPC_FAIR_SCALE / (fn->weight ? fn->weight : 1);
}
