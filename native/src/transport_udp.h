/* transport_udp.h: kernel UDP sockets for server and client: recvmmsg bursts that scatter each
 * datagram into a 64-byte host header slot and a payload slot, and segmented sendmmsg. */
#ifndef SRPC_TRANSPORT_UDP_H
#define SRPC_TRANSPORT_UDP_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "splitrpc.h"

#define SRPC_HDR_SLOT 64 /* one cache line of host memory per control header */

typedef struct srpc_udp {
    int fd;
    int family;
    int rcvbuf, sndbuf; /* effective sizes */
} srpc_udp_t;

/* Opens a non-blocking UDP socket. bind_mode 1: bind to host:port (server); 0: connect to
 * host:port (client, bound to an ephemeral port). buf_bytes: wanted socket buffers. */
int srpc_udp_open(srpc_udp_t *u, const char *host, uint16_t port, int bind_mode, int buf_bytes);
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
} srpc_rx_t;

int srpc_rx_init(srpc_rx_t *rx, unsigned burst, size_t data_cap);
void srpc_rx_free(srpc_rx_t *rx);
/* Receives up to max (<= rx->burst) datagrams without blocking. Returns the count, or -EAGAIN. */
int srpc_rx_burst(srpc_udp_t *u, srpc_rx_t *rx, unsigned max);
static inline uint8_t *srpc_rx_hdr(const srpc_rx_t *rx, unsigned i) { return rx->hdr + (size_t)i * SRPC_HDR_SLOT; }
static inline uint8_t *srpc_rx_data(const srpc_rx_t *rx, unsigned i) { return rx->data + (size_t)i * rx->data_cap; }

/* Sends one message: `tmpl` gives type, func_id, req_id and aux; the message data is the
 * concatenation of the n pieces (msg_len bytes in all), cut into segments of seg_size.
 * dst NULL sends on a connected socket. Thread-safe (sendmmsg on a shared fd).
 * Returns the number of datagrams sent, or -errno when the socket refused some. */
int srpc_udp_send_msg(srpc_udp_t *u, const struct sockaddr *dst, socklen_t dstlen,
                      const srpc_hdr_t *tmpl, const struct iovec *pieces, int n,
                      uint32_t msg_len, uint32_t seg_size);

#endif
