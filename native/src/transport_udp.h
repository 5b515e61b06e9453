/* transport_udp.h: kernel UDP sockets for server and client: recvmmsg bursts that scatter each
 * datagram into a 64-byte host header slot and a payload slot, and segmented sendmmsg. */
#ifndef SRPC_TRANSPORT_UDP_H
#define SRPC_TRANSPORT_UDP_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "splitrpc.h"

#define SRPC_HDR_SLOT 64 /* one cache line of host memory per control header */

struct srpc_faults;

typedef struct srpc_udp {
    int fd;
    int family;
    int rcvbuf, sndbuf; /* effective sizes */
    /* Testing builds (SRPC_FAULT_INJECTION): fault injectors of what arrives and of what
     * leaves (faults.h), NULL for none (always NULL in other builds). Set with
     * srpc_udp_set_faults before traffic starts; owned by the socket, freed at close. */
    struct srpc_faults *rx_faults, *tx_faults;
} srpc_udp_t;

/* Opens a non-blocking UDP socket. bind_mode 1: bind to host:port (server); 0: connect to
 * host:port (client, bound to an ephemeral port). buf_bytes: wanted socket buffers. */
int srpc_udp_open(srpc_udp_t *u, const char *host, uint16_t port, int bind_mode, int buf_bytes);
/* Closes the socket; a fault injector's datagrams still held are freed and counted as
 * discarded, and the injectors freed. */
void srpc_udp_close(srpc_udp_t *u);
int srpc_udp_local_port(const srpc_udp_t *u);
/* 1 if the address is loopback (127/8 or ::1). */
int srpc_sockaddr_is_loopback(const struct sockaddr *sa);

/* A receive burst: `burst` header slots (host) and payload slots of `data_cap` bytes (the
 * payload region). Owned by the thread that receives. */
typedef struct srpc_rx {
    unsigned burst;
    size_t data_cap;
    uint8_t *hdr;                   /* burst * SRPC_HDR_SLOT */
    uint8_t *data;                  /* burst * data_cap */
    struct mmsghdr *msgs;
    struct iovec *iov;              /* 2 per datagram */
    struct sockaddr_storage *src;
    uint64_t *dev;                  /* per datagram: 0, or the device address of its data when
                                       it stayed in GPU memory (a DPDK port with a GPU payload
                                       pool: srpc_dpdk_rx_burst); then the data slot is unused */
} srpc_rx_t;

int srpc_rx_init(srpc_rx_t *rx, unsigned burst, size_t data_cap);
void srpc_rx_free(srpc_rx_t *rx);
/* Receives up to max (<= rx->burst) datagrams without blocking. Returns the count, or -EAGAIN.
 * With an RX fault injector (testing builds), what it returns has passed through it: a
 * datagram held back comes out after the next one, or at the first call that finds the
 * socket empty. (The server's in-place receive, engine.c rx_direct, which reads the socket
 * itself, is off while the socket has an RX injector.) */
int srpc_rx_burst(srpc_udp_t *u, srpc_rx_t *rx, unsigned max);
static inline uint8_t *srpc_rx_hdr(const srpc_rx_t *rx, unsigned i) { return rx->hdr + (size_t)i * SRPC_HDR_SLOT; }
static inline uint8_t *srpc_rx_data(const srpc_rx_t *rx, unsigned i) { return rx->data + (size_t)i * rx->data_cap; }

/* Sends one message: `tmpl` gives type, func_id, req_id and aux; the message data is the
 * concatenation of the n pieces (msg_len bytes in all), cut into segments of seg_size.
 * dst NULL sends on a connected socket. Thread-safe (sendmmsg on a shared fd).
 * Returns the number of datagrams sent, or -errno when the socket refused some. With a TX
 * fault injector (testing builds) the datagrams pass through it first; those it drops count
 * as sent, as on a lossy wire. */
int srpc_udp_send_msg(srpc_udp_t *u, const struct sockaddr *dst, socklen_t dstlen,
                      const srpc_hdr_t *tmpl, const struct iovec *pieces, int n,
                      uint32_t msg_len, uint32_t seg_size);

/* Testing builds: gives the socket fault injectors for what it receives (rx) and what it
 * sends (tx), NULL for none; replaces earlier ones (freed). Each direction draws from its
 * own PRNG stream, derived from seed. Call before any thread receives or sends on u (not
 * thread-safe against them). Returns 0, -EINVAL (a probability outside [0, 1] or NaN;
 * nothing changed), -ENOMEM, or -ENOTSUP in builds without SRPC_FAULT_INJECTION.
 * With injectors, srpc_rx_burst also sends the TX injector's datagram held back, so a held
 * datagram waits at most until the next receive or send on the socket. */
int srpc_udp_set_faults(srpc_udp_t *u, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx, uint64_t seed);
/* Copies the injectors' counters (zeros for a direction without one); rx or tx may be NULL.
 * Any thread. Returns 0, or -ENOTSUP in builds without SRPC_FAULT_INJECTION. */
int srpc_udp_fault_counts(const srpc_udp_t *u, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx);

#endif
