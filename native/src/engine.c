/* engine.c: the server's datapath thread: RX burst -> check -> reassemble -> gather into the
 * function's request Tensor Queue -> RX_COMPLETE -> wake the worker; expiry of partial
 * messages, cached replies and rejections. No Python ever runs here. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "gpu_driver.h"
#include "server_internal.h"
#include "tunables.h"

#define unlikely(x) __builtin_expect(!!(x), 0)

uint64_t srpc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int srpc_server_send(srpc_server_t *srv, const srpc_call_key_t *key, int code,
                     const struct iovec *pieces, int n, uint32_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = ct_key_to_sockaddr(key, &ss);
    srpc_hdr_t h = {.type = code ? SRPC_ERROR : SRPC_RESPONSE, .version = key->version,
                    .func_id = key->func_id, .req_id = key->req_id, .aux = (uint16_t)code};
    uint32_t seg = srpc_sockaddr_is_loopback((struct sockaddr *)&ss) ? srv->cfg.seg_size_loopback
                                                                      : srv->cfg.seg_size;
    if (code) /* an ERROR is one datagram */
        seg = SRPC_MAX_SEG_DATA;
    int r;
    if (srv->dpdk)
        r = srpc_dpdk_send_msg(srv->dpdk, (struct sockaddr *)&ss, sl, &h, pieces, n, len,
                               seg < srv->dpdk_seg ? seg : srv->dpdk_seg);
    else
        r = srpc_udp_send_msg(&srv->udp, (struct sockaddr *)&ss, sl, &h, pieces, n, len, seg);
    if (r < 0) {
        ST_ADD(srv, drops[SRPC_DROP_TX_FAILED], 1);
        return r;
    }
    ST_ADD(srv, tx_datagrams, (uint64_t)r);
    ST_ADD(srv, tx_bytes, len + (uint64_t)r * SRPC_HDR_LEN);
    if (code && code < SRPC_E_MAX)
        ST_ADD(srv, errors[code], 1);
    else if (!code)
        ST_ADD(srv, replies, 1);
    return 0;
}

int srpc_server_send_error(srpc_server_t *srv, const srpc_call_key_t *key, int code, const char *msg)
{
    size_t l = msg ? strnlen(msg, SRPC_ERRMSG_MAX) : 0;
    struct iovec iv = {(void *)msg, l};
    return srpc_server_send(srv, key, code, &iv, l ? 1 : 0, (uint32_t)l);
}

static void send_errorf(srpc_server_t *srv, const srpc_call_key_t *key, int code, const char *fmt, ...)
{
    char msg[SRPC_ERRMSG_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    srpc_server_send_error(srv, key, code, msg);
}

static void wake_worker(srpc_server_t *srv);
static unsigned settle(srpc_server_t *srv, srpc_fn_t *fn);

/* The memory caps' count of partial messages, in all and by client address: a message's
 * reassembly footprint is added when it starts and taken back when it ends. Lock held. */
static void count_partial(srpc_server_t *srv, const srpc_addr_t *a, size_t bytes)
{
    srv->reasm_bytes += bytes;
    srcmem_add(&srv->srcmem, a, bytes); /* cannot fail: one address per partial call at most */
}

static void uncount_partial(srpc_server_t *srv, const srpc_addr_t *a, const srpc_reasm_t *r)
{
    size_t bytes = srpc_reasm_footprint(r->msg_len, r->nseg);
    srv->reasm_bytes -= bytes;
    srcmem_sub(&srv->srcmem, a, bytes);
}

/* Frees a partial message's reassembly state and its share of the memory cap; when it was
 * being reassembled in a Tensor Queue element, that element is reserved no more and the
 * function is returned (else NULL). Lock held. */
static srpc_fn_t *free_partial(srpc_server_t *srv, ct_entry_t *e)
{
    uncount_partial(srv, &e->key.addr, &e->u.partial);
    srpc_reasm_free(&e->u.partial, &srv->pool);
    if (!e->placed)
        return NULL;
    srpc_fn_t *fn = srv->by_id[e->key.func_id];
    fn->reserved--;
    e->placed = 0;
    return fn;
}

void srpc_server_drop_entry(srpc_server_t *srv, uint32_t idx)
{
    ct_entry_t *e = &srv->ct.e[idx];
    if (e->state == CT_PARTIAL) {
        srpc_fn_t *fn = free_partial(srv, e);
        if (fn) { /* its reserved element will never be filled: skip it */
            fn->calls[e->placed_seq % fn->capacity].state = CALL_VOID;
            if (settle(srv, fn))
                wake_worker(srv);
        }
    } else if (e->state == CT_DONE) {
        srv->cache_bytes -= e->u.done.len;
        free(e->u.done.data);
    }
    ct_remove(&srv->ct, idx);
}

int srpc_server_evict_one(srpc_server_t *srv)
{
    uint32_t i = ct_list_head(&srv->ct, CT_LIST_REJECTED);
    if (i == CT_NONE)
        i = ct_list_head(&srv->ct, CT_LIST_DONE);
    if (i == CT_NONE)
        return -ENOSPC;
    srpc_server_drop_entry(srv, i);
    return 0;
}

static uint32_t insert_entry(srpc_server_t *srv, const srpc_call_key_t *k, uint8_t state)
{
    uint32_t i = ct_insert(&srv->ct, k, state);
    if (i == CT_NONE && srpc_server_evict_one(srv) == 0)
        i = ct_insert(&srv->ct, k, state);
    if (i == CT_NONE)
        ST_ADD(srv, drops[SRPC_DROP_TABLE_FULL], 1);
    return i;
}

/* Remembers that a multi-segment message was answered with an error, so its other segments
 * are ignored (PROTOCOL.md: "the message's other segments are then ignored"). */
static void reject(srpc_server_t *srv, const srpc_call_key_t *k, const srpc_hdr_t *h, int code,
                   const char *fmt, ...)
{
    char msg[SRPC_ERRMSG_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    srpc_server_send_error(srv, k, code, msg);
    if (h->nseg > 1) {
        uint32_t i = insert_entry(srv, k, CT_REJECTED);
        if (i != CT_NONE) {
            srv->ct.e[i].code = (uint16_t)code;
            srv->ct.e[i].u.rejected.seq = h->seq;
            ct_list_push(&srv->ct, i, CT_LIST_REJECTED,
                         srpc_now_ns() + (uint64_t)srv->cfg.reasm_timeout_us * 1000);
        }
    }
}

/* Moves ready_end over the settled elements that follow it (RX_COMPLETE or VOID) and makes
 * the RX_COMPLETE ones available to the worker; returns how many. Lock held. */
static unsigned settle(srpc_server_t *srv, srpc_fn_t *fn)
{
    unsigned ready = 0;
    for (; fn->ready_end < fn->head; fn->ready_end++) {
        uint8_t st = fn->calls[fn->ready_end % fn->capacity].state;
        if (st == CALL_RX_COMPLETE)
            ready++;
        else if (st != CALL_VOID)
            break; /* RESERVED: later calls wait, so batches keep arrival order */
    }
    srpc_fn_retire_voids(fn, 0);
    if (ready)
        atomic_fetch_add(&srv->n_ready, ready);
    return ready;
}

/* Records the request in element seq (filled) in the Inference Monitor as RX_COMPLETE and
 * queues it for the worker. Lock held. */
static void mark_complete(srpc_server_t *srv, srpc_fn_t *fn, uint32_t ct_idx, uint64_t seq, uint32_t len,
                          int dev_in)
{
    srpc_call_t *c = &fn->calls[seq % fn->capacity];
    c->state = CALL_RX_COMPLETE;
    c->dev_in = (uint8_t)dev_in;
    c->ct_idx = ct_idx;
    c->in_len = len;
    c->rx_ns = srpc_now_ns();
    ct_entry_t *e = &srv->ct.e[ct_idx];
    e->state = CT_QUEUED;
    e->u.queued.seq = seq;
    ST_ADD(srv, calls, 1);
    settle(srv, fn);
}

/* Queues on rx_stream the copies of a request whose data stayed in GPU memory (dev) into
 * element seq of fn's input queues, as srpc_tq_scatter lays it out: device to device into the
 * device TQs of a GPU function, device to host into the TQs of a host function. They are
 * complete before the burst's calls become visible (srpc_engine_rx_step). Lock held. */
static int copy_in_dev(srpc_server_t *srv, srpc_fn_t *fn, uint64_t seq, uint64_t dev, uint32_t len)
{
    uint32_t off = 0;
    for (uint32_t k = 0; k < fn->n_in && off < len; k++) {
        uint32_t n = fn->n_in == 1 ? len : fn->in_size[k];
        int r = fn->gpu_device >= 0
                    ? srpc_gpu_copy_dtod(srpc_dtq_elem(fn->in_dtq[k], seq), dev + off, n, srv->rx_stream)
                    : srpc_gpu_copy_dtoh(srpc_tq_elem(fn->in_tq[k], seq), dev + off, n, srv->rx_stream);
        if (r)
            return r;
        off += n;
    }
    srv->rx_dev_calls[srv->rx_dev_copies++] = (struct srpc_dev_call){fn, seq}; /* one per datagram */
    return 0;
}

/* Copies a whole request (host data, or dev != 0: its device address) into element fn->head
 * of the function's input TQs and marks it RX_COMPLETE. Lock held; the caller checked that
 * there is room. */
static void enqueue(srpc_server_t *srv, srpc_fn_t *fn, uint32_t ct_idx, const uint8_t *data, uint32_t len,
                    uint64_t dev)
{
    if (unlikely(dev) && copy_in_dev(srv, fn, fn->head, dev, len) != 0) {
        srpc_call_key_t k = srv->ct.e[ct_idx].key;
        srpc_server_drop_entry(srv, ct_idx);
        send_errorf(srv, &k, SRPC_E_INTERNAL, "copy from GPU memory failed: %s", srpc_gpu_last_error());
        return;
    }
    uint64_t seq = fn->head++;
    /* Cannot fail: new_call checked len against the function's sizes (raw: len <= in_size[0],
     * one input; fixed: len == the sum of in_size). */
    if (!dev)
        (void)srpc_tq_scatter(fn->in_tq, fn->in_size, fn->n_in, seq, data, len);
    mark_complete(srv, fn, ct_idx, seq, len, dev && fn->gpu_device >= 0 ? SRPC_DEV_IN_DEVICE : SRPC_DEV_IN_HOST);
}

static int tq_full(const srpc_fn_t *fn) { return fn->head - fn->done >= fn->capacity; }

/* Re-sends what a finished call answered (a retransmitted segment 0). */
static void resend_cached(srpc_server_t *srv, const ct_entry_t *e)
{
    struct iovec iv = {e->u.done.data, e->u.done.len};
    if (srpc_server_send(srv, &e->key, e->code, &iv, e->u.done.len ? 1 : 0, e->u.done.len) == 0)
        ST_ADD(srv, cache_hits, 1);
}

/* A segment of a call the table already knows. */
static void known_call(srpc_server_t *srv, uint32_t idx, const srpc_hdr_t *h, uint32_t seg,
                       const uint8_t *data, uint32_t dlen)
{
    ct_entry_t *e = &srv->ct.e[idx];
    switch (e->state) {
    case CT_QUEUED:
        ST_ADD(srv, drops[SRPC_DROP_DUPLICATE], 1);
        return;
    case CT_DONE:
        if (h->seq == 0)
            resend_cached(srv, e);
        else
            ST_ADD(srv, drops[SRPC_DROP_DUPLICATE], 1);
        return;
    case CT_REJECTED: /* only a retransmission of the segment that showed the error is answered */
        if (h->seq == e->u.rejected.seq)
            srpc_server_send_error(srv, &e->key, e->code, NULL);
        else
            ST_ADD(srv, drops[SRPC_DROP_REJECTED], 1);
        return;
    case CT_PARTIAL:
        break;
    default:
        return;
    }
    int r = srpc_reasm_add(&e->u.partial, h, seg, data, dlen);
    if (r == -EALREADY) {
        ST_ADD(srv, drops[SRPC_DROP_DUPLICATE], 1);
        return;
    }
    if (r < 0) { /* disagrees with the message: PROTOCOL.md drops the whole message */
        ST_ADD(srv, drops[SRPC_DROP_INCONSISTENT], 1);
        srpc_server_drop_entry(srv, idx);
        return;
    }
    if (r == 0)
        return;
    srpc_fn_t *fn = srv->by_id[h->func_id];
    if (e->placed) { /* already in its element: nothing to copy */
        uint32_t len = e->u.partial.msg_len;
        ct_list_unlink(&srv->ct, idx);
        free_partial(srv, e);
        mark_complete(srv, fn, idx, e->placed_seq, len, SRPC_DEV_IN_HOST);
        return;
    }
    if (tq_full(fn)) {
        srpc_call_key_t k = e->key;
        srpc_server_drop_entry(srv, idx);
        send_errorf(srv, &k, SRPC_E_BUSY, "queue of function %u is full", h->func_id);
        return;
    }
    srpc_reasm_t p = e->u.partial;
    uncount_partial(srv, &e->key.addr, &p);
    ct_list_unlink(&srv->ct, idx);
    enqueue(srv, fn, idx, p.buf, p.msg_len, 0);
    srpc_reasm_free(&p, &srv->pool);
}

/* The first segment seen of a new call (dev: see enqueue; one-segment requests only). */
static void new_call(srpc_server_t *srv, const srpc_call_key_t *k, const srpc_hdr_t *h,
                     uint32_t seg, const uint8_t *data, uint32_t dlen, uint64_t dev)
{
    srpc_fn_t *fn = srv->by_id[h->func_id];
    if (unlikely(!fn)) {
        reject(srv, k, h, SRPC_E_UNKNOWN_FUNCTION, "no function %u", h->func_id);
        return;
    }
    uint32_t limit = fn->raw ? fn->req_bytes : srv->cfg.max_message;
    if (unlikely(h->msg_len > limit || h->msg_len > srv->cfg.max_message)) {
        reject(srv, k, h, SRPC_E_TOO_LARGE, "request of %u bytes, limit %u", h->msg_len,
               limit < srv->cfg.max_message ? limit : srv->cfg.max_message);
        return;
    }
    if (unlikely(!fn->raw && h->msg_len != fn->req_bytes)) {
        reject(srv, k, h, SRPC_E_BAD_REQUEST, "function %u takes %u bytes, got %u", h->func_id,
               fn->req_bytes, h->msg_len);
        return;
    }
    if (h->nseg == 1) {
        if (unlikely(tq_full(fn))) {
            send_errorf(srv, k, SRPC_E_BUSY, "queue of function %u is full", h->func_id);
            return;
        }
        uint32_t idx = insert_entry(srv, k, CT_QUEUED);
        if (idx != CT_NONE)
            enqueue(srv, fn, idx, data, dlen, dev);
        return;
    }
    if (unlikely(dev)) { /* the transport hands on device addresses of one-segment requests only */
        ST_ADD(srv, drops[SRPC_DROP_BAD_SEGMENT], 1);
        return;
    }
    size_t need = srpc_reasm_footprint(h->msg_len, h->nseg);
    if (unlikely(srv->reasm_bytes + need > srv->cfg.reasm_mem_cap)) {
        ST_ADD(srv, drops[SRPC_DROP_MEM_CAP], 1);
        return;
    }
    if (unlikely(srcmem_get(&srv->srcmem, &k->addr) + need > srv->cfg.reasm_mem_cap_client)) {
        ST_ADD(srv, drops[SRPC_DROP_CLIENT_MEM_CAP], 1);
        return;
    }
    uint32_t idx = insert_entry(srv, k, CT_PARTIAL);
    if (idx == CT_NONE)
        return;
    ct_entry_t *e = &srv->ct.e[idx];
    /* One input tensor: the message is the element's bytes, so reassemble it in place. */
    int place = fn->n_in == 1 && !tq_full(fn) && fn->reserved < fn->capacity / SRPC_PLACE_MAX_FRACTION;
    int r = place ? srpc_reasm_init_at(&e->u.partial, h, seg, srpc_tq_elem(fn->in_tq[0], fn->head))
                  : srpc_reasm_init(&e->u.partial, h, seg, &srv->pool);
    if (r != 0) {
        ct_remove(&srv->ct, idx);
        ST_ADD(srv, drops[SRPC_DROP_MEM_CAP], 1);
        return;
    }
    e->placed = (uint8_t)place;
    if (place) {
        e->placed_seq = fn->head++;
        srpc_call_t *c = &fn->calls[e->placed_seq % fn->capacity];
        c->state = CALL_RESERVED;
        c->dev_in = SRPC_DEV_IN_HOST; /* also if it ends VOID: never a stale FAILED */
        c->ct_idx = idx;
        c->rx_ns = srpc_now_ns(); /* RESERVED: since when (unblock_reserved) */
        fn->reserved++;
    }
    count_partial(srv, &k->addr, need);
    ct_list_push(&srv->ct, idx, CT_LIST_PARTIAL, srpc_now_ns() + (uint64_t)srv->cfg.reasm_timeout_us * 1000);
    srpc_reasm_add(&e->u.partial, h, seg, data, dlen); /* first segment: cannot fail */
}

/* One datagram, hostile until checked. Lock held. */
static void process_datagram(srpc_server_t *srv, unsigned i, const struct mmsghdr *m)
{
    uint32_t total = m->msg_len;
    ST_ADD(srv, rx_datagrams, 1);
    ST_ADD(srv, rx_bytes, total);
    if (unlikely(srv->allow.n && !srpc_allowlist_match(&srv->allow, (const struct sockaddr *)&srv->rx.src[i]))) {
        ST_ADD(srv, drops[SRPC_DROP_NOT_ALLOWED], 1);
        return;
    }
    if (unlikely(m->msg_hdr.msg_flags & MSG_TRUNC)) {
        ST_ADD(srv, drops[SRPC_DROP_TRUNCATED], 1);
        return;
    }
    srpc_hdr_t h;
    int r = srpc_hdr_decode(srpc_rx_hdr(&srv->rx, i), total < SRPC_HDR_LEN ? total : SRPC_HDR_LEN, &h);
    if (unlikely(r < 0)) {
        ST_ADD(srv, drops[r == -EMSGSIZE ? SRPC_DROP_SHORT : r == -EPROTO ? SRPC_DROP_BAD_SEGMENT
                          : r == -EILSEQ ? SRPC_DROP_BAD_CHECK : SRPC_DROP_BAD_HEADER], 1);
        return;
    }
    if (unlikely(h.type != SRPC_REQUEST)) {
        ST_ADD(srv, drops[SRPC_DROP_NOT_REQUEST], 1);
        return;
    }
    uint32_t dlen = total - SRPC_HDR_LEN, seg;
    if (unlikely(srpc_seg_check(&h, dlen, &seg) < 0)) {
        ST_ADD(srv, drops[SRPC_DROP_BAD_SEGMENT], 1);
        return;
    }
    const struct sockaddr *src = (const struct sockaddr *)&srv->rx.src[i];
    if (unlikely(src->sa_family != AF_INET && src->sa_family != AF_INET6))
        return;
    srpc_call_key_t k;
    ct_key_from_sockaddr(&k, src, &h);
    uint32_t idx = ct_find(&srv->ct, &k);
    /* A one-segment request whose data stayed in GPU memory (DPDK, payload pool on a GPU): dev
     * is its address and the data slot is unused. A known call never reads it: a duplicate
     * reads no data, and a partial message disagrees with it (nseg) before any copy. */
    const uint64_t dev = srv->rx.dev[i];
    const uint8_t *data = dev ? NULL : srpc_rx_data(&srv->rx, i);
    /* receiving in place: sockets only, and not through a fault injector (testing builds) */
    if (h.nseg > 1 && dlen >= SRPC_DIRECT_MIN && !srv->dpdk && !srv->udp.rx_faults)
        srv->direct_hint = 1;
    if (idx != CT_NONE)
        known_call(srv, idx, &h, seg, data, dlen);
    else
        new_call(srv, &k, &h, seg, data, dlen, dev);
}

/* Whether a call behind fn's first unsettled element is RX_COMPLETE. Lock held. */
static int complete_behind(const srpc_fn_t *fn)
{
    for (uint64_t s = fn->ready_end + 1; s < fn->head; s++)
        if (fn->calls[s % fn->capacity].state == CALL_RX_COMPLETE)
            return 1;
    return 0;
}

/* A call completed behind a message being reassembled in its Tensor Queue element waits for
 * it, since batches keep arrival order. A message still partial SRPC_UNPLACE_AFTER_US after it
 * took its element (a segment lost, or a sender that never finishes) moves to a pool buffer and
 * gives the element up, so it holds nobody back for longer. Lock held. */
static void unblock_reserved(srpc_server_t *srv, uint64_t now)
{
    for (uint32_t f = 0; f < srv->nfns; f++) {
        srpc_fn_t *fn = srv->fns[f];
        while (fn->reserved && fn->ready_end < fn->head) {
            srpc_call_t *c = &fn->calls[fn->ready_end % fn->capacity];
            if (c->state != CALL_RESERVED || now - c->rx_ns < SRPC_UNPLACE_AFTER_US * 1000ull ||
                !complete_behind(fn))
                break;
            ct_entry_t *e = &srv->ct.e[c->ct_idx];
            if (srpc_reasm_unborrow(&e->u.partial, &srv->pool) != 0)
                break; /* no memory now: it waits for its completion or expiry */
            e->placed = 0;
            fn->reserved--;
            c->state = CALL_VOID;
            ST_ADD(srv, unplaced, 1);
            if (settle(srv, fn))
                wake_worker(srv);
        }
    }
}

/* Expires partial messages, cached replies and rejections; unblocks queues. Lock held. */
static void run_timers(srpc_server_t *srv, uint64_t now)
{
    const unsigned gen = atomic_load(&srv->ready_gen);
    unblock_reserved(srv, now);
    static const uint8_t lists[] = {CT_LIST_PARTIAL, CT_LIST_DONE, CT_LIST_REJECTED};
    for (unsigned l = 0; l < sizeof(lists); l++) {
        uint32_t i;
        while ((i = ct_list_head(&srv->ct, lists[l])) != CT_NONE && srv->ct.e[i].expires_ns <= now) {
            if (lists[l] == CT_LIST_PARTIAL)
                ST_ADD(srv, drops[SRPC_DROP_REASM_TIMEOUT], 1);
            srpc_server_drop_entry(srv, i);
        }
    }
    /* Calls behind an expired or moved partial message became ready: a worker asleep in
     * poll() on the socket (block mode) would not see it until a datagram came; wake it. */
    if (atomic_load(&srv->ready_gen) != gen) {
        uint64_t one = 1;
        if (write(srv->wakefd, &one, sizeof(one)) < 0) { /* the counter is set already */ }
    }
}

static void wake_worker(srpc_server_t *srv)
{
    atomic_fetch_add(&srv->ready_gen, 1);
    if (atomic_load(&srv->worker_sleeping))
        srpc_futex_wake(&srv->ready_gen);
}

/* Receives the next datagram straight into its place in a message being reassembled, when it
 * is a large, new, consistent segment of one: its header and source are peeked first and
 * checked, and the ct lock is held across the receive so the buffer cannot expire meanwhile.
 * Returns 1 when a datagram was handled, 0 when none was waiting, -1 when the next one must
 * take the burst path. Caller holds rx_lock. */
static int rx_direct(srpc_server_t *srv)
{
    uint8_t *hb = srpc_rx_hdr(&srv->rx, 0);
    struct sockaddr_storage src;
    struct iovec iv = {hb, SRPC_HDR_LEN};
    struct msghdr m = {.msg_name = &src, .msg_namelen = sizeof(src), .msg_iov = &iv, .msg_iovlen = 1};
    ssize_t len = recvmsg(srv->udp.fd, &m, MSG_PEEK | MSG_DONTWAIT | MSG_TRUNC); /* full length */
    if (len < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    srpc_hdr_t h;
    uint32_t seg;
    if (len < SRPC_HDR_LEN + SRPC_DIRECT_MIN || len > SRPC_HDR_LEN + SRPC_MAX_SEG_DATA ||
        srpc_hdr_decode(hb, SRPC_HDR_LEN, &h) < 0 || h.type != SRPC_REQUEST || h.nseg < 2 ||
        srpc_seg_check(&h, (size_t)len - SRPC_HDR_LEN, &seg) < 0 ||
        (src.ss_family != AF_INET && src.ss_family != AF_INET6) ||
        (srv->allow.n && !srpc_allowlist_match(&srv->allow, (struct sockaddr *)&src)))
        return -1; /* the burst path takes (and counts) it */
    const uint32_t dlen = (uint32_t)len - SRPC_HDR_LEN;
    srpc_call_key_t k;
    ct_key_from_sockaddr(&k, (struct sockaddr *)&src, &h);
    pthread_mutex_lock(&srv->lock);
    uint32_t idx = ct_find(&srv->ct, &k);
    uint8_t *dst = idx != CT_NONE && srv->ct.e[idx].state == CT_PARTIAL
                       ? srpc_reasm_slot(&srv->ct.e[idx].u.partial, &h, seg, dlen) : NULL;
    if (!dst) {
        pthread_mutex_unlock(&srv->lock);
        return -1;
    }
    uint8_t peeked[SRPC_HDR_LEN];
    memcpy(peeked, hb, SRPC_HDR_LEN);
    struct iovec iv2[2] = {{hb, SRPC_HDR_LEN}, {dst, dlen}}; /* writes at most dlen into the slot */
    struct msghdr m2 = {.msg_iov = iv2, .msg_iovlen = 2};
    ssize_t got = recvmsg(srv->udp.fd, &m2, MSG_DONTWAIT);
    ST_ADD(srv, rx_datagrams, 1);
    ST_ADD(srv, rx_bytes, got > 0 ? (uint64_t)got : 0);
    if (unlikely(got != len || memcmp(peeked, hb, SRPC_HDR_LEN) != 0)) {
        /* Not the datagram peeked (cannot happen with one receiver): its bytes may sit in the
         * slot, which stays unmarked, so the real segment overwrites them later. */
        ST_ADD(srv, drops[SRPC_DROP_INCONSISTENT], 1);
    } else {
        ST_ADD(srv, rx_in_place, 1);
        known_call(srv, idx, &h, seg, dst, dlen); /* marks the segment; copies nothing */
    }
    pthread_mutex_unlock(&srv->lock);
    return 1;
}

int srpc_engine_feed(srpc_server_t *srv, const uint8_t *dgram, size_t len, const struct sockaddr *src,
                     socklen_t srclen)
{
    if (!srv || (!dgram && len) || !src || srclen > (socklen_t)sizeof(struct sockaddr_storage) || len > UINT32_MAX)
        return -EINVAL;
    pthread_mutex_lock(&srv->rx_lock);
    srpc_rx_t *rx = &srv->rx;
    size_t h = len < SRPC_HDR_LEN ? len : SRPC_HDR_LEN, d = len - h;
    int trunc = d > rx->data_cap;
    if (h)
        memcpy(srpc_rx_hdr(rx, 0), dgram, h);
    if (d)
        memcpy(srpc_rx_data(rx, 0), dgram + h, trunc ? rx->data_cap : d);
    memset(&rx->src[0], 0, sizeof(rx->src[0]));
    memcpy(&rx->src[0], src, srclen);
    struct mmsghdr *m = &rx->msgs[0];
    m->msg_len = (unsigned)len;
    m->msg_hdr.msg_name = &rx->src[0];
    m->msg_hdr.msg_namelen = srclen;
    m->msg_hdr.msg_flags = trunc ? MSG_TRUNC : 0;
    uint64_t calls0 = srv->st.calls;
    pthread_mutex_lock(&srv->lock);
    process_datagram(srv, 0, m);
    pthread_mutex_unlock(&srv->lock);
    if (srv->st.calls != calls0)
        wake_worker(srv);
    pthread_mutex_unlock(&srv->rx_lock);
    return 0;
}

void srpc_engine_run_timers(srpc_server_t *srv, uint64_t now_ns)
{
    pthread_mutex_lock(&srv->lock);
    run_timers(srv, now_ns);
    pthread_mutex_unlock(&srv->lock);
}

/* Waits for the burst's copies out of GPU memory. If they failed, the calls they were for are
 * marked so that the worker answers them INTERNAL instead of running them on whatever their
 * elements held before (take_batch). Lock held. */
static void finish_dev_copies(srpc_server_t *srv)
{
    unsigned n = srv->rx_dev_copies;
    srv->rx_dev_copies = 0;
    if (srpc_gpu_stream_sync(srv->rx_stream) == 0)
        return;
    for (unsigned i = 0; i < n; i++) {
        srpc_fn_t *fn = srv->rx_dev_calls[i].fn;
        fn->calls[srv->rx_dev_calls[i].seq % fn->capacity].dev_in = SRPC_DEV_IN_FAILED;
        fn->dev_failed++;
    }
}

int srpc_engine_rx_step(srpc_server_t *srv)
{
    uint64_t calls0 = srv->st.calls; /* written only under rx_lock, by enqueue */
    int n = 0, r = -1;
    while (srv->direct_hint && n < (int)srv->rx.burst && (r = rx_direct(srv)) > 0)
        n++;
    if (r != 0) { /* r < 0: the next datagram takes the burst path (one only, if in place may follow) */
        int m = srv->dpdk ? srpc_dpdk_rx_burst(srv->dpdk, &srv->rx, srv->rx.burst)
                          : srpc_rx_burst(&srv->udp, &srv->rx, srv->direct_hint ? 1 : srv->rx.burst);
        if (m > 0) {
            srv->direct_hint = 0; /* process_datagram sets it again for large segments */
            srpc_CUcontext saved = NULL; /* the copies out of GPU memory run in the payloads' context */
            int gpu = srv->rx_stream && srpc_gpu_enter(srpc_dpdk_payload_device(srv->dpdk), &saved) == 0;
            pthread_mutex_lock(&srv->lock);
            for (int i = 0; i < m; i++)
                process_datagram(srv, (unsigned)i, &srv->rx.msgs[i]);
            if (srv->rx_dev_copies)
                finish_dev_copies(srv); /* before the worker may see the calls */
            pthread_mutex_unlock(&srv->lock);
            if (gpu)
                srpc_gpu_leave(saved);
            n += m;
        }
        if (srv->dpdk)
            srpc_dpdk_rx_release(srv->dpdk); /* the frames whose data was copied from */
    }
    if (srv->st.calls != calls0)
        wake_worker(srv);
    return n;
}

void srpc_engine_kick(srpc_server_t *srv)
{
    atomic_fetch_add(&srv->e_gen, 1);
    srpc_futex_wake(&srv->e_gen);
}

/* How long the engine thread may leave receiving to the worker (0: it must receive now).
 * The worker receives while it waits in next_batch, and is trusted for rx_takeover_us after
 * it left for a callback. */
static int64_t worker_covers_us(srpc_server_t *srv, uint64_t now)
{
    int st = atomic_load(&srv->w_state);
    if (st == W_POLLING)
        return SRPC_TIMER_PERIOD_US;
    if (st == W_BLOCKED) /* an idle server: wake rarely, but soon enough to take over */
        return 10 * SRPC_TIMER_PERIOD_US;
    uint64_t until = atomic_load(&srv->w_away_since) + (uint64_t)srv->cfg.rx_takeover_us * 1000;
    return until > now ? (int64_t)((until - now) / 1000) + 1 : 0;
}

void *srpc_engine_main(void *arg)
{
    srpc_server_t *srv = arg;
    uint64_t next_timer = 0;
    while (!atomic_load_explicit(&srv->stopping, memory_order_relaxed)) {
        uint64_t now = srpc_now_ns();
        if (now >= next_timer) {
            pthread_mutex_lock(&srv->lock);
            run_timers(srv, now);
            pthread_mutex_unlock(&srv->lock);
            next_timer = now + SRPC_TIMER_PERIOD_US * 1000ull;
        }
        unsigned gen = atomic_load(&srv->e_gen);
        int64_t covered = worker_covers_us(srv, now);
        if (covered > 0) { /* the worker receives: sleep until it may need us */
            srpc_futex_wait(&srv->e_gen, gen, covered);
            continue;
        }
        if (pthread_mutex_trylock(&srv->rx_lock) != 0) { /* the worker is back */
            srpc_futex_wait(&srv->e_gen, gen, 100);
            continue;
        }
        int n = srpc_engine_rx_step(srv);
        pthread_mutex_unlock(&srv->rx_lock);
        if (n > 0 || srv->dpdk) /* a DPDK port has nothing to sleep on: poll it */
            continue;
        struct pollfd p[2] = {{.fd = srv->udp.fd, .events = POLLIN}, {.fd = srv->stopfd, .events = POLLIN}};
        poll(p, 2, 1); /* re-read w_state at least every ms */
    }
    return NULL;
}
