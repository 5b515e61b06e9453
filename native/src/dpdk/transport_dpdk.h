/* transport_dpdk.h: kernel-bypass UDP on one DPDK Ethernet port: frames checked and built in C (frame.h), the control header split from the payload (by the NIC into two mempools where it can, else in software) into the transport-neutral receive slots (srpc_rx_t), segmented sends as chained mbufs, ARP answered and learned; and the transport (transport/transport.h) of a server or a client on such a port. */
#ifndef SRPC_TRANSPORT_DPDK_H
#define SRPC_TRANSPORT_DPDK_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "dpdk/frame.h"
#include "splitrpc_core.h"
#include "splitrpc_dpdk.h"
#include "transport/transport.h"

typedef struct srpc_dpdk_port srpc_dpdk_port_t;

typedef struct srpc_dpdk_port_config {
    const char *dev;    /* the port's DPDK name: "net_ring0", "net_af_packet0", "net_memif0", a PCI address */
    uint32_t ip;        /* our IPv4 address, host byte order */
    uint16_t udp_port;  /* our UDP port */
    uint16_t mtu;       /* largest IP packet sent (segments are cut to fit): 0 = 1500 */
    uint32_t n_mbufs;   /* mbufs in the pool: 0 = 8191 */
    int tx_chain;       /* header and data in two chained mbufs: 0 where the port says it sends
                           chains (MULTI_SEGS), 1 always (ports that pass mbufs on, like net_ring),
                           -1 never (one mbuf per frame, the data copied after the header) */
    int payload_on_gpu; /* where frames are split (by the port, or emulate_split): 1 = the payload
                           pool in the memory of CUDA device gpu_device when the driver has it and
                           the port verifies UDP checksums (the host cannot read the payload to sum
                           it); else, or if it cannot be registered and mapped, host memory. 0 =
                           host memory */
    int gpu_device;
    int emulate_split;  /* 1: on a port without a hardware split, split every received frame in
                           software the way the NIC would (the first 64 bytes stay in the frame's
                           mbuf, the rest is copied into an mbuf of the payload pool, the UDP
                           checksum verified first), so that the split receive path runs on any
                           port: for tests, and to measure that path */
} srpc_dpdk_port_config_t;

/* The counters (splitrpc_dpdk.h): drops indexed by srpc_frame_drop. */
typedef srpc_dpdk_stats_t srpc_dpdk_port_stats_t;
_Static_assert(SRPC_FRAME_DROP_MAX <= SRPC_DPDK_DROP_SLOTS, "drop reasons fit the public counters");

/* Configures and starts the port (one RX and one TX queue, an mbuf pool of its own, checksum
 * offloads where the port has them). Where the port splits frames in hardware
 * (RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT), the RX queue takes the 64-byte control part from a host
 * header pool and the payload from a payload pool (dpdk_payload_pool.h; kind in the stats'
 * payload_pool); elsewhere the split is done in software. The EAL must be initialised
 * (srpc_dpdk_init). Returns 0, -ENODEV (no such port), -EINVAL, -ENOMEM, or DPDK's -errno. */
int srpc_dpdk_port_open(const srpc_dpdk_port_config_t *cfg, srpc_dpdk_port_t **out);
/* Stops the port and frees everything (NULL is fine). No receive or send may be running. */
void srpc_dpdk_port_close(srpc_dpdk_port_t *p);
/* The port's MAC address. */
void srpc_dpdk_port_mac(const srpc_dpdk_port_t *p, uint8_t mac[6]);
/* Adds or replaces a neighbour (IPv4 address, host order -> MAC), as ARP would learn it.
 * Returns 0, or -ENOSPC when the table is full of other addresses. */
int srpc_dpdk_neighbour_add(srpc_dpdk_port_t *p, uint32_t ip, const uint8_t mac[6]);
/* 1 when the MAC of ip (host order) is known, else 0. */
int srpc_dpdk_neighbour_known(srpc_dpdk_port_t *p, uint32_t ip);
/* Receives up to max (<= rx->burst) UDP datagrams for our address and port without blocking,
 * into the transport-neutral slots: the first SRPC_HDR_LEN payload bytes in the header slot,
 * the rest in the data slot (trunc[i] = 1 when it does not fit), len[i] = the payload length,
 * src[i] = the sender (sockaddr_in), dev[i] = 0. Frames that are not such datagrams
 * are dropped and counted; ARP requests for our address are answered and every ARP sender is
 * learned. Returns the count (0 when nothing waits).
 * A port whose payloads land in GPU memory (srpc_dpdk_payload_device >= 0) never reads them on
 * the host: the data of a one-segment request stays where it landed and rx->dev[i] is its
 * device address (its mbuf held until srpc_dpdk_rx_release); the data of any other datagram is
 * copied to its data slot (device to host) before return, the device's context made current
 * for the burst and put back. Frames whose UDP checksum the port did not verify are dropped as
 * "udp_checksum". The receiving thread only. */
int srpc_dpdk_rx_burst(srpc_dpdk_port_t *p, srpc_rx_t *rx, unsigned max);
/* Frees the mbufs the last burst held for device addresses (rx->dev). The caller's copies from
 * them must be complete. Also done by the next srpc_dpdk_rx_burst. The receiving thread only. */
void srpc_dpdk_rx_release(srpc_dpdk_port_t *p);
/* The CUDA device whose memory the payloads land in, or -1 (host memory). */
int srpc_dpdk_payload_device(const srpc_dpdk_port_t *p);
/* Sends one message as srpc_udp_send_msg does: cut into seg_size segments, each one frame: a
 * header mbuf with Ethernet, IPv4, UDP and the control header (64 bytes), chained to a payload
 * mbuf with the segment's data. dst: an IPv4 sockaddr_in whose MAC is known (learned or added).
 * Returns the frames sent, -EHOSTUNREACH (MAC unknown), -EMSGSIZE (a segment exceeds the MTU),
 * -ENOBUFS (no mbufs; nothing sent), -EAGAIN (the port took only part: the rest was freed and
 * counted), -EAFNOSUPPORT, -EINVAL (also for version 4, which needs a key: the transport's send
 * signs it). Thread-safe: the port's tx_lock serialises the senders (the receiving thread sends
 * too: ARP answers). */
int srpc_dpdk_send_msg(srpc_dpdk_port_t *p, const struct sockaddr *dst, socklen_t dstlen, const srpc_hdr_t *tmpl,
                       const struct iovec *pieces, int n, uint32_t msg_len, uint32_t seg_size);
/* Sends one raw frame as given (tests, and ARP). Returns 0, -ENOBUFS, -EMSGSIZE or -EAGAIN. */
int srpc_dpdk_send_frame(srpc_dpdk_port_t *p, const void *frame, size_t len);
void srpc_dpdk_port_stats(const srpc_dpdk_port_t *p, srpc_dpdk_port_stats_t *st);

/* The transport of spec on a DPDK port (spec->dpdk_dev). Serving (spec->bind): host is our IPv4
 * address on the port and port our UDP port; where frames are split, payloads land where
 * dpdk_payload_gpu says (AUTO: cuda:0 when the driver has a device, else host memory), and
 * payload_device tells which: then the caller of rx_burst makes that device's context current
 * around it (srpc_gpu_enter), once for its own copies as well. A client (bind 0): host is the
 * server's IPv4 address, the server's MAC is given or asked by ARP (-EHOSTUNREACH when nobody
 * answers in 2 s), sends with dst NULL go to it and only its datagrams are received (others are
 * dropped as "not_ours"). max_seg: the largest segment that fits the MTU. Returns 0 or -errno. */
int srpc_dpdk_transport_open(const srpc_transport_spec_t *spec, srpc_transport_t **out);
/* The port counters of a DPDK transport: 0, or -EINVAL for another transport. Any thread. */
int srpc_dpdk_transport_stats(const srpc_transport_t *t, srpc_dpdk_stats_t *st);

#endif /* SRPC_TRANSPORT_DPDK_H */
