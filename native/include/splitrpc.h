/* splitrpc.h: the one flat C API of the splitrpc native core; every int function returns 0 (or a count) or -errno. */
#ifndef SPLITRPC_H
#define SPLITRPC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ wire (PROTOCOL.md v1, docs/PROTOCOL-v2.md) */

#define SRPC_HDR_LEN 22           /* control header bytes at the start of every datagram */
#define SRPC_MAGIC 0xA5
#define SRPC_VERSION 1            /* version 1: PROTOCOL.md */
#define SRPC_VERSION_2 2          /* version 2: version 1 with a CRC-16 header check, 48-bit req_id */
#define SRPC_REQ_ID_V2_MASK 0xffffffffffffull
#define SRPC_MAX_SEG_DATA 65485   /* 65507 (largest UDP/IPv4 payload) - 22 */
#define SRPC_ERRMSG_MAX 256       /* longest optional UTF-8 message of an ERROR datagram */

enum srpc_msg_type { SRPC_REQUEST = 0, SRPC_RESPONSE = 1, SRPC_ERROR = 2 };

enum srpc_error_code {
    SRPC_E_UNKNOWN_FUNCTION = 1,
    SRPC_E_BAD_REQUEST = 2,
    SRPC_E_BUSY = 3,
    SRPC_E_DEADLINE = 4,
    SRPC_E_INTERNAL = 5,
    SRPC_E_TOO_LARGE = 6,
    SRPC_E_MAX = 7 /* one past the last code; local-only codes below are never sent */
};
/* Local (client-side) outcomes, never on the wire. */
#define SRPC_E_TIMEOUT 100
#define SRPC_E_PENDING 101
#define SRPC_E_INVALID 102   /* load generator: a RESPONSE that differs from the expected reply */
#define SRPC_E_SEND 103      /* load generator: the request could not be sent */

/* A decoded control header, fields in host order. */
typedef struct srpc_hdr {
    uint8_t type;     /* enum srpc_msg_type */
    uint8_t version;  /* 1 or 2; 0 is taken as 1 when encoding */
    uint16_t func_id;
    uint64_t req_id;
    uint16_t seq;
    uint16_t nseg;
    uint32_t msg_len;
    uint16_t aux;
} srpc_hdr_t;

/* Writes the 22-byte big-endian header of h->version (version 2 with its check). Returns 0,
 * or -EINVAL for a type > 2, a version other than 0, 1, 2, or a version 2 req_id over 48 bits. */
int srpc_hdr_encode(const srpc_hdr_t *h, uint8_t out[SRPC_HDR_LEN]);

/* Parses and checks the header alone: length >= 22, magic, version (1 or 2), the version 2
 * check, type, nseg >= 1, seq < nseg. Returns 0, -EMSGSIZE (short), -EILSEQ (version 2 check
 * mismatch, tested before any other field), -EBADMSG (magic/version/type) or -EPROTO
 * (seq/nseg). Never reads past len. */
int srpc_hdr_decode(const uint8_t *buf, size_t len, srpc_hdr_t *out);

/* The version 2 check of a 22-byte header: CRC-16/CCITT-FALSE over it with bytes 4..5 as 0. */
uint16_t srpc_hdr_check16(const uint8_t hdr[SRPC_HDR_LEN]);

/* Checks the segmentation rules of PROTOCOL.md for one segment carrying data_len bytes
 * and derives the message's segment size S (for nseg == 1, S = msg_len).
 * Returns 0 with *seg_size set, or -EPROTO for an impossible combination. */
int srpc_seg_check(const srpc_hdr_t *h, size_t data_len, uint32_t *seg_size);

/* Number of segments for a message of msg_len bytes cut at seg_size (>= 1). */
uint32_t srpc_seg_count(uint32_t msg_len, uint32_t seg_size);

/* ------------------------------------------------------------------ message codec */

/* Whole messages to and from datagrams without a socket: what a client or server puts on the
 * wire and takes off it, for tests, tools and other transports. */

/* Cuts a message of len bytes into the datagrams a sender puts on the wire for it: each is the
 * header of tmpl (type, func_id, req_id, aux; seq, nseg and msg_len filled in) followed by its
 * segment of data, S = seg_size (1..SRPC_MAX_SEG_DATA). The datagrams are written back to back
 * into out (cap bytes; len + 22 * count in all) and dgram_len[i] gets the length of datagram i.
 * Returns the count of datagrams, -EINVAL (NULL pointer, type > 2, bad seg_size), -EMSGSIZE
 * (more than 65535 segments) or -ENOBUFS (cap or max_dgrams too small; nothing written).
 * Reads data and tmpl only; any thread. */
int srpc_msg_segment(const srpc_hdr_t *tmpl, const void *data, uint32_t len, uint32_t seg_size,
                     uint8_t *out, size_t cap, uint32_t *dgram_len, uint32_t max_dgrams);

/* Puts one message at a time together from its datagrams, which may come in any order and
 * duplicated, checking each as untrusted input. Single-owner: one thread at a time uses it,
 * with no locking inside. The message buffer is kept for the next message (reuse, not a new
 * allocation, for messages of the same size or smaller). */
typedef struct srpc_reassembler srpc_reassembler_t;

/* max_msg: the largest msg_len accepted. Returns 0 or -EINVAL / -ENOMEM. */
int srpc_reassembler_create(uint32_t max_msg, srpc_reassembler_t **out);
/* Frees it and any message (NULL is fine). */
void srpc_reassembler_destroy(srpc_reassembler_t *r);

/* Adds one datagram (header and data, len bytes; copied, the caller keeps it). A segment of a
 * new message starts that message when none is in progress (a completed one is dropped).
 * Returns 1 when the message became complete, 0 when more segments are needed, or rejects
 * the datagram and changes nothing: -EMSGSIZE (shorter than the header), -EILSEQ (a version 2
 * header check mismatch), -EBADMSG (magic, version or type), -EPROTO (impossible seq/nseg/msg_len/length, or disagreeing with the
 * message's msg_len, nseg or S), -EALREADY (a duplicate, also of the completed message),
 * -EBUSY (a segment of another message, by req_id, type, func_id or version, while one is in
 * progress), -E2BIG (msg_len > max_msg), -EINVAL (NULL r or dgram); or -ENOMEM (a
 * completed message was dropped all the same). */
int srpc_reassembler_push(srpc_reassembler_t *r, const uint8_t *dgram, size_t len);

/* The completed message: its bytes (NULL while none is complete), *hdr its header with seq 0
 * (may be NULL), *len its length (may be NULL). Valid until the next push or reset. */
const uint8_t *srpc_reassembler_message(const srpc_reassembler_t *r, srpc_hdr_t *hdr, uint32_t *len);

/* Drops the message in progress or completed; its buffer is kept for the next one. */
void srpc_reassembler_reset(srpc_reassembler_t *r);

/* ------------------------------------------------------------------ tensor queue (host) */

/* A ring of `capacity` elements of `elem_size` bytes whose memory is mapped twice back to
 * back, so any run of <= capacity consecutive elements (wrapping or not) is contiguous.
 * Element `seq` (a running counter) lives at base + (seq * elem_size) mod ring_bytes, where
 * ring_bytes is capacity * elem_size rounded up to whole pages. Owned by its creator;
 * not thread-safe by itself (the engine serialises access). */
typedef struct srpc_tq srpc_tq_t;

int srpc_tq_create(size_t elem_size, uint32_t capacity, srpc_tq_t **out);
/* The same with ring_bytes rounded up to a multiple of align as well (a power of two, e.g. a
 * GPU's allocation granularity, so that this host TQ is laid out slot for slot like a device
 * TQ of the same element size and capacity). -EINVAL when align is not a power of two. */
int srpc_tq_create_aligned(size_t elem_size, uint32_t capacity, size_t align, srpc_tq_t **out);
void srpc_tq_destroy(srpc_tq_t *tq);
uint8_t *srpc_tq_elem(const srpc_tq_t *tq, uint64_t seq); /* lower-mapping address of seq */
uint8_t *srpc_tq_base(const srpc_tq_t *tq);
size_t srpc_tq_ring_bytes(const srpc_tq_t *tq);
size_t srpc_tq_elem_size(const srpc_tq_t *tq);
uint32_t srpc_tq_capacity(const srpc_tq_t *tq);

/* Copies one request into element seq of each of n Tensor Queues, as the server does for
 * every call: data holds the n tensors back to back, sizes[k] bytes for tqs[k]. n > 1: len
 * must be the sum of sizes; n == 1: len <= sizes[0] bytes are copied (a raw request may be
 * shorter than its element). Every sizes[k] fits its TQ's element. Returns 0, or -EINVAL
 * (nothing copied). Same thread rules as the TQs: the caller serialises access. */
int srpc_tq_scatter(srpc_tq_t *const *tqs, const uint32_t *sizes, uint32_t n, uint64_t seq,
                    const void *data, uint32_t len);

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
} srpc_server_config_t;

#define SRPC_DPDK_PAYLOAD_AUTO (-2)

/* Fills defaults (documented in native/src/tunables.h). */
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
} srpc_func_config_t;

#define SRPC_MAX_TENSORS 8

/* Fills a function's defaults (native/src/tunables.h): one input and one output, capacity
 * SRPC_DEF_TQ_CAPACITY, max_batch SRPC_DEF_MAX_BATCH, the rest 0 (host, no delay, no deadline). */
void srpc_func_config_init(srpc_func_config_t *fc);

int srpc_server_add_function(srpc_server_t *srv, const srpc_func_config_t *fc);

/* Starts the engine thread. */
int srpc_server_start(srpc_server_t *srv);
/* Stops the engine thread and wakes any waiting worker (which gets -ESHUTDOWN). */
int srpc_server_stop(srpc_server_t *srv);

/* A batch handed to the worker: `count` consecutive calls of one function. in[k] points at
 * the first of `count` contiguous elements of input k's request TQ, out[k] likewise for the
 * response TQ. Valid until srpc_server_complete(); the worker thread owns it until then. */
typedef struct srpc_batch {
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
} srpc_batch_t;

/* Waits up to timeout_us (-1 = forever) for a batch, following the server's wait mode.
 * Returns 0 with *b filled, -ETIMEDOUT, or -ESHUTDOWN once stopped. One worker thread. */
int srpc_server_next_batch(srpc_server_t *srv, srpc_batch_t *b, int64_t timeout_us);

/* Finishes a batch: status 0 sends each reply (raw: out_len[i] bytes); status an error code
 * (e.g. SRPC_E_INTERNAL) sends that ERROR, with msg (may be NULL) as its text, to every
 * call of the batch. Called by the thread that got the batch. */
int srpc_server_complete(srpc_server_t *srv, srpc_batch_t *b, int status, const char *msg);

/* srpc_server_complete, then srpc_server_next_batch into the same *b: one call per batch for
 * a worker loop. Returns what next_batch returns, or complete's error. */
int srpc_server_complete_next(srpc_server_t *srv, srpc_batch_t *b, int status, const char *msg,
                              int64_t timeout_us);

/* Asynchronous completion. A batch handed back with srpc_server_defer is in flight: the worker
 * goes on taking batches, and the batch's replies go out once its done word becomes nonzero:
 * SRPC_DONE | status, status 0 (send the outputs) or an error code (send that ERROR to each
 * call, with no text). Anyone may write the word, once, with a release store (another thread,
 * or the GPU through srpc_gpu_signal). Batches of one function finish in the order they were
 * handed out, whatever order their words are written in; srpc_server_complete on a later batch
 * waits behind earlier ones in flight the same way. The worker finishes batches (sends replies,
 * recycles elements) inside next_batch, complete and srpc_server_poll. While batches are in
 * flight, next_batch polls even in block mode. Raw functions cannot be deferred (-EINVAL). */
#define SRPC_DONE 0x80000000u
/* Marks b in flight and gives the address of its done word (valid until it is finished).
 * Worker thread only. Returns 0 or -EINVAL (not a batch handed out and not yet completed). */
int srpc_server_defer(srpc_server_t *srv, srpc_batch_t *b, uint32_t **done);
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
    SRPC_DROP_BAD_CHECK,       /* version 2 header whose check does not match */
    SRPC_DROP_CLIENT_MEM_CAP,  /* the sending address's share of reassembly memory reached */
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
    int rcvbuf, sndbuf;      /* effective socket buffer sizes */
} srpc_server_stats_t;

int srpc_server_stats(const srpc_server_t *srv, srpc_server_stats_t *out);

/* ------------------------------------------------------------------ client */

typedef struct srpc_client srpc_client_t;

typedef struct srpc_client_config {
    const char *host;          /* server address or name */
    uint16_t port;
    uint32_t seg_size;         /* request segment data size S; 0 = by destination */
    uint32_t max_reply;        /* largest reply accepted */
    int busy_poll;             /* 1: spin while waiting (lowest latency) */
    int sock_buf_bytes;
    const char *dpdk_dev;      /* NULL: a kernel UDP socket. Else the DPDK port to call from (the
                                  EAL initialised first with srpc_dpdk_init); host is then the
                                  server's IPv4 address (a literal) and the client polls */
    const char *dpdk_local_ip; /* DPDK: our IPv4 address on that port (a literal) */
    uint16_t dpdk_local_port;  /* DPDK: our UDP port; 0 = one from 49152-65535 */
    uint16_t dpdk_mtu;         /* DPDK: the largest IP packet sent; 0 = 1500 */
    const char *dpdk_server_mac; /* DPDK: "aa:bb:cc:dd:ee:ff" (a static neighbour), or NULL to ask
                                  by ARP at create (-EHOSTUNREACH when nobody answers in 2 s) */
    /* Retransmission: a request whose reply has not come within the retransmission timeout is
     * sent again with the same req_id (the server answers a duplicate from its reply cache or
     * ignores it while the call runs), at most `retries` times, the timeout doubling each time.
     * The timeout adapts to the replies' round-trip times, per function since a function's
     * service time is part of them (RFC 6298: srtt + 4 rttvar, Karn's rule: no sample from a
     * retransmitted call), clamped to [rto_min_us, rto_max_us]; rto_initial_us before a
     * function's first sample. The request is copied to be sent again.
     * Retransmissions happen while some thread waits for a reply (wait, wait_any, call). */
    uint32_t retries;          /* 0: never retransmit; default SRPC_DEF_RETRIES (tunables.h) */
    uint32_t rto_min_us, rto_initial_us, rto_max_us;
    /* Wire protocol of the requests: 2 (the default: a CRC-16 header check, 48-bit req_ids,
     * docs/PROTOCOL-v2.md) or 1 (PROTOCOL.md, for servers that speak only version 1). Replies
     * of the other version are dropped. */
    uint8_t version;
} srpc_client_config_t;

void srpc_client_config_init(srpc_client_config_t *cfg);
int srpc_client_create(const srpc_client_config_t *cfg, srpc_client_t **out);
void srpc_client_destroy(srpc_client_t *cl);

/* Sends a request; *req_id receives the call's id. Thread-safe. The data is copied into
 * datagrams before return; the caller keeps ownership. */
int srpc_client_send(srpc_client_t *cl, uint16_t func_id, const void *data, uint32_t len,
                     uint16_t aux, uint64_t *req_id);

/* Waits until call req_id finishes or timeout_us passes (-1 = forever). Returns 0 when the
 * call has an outcome (see srpc_client_result), -ETIMEDOUT, or -ENOENT for an unknown id.
 * Thread-safe: one thread receives at a time, the others wait for it. */
int srpc_client_wait(srpc_client_t *cl, uint64_t req_id, int64_t timeout_us);

/* Waits up to timeout_us for any finished call sent by srpc_client_send and writes up to n
 * finished req_ids into ids. Returns the count (0 on timeout). Thread-safe. */
int srpc_client_wait_any(srpc_client_t *cl, uint64_t *ids, int n, int64_t timeout_us);

/* A completion queue: the calls sent through it are reported by srpc_client_wait_cq when
 * they finish, and nowhere else, so that independent users of one client (the Python
 * futures, a load run, another load run) each see only their own calls. srpc_client_send
 * and srpc_client_wait_any use the client's own queue. All four are thread-safe. The caller
 * owns a queue it creates and destroys it before the client; calls of a destroyed queue
 * that have not been reported are reported nowhere (release them by id). */
typedef struct srpc_client_cq srpc_client_cq_t;
int srpc_client_cq_create(srpc_client_t *cl, srpc_client_cq_t **out);
void srpc_client_cq_destroy(srpc_client_t *cl, srpc_client_cq_t *cq);
int srpc_client_send_cq(srpc_client_t *cl, srpc_client_cq_t *cq, uint16_t func_id, const void *data,
                        uint32_t len, uint16_t aux, uint64_t *req_id);
int srpc_client_wait_cq(srpc_client_t *cl, srpc_client_cq_t *cq, uint64_t *ids, int n, int64_t timeout_us);

/* Outcome of a finished call: *code 0 (RESPONSE), an error code, SRPC_E_PENDING while
 * unfinished; *data and *len its reply (or error text). The pointers stay valid until
 * srpc_client_release(req_id). Returns -ENOENT for an unknown id. */
int srpc_client_result(srpc_client_t *cl, uint64_t req_id, int *code, const uint8_t **data,
                       uint32_t *len);

/* Forgets a call (finished or not); a late reply for it is dropped. */
int srpc_client_release(srpc_client_t *cl, uint64_t req_id);

/* One call, start to end: send, wait, copy the reply into out (cap bytes).
 * Returns 0 with *out_len and *code set (code != 0: error, message in out), -ETIMEDOUT,
 * -ENOBUFS when the reply is larger than cap (*out_len says how large). */
int srpc_client_call(srpc_client_t *cl, uint16_t func_id, const void *data, uint32_t len,
                     void *out, uint32_t cap, uint32_t *out_len, int *code, int64_t timeout_us);

typedef struct srpc_client_stats {
    uint64_t sent_calls, replies, errors, timeouts, late_or_unknown, dropped;
    uint64_t retransmits;      /* requests sent again */
    uint64_t srtt_us, rto_us;  /* of the function that answered last (each function has its own
                                  estimators): its smoothed round-trip time (0 before a sample)
                                  and its retransmission timeout now */
} srpc_client_stats_t;
int srpc_client_stats(const srpc_client_t *cl, srpc_client_stats_t *out);

/* Closed-loop load in native code: keeps `concurrency` calls outstanding until n_calls
 * have finished (after `warmup` more finished calls that are not recorded). lat_ns[i]
 * receives the latency of the i-th recorded call (0 where it failed); *errors counts
 * calls that ended in an error or a timeout; *elapsed_ns the recorded phase's wall time.
 * Runs on the calling thread. */
int srpc_client_closed_loop(srpc_client_t *cl, uint16_t func_id, const void *data,
                            uint32_t len, uint32_t concurrency, uint32_t warmup,
                            uint32_t n_calls, int64_t timeout_us, uint64_t *lat_ns,
                            uint64_t *errors, uint64_t *elapsed_ns);

/* ------------------------------------------------------------------ load generator */

/* Inter-arrival distributions of an open-loop schedule. */
enum srpc_arrival {
    SRPC_ARRIVAL_CONSTANT = 0,  /* every 1/rate s */
    SRPC_ARRIVAL_POISSON = 1,   /* exponential gaps (coefficient of variation 1) */
    SRPC_ARRIVAL_HYPEREXP = 2   /* two-phase hyperexponential with balanced means, CV = cv > 1 */
};

/* Fills at[0..n) with the due times (ns from the start, non-decreasing) of n arrivals at a
 * mean of `rate` calls/s. The first arrival is one gap after 0. Deterministic for a seed.
 * Returns 0 or -EINVAL (rate <= 0, unknown kind, hyperexponential with cv <= 1). */
int srpc_schedule_fill(int arrival, double rate, double cv, uint64_t seed, uint64_t *at, uint32_t n);

/* A schedule following a rate trace: the rate is rate[i] calls/s from t_s[i] until t_s[i+1]
 * (the last one until end_s); t_s is increasing and starts at >= 0. Arrivals of each piece
 * are drawn as in srpc_schedule_fill, restarting at the piece's start. Writes up to cap due
 * times into at and returns how many, or -ENOBUFS when more than cap would be needed, or
 * -EINVAL. */
int srpc_schedule_trace(int arrival, double cv, const double *t_s, const double *rate, uint32_t npts,
                        double end_s, uint64_t seed, uint64_t *at, uint32_t cap);

/* The outcome of one call of a load run. Times are ns from the run's start. */
typedef struct srpc_load_rec {
    uint64_t sched_ns;   /* when the call was due (closed loop: when it was issued) */
    uint64_t sent_ns;    /* when the request was handed to the socket */
    uint64_t done_ns;    /* when its outcome was known */
    int32_t code;        /* 0 valid reply, a wire error code, SRPC_E_TIMEOUT, SRPC_E_INVALID,
                            SRPC_E_SEND, or SRPC_E_PENDING when the run stopped first */
    uint32_t reply_len;
} srpc_load_rec_t;

typedef struct srpc_load_params {
    uint16_t func_id;
    const void *req;           /* the request sent by every call (copied into datagrams) */
    uint32_t req_len;
    const void *expect;        /* the reply every call must get; NULL: replies are not checked */
    uint32_t expect_len;
    uint32_t concurrency;      /* > 0: closed loop with this many calls outstanding */
    const uint64_t *sched_ns;  /* concurrency == 0: open loop, n due times (non-decreasing) */
    uint32_t n;                /* calls to make */
    uint32_t max_outstanding;  /* open loop: a due call waits while this many are outstanding
                                  (its latency still counts from its due time) */
    int64_t timeout_us;        /* a call unanswered this long after its send times out */
    int spin;                  /* 1: busy-poll between sends; 0: sleep until the next due time */
} srpc_load_params_t;

/* Shared with a watcher thread while a run is in progress. The runner appends the index of
 * each finished call to order[] and then publishes `finished` (release store); a watcher
 * may read order[0..finished) and those records at any time. Setting `stop` ends the run
 * early (calls still outstanding get SRPC_E_PENDING and are not listed in order[]). */
typedef struct srpc_load_progress {
    uint32_t finished;
    uint32_t sent;
    int stop;
} srpc_load_progress_t;

/* Runs a closed- or open-loop load on the calling thread (release the GIL around it). rec
 * and order have p->n entries and are owned by the caller; prog may be NULL. *start_ns gets
 * the CLOCK_MONOTONIC time of the run's start. Returns 0, or -EINVAL for bad parameters,
 * -ENOMEM, or a client error that made the run impossible. Sending failures and timeouts
 * are outcomes in rec, not errors of the run. */
int srpc_load_run(srpc_client_t *cl, const srpc_load_params_t *p, srpc_load_rec_t *rec,
                  uint32_t *order, srpc_load_progress_t *prog, uint64_t *start_ns);

/* ------------------------------------------------------------------ raw UDP baseline */

/* The physical limit of the kernel socket path: a server and a ping-pong client of plain
 * UDP datagrams with no header and no processing. resp_size == 0: the server echoes each
 * datagram and the client sends one datagram of req_size (<= 65507) bytes. resp_size > 0:
 * the client sends req_size bytes cut into datagrams of SRPC_RAW_SEG bytes, the server
 * answers every req_size bytes received with resp_size bytes cut the same way, and the
 * client waits for all of them. busy = 1 polls with non-blocking calls, 0 blocks.
 * The server runs until *stop becomes non-zero (checked at least every 10 ms). */
#define SRPC_RAW_SEG 65000
int srpc_raw_echo_serve(const char *host, uint16_t port, int busy, uint32_t req_size,
                        uint32_t resp_size, volatile int *stop);
int srpc_raw_pingpong(const char *host, uint16_t port, uint32_t req_size, uint32_t resp_size,
                      int busy, uint32_t warmup, uint32_t n, uint64_t *lat_ns);
/* The same with `concurrency` requests outstanding on one socket (replies come back in
 * order): the kernel path's throughput limit. *elapsed_ns (may be NULL) gets the wall time
 * of the n recorded calls. */
int srpc_raw_closed_loop(const char *host, uint16_t port, uint32_t req_size, uint32_t resp_size, int busy,
                         uint32_t concurrency, uint32_t warmup, uint32_t n, uint64_t *lat_ns,
                         uint64_t *elapsed_ns);

/* ------------------------------------------------------------------ build facts */

/* Bit set of what was compiled in: 1 CUDA kernels (built with nvcc), 2 DPDK, 4 sanitizers,
 * 8 fault injection (testing builds: srpc_server_set_faults works). */
#define SRPC_FEATURE_CUDA 1
#define SRPC_FEATURE_DPDK 2
#define SRPC_FEATURE_SANITIZE 4
#define SRPC_FEATURE_FAULTS 8
unsigned srpc_features(void);
const char *srpc_version(void);
const char *srpc_strerror(int code); /* name of an error code (1..6, 100..103) */

/* ------------------------------------------------------------------ fault injection (testing builds) */

/* Builds with SRPC_FAULT_INJECTION (CMake SPLITRPC_FAULT_INJECTION, on by default with
 * SPLITRPC_TESTS, off in the Python package) can make the kernel UDP socket of a server or a
 * client lossy. Each datagram that passes one way draws, independently: drop (it is lost),
 * corrupt (one random bit of its 22-byte control header is flipped), reorder (it is held back
 * and goes out after the next datagram that way, or at the socket's next receive when none
 * follows; never lost) and dup (it goes out twice). Other builds answer -ENOTSUP. */
typedef struct srpc_faults_cfg {
    double drop, dup, reorder, corrupt; /* probabilities, each in [0, 1] */
} srpc_faults_cfg_t;

typedef struct srpc_fault_counts {
    uint64_t in;         /* datagrams that went through the injector */
    uint64_t dropped, duplicated, reordered, corrupted;
    uint64_t discarded;  /* held or waiting datagrams freed unsent (socket closed or full) */
} srpc_fault_counts_t;

/* Sets the faults of what the server receives (rx) and sends (tx); NULL: none that way.
 * seed makes the draws repeatable. Call after create and before srpc_server_start (-EBUSY
 * after); replaces earlier settings. Returns 0, -EINVAL (NULL srv, a probability outside
 * [0, 1] or NaN), -ENOTSUP (a build without fault injection, or a DPDK server), -ENOMEM.
 * Every datagram the server receives then passes the rx faults (its in-place receive of large
 * segments is off while they are set). */
int srpc_server_set_faults(srpc_server_t *srv, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx,
                           uint64_t seed);
/* The same for a client: after create, before its first call (not thread-safe against calls). */
int srpc_client_set_faults(srpc_client_t *cl, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx,
                           uint64_t seed);
/* Copies the counters of each direction (zeros where none is set); rx or tx may be NULL.
 * Thread-safe. Returns 0, -EINVAL (NULL server or client) or -ENOTSUP. */
int srpc_server_fault_counts(const srpc_server_t *srv, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx);
int srpc_client_fault_counts(const srpc_client_t *cl, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx);

#ifdef __cplusplus
}
#endif
#endif /* SPLITRPC_H */
