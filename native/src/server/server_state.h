/* server_state.h: the state of a server, grouped by the concern that owns it, with the lock or thread that guards each field, and the checks of those rules (debug builds). Data only: the code is in the files named below. */
#ifndef SRPC_SERVER_STATE_H
#define SRPC_SERVER_STATE_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/bitset.h"
#include "core/clock.h"
#include "core/owner.h"
#include "server/allowlist.h"
#include "server/calltab.h"
#include "server/srcmem.h"
#include "splitrpc_gpu.h"
#include "splitrpc_server.h"
#include "transport/transport.h"

/* Thread and lock rules, checked where cheap (builds without NDEBUG: the tests' builds; core/owner.h):
 *   *_locked   the caller holds srv->lock (srpc_srv_lock);
 *   *_rx       the caller holds the right to receive, srv->rx.lock (rx_owner.c);
 *   *_w        the worker thread: the one that took the batches in next_batch (completion.c).
 * Everything else says its rule where it is declared. */
#define SRPC_ASSERT_LOCKED(srv) SRPC_ASSERT_OWNER((srv)->lock_owner)
#define SRPC_ASSERT_RX(srv) SRPC_ASSERT_OWNER((srv)->rx.owner)
#define SRPC_ASSERT_WORKER(srv) SRPC_ASSERT_OWNER((srv)->worker)

#define SRPC_AWAY_UNKNOWN (UINT64_MAX / 4) /* srpc_fn_t.away_ns before a first batch; sums stay in range */

#define unlikely(x) __builtin_expect(!!(x), 0)

/* ------------------------------------------------------------------ the Inference Monitor (callring.c) */

/* States of the call that owns a Tensor Queue element (SplitRPC §4). Only callring.c and the
 * inline transitions in callring.h change them. */
enum srpc_call_state {
    CALL_READY = 0, CALL_RX_COMPLETE, CALL_WORK_COMPLETE, CALL_TX_COMPLETE,
    CALL_RESERVED, /* a multi-segment request is being reassembled straight into the element */
    CALL_VOID      /* a reserved element whose request never completed: skipped, then recycled */
};

/* Where the engine put a request (srpc_call_t.dev_in). */
enum {
    SRPC_DEV_IN_HOST = 0,   /* the host TQs (a GPU function's staging, copied over per batch) */
    SRPC_DEV_IN_DEVICE = 1  /* straight into a GPU function's device TQs, from a payload in GPU
                               memory: the batch's staging copy skips it */
};

/* The record of the call that owns TQ element `seq` of a function (calls[seq % capacity]).
 * Elements in [done, taken) are the worker's: it reads and writes their records without the
 * lock; the others are the engine's, under the lock. A deferred batch's records (out_len,
 * fail_code, fail_msg, batch_msg) are the finishing thread's until it writes the done word
 * (srpc_server_finish, release), after which the worker reads them (acquire). */
typedef struct srpc_call {
    uint8_t state;     /* enum srpc_call_state */
    uint8_t dev_in;    /* SRPC_DEV_IN_*: where the engine put the request */
    uint8_t refused;   /* 1: never run, answered with fail_code and fail_msg (the copy from GPU
                          memory failed, a bad cost key); set by the engine with the lock */
    uint16_t code;     /* outcome sent: 0 RESPONSE or an error code */
    uint32_t ct_idx;   /* its call-table entry (client address, req_id, func_id) */
    uint32_t in_len;   /* request bytes (raw functions vary) */
    uint32_t out_len;  /* bytes of the reply (or error text) sent */
    uint64_t rx_ns;    /* when it became RX_COMPLETE (RESERVED: since when) */
    /* Set on the first element of a batch when it is handed out (worker thread only): */
    uint64_t batch_seq; /* the batch's first_seq */
    uint32_t batch_n;  /* the batch's size */
    uint8_t batch_open; /* handed out, neither completed nor deferred yet */
    char *batch_msg;   /* its error text (malloc), when completed with one in flight */
    /* This call's own outcome, set by srpc_server_fail_call (worker thread only, while the
     * call is the worker's), or by the engine when it refuses the call: */
    uint16_t fail_code; /* 0: the batch's outcome; else this ERROR code */
    char *fail_msg;    /* its text (malloc) or NULL */
    uint32_t cost;     /* its admission cost (cost.c), set when it becomes RX_COMPLETE */
} srpc_call_t;

/* A registered function: its Tensor Queues, the Inference Monitor records of their elements
 * and the ring counters. Sizes and queues are read-only once the server starts. */
typedef struct srpc_fn {
    uint16_t func_id;
    int raw;
    uint32_t n_in, n_out;
    uint32_t in_size[SRPC_MAX_TENSORS], out_size[SRPC_MAX_TENSORS];
    uint32_t req_bytes, resp_bytes; /* fixed: sums of the tensors; raw: the maxima */
    uint32_t capacity, max_batch, max_delay_us;
    uint64_t deadline_ns;           /* 0: none; else calls queued longer get DEADLINE unrun */
    uint64_t period;                /* element addresses of every TQ repeat after this many (0: huge) */
    srpc_tq_t *in_tq[SRPC_MAX_TENSORS], *out_tq[SRPC_MAX_TENSORS];
    srpc_call_t *calls;             /* capacity records: element seq at calls[seq % capacity] */
    uint32_t *batch_in_len, *batch_out_len; /* max_batch each, for the raw API (worker) */
    /* Ring counters (callring.c moves them), each only grows:
     * done <= taken <= ready_end <= head <= done + capacity. */
    uint64_t head;      /* lock: next element the engine fills (or reserves) */
    uint64_t ready_end; /* lock: [taken, ready_end) are settled (RX_COMPLETE or VOID); a
                           RESERVED element stops it, so batches keep arrival order */
    uint64_t taken;     /* lock: next element handed to the worker */
    uint64_t done;      /* lock: next element recycled after TX_COMPLETE */
    uint32_t reserved;  /* lock: elements RESERVED now (bounded: see SRPC_PLACE_MAX_FRACTION) */
    uint32_t refused;   /* lock: calls refused (never run) not yet taken */
    /* Done words of batches in flight, at the index of their first element (worker thread;
     * written by anyone once deferred): 0 pending, SRPC_DONE | status when finished. In
     * pinned, device-mapped memory for a GPU function (done_dev: its device address). */
    uint32_t *done_words;
    uint64_t done_dev;
    uint32_t inflight;  /* worker: batches deferred or completed and not yet finished */
    uint32_t max_inflight; /* read-only: 0, or the most batches out at once (the batcher skips
                              the function at the limit) */
    srpc_native_fn native;  /* read-only: NULL, or the C callback next_batch runs its batches with */
    void *native_ctx;
    int native_misused;     /* worker: the callback was seen completing its own batch (said once) */
    /* Admission cost (cost.c), read-only once registered. */
    int cost_from;                  /* SRPC_COST_* */
    uint32_t *cost_table, cost_table_len; /* TABLE: owned copy */
    uint32_t cost_key_offset, cost_key_count, cost_key_size;
    uint64_t max_batch_cost;        /* 0: none */
    uint32_t *batch_cost;           /* max_batch entries: the batch's costs (worker) */
    /* Scheduling (sched.c). */
    uint32_t priority, weight;      /* read-only (a class's priority includes its class) */
    uint16_t aux_class, n_classes;  /* read-only: its class, and how many its function has (0 or
                                       1: none); the classes' records are first_fi, first_fi + 1.. */
    uint32_t first_fi;              /* read-only: srv->fns index of class 0 */
    uint32_t fi;                    /* read-only: its own srv->fns index */
    uint8_t class_by_cost;          /* read-only: its classes are by admission cost, not by aux
                                       (admit.c picks the class once the request is complete) */
    uint32_t class_bounds[SRPC_MAX_CLASS_BOUNDS]; /* read-only: class_by_cost's n_classes - 1 bounds */
    uint32_t class_spill[SRPC_MAX_CLASS_BOUNDS];  /* read-only: and their spill limits (0: none) */
    uint64_t vtime;                 /* lock: fair share: its virtual finish time */
    uint8_t cb_slow;    /* worker: its last batch kept the worker away longer than half of
                           rx_takeover_us, or it has had none yet (rx_owner.c: the engine
                           thread is then told at once) */
    uint64_t away_ns;   /* worker: how long its last batch kept the worker away (SRPC_AWAY_UNKNOWN
                           before its first: counts as long) */
    uint32_t held;      /* worker: its replies held to go out with later ones (reply.c) */
    uint64_t held_first; /* worker: the element of the oldest of them, while held > 0 */
    /* GPU functions: the TQs above are the pinned host staging, these the device TQs. */
    int gpu_device;     /* -1: host function */
    srpc_dtq_t *in_dtq[SRPC_MAX_TENSORS], *out_dtq[SRPC_MAX_TENSORS];
    int staging_pinned; /* the staging TQs are page-locked (else the copies are synchronous) */
    uint64_t out_stage_dev[SRPC_MAX_TENSORS]; /* pinned: device addresses of the output staging */
    /* Its counters (FN_ADD, relaxed atomic adds from the engine, worker and reply paths; queued
     * unused here: srpc_server_func_stats reads the ring). errors are counted on class 0's record,
     * and in the server's too (unknown functions have none); calls, batches and the histograms
     * only here: srpc_server_stats sums them, so the per-call paths count each once. */
    srpc_func_stats_t st;
} srpc_fn_t;

#define FN_ADD(fn, field, v) __atomic_fetch_add(&(fn)->st.field, (v), __ATOMIC_RELAXED)

/* The bucket of a delay of ns in the queue-delay and service histograms: the first i with ns <=
 * 2^i us (splitrpc_server.h), rounded up so that "at most 2^i us" holds exactly. */
static inline unsigned srpc_delay_bucket(uint64_t ns)
{
    uint64_t us = (ns + 999) / 1000;
    unsigned i = us <= 1 ? 0 : 64u - (unsigned)__builtin_clzll(us - 1);
    return i < SRPC_QDELAY_HIST ? i : SRPC_QDELAY_HIST - 1;
}


/* ------------------------------------------------------------------ the reply log (reply.c) */

/* Cached replies, back to back in one ring of bytes in the order they were cached, which is the
 * order they leave (expiry and eviction take the oldest): caching a reply is one copy, with no
 * allocation. Offsets only grow; byte off lives at base[off % cap]. Lock. */
typedef struct srpc_reply_log {
    uint8_t *base;
    uint64_t cap;
    uint64_t head;  /* where the next reply goes */
    uint64_t tail;  /* the oldest cached byte (== head: none) */
} srpc_reply_log_t;

/* Error replies the engine decided during one receive burst, sent together after it (rx). */
#define SRPC_ERRQ_MAX 64
typedef struct srpc_errq {
    unsigned n;
    srpc_call_key_t key[SRPC_ERRQ_MAX];
    uint16_t code[SRPC_ERRQ_MAX];
    uint16_t len[SRPC_ERRQ_MAX];
    uint8_t secret[SRPC_ERRQ_MAX][SRPC_AUTH_SECRET_LEN]; /* version 4: the key the reply is signed with */
    char text[SRPC_ERRQ_MAX][SRPC_ERRMSG_MAX + 1];
} srpc_errq_t;

/* ------------------------------------------------------------------ who receives (rx_owner.c) */

/* What the worker thread is doing, which decides who receives (rx_owner.c). */
enum srpc_worker_state {
    W_AWAY = 0,   /* in Python with a batch (or not in next_batch at all) */
    W_POLLING,    /* in next_batch, receiving inline: the engine thread sleeps */
    W_BLOCKED     /* in next_batch, asleep on the transport's fd: it still receives */
};

/* The right to receive and what goes with it: the slots, the in-place hint, the error replies
 * of the burst, the timers' schedule. Whoever holds lock receives (engine thread or worker). */
typedef struct srpc_rx_state {
    pthread_mutex_t lock;
    _Atomic unsigned long owner;     /* debug builds: the thread holding lock */
    srpc_rx_t slots;                 /* rx */
    int direct_hint;                 /* rx: recent traffic had large segments of partial
                                        messages, so try receiving in place first */
    int direct_off;                  /* rx: the transport cannot receive in place (now) */
    /* rx: the segments expected next: those after pred_seq of the message keyed pred_key, the
     * last large segment received of a message being reassembled (pred_on 0: none). Received
     * with one scattered burst into their places; after a misprediction, scatter_skip datagrams
     * take the peek path first. */
    srpc_call_key_t pred_key;
    uint16_t pred_seq;
    uint8_t pred_on;
    unsigned scatter_skip;
    unsigned run_mode;               /* rx: > 0 while a sender's runs come coalesced (UDP GRO): the
                                        expected segments are received as one (transport rx_run);
                                        datagram.c's srpc_dgram_note_run_rx keeps it */
    unsigned ready;                  /* rx: calls this burst made ready (the worker is woken once) */
    srpc_errq_t errq;                /* rx */
    const uint8_t *auth_secret;      /* rx: the secret of the version 4 datagram being handled (its
                                        error replies are signed with it), or version 5's session
                                        key for replies (k_s2c), NULL otherwise */
    uint64_t next_timer_ns;          /* rx: when the expiry timers are due next */
    /* GPU payloads (a transport whose data lands in device memory): the stream of the burst's
     * copies out of it, and the calls they were for (gpu_rx.c). */
    uint64_t dev_stream;
    struct srpc_dev_call {
        srpc_fn_t *fn;
        uint64_t seq;
    } *dev_calls;                    /* burst of them; lock */
    unsigned dev_copies;             /* lock */
    /* Handshake with the engine thread (rx_owner.c). */
    atomic_int w_state;              /* enum srpc_worker_state */
    _Atomic uint64_t w_away_since;   /* when the worker last left next_batch */
    atomic_int w_slow;               /* its last callback ran longer than half the takeover time */
    atomic_uint e_gen;               /* the engine thread futex-waits on it */
} srpc_rx_state_t;

/* ------------------------------------------------------------------ the server */

struct srpc_server {
    srpc_server_config_t cfg;        /* read-only once created */
    char host[256];
    srpc_transport_t *tp;            /* read-only once created */
    srpc_allowlist_t allow;          /* read-only once created */
    /* Authentication (keytab.c, docs/PROTOCOL-v4.md): on once a key table is given before start
     * (read-only once started); the table in use (rx) and the one a reload handed in (any thread
     * swaps it in or out: whoever takes it out of keys_next owns it); the server's own sender
     * number and counter for the replies it signs. */
    int auth_on;
    uint32_t auth_max_senders;       /* the first table's: a reload may not change it (windows stay) */
    struct srpc_keytab *keys;
    struct srpc_keytab *_Atomic keys_next;
    uint64_t auth_sender;
    uint64_t auth_counter;           /* advanced atomically by every thread that signs (version 5's
                                        replies too: a counter that never repeats under any key) */
    struct srpc_sessions *sessions;  /* version 5's (sessions.c): with keys, where libsodium has
                                        what it needs; rx and lock */
    uint64_t sessions_swept_ms;      /* rx: when expired sessions were last forgotten */
    srpc_rx_state_t rx;
    pthread_mutex_t lock;            /* the call table, the ring counters, the reply log */
    _Atomic unsigned long lock_owner; /* debug builds: the thread holding lock */
    calltab_t ct;                    /* lock */
    srpc_fn_t *fns[SRPC_MAX_FUNCS];  /* read-only once started */
    uint32_t nfns;
    /* fns indices of the queues with calls settled and not yet taken (taken < ready_end), and of
     * those with batches in flight (inflight > 0): what the batcher and the poll of batches in
     * flight walk, so that their work grows with the busy queues, never with those registered. */
    uint64_t queued_set[SRPC_BITSET_WORDS(SRPC_MAX_FUNCS)];   /* lock (callring.c) */
    uint64_t inflight_set[SRPC_BITSET_WORDS(SRPC_MAX_FUNCS)]; /* worker (completion.c) */
    srpc_fn_t **by_id;               /* 65536 entries, read-only once started */
    uint64_t reasm_bytes;            /* lock: bytes of partial messages (partial.c) */
    uint32_t partial_gen;            /* lock: partial messages started (ct_entry_t.gen), wrapping */
    srcmem_t srcmem;                 /* lock: the same by client address */
    srpc_bufpool_t pool;             /* lock: freed reassembly buffers for reuse */
    srpc_reply_log_t log;            /* lock */
    /* The worker (next_batch.c, batcher.c, completion.c). */
    _Atomic unsigned long worker;    /* debug builds: the thread in next_batch last */
    uint32_t rr;                     /* worker: round-robin cursor over functions */
    uint64_t vclock;                 /* lock: fair share: the rank of the batch taken last */
    srpc_sched_fn sched_fn;          /* read-only once started: the caller's policy, or NULL */
    void *sched_ctx;
    srpc_sched_view_t *sched_view;   /* worker: SRPC_MAX_FUNCS views shown to sched_fn (with it) */
    uint32_t *sched_fi;              /* worker: and each one's srv->fns index */
    srpc_fn_t *last_fn;              /* worker: the function of the batch handed out last */
    uint64_t last_left_ns;           /* worker: when it handed that batch out (rx_owner.c) */
    struct srpc_reply_hold *held;    /* worker: replies held across batches (reply.c) */
    uint32_t inflight;               /* worker (read by stats): sum of the functions' inflight */
    uint32_t inflight_gpu;           /* worker: those of GPU functions, whose done words nobody
                                        wakes the worker for (it polls while there are any) */
    atomic_uint ready_gen;           /* bumped when calls are queued; the worker futex-waits on it */
    atomic_int worker_sleeping;
    atomic_uint n_ready;             /* calls queued and not yet taken */
    /* Life cycle (server.c). */
    pthread_t thread;
    int started;
    int stopfd;                      /* eventfd, readable once stopping */
    int wakefd;                      /* eventfd: the timers made calls ready (wakes poll()) */
    atomic_int stopping;
    atomic_int draining;             /* srpc_server_drain: new calls are answered DRAINING */
    srpc_server_stats_t st;          /* updated with relaxed atomic adds */
};

#define ST_ADD(srv, field, v) __atomic_fetch_add(&(srv)->st.field, (v), __ATOMIC_RELAXED)

/* The queue of class `aux` of func_id (min(aux, classes - 1)): the function's record, or that of
 * the class; NULL for an unknown function. A call goes by its header's aux, except to a function
 * whose classes are by cost (class_by_cost), whose class admit.c computes. */
static inline srpc_fn_t *srpc_fn_lookup(const srpc_server_t *srv, uint16_t func_id, uint16_t aux)
{
    srpc_fn_t *fn = srv->by_id[func_id];
    if (fn && fn->n_classes > 1)
        fn = srv->fns[fn->first_fi + (aux < fn->n_classes ? aux : fn->n_classes - 1u)];
    return fn;
}

static inline void srpc_srv_lock(srpc_server_t *srv)
{
    pthread_mutex_lock(&srv->lock);
    SRPC_OWNER_SET(srv->lock_owner);
}

static inline void srpc_srv_unlock(srpc_server_t *srv)
{
    SRPC_OWNER_CLEAR(srv->lock_owner);
    pthread_mutex_unlock(&srv->lock);
}

/* The right to receive (rx): whoever holds srv->rx.lock. */
static inline void srpc_rx_lock(srpc_server_t *srv)
{
    pthread_mutex_lock(&srv->rx.lock);
    SRPC_OWNER_SET(srv->rx.owner);
}

static inline int srpc_rx_trylock(srpc_server_t *srv)
{
    if (pthread_mutex_trylock(&srv->rx.lock) != 0)
        return 0;
    SRPC_OWNER_SET(srv->rx.owner);
    return 1;
}

static inline void srpc_rx_unlock(srpc_server_t *srv)
{
    SRPC_OWNER_CLEAR(srv->rx.owner);
    pthread_mutex_unlock(&srv->rx.lock);
}

#endif /* SRPC_SERVER_STATE_H */
