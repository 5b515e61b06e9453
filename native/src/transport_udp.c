/* transport_udp.c: kernel UDP transport (see transport_udp.h). */
#include "transport_udp.h"
#include "wire.h"

#include <errno.h>
#include <stdio.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int set_buf(int fd, int force_opt, int opt, int bytes)
{
    if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof(bytes)) != 0)
        (void)setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes)); /* capped by rmem_max */
    int got = 0;
    socklen_t l = sizeof(got);
    getsockopt(fd, SOL_SOCKET, opt, &got, &l);
    return got;
}

int srpc_udp_open(srpc_udp_t *u, const char *host, uint16_t port, int bind_mode, int buf_bytes)
{
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
        int r = bind_mode ? bind(fd, ai->ai_addr, ai->ai_addrlen) : connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (r != 0) {
            rc = -errno;
            close(fd);
            continue;
        }
        u->fd = fd;
        u->family = ai->ai_family;
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

int srpc_sockaddr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return 0;
}

int srpc_rx_init(srpc_rx_t *rx, unsigned burst, size_t data_cap)
{
    memset(rx, 0, sizeof(*rx));
    if (burst == 0 || data_cap == 0)
        return -EINVAL;
    rx->burst = burst;
    rx->data_cap = data_cap;
    rx->hdr = aligned_alloc(64, (size_t)burst * SRPC_HDR_SLOT);
    rx->data = aligned_alloc(4096, ((size_t)burst * data_cap + 4095) & ~(size_t)4095);
    rx->msgs = calloc(burst, sizeof(*rx->msgs));
    rx->iov = calloc((size_t)burst * 2, sizeof(*rx->iov));
    rx->src = calloc(burst, sizeof(*rx->src));
    if (!rx->hdr || !rx->data || !rx->msgs || !rx->iov || !rx->src) {
        srpc_rx_free(rx);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < burst; i++) {
        rx->iov[2 * i] = (struct iovec){srpc_rx_hdr(rx, i), SRPC_HDR_LEN};
        rx->iov[2 * i + 1] = (struct iovec){srpc_rx_data(rx, i), data_cap};
    }
    return 0;
}

void srpc_rx_free(srpc_rx_t *rx)
{
    free(rx->hdr);
    free(rx->data);
    free(rx->msgs);
    free(rx->iov);
    free(rx->src);
    memset(rx, 0, sizeof(*rx));
}

int srpc_rx_burst(srpc_udp_t *u, srpc_rx_t *rx, unsigned max)
{
    if (max == 0 || max > rx->burst)
        max = rx->burst;
    for (unsigned i = 0; i < max; i++) {
        struct msghdr *m = &rx->msgs[i].msg_hdr;
        m->msg_name = &rx->src[i];
        m->msg_namelen = sizeof(rx->src[i]);
        m->msg_iov = &rx->iov[2 * i];
        m->msg_iovlen = 2;
        m->msg_control = NULL;
        m->msg_controllen = 0;
        m->msg_flags = 0;
    }
    int n;
    do
        n = recvmmsg(u->fd, rx->msgs, max, MSG_DONTWAIT, NULL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    return n;
}

#define TX_BURST 32
#define TX_MAX_IOV (2 + SRPC_MAX_TENSORS)

/* Waits up to 50 ms for room in the send buffer. */
static int wait_writable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int r = poll(&p, 1, 50);
    return r > 0 ? 0 : -EAGAIN;
}

int srpc_udp_send_msg(srpc_udp_t *u, const struct sockaddr *dst, socklen_t dstlen,
                      const srpc_hdr_t *tmpl, const struct iovec *pieces, int n,
                      uint32_t msg_len, uint32_t seg_size)
{
    if (seg_size == 0 || seg_size > SRPC_MAX_SEG_DATA || n > TX_MAX_IOV - 1)
        return -EINVAL;
    uint32_t nseg = srpc_seg_count(msg_len, seg_size);
    if (nseg > UINT16_MAX)
        return -EMSGSIZE;
    uint8_t hdrs[TX_BURST][SRPC_HDR_LEN];
    struct iovec iov[TX_BURST][TX_MAX_IOV];
    struct mmsghdr msgs[TX_BURST];
    srpc_hdr_t h = *tmpl;
    h.nseg = (uint16_t)nseg;
    h.msg_len = msg_len;
    int piece = 0;          /* cursor into pieces */
    size_t piece_off = 0;
    uint32_t sent = 0;
    while (sent < nseg) {
        unsigned cnt = 0;
        for (; cnt < TX_BURST && sent + cnt < nseg; cnt++) {
            uint32_t seq = sent + cnt;
            uint32_t len = srpc_seg_len(msg_len, seg_size, seq);
            h.seq = (uint16_t)seq;
            srpc_hdr_encode(&h, hdrs[cnt]);
            int k = 0;
            iov[cnt][k++] = (struct iovec){hdrs[cnt], SRPC_HDR_LEN};
            uint32_t need = len;
            while (need > 0 && piece < n) {
                size_t avail = pieces[piece].iov_len - piece_off;
                size_t take = avail < need ? avail : need;
                if (take) {
                    if (k == TX_MAX_IOV)
                        return -EINVAL; /* a segment spanning too many pieces */
                    iov[cnt][k++] = (struct iovec){(uint8_t *)pieces[piece].iov_base + piece_off, take};
                }
                need -= (uint32_t)take;
                piece_off += take;
                if (piece_off == pieces[piece].iov_len) {
                    piece++;
                    piece_off = 0;
                }
            }
            if (need)
                return -EINVAL; /* pieces shorter than msg_len */
            msgs[cnt].msg_hdr = (struct msghdr){.msg_name = (void *)dst, .msg_namelen = dst ? dstlen : 0,
                                                .msg_iov = iov[cnt], .msg_iovlen = (size_t)k};
            msgs[cnt].msg_len = 0;
        }
        unsigned done = 0;
        int tries = 0;
        while (done < cnt) {
            int r = sendmmsg(u->fd, msgs + done, cnt - done, 0);
            if (r > 0) {
                done += (unsigned)r;
                continue;
            }
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0 && (errno == EAGAIN || errno == ENOBUFS) && tries++ < 20 && wait_writable(u->fd) == 0)
                continue;
            return -(r < 0 ? errno : EIO);
        }
        sent += cnt;
    }
    return (int)nseg;
}
