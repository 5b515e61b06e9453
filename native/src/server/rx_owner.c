/* rx_owner.c: which thread receives (see rx_owner.h). */
#include "server/rx_owner.h"

#include <limits.h>
#include <poll.h>
#include <unistd.h>

#include "core/tunables.h"
#include "core/wait.h"
#include "server/engine.h"

void srpc_rx_owner_kick(srpc_server_t *srv)
{
    atomic_fetch_add(&srv->rx.e_gen, 1);
    srpc_futex_wake(&srv->rx.e_gen);
}

/* Runs the timers when they are due. rx. */
static void timers_if_due(srpc_server_t *srv, uint64_t now)
{
    if (now >= srv->rx.next_timer_ns)
        srpc_engine_timers_rx(srv, now);
}

/* ---------------------------------------------------------------- the engine thread */

/* How long the engine thread may leave receiving to the worker (0: it must receive now). The
 * worker receives while it waits in next_batch, and is trusted for rx_takeover_us after it left
 * for a callback. While it receives, the engine thread looks again only now and then: a worker
 * that leaves for a slow callback tells it at once (srpc_rx_owner_leave_w). */
static int64_t worker_covers_us(srpc_server_t *srv, uint64_t now)
{
    int st = atomic_load(&srv->rx.w_state);
    if (st == W_POLLING || st == W_BLOCKED)
        return SRPC_ENGINE_CHECK_US;
    uint64_t until = atomic_load(&srv->rx.w_away_since) + (uint64_t)srv->cfg.rx_takeover_us * 1000;
    return until > now ? (int64_t)((until - now) / 1000) + 1 : 0;
}

void *srpc_rx_owner_engine_main(void *arg)
{
    srpc_server_t *srv = arg;
    while (!atomic_load_explicit(&srv->stopping, memory_order_relaxed)) {
        const uint64_t now = srpc_now_ns();
        const unsigned gen = atomic_load(&srv->rx.e_gen);
        const int64_t covered = worker_covers_us(srv, now);
        if (covered > 0) { /* the worker receives: sleep until it may need us */
            srpc_futex_wait(&srv->rx.e_gen, gen, covered);
            continue;
        }
        if (!srpc_rx_trylock(srv)) { /* the worker is back */
            srpc_futex_wait(&srv->rx.e_gen, gen, 100);
            continue;
        }
        timers_if_due(srv, now);
        const int n = srpc_engine_rx_step_rx(srv);
        const int64_t timers_us = srpc_engine_timers_in_rx(srv, now, 1000);
        srpc_rx_unlock(srv);
        const int fd = srv->tp->wait_fd;
        if (n > 0 || fd < 0) /* a transport with nothing to sleep on is polled */
            continue;
        struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = srv->stopfd, .events = POLLIN}};
        poll(p, 2, timers_us > 0 ? (int)((timers_us + 999) / 1000) : 0); /* re-read w_state at least every ms */
    }
    return NULL;
}

/* ---------------------------------------------------------------- the worker */

void srpc_rx_owner_back_w(srpc_server_t *srv, uint64_t now)
{
    srpc_fn_t *fn = srv->last_fn;
    if (!fn)
        return;
    const uint64_t away = now - atomic_load_explicit(&srv->rx.w_away_since, memory_order_relaxed);
    fn->cb_slow = 2 * away > (uint64_t)srv->cfg.rx_takeover_us * 1000;
    fn->away_ns = now - srv->last_left_ns; /* the time itself, whatever a saturated batch made of away */
    srv->last_fn = NULL;
}

int srpc_rx_owner_leave_w(srpc_server_t *srv, srpc_fn_t *fn, int saturated, int rc)
{
    const uint64_t now = srpc_now_ns(), trust = (uint64_t)srv->cfg.rx_takeover_us * 1000;
    /* Saturated: trusted no more, the engine thread receives now. */
    atomic_store(&srv->rx.w_away_since, saturated ? (now > trust ? now - trust : 0) : now);
    atomic_store(&srv->rx.w_state, W_AWAY);
    srv->last_fn = fn;
    srv->last_left_ns = now;
    if (saturated || (fn && fn->cb_slow))
        srpc_rx_owner_kick(srv);
    return rc;
}

void srpc_rx_owner_catch_up_w(srpc_server_t *srv)
{
    if (!srpc_rx_trylock(srv))
        return;
    const uint64_t until = srpc_now_ns() + (uint64_t)srv->cfg.rx_takeover_us * 1000;
    while (srpc_engine_rx_step_rx(srv) >= (int)srv->rx.slots.burst && srpc_now_ns() < until)
        ;
    srpc_rx_unlock(srv);
}

/* Sleeps in poll() until a datagram arrives, the server stops, the timers made calls ready or
 * timeout_us passes. rx: while the worker waits, it is the one that receives. */
static void wait_readable(srpc_server_t *srv, int64_t timeout_us)
{
    struct pollfd p[3] = {{.fd = srv->tp->wait_fd, .events = POLLIN}, {.fd = srv->stopfd, .events = POLLIN},
                          {.fd = srv->wakefd, .events = POLLIN}};
    int ms = timeout_us < 0 || timeout_us > (int64_t)INT_MAX * 1000 ? -1 : (int)((timeout_us + 999) / 1000);
    poll(p, 3, ms);
    uint64_t v;
    if (p[2].revents & POLLIN && read(srv->wakefd, &v, sizeof(v)) < 0) { /* drained by the read */ }
}

void srpc_rx_owner_wait_w(srpc_server_t *srv, int spin, uint64_t now, uint64_t until_ns)
{
    const int want = spin ? W_POLLING : W_BLOCKED;
    if (atomic_load_explicit(&srv->rx.w_state, memory_order_relaxed) != want)
        atomic_store(&srv->rx.w_state, want); /* the engine thread stops receiving */
    if (!srpc_rx_trylock(srv)) {
        /* The engine thread is receiving (a long callback made it take over): it hands back
         * within a step; meanwhile its wake-ups reach us through ready_gen. */
        unsigned gen = atomic_load(&srv->ready_gen);
        atomic_store(&srv->worker_sleeping, 1);
        if (atomic_load(&srv->n_ready) == 0)
            srpc_futex_wait(&srv->ready_gen, gen, 200);
        atomic_store(&srv->worker_sleeping, 0);
        return;
    }
    timers_if_due(srv, now);
    const int n = srpc_engine_rx_step_rx(srv); /* receive inline: no hand-off, one thread */
    if (n == 0 && !spin) {
        int64_t wait_us = until_ns == UINT64_MAX ? -1 : until_ns > now ? (int64_t)((until_ns - now) / 1000 + 1) : 0;
        wait_readable(srv, srpc_engine_timers_in_rx(srv, now, wait_us));
    }
    srpc_rx_unlock(srv);
    if (n == 0 && spin)
        srpc_cpu_relax();
}
