/* engine.h: the server's receive path: one burst from the transport, each datagram decoded, checked as hostile input and dispatched (a new call, a segment of a known one, a retransmission), requests placed in their Tensor Queues; and the expiry timers. Python never runs here. */
#ifndef SRPC_ENGINE_H
#define SRPC_ENGINE_H

#include <stdint.h>
#include <sys/socket.h>

#include "server/server_state.h"

/* One receive burst: receive (in place first when large segments of partial messages are
 * coming), check, reassemble, queue, send the burst's error replies, wake the worker. rx.
 * Returns the number of datagrams received (0 when none was waiting). */
int srpc_engine_rx_step_rx(srpc_server_t *srv);
/* Expires partial messages, cached replies and rejections, unblocks queues held back by a
 * partial message, and schedules the next run (srv->rx.next_timer_ns). rx. */
void srpc_engine_timers_rx(srpc_server_t *srv, uint64_t now);
/* How long a receiver may sleep before the timers are due (0: now), at most max_us. rx. */
int64_t srpc_engine_timers_in_rx(const srpc_server_t *srv, uint64_t now, int64_t max_us);

/* For the fuzz harness and tests: one datagram handled as if received from src, and the timers
 * run as if the clock read now_ns. They take the rx lock and the lock themselves. */
int srpc_engine_feed(srpc_server_t *srv, const uint8_t *dgram, size_t len, const struct sockaddr *src,
                     socklen_t srclen);
void srpc_engine_run_timers(srpc_server_t *srv, uint64_t now_ns);

#endif /* SRPC_ENGINE_H */
