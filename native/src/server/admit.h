/* admit.h: a datagram's call, once the datagram is checked (datagram.c): the first segment of a new call checked against its function and admitted (queued, refused, or a partial message started), or a segment of a call the table knows (a duplicate, a retransmission, the next part of a message); and what the receive path's files share for it. rx and lock held throughout. */
#ifndef SRPC_ADMIT_H
#define SRPC_ADMIT_H

#include "server/reply.h"
#include "server/server_state.h"

/* The timers are due within a period of now (a partial message or a rejection was added). */
static inline void srpc_timers_soon(srpc_server_t *srv, uint64_t at)
{
    if (srv->rx.next_timer_ns > at)
        srv->rx.next_timer_ns = at;
}

/* Answers the first segment seen of a message with an error; for a multi-segment message the
 * rest of its segments are then ignored (docs/PROTOCOL.md: "the message's other segments are then
 * ignored"). */
#define reject(srv, k, h, now, code, ...)                                                           \
    do {                                                                                           \
        srpc_reply_error_rx((srv), (k), (code), __VA_ARGS__);                                      \
        if ((h)->nseg > 1) {                                                                       \
            srpc_reply_remember_rejection_locked((srv), (k), (h), (code), (now));                  \
            srpc_timers_soon((srv), (now) + (uint64_t)(srv)->cfg.reasm_timeout_us * 1000);             \
        }                                                                                          \
    } while (0)

/* A segment of a call the table knows (entry idx): a duplicate dropped, a finished call's reply
 * sent again, the next segment of a partial message added (the whole request queued once
 * complete). rx and lock held. */
void srpc_admit_known_rx(srpc_server_t *srv, uint32_t idx, const srpc_hdr_t *h, uint32_t seg, const uint8_t *data,
                         uint32_t dlen, uint64_t now);
/* The first segment seen of a new call (dev: a one-segment request's device address, else 0).
 * Returns its call-table entry when it was queued (it will run), else CT_NONE (refused, or still
 * arriving). rx and lock held. */
uint32_t srpc_admit_new_rx(srpc_server_t *srv, const srpc_call_key_t *k, const srpc_hdr_t *h, uint32_t seg,
                           const uint8_t *data, uint32_t dlen, uint64_t dev, uint64_t now);

#endif
