/* completion.c: the end of a batch (see completion.h): complete, defer, poll, finish. */
#include "server/completion.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tunables.h"
#include "server/callring.h"
#include "server/reply.h"

/* A deferred raw call's length until srpc_server_finish gives it. */
#define NO_LENGTH UINT32_MAX

/* A raw batch's reply lengths (b->out_len, count entries) kept with its calls: b->out_len is
 * reused by the next batch, or is the finishing thread's own array. */
static void keep_lengths(srpc_fn_t *fn, const srpc_batch_t *b)
{
    for (uint32_t i = 0; i < b->count; i++)
        fn->calls[(b->first_seq + i) % fn->capacity].out_len = b->out_len[i];
}

/* The reply of the call of element seq as pieces of the output TQ elements (raw: its length is
 * in the call's record). Returns the number of pieces. */
static int reply_pieces(const srpc_fn_t *fn, uint64_t seq, struct iovec *iv, uint32_t *len)
{
    if (fn->raw) {
        uint32_t l = fn->calls[seq % fn->capacity].out_len;
        iv[0] = (struct iovec){srpc_tq_elem(fn->out_tq[0], seq), l};
        *len = l;
        return 1;
    }
    for (uint32_t k = 0; k < fn->n_out; k++)
        iv[k] = (struct iovec){srpc_tq_elem(fn->out_tq[k], seq), fn->out_size[k]};
    *len = fn->resp_bytes;
    return (int)fn->n_out;
}

/* Answers the batch of n calls from element first (status 0: the outputs, or a call's own error
 * set by srpc_server_fail_call; else that error with msg as text, to every call): its replies
 * join those the worker holds (reply.h), its calls' elements are recycled, and the replies go
 * out with the next flush, which then moves the calls to the reply cache. Every earlier batch
 * of fn is finished.
 * Order: the elements are recycled, then the replies sent, then cached. Recycled first, so that
 * a client whose reply came back finds its call's element free already (with as many calls
 * outstanding as the queue holds, it never meets BUSY); that is safe because the engine then
 * writes only request elements and call records, and the replies are sent (and cached) from the
 * output elements, which only a callback writes, and no batch that reuses them is handed out
 * before the flush (srpc_reply_hold_check_w). Cached after the send, so that the copy into the
 * reply log (a page fault the first time round the log) never delays a reply; what the cache
 * needs of a call record is kept in the hold before the recycling hands the record to the
 * engine. Until it is cached a retransmission finds the call CT_QUEUED and is dropped as a
 * duplicate (its next try is answered from the cache). msg is the caller's: a batch answered
 * with it is sent before this returns; so are the replies held once there are enough of them
 * (SRPC_REPLY_HOLD_CALLS, SRPC_REPLY_HOLD_BYTES). */
static void finish_w(srpc_server_t *srv, srpc_fn_t *fn, uint64_t first, uint32_t n, int status, const char *msg)
{
    const uint32_t max_out = fn->raw ? fn->resp_bytes : 0;
    const uint32_t msg_len = status && msg ? (uint32_t)strnlen(msg, SRPC_ERRMSG_MAX) : 0;
    srpc_reply_hold_t *h = srv->held;
    const uint64_t now = srpc_now_ns(); /* the batch's service time: one clock read per batch */
    uint64_t served_ns = 0;
    for (uint32_t i = 0; i < n; i++) {
        const unsigned slot = srpc_reply_hold_slot_w(srv); /* flushes first when the hold is full */
        srpc_call_t *c = &fn->calls[(first + i) % fn->capacity];
        const uint64_t d = now > c->rx_ns ? now - c->rx_ns : 0;
        served_ns += d;
        FN_ADD(fn, service_hist[srpc_delay_bucket(d)], 1);
        srpc_call_work_complete_w(c);
        struct iovec iv[SRPC_MAX_TENSORS];
        uint32_t len = msg_len;
        int k = 0, code = status;
        iv[0] = (struct iovec){(void *)msg, msg_len};
        char *own = c->fail_msg; /* taken off the record now: recycling hands it to the engine */
        if (!code && c->fail_code) {
            code = c->fail_code;
            len = own ? (uint32_t)strlen(own) : 0;
            iv[0] = (struct iovec){own, len};
        }
        c->fail_code = 0;
        c->fail_msg = NULL;
        if (!code && fn->raw && c->out_len > max_out) {
            code = SRPC_E_INTERNAL;
            char *t = h->text[slot];
            len = c->out_len == NO_LENGTH
                      ? (uint32_t)snprintf(t, SRPC_REPLY_TEXT_MAX, "deferred batch finished with no reply length")
                      : (uint32_t)snprintf(t, SRPC_REPLY_TEXT_MAX, "reply of %u bytes over the limit %u",
                                           c->out_len, max_out);
            iv[0] = (struct iovec){t, len};
        }
        if (code)
            k = len ? 1 : 0;
        else
            k = reply_pieces(fn, first + i, iv, &len);
        srpc_reply_hold_add_w(srv, fn, first + i, c->ct_idx, code, own, iv, k, len);
        srpc_call_tx_complete_w(c, code, len);
    }
    FN_ADD(fn, service_sum_ns, served_ns);
    srpc_srv_lock(srv);
    srpc_ring_recycle_locked(srv, fn, first, n);
    srpc_srv_unlock(srv);
    if (msg_len || h->b.n >= SRPC_REPLY_HOLD_CALLS || h->bytes >= SRPC_REPLY_HOLD_BYTES || !srv->cfg.reply_hold_us)
        srpc_reply_hold_flush_w(srv); /* the caller's text; held enough (nothing to gain from waiting); or never held */
}

/* Finishes fn's in-flight batches, oldest first, while the oldest one's done word is set.
 * Returns how many were finished. */
static int finish_ready_w(srpc_server_t *srv, srpc_fn_t *fn)
{
    int finished = 0;
    while (fn->inflight) {
        uint64_t first;
        srpc_srv_lock(srv);
        const int handed_out = srpc_ring_oldest_out_locked(srv, fn, &first);
        srpc_srv_unlock(srv);
        srpc_call_t *c0 = &fn->calls[first % fn->capacity];
        if (!handed_out || c0->batch_open) /* the oldest batch is still with the worker */
            break;
        uint32_t w = __atomic_load_n(&fn->done_words[first % fn->capacity], __ATOMIC_ACQUIRE);
        if (!(w & SRPC_DONE))
            break;
        finish_w(srv, fn, first, c0->batch_n, (int)(w & ~SRPC_DONE), c0->batch_msg);
        free(c0->batch_msg);
        c0->batch_msg = NULL;
        if (--fn->inflight == 0)
            srpc_bitset_del(srv->inflight_set, fn->fi);
        __atomic_store_n(&srv->inflight, srv->inflight - 1, __ATOMIC_RELAXED);
        if (fn->gpu_device >= 0)
            srv->inflight_gpu--;
        finished++;
    }
    return finished;
}

int srpc_server_poll(srpc_server_t *srv)
{
    if (!srv)
        return -EINVAL;
    const int finished = srpc_completion_poll_w(srv);
    srpc_reply_hold_flush_w(srv);
    return finished;
}

int srpc_completion_poll_w(srpc_server_t *srv)
{
    int finished = 0;
    if (!srv->inflight)
        return 0;
    SRPC_BITSET_FOR_FROM(srv->inflight_set, srv->nfns, 0, j) /* the queues with batches in flight only */
        finished += finish_ready_w(srv, srv->fns[j]);
    return finished;
}

srpc_fn_t *srpc_completion_open_fn_w(srpc_server_t *srv, const srpc_batch_t *b)
{
    srpc_fn_t *fn = srv && b && b->count ? srpc_fn_lookup(srv, b->func_id, b->aux_class) : NULL;
    if (!fn)
        return NULL;
    /* The batch fields of the call records are the worker's alone, so no lock is needed (an
     * open batch lies within [done, taken), which the engine leaves alone). */
    const srpc_call_t *c0 = &fn->calls[b->first_seq % fn->capacity];
    if (!(c0->batch_open && c0->batch_seq == b->first_seq && c0->batch_n == b->count))
        return NULL;
    SRPC_ASSERT_WORKER(srv); /* the thread that got the batch */
    return fn;
}

uint32_t *srpc_completion_hand_back_w(srpc_server_t *srv, srpc_fn_t *fn, srpc_batch_t *b)
{
    fn->calls[b->first_seq % fn->capacity].batch_open = 0;
    if (fn->inflight++ == 0)
        srpc_bitset_add(srv->inflight_set, fn->fi);
    __atomic_store_n(&srv->inflight, srv->inflight + 1, __ATOMIC_RELAXED);
    if (fn->gpu_device >= 0)
        srv->inflight_gpu++;
    b->count = 0;
    return &fn->done_words[b->first_seq % fn->capacity];
}

int srpc_server_complete(srpc_server_t *srv, srpc_batch_t *b, int status, const char *msg)
{
    const int r = srpc_completion_complete_w(srv, b, status, msg);
    if (r == 0)
        srpc_reply_hold_flush_w(srv);
    return r;
}

int srpc_completion_complete_w(srpc_server_t *srv, srpc_batch_t *b, int status, const char *msg)
{
    srpc_fn_t *fn = srpc_completion_open_fn_w(srv, b);
    if (!fn)
        return -EINVAL;
    if (status < 0 || status >= SRPC_E_MAX)
        status = SRPC_E_INTERNAL;
    srpc_call_t *c0 = &fn->calls[b->first_seq % fn->capacity];
    if (fn->raw)
        keep_lengths(fn, b);
    if (!fn->inflight && b->first_seq == fn->done) {
        /* The common case, the oldest batch with none in flight: no done word needed. */
        c0->batch_open = 0;
        finish_w(srv, fn, b->first_seq, b->count, status, msg);
        b->count = 0;
        return 0;
    }
    if (status && msg)
        c0->batch_msg = strndup(msg, SRPC_ERRMSG_MAX); /* NULL (no text) if out of memory */
    uint32_t *done = srpc_completion_hand_back_w(srv, fn, b);
    __atomic_store_n(done, SRPC_DONE | (uint32_t)status, __ATOMIC_RELEASE);
    finish_ready_w(srv, fn);
    return 0;
}

/* The function of b when b is (a copy of) a batch deferred and not finished yet, else NULL.
 * Any thread: while the done word is 0 the batch's first record does not change. */
static srpc_fn_t *deferred_fn(srpc_server_t *srv, const srpc_batch_t *b)
{
    srpc_fn_t *fn = srv && b && b->count ? srpc_fn_lookup(srv, b->func_id, b->aux_class) : NULL;
    if (!fn)
        return NULL;
    const uint64_t at = b->first_seq % fn->capacity;
    const srpc_call_t *c0 = &fn->calls[at];
    if (__atomic_load_n(&fn->done_words[at], __ATOMIC_ACQUIRE) != 0)
        return NULL; /* finished already (or its slot reused) */
    if (c0->batch_open || c0->batch_seq != b->first_seq || c0->batch_n != b->count)
        return NULL;
    return fn;
}

int srpc_server_fail_call(srpc_server_t *srv, srpc_batch_t *b, uint32_t i, int code, const char *msg)
{
    srpc_fn_t *fn = srpc_completion_open_fn_w(srv, b);
    if (!fn)
        fn = deferred_fn(srv, b); /* by the thread that will finish it */
    if (!fn || i >= b->count || code <= 0 || code >= SRPC_E_MAX)
        return -EINVAL;
    char *text = NULL;
    if (msg && !(text = strndup(msg, SRPC_ERRMSG_MAX)))
        return -ENOMEM;
    srpc_call_t *c = &fn->calls[(b->first_seq + i) % fn->capacity];
    free(c->fail_msg);
    c->fail_msg = text;
    c->fail_code = (uint16_t)code;
    return 0;
}

int srpc_server_call_keys(srpc_server_t *srv, const srpc_batch_t *b, uint32_t *ids)
{
    srpc_fn_t *fn = srpc_completion_open_fn_w(srv, b);
    if (!fn || !ids)
        return -EINVAL;
    srpc_srv_lock(srv); /* the call table is the engine's; a call's entry lives while it is open */
    for (uint32_t i = 0; i < b->count; i++)
        ids[i] = srv->ct.e[fn->calls[(b->first_seq + i) % fn->capacity].ct_idx].key.key_id;
    srpc_srv_unlock(srv);
    return 0;
}

int srpc_server_defer(srpc_server_t *srv, srpc_batch_t *b, uint32_t **done)
{
    srpc_fn_t *fn = srpc_completion_open_fn_w(srv, b);
    if (!fn || !done)
        return -EINVAL;
    if (fn->raw) /* the lengths come with srpc_server_finish */
        for (uint32_t i = 0; i < b->count; i++)
            fn->calls[(b->first_seq + i) % fn->capacity].out_len = NO_LENGTH;
    *done = srpc_completion_hand_back_w(srv, fn, b);
    return 0;
}

int srpc_server_finish(srpc_server_t *srv, const srpc_batch_t *b, int status, const char *msg)
{
    srpc_fn_t *fn = deferred_fn(srv, b);
    if (!fn || (fn->raw && !status && !b->out_len))
        return -EINVAL;
    if (status < 0 || status >= SRPC_E_MAX)
        status = SRPC_E_INTERNAL;
    const uint64_t at = b->first_seq % fn->capacity;
    if (fn->raw && !status)
        keep_lengths(fn, b);
    if (status && msg)
        fn->calls[at].batch_msg = strndup(msg, SRPC_ERRMSG_MAX); /* NULL (no text) if out of memory */
    __atomic_store_n(&fn->done_words[at], SRPC_DONE | (uint32_t)status, __ATOMIC_RELEASE);
    /* Wake the worker wherever it sleeps: on ready_gen (the engine thread receiving) or in
     * poll() on the transport (block mode). */
    srpc_ring_notify(srv);
    uint64_t one = 1;
    if (write(srv->wakefd, &one, sizeof(one)) < 0) { /* the counter is set already */ }
    return 0;
}
