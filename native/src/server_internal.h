/* server_internal.h: the server's state shared by engine.c (RX thread), worker.c (batch
 * hand-off and TX) and server.c (life cycle). Everything marked "lock" is guarded by
 * srv->lock; atomics are touched without it. */
#ifndef SRPC_SERVER_INTERNAL_H
#define SRPC_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "allowlist.h"
#include "calltab.h"
#include "srcmem.h"
#include "splitrpc.h"
#include "splitrpc_gpu.h"
#include "transport_dpdk.h"
#include "transport_udp.h"

/* Inference Monitor states of a call (SplitRPC §4). */
enum srpc_call_state {
    CALL_READY = 0, CALL_RX_COMPLETE, CALL_WORK_COMPLETE, CALL_TX_COMPLETE,
    CALL_RESERVED, /* a multi-segment request is being reassembled straight into the element */
    CALL_VOID      /* a reserved element whose request never completed: skipped, then recycled */
};

/* Where the engine put a request (srpc_call_t.dev_in). */
enum {
    SRPC_DEV_IN_HOST = 0,   /* the host TQs (a GPU function's staging, copied over per batch) */
    SRPC_DEV_IN_DEVICE = 1, /* straight into a GPU function's device TQs, from a payload in GPU
                               memory: the batch's staging copy skips it */
    SRPC_DEV_IN_FAILED = 2  /* the copy from GPU memory failed: answered INTERNAL, never run */
};

/* Inference Monitor record of the call that owns TQ element `seq` of a function. */
typedef struct srpc_call {
    uint8_t state;     /* enum srpc_call_state */
    uint32_t ct_idx;   /* its call-table entry (client address, req_id, func_id) */
    uint32_t in_len;   /* request bytes (raw functions vary) */
    uint64_t rx_ns;    /* when it became RX_COMPLETE */
    uint16_t code;     /* outcome sent: 0 RESPONSE or an error code */
    uint32_t out_len;  /* bytes of the reply (or error text) sent */
    uint8_t *reply;    /* copy of what was sent, for the reply cache (malloc) */
    uint8_t dev_in;    /* SRPC_DEV_IN_*: where the engine put the request */
    /* Set on the first element of a batch when it is handed out (worker thread only): */
    uint64_t batch_seq; /* the batch's first_seq */
    uint32_t batch_n;  /* the batch's size */
    uint8_t batch_open; /* handed out, neither completed nor deferred yet */
    char *batch_msg;   /* its error text (malloc), when completed with one */
} srpc_call_t;

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
    uint32_t *batch_in_len, *batch_out_len; /* max_batch each, for the raw API */
    /* Ring counters, each only grows: done <= taken <= ready_end <= head <= done + capacity. */
    uint64_t head;      /* lock: next element the engine fills (or reserves) */
    uint64_t ready_end; /* lock: [taken, ready_end) are settled (RX_COMPLETE or VOID); a
                           RESERVED element stops it, so batches keep arrival order */
    uint64_t taken;     /* lock: next element handed to the worker */
    uint64_t done;      /* lock: next element recycled after TX_COMPLETE */
    uint32_t reserved;  /* lock: elements RESERVED now (bounded: see SRPC_PLACE_MAX_FRACTION) */
    uint32_t dev_failed; /* lock: calls marked SRPC_DEV_IN_FAILED not yet taken */
    /* Done words of batches in flight, at the index of their first element (worker thread;
     * written by anyone once deferred): 0 pending, SRPC_DONE | status when finished. In
     * pinned, device-mapped memory for a GPU function (done_dev: its device address). */
    uint32_t *done_words;
    uint64_t done_dev;
    uint32_t inflight;  /* worker: batches deferred or completed and not yet finished */
    /* GPU functions: the TQs above are the pinned host staging, these the device TQs. */
    int gpu_device;     /* -1: host function */
    srpc_dtq_t *in_dtq[SRPC_MAX_TENSORS], *out_dtq[SRPC_MAX_TENSORS];
    int staging_pinned; /* the staging TQs are page-locked (else the copies are synchronous) */
    uint64_t out_stage_dev[SRPC_MAX_TENSORS]; /* pinned: device addresses of the output staging */
} srpc_fn_t;

#define SRPC_MAX_FUNCS 64

/* Recycles VOID elements the ring counters have reached (lock held). worker = 1 on the worker
 * thread, which alone may look at the elements it has been handed. */
void srpc_fn_retire_voids(srpc_fn_t *fn, int worker);

/* The function of a batch handed out to the worker and neither completed nor deferred yet,
 * else NULL. Worker thread (worker.c). */
srpc_fn_t *srpc_open_batch_fn(srpc_server_t *srv, const srpc_batch_t *b);
/* Puts such a batch in flight (b->count becomes 0) and returns its done word. Worker thread. */
uint32_t *srpc_hand_back(srpc_server_t *srv, srpc_fn_t *fn, srpc_batch_t *b);

/* What the worker thread is doing, which decides who receives (see engine.c). */
enum srpc_worker_state {
    W_AWAY = 0,   /* in Python with a batch (or not in next_batch at all) */
    W_POLLING,    /* in next_batch, receiving inline: the engine thread sleeps */
    W_BLOCKED     /* in next_batch, asleep: the engine thread receives */
};

struct srpc_server {
    srpc_server_config_t cfg;
    char host[256];
    srpc_udp_t udp;                  /* kernel UDP (fd -1 with DPDK) */
    srpc_dpdk_port_t *dpdk;          /* the DPDK port instead, or NULL */
    uint32_t dpdk_seg;               /* DPDK: the largest reply segment that fits the MTU */
    uint64_t rx_stream;              /* a DPDK port's payloads land in GPU memory: the stream of
                                        the engine's copies out of it (else 0) */
    struct srpc_dev_call {           /* lock: the calls copied from GPU memory in this burst */
        struct srpc_fn *fn;
        uint64_t seq;
    } *rx_dev_calls;                 /* rx.burst of them (allocated with rx_stream) */
    unsigned rx_dev_copies;          /* lock: how many */
    srpc_allowlist_t allow;          /* read-only once created */
    srpc_rx_t rx;                    /* whoever holds rx_lock */
    pthread_mutex_t rx_lock;         /* the right to receive: engine thread or polling worker */
    int direct_hint;                 /* rx_lock: recent traffic had large segments of partial
                                        messages, so try receiving in place first */
    pthread_mutex_t lock;
    calltab_t ct;                    /* lock */
    srpc_fn_t *fns[SRPC_MAX_FUNCS];
    uint32_t nfns;
    srpc_fn_t **by_id;               /* 65536 entries, read-only once started */
    uint64_t reasm_bytes;            /* lock */
    srcmem_t srcmem;                 /* lock: reassembly bytes by client address */
    srpc_bufpool_t pool;             /* lock: freed reassembly buffers for reuse */
    uint64_t cache_bytes;            /* lock */
    uint32_t rr;                     /* worker: round-robin cursor over functions */
    uint32_t inflight;               /* worker: sum of the functions' inflight */
    pthread_t thread;
    int started;
    int stopfd;                      /* eventfd, readable once stopping */
    int wakefd;                      /* eventfd: the engine's timers made calls ready (wakes poll()) */
    atomic_int stopping;
    atomic_uint ready_gen;           /* bumped when calls are queued; the worker futex-waits on it */
    atomic_int worker_sleeping;
    atomic_uint n_ready;             /* calls queued and not yet taken */
    atomic_int w_state;              /* enum srpc_worker_state */
    _Atomic uint64_t w_away_since;   /* when the worker last left next_batch */
    atomic_uint e_gen;               /* the engine thread futex-waits on it while the worker polls */
    srpc_server_stats_t st;          /* updated with relaxed atomic adds */
};

#define ST_ADD(srv, field, v) __atomic_fetch_add(&(srv)->st.field, (v), __ATOMIC_RELAXED)

uint64_t srpc_now_ns(void);
void *srpc_engine_main(void *arg);
/* One RX burst: receive, check, reassemble, queue, wake the worker. Caller holds rx_lock.
 * Returns the number of datagrams received (0 when none was waiting). */
int srpc_engine_rx_step(srpc_server_t *srv);
/* For the fuzz harness and tests: one datagram handled as if received from src, and the timers
 * run as if the clock read now_ns. They take rx_lock and lock themselves, like the engine. */
int srpc_engine_feed(srpc_server_t *srv, const uint8_t *dgram, size_t len, const struct sockaddr *src,
                     socklen_t srclen);
void srpc_engine_run_timers(srpc_server_t *srv, uint64_t now_ns);
/* Wakes the engine thread so it re-reads w_state. */
void srpc_engine_kick(srpc_server_t *srv);
/* Sends one message to the call's client (reply data, or error text when code != 0).
 * Thread-safe. */
int srpc_server_send(srpc_server_t *srv, const srpc_call_key_t *key, int code,
                     const struct iovec *pieces, int n, uint32_t len);
int srpc_server_send_error(srpc_server_t *srv, const srpc_call_key_t *key, int code, const char *msg);
/* Frees what an entry holds and removes it (lock held). */
void srpc_server_drop_entry(srpc_server_t *srv, uint32_t idx);
/* Makes room for one more entry by evicting the oldest cached reply or rejection (lock). */
int srpc_server_evict_one(srpc_server_t *srv);
void srpc_futex_wake(atomic_uint *addr);
int srpc_futex_wait(atomic_uint *addr, unsigned expected, int64_t timeout_us);

#endif
