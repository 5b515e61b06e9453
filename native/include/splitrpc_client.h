/* splitrpc_client.h: the client half of the C API: calls (blocking, asynchronous, completion queues), retransmission, and the native load generator with its arrival schedules. */
#ifndef SPLITRPC_CLIENT_H
#define SPLITRPC_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include "splitrpc_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ client */

typedef struct srpc_client srpc_client_t;
typedef struct srpc_client_cq srpc_client_cq_t; /* a completion queue (srpc_client_cq_create) */

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
     * ignores it while the call runs), until its reply comes, its deadline passes (a call sent
     * with a timeout) or it has been sent again `retries` times, the timeout doubling each time
     * up to rto_max_us. The timeout adapts to the replies' round-trip times, per function since
     * a function's service time is part of them (RFC 6298: srtt + 4 rttvar, Karn's rule: no
     * sample from a retransmitted call), clamped to [rto_min_us, rto_max_us]; rto_initial_us
     * before a function's first sample. The request is copied to be sent again.
     * Retransmissions happen while some thread waits for a reply (wait, wait_any, call). */
    uint32_t retries;          /* 0: never retransmit; default SRPC_DEF_RETRIES (tunables.h):
                                  UINT32_MAX, until the deadline */
    uint32_t rto_min_us, rto_initial_us, rto_max_us;
    /* Flow control (calls made by srpc_client_send*, srpc_client_call; not the load generator's,
     * which are sent when due and never held back): at most `window` such calls are outstanding
     * (sent, unanswered); later ones wait in the client in the order they were made and are sent
     * as earlier ones finish, each still bound by its deadline (one that passes while waiting
     * finishes it with SRPC_E_TIMEOUT, never sent). 0: no window. A DRAINING answer to any call
     * fails the calls still waiting at once with SRPC_E_DRAINING (never sent: safe to send
     * elsewhere). */
    uint32_t window;           /* default SRPC_DEF_CLIENT_WINDOW, half a default server queue */
    /* A BUSY answer is not reported while the call's deadline leaves time for another try: the
     * request is sent again (same req_id: BUSY is not cached, PROTOCOL.md) after a backoff of
     * busy_backoff_us, doubling with each BUSY (capped at rto_max_us), drawn in [half, all] of
     * it. BUSY is reported when the next try would come after the deadline, or at once with
     * busy_retry 0. The request is copied for this. */
    int busy_retry;            /* default 1 */
    uint32_t busy_backoff_us;  /* default SRPC_DEF_BUSY_BACKOFF_US */
    /* Wire protocol of the requests: 5 (sessions, for servers with keys: below), 2 (the default: a CRC-16 header check, 48-bit req_ids,
     * docs/PROTOCOL-v2.md), 3 (version 2 with a CRC-32C data check in every datagram,
     * docs/PROTOCOL-v3.md: for servers that list 3 in describe's "protocols"), 4 (every datagram
     * signed with auth_key_id's secret, below: for servers with keys) or 1 (docs/PROTOCOL.md, for
     * servers that speak only version 1). Replies of another version are dropped. */
    uint8_t version;
    /* An unreachable server (a kernel UDP socket: the ICMP "port / host unreachable" the kernel
     * reports on the client's connected socket): 0 (the default, as gRPC's): every unfinished
     * call of the client fails at once with SRPC_E_UNAVAILABLE, unless it was sent with
     * SRPC_SEND_WAIT_FOR_READY; 1: calls keep being retransmitted until their deadline (a server
     * that starts meanwhile answers them), unless sent with SRPC_SEND_FAIL_FAST. The DPDK
     * transport sees no ICMP: there its calls wait for their deadline either way. */
    uint8_t wait_for_ready;
    /* Version 4 (docs/PROTOCOL-v4.md: version 2 with every datagram signed, for servers with a key
     * table): the key's id (nonzero) and its SRPC_AUTH_SECRET_LEN-byte secret (copied at create).
     * Each client draws its own sender number; replies not signed with the key are dropped. Other
     * versions: unused. Last in the struct, so that programs built against an older header keep
     * their layout. */
    uint32_t auth_key_id;
    const uint8_t *auth_secret;
    /* Version 5 (docs/PROTOCOL-v5.md: version 2 inside sessions, for servers with a key table; the
     * key is auth_key_id's, above): the client makes a session with a handshake before its first
     * call (lazily: srpc_client_create sends nothing), a new one that follows it every rekey_ms
     * (0: SRPC_V5_CLIENT_REKEY_MS, 120 s, the most the page allows) without a pause in calls, and
     * one after a NO_SESSION (a restarted server: its calls go again under the new session). A
     * handshake unanswered for 12.6 s fails the calls waiting for it with SRPC_E_UNAVAILABLE (but
     * those that wait for ready). encrypt 1: the data is encrypted (else authenticated only). Kernel
     * UDP only (-ENOTSUP with dpdk_dev). */
    uint8_t encrypt;
    uint32_t rekey_ms;
    /* Version 5: the suites its INITs offer beyond ChaCha20-Poly1305 (always offered), of those this
     * process can use: a mask of SRPC_AUTH_SUITE_AES and SRPC_AUTH_SUITE_AEGIS (splitrpc_auth.h);
     * srpc_client_config_init sets both. Clear SRPC_AUTH_SUITE_AEGIS to reach a server built before
     * AEGIS-128L (which drops an INIT offering it, docs/PROTOCOL-v5.md). */
    uint8_t v5_suites;
} srpc_client_config_t;

#define SRPC_CLIENT_MSG_MAX 512 /* the text of a local outcome (SRPC_E_UNAVAILABLE...) is shorter */

void srpc_client_config_init(srpc_client_config_t *cfg);
int srpc_client_create(const srpc_client_config_t *cfg, srpc_client_t **out);
void srpc_client_destroy(srpc_client_t *cl);

/* Sends a request; *req_id receives the call's id. Thread-safe. The data is copied into
 * datagrams (or, held back by the window, into the client) before return; the caller keeps
 * ownership. The call has no deadline: it is retransmitted until released. A transport whose
 * queue stays full (-EAGAIN, -ENOBUFS) fails the send only where the call is not retransmitted
 * (retries 0); else that first send counts as lost (stats send_full) and goes again when due. */
int srpc_client_send(srpc_client_t *cl, uint16_t func_id, const void *data, uint32_t len,
                     uint16_t aux, uint64_t *req_id);

/* srpc_client_send with a deadline timeout_us from now (-1: none), through cq (NULL: the
 * client's own queue, as srpc_client_send): retransmissions, BUSY retries and a wait in the
 * window end there. Its outcome is reported on the queue like any other. Thread-safe. */
int srpc_client_send_timed(srpc_client_t *cl, srpc_client_cq_t *cq, uint16_t func_id, const void *data,
                           uint32_t len, uint16_t aux, int64_t timeout_us, uint64_t *req_id);

/* srpc_client_send_timed with options: flags SRPC_SEND_WAIT_FOR_READY (this call waits for an
 * unreachable server until its deadline) or SRPC_SEND_FAIL_FAST (it fails with
 * SRPC_E_UNAVAILABLE as soon as the server is known unreachable), overriding the client's
 * wait_for_ready; 0: the client's. Thread-safe. */
#define SRPC_SEND_WAIT_FOR_READY 1u
#define SRPC_SEND_FAIL_FAST 2u
int srpc_client_send_opts(srpc_client_t *cl, srpc_client_cq_t *cq, uint16_t func_id, const void *data,
                          uint32_t len, uint16_t aux, int64_t timeout_us, unsigned flags, uint64_t *req_id);

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
int srpc_client_cq_create(srpc_client_t *cl, srpc_client_cq_t **out);
void srpc_client_cq_destroy(srpc_client_t *cl, srpc_client_cq_t *cq);
int srpc_client_send_cq(srpc_client_t *cl, srpc_client_cq_t *cq, uint16_t func_id, const void *data,
                        uint32_t len, uint16_t aux, uint64_t *req_id);
int srpc_client_wait_cq(srpc_client_t *cl, srpc_client_cq_t *cq, uint64_t *ids, int n, int64_t timeout_us);

/* n calls of func_id with the same request, sent with one send through cq (a load generator's
 * burst): each gets its req_id in ids[i] and its outcome of sending in rcs[i] (0, or -errno:
 * that call was not sent and is forgotten). n is 1..SRPC_CLIENT_SEND_MAX. Unlike
 * srpc_client_send, the request is not copied for retransmission: data must stay as it is until
 * each call has finished or been released. Returns how many were sent, or -errno (-EINVAL,
 * -EMSGSIZE, -ENOMEM: none was). Thread-safe. */
#define SRPC_CLIENT_SEND_MAX 64
int srpc_client_send_many_cq(srpc_client_t *cl, srpc_client_cq_t *cq, uint16_t func_id, const void *data,
                             uint32_t len, uint32_t n, uint64_t *ids, int *rcs);

/* As srpc_client_send_many_cq, but call i calls func_ids[i] with its own request (data[i],
 * lens[i]; borrowed as there): calls to many functions, or with different requests, still leave
 * in one send (the kernel cuts a run of datagrams of one size to one peer). n is
 * 1..SRPC_CLIENT_SEND_MAX. Thread-safe. */
int srpc_client_send_each_cq(srpc_client_t *cl, srpc_client_cq_t *cq, const uint16_t *func_ids,
                             const void *const *data, const uint32_t *lens, uint32_t n, uint64_t *ids, int *rcs);

/* Outcome of a finished call: *code 0 (RESPONSE), an error code, SRPC_E_PENDING while
 * unfinished; *data and *len its reply (or error text). The pointers stay valid until
 * srpc_client_release(req_id). Returns -ENOENT for an unknown id. */
int srpc_client_result(srpc_client_t *cl, uint64_t req_id, int *code, const uint8_t **data,
                       uint32_t *len);

/* Closes the client for calls, from any thread, while others may still be in its functions:
 * every unfinished call finishes now with SRPC_E_CLOSED (its waiters wake within 10 ms; like a
 * timeout, the call may have been sent and run), and once this returns nothing is sent
 * (srpc_client_send* and srpc_client_call return -ESHUTDOWN, a wait with nothing left to wait
 * for returns -ESHUTDOWN, a load run ends with its calls failed). The client stays valid memory, its
 * socket open, until srpc_client_destroy, which must come after every thread has left the
 * client's functions (a binding: when nothing can call it any more). Idempotent; 0 or -EINVAL. */
int srpc_client_shutdown(srpc_client_t *cl);

/* Forgets a call (finished or not); a late reply for it is dropped. */
int srpc_client_release(srpc_client_t *cl, uint64_t req_id);

/* One call, start to end: send, wait, copy the reply into out (cap bytes); timeout_us is the
 * call's deadline (retransmissions, BUSY retries and a wait in the window end there). Returns 0
 * with *out_len and *code set (code != 0: error, its text in out, cut to cap where longer: a
 * server's is at most SRPC_ERRMSG_MAX bytes, the client's own less than SRPC_CLIENT_MSG_MAX),
 * -ETIMEDOUT, -ENOBUFS when a reply (code 0) is larger than cap (*out_len says how large),
 * -ESHUTDOWN after srpc_client_shutdown. */
int srpc_client_call(srpc_client_t *cl, uint16_t func_id, const void *data, uint32_t len,
                     void *out, uint32_t cap, uint32_t *out_len, int *code, int64_t timeout_us);

typedef struct srpc_client_stats {
    uint64_t sent_calls, replies, errors, timeouts, late_or_unknown, dropped;
    uint64_t retransmits;      /* requests sent again after a retransmission timeout */
    uint64_t busy_retries;     /* requests sent again after a BUSY answer */
    uint64_t window_waits;     /* calls held back by the window before their first send */
    uint64_t outstanding;      /* now: calls counted in the window (sent, unanswered) */
    uint64_t waiting;          /* now: calls waiting for room in the window */
    uint64_t srtt_us, rto_us;  /* of the function that answered last (each function has its own
                                  estimators): its smoothed round-trip time (0 before a sample)
                                  and its retransmission timeout now */
    uint64_t unreachable;      /* times the socket reported the server unreachable (ICMP) */
    uint64_t unavailable;      /* calls failed with SRPC_E_UNAVAILABLE */
    uint64_t draining_unsent;  /* calls failed with SRPC_E_DRAINING before they were sent: they
                                  waited for the window when the server answered DRAINING */
    uint64_t bad_data_check;   /* version 3 reply datagrams whose data check did not match
                                  (dropped, also counted in dropped; retransmission recovers) */
    uint64_t send_full;        /* first sends the transport would not take (its queue stayed full)
                                  of calls that retransmit: left to retransmission, as a loss */
    uint64_t bad_auth;         /* version 4 reply datagrams too short for a trailer, of another key,
                                  or whose tag did not match: forged or changed on the way (dropped,
                                  also counted in dropped); version 5: not of a session of ours, a
                                  wrong tag, or a counter taken before */
    /* Version 5's sessions */
    uint64_t handshakes;       /* sessions made */
    uint64_t rekeys;           /* handshakes started because the session was old (rekey_ms) */
    uint64_t no_sessions;      /* NO_SESSIONs acted on: the server did not know the session (restarted) */
    uint64_t cookies;          /* COOKIEs taken: the server was under a flood of handshakes */
    uint64_t handshakes_failed; /* handshakes none of whose INITs was answered */
    uint64_t session_resends;  /* calls sent again under a new session (or first sent once one was made) */
    uint64_t no_sessions_deferred; /* NO_SESSIONs naming a session under 100 ms old: acted on when
                                      it is 100 ms old unless a reply under it comes first (a
                                      forger's flood makes at most 10 handshakes a second) */
} srpc_client_stats_t;
int srpc_client_stats(const srpc_client_t *cl, srpc_client_stats_t *out);

/* For an event loop that receives for the client itself, with srpc_client_wait_cq(..., 0) passes
 * (Python's splitrpc.aio): srpc_client_fd is the descriptor that turns readable when a datagram
 * (or an ICMP error) waits, the transport's socket; -ENOTSUP for a transport that is polled
 * (DPDK). srpc_client_next_due puts in *due_ns when the client next has work of its own, a
 * retransmission or a try after BUSY (srpc_now_ns's clock: CLOCK_MONOTONIC ns; UINT64_MAX: none;
 * it may be early, never late): a pass then sends what is due. Both thread-safe; the loop's
 * passes must be the only receivers of that client. */
int srpc_client_fd(const srpc_client_t *cl);
int srpc_client_next_due(srpc_client_t *cl, uint64_t *due_ns);

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
    /* A request set: calls send different requests (appended: an initialiser that leaves these
     * out keeps the single req above). Every array is the caller's, read by the calling thread
     * only, and must stay unchanged until srpc_load_run returns: requests are sent without a copy
     * (a retransmission reads them again). n_reqs > 0 requires req == NULL, req_len == 0,
     * expect == NULL and expect_len == 0; n_reqs == 0 requires all the pointers below NULL. */
    uint32_t n_reqs;           /* 0: every call sends req; > 0: the set's size */
    const uint8_t *reqs;       /* the requests back to back: request k is reqs[req_off[k], req_off[k+1]) */
    const uint64_t *req_off;   /* n_reqs + 1 offsets: req_off[0] == 0, non-decreasing, each request
                                  < 2^32 B (reqs may be NULL only when every request is empty) */
    const uint32_t *req_index; /* n entries: call i sends request req_index[i] (< n_reqs);
                                  NULL: call i sends request i % n_reqs */
    const uint8_t *expects;    /* the expected reply of each request, back to back (as reqs), with
                                  expect_off (n_reqs + 1 offsets, as req_off); both NULL: replies
                                  are not checked. A reply that differs is SRPC_E_INVALID */
    const uint64_t *expect_off;
    /* With a request set: the function each request calls (n_reqs entries), so that one run
     * spreads its calls over many functions; NULL: every call calls func_id. */
    const uint16_t *req_func;
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

#ifdef __cplusplus
}
#endif
#endif /* SPLITRPC_CLIENT_H */
