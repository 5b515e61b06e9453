/* splitrpc_tools.h: test and benchmark tools of the C API: the raw-UDP baseline (the kernel path's limit), the minimal protocol server (the protocol's own limit), a closed-loop client over many sockets (cost as clients grow) and the fault injection of testing builds. */
#ifndef SPLITRPC_TOOLS_H
#define SPLITRPC_TOOLS_H

#include <stdint.h>
#include "splitrpc_core.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* ------------------------------------------------------------------ minimal protocol server */

/* The bar for the protocol's own overhead: a server of the wire protocol (versions 1, 2 and 3)
 * on one thread, one loop, receiving with recvmmsg and sending with sendmmsg, each request
 * answered alone as soon as its last segment comes (no batching, no queues, no reply cache, no
 * Python), the built-in services computed in C: vecadd (function 1: 1024 bytes of float32 x,
 * answered x + 1), echo (3: any request up to SRPC_MIN_MAX_MSG bytes, answered itself) and head
 * (4: 602112 bytes, answered with their first 4000). Other functions are answered ERROR
 * UNKNOWN_FUNCTION, a wrong size BAD_REQUEST, a larger request TOO_LARGE; a datagram that fails
 * the protocol's checks is dropped. Replies are cut at splitrpc's server's default segment size
 * for the destination (loopback or not). busy = 1 spins on non-blocking receives, 0 sleeps in
 * poll(). Runs on the calling thread until *stop becomes non-zero (checked at least every
 * 10 ms). Returns 0, or -EINVAL (NULL stop), -ENOMEM, or the socket's -errno. */
#define SRPC_MIN_MAX_MSG 1048576u /* 1 MiB, as server/builtin.py ECHO_MAX */
int srpc_min_serve(const char *host, uint16_t port, int busy, volatile int *stop);

/* ------------------------------------------------------------------ native built-ins */

/* The built-in services as native functions (srpc_func_config_t.native), run by the worker
 * inside srpc_server_next_batch with no Python: what the runtime itself costs per call.
 * srpc_native_vecadd: function 1's float32[256] -> x + 1 (one input and one output of
 * SRPC_NATIVE_VECADD_BYTES; ctx unused). srpc_native_echo: a raw function answering each
 * request with itself; ctx points to a uint32_t, its max_request, which must equal its
 * max_response (element i of each Tensor Queue is that many bytes after element i - 1); a batch
 * of a function not registered so may be answered INTERNAL, or wrongly (Python's
 * NativeFunction.builtin checks the registration). */
#define SRPC_NATIVE_VECADD_BYTES 1024u
struct srpc_batch;
struct srpc_server;
int srpc_native_vecadd(void *ctx, struct srpc_server *srv, struct srpc_batch *b);
int srpc_native_echo(void *ctx, struct srpc_server *srv, struct srpc_batch *b);

/* A closed loop of the protocol over many client addresses: `concurrency` calls of func_id
 * outstanding, each request (req_len <= SRPC_MAX_SEG_DATA bytes: one datagram, version 2) sent
 * from the next of nsock UDP sockets in turn (each bound to its own port: a distinct client to the
 * server; the soft limit of open files is raised to fit them where the hard one allows), one
 * thread busy-polling epoll. After `warmup` calls, n are recorded: lat_ns[i] their latency (0
 * when it failed), *errors those answered wrong (an ERROR, or a reply other than expect when
 * expect is not NULL) or unanswered within 1 s (then replaced by a new call), *elapsed_ns (may
 * be NULL) their wall time. Returns 0, -EINVAL, -ENOMEM, or a socket's -errno (-EMFILE: nsock
 * beyond the open files allowed). */
int srpc_multi_closed_loop(const char *host, uint16_t port, uint32_t nsock, uint16_t func_id, const void *req,
                           uint32_t req_len, const void *expect, uint32_t expect_len, uint32_t concurrency,
                           uint32_t warmup, uint32_t n, uint64_t *lat_ns, uint64_t *elapsed_ns, uint64_t *errors);

/* ------------------------------------------------------------------ fault injection (testing builds) */

/* Builds with SRPC_FAULT_INJECTION (CMake SPLITRPC_FAULT_INJECTION, on by default with
 * SPLITRPC_TESTS, off in the Python package) can make the kernel UDP socket of a server or a
 * client lossy. Each datagram that passes one way draws, independently: drop (it is lost),
 * corrupt (one random bit of its 22-byte control header is flipped), reorder (it is held back
 * and goes out after the next datagram that way, or at the socket's next receive when none
 * follows; never lost) and dup (it goes out twice). Other builds answer -ENOTSUP. */
typedef struct srpc_faults_cfg {
    double drop, dup, reorder, corrupt; /* probabilities, each in [0, 1] */
    double full; /* tx only: a send refused with -EAGAIN, as by a queue that stayed full */
} srpc_faults_cfg_t;

typedef struct srpc_fault_counts {
    uint64_t in;         /* datagrams that went through the injector */
    uint64_t dropped, duplicated, reordered, corrupted;
    uint64_t discarded;  /* held or waiting datagrams freed unsent (socket closed or full) */
    uint64_t refused;    /* sends refused as by a full queue (cfg.full) */
} srpc_fault_counts_t;

struct srpc_server;
struct srpc_client;

/* Sets the faults of what the server receives (rx) and sends (tx); NULL: none that way.
 * seed makes the draws repeatable. Call after create and before srpc_server_start (-EBUSY
 * after); replaces earlier settings. Returns 0, -EINVAL (NULL srv, a probability outside
 * [0, 1] or NaN), -ENOTSUP (a build without fault injection, or a DPDK server), -ENOMEM.
 * Every datagram the server receives then passes the rx faults (its in-place receive of large
 * segments is off while they are set). */
int srpc_server_set_faults(struct srpc_server *srv, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx,
                           uint64_t seed);
/* The same for a client: after create, before its first call (not thread-safe against calls). */
int srpc_client_set_faults(struct srpc_client *cl, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx,
                           uint64_t seed);
/* Copies the counters of each direction (zeros where none is set); rx or tx may be NULL.
 * Thread-safe. Returns 0, -EINVAL (NULL server or client) or -ENOTSUP. */
int srpc_server_fault_counts(const struct srpc_server *srv, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx);
int srpc_client_fault_counts(const struct srpc_client *cl, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx);

#ifdef __cplusplus
}
#endif
#endif /* SPLITRPC_TOOLS_H */
