/* udp_sock.h: what the kernel UDP transport's files share (private to native/src/transport): the socket's raw receive and send (udp_sock.c) and the fault injectors' hooks (udp_inject.c, testing builds). udp_rx.c and udp_tx.c call both; udp.c makes the transport of them. */
#ifndef SRPC_TRANSPORT_UDP_SOCK_H
#define SRPC_TRANSPORT_UDP_SOCK_H

#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include "core/auth.h"
#include "core/session.h"
#include "core/tunables.h"
#include "transport/udp.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103 /* linux/udp.h, kernel 4.18 and later */
#endif
#ifndef UDP_GRO
#define UDP_GRO 104 /* linux/udp.h, kernel 5.0 and later */
#endif
#define GRO_CTL_SPACE CMSG_SPACE(sizeof(int)) /* one UDP_GRO control message per datagram received */
#define TX_BURST 64                            /* datagrams per sendmmsg */
#define TAIL_MAX (SRPC_V5_TAIL_MAX > SRPC_AUTH_TRAILER_LEN ? SRPC_V5_TAIL_MAX : SRPC_AUTH_TRAILER_LEN)
#define TX_MAX_IOV (2 + SRPC_TX_MAX_PIECES)    /* a header, the pieces a segment spans, version 3's data check */
_Static_assert(SRPC_GSO_MAX_SEGS * TX_MAX_IOV <= 1024, "a coalesced run's iovecs fit one message (UIO_MAXIOV)");

/* ------------------------------------------------------------------ udp_sock.c */

/* The recvmmsg vectors for rx's slots (receiving thread): built when the slots change. 0 or -ENOMEM. */
int srpc_udp_rx_vectors(srpc_udp_t *u, srpc_rx_t *rx);
/* Receives up to max datagrams from the socket into slots [0, max), no injector. Returns the
 * count, or -EAGAIN / -errno. The receiving thread only. */
int srpc_udp_recv_socket(srpc_udp_t *u, srpc_rx_t *rx, unsigned max);
/* The segment size of a coalesced datagram from m's control messages (UDP_GRO), else 0. */
uint32_t srpc_udp_gro_size(struct msghdr *m);
/* Hands cnt datagrams to the socket, waiting a little for room when it is full; *done gets how
 * many it took. Returns 0 or -errno. Any thread. */
int srpc_udp_send_socket(int fd, struct mmsghdr *msgs, unsigned cnt, unsigned *done);

/* ------------------------------------------------------------------ udp_inject.c (testing builds) */

#ifdef SRPC_FAULT_INJECTION
/* srpc_udp_rx_burst through the RX injector. The receiving thread only. */
int srpc_udp_rx_burst_faulty(srpc_udp_t *u, srpc_rx_t *rx, unsigned max);
/* The sending half of srpc_udp_send through the TX injector; *done as srpc_udp_send_socket. */
int srpc_udp_send_faulty(srpc_udp_t *u, struct mmsghdr *msgs, unsigned cnt, unsigned *done);
/* Lets the TX datagram held back go out (on every receive). */
void srpc_udp_tx_release_held(srpc_udp_t *u);
#endif

#endif
