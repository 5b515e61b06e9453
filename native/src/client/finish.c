/* finish.c: a call's end: its outcome and reply recorded, a round-trip sample taken when it is one (Karn), its place in the window given back, and its report to its completion queue; and freeing a call. */
#include <stdlib.h>
#include <string.h>

#include "client/client_state.h"

void cl_call_free(cl_call_t *k)
{
    if (k->reasm_active)
        srpc_reasm_free(&k->reasm, NULL);
    free(k->reply);
    if (!k->req_borrowed)
        free(k->req);
    free(k);
}

uint8_t *cl_dup_bytes(const uint8_t *p, uint32_t n)
{
    uint8_t *d = malloc(n ? n : 1);
    if (d && n)
        memcpy(d, p, n);
    return d;
}

/* RFC 6298 §2 with one reply's round-trip time, for its function. Lock held. */
static void rtt_sample(srpc_client_t *c, uint16_t func_id, uint64_t r)
{
    rtt_est_t *e = &c->rtt[func_id % SRPC_CL_RTT_SLOTS];
    c->last_func = func_id;
    if (e->func_plus1 != (uint32_t)func_id + 1) { /* its first sample (or the slot's new owner) */
        *e = (rtt_est_t){.func_plus1 = (uint32_t)func_id + 1, .srtt_ns = r ? r : 1, .rttvar_ns = r / 2};
        return;
    }
    uint64_t d = e->srtt_ns > r ? e->srtt_ns - r : r - e->srtt_ns;
    e->rttvar_ns = (3 * e->rttvar_ns + d) / 4;
    e->srtt_ns = (7 * e->srtt_ns + r) / 8;
    if (!e->srtt_ns)
        e->srtt_ns = 1;
}

void cl_finish(srpc_client_t *c, cl_call_t *k, int code, uint8_t *data, uint32_t len)
{
    SRPC_CL_ASSERT_LOCKED(c);
    if (k->req) {
        /* Karn: a call sent again may be answered by any send; a local outcome is no round trip */
        if (code < SRPC_E_MAX && k->attempts == 0 && k->busy_n == 0 && !k->resent)
            rtt_sample(c, k->func_id, srpc_now_ns() - k->sent_ns);
        if (!k->req_borrowed)
            free(k->req);
        k->req = NULL;
    }
    k->done = 1;
    k->busy_wait = 0;
    if (k->waiting) /* finished before its first send (its deadline passed) */
        cl_window_unlink(c, k);
    cl_window_leave(c, k);
    k->code = code;
    k->reply = data;
    k->reply_len = len;
    if (code)
        c->st.errors++;
    else
        c->st.replies++;
    srpc_client_cq_t *q = k->cq;
    if (q) {
        k->dprev = q->tail;
        if (q->tail)
            q->tail->dnext = k;
        else
            q->head = k;
        q->tail = k;
        k->on_done_list = 1;
    }
}

void cl_finish_local(srpc_client_t *c, cl_call_t *k, int code, const char *msg)
{
    uint32_t l = (uint32_t)strlen(msg);
    cl_finish(c, k, code, cl_dup_bytes((const uint8_t *)msg, l), l);
}
