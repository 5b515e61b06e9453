/* udp_sock.c: the kernel UDP transport's socket: opening it (bind or connect, buffers, segmentation and receive offload where the kernel has them), closing it, and its raw receive (recvmmsg into the transport-neutral slots, offload sizes read) and send (sendmmsg, waiting a little for room). */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tunables.h"
#include "transport/faults.h"
#include "transport/udp_sock.h"

static int set_buf(int fd, int force_opt, int opt, int bytes)
{
    if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof(bytes)) != 0)
        (void)setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes)); /* capped by rmem_max */
    int got = 0;
    socklen_t l = sizeof(got);
    getsockopt(fd, SOL_SOCKET, opt, &got, &l);
    return got;
}

/* 1 when the kernel takes UDP_SEGMENT on fd and the environment does not turn it off. */
static int gso_offered(int fd)
{
    const char *env = getenv(SRPC_ENV_UDP_GSO);
    if (env && strcmp(env, "0") == 0)
        return 0;
    int v = 0;
    socklen_t l = sizeof(v);
    return getsockopt(fd, SOL_UDP, UDP_SEGMENT, &v, &l) == 0;
}


/* 1 when the kernel hands fd datagrams of one sender coalesced (UDP_GRO) and the environment
 * does not turn it off. */
static int gro_enable(int fd)
{
    const char *env = getenv(SRPC_ENV_UDP_GRO);
    if (env && strcmp(env, "0") == 0)
        return 0;
    const int one = 1;
    return setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) == 0;
}

uint32_t srpc_udp_gro_size(struct msghdr *m)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c))
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
            int g;
            memcpy(&g, CMSG_DATA(c), sizeof(g));
            return g > 0 ? (uint32_t)g : 0;
        }
    return 0;
}

int srpc_udp_open(srpc_udp_t *u, const char *host, uint16_t port, int bind_mode, int buf_bytes)
{
    memset(u, 0, sizeof(*u));
    u->fd = -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM};
    if (bind_mode)
        hints.ai_flags = AI_PASSIVE;
    char ports[8];
    snprintf(ports, sizeof(ports), "%u", (unsigned)port);
    struct addrinfo *res = NULL;
    int g = getaddrinfo(host, ports, &hints, &res);
    if (g != 0)
        return g == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
    int rc = -EADDRNOTAVAIL;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            rc = -errno;
            continue;
        }
        if (buf_bytes > 0) {
            u->rcvbuf = set_buf(fd, SO_RCVBUFFORCE, SO_RCVBUF, buf_bytes);
            u->sndbuf = set_buf(fd, SO_SNDBUFFORCE, SO_SNDBUF, buf_bytes);
        }
        const int one = 1;
        int r = bind_mode == SRPC_UDP_BIND_SHARED ? setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) : 0;
        if (r == 0)
            r = bind_mode ? bind(fd, ai->ai_addr, ai->ai_addrlen) : connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (r != 0) {
            rc = -errno;
            close(fd);
            continue;
        }
        u->fd = fd;
        u->family = ai->ai_family;
        u->gso = gso_offered(fd);
        u->gro = gro_enable(fd);
        u->gso_seg_max = UINT32_MAX;
        rc = 0;
        break;
    }
    freeaddrinfo(res);
    return rc;
}

void srpc_udp_close(srpc_udp_t *u)
{
    if (u->fd >= 0)
        close(u->fd);
    u->fd = -1;
    free(u->rx_msgs);
    free(u->rx_iov);
    free(u->rx_ctl);
    u->rx_msgs = NULL;
    u->rx_iov = NULL;
    u->rx_ctl = NULL;
    u->rx_cap = 0;
    u->rx_hdr = u->rx_data = u->rx_src = NULL;
#ifdef SRPC_FAULT_INJECTION
    struct srpc_faults *f[2] = {u->rx_faults, u->tx_faults};
    for (int i = 0; i < 2; i++)
        if (f[i]) {
            srpc_faults_discard(f[i]); /* counted, though nobody reads them any more */
            srpc_faults_destroy(f[i]);
        }
    u->rx_faults = u->tx_faults = NULL;
#endif
}

int srpc_udp_local_port(const srpc_udp_t *u)
{
    struct sockaddr_storage ss;
    socklen_t l = sizeof(ss);
    if (getsockname(u->fd, (struct sockaddr *)&ss, &l) != 0)
        return -errno;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

/* ------------------------------------------------------------------ raw receive and send */

int srpc_udp_rx_vectors(srpc_udp_t *u, srpc_rx_t *rx)
{
    if (u->rx_hdr == rx->hdr && u->rx_data == rx->data && u->rx_src == rx->src && u->rx_cap == rx->burst &&
        u->rx_data_cap == rx->data_cap)
        return 0;
    struct mmsghdr *m = calloc(rx->burst, sizeof(*m));
    struct iovec *iv = calloc((size_t)rx->burst * 3, sizeof(*iv)); /* a third for srpc_udp_rx_into */
    uint8_t *ctl = u->gro ? calloc(rx->burst, GRO_CTL_SPACE) : NULL;
    if (!m || !iv || (u->gro && !ctl)) {
        free(m);
        free(iv);
        free(ctl);
        return -ENOMEM;
    }
    free(u->rx_msgs);
    free(u->rx_iov);
    free(u->rx_ctl);
    for (unsigned i = 0; i < rx->burst; i++) {
        iv[3 * i] = (struct iovec){srpc_rx_hdr(rx, i), SRPC_HDR_LEN};
        iv[3 * i + 1] = (struct iovec){srpc_rx_data(rx, i), rx->data_cap};
        m[i].msg_hdr = (struct msghdr){.msg_name = &rx->src[i], .msg_namelen = sizeof(rx->src[i]),
                                       .msg_iov = &iv[3 * i], .msg_iovlen = 2,
                                       .msg_control = ctl ? ctl + (size_t)i * GRO_CTL_SPACE : NULL,
                                       .msg_controllen = ctl ? GRO_CTL_SPACE : 0};
    }
    u->rx_msgs = m;
    u->rx_iov = iv;
    u->rx_ctl = ctl;
    u->rx_cap = rx->burst;
    u->rx_data_cap = rx->data_cap;
    u->rx_hdr = rx->hdr;
    u->rx_data = rx->data;
    u->rx_src = rx->src;
    return 0;
}

int srpc_udp_recv_socket(srpc_udp_t *u, srpc_rx_t *rx, unsigned max)
{
    int r = srpc_udp_rx_vectors(u, rx);
    if (r)
        return r;
    int n;
    do
        n = recvmmsg(u->fd, u->rx_msgs, max, MSG_DONTWAIT, NULL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    for (int i = 0; i < n; i++) {
        struct msghdr *m = &u->rx_msgs[i].msg_hdr;
        rx->len[i] = u->rx_msgs[i].msg_len;
        rx->trunc[i] = (m->msg_flags & MSG_TRUNC) != 0;
        rx->srclen[i] = m->msg_namelen;
        rx->dev[i] = 0;
        rx->gso[i] = m->msg_control ? srpc_udp_gro_size(m) : 0;
        m->msg_namelen = sizeof(rx->src[i]); /* the kernel wrote the source's length there */
        m->msg_controllen = m->msg_control ? GRO_CTL_SPACE : 0; /* and the control bytes' there */
    }
    return n;
}

/* Waits up to 50 ms for room in the send buffer. */
static int wait_writable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int r = poll(&p, 1, 50);
    return r > 0 ? 0 : -EAGAIN;
}

int srpc_udp_send_socket(int fd, struct mmsghdr *msgs, unsigned cnt, unsigned *done)
{
    int tries = 0;
    *done = 0;
    while (*done < cnt) {
        int r = sendmmsg(fd, msgs + *done, cnt - *done, 0);
        if (r > 0) {
            *done += (unsigned)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        /* A connected socket reports an earlier datagram's ICMP "port unreachable" on the next
         * call, which then sent nothing: the error is consumed, so send again (a peer that is
         * down shows as a timeout, not as the failure of an unrelated later send). */
        if (r < 0 && errno == ECONNREFUSED && tries++ < 20)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == ENOBUFS) && tries++ < 20 && wait_writable(fd) == 0)
            continue;
        return -(r < 0 ? errno : EIO);
    }
    return 0;
}
