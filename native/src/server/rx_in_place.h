/* rx_in_place.h: receiving the segments of a large message straight into their places in it (peeked and checked first, or scattered where they are expected next, as runs when the sender coalesces), instead of through the burst's slots. rx. */
#ifndef SRPC_RX_IN_PLACE_H
#define SRPC_RX_IN_PLACE_H

#include "server/server_state.h"

/* One step of in-place receive: the expected segments scattered, or the next datagram peeked.
 * Returns what rx_direct / rx_scatter return (rx_in_place.c): 1 handled, 0 none waiting, -1 the
 * burst path must take the next one. rx. */
int srpc_rx_in_place_step_rx(srpc_server_t *srv);

#endif
