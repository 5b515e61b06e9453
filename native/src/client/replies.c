/* replies.c: a client's receiving: one thread at a time takes what has arrived (the others sleep until it hands over), each datagram checked (hostile until then), signed or sealed ones opened, handshake answers handed on, segments reassembled into the reply of their call; and the waits for calls to finish. */
#include <errno.h>
#include <poll.h>
#include <string.h>

#include "client/client_state.h"
#include "core/tunables.h"
#include "core/wait.h"

/* One datagram received: total bytes, its header at hb and the rest at data; trunc: longer than
 * what is here. Hostile until checked. Lock held. */
static void process(srpc_client_t *c, const uint8_t *hb, const uint8_t *data, uint32_t total, int trunc)
{
    srpc_hdr_t h;
    uint32_t seg, dlen = total - SRPC_HDR_LEN;
    if (c->v5 && !trunc && total >= SRPC_HDR_LEN && hb[SRPC_OFF_VER_TYPE] >> 4 == SRPC_VERSION_5 &&
        (hb[SRPC_OFF_VER_TYPE] & 0x0f) > SRPC_ERROR) {
        uint8_t d[SRPC_V5_INIT_LEN]; /* the datagram whole (no answer of the server is longer) */
        if (total > sizeof(d)) {
            c->st.dropped++;
            return;
        }
        memcpy(d, hb, SRPC_HDR_LEN);
        memcpy(d + SRPC_HDR_LEN, data, total - SRPC_HDR_LEN);
        cl_v5_handshake_in(c, d, total);
        return;
    }
    if (trunc || srpc_hdr_decode(hb, total < SRPC_HDR_LEN ? total : SRPC_HDR_LEN, &h) < 0 ||
        h.type == SRPC_REQUEST || h.version != c->cfg.version) {
        c->st.dropped++;
        return;
    }
    /* Version 4: the trailer checked before any other field or data byte is believed. */
    if (h.version == SRPC_VERSION_4 && !cl_v4_signed_by_us(c, hb, data, &dlen)) {
        c->st.bad_auth++;
        c->st.dropped++;
        return;
    }
    if (h.version == SRPC_VERSION_5 && srpc_cl_v5_open(c->v5, hb, (uint8_t *)data, &dlen) < 0) {
        c->st.bad_auth++; /* not of a session of ours, changed, forged or replayed */
        c->st.dropped++;
        return;
    }
    int r = srpc_data_check(&h, hb, data, &dlen); /* version 3: before any data is read */
    if (r < 0 || srpc_seg_check(&h, dlen, &seg) < 0) {
        c->st.bad_data_check += r == -EILSEQ;
        c->st.dropped++;
        return;
    }
    cl_call_t *k = cl_find(c, h.req_id);
    if (!k || k->done || k->waiting || k->func_id != h.func_id) { /* waiting: never sent, so no reply is its */
        c->st.late_or_unknown++;
        return;
    }
    if (h.type == SRPC_ERROR) {
        if (h.aux == SRPC_E_BUSY && !k->busy_wait && cl_busy_retry(c, k))
            return;
        if (k->busy_wait) /* a BUSY for an earlier send while a later one is armed: that one decides */
            return;
        uint32_t l = dlen < SRPC_ERRMSG_MAX ? dlen : SRPC_ERRMSG_MAX;
        cl_finish(c, k, h.aux ? h.aux : SRPC_E_INTERNAL, cl_dup_bytes(data, l), l);
        if (h.aux == SRPC_E_DRAINING)
            cl_fail_unsent_draining(c);
        return;
    }
    if (h.msg_len > c->cfg.max_reply) {
        cl_finish_local(c, k, SRPC_E_TOO_LARGE, "reply larger than the client's max_reply");
        return;
    }
    if (h.nseg == 1) {
        cl_finish(c, k, 0, cl_dup_bytes(data, dlen), dlen);
        return;
    }
    if (!k->reasm_active) {
        if (srpc_reasm_init(&k->reasm, &h, seg, NULL) != 0) {
            c->st.dropped++;
            return;
        }
        k->reasm_active = 1;
    }
    r = srpc_reasm_add(&k->reasm, &h, seg, data, dlen);
    if (r == -EPROTO) { /* disagrees with the message: start over */
        srpc_reasm_free(&k->reasm, NULL);
        k->reasm_active = 0;
        c->st.dropped++;
    } else if (r == 1) {
        uint8_t *buf = k->reasm.buf;
        uint32_t len = k->reasm.msg_len;
        k->reasm.buf = NULL;
        srpc_reasm_free(&k->reasm, NULL);
        k->reasm_active = 0;
        cl_finish(c, k, 0, buf, len);
    }
}

static int unreachable_errno(int n)
{
    return n == -ECONNREFUSED || n == -EHOSTUNREACH || n == -ENETUNREACH || n == -EHOSTDOWN;
}

/* Receives what has arrived, waiting up to until_ns for something. Called with the lock held and
 * rx_owned taken by this thread; returns with the lock held. */
static void receive_some(srpc_client_t *c, uint64_t until_ns)
{
    SRPC_CL_ASSERT_LOCKED(c);
    if (c->next_due < until_ns) /* wake for the next retransmission or BUSY retry */
        until_ns = c->next_due;
    cl_unlock(c);
    int n = srpc_tp_rx_burst(c->tp, &c->rx, 0);
    if (n == 0 && !c->cfg.busy_poll) {
        uint64_t now = srpc_now_ns(), wait = until_ns > now ? until_ns - now : 0;
        if (wait > 10000000)
            wait = 10000000; /* re-check at least every 10 ms */
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)wait};
        struct pollfd p = {.fd = c->tp->wait_fd, .events = POLLIN};
        if (ppoll(&p, 1, &ts, NULL) > 0)
            n = srpc_tp_rx_burst(c->tp, &c->rx, 0);
    } else if (n == 0) {
        srpc_cpu_relax();
    }
    cl_lock(c);
    if (unreachable_errno(n))
        cl_fail_unreachable(c, -n);
    for (int i = 0; i < n; i++)
        for (unsigned j = 0; j < srpc_rx_dgrams(&c->rx, (unsigned)i); j++) { /* those coalesced into it in order */
            const srpc_rx_dg_t d = srpc_rx_dgram(&c->rx, (unsigned)i, j);
            process(c, d.hdr, d.data, d.len, c->rx.trunc[i]);
        }
    if (c->whead)
        cl_send_waiting(c);
}

int cl_wait_until(srpc_client_t *c, int (*ready)(srpc_client_t *, void *), void *arg, uint64_t until_ns)
{
    SRPC_CL_ASSERT_LOCKED(c);
    for (int passes = 0;; passes++) {
        cl_retransmit_due(c);
        int r = ready(c, arg);
        if (r != 0)
            return r;
        if (passes && srpc_now_ns() >= until_ns) /* a zero timeout still makes one receive pass */
            return -ETIMEDOUT;
        if (c->shut) /* nothing left to wait for: every call has finished */
            return -ESHUTDOWN;
        if (c->rx_owned) {
            uint64_t t = srpc_now_ns() + 1000000;
            cl_timed_wait(c, t < until_ns ? t : until_ns);
            continue;
        }
        c->rx_owned = 1;
        receive_some(c, until_ns);
        c->rx_owned = 0;
        pthread_cond_broadcast(&c->cv);
    }
}

static int call_ready(srpc_client_t *c, void *arg)
{
    cl_call_t *k = cl_find(c, *(uint64_t *)arg);
    return !k ? -ENOENT : k->done ? 1 : 0;
}

static int any_ready(srpc_client_t *c, void *arg)
{
    (void)c;
    return ((srpc_client_cq_t *)arg)->head ? 1 : 0;
}

int srpc_client_wait(srpc_client_t *c, uint64_t req_id, int64_t timeout_us)
{
    if (!c)
        return -EINVAL;
    cl_lock(c);
    int r = cl_wait_until(c, call_ready, &req_id, cl_deadline_of(timeout_us));
    cl_unlock(c);
    return r > 0 ? 0 : r;
}

int srpc_client_wait_any(srpc_client_t *c, uint64_t *ids, int n, int64_t timeout_us)
{
    return c ? srpc_client_wait_cq(c, &c->cq, ids, n, timeout_us) : -EINVAL;
}

int srpc_client_wait_cq(srpc_client_t *c, srpc_client_cq_t *cq, uint64_t *ids, int n, int64_t timeout_us)
{
    if (!c || !cq || !ids || n <= 0)
        return -EINVAL;
    cl_lock(c);
    int r = cl_wait_until(c, any_ready, cq, cl_deadline_of(timeout_us));
    int cnt = 0;
    while (r > 0 && cnt < n && cq->head) {
        cl_call_t *k = cq->head;
        cl_done_unlink(k);
        ids[cnt++] = k->req_id;
    }
    cl_unlock(c);
    return r == -ETIMEDOUT ? 0 : r < 0 ? r : cnt;
}
