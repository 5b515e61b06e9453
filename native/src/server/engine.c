/* engine.c: the server's receive path (see engine.h): one burst taken from the transport (in place first when large segments are expected), each datagram handed to datagram.c, the burst's error replies sent and the worker woken; key reloads; the expiry timers and version 5's session sweep. */
#include "server/engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tunables.h"
#include "core/wire.h"
#include "server/callring.h"
#include "server/datagram.h"
#include "server/cost.h"
#include "server/gpu_rx.h"
#include "server/keytab.h"
#include "server/partial.h"
#include "server/rx_in_place.h"
#include "server/reply.h"
#include "server/sessions.h"

/* What a burst leaves behind: its error replies go out, the worker learns of its calls. */
static void end_of_burst(srpc_server_t *srv)
{
    if (srv->rx.errq.n)
        srpc_reply_errors_flush_rx(srv);
    if (srv->rx.ready) {
        srv->rx.ready = 0;
        srpc_ring_notify(srv);
    }
}

/* A reload's table (srpc_server_set_keys) replaces the one in use, the windows handed over. rx. */
static void keys_reload(srpc_server_t *srv)
{
    if (!atomic_load_explicit(&srv->keys_next, memory_order_relaxed))
        return;
    srpc_keytab_t *next = atomic_exchange_explicit(&srv->keys_next, NULL, memory_order_acquire);
    if (!next)
        return;
    srpc_keytab_adopt(next, srv->keys, srpc_now_ns() / 1000000u);
    srpc_keytab_destroy(srv->keys);
    srv->keys = next;
    if (srv->sessions) { /* once per reload, not per datagram */
        srpc_srv_lock(srv);
        srpc_sessions_note_skew(srv->sessions, next->skew_ms);
        srpc_srv_unlock(srv);
    }
    ST_ADD(srv, auth_reloads, 1);
}

typedef struct {
    uint64_t *line;    /* sorted: lines with calls arriving or running */
    uint64_t *any;     /* sorted: lines with any calls in the table (answered ones included) */
    uint32_t n, n_any;
} lines_t;

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* What the call table held of line's calls (enum srpc_line_calls; the sweep's sorted lists). */
static int line_busy(void *ctx, uint64_t line)
{
    const lines_t *l = ctx;
    if (l->n && bsearch(&line, l->line, l->n, sizeof(uint64_t), cmp_u64))
        return SRPC_LINE_RUNNING;
    return l->n_any && bsearch(&line, l->any, l->n_any, sizeof(uint64_t), cmp_u64) ? SRPC_LINE_ANSWERED
                                                                                   : SRPC_LINE_IDLE;
}

/* Forgets version 5's sessions past their time, once a second, but none whose line still has
 * calls in the call table that are arriving or running: a resume naming it must still find it,
 * so that a call's resend is that call. A line whose calls are all answered (their replies
 * cached) does not hold its sessions: one silent for SRPC_V5_QUOTA_IDLE_MS (2 s) may make room
 * for a new session when its key's quota or the table is full, leaving a tombstone that a resume
 * naming it follows to the line (sessions.h), freed here once the line has no calls left. Run by
 * the timers (at least every SRPC_TIMER_IDLE_US) and after a receive that took datagrams (keyed
 * traffic never takes the in-place path), now the time already read there: only when it is due is
 * the clock read again. rx. */
static void sessions_sweep(srpc_server_t *srv, uint64_t now)
{
    if (now / 1000000u < srv->sessions_swept_ms + 1000) /* (a now read before the last sweep's: not due) */
        return;
    /* Due: the time read afresh, so that no session is aged on a now older than its own stamps (the
     * caller's may have been read before another rx owner's receive). Once a second at most. */
    const uint64_t ms = srpc_now_ns() / 1000000u;
    srv->sessions_swept_ms = ms;
    srpc_srv_lock(srv);
    lines_t l = {malloc(2 * (size_t)srv->ct.used * sizeof(uint64_t) + 1), NULL, 0, 0};
    if (l.line) {
        l.any = l.line + srv->ct.used;
        for (uint32_t i = 0, seen = 0; i < srv->ct.max_entries && seen < srv->ct.used; i++) {
            const uint8_t st = srv->ct.e[i].state;
            if (st == CT_FREE)
                continue;
            seen++;
            if (!srv->ct.e[i].key.session)
                continue;
            l.any[l.n_any++] = srv->ct.e[i].key.session;
            if (st == CT_PARTIAL || st == CT_QUEUED)
                l.line[l.n++] = srv->ct.e[i].key.session;
        }
        qsort(l.line, l.n, sizeof(uint64_t), cmp_u64);
        qsort(l.any, l.n_any, sizeof(uint64_t), cmp_u64);
        srpc_sessions_mark(srv->sessions, line_busy, &l);
        srpc_sessions_expire(srv->sessions, ms);
        free(l.line);
    } /* (no memory: nothing forgotten this time) */
    srpc_srv_unlock(srv);
}

int srpc_engine_rx_step_rx(srpc_server_t *srv)
{
    SRPC_ASSERT_RX(srv);
    if (srv->auth_on)
        keys_reload(srv);
    srpc_rx_t *rx = &srv->rx.slots;
    int n = 0, r = -1;
    uint64_t took_ns = 0; /* when a burst took datagrams: the session sweep's now */
    while (srv->rx.direct_hint && n < (int)rx->burst && (r = srpc_rx_in_place_step_rx(srv)) > 0) {
        n += r;
        ST_ADD(srv, rx_receives, 1);
    }
    if (r < 0) { /* the next datagram takes the burst path (one only, if in place may follow); r > 0: a
                  * burst's worth came in place, r == 0: nothing waits */
        srpc_CUcontext saved;
        const int entered = srpc_gpu_rx_enter_rx(srv, &saved); /* the copies out of GPU memory */
        int m = srpc_tp_rx_burst(srv->tp, rx, srv->rx.direct_hint ? 1 : rx->burst);
        if (m > 0) {
            ST_ADD(srv, rx_receives, 1);
            srv->rx.direct_hint = 0; /* process_datagram sets it again for large segments */
            const uint64_t now = srpc_now_ns();
            took_ns = now;
            srpc_srv_lock(srv);
            for (int i = 0; i < m; i++)
                srpc_dgram_entry_rx(srv, (unsigned)i, now);
            if (srv->rx.dev_copies)
                srpc_gpu_rx_finish_locked(srv); /* before the worker may see the calls */
            srpc_srv_unlock(srv);
            n += m;
        }
        srpc_tp_rx_release(srv->tp); /* the frames whose data was copied from */
        srpc_gpu_rx_leave_rx(srv, entered, saved);
    }
    end_of_burst(srv);
    if (took_ns && srv->sessions) /* (and from the timers: a worker kept busy may not run them for a while) */
        sessions_sweep(srv, took_ns);
    return n;
}

void srpc_engine_timers_rx(srpc_server_t *srv, uint64_t now)
{
    SRPC_ASSERT_RX(srv);
    if (srv->sessions) /* here and when datagrams came, not on every receive step: a clock read per
                          empty poll is 70 ns on some VMs */
        sessions_sweep(srv, now);
    srpc_srv_lock(srv);
    unsigned ready = srpc_partial_unblock_locked(srv, now);
    ready += srpc_partial_expire_locked(srv, now);
    srpc_reply_expire_locked(srv, now);
    /* Next: every period while messages are partial (their expiry, and the queues they hold
     * back); else when the oldest cached reply or rejection expires, at least every idle period. */
    uint64_t next = now + SRPC_TIMER_IDLE_US * 1000ull;
    if (srpc_partial_pending_locked(srv)) {
        next = now + SRPC_TIMER_PERIOD_US * 1000ull;
    } else {
        uint64_t t = srpc_reply_next_expiry_locked(srv);
        if (t < next)
            next = t;
    }
    srv->rx.next_timer_ns = next;
    srpc_srv_unlock(srv);
    if (ready) {
        srpc_ring_notify(srv);
        /* A worker asleep in poll() on the transport (block mode) would not see the calls
         * until a datagram came: wake it. */
        uint64_t one = 1;
        if (write(srv->wakefd, &one, sizeof(one)) < 0) { /* the counter is set already */ }
    }
}

int64_t srpc_engine_timers_in_rx(const srpc_server_t *srv, uint64_t now, int64_t max_us)
{
    SRPC_ASSERT_RX(srv);
    if (now >= srv->rx.next_timer_ns)
        return 0;
    uint64_t us = (srv->rx.next_timer_ns - now) / 1000 + 1;
    return max_us >= 0 && us > (uint64_t)max_us ? max_us : (int64_t)us;
}

int srpc_engine_feed(srpc_server_t *srv, const uint8_t *dgram, size_t len, const struct sockaddr *src,
                     socklen_t srclen)
{
    if (!srv || (!dgram && len) || !src || srclen > (socklen_t)sizeof(struct sockaddr_storage) || len > UINT32_MAX)
        return -EINVAL;
    srpc_rx_lock(srv);
    if (srv->auth_on)
        keys_reload(srv);
    srpc_rx_t *rx = &srv->rx.slots;
    size_t h = len < SRPC_HDR_LEN ? len : SRPC_HDR_LEN, d = len - h;
    int trunc = d > rx->data_cap;
    if (h)
        memcpy(srpc_rx_hdr(rx, 0), dgram, h);
    if (d)
        memcpy(srpc_rx_data(rx, 0), dgram + h, trunc ? rx->data_cap : d);
    memset(&rx->src[0], 0, sizeof(rx->src[0]));
    memcpy(&rx->src[0], src, srclen);
    rx->srclen[0] = srclen;
    rx->len[0] = (uint32_t)len;
    rx->trunc[0] = (uint8_t)trunc;
    rx->dev[0] = 0;
    rx->gso[0] = 0;
    srpc_srv_lock(srv);
    srpc_dgram_entry_rx(srv, 0, srpc_now_ns());
    srpc_srv_unlock(srv);
    end_of_burst(srv);
    srpc_rx_unlock(srv);
    return 0;
}

void srpc_engine_run_timers(srpc_server_t *srv, uint64_t now_ns)
{
    srpc_rx_lock(srv);
    srpc_engine_timers_rx(srv, now_ns);
    srpc_rx_unlock(srv);
}
