/* dpdk_split_emulation.h: the RX buffer split of a NIC (header mbuf + payload mbuf from a payload pool) done in software on a received whole frame, so that the split receive path runs on ports without one. */
#ifndef SRPC_DPDK_SPLIT_EMULATION_H
#define SRPC_DPDK_SPLIT_EMULATION_H

#include <stdint.h>

#include "dpdk/frame.h"

struct rte_mbuf;
struct rte_mempool;

/* Splits frame m (one mbuf, as received) after its first `ctl` bytes, as a NIC with
 * RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT would: the rest moves to an mbuf of data_pool chained
 * behind m. Only a UDP datagram for `self` whose checksums are right is split, and m's
 * ol_flags then say both checksums are good (what a NIC verifying them says); any other frame
 * is left whole with its checksum flags unknown, for the receive path to judge. gpu: the
 * data_pool's memory is device memory: the bytes go there with an asynchronous host-to-device
 * copy on `stream`, which the caller synchronises before anything reads them (m keeps its
 * bytes until then). Returns 1 (split), 0 (left whole), -ENOBUFS (data_pool empty: left
 * whole), or a copy's error. The receiving thread only. */
int srpc_split_emulate(struct rte_mbuf *m, struct rte_mempool *data_pool, uint16_t ctl, int gpu, uint64_t stream,
                       const srpc_endpoint_t *self);

#endif /* SRPC_DPDK_SPLIT_EMULATION_H */
