/* udp.h: the kernel UDP transport: recvmmsg bursts that scatter each datagram into its header slot and data slot, messages of several calls cut into segments and sent with one sendmmsg, in-place receive by peek, and the fault injectors of testing builds. */
#ifndef SRPC_TRANSPORT_UDP_H
#define SRPC_TRANSPORT_UDP_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "transport/transport.h"

struct srpc_faults;

typedef struct srpc_udp {
    int fd;
    int family;
    int rcvbuf, sndbuf; /* effective sizes */
    int gso;            /* 1: sends coalesce datagrams for the kernel to cut (UDP_SEGMENT, tunables.h);
                           a sending thread turns it off if the device cannot (relaxed atomics) */
    uint32_t gso_seg_max; /* the longest datagram coalesced: lowered below one whose run the route
                             refused as over its MTU (relaxed atomics: sends come from any thread) */
    uint64_t tx_coalesced; /* datagrams sent so (relaxed atomic adds: sends come from any thread) */
    int gro;            /* 1: the kernel may hand over datagrams of one sender coalesced (UDP_GRO,
                           tunables.h); every receive reads its segment size (srpc_rx_t.gso) */
    /* Testing builds (SRPC_FAULT_INJECTION): fault injectors of what arrives and of what
     * leaves (transport/faults.h), NULL for none (always NULL in other builds). Set with
     * srpc_udp_set_faults before traffic starts; owned by the socket, freed at close. */
    struct srpc_faults *rx_faults, *tx_faults;
    /* The receiving thread's recvmmsg vectors, pointing into the slots they were built for
     * (built once for a set of slots, then only the entries a receive used are reset). */
    struct mmsghdr *rx_msgs;
    struct iovec *rx_iov;
    uint8_t *rx_ctl;    /* gro: a control buffer per message */
    unsigned rx_cap;
    size_t rx_data_cap;
    const void *rx_hdr, *rx_data, *rx_src;
} srpc_udp_t;

/* Opens a non-blocking UDP socket. bind_mode 1: bind to host:port (server); 0: connect to
 * host:port (client, bound to an ephemeral port). buf_bytes: wanted socket buffers. Every
 * field of u is set (what it held before is not read). */
/* bind_mode: 0 connect to host:port, SRPC_UDP_BIND bind to it, SRPC_UDP_BIND_SHARED bind with
 * SO_REUSEPORT (other processes may bind it too). */
enum { SRPC_UDP_CONNECT = 0, SRPC_UDP_BIND = 1, SRPC_UDP_BIND_SHARED = 2 };
int srpc_udp_open(srpc_udp_t *u, const char *host, uint16_t port, int bind_mode, int buf_bytes);
/* Closes the socket; a fault injector's datagrams still held are freed and counted as
 * discarded, and the injectors freed. */
void srpc_udp_close(srpc_udp_t *u);
int srpc_udp_local_port(const srpc_udp_t *u);

/* Receives up to max (<= rx->burst; 0: rx->burst) datagrams without blocking. Returns the
 * count, or -EAGAIN when none waits, or -errno. With an RX fault injector (testing builds),
 * what it returns has passed through it: a datagram held back comes out after the next one, or
 * at the first call that finds the socket empty. The receiving thread only. */
int srpc_udp_rx_burst(srpc_udp_t *u, srpc_rx_t *rx, unsigned max);

/* Scattered receive: srpc_transport_ops_t.rx_into (-EAGAIN when none waits, -ENOTSUP while an
 * RX injector is set). Receiving thread. */
int srpc_udp_rx_into(srpc_udp_t *u, srpc_rx_t *rx, unsigned n, const struct iovec *place);
/* A run receive: srpc_transport_ops_t.rx_run (-EAGAIN when none waits, -ENOTSUP while an RX
 * injector is set). Receiving thread. */
int srpc_udp_rx_run(srpc_udp_t *u, srpc_rx_t *rx, unsigned n, const struct iovec *place, uint32_t tail_len);
/* In-place receive: srpc_transport_ops_t.peek and recv_into. -ENOTSUP while an RX injector is
 * set. The receiving thread only. */
int srpc_udp_peek(srpc_udp_t *u, uint8_t hdr[SRPC_HDR_LEN], struct sockaddr_storage *src);
int srpc_udp_recv_into(srpc_udp_t *u, uint8_t hdr[SRPC_HDR_LEN], void *dst, uint32_t dlen, uint8_t *tail,
                       uint32_t tail_len);

/* Sends n messages (srpc_tx_msg_t: dst NULL on a connected socket), their datagrams gathered
 * into sendmmsg calls of up to 64 datagrams, waiting a little for room when the socket buffer
 * is full. Returns the messages sent whole; each one's result is its datagram count or -errno
 * (-EINVAL: a bad segment size or pieces shorter than len; -EMSGSIZE: over 65535 segments).
 * With a TX fault injector (testing builds) the datagrams pass through it first; those it drops
 * count as sent, as on a lossy wire. Thread-safe (sendmmsg on a shared socket). */
int srpc_udp_send(srpc_udp_t *u, srpc_tx_msg_t *msgs, unsigned n);
/* One message: srpc_udp_send of one; returns its result. */
int srpc_udp_send_msg(srpc_udp_t *u, const struct sockaddr *dst, socklen_t dstlen,
                      const srpc_hdr_t *tmpl, const struct iovec *pieces, int n,
                      uint32_t msg_len, uint32_t seg_size);

/* Testing builds: gives the socket fault injectors for what it receives (rx) and what it
 * sends (tx), NULL for none; replaces earlier ones (freed). Each direction draws from its
 * own PRNG stream, derived from seed. Call before any thread receives or sends on u (not
 * thread-safe against them). Returns 0, -EINVAL (a probability outside [0, 1] or NaN;
 * nothing changed), -ENOMEM, or -ENOTSUP in builds without SRPC_FAULT_INJECTION.
 * With injectors, srpc_udp_rx_burst also sends the TX injector's datagram held back, so a held
 * datagram waits at most until the next receive or send on the socket. */
int srpc_udp_set_faults(srpc_udp_t *u, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx, uint64_t seed);
/* Copies the injectors' counters (zeros for a direction without one); rx or tx may be NULL.
 * Any thread. Returns 0, or -ENOTSUP in builds without SRPC_FAULT_INJECTION. */
int srpc_udp_fault_counts(const srpc_udp_t *u, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx);

/* The transport of spec (kernel UDP: spec->dpdk_dev is NULL). */
int srpc_udp_transport_open(const srpc_transport_spec_t *spec, srpc_transport_t **out);

#endif /* SRPC_TRANSPORT_UDP_H */
