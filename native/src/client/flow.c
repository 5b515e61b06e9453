/* flow.c: a client's flow control: the window (calls held back while it is full, sent oldest first as room is made) and the calls failed early rather than left to time out (a draining server, an unreachable one). */
#include <stdio.h>
#include <string.h>

#include "client/client_state.h"

/* One whose deadline has passed finishes with SRPC_E_TIMEOUT unsent. Sends under the lock (the
 * transport's send is thread-safe; the lock keeps the order). */
void cl_send_waiting(srpc_client_t *c)
{
    SRPC_CL_ASSERT_LOCKED(c);
    while (c->whead && !cl_window_full(c) && !c->shut) {
        cl_call_t *k = c->whead;
        cl_window_unlink(c, k);
        uint64_t now = srpc_now_ns();
        if (now >= k->deadline_ns) {
            cl_finish_local(c, k, SRPC_E_TIMEOUT, "the call's deadline passed while it waited for the client's window");
            continue;
        }
        k->in_window = 1;
        c->outstanding++;
        k->sent_ns = now;
        k->due_ns = c->cfg.retries ? now + cl_rto_ns(c, k->func_id) : UINT64_MAX;
        cl_note_due(c, k->due_ns);
        if (cl_send_request(c, k) < 0 && !c->cfg.retries && !k->done)
            cl_finish_local(c, k, SRPC_E_SEND, "the request could not be sent");
    }
}

/* The server takes no new call: the calls still waiting for the window (never sent) fail now with
 * SRPC_E_DRAINING, so their callers can send them elsewhere at once instead of after the server
 * has gone. */
void cl_fail_unsent_draining(srpc_client_t *c)
{
    SRPC_CL_ASSERT_LOCKED(c);
    while (c->whead) {
        c->st.draining_unsent++;
        cl_finish_local(c, c->whead, SRPC_E_DRAINING, "not sent: the server is draining (it answered DRAINING to an "
                                                     "earlier call); safe to send elsewhere");
    }
}

/* Every unfinished flow call that does not wait for ready fails with SRPC_E_UNAVAILABLE, sent or
 * still waiting for the window. A load run's calls (not flow calls) keep their deadlines. Rare,
 * so the whole table is walked. */
void cl_fail_unreachable(srpc_client_t *c, int err)
{
    SRPC_CL_ASSERT_LOCKED(c);
    char msg[SRPC_CLIENT_MSG_MAX];
    snprintf(msg, sizeof(msg), "the server %s port %u is unreachable (%s)", c->host, (unsigned)c->cfg.port,
             strerror(err));
    c->st.unreachable++;
    for (unsigned b = 0; b < SRPC_CL_NBUCKETS; b++)
        for (cl_call_t *k = c->buckets[b]; k; k = k->hnext)
            if (!k->done && k->flow && !k->wait_ready) {
                cl_finish_local(c, k, SRPC_E_UNAVAILABLE, msg);
                c->st.unavailable++;
            }
}
