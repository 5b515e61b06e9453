/* splitrpc_server.h: the server half of the C API: configuration, functions and their Tensor Queues, batches for the worker, completion (now, deferred, on a GPU stream), counters. */
#ifndef SPLITRPC_SERVER_H
#define SPLITRPC_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include "splitrpc_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ server */

typedef struct srpc_server srpc_server_t;

/* Who receives: while the worker thread waits for a batch in poll mode (and in the spin phase
 * of adaptive mode) it runs the engine's receive step itself, inline, so one server thread
 * spins, not two; the engine thread receives while the worker sleeps (block mode, adaptive
 * after spin_us) or has been in a callback for longer than rx_takeover_us. */
enum srpc_wait_mode {
    SRPC_WAIT_POLL = 0,     /* busy-poll: lowest latency, one core spins */
    SRPC_WAIT_BLOCK = 1,    /* epoll / futex: idle-efficient; the engine thread receives */
    SRPC_WAIT_ADAPTIVE = 2  /* poll for spin_us after the last batch, then block */
};

typedef struct srpc_server_config {
    const char *host;            /* numeric IPv4/IPv6 address or name to bind */
    uint16_t port;               /* 0 = any; srpc_server_port() tells which */
    int wait_mode;               /* enum srpc_wait_mode, for the engine and the worker */
    uint32_t spin_us;            /* adaptive: spin this long before blocking */
    uint32_t seg_size;           /* reply segment data size S to non-loopback clients */
    uint32_t seg_size_loopback;  /* reply S to loopback clients */
    uint32_t max_message;        /* largest request accepted (TOO_LARGE above) */
    uint32_t reasm_timeout_us;   /* a partial message is dropped after this */
    uint64_t reasm_mem_cap;      /* bytes of all partial messages together */
    uint64_t reasm_mem_cap_client; /* bytes of the partial messages of one client address (IP) */
    uint32_t reply_cache_us;     /* how long a finished call's reply is remembered */
    uint64_t reply_cache_bytes;  /* bytes of cached replies together */
    uint32_t max_calls;          /* entries of the call table (partial, in progress, cached) */
    uint32_t rx_burst;           /* datagrams per recvmmsg */
    int sock_buf_bytes;          /* SO_RCVBUF/SO_SNDBUF wanted (FORCE tried first) */
    int reuse_port;              /* 1: SO_REUSEPORT, so that several server processes share host:port;
                                    the kernel hands each client address (4-tuple) to one of them, so
                                    all segments of a message land in the same process. Kernel UDP
                                    only (-EINVAL with dpdk_dev) */
    uint32_t rx_takeover_us;     /* poll/adaptive: the engine thread takes over receiving when
                                    a callback has run this long */
    const char *dpdk_dev;        /* NULL: kernel UDP sockets. Else the DPDK port to serve on
                                    ("net_af_packet0", a PCI address; the EAL initialised first
                                    with srpc_dpdk_init): host is then our IPv4 address (a
                                    literal), port must not be 0, and both threads poll */
    uint16_t dpdk_mtu;           /* DPDK: the largest IP packet sent; 0 = 1500. Reply segments
                                    are cut to fit it whatever seg_size says */
    int dpdk_payload_gpu;        /* DPDK, where frames are split (by the NIC, or dpdk_emulate_split):
                                    SRPC_DPDK_PAYLOAD_AUTO (the default): cuda:0 when the CUDA
                                    driver has a device, else host memory; -1: host memory; N: the
                                    memory of cuda:N, from where a one-segment request goes to the
                                    device Tensor Queues of a GPU function without touching the host
                                    (device to host for host functions and larger messages). Needs
                                    the port to verify UDP checksums (else host memory, said on
                                    stderr); srpc_server_dpdk_stats says where they land */
    int dpdk_emulate_split;      /* DPDK: 1 = on a port without a hardware split, split each frame in
                                    software the way the NIC would, so that the path above runs
                                    (tests, measurements); 0 = no */
    const char *allow;           /* NULL or "": datagrams from anywhere. Else the client networks
                                    served, e.g. "10.0.0.0/8,127.0.0.1,::1/128" (at most 32); from
                                    elsewhere, dropped unread (SRPC_DROP_NOT_ALLOWED). -EINVAL if
                                    malformed */
    int sched;                   /* which function's due batch the worker takes next (enum
                                    srpc_sched): round robin (the default), priority, fair share, EDF */
    uint32_t reply_hold_us;      /* srpc_server_complete_next may hold a batch's replies about this
                                    long, to send them with the next batches' in one send (batches of
                                    one call then cost a send per 8 calls). About: the next batch is
                                    taken while the oldest's age plus the function's last batch time
                                    stays within it, so a batch slower than its last may hold them
                                    longer; 0: never held */
} srpc_server_config_t;

/* srpc_server_config_t.sched. Calls past their function's deadline are answered first whatever
 * the policy; a function held back (max_delay_us) or at max_inflight is not a candidate. */
enum srpc_sched {
    SRPC_SCHED_RR = 0,       /* every function with a batch due in turn (work-conserving) */
    SRPC_SCHED_PRIORITY = 1, /* the highest srpc_func_config_t.priority first; equals in turn.
                                Strict: a lower class runs only when no higher one has a batch due */
    SRPC_SCHED_FAIR = 2,     /* weighted fair share: the function that has had the least work per
                                unit of weight (work: admission cost where it has one, else calls) */
    SRPC_SCHED_EDF = 3,      /* earliest deadline first: the oldest queued call's rx time plus its
                                function's deadline_us (SRPC_EDF_NO_DEADLINE_US where none) */
    SRPC_SCHED_MAX
};

/* A policy's name ("rr", "priority", "fair", "edf": what Python and the command line call it),
 * or NULL outside 0 .. SRPC_SCHED_MAX - 1: the one list of policies (sched.c). */
const char *srpc_sched_name(int policy);


/* Fills defaults (documented in native/src/core/tunables.h). */
void srpc_server_config_init(srpc_server_config_t *cfg);

/* Creates the server and binds its socket; no thread runs yet. */
int srpc_server_create(const srpc_server_config_t *cfg, srpc_server_t **out);
/* Stops the engine if running and frees everything. Batches not completed are dropped. GPU
 * functions: the caller first waits for the streams it passed to stage_in/submit, so that no
 * copy still targets the queues. */
void srpc_server_destroy(srpc_server_t *srv);
int srpc_server_port(const srpc_server_t *srv);

/* Registers a function before srpc_server_start(). n_in/n_out tensors, each a fixed number of
 * bytes; the request is the concatenation of the inputs and the reply that of the outputs.
 * raw != 0: one input and one output of variable size up to in_sizes[0]/out_sizes[0]
 * bytes (the zero-copy raw API). capacity: elements in each Tensor Queue. */
#define SRPC_MAX_AUX_CLASSES 16 /* queues of one function (srpc_func_config_t.aux_classes) */
#define SRPC_MAX_CLASS_BOUNDS 15 /* SRPC_MAX_AUX_CLASSES - 1 (a literal: the cffi cdef reads it) */

struct srpc_batch;

/* A native function: a C callback that runs a batch on the worker thread itself, inside
 * srpc_server_next_batch (run to completion: the batch is received, run and answered without
 * the worker leaving the C loop, so no Python and no thread hand-off per batch). It reads b->in,
 * writes b->out (raw: b->out_len[i] for each call) and returns 0, or an error code 1 ..
 * SRPC_E_MAX - 1 (e.g. SRPC_E_INTERNAL) that every call of the batch is answered with; it may
 * fail single calls with srpc_server_fail_call(srv, b, ...). It must be quick and must not block:
 * the worker receives nothing while it runs, and the engine thread takes over receiving only
 * once it has run rx_takeover_us (as for any callback). It must not call srpc_server_next_batch, srpc_server_complete or
 * srpc_server_defer (the server completes the batch). ctx is the registration's, srv the server
 * (for srpc_server_fail_call). */
typedef int (*srpc_native_fn)(void *ctx, srpc_server_t *srv, struct srpc_batch *b);

typedef struct srpc_func_config {
    uint16_t func_id;
    int raw;
    uint32_t n_in, n_out;
    const uint32_t *in_sizes;
    const uint32_t *out_sizes;
    uint32_t capacity;
    uint32_t max_batch;
    uint32_t max_delay_us;
    int on_gpu;          /* 1: Tensor Queues in the memory of CUDA device gpu_device, with
                            pinned host staging laid out slot for slot (tensor functions only;
                            -ENODEV without a usable GPU, -EINVAL for a raw function) */
    int gpu_device;
    uint32_t deadline_us; /* 0: none. A call still queued this long after its request was complete
                             is not run: its client gets DEADLINE (an SLO on queueing) */
    uint32_t max_inflight; /* 0: no limit. Else at most this many of the function's batches are out
                              at once (handed out, deferred, not yet finished): the threads of the
                              executor that runs them. At the limit its calls wait in its queue
                              (and fill its next batch) while other functions' batches are taken */
    /* Admission cost: a number per call, computed by the engine when the call's request is
     * complete (srpc_batch_t.cost), bounding batches with max_batch_cost and seen by schedulers. */
    int cost_from;             /* SRPC_COST_NONE (every call costs 0), SRPC_COST_AUX (the request
                                  header's aux) or SRPC_COST_TABLE (below; host functions only) */
    const uint32_t *cost_table; /* TABLE: cost of each key 0 .. cost_table_len - 1 (copied) */
    uint32_t cost_table_len;
    uint32_t cost_key_offset;  /* TABLE: byte offset of the first key in the request */
    uint32_t cost_key_count;   /* TABLE: keys back to back from there; the call costs the sum of
                                  their rows (at most UINT32_MAX). A key outside the table, or a
                                  raw request too short for its keys, answers that call alone
                                  BAD_REQUEST, saying which key. 0 (raw functions only): every
                                  key from cost_key_offset to the end of the request (a
                                  variable-length list, e.g. a GNN request's seed nodes; a
                                  request that does not end on a whole key is BAD_REQUEST) */
    uint32_t cost_key_size;    /* TABLE: 4 or 8: keys are little-endian signed integers */
    uint64_t max_batch_cost;   /* 0: none. Else a batch's calls cost at most this together, as
                                  max_batch bounds their count (a call costlier alone runs alone) */
    uint32_t priority;         /* SRPC_SCHED_PRIORITY: higher runs first (0: the lowest) */
    uint32_t weight;           /* SRPC_SCHED_FAIR: its share of the work (0 counts as 1) */
    uint32_t aux_classes;      /* 0 or 1: one queue. N (2 .. SRPC_MAX_AUX_CLASSES): N queues (each
                                  with its own Tensor Queues of capacity elements), one per class: a
                                  call goes to class min(aux, N - 1) of its request header, and
                                  class k ranks as priority + k. Each class is scheduled as a
                                  function of its own (srpc_batch_t.aux_class says which). -EINVAL
                                  with cost_from SRPC_COST_AUX (aux cannot mean both), unless the
                                  classes are by cost (class_by) */
    int class_by;              /* SRPC_CLASS_BY_AUX (0, as above) or SRPC_CLASS_BY_COST: a call
                                  goes to the class its admission cost falls in, class k holding
                                  costs in [class_bounds[k - 1], class_bounds[k]) (class 0 below
                                  class_bounds[0], the last from the last bound up): the engine
                                  computes the cost when the request is complete and puts the call
                                  in that class's queue, so each class's batches hold only its own
                                  calls (e.g. one lane each). Needs a cost (cost_from not NONE),
                                  a host function, and requests that arrive in host memory
                                  (-EINVAL otherwise). A call with a bad cost key is BAD_REQUEST
                                  alone; a multi-segment request is put together apart and then
                                  copied into its class's queue (never placed in an element early) */
    uint32_t class_bounds[SRPC_MAX_CLASS_BOUNDS]; /* BY_COST: aux_classes - 1 costs, strictly
                                  ascending, the first at least 1 (-EINVAL otherwise) */
    uint32_t class_spill[SRPC_MAX_CLASS_BOUNDS]; /* BY_COST, load-aware: 0 (never), or while class
                                  k's queue (k < aux_classes - 1) holds at least class_spill[k]
                                  calls not yet answered (waiting or running), a call of class k
                                  goes to class k + 1 instead (whose own spill then applies): cheap
                                  calls overflow a busy lane for the next one up, never down */
    srpc_native_fn native;     /* NULL: the function's batches are handed out by
                                  srpc_server_next_batch. Else run there, inline (above): a host
                                  function without max_inflight (-EINVAL on a GPU) */
    void *native_ctx;
} srpc_func_config_t;

#define SRPC_MAX_FUNCS 2048    /* queues in a server: a function with aux classes has one each */

/* srpc_func_config_t.class_by */
#define SRPC_CLASS_BY_AUX 0
#define SRPC_CLASS_BY_COST 1

/* srpc_func_config_t.cost_from */
#define SRPC_COST_NONE 0
#define SRPC_COST_AUX 1
#define SRPC_COST_TABLE 2


/* Fills a function's defaults (native/src/core/tunables.h): one input and one output, capacity
 * SRPC_DEF_TQ_CAPACITY, max_batch SRPC_DEF_MAX_BATCH, the rest 0 (host, no delay, no deadline,
 * no limit on batches out). */
void srpc_func_config_init(srpc_func_config_t *fc);

int srpc_server_add_function(srpc_server_t *srv, const srpc_func_config_t *fc);

/* A scheduling policy of the caller's, asked once per batch decision when more than one function
 * has a batch due (never per datagram): it sees each such function's queue and returns the index
 * (in due[]) of the one to take, and may cut the batch to *max_calls calls (0: no cut beyond
 * max_batch and max_batch_cost). -1: no preference, the server's built-in policy (sched)
 * decides; any other value outside 0 .. n - 1 is counted as an error
 * (srpc_server_stats_t.sched_errors) and the built-in policy decides. Calls past their
 * deadline are answered before it is asked. It runs on the worker thread, inside
 * srpc_server_next_batch, with no lock held; it must not call back into the server. */
typedef struct srpc_sched_view {
    uint16_t func_id;
    uint16_t aux_class;       /* which of its aux classes' queues (0 without classes) */
    uint32_t queued;          /* calls queued and ready */
    uint64_t oldest_wait_ns;  /* how long the oldest of them has been queued */
    uint64_t queued_cost;     /* their summed admission cost (0 without one) */
    uint32_t inflight;        /* its batches out (deferred, not yet finished) */
    uint32_t priority, weight;
    uint64_t deadline_ns;     /* its deadline (0: none) */
} srpc_sched_view_t;
typedef int (*srpc_sched_fn)(void *ctx, const srpc_sched_view_t *due, uint32_t n, uint32_t *max_calls);
/* Installs fn (NULL: none) with ctx before srpc_server_start. Returns 0, -EBUSY once started, or -ENOMEM. */
int srpc_server_set_sched_fn(srpc_server_t *srv, srpc_sched_fn fn, void *ctx);

/* Starts the engine thread. */
int srpc_server_start(srpc_server_t *srv);
/* Stops the engine thread and wakes any waiting worker (which gets -ESHUTDOWN). */
int srpc_server_stop(srpc_server_t *srv);
/* Starts (on != 0) or ends a drain: while draining, the first segment of a new call is answered
 * ERROR DRAINING (docs/PROTOCOL.md, Amendment 1); calls already known (being reassembled, queued,
 * running, or answered and cached) are served as before. Any thread, any time; returns 0 or
 * -EINVAL. */
int srpc_server_drain(srpc_server_t *srv, int on);
/* The calls not yet answered: being reassembled, queued or running (a drain is over when this
 * is 0). Any thread; takes the server's lock for one pass over the call table. */
int srpc_server_pending(srpc_server_t *srv, uint64_t *out);

/* A batch handed to the worker: `count` consecutive calls of one function. in[k] points at
 * the first of `count` contiguous elements of input k's request TQ, out[k] likewise for the
 * response TQ. Valid until srpc_server_complete(); the worker thread owns it until then. */
typedef struct srpc_batch { /* (declared above for srpc_native_fn) */
    uint16_t func_id;
    uint32_t count;
    uint64_t first_seq;
    uint8_t *in[SRPC_MAX_TENSORS];
    uint8_t *out[SRPC_MAX_TENSORS];
    uint32_t *in_len;   /* raw functions: request length of each call (count entries) */
    uint32_t *out_len;  /* raw functions: the worker writes each reply length here */
    uint64_t pos;       /* first_seq modulo the period after which every Tensor Queue of the
                           function puts elements at the same addresses again (UINT64_MAX if
                           that period is huge): equal (pos, count) means equal pointers */
    int gpu_device;     /* -1: host function; else its CUDA device, and in/out above are the
                           pinned host staging elements, din/dout the device TQ elements */
    uint64_t din[SRPC_MAX_TENSORS];
    uint64_t dout[SRPC_MAX_TENSORS];
    const uint32_t *cost; /* functions with an admission cost: each call's (count entries); valid
                             until the worker's next srpc_server_next_batch. Else NULL */
    uint16_t aux_class;   /* a function with aux classes: the class of every call of the batch */
} srpc_batch_t;

/* Waits up to timeout_us (-1 = forever) for a batch, following the server's wait mode.
 * Returns 0 with *b filled, -ETIMEDOUT, or -ESHUTDOWN once stopped. One worker thread.
 * Batches of native functions (srpc_func_config_t.native) are run and answered in here and
 * never returned; the timeout is looked at after each of them. */
int srpc_server_next_batch(srpc_server_t *srv, srpc_batch_t *b, int64_t timeout_us);

/* Finishes a batch: status 0 sends each reply (raw: out_len[i] bytes); status an error code
 * (e.g. SRPC_E_INTERNAL) sends that ERROR, with msg (may be NULL) as its text, to every
 * call of the batch. Called by the thread that got the batch. */
int srpc_server_complete(srpc_server_t *srv, srpc_batch_t *b, int status, const char *msg);

/* Fails call i of batch b alone (0 <= i < b->count): it gets ERROR `code` (1 .. SRPC_E_MAX - 1,
 * e.g. SRPC_E_BAD_REQUEST for a bad key) with msg (may be NULL; at most SRPC_ERRMSG_MAX bytes
 * are kept) as its text, while the batch's other calls get the batch's outcome. A second call
 * for the same i replaces the first; a batch completed with an error sends that error to every
 * call. Either on an open batch, by the worker thread before srpc_server_complete or
 * srpc_server_defer; or on a deferred batch (b: the copy srpc_server_finish takes), by the
 * thread that will finish it, before srpc_server_finish. Returns 0, -EINVAL (neither, i out of
 * range, a bad code) or -ENOMEM. */
int srpc_server_fail_call(srpc_server_t *srv, srpc_batch_t *b, uint32_t i, int code, const char *msg);

/* The key (splitrpc_auth.h: its id) that each call of the open batch b came with, into
 * ids[0 .. b->count): 0 for a call of a server without keys. By the worker thread before
 * srpc_server_complete or srpc_server_defer (a native function's callback too). Takes the
 * server's lock. Returns 0 or -EINVAL (b not an open batch, ids NULL). */
int srpc_server_call_keys(srpc_server_t *srv, const srpc_batch_t *b, uint32_t *ids);

/* srpc_server_complete, then srpc_server_next_batch into the same *b: one call per batch for
 * a worker loop. Returns what next_batch returns, or complete's error. */
int srpc_server_complete_next(srpc_server_t *srv, srpc_batch_t *b, int status, const char *msg,
                              int64_t timeout_us);

/* Asynchronous completion. A batch handed back with srpc_server_defer is in flight: the worker
 * goes on taking batches, and the batch's replies go out once its done word becomes nonzero:
 * SRPC_DONE | status, status 0 (send the outputs) or an error code (send that ERROR to each
 * call, with no text). The word is written once: by srpc_server_finish from any thread (which
 * also wakes the worker, gives a raw function's reply lengths and an error's text), or directly
 * with a release store (the GPU through srpc_gpu_signal, or another thread). Batches of one
 * function finish in the order they were handed out, whatever order their words are written in;
 * srpc_server_complete on a later batch waits behind earlier ones in flight the same way. The
 * worker finishes batches (sends replies, recycles elements) inside next_batch, complete and
 * srpc_server_poll. While a GPU function's batches are in flight, next_batch polls even in block
 * mode; a host function's word written directly (not by srpc_server_finish) is seen within
 * SRPC_DEFER_CHECK_US by a worker asleep in block mode. */
#define SRPC_DONE 0x80000000u
/* Marks b in flight and gives the address of its done word (valid until it is finished);
 * b->count becomes 0 (copy *b first to finish it with srpc_server_finish). A raw function's
 * batch is finished with srpc_server_finish, which carries its lengths (its word written
 * directly sends each call INTERNAL). Worker thread only. Returns 0 or -EINVAL (not a batch
 * handed out and not yet completed). */
int srpc_server_defer(srpc_server_t *srv, srpc_batch_t *b, uint32_t **done);
/* Finishes a deferred batch, from any thread, once: status 0 sends each call its outputs (a raw
 * function's: b->out_len[i] bytes, read now) or the error it was failed with alone; an error
 * code sends that ERROR with msg (may be NULL) as text to every call. b is the batch as
 * srpc_server_next_batch filled it, copied before srpc_server_defer (out_len may point at the
 * caller's own array of count lengths). Writes the done word and wakes the worker, which sends
 * the replies. Returns 0, or -EINVAL (not a deferred batch, or finished already). */
int srpc_server_finish(srpc_server_t *srv, const srpc_batch_t *b, int status, const char *msg);
/* Finishes every in-flight batch whose done word is set (in order). Worker thread only.
 * Returns the number of batches finished. */
int srpc_server_poll(srpc_server_t *srv);

/* GPU functions (on_gpu): queue on `stream` (a CUstream as an integer) the copies of the
 * batch's requests from the pinned host staging elements to the device TQ elements (din).
 * Worker thread; the batch must not have been completed or deferred yet. Returns 0, -EINVAL
 * (host function, bad batch) or a GPU error (-EIO, -ENODEV). */
int srpc_server_stage_in(srpc_server_t *srv, const srpc_batch_t *b, uint64_t stream);
/* Queues on `stream`, after the work the callback launched there, the copies of the batch's
 * outputs from the device TQ elements (dout) to the host staging elements, then the write of
 * the batch's done word (srpc_gpu_signal), and defers the batch: its replies go out when the
 * stream gets there. The Python worker never waits for the GPU. Worker thread. */
int srpc_server_submit(srpc_server_t *srv, srpc_batch_t *b, uint64_t stream);
/* O2 (GPU-managed orchestration) instead of a callback and srpc_server_submit, for a GPU
 * function with one float32 input and one output of the same size, that of the vectors `o2`
 * (splitrpc_gpu.h) was started for. After srpc_server_stage_in on `stream`, hands the batch to
 * the persistent kernel, which writes the outputs straight into the page-locked output staging
 * and then the batch's done word, and defers the batch. Worker thread. Returns 0; -EINVAL
 * (not such a function, bad batch); -ENOTSUP (staging not page-locked); -EBUSY (the kernel's
 * ring is full: the batch is still open, try again); a GPU error. */
struct srpc_o2;
int srpc_server_submit_o2(srpc_server_t *srv, srpc_batch_t *b, struct srpc_o2 *o2, uint64_t stream);

/* Counters. Fields are monotonically increasing except where noted. */
enum srpc_drop_reason {
    SRPC_DROP_SHORT = 0,       /* shorter than the header */
    SRPC_DROP_BAD_HEADER,      /* magic, version or type */
    SRPC_DROP_BAD_SEGMENT,     /* impossible seq/nseg/msg_len/length */
    SRPC_DROP_TRUNCATED,       /* datagram larger than the receive buffer */
    SRPC_DROP_NOT_REQUEST,     /* RESPONSE or ERROR sent to the server */
    SRPC_DROP_INCONSISTENT,    /* segment disagrees with the message's S or msg_len */
    SRPC_DROP_REASM_TIMEOUT,   /* partial message expired (counted once per message) */
    SRPC_DROP_MEM_CAP,         /* reassembly memory cap reached */
    SRPC_DROP_TABLE_FULL,      /* call table full */
    SRPC_DROP_DUPLICATE,       /* duplicate segment or duplicate of a call in progress */
    SRPC_DROP_REJECTED,        /* further segment of a message already answered with an error */
    SRPC_DROP_TX_FAILED,       /* a reply datagram the socket would not take */
    SRPC_DROP_NOT_ALLOWED,     /* from a source outside the server's allow-list */
    SRPC_DROP_BAD_CHECK,       /* version 2 or 3 header whose check does not match */
    SRPC_DROP_CLIENT_MEM_CAP,  /* the sending address's share of reassembly memory reached */
    SRPC_DROP_BAD_DATA_CHECK,  /* version 3 datagram whose data check does not match */
    /* Authentication (a server with keys, docs/PROTOCOL-v4.md): dropped unanswered. */
    SRPC_DROP_AUTH_MISSING,    /* a request of version 1..3 at a server that takes only version 4 */
    SRPC_DROP_AUTH_UNKNOWN_KEY,/* a key id not in the server's table (or too short for a trailer) */
    SRPC_DROP_AUTH_BAD_TAG,    /* the tag does not match: forged, or changed on the way */
    SRPC_DROP_AUTH_STALE,      /* its time is further than the skew from the server's clock */
    SRPC_DROP_AUTH_REPLAY,     /* its (key, sender, counter) was taken before, or is behind the window */
    SRPC_DROP_AUTH_NO_ROOM,    /* a new sender of a key whose table of senders is full */
    SRPC_DROP_AUTH_V4_OFF,     /* a version 4 request at a server whose table does not take them
                                  (srpc_keytab_legacy_v4): version 5's sessions only */
    SRPC_DROP_AUTH_ADDRESS,    /* version 5: a datagram of a session from another address than its INIT's
                                  (answered at most by a NO_SESSION: a client that moved makes a new session) */
    SRPC_DROP_MAX
};

/* The name of drop reason r ("short", "bad_header", ...: the keys of a server's drop counters),
 * or NULL past the last one. */
const char *srpc_drop_name(int reason);

#define SRPC_BATCH_HIST 65 /* batch sizes 1..64, the last bucket is 64 and above */
/* Queue delay buckets: bucket i < SRPC_QDELAY_HIST - 1 counts delays of at most 2^i us and
 * more than 2^(i-1) us (bucket 0: at most 1 us); the last one, delays over 2^(SRPC_QDELAY_HIST-2)
 * us (about 67 s). */
#define SRPC_QDELAY_HIST 28

typedef struct srpc_server_stats {
    uint64_t rx_datagrams, rx_bytes, tx_datagrams, tx_bytes;
    uint64_t rx_in_place;    /* segments received straight into their message buffer */
    uint64_t unplaced;       /* partial messages moved out of their Tensor Queue element, so
                                that calls completed behind them did not wait longer */
    uint64_t calls;          /* requests fully received and queued */
    uint64_t replies;        /* RESPONSE messages sent */
    uint64_t batches;
    uint64_t batch_calls;    /* sum of batch sizes */
    uint64_t batch_hist[SRPC_BATCH_HIST];
    uint64_t drops[SRPC_DROP_MAX];
    uint64_t errors[SRPC_E_MAX];   /* ERROR messages sent, by code */
    uint64_t cache_hits;     /* replies re-sent from the reply cache */
    uint64_t partial_msgs;   /* gauge: messages being reassembled */
    uint64_t reasm_bytes;    /* gauge: bytes held by partial messages */
    uint64_t cached_replies; /* gauge */
    uint64_t inflight;       /* gauge: batches deferred (or completed behind one) not yet finished */
    uint64_t queued;         /* gauge: calls queued (RX_COMPLETE) and not yet taken into a batch */
    /* Queue delay of every call run: from RX_COMPLETE (fully received) to the start of the
     * batch that runs it, counted when the batch is taken; not cumulative (see above). */
    uint64_t queue_delay_hist[SRPC_QDELAY_HIST];
    uint64_t queue_delay_sum_ns;
    uint64_t sched_asked;    /* batch decisions put to the caller's policy (srpc_server_set_sched_fn) */
    uint64_t sched_errors;   /* ... that it answered with an invalid choice (the built-in policy decided) */
    uint64_t sched_looks;    /* queues the batcher looked at to choose batches: work, not time; it grows
                                with the queues that have calls waiting, never with those registered */
    uint64_t tx_coalesced;   /* datagrams sent in runs to one client that the kernel cut (UDP segmentation
                                offload: one pass down the stack for a batch's replies); 0 without it */
    uint64_t rx_unscattered; /* datagrams received into the place of the segment expected next that were
                                another, then moved whole to the burst path (mispredictions) */
    uint64_t rx_coalesced;   /* datagrams that came coalesced with others of their sender (UDP receive
                                offload: one buffer up the stack for a run the client sent in one) */
    uint64_t tx_sends;       /* transport sends of the worker's replies (a batch's, with those of the
                                batches before it it held): replies / tx_sends is about how many went
                                in each (error replies of a receive burst and re-sends from the
                                reply cache go in sends of their own, not counted here) */
    uint64_t rx_receives;    /* transport receives that returned datagrams (a burst each; in-place
                                receives one each): rx_datagrams / rx_receives is about how many
                                came in each. Empty polls are not counted */
    uint64_t auth_ok;        /* datagrams authenticated (version 5: session, tag and counter passed;
                                version 4: tag, time and replay window) */
    uint64_t auth_forbidden; /* calls refused FORBIDDEN: the function is not one their key may call */
    uint64_t auth_expired;   /* calls refused FORBIDDEN: their key has expired */
    uint64_t auth_reloads;   /* key tables taken in while serving (srpc_server_set_keys) */
    int rcvbuf, sndbuf;      /* effective socket buffer sizes */
    uint64_t sessions;       /* gauge: version 5 sessions held (a handshake makes one; the sweep, once a
                                second at most, forgets those past their time, and those moved on from
                                stale_ms after the client is seen on the next) */
    uint64_t sessions_made;      /* version 5 sessions made (handshakes answered with a new session) */
    uint64_t sessions_forgotten; /* version 5 sessions forgotten: past their time, moved on from, their
                                    key gone, or silent and making room */
    uint64_t sessions_tombstones; /* gauge: forgotten sessions kept as tombstones (their line still had
                                     calls in the call table: a resume naming one follows its line) */
    uint64_t sessions_tomb_resumes; /* sessions made by a resume naming a forgotten session */
} srpc_server_stats_t;

int srpc_server_stats(const srpc_server_t *srv, srpc_server_stats_t *out);

/* One function's counters (its aux classes summed): the per-function view of the server's. */
typedef struct srpc_func_stats {
    uint64_t calls;                 /* requests fully received and queued */
    uint64_t errors[SRPC_E_MAX];    /* ERROR messages sent for calls of it, by code (BUSY, DRAINING...) */
    uint64_t batches;
    uint64_t batch_hist[SRPC_BATCH_HIST];
    uint64_t queue_delay_hist[SRPC_QDELAY_HIST]; /* buckets as srpc_server_stats_t's */
    uint64_t queue_delay_sum_ns;
    uint64_t batch_calls;           /* calls taken into its batches (run, or being run) */
    /* Server time of every call its batches ran: from the call fully received (as the queue delay)
     * to its reply (RESPONSE or the batch's ERROR) handed to the sender; buckets as queue_delay_hist's.
     * A held reply (reply_hold_us) leaves at most that much later. Counted when the batch finishes. */
    uint64_t service_hist[SRPC_QDELAY_HIST];
    uint64_t service_sum_ns;
    uint64_t queued;                /* gauge: its calls queued and not yet taken (read last: not summed) */
} srpc_func_stats_t;

/* func_id's counters. Any thread; takes the server's lock briefly. Returns 0, -EINVAL, or
 * -ENOENT for a function not registered. */
int srpc_server_func_stats(const srpc_server_t *srv, uint16_t func_id, srpc_func_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif /* SPLITRPC_SERVER_H */
