/* rx_owner.h: which thread receives. The worker receives itself while it waits for a batch (inline: no thread hand-off, one thread spins); the engine thread takes over while the worker is away in a callback longer than rx_takeover_us, or at once when the worker leaves a saturated queue; whoever receives runs the expiry timers when they are due. */
#ifndef SRPC_RX_OWNER_H
#define SRPC_RX_OWNER_H

#include <stdint.h>

#include "server/server_state.h"

/* The engine thread (srpc_server_start): sleeps while the worker receives, receives while it
 * does not, until the server stops. */
void *srpc_rx_owner_engine_main(void *srv);
/* Wakes the engine thread so that it reads the worker's state again. Any thread. */
void srpc_rx_owner_kick(srpc_server_t *srv);

/* The worker entered next_batch at now: back from the callback of its last batch. Worker. */
void srpc_rx_owner_back_w(srpc_server_t *srv, uint64_t now);
/* The worker leaves next_batch with rc, with a batch of fn (NULL: none); saturated: that
 * function's queue is at least half full behind it, so the engine thread receives at once, in
 * parallel with the callback, instead of after rx_takeover_us. Returns rc. Worker. */
int srpc_rx_owner_leave_w(srpc_server_t *srv, srpc_fn_t *fn, int saturated, int rc);
/* Receives what waits before a batch is taken while calls are queued (when no other thread is
 * receiving): under sustained load requests beyond capacity are then queued or answered BUSY
 * at once instead of waiting in the socket buffer. Stops when a burst comes back short, or
 * after rx_takeover_us, so batches still run when receiving alone could take all the time. Worker. */
void srpc_rx_owner_catch_up_w(srpc_server_t *srv);
/* One step of waiting for calls, at now: receives inline (spin: once, then returns; else
 * sleeping on the transport until a datagram, the timers, or until_ns), or, while the engine
 * thread receives, sleeps until it queues calls. Worker. */
void srpc_rx_owner_wait_w(srpc_server_t *srv, int spin, uint64_t now, uint64_t until_ns);

#endif /* SRPC_RX_OWNER_H */
