/* calls.c: a client's calls and their ids: requests registered in the call table and sent (one call, or a load run's many in one send), completion queues, a call's result, and its release. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_state.h"

/* Sends n calls, call i of function fids[i] with the request (datas[i], lens[i], aux), each its own
 * req_id in ids[i], in one transport send, reported to cq (NULL: nowhere). rcs[i] gets 0, or the
 * error of a call that could not be sent (it is forgotten). borrow (a load run's calls): the
 * caller keeps the requests as they are until every call has finished or been released, so they
 * are not copied for retransmission, and the calls are sent now, outside the window, with no BUSY
 * retry. Otherwise (one call, n = 1) the call is a flow call with its deadline: it waits in the
 * client while the window is full. Returns how many were sent (or are waiting), or -errno when
 * the arguments are bad or no memory was left for the first call. */
static int send_calls(srpc_client_t *c, const uint16_t *fids, const void *const *datas, const uint32_t *lens,
                      uint16_t aux, srpc_client_cq_t *cq, uint32_t n, uint64_t *ids, int *rcs, int borrow,
                      uint64_t deadline_ns, int wait_ready)
{
    if (!c || !fids || !datas || !lens || !ids || !rcs || n == 0 || n > SRPC_CLIENT_SEND_MAX ||
        (!borrow && n != 1))
        return -EINVAL;
    for (uint32_t i = 0; i < n; i++) {
        if (!datas[i] && lens[i])
            return -EINVAL;
        if (srpc_seg_count(lens[i], c->seg) > UINT16_MAX)
            return -EMSGSIZE;
    }
    /* A flow call keeps its request while it may have to be sent later: held back by the
     * window, retransmitted, or tried again after BUSY. */
    const int keep = c->v5 || (borrow ? c->cfg.retries != 0 : c->cfg.retries || c->cfg.busy_retry || c->cfg.window);
    /* (version 5: a call may have to be sent again under a new session) */
    cl_call_t *k[SRPC_CLIENT_SEND_MAX];
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t len = lens[i];
        k[i] = calloc(1, sizeof(*k[i]));
        if (k[i] && keep && borrow) {
            k[i]->req = (uint8_t *)datas[i];
            k[i]->req_borrowed = 1;
        } else if (k[i] && keep && !(k[i]->req = malloc(len ? len : 1))) {
            free(k[i]);
            k[i] = NULL;
        }
        if (!k[i]) {
            if (i == 0)
                return -ENOMEM;
            for (uint32_t j = i; j < n; j++)
                rcs[j] = -ENOMEM;
            n = i;
            break;
        }
        k[i]->req_id = atomic_fetch_add(&c->next_id, 1);
        if (c->cfg.version >= SRPC_VERSION_2) /* 48 bits on the wire; wraps after 2^48 calls */
            k[i]->req_id &= SRPC_REQ_ID_V2_MASK;
        k[i]->func_id = fids[i];
        k[i]->cq = cq;
        k[i]->aux = aux;
        k[i]->due_ns = UINT64_MAX;
        k[i]->deadline_ns = deadline_ns;
        k[i]->flow = !borrow;
        k[i]->wait_ready = (uint8_t)wait_ready;
        if (k[i]->req) {
            if (len && !borrow)
                memcpy(k[i]->req, datas[i], len);
            k[i]->req_len = len;
        }
        ids[i] = k[i]->req_id;
        rcs[i] = 0;
    }
    const uint64_t now = srpc_now_ns();
    cl_lock(c);
    if (c->shut) { /* closed: nothing more is sent */
        cl_unlock(c);
        for (uint32_t i = 0; i < n; i++)
            cl_call_free(k[i]);
        return -ESHUTDOWN;
    }
    for (uint32_t i = 0; i < n; i++) {
        cl_call_t **b = cl_bucket(c, k[i]->req_id);
        k[i]->hnext = *b;
        *b = k[i];
    }
    c->st.sent_calls += n;
    if (!borrow && (c->whead || cl_window_full(c))) { /* behind the others, in order */
        k[0]->waiting = 1;
        k[0]->wprev = c->wtail;
        if (c->wtail)
            c->wtail->wnext = k[0];
        else
            c->whead = k[0];
        c->wtail = k[0];
        c->st.window_waits++;
        cl_send_waiting(c); /* sends it (and those before it) if the window has room */
        cl_unlock(c);
        return 1;
    }
    uint8_t resend[SRPC_CLIENT_SEND_MAX]; /* 1: retransmitted when due, so a full queue is a loss */
    cl_auth_use_t use = {0};
    if (c->v5)
        cl_auth_take(c, &use); /* without a session the calls wait for the one under way: sent when it is made */
    for (uint32_t i = 0; i < n; i++) {
        k[i]->sess = use.ok ? use.session : 0;
        k[i]->sent_v5 |= use.ok;
        if (!borrow) {
            k[i]->in_window = 1;
            c->outstanding++;
        }
        k[i]->sent_ns = now;
        resend[i] = k[i]->req && c->cfg.retries;
        if (resend[i]) {
            k[i]->due_ns = now + cl_rto_ns(c, fids[i]);
            cl_note_due(c, k[i]->due_ns);
        }
    }
    atomic_fetch_add(&c->sending, 1); /* (under the lock, after the shut check: shutdown waits for it) */
    cl_unlock(c);
    if (c->v5 && !use.ok) {
        atomic_fetch_sub(&c->sending, 1);
        return (int)n;
    }
    /* Once the first datagram is out, the reply may come back and another thread may release
     * the call: k is not touched after the send. */
    struct iovec iv[SRPC_CLIENT_SEND_MAX];
    srpc_tx_msg_t m[SRPC_CLIENT_SEND_MAX];
    for (uint32_t i = 0; i < n; i++) {
        iv[i] = (struct iovec){(void *)datas[i], lens[i]};
        m[i] = (srpc_tx_msg_t){.hdr = {.type = SRPC_REQUEST, .version = c->cfg.version, .func_id = fids[i],
                                       .req_id = ids[i], .aux = aux},
                               .pieces = &iv[i], .npieces = lens[i] ? 1 : 0, .len = lens[i], .seg_size = c->seg};
        cl_auth_sign(c, &m[i], &use);
    }
    srpc_tp_send(c->tp, m, n);
    atomic_fetch_sub(&c->sending, 1);
    cl_auth_wipe(&use);
    int sent = 0;
    for (uint32_t i = 0; i < n; i++) {
        rcs[i] = m[i].result < 0 ? m[i].result : 0;
        if ((rcs[i] == -EAGAIN || rcs[i] == -ENOBUFS) && resend[i]) {
            /* The transport's queue stayed full (a peer slow to drain it): as a datagram lost on
             * the way, the request goes again when due, within the call's deadline. */
            cl_lock(c);
            c->st.send_full++;
            cl_unlock(c);
            rcs[i] = 0;
        }
        if (rcs[i])
            srpc_client_release(c, ids[i]);
        else
            sent++;
    }
    return sent;
}

/* One flow call; flags SRPC_SEND_WAIT_FOR_READY / SRPC_SEND_FAIL_FAST, 0: the client's choice. */
static int send_call(srpc_client_t *c, uint16_t func_id, const void *data, uint32_t len, uint16_t aux,
                     srpc_client_cq_t *cq, uint64_t deadline_ns, uint64_t *req_id, unsigned flags)
{
    int rc = 0;
    int wait_ready = flags & SRPC_SEND_WAIT_FOR_READY ? 1 : flags & SRPC_SEND_FAIL_FAST ? 0 : c->cfg.wait_for_ready;
    int r = send_calls(c, &func_id, &data, &len, aux, cq, 1, req_id, &rc, 0, deadline_ns, wait_ready);
    return r < 0 ? r : rc;
}

int srpc_client_send_many_cq(srpc_client_t *c, srpc_client_cq_t *cq, uint16_t func_id, const void *data, uint32_t len,
                             uint32_t n, uint64_t *ids, int *rcs)
{
    if (!c || !cq || n == 0 || n > SRPC_CLIENT_SEND_MAX)
        return -EINVAL;
    uint16_t fids[SRPC_CLIENT_SEND_MAX];
    const void *datas[SRPC_CLIENT_SEND_MAX];
    uint32_t lens[SRPC_CLIENT_SEND_MAX];
    for (uint32_t i = 0; i < n; i++) {
        fids[i] = func_id;
        datas[i] = data;
        lens[i] = len;
    }
    return send_calls(c, fids, datas, lens, 0, cq, n, ids, rcs, 1, UINT64_MAX, 1);
}

int srpc_client_send_each_cq(srpc_client_t *c, srpc_client_cq_t *cq, const uint16_t *func_ids,
                             const void *const *data, const uint32_t *lens, uint32_t n, uint64_t *ids, int *rcs)
{
    return c && cq ? send_calls(c, func_ids, data, lens, 0, cq, n, ids, rcs, 1, UINT64_MAX, 1) : -EINVAL;
}

int srpc_client_send(srpc_client_t *c, uint16_t func_id, const void *data, uint32_t len,
                     uint16_t aux, uint64_t *req_id)
{
    return c ? send_call(c, func_id, data, len, aux, &c->cq, UINT64_MAX, req_id, 0) : -EINVAL;
}

int srpc_client_send_timed(srpc_client_t *c, srpc_client_cq_t *cq, uint16_t func_id, const void *data, uint32_t len,
                           uint16_t aux, int64_t timeout_us, uint64_t *req_id)
{
    return c ? send_call(c, func_id, data, len, aux, cq ? cq : &c->cq, cl_deadline_of(timeout_us), req_id, 0) : -EINVAL;
}

int srpc_client_send_opts(srpc_client_t *c, srpc_client_cq_t *cq, uint16_t func_id, const void *data, uint32_t len,
                          uint16_t aux, int64_t timeout_us, unsigned flags, uint64_t *req_id)
{
    if (!c || flags & ~(SRPC_SEND_WAIT_FOR_READY | SRPC_SEND_FAIL_FAST) ||
        (flags & SRPC_SEND_WAIT_FOR_READY && flags & SRPC_SEND_FAIL_FAST))
        return -EINVAL;
    return send_call(c, func_id, data, len, aux, cq ? cq : &c->cq, cl_deadline_of(timeout_us), req_id, flags);
}

int srpc_client_send_cq(srpc_client_t *c, srpc_client_cq_t *cq, uint16_t func_id, const void *data,
                        uint32_t len, uint16_t aux, uint64_t *req_id)
{
    return c && cq ? send_call(c, func_id, data, len, aux, cq, UINT64_MAX, req_id, 0) : -EINVAL;
}

int srpc_client_cq_create(srpc_client_t *c, srpc_client_cq_t **out)
{
    if (!c || !out)
        return -EINVAL;
    return (*out = calloc(1, sizeof(**out))) ? 0 : -ENOMEM;
}

void srpc_client_cq_destroy(srpc_client_t *c, srpc_client_cq_t *cq)
{
    if (!c || !cq || cq == &c->cq)
        return;
    cl_lock(c);
    for (unsigned b = 0; b < SRPC_CL_NBUCKETS; b++) /* its calls are reported nowhere from now on */
        for (cl_call_t *k = c->buckets[b]; k; k = k->hnext)
            if (k->cq == cq) {
                cl_done_unlink(k);
                k->cq = NULL;
            }
    cl_unlock(c);
    free(cq);
}

int srpc_client_result(srpc_client_t *c, uint64_t req_id, int *code, const uint8_t **data, uint32_t *len)
{
    if (!c || !code || !data || !len)
        return -EINVAL;
    cl_lock(c);
    cl_call_t *k = cl_find(c, req_id);
    if (k) {
        *code = k->done ? k->code : SRPC_E_PENDING;
        *data = k->reply;
        *len = k->done ? k->reply_len : 0;
    }
    cl_unlock(c);
    return k ? 0 : -ENOENT;
}

int srpc_client_release(srpc_client_t *c, uint64_t req_id)
{
    if (!c)
        return -EINVAL;
    cl_lock(c);
    cl_call_t **p = cl_bucket(c, req_id);
    while (*p && (*p)->req_id != req_id)
        p = &(*p)->hnext;
    cl_call_t *k = *p;
    if (k) {
        *p = k->hnext;
        cl_done_unlink(k);
        if (k->waiting)
            cl_window_unlink(c, k);
        cl_window_leave(c, k);
        if (!k->done)
            c->st.timeouts++;
        if (c->whead)
            cl_send_waiting(c);
    }
    cl_unlock(c);
    if (!k)
        return -ENOENT;
    cl_call_free(k);
    return 0;
}

int srpc_client_call(srpc_client_t *c, uint16_t func_id, const void *data, uint32_t len,
                     void *out, uint32_t cap, uint32_t *out_len, int *code, int64_t timeout_us)
{
    if (!out_len || !code || (!out && cap))
        return -EINVAL;
    uint64_t id;
    int r = send_call(c, func_id, data, len, 0, NULL, cl_deadline_of(timeout_us), &id, 0);
    if (r)
        return r;
    r = srpc_client_wait(c, id, timeout_us);
    if (r == 0) {
        const uint8_t *d;
        uint32_t l;
        srpc_client_result(c, id, code, &d, &l);
        if (l > cap && *code) /* an error's text: cut to cap (the code is the outcome) */
            l = cap;
        *out_len = l;
        if (l > cap)
            r = -ENOBUFS;
        else if (l)
            memcpy(out, d, l);
    }
    srpc_client_release(c, id);
    return r;
}

