/* dpdk_port.h: a DPDK port's state (its queues, pools, neighbour table and counters, with the lock or thread that owns each) and what the port's files share: the neighbour table's lookups, the receive burst and the message send that the transport calls. Private to native/src/dpdk: dpdk_port.c (control path: open, close, pools, neighbours), dpdk_rx.c and dpdk_tx.c (datapath), transport_dpdk.c (the transport on a port). */
#ifndef SRPC_DPDK_PORT_H
#define SRPC_DPDK_PORT_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "dpdk/dpdk_payload_pool.h"
#include "dpdk/transport_dpdk.h"

#define NEIGH_SLOTS 256 /* open addressing, keyed by IPv4 address */
#define RX_CHUNK 32
#define TX_CHUNK 32
#define MAX_FRAME_SEGS 8 /* mbufs of one received frame we look through */
#define TX_RETRIES 1000  /* tx_burst calls that take nothing before waiting for room */

struct neigh {
    uint32_t ip; /* 0: free */
    uint8_t mac[6];
};

struct srpc_dpdk_port {
    uint16_t port_id;
    srpc_endpoint_t self;
    uint16_t mtu;
    int started;
    int tx_csum;   /* the port computes IPv4 and UDP checksums */
    int rx_csum;   /* the port verifies them and says so in ol_flags */
    int multi_seg; /* the port sends chained mbufs */
    /* The TX queue, the neighbour table, ip_id and the tx counters are shared by the threads
     * that send (replies, errors) and the one that receives (ARP answers, learning). */
    pthread_mutex_t tx_lock;
    uint16_t ip_id;
    struct rte_mempool *pool;     /* TX mbufs, and RX without a hardware split */
    struct rte_mempool *hdr_pool; /* hardware split: the first 64 bytes of each frame */
    struct rte_mempool *data_pool; /* hardware split: the rest (payload) */
    srpc_payload_pool_t *payload;  /* data_pool's external memory, when it has some (else NULL:
                                      data_pool is DPDK memory, or there is no split) */
    int gpu;         /* the CUDA device data_pool's memory is on, or -1 (host memory) */
    uint64_t stream; /* gpu: the receiving thread's copies (emulation, device to host) */
    struct rte_mbuf **held; /* gpu: frames whose data was handed on as device addresses */
    unsigned n_held, held_cap;
    struct neigh neigh[NEIGH_SLOTS];
    struct neigh last_learned; /* the receiving thread's: the sender it last put in the table */
    srpc_dpdk_port_stats_t st;
};

/* ------------------------------------------------------------------ neighbours (tx_lock held where said) */

static inline unsigned srpc_neigh_hash(uint32_t ip)
{
    return (ip * 2654435761u) >> 24; /* 8 bits */
}

static inline struct neigh *srpc_neigh_find(srpc_dpdk_port_t *p, uint32_t ip)
{
    for (unsigned i = 0, h = srpc_neigh_hash(ip); i < NEIGH_SLOTS; i++) {
        struct neigh *n = &p->neigh[(h + i) % NEIGH_SLOTS];
        if (n->ip == ip || n->ip == 0)
            return n;
    }
    return NULL;
}

/* tx_lock held. */
static inline int srpc_neigh_set(srpc_dpdk_port_t *p, uint32_t ip, const uint8_t mac[6])
{
    struct neigh *n = srpc_neigh_find(p, ip);
    if (!n)
        return -ENOSPC;
    if (n->ip != ip || memcmp(n->mac, mac, 6) != 0) {
        n->ip = ip;
        memcpy(n->mac, mac, 6);
    }
    return 0;
}

/* ------------------------------------------------------------------ between the port's files */

/* srpc_dpdk_rx_burst's work, the previous burst released and, with a GPU payload pool, its
 * device's context current (dpdk_rx.c). The receiving thread only. */
int srpc_dpdk_rx_burst_current(srpc_dpdk_port_t *p, srpc_rx_t *rx, unsigned max);
/* One frame as given; tx_lock held (dpdk_tx.c). */
int srpc_dpdk_send_frame_locked(srpc_dpdk_port_t *p, const void *frame, size_t len);
/* srpc_dpdk_send_msg of a transport's message, version 4's signing and version 5's sealing
 * included, or a whole datagram (SRPC_TX_RAW) (dpdk_tx.c). Thread-safe (tx_lock). */
int srpc_dpdk_send_tx_msg(srpc_dpdk_port_t *p, const struct sockaddr *dst, socklen_t dstlen, const srpc_tx_msg_t *m);

#endif
