/* client_state.h: the state of a client (its calls, its table, its window, its timers, its keys), with the lock that guards each field, the checks of that rule (debug builds), the small helpers every client file uses, and the internal functions of the client's files in the order they may call each other. */
#ifndef SRPC_CLIENT_STATE_H
#define SRPC_CLIENT_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "client/sessions.h"
#include "core/auth.h"
#include "core/clock.h"
#include "core/owner.h"
#include "core/reassembly.h"
#include "splitrpc_client.h"
#include "transport/transport.h"

/* Threads: any thread may call the public functions; c->lock guards every field marked "lock".
 * One thread at a time receives (the "owner", c->rx_owned); the others sleep on c->cv until it
 * hands over. Functions named below say "lock held" where the caller must hold c->lock; debug
 * builds (without NDEBUG: the tests' builds) check it (SRPC_CL_ASSERT_LOCKED).
 *
 * Files, each calling only those above it (tests/test_native_layout.py checks the order):
 *   client_state.h  this: the state and its small inline helpers (the table, the window, timers)
 *   finish.c        a call's end: its outcome, its round-trip sample, its report to a queue
 *   call_auth.c     signing (version 4) and sealing (version 5) a request, and sending it;
 *                   version 5's handshake as the calls see it; checking a signed reply
 *   retransmit.c    retransmission and BUSY retries (the timers)
 *   flow.c          the window: calls held back, sent when there is room; calls failed early
 *   replies.c       receiving: reply datagrams checked and reassembled; waiting for calls
 *   calls.c         calls and their ids: sending, results, release
 *   client.c        a client's life: configuration, creation, shutdown, stats
 *   client_load.c   the native load generator (on the public functions only) */

#define SRPC_CL_NBUCKETS 4096
#define SRPC_CL_RTT_SLOTS 64 /* round-trip estimators, one per function (func_id % RTT_SLOTS, last one wins) */

/* RFC 6298 estimators of one function's round trips: its service time is part of them, and
 * functions differ by orders of magnitude (a 10 us vecadd next to a 3 ms model). */
typedef struct rtt_est {
    uint32_t func_plus1; /* func_id + 1; 0: unused */
    uint64_t srtt_ns, rttvar_ns;
} rtt_est_t;

/* One call, from its send until it is released; every field under the client's lock. */
typedef struct cl_call {
    uint64_t req_id;
    uint16_t func_id;
    int done;
    int code;            /* 0 RESPONSE, else the error code */
    srpc_client_cq_t *cq; /* reported there when finished; NULL: not reported (a blocking call) */
    uint8_t *reply;      /* reply data or error text (malloc) */
    uint8_t *req;        /* retransmission: the request until the call finishes: a copy, or the
                            caller's bytes when req_borrowed (srpc_client_send_many_cq) */
    uint32_t req_len;
    uint8_t req_borrowed;
    uint16_t aux;
    uint64_t sess;       /* version 5: the session it was last sent under; 0: not sent yet (no session) */
    uint8_t sent_v5;     /* version 5: sent under a session at least once (its sess may be 0 again since:
                            none to send a retransmission under): it may have run */
    uint32_t attempts;   /* retransmissions so far */
    uint8_t resent;      /* sent more than once, some not counted in attempts (version 5: sent under a
                            session that died, then again once a new one is made): no RTT sample (Karn) */
    uint64_t sent_ns;    /* first send (the RTT sample's start) */
    uint64_t due_ns;     /* next retransmission or BUSY retry; UINT64_MAX: none */
    uint64_t deadline_ns; /* the call gives up here: UINT64_MAX: never */
    uint8_t flow;        /* a caller's call: the window and BUSY retries apply (not a load run's) */
    uint8_t in_window;   /* counted in c->outstanding */
    uint8_t waiting;     /* on c's window queue, not sent yet */
    uint8_t busy_wait;   /* answered BUSY: sent again at due_ns */
    uint8_t wait_ready;  /* an unreachable server does not fail it: it waits for its deadline */
    uint32_t busy_n;     /* BUSY answers so far */
    struct cl_call *wnext, *wprev; /* the window queue */
    uint32_t reply_len;
    int reasm_active;
    srpc_reasm_t reasm;
    struct cl_call *hnext;
    struct cl_call *dnext, *dprev; /* cq's finished-and-unreported list */
    int on_done_list;
} cl_call_t;

struct srpc_client_cq {
    cl_call_t *head, *tail; /* client lock: finished calls not yet reported, oldest first */
};

struct srpc_client {
    srpc_client_config_t cfg;
    char host[256];
    srpc_transport_t *tp;    /* connected to the server: only its datagrams are received */
    srpc_rx_t rx;            /* owner thread only */
    uint32_t seg;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    _Atomic unsigned long lock_owner; /* debug builds: the thread holding lock */
    int rx_owned;            /* lock */
    int shut;                /* lock: srpc_client_shutdown ran: every call finished, no call or
                                retransmission sent since (the transport stays open until destroy) */
    atomic_uint sending;     /* send_calls between registering its calls (lock) and the end of their
                                send (no lock): shutdown waits for 0, so nothing leaves after it */
    cl_call_t *buckets[SRPC_CL_NBUCKETS]; /* lock */
    srpc_client_cq_t cq;     /* lock: srpc_client_send/wait_any's queue */
    atomic_uint_fast64_t next_id;
    rtt_est_t rtt[SRPC_CL_RTT_SLOTS]; /* lock: per-function estimators */
    uint16_t last_func;       /* lock: the function of the last sample (for stats) */
    uint64_t next_due;       /* lock: the earliest due_ns of a call (UINT64_MAX: none) */
    uint64_t outstanding;    /* lock: flow calls sent and unfinished (the window's use) */
    cl_call_t *whead, *wtail; /* lock: flow calls waiting for the window, oldest first */
    uint64_t rnd;            /* lock: BUSY backoff jitter (xorshift) */
    srpc_client_stats_t st;  /* lock */
    srpc_auth_sender_t auth; /* version 4: key, secret, sender number, counter (read-only but the
                                counter, which signing advances atomically) */
    srpc_cl_v5_t *v5;        /* lock: version 5's sessions and handshake (NULL: another version) */
};

/* ------------------------------------------------------------------ the lock and its rule */

#define SRPC_CL_ASSERT_LOCKED(c) SRPC_ASSERT_OWNER((c)->lock_owner)

static inline void cl_lock(srpc_client_t *c)
{
    pthread_mutex_lock(&c->lock);
    SRPC_OWNER_SET(c->lock_owner);
}

static inline void cl_unlock(srpc_client_t *c)
{
    SRPC_OWNER_CLEAR(c->lock_owner);
    pthread_mutex_unlock(&c->lock);
}

/* Sleeps on c->cv until until_ns (CLOCK_MONOTONIC) or a broadcast; lock held, and held again on return. */
static inline void cl_timed_wait(srpc_client_t *c, uint64_t until_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(until_ns / 1000000000ull), .tv_nsec = (long)(until_ns % 1000000000ull)};
    SRPC_OWNER_CLEAR(c->lock_owner);
    pthread_cond_timedwait(&c->cv, &c->lock, &ts);
    SRPC_OWNER_SET(c->lock_owner);
}

/* ------------------------------------------------------------------ the call table (lock held) */

static inline cl_call_t **cl_bucket(srpc_client_t *c, uint64_t id)
{
    return &c->buckets[(id ^ (id >> 17) ^ (id >> 31)) & (SRPC_CL_NBUCKETS - 1)];
}

static inline cl_call_t *cl_find(srpc_client_t *c, uint64_t id)
{
    for (cl_call_t *k = *cl_bucket(c, id); k; k = k->hnext)
        if (k->req_id == id)
            return k;
    return NULL;
}

/* k leaves its queue's finished-and-unreported list, if it is on it. */
static inline void cl_done_unlink(cl_call_t *k)
{
    if (!k->on_done_list)
        return;
    srpc_client_cq_t *q = k->cq;
    if (k->dprev)
        k->dprev->dnext = k->dnext;
    else
        q->head = k->dnext;
    if (k->dnext)
        k->dnext->dprev = k->dprev;
    else
        q->tail = k->dprev;
    k->on_done_list = 0;
    k->dnext = k->dprev = NULL;
}

/* The deadline of a timeout (negative: none) from now. */
static inline uint64_t cl_deadline_of(int64_t timeout_us)
{
    return timeout_us < 0 ? UINT64_MAX : srpc_now_ns() + (uint64_t)timeout_us * 1000;
}

/* ------------------------------------------------------------------ timers (lock held) */

/* The estimators of func_id, or NULL before its first sample. */
static inline const rtt_est_t *cl_rtt_of(const srpc_client_t *c, uint16_t func_id)
{
    const rtt_est_t *e = &c->rtt[func_id % SRPC_CL_RTT_SLOTS];
    return e->func_plus1 == (uint32_t)func_id + 1 ? e : NULL;
}

/* func_id's retransmission timeout now, before backoff: rto_initial before its first sample. */
static inline uint64_t cl_rto_ns(const srpc_client_t *c, uint16_t func_id)
{
    const rtt_est_t *e = cl_rtt_of(c, func_id);
    uint64_t lo = (uint64_t)c->cfg.rto_min_us * 1000, hi = (uint64_t)c->cfg.rto_max_us * 1000;
    uint64_t rto = e ? e->srtt_ns + 4 * e->rttvar_ns : (uint64_t)c->cfg.rto_initial_us * 1000;
    return rto < lo ? lo : rto > hi ? hi : rto;
}

/* Something is due at due: the client's next wake is no later. */
static inline void cl_note_due(srpc_client_t *c, uint64_t due)
{
    if (due < c->next_due)
        c->next_due = due;
}

/* ------------------------------------------------------------------ the window (lock held) */

static inline int cl_window_full(const srpc_client_t *c)
{
    return c->cfg.window && c->outstanding >= c->cfg.window;
}

/* k leaves the window's queue of calls not sent yet. */
static inline void cl_window_unlink(srpc_client_t *c, cl_call_t *k)
{
    if (k->wprev)
        k->wprev->wnext = k->wnext;
    else
        c->whead = k->wnext;
    if (k->wnext)
        k->wnext->wprev = k->wprev;
    else
        c->wtail = k->wprev;
    k->wnext = k->wprev = NULL;
    k->waiting = 0;
}

/* k leaves the window (finished or forgotten): room for a waiting call. */
static inline void cl_window_leave(srpc_client_t *c, cl_call_t *k)
{
    if (k->in_window) {
        k->in_window = 0;
        c->outstanding--;
    }
}

/* ------------------------------------------------------------------ finish.c */

/* Frees k and what it owns (its reply, its copy of the request, its reassembly). k is out of the
 * table; no lock needed. */
void cl_call_free(cl_call_t *k);
/* A malloc'd copy of n bytes at p (NULL when out of memory). */
uint8_t *cl_dup_bytes(const uint8_t *p, uint32_t n);
/* k finishes with code and the reply or error text data (malloc'd, owned by k from here), len
 * bytes: a round-trip sample when it is one (Karn), out of the window, reported to its queue.
 * Lock held. */
void cl_finish(srpc_client_t *c, cl_call_t *k, int code, uint8_t *data, uint32_t len);
/* k finishes with a local code and its text (a copy). Lock held. */
void cl_finish_local(srpc_client_t *c, cl_call_t *k, int code, const char *msg);

/* ------------------------------------------------------------------ call_auth.c */

/* What a message is signed or sealed with, taken under the lock: a copy, since a session's place
 * may be reused once the lock is let go. ok 0: no session to send under (a handshake is under way). */
typedef struct cl_auth_use {
    int ok;
    uint64_t session;
    uint8_t key[SRPC_V5_KEY_LEN];
    uint8_t encrypt;
} cl_auth_use_t;

/* Version 5: the session to send under now into *u, a handshake started when one is needed.
 * Lock held. */
void cl_auth_take(srpc_client_t *c, cl_auth_use_t *u);
/* m is signed (version 4: with the client's key as its sender) or sealed (version 5: under the
 * session in u). No lock needed (u is a copy; the counters are advanced atomically). */
void cl_auth_sign(srpc_client_t *c, srpc_tx_msg_t *m, const cl_auth_use_t *u);
/* Wipes u's key. */
void cl_auth_wipe(cl_auth_use_t *u);
/* Sends call k's request, signed or sealed; returns the transport's result. Version 5 with no
 * session to send under: not sent now (its k->sess 0), but as soon as a session is made. Lock held. */
int cl_send_request(srpc_client_t *c, cl_call_t *k);
/* Version 5: a handshake starts (its INIT sent), the calls sent under a line that ended failed.
 * Lock held. */
void cl_v5_start(srpc_client_t *c, uint64_t now);
/* Version 5: the handshake's timer (its INIT again, or its failure). Lock held. */
void cl_v5_tick(srpc_client_t *c, uint64_t now);
/* Version 5: a datagram of a handshake type from the server (ACCEPT, COOKIE, NO_SESSION), total
 * bytes at d: hostile until checked. Lock held. */
void cl_v5_handshake_in(srpc_client_t *c, const uint8_t *d, uint32_t total);
/* Version 4: whether the datagram whose header is hb and whose *dlen bytes after it are at data
 * ends with a trailer of our key whose tag is right; then *dlen loses the trailer. No lock needed. */
int cl_v4_signed_by_us(const srpc_client_t *c, const uint8_t *hb, const uint8_t *data, uint32_t *dlen);

/* ------------------------------------------------------------------ retransmit.c */

/* Sends again every unfinished request that is due (a retransmission, or a try after BUSY), and
 * finds the next due time. Cheap when nothing is due: one comparison. Lock held. */
void cl_retransmit_due(srpc_client_t *c);
/* A BUSY answer to flow call k: arms a later try and returns 1, or returns 0 when BUSY is its
 * outcome (no retries, no copy to send, or the try would come after its deadline). Lock held. */
int cl_busy_retry(srpc_client_t *c, cl_call_t *k);

/* ------------------------------------------------------------------ flow.c */

/* Sends the waiting calls the window has room for, oldest first. Lock held. */
void cl_send_waiting(srpc_client_t *c);
/* The server answered DRAINING: the calls waiting for the window fail now. Lock held. */
void cl_fail_unsent_draining(srpc_client_t *c);
/* The kernel said the server is unreachable (err > 0): the flow calls fail now. Lock held. */
void cl_fail_unreachable(srpc_client_t *c, int err);

/* ------------------------------------------------------------------ replies.c */

/* Waits until ready(c, arg) or until_ns, receiving and retransmitting meanwhile; one thread
 * receives, others sleep. Returns ready's nonzero value, -ETIMEDOUT, or -ESHUTDOWN. Lock held. */
int cl_wait_until(srpc_client_t *c, int (*ready)(srpc_client_t *, void *), void *arg, uint64_t until_ns);

#endif
