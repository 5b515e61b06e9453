/* reply.h: what the server sends and remembers: replies and error replies through the transport (a batch's replies in one send, a receive burst's error replies in one send), the reply log that answers a retransmitted request of a finished call, and the rejections remembered for the rest of a multi-segment message. */
#ifndef SRPC_REPLY_H
#define SRPC_REPLY_H

#include <stdint.h>
#include <sys/uio.h>

#include "server/server_state.h"

/* ---------------------------------------------------------------- sending */

/* Replies gathered to be sent together (srpc_reply_flush): at most SRPC_REPLY_BATCH messages,
 * each the data of a call (pieces, not copied: they must stay valid until the flush) or an
 * error text. Owned by the thread that fills it. */
#define SRPC_REPLY_BATCH 32
typedef struct srpc_reply_batch {
    unsigned n;
    srpc_tx_msg_t msg[SRPC_REPLY_BATCH];
    struct iovec iov[SRPC_REPLY_BATCH][SRPC_MAX_TENSORS];
    struct sockaddr_storage dst[SRPC_REPLY_BATCH];
} srpc_reply_batch_t;

/* Adds the reply to call key: code 0 sends the n pieces (len bytes in all) as a RESPONSE, an
 * error code sends them as the ERROR's text; a version 4 call's signed with secret (kept alive
 * until the flush). The caller flushes first when the batch is full. */
void srpc_reply_add(srpc_server_t *srv, srpc_reply_batch_t *b, const srpc_call_key_t *key, const uint8_t *secret,
                    int code, const struct iovec *pieces, int n, uint32_t len);
/* Sends what the batch holds with one transport send, counts it, and empties it. Any thread. */
void srpc_reply_flush(srpc_server_t *srv, srpc_reply_batch_t *b);

/* Replies the worker holds across batches: a later batch's replies join them and all go out in
 * one send (srpc_reply_flush), so that batches of one call each (many functions, the load spread
 * over them) do not cost a system call and a pass down the stack per call. Each reply's call is
 * recycled already; its pieces are its function's output elements, which stay put until the
 * flush because a batch that would reuse one is not handed out before it (srpc_reply_hold_check_w).
 * Worker thread. */
#define SRPC_REPLY_TEXT_MAX 64 /* an error text made while finishing a call */
typedef struct srpc_reply_hold {
    srpc_reply_batch_t b;
    srpc_fn_t *fn[SRPC_REPLY_BATCH];
    uint32_t ct_idx[SRPC_REPLY_BATCH];  /* the call's entry, CT_QUEUED until the flush caches it */
    char *own[SRPC_REPLY_BATCH];        /* a call's own error text (srpc_server_fail_call), freed after the flush */
    char text[SRPC_REPLY_BATCH][SRPC_REPLY_TEXT_MAX];
    uint64_t since_ns;                  /* when the oldest was added */
    uint64_t bytes;                     /* their data, all together */
    int kept;                           /* the last srpc_reply_hold_check_w kept them: the worker
                                           goes through a backlog of quick batches */
} srpc_reply_hold_t;

/* Allocates srv->held. Returns 0 or -ENOMEM. */
int srpc_reply_hold_init(srpc_server_t *srv);
/* Frees srv->held and the texts of what it still holds (the server going away, its worker gone:
 * those replies are never sent). */
void srpc_reply_hold_free(srpc_server_t *srv);
/* The slot the next reply goes in (srv->held->b.n), after a flush when all are taken. */
unsigned srpc_reply_hold_slot_w(srpc_server_t *srv);
/* Adds the reply of fn's call of element seq (entry ct_idx) to the slot srpc_reply_hold_slot_w
 * gave, as srpc_reply_add does; own: the call's own error text (or NULL), freed after the flush. */
void srpc_reply_hold_add_w(srpc_server_t *srv, srpc_fn_t *fn, uint64_t seq, uint32_t ct_idx, int code, char *own,
                           const struct iovec *pieces, int n, uint32_t len);
/* Sends what is held, then moves those calls to the reply cache. */
void srpc_reply_hold_flush_w(srpc_server_t *srv);
/* Before batch b of fn is handed out at now: flushes unless holding on is safe and short (b
 * reuses none of fn's output elements that a held reply lies in, and the oldest reply would
 * not wait past the server's reply_hold_us, counting fn's last batch's time for b's: a function
 * with no batch yet counts as slow). finish_w (completion.c) sends once enough are held. */
void srpc_reply_hold_check_w(srpc_server_t *srv, const srpc_fn_t *fn, const srpc_batch_t *b, uint64_t now);

/* The receive burst's error replies (engine.c), sent once the burst is processed: an error
 * with a printf-style text, queued (sent at once when the queue is full). rx. */
void srpc_reply_error_rx(srpc_server_t *srv, const srpc_call_key_t *key, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void srpc_reply_errors_flush_rx(srpc_server_t *srv);

/* ---------------------------------------------------------------- the reply log (lock held) */

/* The log of cap bytes (0: no replies are cached). Returns 0 or -ENOMEM. */
int srpc_reply_log_init(srpc_reply_log_t *log, uint64_t cap);
void srpc_reply_log_free(srpc_reply_log_t *log);

/* Whether a reply is cached at all: RESPONSE and INTERNAL outcomes are (docs/PROTOCOL.md: BUSY and
 * DEADLINE are not, and 1, 2, 6 are recomputed); one larger than the whole log is not. */
int srpc_reply_cacheable(const srpc_server_t *srv, int code, uint32_t len);
/* The call of entry idx (CT_QUEUED) was answered with code and the n pieces (len bytes):
 * it moves to the reply cache, its reply copied into the log (the oldest cached replies leave
 * when there is no room), or, when not cacheable, is forgotten. Worker thread. */
void srpc_reply_cache_locked(srpc_server_t *srv, uint32_t idx, int code, const struct iovec *pieces, int n,
                             uint32_t len);
/* A retransmitted first segment of a finished call (entry idx, CT_DONE): sends its reply again
 * from the log. */
void srpc_reply_resend_locked(srpc_server_t *srv, uint32_t idx);
/* Remembers that the multi-segment message of key (first seen segment h->seq) was answered
 * with an error, so that its other segments are ignored (docs/PROTOCOL.md), until the reassembly
 * timeout. rx. */
void srpc_reply_remember_rejection_locked(srpc_server_t *srv, const srpc_call_key_t *key, const srpc_hdr_t *h,
                                          int code, uint64_t now);
/* A segment of a rejected message (entry idx, CT_REJECTED): the segment that showed the error
 * is answered again, the others are dropped (SRPC_DROP_REJECTED). rx. */
void srpc_reply_rejected_segment_locked(srpc_server_t *srv, uint32_t idx, const srpc_hdr_t *h);
/* Makes room for one more call-table entry by dropping the oldest rejection, else the oldest
 * cached reply. Returns 0 or -ENOSPC (neither exists). */
int srpc_reply_evict_one_locked(srpc_server_t *srv);
/* Drops the cached replies and rejections whose time is up. */
void srpc_reply_expire_locked(srpc_server_t *srv, uint64_t now);
/* The earliest expiry of a cached reply or rejection (UINT64_MAX: none). */
uint64_t srpc_reply_next_expiry_locked(const srpc_server_t *srv);
/* Drops entry idx (CT_DONE or CT_REJECTED), whatever its age: the server going away. */
void srpc_reply_forget_locked(srpc_server_t *srv, uint32_t idx);

#endif /* SRPC_REPLY_H */
