/* datagram.h: one received datagram checked as hostile input before anything of it is believed (the allow-list, truncation, its header, version 4's tag and key or version 5's session, version 3's data check, its segment), version 5's handshake answered, then handed to its call (admit.h). rx and lock held throughout. */
#ifndef SRPC_DATAGRAM_H
#define SRPC_DATAGRAM_H

#include "server/server_state.h"

/* One datagram from src: total bytes, its header at hb, the rest at data, or at the device
 * address dev (data unused); trunc: longer than what is here. rx and lock held. */
void srpc_dgram_process_rx(srpc_server_t *srv, const uint8_t *hb, const uint8_t *data_in, uint32_t total, int trunc,
                           const struct sockaddr *src, uint64_t dev, uint64_t now);
/* Entry i of the burst in srv->rx.slots: its datagram, or each of those coalesced into it, in
 * order. rx and lock held. */
void srpc_dgram_entry_rx(srpc_server_t *srv, unsigned i, uint64_t now);
/* An entry of n datagrams came: run mode kept, entered or counted down (rx_in_place.c). rx. */
void srpc_dgram_note_run_rx(srpc_server_t *srv, unsigned n);
/* A large segment seq of the message keyed k came: the rest of it is expected next, in place. rx. */
void srpc_dgram_expect_after_rx(srpc_server_t *srv, const srpc_call_key_t *k, uint16_t seq);

#endif
