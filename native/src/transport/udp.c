/* udp.c: the kernel UDP transport (transport/transport.h) of a server or a client: its operations over the socket (udp_sock.c), the receive paths (udp_rx.c), the send path (udp_tx.c) and the fault injectors (udp_inject.c), and opening it (the socket, the segment size the route carries). */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "core/tunables.h"
#include "core/wire.h"
#include "transport/udp_sock.h"

typedef struct udp_transport {
    srpc_transport_t t;
    srpc_udp_t u;
} udp_transport_t;

static srpc_udp_t *udp_of(srpc_transport_t *t) { return &((udp_transport_t *)t)->u; }
static const srpc_udp_t *udp_of_c(const srpc_transport_t *t) { return &((const udp_transport_t *)t)->u; }

static int op_rx_burst(srpc_transport_t *t, srpc_rx_t *rx, unsigned max)
{
    int n = srpc_udp_rx_burst(udp_of(t), rx, max);
    return n == -EAGAIN ? 0 : n;
}

static int op_rx_into(srpc_transport_t *t, srpc_rx_t *rx, unsigned n, const struct iovec *place)
{
    int r = srpc_udp_rx_into(udp_of(t), rx, n, place);
    return r == -EAGAIN ? 0 : r;
}

static int op_rx_run(srpc_transport_t *t, srpc_rx_t *rx, unsigned n, const struct iovec *place, uint32_t tail_len)
{
    int r = srpc_udp_rx_run(udp_of(t), rx, n, place, tail_len);
    return r == -EAGAIN ? 0 : r;
}

static int op_peek(srpc_transport_t *t, uint8_t hdr[SRPC_HDR_LEN], struct sockaddr_storage *src)
{
    return srpc_udp_peek(udp_of(t), hdr, src);
}

static int op_recv_into(srpc_transport_t *t, uint8_t hdr[SRPC_HDR_LEN], void *dst, uint32_t dlen, uint8_t *tail,
                        uint32_t tail_len)
{
    return srpc_udp_recv_into(udp_of(t), hdr, dst, dlen, tail, tail_len);
}

static int op_send(srpc_transport_t *t, srpc_tx_msg_t *msgs, unsigned n) { return srpc_udp_send(udp_of(t), msgs, n); }

static int op_local_port(const srpc_transport_t *t) { return srpc_udp_local_port(udp_of_c(t)); }

static int op_set_faults(srpc_transport_t *t, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx, uint64_t seed)
{
    return srpc_udp_set_faults(udp_of(t), rx, tx, seed);
}

static int op_fault_counts(const srpc_transport_t *t, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx)
{
    return srpc_udp_fault_counts(udp_of_c(t), rx, tx);
}

static void op_close(srpc_transport_t *t)
{
    srpc_udp_close(udp_of(t));
    free(t);
}

static const srpc_transport_ops_t udp_ops = {
    .name = "udp",
    .rx_burst = op_rx_burst,
    .rx_into = op_rx_into,
    .rx_run = op_rx_run,
    .peek = op_peek,
    .recv_into = op_recv_into,
    .send = op_send,
    .local_port = op_local_port,
    .set_faults = op_set_faults,
    .fault_counts = op_fault_counts,
    .close = op_close,
};

/* A connected socket's route: the segment data one datagram carries unfragmented (its MTU less
 * the IP and UDP headers and the protocol's), or 0 when the kernel does not say. */
static uint32_t path_seg(const srpc_udp_t *u)
{
    int mtu = 0;
    socklen_t l = sizeof(mtu);
    const int v6 = u->family == AF_INET6;
    if (getsockopt(u->fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_MTU : IP_MTU, &mtu, &l) != 0)
        return 0;
    const int room = mtu - (v6 ? 40 : 20) - 8 - SRPC_HDR_LEN;
    if (room < SRPC_MIN_PATH_SEG)
        return 0; /* nothing sensible: the default applies */
    return room > SRPC_MAX_SEG_DATA ? SRPC_MAX_SEG_DATA : (uint32_t)room;
}

int srpc_udp_transport_open(const srpc_transport_spec_t *spec, srpc_transport_t **out)
{
    udp_transport_t *ut = calloc(1, sizeof(*ut));
    if (!ut)
        return -ENOMEM;
    int r = srpc_udp_open(&ut->u, spec->host, spec->port,
                          !spec->bind ? SRPC_UDP_CONNECT : spec->reuse_port ? SRPC_UDP_BIND_SHARED : SRPC_UDP_BIND,
                          spec->sock_buf_bytes);
    if (r) {
        free(ut);
        return r;
    }
    ut->t = (srpc_transport_t){.ops = &udp_ops, .wait_fd = ut->u.fd, .max_seg = SRPC_MAX_SEG_DATA,
                               .payload_device = -1, .rcvbuf = ut->u.rcvbuf, .sndbuf = ut->u.sndbuf,
                               .tx_coalesced = &ut->u.tx_coalesced};
    if (!spec->bind) {
        struct sockaddr_storage peer;
        socklen_t pl = sizeof(peer);
        ut->t.peer_loopback = getpeername(ut->u.fd, (struct sockaddr *)&peer, &pl) == 0 &&
                              srpc_sockaddr_is_loopback((struct sockaddr *)&peer);
        ut->t.path_seg = path_seg(&ut->u);
    }
    *out = &ut->t;
    return 0;
}
