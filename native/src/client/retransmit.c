/* retransmit.c: a client's timers: requests sent again when their retransmission timeout (RFC 6298, per function, with backoff) passes, a try after a BUSY answer (backoff with jitter), and version 5's handshake and session timers, all from one next-due time. */
#include "client/client_state.h"

void cl_retransmit_due(srpc_client_t *c)
{
    SRPC_CL_ASSERT_LOCKED(c);
    uint64_t now = srpc_now_ns();
    if (now < c->next_due || c->shut)
        return;
    uint64_t settle = UINT64_MAX; /* version 5: a session a NO_SESSION named while young ends now */
    if (c->v5) {
        int killed = 0;
        settle = srpc_cl_v5_settle(c->v5, now, &killed);
        if (killed && !c->v5->hs_on)
            cl_v5_start(c, now);
    }
    if (c->v5 && c->v5->hs_on)
        cl_v5_tick(c, now);
    uint64_t next = c->v5 && c->v5->hs_on ? c->v5->hs_due_ns : UINT64_MAX;
    if (settle < next)
        next = settle;
    const uint64_t hi = (uint64_t)c->cfg.rto_max_us * 1000;
    for (int b = 0; b < SRPC_CL_NBUCKETS; b++)
        for (cl_call_t *k = c->buckets[b]; k; k = k->hnext) {
            if (k->done || !k->req || k->due_ns == UINT64_MAX)
                continue;
            if (k->due_ns <= now) {
                if (k->busy_wait) { /* its backoff after BUSY is over: a fresh attempt */
                    k->busy_wait = 0;
                    c->st.busy_retries++;
                    cl_send_request(c, k);
                    k->due_ns = c->cfg.retries && k->deadline_ns > now ? now + cl_rto_ns(c, k->func_id) : UINT64_MAX;
                } else if (k->attempts >= c->cfg.retries || now >= k->deadline_ns) {
                    k->due_ns = UINT64_MAX; /* given up: the caller's timeout decides */
                    continue;
                } else {
                    const uint64_t was = k->sess; /* version 5: the session it was sent under (0: none yet) */
                    cl_send_request(c, k); /* a lost resend is retried */
                    if (c->v5 && !k->sess) { /* no session to send under: nothing went, and no try is spent;
                                                call_auth.c sends it (and arms this) once there is */
                        k->resent |= was != 0; /* an answer may come to the send under the old one */
                        k->due_ns = UINT64_MAX;
                        continue;
                    }
                    k->attempts++;
                    c->st.retransmits++;
                    uint64_t wait = k->attempts < 20 ? cl_rto_ns(c, k->func_id) << k->attempts : hi;
                    k->due_ns = now + (wait < hi ? wait : hi);
                }
            }
            if (k->due_ns < next)
                next = k->due_ns;
        }
    if (c->v5 && c->v5->hs_on && c->v5->hs_due_ns < next) /* (one a send above may have started) */
        next = c->v5->hs_due_ns;
    c->next_due = next;
}

int cl_busy_retry(srpc_client_t *c, cl_call_t *k)
{
    SRPC_CL_ASSERT_LOCKED(c);
    if (!k->flow || !c->cfg.busy_retry || !k->req)
        return 0;
    const uint64_t hi = (uint64_t)c->cfg.rto_max_us * 1000;
    uint64_t base = (uint64_t)c->cfg.busy_backoff_us * 1000;
    uint64_t wait = k->busy_n < 20 ? base << k->busy_n : hi;
    if (wait > hi)
        wait = hi;
    c->rnd ^= c->rnd << 13; /* xorshift64: jitter in [wait / 2, wait] */
    c->rnd ^= c->rnd >> 7;
    c->rnd ^= c->rnd << 17;
    wait = wait / 2 + c->rnd % (wait / 2 + 1);
    uint64_t now = srpc_now_ns();
    if (now + wait >= k->deadline_ns)
        return 0;
    k->busy_n++;
    k->busy_wait = 1;
    k->due_ns = now + wait;
    cl_note_due(c, k->due_ns);
    return 1;
}
