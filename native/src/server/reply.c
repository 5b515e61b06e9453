/* reply.c: what the server sends and remembers (see reply.h): replies and error replies through the transport, the reply log, rejections. */
#include "server/reply.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/auth.h"
#include "core/session.h"
#include "core/tunables.h"
#include "core/wire.h"

/* ---------------------------------------------------------------- sending */

void srpc_reply_add(srpc_server_t *srv, srpc_reply_batch_t *b, const srpc_call_key_t *key, const uint8_t *secret,
                    int code, const struct iovec *pieces, int n, uint32_t len)
{
    const unsigned i = b->n++;
    srpc_tx_msg_t *m = &b->msg[i];
    m->dstlen = ct_key_to_sockaddr(key, &b->dst[i]);
    m->dst = (const struct sockaddr *)&b->dst[i];
    m->hdr = (srpc_hdr_t){.type = code ? SRPC_ERROR : SRPC_RESPONSE, .version = key->version,
                          .func_id = key->func_id, .req_id = key->req_id, .aux = (uint16_t)code};
    uint32_t seg = srpc_sockaddr_is_loopback(m->dst) ? srv->cfg.seg_size_loopback : srv->cfg.seg_size;
    if (code) /* an ERROR is one datagram */
        seg = SRPC_MAX_SEG_DATA;
    m->seg_size = seg < srv->tp->max_seg ? seg : srv->tp->max_seg;
    for (int k = 0; k < n; k++)
        b->iov[i][k] = pieces[k];
    m->pieces = b->iov[i];
    m->npieces = n;
    m->len = len;
    m->result = 0;
    m->auth.key_id = key->key_id;
    m->auth.secret = secret;
    m->auth.sender = key->version == SRPC_VERSION_5 ? key->seal_session : srv->auth_sender; /* v5: the session */
    m->auth.counter = &srv->auth_counter;
    m->auth.encrypt = key->encrypt;
}

void srpc_reply_flush(srpc_server_t *srv, srpc_reply_batch_t *b)
{
    if (!b->n)
        return;
    srpc_tp_send(srv->tp, b->msg, b->n);
    for (unsigned i = 0; i < b->n; i++) {
        const srpc_tx_msg_t *m = &b->msg[i];
        if (m->result < 0) {
            ST_ADD(srv, drops[SRPC_DROP_TX_FAILED], 1);
            continue;
        }
        ST_ADD(srv, tx_datagrams, (uint64_t)m->result);
        ST_ADD(srv, tx_bytes, m->len + (uint64_t)m->result *
                                           (SRPC_HDR_LEN + (m->hdr.version == SRPC_VERSION_5
                                                                ? srpc_v5_tail_len(m->auth.encrypt)
                                                                : srpc_tail_len(m->hdr.version))));
        const int code = m->hdr.aux;
        if (m->hdr.type == SRPC_ERROR && code < SRPC_E_MAX) {
            ST_ADD(srv, errors[code], 1);
            srpc_fn_t *fn = srv->by_id[m->hdr.func_id]; /* read-only once started; NULL: no such function */
            if (fn)
                FN_ADD(fn, errors[code], 1);
        }
        else if (m->hdr.type == SRPC_RESPONSE)
            ST_ADD(srv, replies, 1);
    }
    b->n = 0;
}

/* ---------------------------------------------------------------- replies held across batches */

int srpc_reply_hold_init(srpc_server_t *srv)
{
    srv->held = calloc(1, sizeof(*srv->held));
    return srv->held ? 0 : -ENOMEM;
}

void srpc_reply_hold_free(srpc_server_t *srv)
{
    srpc_reply_hold_t *h = srv->held;
    if (!h)
        return;
    for (unsigned i = 0; i < h->b.n; i++)
        free(h->own[i]);
    free(h);
    srv->held = NULL;
}

unsigned srpc_reply_hold_slot_w(srpc_server_t *srv)
{
    if (srv->held->b.n == SRPC_REPLY_BATCH)
        srpc_reply_hold_flush_w(srv);
    return srv->held->b.n;
}

void srpc_reply_hold_add_w(srpc_server_t *srv, srpc_fn_t *fn, uint64_t seq, uint32_t ct_idx, int code, char *own,
                           const struct iovec *pieces, int n, uint32_t len)
{
    SRPC_ASSERT_WORKER(srv);
    srpc_reply_hold_t *h = srv->held;
    const unsigned i = h->b.n;
    assert(i < SRPC_REPLY_BATCH);
    if (i == 0) {
        h->since_ns = srpc_now_ns();
        h->bytes = 0;
    }
    h->bytes += len;
    srpc_reply_add(srv, &h->b, &srv->ct.e[ct_idx].key, srv->ct.e[ct_idx].secret, code, pieces, n, len);
    h->fn[i] = fn;
    h->ct_idx[i] = ct_idx;
    h->own[i] = own;
    if (fn->held++ == 0)
        fn->held_first = seq;
}

void srpc_reply_hold_flush_w(srpc_server_t *srv)
{
    srpc_reply_hold_t *h = srv->held;
    const unsigned n = h->b.n;
    if (!n)
        return;
    SRPC_ASSERT_WORKER(srv);
    srpc_reply_flush(srv, &h->b); /* empties b; its messages stay readable until the next add */
    ST_ADD(srv, tx_sends, 1);
    srpc_srv_lock(srv);
    for (unsigned i = 0; i < n; i++) {
        const srpc_tx_msg_t *m = &h->b.msg[i]; /* its code: an ERROR's aux (srpc_reply_add) */
        srpc_reply_cache_locked(srv, h->ct_idx[i], m->hdr.type == SRPC_ERROR ? m->hdr.aux : 0, m->pieces,
                                m->npieces, m->len);
    }
    srpc_srv_unlock(srv);
    for (unsigned i = 0; i < n; i++) {
        free(h->own[i]);
        h->own[i] = NULL;
        h->fn[i]->held = 0;
    }
    h->kept = 0;
}

void srpc_reply_hold_check_w(srpc_server_t *srv, const srpc_fn_t *fn, const srpc_batch_t *b, uint64_t now)
{
    const srpc_reply_hold_t *h = srv->held;
    if (!h->b.n)
        return;
    const int reuses = fn->held && b->first_seq + b->count > fn->held_first + fn->capacity;
    if (reuses || now - h->since_ns + fn->away_ns > srv->cfg.reply_hold_us * 1000ull)
        srpc_reply_hold_flush_w(srv);
    else
        srv->held->kept = 1;
}

void srpc_reply_errors_flush_rx(srpc_server_t *srv)
{
    SRPC_ASSERT_RX(srv);
    srpc_errq_t *q = &srv->rx.errq;
    srpc_reply_batch_t b;
    b.n = 0;
    for (unsigned i = 0; i < q->n; i++) {
        if (b.n == SRPC_REPLY_BATCH)
            srpc_reply_flush(srv, &b);
        struct iovec iv = {q->text[i], q->len[i]};
        srpc_reply_add(srv, &b, &q->key[i], q->secret[i], q->code[i], &iv, q->len[i] ? 1 : 0, q->len[i]);
    }
    srpc_reply_flush(srv, &b);
    for (unsigned i = 0; i < q->n; i++)
        if (q->key[i].version >= SRPC_VERSION_4) /* the copies of keys' secrets (or session keys), sent with */
            srpc_auth_wipe(q->secret[i], sizeof(q->secret[i]));
    q->n = 0;
}

void srpc_reply_error_rx(srpc_server_t *srv, const srpc_call_key_t *key, int code, const char *fmt, ...)
{
    SRPC_ASSERT_RX(srv);
    srpc_errq_t *q = &srv->rx.errq;
    if (q->n == SRPC_ERRQ_MAX)
        srpc_reply_errors_flush_rx(srv);
    const unsigned i = q->n++;
    va_list ap;
    va_start(ap, fmt);
    int l = vsnprintf(q->text[i], sizeof(q->text[i]), fmt, ap);
    va_end(ap);
    q->len[i] = (uint16_t)(l < 0 ? 0 : l > SRPC_ERRMSG_MAX ? SRPC_ERRMSG_MAX : l);
    q->key[i] = *key;
    q->code[i] = (uint16_t)code;
    if (key->version >= SRPC_VERSION_4 && srv->rx.auth_secret) /* a version 4 or 5 datagram is being handled */
        memcpy(q->secret[i], srv->rx.auth_secret, SRPC_AUTH_SECRET_LEN);
}

/* ---------------------------------------------------------------- the reply log */

int srpc_reply_log_init(srpc_reply_log_t *log, uint64_t cap)
{
    memset(log, 0, sizeof(*log));
    if (cap == 0)
        return 0;
    /* Reserved, not committed: pages are touched as replies are cached. */
    void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return -ENOMEM;
    log->base = p;
    log->cap = cap;
    return 0;
}

void srpc_reply_log_free(srpc_reply_log_t *log)
{
    if (log->base)
        munmap(log->base, log->cap);
    memset(log, 0, sizeof(*log));
}

int srpc_reply_cacheable(const srpc_server_t *srv, int code, uint32_t len)
{
    return (code == 0 || code == SRPC_E_INTERNAL) && len <= srv->log.cap;
}

/* Drops the oldest cached reply; the log's tail moves to the next one. */
static void drop_oldest_done(srpc_server_t *srv)
{
    uint32_t i = ct_list_head(&srv->ct, CT_LIST_DONE);
    ct_remove(&srv->ct, i);
    uint32_t next = ct_list_head(&srv->ct, CT_LIST_DONE);
    srv->log.tail = next != CT_NONE ? srv->ct.e[next].u.done.off : srv->log.head;
}

/* Room for len contiguous bytes at the head of the log (skipping the end of the ring when they
 * would wrap), made by dropping the oldest cached replies. Returns where they go. */
static uint64_t log_place(srpc_server_t *srv, uint32_t len)
{
    srpc_reply_log_t *log = &srv->log;
    uint64_t pos = log->head;
    if (len == 0)
        return pos;
    if (pos % log->cap + len > log->cap)
        pos += log->cap - pos % log->cap;
    while (pos + len - log->tail > log->cap) {
        if (ct_list_head(&srv->ct, CT_LIST_DONE) == CT_NONE) {
            log->tail = pos; /* nothing cached: all of it is free */
            break;
        }
        drop_oldest_done(srv);
    }
    log->head = pos + len;
    return pos;
}

void srpc_reply_cache_locked(srpc_server_t *srv, uint32_t idx, int code, const struct iovec *pieces, int n,
                             uint32_t len)
{
    SRPC_ASSERT_LOCKED(srv);
    if (!srpc_reply_cacheable(srv, code, len)) {
        ct_remove(&srv->ct, idx);
        return;
    }
    const uint64_t off = log_place(srv, len);
    assert(len == 0 || off % srv->log.cap + len <= srv->log.cap); /* contiguous in the ring */
    uint8_t *dst = len ? srv->log.base + off % srv->log.cap : NULL;
    for (int k = 0, at = 0; k < n && (uint32_t)at < len; k++) {
        size_t take = pieces[k].iov_len < len - (uint32_t)at ? pieces[k].iov_len : len - (uint32_t)at;
        memcpy(dst + at, pieces[k].iov_base, take);
        at += (int)take;
    }
    ct_entry_t *e = &srv->ct.e[idx];
    e->state = CT_DONE;
    e->code = (uint16_t)code;
    e->u.done.off = off;
    e->u.done.len = len;
    ct_list_push(&srv->ct, idx, CT_LIST_DONE, srpc_now_ns() + (uint64_t)srv->cfg.reply_cache_us * 1000);
}

void srpc_reply_resend_locked(srpc_server_t *srv, uint32_t idx)
{
    SRPC_ASSERT_LOCKED(srv);
    const ct_entry_t *e = &srv->ct.e[idx];
    struct iovec iv = {e->u.done.len ? srv->log.base + e->u.done.off % srv->log.cap : NULL, e->u.done.len};
    srpc_reply_batch_t b;
    b.n = 0;
    srpc_reply_add(srv, &b, &e->key, e->secret, e->code, &iv, iv.iov_len ? 1 : 0, e->u.done.len);
    srpc_reply_flush(srv, &b); /* now: the log may move on once the lock is released */
    if (b.msg[0].result >= 0)
        ST_ADD(srv, cache_hits, 1);
}

/* ---------------------------------------------------------------- rejections, expiry, eviction */

void srpc_reply_remember_rejection_locked(srpc_server_t *srv, const srpc_call_key_t *key, const srpc_hdr_t *h,
                                          int code, uint64_t now)
{
    SRPC_ASSERT_LOCKED(srv);
    uint32_t i = ct_insert(&srv->ct, key, CT_REJECTED);
    if (i == CT_NONE && srpc_reply_evict_one_locked(srv) == 0)
        i = ct_insert(&srv->ct, key, CT_REJECTED);
    if (i == CT_NONE) {
        ST_ADD(srv, drops[SRPC_DROP_TABLE_FULL], 1);
        return;
    }
    srv->ct.e[i].code = (uint16_t)code;
    srv->ct.e[i].u.rejected.seq = h->seq;
    ct_list_push(&srv->ct, i, CT_LIST_REJECTED, now + (uint64_t)srv->cfg.reasm_timeout_us * 1000);
}

void srpc_reply_rejected_segment_locked(srpc_server_t *srv, uint32_t idx, const srpc_hdr_t *h)
{
    SRPC_ASSERT_LOCKED(srv);
    const ct_entry_t *e = &srv->ct.e[idx];
    if (h->seq != e->u.rejected.seq) {
        ST_ADD(srv, drops[SRPC_DROP_REJECTED], 1);
        return;
    }
    srpc_reply_error_rx(srv, &e->key, e->code, "%s", ""); /* a retransmission: the error again, no text */
}

int srpc_reply_evict_one_locked(srpc_server_t *srv)
{
    SRPC_ASSERT_LOCKED(srv);
    uint32_t i = ct_list_head(&srv->ct, CT_LIST_REJECTED);
    if (i != CT_NONE) {
        ct_remove(&srv->ct, i);
        return 0;
    }
    if (ct_list_head(&srv->ct, CT_LIST_DONE) == CT_NONE)
        return -ENOSPC;
    drop_oldest_done(srv);
    return 0;
}

void srpc_reply_expire_locked(srpc_server_t *srv, uint64_t now)
{
    SRPC_ASSERT_LOCKED(srv);
    uint32_t i;
    while ((i = ct_list_head(&srv->ct, CT_LIST_DONE)) != CT_NONE && srv->ct.e[i].expires_ns <= now)
        drop_oldest_done(srv);
    while ((i = ct_list_head(&srv->ct, CT_LIST_REJECTED)) != CT_NONE && srv->ct.e[i].expires_ns <= now)
        ct_remove(&srv->ct, i);
}

uint64_t srpc_reply_next_expiry_locked(const srpc_server_t *srv)
{
    uint64_t t = UINT64_MAX;
    uint32_t i = ct_list_head(&srv->ct, CT_LIST_DONE);
    if (i != CT_NONE)
        t = srv->ct.e[i].expires_ns;
    i = ct_list_head(&srv->ct, CT_LIST_REJECTED);
    if (i != CT_NONE && srv->ct.e[i].expires_ns < t)
        t = srv->ct.e[i].expires_ns;
    return t;
}

void srpc_reply_forget_locked(srpc_server_t *srv, uint32_t idx)
{
    SRPC_ASSERT_LOCKED(srv);
    if (srv->ct.e[idx].state == CT_DONE && ct_list_head(&srv->ct, CT_LIST_DONE) == idx)
        drop_oldest_done(srv);
    else
        ct_remove(&srv->ct, idx); /* out of order: only when the server goes away */
}
