/* worker.c: the hand-off between the engine and the one worker thread: work-conserving
 * dynamic batching over the Tensor Queues, and completion (WORK_COMPLETE -> TX -> reply
 * cache -> recycle). Runs on the worker's thread with the GIL released. */
#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "server_internal.h"

void srpc_futex_wake(atomic_uint *addr)
{
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

int srpc_futex_wait(atomic_uint *addr, unsigned expected, int64_t timeout_us)
{
    struct timespec ts, *tp = NULL;
    if (timeout_us >= 0) {
        ts.tv_sec = timeout_us / 1000000;
        ts.tv_nsec = (timeout_us % 1000000) * 1000;
        tp = &ts;
    }
    long r = syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, expected, tp, NULL, 0);
    return r == 0 ? 0 : -errno;
}

void srpc_fn_retire_voids(srpc_fn_t *fn, int worker)
{
    /* Elements in [done, taken) belong to the worker, which writes their state without the
     * lock: only the worker looks at them (VOID ones there were skipped by available()). */
    while (worker && fn->done < fn->taken && fn->calls[fn->done % fn->capacity].state == CALL_VOID)
        fn->calls[fn->done++ % fn->capacity].state = CALL_READY;
    /* Nothing handed out: a VOID element next in line is taken and recycled at once. */
    while (fn->done == fn->taken && fn->taken < fn->ready_end &&
           fn->calls[fn->taken % fn->capacity].state == CALL_VOID) {
        fn->calls[fn->taken % fn->capacity].state = CALL_READY;
        fn->done++;
        fn->taken++;
    }
}

/* Calls ready to hand over from fn->taken on (at most max_batch), after skipping VOID
 * elements; RX_COMPLETE all, consecutive. Lock held. */
static uint32_t available(srpc_fn_t *fn)
{
    srpc_fn_retire_voids(fn, 1);
    while (fn->taken < fn->ready_end && fn->calls[fn->taken % fn->capacity].state == CALL_VOID)
        fn->taken++; /* a batch is out: recycled when it completes */
    uint32_t n = 0;
    while (n < fn->max_batch && fn->taken + n < fn->ready_end &&
           fn->calls[(fn->taken + n) % fn->capacity].state == CALL_RX_COMPLETE)
        n++;
    return n;
}

/* The calls at the head of fn's queue that waited longer than its deadline (at most max). */
static uint32_t overdue(const srpc_fn_t *fn, uint64_t avail, uint64_t now)
{
    uint32_t n = 0;
    while (fn->deadline_ns && n < avail && n < fn->max_batch &&
           now - fn->calls[(fn->taken + n) % fn->capacity].rx_ns > fn->deadline_ns)
        n++;
    return n;
}

/* Calls whose copy from GPU memory failed (SRPC_DEV_IN_FAILED) are never run: a batch stops
 * before the first of them, and a batch of them alone is answered INTERNAL. Returns how many of
 * the count calls from the head of fn's queue to take, and sets *failed when they are such calls.
 * Lock held. */
static uint32_t cut_at_failed(srpc_fn_t *fn, uint32_t count, int *failed)
{
    *failed = 0;
    if (__builtin_expect(fn->dev_failed == 0, 1))
        return count;
    const int head_failed = fn->calls[fn->taken % fn->capacity].dev_in == SRPC_DEV_IN_FAILED;
    uint32_t n = 1;
    while (n < count && (fn->calls[(fn->taken + n) % fn->capacity].dev_in == SRPC_DEV_IN_FAILED) == head_failed)
        n++;
    if (head_failed) {
        *failed = 1;
        fn->dev_failed -= n;
    }
    return n;
}

/* The queue-delay bucket of a call that waited ns: the first i with ns <= 2^i us (splitrpc.h). */
static unsigned qdelay_bucket(uint64_t ns)
{
    uint64_t us = (ns + 999) / 1000; /* rounded up: "at most 2^i us" exactly */
    unsigned i = us <= 1 ? 0 : 64u - (unsigned)__builtin_clzll(us - 1);
    return i < SRPC_QDELAY_HIST ? i : SRPC_QDELAY_HIST - 1;
}

/* Counts the queue delay of the count calls from element first, whose batch starts now. */
static void record_queue_delay(srpc_server_t *srv, const srpc_fn_t *fn, uint64_t first, uint32_t count,
                               uint64_t now)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint64_t rx = fn->calls[(first + i) % fn->capacity].rx_ns;
        uint64_t d = now > rx ? now - rx : 0;
        sum += d;
        ST_ADD(srv, queue_delay_hist[qdelay_bucket(d)], 1);
    }
    ST_ADD(srv, queue_delay_sum_ns, sum);
}

/* Takes the next batch, if any is due (lock held). Functions are visited round-robin; one
 * whose calls are fewer than max_batch waits until its oldest call is max_delay_us old.
 * Returns 1 with *b filled (3: and the function's queue is still at least half full behind
 * it), 2 with *b holding calls past their function's deadline (to be completed with DEADLINE,
 * not run), 4 with *b holding calls whose copy from GPU memory failed (to be completed with
 * INTERNAL, not run), else 0 with *hold_until_ns the earliest such deadline (or 0). */
static int take_batch(srpc_server_t *srv, srpc_batch_t *b, uint64_t now, uint64_t *hold_until_ns)
{
    *hold_until_ns = 0;
    for (uint32_t j = 0; j < srv->nfns; j++) {
        uint32_t fi = (srv->rr + j) % srv->nfns;
        srpc_fn_t *fn = srv->fns[fi];
        uint64_t avail = available(fn);
        if (avail == 0)
            continue;
        uint32_t late = overdue(fn, avail, now);
        if (late)
            avail = late; /* a batch of the overdue calls alone */
        else if (avail < fn->max_batch && fn->max_delay_us) {
            uint64_t due = fn->calls[fn->taken % fn->capacity].rx_ns + (uint64_t)fn->max_delay_us * 1000;
            if (now < due) {
                if (!*hold_until_ns || due < *hold_until_ns)
                    *hold_until_ns = due;
                continue;
            }
        }
        int failed;
        uint32_t count = cut_at_failed(fn, (uint32_t)(avail < fn->max_batch ? avail : fn->max_batch), &failed);
        memset(b, 0, sizeof(*b));
        b->func_id = fn->func_id;
        b->count = count;
        b->first_seq = fn->taken;
        b->gpu_device = fn->gpu_device;
        for (uint32_t k = 0; k < fn->n_in; k++) {
            b->in[k] = srpc_tq_elem(fn->in_tq[k], fn->taken);
            if (fn->in_dtq[k])
                b->din[k] = srpc_dtq_elem(fn->in_dtq[k], fn->taken);
        }
        for (uint32_t k = 0; k < fn->n_out; k++) {
            b->out[k] = srpc_tq_elem(fn->out_tq[k], fn->taken);
            if (fn->out_dtq[k])
                b->dout[k] = srpc_dtq_elem(fn->out_dtq[k], fn->taken);
        }
        const uint32_t first = (uint32_t)(fn->taken % fn->capacity);
        fn->calls[first].batch_seq = fn->taken;
        fn->calls[first].batch_n = count;
        fn->calls[first].batch_open = 1;
        __atomic_store_n(&fn->done_words[first], 0, __ATOMIC_RELAXED);
        if (fn->raw) {
            for (uint32_t i = 0; i < count; i++) {
                fn->batch_in_len[i] = fn->calls[(fn->taken + i) % fn->capacity].in_len;
                fn->batch_out_len[i] = 0;
            }
            b->in_len = fn->batch_in_len;
            b->out_len = fn->batch_out_len;
        }
        b->pos = fn->period ? fn->taken % fn->period : UINT64_MAX;
        fn->taken += count;
        atomic_fetch_sub(&srv->n_ready, count);
        srv->rr = fi + 1;
        if (late || failed)
            return failed ? 4 : 2;
        ST_ADD(srv, batches, 1);
        ST_ADD(srv, batch_calls, count);
        ST_ADD(srv, batch_hist[count < SRPC_BATCH_HIST ? count : SRPC_BATCH_HIST - 1], 1);
        record_queue_delay(srv, fn, b->first_seq, count, now);
        return fn->head - fn->taken >= (fn->capacity + 1) / 2 ? 3 : 1;
    }
    return 0;
}

/* The worker leaves next_batch (for a callback, or with nothing): the engine thread trusts
 * it to come back within rx_takeover_us before taking over receiving. */
static int leave(srpc_server_t *srv, int rc)
{
    atomic_store(&srv->w_away_since, srpc_now_ns());
    atomic_store(&srv->w_state, W_AWAY);
    return rc;
}

/* Leaves with a batch while its function's queue is at least half full behind it: the server
 * is saturated, so the engine thread receives at once, in parallel with the callback, instead
 * of after rx_takeover_us. The requests that keep coming are then queued or answered BUSY while
 * the batch runs rather than between batches, which would cost the batches their time. Below
 * that load the worker keeps receiving itself, with no thread hand-off. */
static int leave_saturated(srpc_server_t *srv)
{
    const uint64_t now = srpc_now_ns(), trust = (uint64_t)srv->cfg.rx_takeover_us * 1000;
    atomic_store(&srv->w_away_since, now > trust ? now - trust : 0);
    atomic_store(&srv->w_state, W_AWAY);
    srpc_engine_kick(srv);
    return 0;
}

/* Sleeps in poll() until a datagram arrives, the server stops or timeout_us passes.
 * Called with rx_lock held: while the worker waits, it is the one that receives. */
static void wait_readable(srpc_server_t *srv, int64_t timeout_us)
{
    struct pollfd p[3] = {{.fd = srv->udp.fd, .events = POLLIN}, {.fd = srv->stopfd, .events = POLLIN},
                          {.fd = srv->wakefd, .events = POLLIN}};
    int ms = timeout_us < 0 || timeout_us > (int64_t)INT_MAX * 1000 ? -1 : (int)((timeout_us + 999) / 1000);
    poll(p, 3, ms);
    uint64_t v;
    if (p[2].revents & POLLIN && read(srv->wakefd, &v, sizeof(v)) < 0) { /* drained by the read */ }
}

/* Receives what waits for the server before a batch is taken while calls are queued (when no
 * other thread is receiving). Under sustained load the queue is not empty when the worker comes
 * back for a batch, and the engine thread takes over receiving only after one callback has run
 * rx_takeover_us: without this, requests beyond capacity would wait in the socket buffer
 * (seconds, then dropped by the kernel) instead of being queued or answered BUSY at once.
 * Stops when a burst comes back short, or after rx_takeover_us, so batches still run when
 * receiving alone could take all the time. */
static void catch_up(srpc_server_t *srv)
{
    if (pthread_mutex_trylock(&srv->rx_lock) != 0)
        return;
    const uint64_t until = srpc_now_ns() + (uint64_t)srv->cfg.rx_takeover_us * 1000;
    while (srpc_engine_rx_step(srv) >= (int)srv->rx.burst && srpc_now_ns() < until)
        ;
    pthread_mutex_unlock(&srv->rx_lock);
}

int srpc_server_next_batch(srpc_server_t *srv, srpc_batch_t *b, int64_t timeout_us)
{
    if (!srv || !b)
        return -EINVAL;
    const uint64_t start = srpc_now_ns();
    const uint64_t spin_ns = (uint64_t)srv->cfg.spin_us * 1000;
    /* Beyond ~100 days a timeout is as good as none (and start + timeout cannot overflow). */
    const uint64_t deadline = timeout_us < 0 || timeout_us > (INT64_C(1) << 43) ? UINT64_MAX
                                                                               : start + (uint64_t)timeout_us * 1000;
    uint64_t hold = 0;
    unsigned seen_gen = 0; /* ready_gen at the last take_batch: newer calls end a hold early */
    for (;;) {
        if (atomic_load(&srv->stopping))
            return leave(srv, -ESHUTDOWN);
        if (srv->inflight)
            srpc_server_poll(srv);
        uint64_t now = srpc_now_ns();
        if (atomic_load_explicit(&srv->n_ready, memory_order_acquire) > 0 &&
            (!hold || now >= hold || atomic_load(&srv->ready_gen) != seen_gen)) {
            if (atomic_load(&srv->n_ready) > 1) { /* one call alone: no backlog, and no syscall on
                                                    the lowest-latency path */
                catch_up(srv);
                now = srpc_now_ns();
            }
            seen_gen = atomic_load(&srv->ready_gen);
            pthread_mutex_lock(&srv->lock);
            int got = take_batch(srv, b, now, &hold);
            pthread_mutex_unlock(&srv->lock);
            if (got == 2) { /* overdue: answered DEADLINE here, never handed to the function */
                srpc_server_complete(srv, b, SRPC_E_DEADLINE, "queued longer than the function's deadline");
                continue;
            }
            if (got == 4) {
                srpc_server_complete(srv, b, SRPC_E_INTERNAL, "the copy of the request from GPU memory failed");
                continue;
            }
            if (got)
                return got == 3 ? leave_saturated(srv) : leave(srv, 0);
        }
        if (now >= deadline)
            return leave(srv, -ETIMEDOUT);
        /* Batches in flight finish when a done word changes, which wakes nobody: poll. */
        int spin = srv->cfg.wait_mode == SRPC_WAIT_POLL || srv->inflight || srv->dpdk ||
                   (srv->cfg.wait_mode == SRPC_WAIT_ADAPTIVE && now - start < spin_ns);
        int want = spin ? W_POLLING : W_BLOCKED;
        if (atomic_load_explicit(&srv->w_state, memory_order_relaxed) != want)
            atomic_store(&srv->w_state, want); /* the engine thread stops receiving */
        if (pthread_mutex_trylock(&srv->rx_lock) != 0) {
            /* The engine thread is receiving (a long callback made it take over): it hands
             * back within a step; meanwhile its wake-ups reach us through ready_gen. */
            unsigned gen = atomic_load(&srv->ready_gen);
            atomic_store(&srv->worker_sleeping, 1);
            if (atomic_load(&srv->n_ready) == 0)
                srpc_futex_wait(&srv->ready_gen, gen, 200);
            atomic_store(&srv->worker_sleeping, 0);
            continue;
        }
        int n = srpc_engine_rx_step(srv); /* receive inline: no hand-off, one thread */
        if (n == 0 && !spin) {
            uint64_t until = hold && hold < deadline ? hold : deadline;
            int64_t wait_us = until == UINT64_MAX ? -1 : (int64_t)((until - now) / 1000 + 1);
            wait_readable(srv, wait_us);
        }
        pthread_mutex_unlock(&srv->rx_lock);
        if (n == 0 && spin)
            __builtin_ia32_pause();
        if (hold && srpc_now_ns() >= hold)
            hold = 0;
    }
}

/* The reply data of the call of element seq as pieces of the output TQ elements (raw: its
 * length is in the call's record). */
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

static uint8_t *copy_pieces(const struct iovec *iv, int n, uint32_t len)
{
    uint8_t *p = malloc(len ? len : 1);
    if (!p)
        return NULL;
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        memcpy(p + off, iv[k].iov_base, iv[k].iov_len);
        off += iv[k].iov_len;
    }
    return p;
}

/* PROTOCOL.md: RESPONSE and INTERNAL outcomes are cached; BUSY and DEADLINE are not, and
 * 1, 2, 6 are recomputed. A reply larger than the whole cache is not kept either. */
static int cacheable(const srpc_server_t *srv, int code, uint32_t len)
{
    return (code == 0 || code == SRPC_E_INTERNAL) && len <= srv->cfg.reply_cache_bytes;
}

/* Moves a finished call's entry to the reply cache (data: its copy, NULL if not kept), or
 * forgets it (lock held). */
static void cache_reply(srpc_server_t *srv, uint32_t idx, int code, uint8_t *data, uint32_t len)
{
    if (!data || !cacheable(srv, code, len)) {
        free(data);
        ct_remove(&srv->ct, idx);
        return;
    }
    while (srv->cache_bytes + len > srv->cfg.reply_cache_bytes &&
           ct_list_head(&srv->ct, CT_LIST_DONE) != CT_NONE)
        srpc_server_drop_entry(srv, ct_list_head(&srv->ct, CT_LIST_DONE));
    ct_entry_t *e = &srv->ct.e[idx];
    e->state = CT_DONE;
    e->code = (uint16_t)code;
    e->u.done.data = data;
    e->u.done.len = len;
    srv->cache_bytes += len;
    ct_list_push(&srv->ct, idx, CT_LIST_DONE, srpc_now_ns() + (uint64_t)srv->cfg.reply_cache_us * 1000);
}

/* Sends the replies of the batch of n calls from element first (status 0: the outputs; else
 * that error with msg as text), moves the calls to the reply cache and recycles the elements.
 * Worker thread; every earlier batch of fn is finished. */
static void finish(srpc_server_t *srv, srpc_fn_t *fn, uint64_t first, uint32_t n, int status,
                   const char *msg)
{
    const uint32_t max_out = fn->raw ? fn->resp_bytes : 0;
    for (uint32_t i = 0; i < n; i++) {
        srpc_call_t *c = &fn->calls[(first + i) % fn->capacity];
        const ct_entry_t *e = &srv->ct.e[c->ct_idx]; /* stable while QUEUED: only we change it */
        c->state = CALL_WORK_COMPLETE;
        struct iovec iv[SRPC_MAX_TENSORS];
        uint32_t len;
        int k, code = status;
        char ebuf[64];
        const char *emsg = msg;
        if (!code && fn->raw && c->out_len > max_out) {
            code = SRPC_E_INTERNAL;
            emsg = ebuf;
            snprintf(ebuf, sizeof(ebuf), "reply of %u bytes over the limit %u", c->out_len, max_out);
        }
        if (code) {
            len = emsg ? (uint32_t)strnlen(emsg, SRPC_ERRMSG_MAX) : 0;
            iv[0] = (struct iovec){(void *)emsg, len};
            k = len ? 1 : 0;
        } else {
            k = reply_pieces(fn, first + i, iv, &len);
        }
        srpc_server_send(srv, &e->key, code, iv, k, len);
        c->state = CALL_TX_COMPLETE;
        c->code = (uint16_t)code;
        c->out_len = len;
        c->reply = cacheable(srv, code, len) ? copy_pieces(iv, k, len) : NULL;
    }
    pthread_mutex_lock(&srv->lock);
    for (uint32_t i = 0; i < n; i++) {
        srpc_call_t *c = &fn->calls[(first + i) % fn->capacity];
        cache_reply(srv, c->ct_idx, c->code, c->reply, c->out_len);
        c->reply = NULL;
        c->state = CALL_READY; /* recycled */
    }
    fn->done += n;
    srpc_fn_retire_voids(fn, 1);
    pthread_mutex_unlock(&srv->lock);
}

/* Finishes fn's in-flight batches, oldest first, while the oldest one's done word is set.
 * Worker thread. Returns how many were finished. */
static int finish_ready(srpc_server_t *srv, srpc_fn_t *fn)
{
    int finished = 0;
    while (fn->inflight) {
        pthread_mutex_lock(&srv->lock);
        srpc_fn_retire_voids(fn, 1);
        const uint64_t first = fn->done;
        const int handed_out = fn->done < fn->taken;
        pthread_mutex_unlock(&srv->lock);
        srpc_call_t *c0 = &fn->calls[first % fn->capacity];
        if (!handed_out || c0->batch_open) /* the oldest batch is still with the worker */
            break;
        uint32_t w = __atomic_load_n(&fn->done_words[first % fn->capacity], __ATOMIC_ACQUIRE);
        if (!(w & SRPC_DONE))
            break;
        finish(srv, fn, first, c0->batch_n, (int)(w & ~SRPC_DONE), c0->batch_msg);
        free(c0->batch_msg);
        c0->batch_msg = NULL;
        fn->inflight--;
        __atomic_store_n(&srv->inflight, srv->inflight - 1, __ATOMIC_RELAXED);
        finished++;
    }
    return finished;
}

int srpc_server_poll(srpc_server_t *srv)
{
    if (!srv)
        return -EINVAL;
    int finished = 0;
    for (uint32_t j = 0; srv->inflight && j < srv->nfns; j++)
        if (srv->fns[j]->inflight)
            finished += finish_ready(srv, srv->fns[j]);
    return finished;
}

/* The function of a batch that was handed out and is neither completed nor deferred yet,
 * else NULL. Worker thread: the batch fields of the call records are the worker's alone, so
 * no lock is needed (an open batch lies within [done, taken), which the engine leaves alone). */
srpc_fn_t *srpc_open_batch_fn(srpc_server_t *srv, const srpc_batch_t *b)
{
    if (!srv || !b || b->count == 0 || !srv->by_id[b->func_id])
        return NULL;
    srpc_fn_t *fn = srv->by_id[b->func_id];
    const srpc_call_t *c0 = &fn->calls[b->first_seq % fn->capacity];
    return c0->batch_open && c0->batch_seq == b->first_seq && c0->batch_n == b->count ? fn : NULL;
}

/* Puts an open batch in flight: from now on its done word decides. */
uint32_t *srpc_hand_back(srpc_server_t *srv, srpc_fn_t *fn, srpc_batch_t *b)
{
    fn->calls[b->first_seq % fn->capacity].batch_open = 0;
    fn->inflight++;
    __atomic_store_n(&srv->inflight, srv->inflight + 1, __ATOMIC_RELAXED);
    b->count = 0;
    return &fn->done_words[b->first_seq % fn->capacity];
}

int srpc_server_complete(srpc_server_t *srv, srpc_batch_t *b, int status, const char *msg)
{
    srpc_fn_t *fn = srpc_open_batch_fn(srv, b);
    if (!fn)
        return -EINVAL;
    if (status < 0 || status >= SRPC_E_MAX)
        status = SRPC_E_INTERNAL;
    srpc_call_t *c0 = &fn->calls[b->first_seq % fn->capacity];
    if (fn->raw) /* b->out_len is reused by the next batch: keep the lengths with the calls */
        for (uint32_t i = 0; i < b->count; i++)
            fn->calls[(b->first_seq + i) % fn->capacity].out_len = b->out_len[i];
    if (!fn->inflight && b->first_seq == fn->done) {
        /* The common case, the oldest batch with none in flight: no done word needed. */
        c0->batch_open = 0;
        finish(srv, fn, b->first_seq, b->count, status, msg);
        b->count = 0;
        return 0;
    }
    if (status && msg)
        c0->batch_msg = strndup(msg, SRPC_ERRMSG_MAX); /* NULL (no text) if out of memory */
    uint32_t *done = srpc_hand_back(srv, fn, b);
    __atomic_store_n(done, SRPC_DONE | (uint32_t)status, __ATOMIC_RELEASE);
    finish_ready(srv, fn);
    return 0;
}

int srpc_server_defer(srpc_server_t *srv, srpc_batch_t *b, uint32_t **done)
{
    srpc_fn_t *fn = srpc_open_batch_fn(srv, b);
    if (!fn || fn->raw || !done)
        return -EINVAL;
    *done = srpc_hand_back(srv, fn, b);
    return 0;
}

int srpc_server_complete_next(srpc_server_t *srv, srpc_batch_t *b, int status, const char *msg,
                              int64_t timeout_us)
{
    int r = srpc_server_complete(srv, b, status, msg);
    return r ? r : srpc_server_next_batch(srv, b, timeout_us);
}
