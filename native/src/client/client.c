/* client.c: the client's datapath: req_id allocation, segmentation, the outstanding-call
 * table, reply reassembly, retransmission, flow control (the window and BUSY retries).
 * Thread-safe: one thread at a time receives (the "owner"); the others sleep on a condition
 * variable until it hands over. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/clock.h"
#include "core/wait.h"
#include "core/reassembly.h"
#include "core/tunables.h"
#include "core/auth.h"
#include "client/sessions.h"
#include "core/aes_keys.h"
#include "splitrpc_client.h"
#include "transport/transport.h"

#define NBUCKETS 4096
#define RTT_SLOTS 64 /* round-trip estimators, one per function (func_id % RTT_SLOTS, last one wins) */

/* RFC 6298 estimators of one function's round trips: its service time is part of them, and
 * functions differ by orders of magnitude (a 10 us vecadd next to a 3 ms model). */
typedef struct rtt_est {
    uint32_t func_plus1; /* func_id + 1; 0: unused */
    uint64_t srtt_ns, rttvar_ns;
} rtt_est_t;

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
    int rx_owned;            /* lock */
    int shut;                /* lock: srpc_client_shutdown ran: every call finished, no call or
                                retransmission sent since (the transport stays open until destroy) */
    atomic_uint sending;     /* send_calls between registering its calls (lock) and the end of their
                                send (no lock): shutdown waits for 0, so nothing leaves after it */
    cl_call_t *buckets[NBUCKETS]; /* lock */
    srpc_client_cq_t cq;     /* lock: srpc_client_send/wait_any's queue */
    atomic_uint_fast64_t next_id;
    rtt_est_t rtt[RTT_SLOTS];  /* lock: per-function estimators */
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


void srpc_client_config_init(srpc_client_config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->host = SRPC_DEF_HOST;
    c->port = SRPC_DEF_PORT;
    c->max_reply = SRPC_DEF_MAX_REPLY;
    c->busy_poll = 0;
    c->sock_buf_bytes = SRPC_DEF_SOCK_BUF;
    c->retries = SRPC_DEF_RETRIES;
    c->rto_min_us = SRPC_DEF_RTO_MIN_US;
    c->rto_initial_us = SRPC_DEF_RTO_INITIAL_US;
    c->rto_max_us = SRPC_DEF_RTO_MAX_US;
    c->window = SRPC_DEF_CLIENT_WINDOW;
    c->busy_retry = 1;
    c->busy_backoff_us = SRPC_DEF_BUSY_BACKOFF_US;
    c->version = SRPC_VERSION_2;
    c->rekey_ms = SRPC_V5_CLIENT_REKEY_MS;
    c->v5_suites = SRPC_V5_FLAG_AES | SRPC_V5_FLAG_AEGIS;
}

int srpc_client_create(const srpc_client_config_t *cfg, srpc_client_t **out)
{
    if (!cfg || !out || !cfg->host || cfg->seg_size > SRPC_MAX_SEG_DATA ||
        cfg->version < SRPC_VERSION || cfg->version > SRPC_VERSION_5 ||
        (cfg->retries && (cfg->rto_min_us == 0 || cfg->rto_min_us > cfg->rto_max_us ||
                          cfg->rto_initial_us < cfg->rto_min_us || cfg->rto_initial_us > cfg->rto_max_us)) ||
        (cfg->busy_retry && (cfg->busy_backoff_us == 0 || cfg->rto_max_us == 0)))
        return -EINVAL;
    srpc_auth_sender_t auth = {0};
    if (cfg->version == SRPC_VERSION_4) {
        int r = srpc_auth_sender_init(&auth, cfg->auth_key_id, cfg->auth_secret, SRPC_AUTH_SECRET_LEN);
        if (r < 0)
            return r; /* -EINVAL (no key), -ENOTSUP (no MAC library) */
    }
    srpc_client_t *c = calloc(1, sizeof(*c));
    srpc_cl_v5_t *v5 = cfg->version == SRPC_VERSION_5 ? malloc(sizeof(*v5)) : NULL;
    if (!c || (cfg->version == SRPC_VERSION_5 && !v5)) {
        free(c);
        free(v5);
        srpc_auth_wipe(&auth, sizeof(auth));
        return -ENOMEM;
    }
    if (v5) {
        int r = !cfg->auth_secret ? -EINVAL
                                  : srpc_cl_v5_init(v5, cfg->auth_key_id, cfg->auth_secret, cfg->encrypt, cfg->rekey_ms);
        if (r < 0) { /* -EINVAL (no key, a rekey later than the page allows), -ENOTSUP (no libsodium) */
            free(c);
            free(v5);
            return r;
        }
        srpc_cl_v5_offer(v5, cfg->v5_suites);
    }
    c->cfg = *cfg;
    c->auth = auth;
    c->v5 = v5;
    srpc_auth_wipe(&auth, sizeof(auth));
    c->cfg.auth_secret = NULL; /* the copy in c->auth is the one used */
    snprintf(c->host, sizeof(c->host), "%s", cfg->host);
    c->cfg.host = c->host;
    pthread_mutex_init(&c->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    int r = srpc_rx_init(&c->rx, 16, 65535);
    srpc_transport_spec_t spec = {.host = c->host, .port = cfg->port, .bind = 0, .sock_buf_bytes = cfg->sock_buf_bytes,
                                  .dpdk_dev = cfg->dpdk_dev, .dpdk_mtu = cfg->dpdk_mtu, .dpdk_local_ip = cfg->dpdk_local_ip,
                                  .dpdk_local_port = cfg->dpdk_local_port, .dpdk_peer_mac = cfg->dpdk_server_mac};
    if (!r)
        r = srpc_transport_open(&spec, &c->tp);
    if (r) {
        srpc_client_destroy(c);
        return r;
    }
    if (c->tp->wait_fd < 0)
        c->cfg.busy_poll = 1; /* nothing to sleep on: poll */
    /* Requests are cut at S = seg_size, else by destination: a loopback peer takes whole 64 KiB
     * datagrams; otherwise what the route's MTU carries unfragmented (1450 on a 1500-byte
     * Ethernet MTU, 8950 on a 9000-byte jumbo one, 1430 over IPv6), or 1450 where the kernel
     * does not say; never above what one datagram of the transport carries (DPDK: its MTU). */
    uint32_t seg = cfg->seg_size ? cfg->seg_size
                   : c->tp->max_seg < SRPC_MAX_SEG_DATA ? c->tp->max_seg
                   : c->tp->peer_loopback ? SRPC_DEF_SEG_SIZE_LOOPBACK
                   : c->tp->path_seg ? c->tp->path_seg : SRPC_DEF_SEG_SIZE;
    c->seg = seg < c->tp->max_seg ? seg : c->tp->max_seg;
    uint64_t start;
    if (getrandom(&start, sizeof(start), 0) != sizeof(start))
        start = srpc_now_ns() ^ ((uint64_t)(uintptr_t)c << 16);
    atomic_init(&c->next_id, start);
    atomic_init(&c->sending, 0);
    c->rnd = start | 1;
    c->next_due = UINT64_MAX;
    *out = c;
    return 0;
}

static void call_free(cl_call_t *k)
{
    if (k->reasm_active)
        srpc_reasm_free(&k->reasm, NULL);
    free(k->reply);
    if (!k->req_borrowed)
        free(k->req);
    free(k);
}

/* ------------------------------------------------------------------ retransmission (lock held) */

/* The estimators of func_id, or NULL before its first sample. */
static const rtt_est_t *rtt_of(const srpc_client_t *c, uint16_t func_id)
{
    const rtt_est_t *e = &c->rtt[func_id % RTT_SLOTS];
    return e->func_plus1 == (uint32_t)func_id + 1 ? e : NULL;
}

/* func_id's retransmission timeout now, before backoff: rto_initial before its first sample. */
static uint64_t rto_ns(const srpc_client_t *c, uint16_t func_id)
{
    const rtt_est_t *e = rtt_of(c, func_id);
    uint64_t lo = (uint64_t)c->cfg.rto_min_us * 1000, hi = (uint64_t)c->cfg.rto_max_us * 1000;
    uint64_t rto = e ? e->srtt_ns + 4 * e->rttvar_ns : (uint64_t)c->cfg.rto_initial_us * 1000;
    return rto < lo ? lo : rto > hi ? hi : rto;
}

/* RFC 6298 §2 with one reply's round-trip time, for its function. */
static void rtt_sample(srpc_client_t *c, uint16_t func_id, uint64_t r)
{
    rtt_est_t *e = &c->rtt[func_id % RTT_SLOTS];
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

/* ------------------------------------------------------------------ version 5's sessions (lock held) */

/* What a message is sealed with, taken under the lock: a copy, since a session's place may be
 * reused once the lock is let go. ok 0: no session to send under (a handshake is under way). */
typedef struct v5_use {
    int ok;
    uint64_t session;
    uint8_t key[SRPC_V5_KEY_LEN];
    uint8_t encrypt;
} v5_use_t;

/* Sends one whole datagram of a handshake (an INIT) to the server. */
static void send_raw(srpc_client_t *c, const uint8_t *d, uint32_t len)
{
    const struct iovec iv = {(void *)d, len};
    srpc_tx_msg_t m = {.hdr = {.type = SRPC_TX_RAW}, .pieces = &iv, .npieces = 1, .len = len};
    srpc_tp_send(c->tp, &m, 1); /* a lost INIT is sent again when due */
}

static void note_due(srpc_client_t *c, uint64_t due);

static void v5_fail_sent(srpc_client_t *c);

static void v5_start(srpc_client_t *c, uint64_t now)
{
    uint8_t init[SRPC_V5_INIT_LEN];
    const int r = srpc_cl_v5_start(c->v5, now, init);
    if (c->v5->line_ended) { /* no session to follow: the calls sent under the old line may have run */
        c->v5->line_ended = 0;
        v5_fail_sent(c);
    }
    if (r == 0) {
        send_raw(c, init, sizeof(init));
        note_due(c, c->v5->hs_due_ns);
    }
}

/* The session to send under now into *u, a handshake started when one is needed. */
static void v5_take(srpc_client_t *c, v5_use_t *u)
{
    int start;
    const uint64_t now = srpc_now_ns();
    const srpc_cl_sess_t *s = srpc_cl_v5_current(c->v5, now, &start);
    if (start)
        v5_start(c, now);
    u->ok = s != NULL;
    if (s) {
        u->session = s->keys.session;
        memcpy(u->key, s->keys.c2s, SRPC_V5_KEY_LEN);
        u->encrypt = s->keys.encrypt;
    }
}

static void wipe_use(v5_use_t *u)
{
    srpc_auth_wipe(u->key, sizeof(u->key));
}

/* m is signed (version 4: with the client's key as its sender) or sealed (version 5: under the
 * session in u). */
static void sign_with(srpc_client_t *c, srpc_tx_msg_t *m, const v5_use_t *u)
{
    if (c->v5) {
        m->auth.secret = u->key;
        m->auth.sender = u->session;
        m->auth.counter = &c->v5->counter;
        m->auth.encrypt = u->encrypt;
        return;
    }
    m->auth.key_id = c->auth.key_id;
    m->auth.secret = c->auth.secret;
    m->auth.sender = c->auth.sender;
    m->auth.counter = &c->auth.counter;
}

/* Sends call k's request (lock held). Version 5 with no session to send under: not sent now (its
 * k->sess 0), but as soon as a session is made. */
static int send_request(srpc_client_t *c, cl_call_t *k)
{
    v5_use_t u = {0};
    if (c->v5) {
        v5_take(c, &u);
        k->sess = u.ok ? u.session : 0;
        if (!u.ok)
            return 0;
        k->sent_v5 = 1;
    }
    struct iovec iv = {(void *)k->req, k->req_len};
    srpc_tx_msg_t m = {.hdr = {.type = SRPC_REQUEST, .version = c->cfg.version, .func_id = k->func_id,
                               .req_id = k->req_id, .aux = k->aux},
                       .pieces = &iv, .npieces = k->req_len ? 1 : 0, .len = k->req_len, .seg_size = c->seg};
    sign_with(c, &m, &u);
    srpc_tp_send(c->tp, &m, 1);
    wipe_use(&u);
    return m.result;
}

static void finish(srpc_client_t *c, cl_call_t *k, int code, uint8_t *data, uint32_t len);
static void send_waiting(srpc_client_t *c);
static void v5_tick(srpc_client_t *c, uint64_t now);
static void v5_handshake_in(srpc_client_t *c, const uint8_t *d, uint32_t total);
static uint8_t *dup_bytes(const uint8_t *p, uint32_t n);

/* Finishes k with a local code and its text (a copy). Lock held. */
static void finish_local(srpc_client_t *c, cl_call_t *k, int code, const char *msg)
{
    uint32_t l = (uint32_t)strlen(msg);
    finish(c, k, code, dup_bytes((const uint8_t *)msg, l), l);
}

static void note_due(srpc_client_t *c, uint64_t due)
{
    if (due < c->next_due)
        c->next_due = due;
}

/* Sends again every unfinished request that is due (a retransmission, or a try after BUSY),
 * and finds the next due time. Cheap when nothing is due: one comparison. Lock held. */
static void retransmit_due(srpc_client_t *c)
{
    uint64_t now = srpc_now_ns();
    if (now < c->next_due || c->shut)
        return;
    uint64_t settle = UINT64_MAX; /* version 5: a session a NO_SESSION named while young ends now */
    if (c->v5) {
        int killed = 0;
        settle = srpc_cl_v5_settle(c->v5, now, &killed);
        if (killed && !c->v5->hs_on)
            v5_start(c, now);
    }
    if (c->v5 && c->v5->hs_on)
        v5_tick(c, now);
    uint64_t next = c->v5 && c->v5->hs_on ? c->v5->hs_due_ns : UINT64_MAX;
    if (settle < next)
        next = settle;
    const uint64_t hi = (uint64_t)c->cfg.rto_max_us * 1000;
    for (int b = 0; b < NBUCKETS; b++)
        for (cl_call_t *k = c->buckets[b]; k; k = k->hnext) {
            if (k->done || !k->req || k->due_ns == UINT64_MAX)
                continue;
            if (k->due_ns <= now) {
                if (k->busy_wait) { /* its backoff after BUSY is over: a fresh attempt */
                    k->busy_wait = 0;
                    c->st.busy_retries++;
                    send_request(c, k);
                    k->due_ns = c->cfg.retries && k->deadline_ns > now ? now + rto_ns(c, k->func_id) : UINT64_MAX;
                } else if (k->attempts >= c->cfg.retries || now >= k->deadline_ns) {
                    k->due_ns = UINT64_MAX; /* given up: the caller's timeout decides */
                    continue;
                } else {
                    const uint64_t was = k->sess; /* version 5: the session it was sent under (0: none yet) */
                    send_request(c, k); /* a lost resend is retried */
                    if (c->v5 && !k->sess) { /* no session to send under: nothing went, and no try is spent;
                                                v5_send_waiting_calls sends it (and arms this) once there is */
                        k->resent |= was != 0; /* an answer may come to the send under the old one */
                        k->due_ns = UINT64_MAX;
                        continue;
                    }
                    k->attempts++;
                    c->st.retransmits++;
                    uint64_t wait = k->attempts < 20 ? rto_ns(c, k->func_id) << k->attempts : hi;
                    k->due_ns = now + (wait < hi ? wait : hi);
                }
            }
            if (k->due_ns < next)
                next = k->due_ns;
        }
    if (c->v5 && c->v5->hs_on && c->v5->hs_due_ns < next) /* (one a send above may have started) */
        next = c->v5->hs_due_ns;
    c->next_due = next;
}

/* A BUSY answer to flow call k: arms a later try and returns 1, or returns 0 when BUSY is its
 * outcome (no retries, no copy to send, or the try would come after its deadline). Lock held. */
static int busy_retry(srpc_client_t *c, cl_call_t *k)
{
    if (!k->flow || !c->cfg.busy_retry || !k->req)
        return 0;
    const uint64_t hi = (uint64_t)c->cfg.rto_max_us * 1000;
    uint64_t base = (uint64_t)c->cfg.busy_backoff_us * 1000;
    uint64_t wait = k->busy_n < 20 ? base << k->busy_n : hi;
    if (wait > hi)
        wait = hi;
    c->rnd ^= c->rnd << 13; /* xorshift64: jitter in [wait / 2, wait] */
    c->rnd ^= c->rnd >> 7;
    c->rnd ^= c->rnd << 17;
    wait = wait / 2 + c->rnd % (wait / 2 + 1);
    uint64_t now = srpc_now_ns();
    if (now + wait >= k->deadline_ns)
        return 0;
    k->busy_n++;
    k->busy_wait = 1;
    k->due_ns = now + wait;
    note_due(c, k->due_ns);
    return 1;
}

/* ------------------------------------------------------------------ the window (lock held) */

static void window_unlink(srpc_client_t *c, cl_call_t *k)
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
static void window_leave(srpc_client_t *c, cl_call_t *k)
{
    if (k->in_window) {
        k->in_window = 0;
        c->outstanding--;
    }
}

static int window_full(const srpc_client_t *c)
{
    return c->cfg.window && c->outstanding >= c->cfg.window;
}

/* Sends the waiting calls the window has room for, oldest first; one whose deadline has passed
 * finishes with SRPC_E_TIMEOUT unsent. Sends under the lock (the transport's send is
 * thread-safe; the lock keeps the order). */
static void send_waiting(srpc_client_t *c)
{
    while (c->whead && !window_full(c) && !c->shut) {
        cl_call_t *k = c->whead;
        window_unlink(c, k);
        uint64_t now = srpc_now_ns();
        if (now >= k->deadline_ns) {
            finish_local(c, k, SRPC_E_TIMEOUT, "the call's deadline passed while it waited for the client's window");
            continue;
        }
        k->in_window = 1;
        c->outstanding++;
        k->sent_ns = now;
        k->due_ns = c->cfg.retries ? now + rto_ns(c, k->func_id) : UINT64_MAX;
        note_due(c, k->due_ns);
        if (send_request(c, k) < 0 && !c->cfg.retries && !k->done)
            finish_local(c, k, SRPC_E_SEND, "the request could not be sent");
    }
}

void srpc_client_destroy(srpc_client_t *c)
{
    if (!c)
        return;
    for (int b = 0; b < NBUCKETS; b++)
        for (cl_call_t *k = c->buckets[b], *n; k; k = n) {
            n = k->hnext;
            call_free(k);
        }
    srpc_rx_free(&c->rx);
    srpc_transport_close(c->tp);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->lock);
    srpc_auth_wipe(&c->auth, sizeof(c->auth)); /* the key's secret */
    if (c->v5) {
        srpc_cl_v5_wipe(c->v5); /* the psk and every session's keys */
        srpc_aes_keys_wipe();   /* and the AES-256-GCM keys this thread expanded (other threads keep theirs
                                   until replaced or their end: core/aes_keys.h) */
        free(c->v5);
    }
    free(c);
}

int srpc_client_shutdown(srpc_client_t *c)
{
    if (!c)
        return -EINVAL;
    pthread_mutex_lock(&c->lock);
    if (!c->shut) {
        c->shut = 1;
        for (int b = 0; b < NBUCKETS; b++)
            for (cl_call_t *k = c->buckets[b]; k; k = k->hnext)
                if (!k->done)
                    finish_local(c, k, SRPC_E_CLOSED, "the client was closed");
        c->next_due = UINT64_MAX; /* nothing is due any more (an event loop's next wake) */
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->lock);
    /* Sends registered before the shut (their calls finished above) may still be on their way
     * out: wait for them, so that nothing leaves after this returns. They do not block (a full
     * socket queue refuses), so this is microseconds. */
    while (atomic_load(&c->sending))
        sched_yield();
    return 0;
}

static cl_call_t **bucket(srpc_client_t *c, uint64_t id)
{
    return &c->buckets[(id ^ (id >> 17) ^ (id >> 31)) & (NBUCKETS - 1)];
}

static cl_call_t *find(srpc_client_t *c, uint64_t id)
{
    for (cl_call_t *k = *bucket(c, id); k; k = k->hnext)
        if (k->req_id == id)
            return k;
    return NULL;
}

static void done_unlink(cl_call_t *k)
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

static void finish(srpc_client_t *c, cl_call_t *k, int code, uint8_t *data, uint32_t len)
{
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
        window_unlink(c, k);
    window_leave(c, k);
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

static uint8_t *dup_bytes(const uint8_t *p, uint32_t n)
{
    uint8_t *d = malloc(n ? n : 1);
    if (d && n)
        memcpy(d, p, n);
    return d;
}

/* One reply datagram, hostile until checked. Lock held. */
/* The server answered DRAINING: it takes no new call. The calls still waiting for the window
 * (never sent) fail now with SRPC_E_DRAINING, so their callers can send them elsewhere at once
 * instead of after the server has gone. Lock held. */
static void fail_unsent_draining(srpc_client_t *c)
{
    while (c->whead) {
        c->st.draining_unsent++;
        finish_local(c, c->whead, SRPC_E_DRAINING, "not sent: the server is draining (it answered DRAINING to an "
                                                  "earlier call); safe to send elsewhere");
    }
}

/* Version 4: whether the datagram whose header is hb and whose *dlen bytes after it are at data
 * ends with a trailer of our key whose tag is right; then *dlen loses the trailer. Checked
 * before any other field or data byte is believed. */
static int signed_by_us(const srpc_client_t *c, const uint8_t *hb, const uint8_t *data, uint32_t *dlen)
{
    if (*dlen < SRPC_AUTH_TRAILER_LEN)
        return 0;
    const uint32_t n = *dlen - SRPC_AUTH_TRAILER_LEN;
    srpc_auth_fields_t f;
    srpc_auth_fields(data + n, &f);
    if (f.key_id != c->auth.key_id || !srpc_auth_check(c->auth.secret, hb, data, n, data + n))
        return 0;
    *dlen = n;
    return 1;
}

/* One datagram received: total bytes, its header at hb and the rest at data; trunc: longer
 * than what is here. Hostile until checked. Lock held. */
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
        v5_handshake_in(c, d, total);
        return;
    }
    if (trunc || srpc_hdr_decode(hb, total < SRPC_HDR_LEN ? total : SRPC_HDR_LEN, &h) < 0 ||
        h.type == SRPC_REQUEST || h.version != c->cfg.version) {
        c->st.dropped++;
        return;
    }
    if (h.version == SRPC_VERSION_4 && !signed_by_us(c, hb, data, &dlen)) {
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
    cl_call_t *k = find(c, h.req_id);
    if (!k || k->done || k->waiting || k->func_id != h.func_id) { /* waiting: never sent, so no reply is its */
        c->st.late_or_unknown++;
        return;
    }
    if (h.type == SRPC_ERROR) {
        if (h.aux == SRPC_E_BUSY && !k->busy_wait && busy_retry(c, k))
            return;
        if (k->busy_wait) /* a BUSY for an earlier send while a later one is armed: that one decides */
            return;
        uint32_t l = dlen < SRPC_ERRMSG_MAX ? dlen : SRPC_ERRMSG_MAX;
        finish(c, k, h.aux ? h.aux : SRPC_E_INTERNAL, dup_bytes(data, l), l);
        if (h.aux == SRPC_E_DRAINING)
            fail_unsent_draining(c);
        return;
    }
    if (h.msg_len > c->cfg.max_reply) {
        static const char msg[] = "reply larger than the client's max_reply";
        finish(c, k, SRPC_E_TOO_LARGE, dup_bytes((const uint8_t *)msg, sizeof(msg) - 1), sizeof(msg) - 1);
        return;
    }
    if (h.nseg == 1) {
        finish(c, k, 0, dup_bytes(data, dlen), dlen);
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
        finish(c, k, 0, buf, len);
    }
}

static void timed_wait(srpc_client_t *c, uint64_t until_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(until_ns / 1000000000ull), .tv_nsec = (long)(until_ns % 1000000000ull)};
    pthread_cond_timedwait(&c->cv, &c->lock, &ts);
}

/* The kernel said the server is unreachable (an ICMP error on the connected socket, err > 0):
 * every unfinished flow call that does not wait for ready fails now with SRPC_E_UNAVAILABLE,
 * sent or still waiting for the window. A load run's calls (not flow calls) keep their
 * deadlines. Lock held; rare, so the whole table is walked. */
static void fail_unreachable(srpc_client_t *c, int err)
{
    char msg[SRPC_CLIENT_MSG_MAX];
    snprintf(msg, sizeof(msg), "the server %s port %u is unreachable (%s)", c->host, (unsigned)c->cfg.port,
             strerror(err));
    c->st.unreachable++;
    for (unsigned b = 0; b < NBUCKETS; b++)
        for (cl_call_t *k = c->buckets[b]; k; k = k->hnext)
            if (!k->done && k->flow && !k->wait_ready) {
                finish_local(c, k, SRPC_E_UNAVAILABLE, msg);
                c->st.unavailable++;
            }
}

/* Version 5: whether call k waits for a session: unfinished, sent or to be sent (not waiting for
 * the window), and its session none or one it can no longer count on. */
static int v5_needs_session(const srpc_client_t *c, const cl_call_t *k)
{
    return !k->done && !k->waiting && (k->sess == 0 || !srpc_cl_v5_alive(c->v5, k->sess));
}

/* A session was made: every call waiting for one is sent under it now (after a NO_SESSION they
 * are the same calls there when the server still has the old session: resume). */
static void v5_send_waiting_calls(srpc_client_t *c)
{
    const uint64_t now = srpc_now_ns();
    for (unsigned b = 0; b < NBUCKETS; b++)
        for (cl_call_t *k = c->buckets[b]; k; k = k->hnext) {
            if (!v5_needs_session(c, k) || !k->req || k->busy_wait) /* (after BUSY: sent when its try is due) */
                continue;
            if (k->sess)
                k->attempts++; /* sent before: Karn's rule, no sample */
            else
                k->sent_ns = now;
            c->v5->st.resent++;
            send_request(c, k);
            if (c->cfg.retries && k->deadline_ns > now) {
                k->due_ns = now + rto_ns(c, k->func_id);
                note_due(c, k->due_ns);
            }
        }
}

/* The client's line ended (no session left young enough to follow: srpc_cl_v5_start): every
 * unfinished call sent under it fails with SRPC_E_TIMEOUT (its outcome unknown: it may have run,
 * and sent again under a new line it would be a new call, which could run it twice). Calls never
 * sent go on under the new line. */
static void v5_fail_sent(srpc_client_t *c)
{
    for (unsigned b = 0; b < NBUCKETS; b++)
        for (cl_call_t *k = c->buckets[b], *next; k; k = next) {
            next = k->hnext;
            if (!k->done && (k->sess || k->sent_v5)) /* (a retransmission finding no session zeroes sess) */
                finish_local(c, k, SRPC_E_TIMEOUT, "no session could follow the one this call was sent under "
                                                   "before the server may have forgotten it (175 s): the call may "
                                                   "have run, and is not sent again");
        }
}

/* No session could be made (why): every caller's call waiting for one fails with
 * SRPC_E_UNAVAILABLE (a load run's calls keep their deadlines); with again 1 (the server may yet
 * answer) a call that waits for ready is left waiting and a new handshake starts for it; with
 * again 0 (the server answered, and will answer the same: it would not encrypt) those fail too. */
static void v5_fail_waiting(srpc_client_t *c, const char *why, int again)
{
    char msg[SRPC_CLIENT_MSG_MAX];
    snprintf(msg, sizeof(msg), "no version 5 session with %s port %u (key %u): %s", c->host, (unsigned)c->cfg.port,
             (unsigned)c->v5->key_id, why);
    int left = 0;
    for (unsigned b = 0; b < NBUCKETS; b++)
        for (cl_call_t *k = c->buckets[b]; k; k = k->hnext) {
            if (!v5_needs_session(c, k))
                continue;
            if (k->flow && (!k->wait_ready || !again)) {
                finish_local(c, k, SRPC_E_UNAVAILABLE, msg);
                c->st.unavailable++;
            } else {
                left++;
            }
        }
    if (left && again)
        v5_start(c, srpc_now_ns());
}

/* The handshake's timer: its INIT again, or its failure. */
static void v5_tick(srpc_client_t *c, uint64_t now)
{
    uint8_t init[SRPC_V5_INIT_LEN];
    const int r = srpc_cl_v5_due(c->v5, now, init);
    if (r == 1)
        send_raw(c, init, sizeof(init));
    else if (r == -ETIMEDOUT)
        v5_fail_waiting(c, "the server answered none of the handshake's INITs in 12.6 s: it may not hold this key, "
                           "or hold another secret for it, or its clock may differ from ours by more than its skew, "
                           "or it may not speak version 5 (its describe() lists 5 in protocols), or be older than "
                           "AEGIS-128L (Client(suites=) without it), or the answers were lost or kept from us on "
                           "the way (an attacker on the path racing our INITs from another address)", 1);
}

/* A datagram of a handshake type from the server (ACCEPT, COOKIE, NO_SESSION), total bytes at d:
 * hostile until checked. */
static void v5_handshake_in(srpc_client_t *c, const uint8_t *d, uint32_t total)
{
    if (c->shut) /* a handshake answer received as the client was shut down: no INIT goes out */
        return;
    srpc_cl_v5_t *v = c->v5;
    const uint64_t now = srpc_now_ns();
    const unsigned type = d[SRPC_OFF_VER_TYPE] & 0x0f;
    if (type == SRPC_V5_ACCEPT) {
        const int r = srpc_cl_v5_on_accept(v, d, total, now);
        if (r == 0)
            v5_send_waiting_calls(c);
        else if (r == -EPROTO)
            v5_fail_waiting(c, "the server would not encrypt the data though the client asked it to", 0);
        else
            c->st.dropped++;
        return;
    }
    if (type == SRPC_V5_COOKIE) {
        uint8_t init[SRPC_V5_INIT_LEN];
        const int r = srpc_cl_v5_on_cookie(v, d, total, now, init);
        if (v->line_ended) { /* its new INIT could no longer name the old session */
            v->line_ended = 0;
            v5_fail_sent(c);
        }
        if (r == 0) {
            send_raw(c, init, sizeof(init));
            note_due(c, v->hs_due_ns);
        } else {
            c->st.dropped++;
        }
        return;
    }
    uint64_t sid, rid;
    uint16_t fid;
    if (type != SRPC_V5_NO_SESSION || srpc_v5_no_session_parse(d, total, &sid, &fid, &rid) < 0) {
        c->st.dropped++;
        return;
    }
    /* Not authenticated: acted on only for a call of ours outstanding under the session named. */
    const cl_call_t *k = find(c, rid);
    if (!k || k->done || k->func_id != fid || k->sess != sid || !srpc_cl_v5_alive(v, sid)) {
        c->st.late_or_unknown++;
        return;
    }
    if (!srpc_cl_v5_kill(v, sid, now)) { /* too young: ended at 100 ms of age unless a reply comes first */
        int killed;
        note_due(c, srpc_cl_v5_settle(v, now, &killed));
        return;
    }
    if (!v->hs_on)
        v5_start(c, now); /* (one under way follows it or a later one: its ACCEPT sends the calls) */
}

static int unreachable_errno(int n)
{
    return n == -ECONNREFUSED || n == -EHOSTUNREACH || n == -ENETUNREACH || n == -EHOSTDOWN;
}

/* Receives what has arrived, waiting up to until_ns for something. Called with the lock
 * held and rx_owned taken by this thread; returns with the lock held. */
static void receive_some(srpc_client_t *c, uint64_t until_ns)
{
    if (c->next_due < until_ns) /* wake for the next retransmission or BUSY retry */
        until_ns = c->next_due;
    pthread_mutex_unlock(&c->lock);
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
    pthread_mutex_lock(&c->lock);
    if (unreachable_errno(n))
        fail_unreachable(c, -n);
    for (int i = 0; i < n; i++)
        for (unsigned j = 0; j < srpc_rx_dgrams(&c->rx, (unsigned)i); j++) { /* those coalesced into it in order */
            const srpc_rx_dg_t d = srpc_rx_dgram(&c->rx, (unsigned)i, j);
            process(c, d.hdr, d.data, d.len, c->rx.trunc[i]);
        }
    if (c->whead)
        send_waiting(c);
}

/* Waits (lock held) until ready(c, arg) or until_ns; one thread receives, others sleep. */
static int wait_until(srpc_client_t *c, int (*ready)(srpc_client_t *, void *), void *arg, uint64_t until_ns)
{
    for (int passes = 0;; passes++) {
        retransmit_due(c);
        int r = ready(c, arg);
        if (r != 0)
            return r;
        if (passes && srpc_now_ns() >= until_ns) /* a zero timeout still makes one receive pass */
            return -ETIMEDOUT;
        if (c->shut) /* nothing left to wait for: every call has finished */
            return -ESHUTDOWN;
        if (c->rx_owned) {
            uint64_t t = srpc_now_ns() + 1000000;
            timed_wait(c, t < until_ns ? t : until_ns);
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
    cl_call_t *k = find(c, *(uint64_t *)arg);
    return !k ? -ENOENT : k->done ? 1 : 0;
}

static int any_ready(srpc_client_t *c, void *arg)
{
    (void)c;
    return ((srpc_client_cq_t *)arg)->head ? 1 : 0;
}

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
    pthread_mutex_lock(&c->lock);
    if (c->shut) { /* closed: nothing more is sent */
        pthread_mutex_unlock(&c->lock);
        for (uint32_t i = 0; i < n; i++)
            call_free(k[i]);
        return -ESHUTDOWN;
    }
    for (uint32_t i = 0; i < n; i++) {
        cl_call_t **b = bucket(c, k[i]->req_id);
        k[i]->hnext = *b;
        *b = k[i];
    }
    c->st.sent_calls += n;
    if (!borrow && (c->whead || window_full(c))) { /* behind the others, in order */
        k[0]->waiting = 1;
        k[0]->wprev = c->wtail;
        if (c->wtail)
            c->wtail->wnext = k[0];
        else
            c->whead = k[0];
        c->wtail = k[0];
        c->st.window_waits++;
        send_waiting(c); /* sends it (and those before it) if the window has room */
        pthread_mutex_unlock(&c->lock);
        return 1;
    }
    uint8_t resend[SRPC_CLIENT_SEND_MAX]; /* 1: retransmitted when due, so a full queue is a loss */
    v5_use_t use = {0};
    if (c->v5)
        v5_take(c, &use); /* without a session the calls wait for the one under way: sent when it is made */
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
            k[i]->due_ns = now + rto_ns(c, fids[i]);
            note_due(c, k[i]->due_ns);
        }
    }
    atomic_fetch_add(&c->sending, 1); /* (under the lock, after the shut check: shutdown waits for it) */
    pthread_mutex_unlock(&c->lock);
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
        sign_with(c, &m[i], &use);
    }
    srpc_tp_send(c->tp, m, n);
    atomic_fetch_sub(&c->sending, 1);
    wipe_use(&use);
    int sent = 0;
    for (uint32_t i = 0; i < n; i++) {
        rcs[i] = m[i].result < 0 ? m[i].result : 0;
        if ((rcs[i] == -EAGAIN || rcs[i] == -ENOBUFS) && resend[i]) {
            /* The transport's queue stayed full (a peer slow to drain it): as a datagram lost on
             * the way, the request goes again when due, within the call's deadline. */
            pthread_mutex_lock(&c->lock);
            c->st.send_full++;
            pthread_mutex_unlock(&c->lock);
            rcs[i] = 0;
        }
        if (rcs[i])
            srpc_client_release(c, ids[i]);
        else
            sent++;
    }
    return sent;
}

static uint64_t deadline_of(int64_t timeout_us)
{
    return timeout_us < 0 ? UINT64_MAX : srpc_now_ns() + (uint64_t)timeout_us * 1000;
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
    return c ? send_call(c, func_id, data, len, aux, cq ? cq : &c->cq, deadline_of(timeout_us), req_id, 0) : -EINVAL;
}

int srpc_client_send_opts(srpc_client_t *c, srpc_client_cq_t *cq, uint16_t func_id, const void *data, uint32_t len,
                          uint16_t aux, int64_t timeout_us, unsigned flags, uint64_t *req_id)
{
    if (!c || flags & ~(SRPC_SEND_WAIT_FOR_READY | SRPC_SEND_FAIL_FAST) ||
        (flags & SRPC_SEND_WAIT_FOR_READY && flags & SRPC_SEND_FAIL_FAST))
        return -EINVAL;
    return send_call(c, func_id, data, len, aux, cq ? cq : &c->cq, deadline_of(timeout_us), req_id, flags);
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
    pthread_mutex_lock(&c->lock);
    for (unsigned b = 0; b < NBUCKETS; b++) /* its calls are reported nowhere from now on */
        for (cl_call_t *k = c->buckets[b]; k; k = k->hnext)
            if (k->cq == cq) {
                done_unlink(k);
                k->cq = NULL;
            }
    pthread_mutex_unlock(&c->lock);
    free(cq);
}

int srpc_client_wait(srpc_client_t *c, uint64_t req_id, int64_t timeout_us)
{
    if (!c)
        return -EINVAL;
    pthread_mutex_lock(&c->lock);
    int r = wait_until(c, call_ready, &req_id, deadline_of(timeout_us));
    pthread_mutex_unlock(&c->lock);
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
    pthread_mutex_lock(&c->lock);
    int r = wait_until(c, any_ready, cq, deadline_of(timeout_us));
    int cnt = 0;
    while (r > 0 && cnt < n && cq->head) {
        cl_call_t *k = cq->head;
        done_unlink(k);
        ids[cnt++] = k->req_id;
    }
    pthread_mutex_unlock(&c->lock);
    return r == -ETIMEDOUT ? 0 : r < 0 ? r : cnt;
}

int srpc_client_result(srpc_client_t *c, uint64_t req_id, int *code, const uint8_t **data, uint32_t *len)
{
    if (!c || !code || !data || !len)
        return -EINVAL;
    pthread_mutex_lock(&c->lock);
    cl_call_t *k = find(c, req_id);
    if (k) {
        *code = k->done ? k->code : SRPC_E_PENDING;
        *data = k->reply;
        *len = k->done ? k->reply_len : 0;
    }
    pthread_mutex_unlock(&c->lock);
    return k ? 0 : -ENOENT;
}

int srpc_client_release(srpc_client_t *c, uint64_t req_id)
{
    if (!c)
        return -EINVAL;
    pthread_mutex_lock(&c->lock);
    cl_call_t **p = bucket(c, req_id);
    while (*p && (*p)->req_id != req_id)
        p = &(*p)->hnext;
    cl_call_t *k = *p;
    if (k) {
        *p = k->hnext;
        done_unlink(k);
        if (k->waiting)
            window_unlink(c, k);
        window_leave(c, k);
        if (!k->done)
            c->st.timeouts++;
        if (c->whead)
            send_waiting(c);
    }
    pthread_mutex_unlock(&c->lock);
    if (!k)
        return -ENOENT;
    call_free(k);
    return 0;
}

int srpc_client_call(srpc_client_t *c, uint16_t func_id, const void *data, uint32_t len,
                     void *out, uint32_t cap, uint32_t *out_len, int *code, int64_t timeout_us)
{
    if (!out_len || !code || (!out && cap))
        return -EINVAL;
    uint64_t id;
    int r = send_call(c, func_id, data, len, 0, NULL, deadline_of(timeout_us), &id, 0);
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

int srpc_client_stats(const srpc_client_t *c, srpc_client_stats_t *out)
{
    if (!c || !out)
        return -EINVAL;
    srpc_client_t *m = (srpc_client_t *)c;
    pthread_mutex_lock(&m->lock);
    *out = m->st;
    out->outstanding = m->outstanding;
    out->waiting = 0;
    for (const cl_call_t *k = m->whead; k; k = k->wnext)
        out->waiting++;
    const rtt_est_t *e = rtt_of(m, m->last_func);
    out->srtt_us = e ? e->srtt_ns / 1000 : 0;
    out->rto_us = m->cfg.retries ? rto_ns(m, m->last_func) / 1000 : 0;
    if (m->v5) {
        const srpc_cl_v5_stats_t *v = &m->v5->st;
        out->handshakes = v->handshakes;
        out->rekeys = v->rekeys;
        out->no_sessions = v->no_sessions;
        out->cookies = v->cookies;
        out->handshakes_failed = v->handshakes_failed;
        out->session_resends = v->resent;
        out->no_sessions_deferred = v->no_sessions_deferred;
    }
    pthread_mutex_unlock(&m->lock);
    return 0;
}

int srpc_client_fd(const srpc_client_t *c)
{
    if (!c)
        return -EINVAL;
    return c->tp->wait_fd >= 0 ? c->tp->wait_fd : -ENOTSUP;
}

int srpc_client_next_due(srpc_client_t *c, uint64_t *due_ns)
{
    if (!c || !due_ns)
        return -EINVAL;
    pthread_mutex_lock(&c->lock);
    *due_ns = c->next_due;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* ------------------------------------------------------------------ fault injection (testing builds) */

int srpc_client_set_faults(srpc_client_t *c, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx,
                           uint64_t seed)
{
    return c ? srpc_tp_set_faults(c->tp, rx, tx, seed) : -EINVAL;
}

int srpc_client_fault_counts(const srpc_client_t *c, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx)
{
    return c ? srpc_tp_fault_counts(c->tp, rx, tx) : -EINVAL;
}
