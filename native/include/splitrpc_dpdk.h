/* splitrpc_dpdk.h: the DPDK half of the flat C API: the EAL, initialised once per process (the kernel-bypass transport builds on it). */
#ifndef SPLITRPC_DPDK_H
#define SPLITRPC_DPDK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Built without DPDK (libdpdk not found by pkg-config when the package was built), every
 * function returns -ENOTSUP and srpc_dpdk_last_error() says so. */

/* Initialises DPDK's Environment Abstraction Layer with the EAL arguments args[0..n) (no
 * program name: it is added), e.g. "--no-huge", "--no-shconf", "-l", "0", "--vdev=net_memif0".
 * Once per process: after a success, later calls return 0 and change nothing; after a failure
 * they return the same error (DPDK cannot be initialised twice). Never exits the process: the
 * arguments DPDK would answer by exiting (-h, --help, -v, --version) give -EINVAL. The calling
 * thread's CPU affinity is what it was before (the EAL pins its caller to its main lcore).
 * Returns 0, -EINVAL (bad or unparsed arguments), -ENOMEM, -EALREADY (the EAL was initialised
 * by someone else in this process), -ENOTSUP, or the EAL's -rte_errno. Thread-safe. */
int srpc_dpdk_init(const char *const *args, int n);
/* 1 once srpc_dpdk_init has succeeded, else 0. */
int srpc_dpdk_ready(void);
/* Ethernet ports DPDK has probed (rte_eth_dev_count_avail), or -ENODEV before a successful init. */
int srpc_dpdk_port_count(void);
/* Why the last failing srpc_dpdk_* call of any thread failed ("" if none). */
const char *srpc_dpdk_last_error(void);

/* Counters of a DPDK port (monotonic). drops[r]: received frames dropped for reason r, named by
 * srpc_dpdk_drop_name(r) ("short", "ethertype", "not_ours", "ip_header", "ip_fragment",
 * "ip_checksum", "protocol", "udp_length", "udp_checksum", "arp_format"); index 0 unused. */
#define SRPC_DPDK_DROP_SLOTS 16
typedef struct srpc_dpdk_stats {
    uint64_t rx_frames, tx_frames;
    uint64_t drops[SRPC_DPDK_DROP_SLOTS];
    uint64_t rx_too_big;   /* UDP payloads larger than the receive slot */
    uint64_t tx_failed;    /* frames built but not taken by the port (freed) */
    uint64_t no_neighbour; /* sends to an address whose MAC is unknown */
    uint64_t arp_replies;  /* ARP replies sent */
    uint64_t rx_buffer_split; /* 1: the port splits each frame in hardware (RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT,
                                 the first 64 bytes to a header pool); 0: split in software */
    uint64_t payload_pool;    /* where the split puts the rest: SRPC_DPDK_PAYLOAD_* */
    uint64_t rx_split_emulated; /* 1: no hardware split, but frames are split in software the way
                                   the NIC would, into the payload pool (emulate_split) */
    uint64_t rx_device_payloads; /* datagrams whose data was handed on as a device address */
    uint64_t rx_device_to_host;  /* datagrams whose data was copied from GPU memory to the host
                                    (multi-segment messages, replies to a client) */
} srpc_dpdk_stats_t;
/* The name of drop reason r, or NULL past the last one. */
const char *srpc_dpdk_drop_name(int r);

/* Kinds of payload pool (srpc_dpdk_stats_t.payload_pool), named by srpc_dpdk_payload_pool_name. */
#define SRPC_DPDK_PAYLOAD_NONE 0 /* "none": no hardware split; whole frames land in one host pool and
                                    the header is split from the payload in software */
#define SRPC_DPDK_PAYLOAD_DPDK 1 /* "dpdk": hardware split, payloads in a pool of DPDK's own host memory */
#define SRPC_DPDK_PAYLOAD_HOST 2 /* "host": hardware split, payloads in page-aligned (locked where
                                    allowed) host memory registered with DPDK and DMA-mapped for the port */
#define SRPC_DPDK_PAYLOAD_GPU 3  /* "gpu": hardware split, payloads in GPU memory (cuMemAlloc) registered
                                    and DMA-mapped likewise */
/* Where a server's payload pool goes when the caller does not say (srpc_server_config_t
 * dpdk_payload_gpu): cuda:0 when the CUDA driver has a device, else host memory. */
#define SRPC_DPDK_PAYLOAD_AUTO (-2)
/* The name of payload pool kind k, or NULL for an unknown kind. */
const char *srpc_dpdk_payload_pool_name(int kind);
struct srpc_server;
/* The counters of a server's DPDK port: 0, or -EINVAL for a server on kernel sockets. Any
 * thread (the counters are read without a lock). */
int srpc_server_dpdk_stats(const struct srpc_server *srv, srpc_dpdk_stats_t *st);

#ifdef __cplusplus
}
#endif
#endif /* SPLITRPC_DPDK_H */
