/* udp_rx.c: the kernel UDP transport's receive paths: bursts into the slots (through the RX injector in testing builds), scattered and run receives straight into their places, and the in-place receive by peek. The receiving thread only. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/tunables.h"
#include "core/wire.h"
#include "transport/udp_sock.h"

int srpc_udp_rx_burst(srpc_udp_t *u, srpc_rx_t *rx, unsigned max)
{
    if (max == 0 || max > rx->burst)
        max = rx->burst;
#ifdef SRPC_FAULT_INJECTION
    if (u->tx_faults)
        srpc_udp_tx_release_held(u);
    if (u->rx_faults)
        return srpc_udp_rx_burst_faulty(u, rx, max);
#endif
    return srpc_udp_recv_socket(u, rx, max);
}

int srpc_udp_rx_into(srpc_udp_t *u, srpc_rx_t *rx, unsigned n, const struct iovec *place)
{
    if (u->rx_faults) /* every datagram must pass the injector */
        return -ENOTSUP;
    if (n == 0 || n > rx->burst)
        return -EINVAL;
    for (unsigned i = 0; i < n; i++)
        if (place[i].iov_len > rx->data_cap)
            return -EINVAL;
    int r = srpc_udp_rx_vectors(u, rx);
    if (r)
        return r;
    for (unsigned i = 0; i < n; i++) { /* header slot, place, then the rest where it lies whole */
        struct iovec *iv = u->rx_msgs[i].msg_hdr.msg_iov;
        iv[1] = place[i];
        iv[2] = (struct iovec){srpc_rx_data(rx, i) + place[i].iov_len, rx->data_cap - place[i].iov_len};
        u->rx_msgs[i].msg_hdr.msg_iovlen = 3;
    }
    r = srpc_udp_recv_socket(u, rx, n);
    for (unsigned i = 0; i < n; i++) { /* back to the burst layout */
        u->rx_msgs[i].msg_hdr.msg_iov[1] = (struct iovec){srpc_rx_data(rx, i), rx->data_cap};
        u->rx_msgs[i].msg_hdr.msg_iovlen = 2;
    }
    return r;
}

int srpc_udp_rx_run(srpc_udp_t *u, srpc_rx_t *rx, unsigned n, const struct iovec *place, uint32_t tail_len)
{
    if (u->rx_faults) /* every datagram must pass the injector */
        return -ENOTSUP;
    if (n == 0 || n > rx->burst || n > SRPC_SCATTER_MAX || tail_len > SRPC_HDR_SLOT - SRPC_RX_TAIL_OFF)
        return -EINVAL;
    struct iovec iv[3 * SRPC_SCATTER_MAX + 1];
    size_t off = 0; /* the bytes laid out, header slot 0's included */
    unsigned k = 0;
    for (unsigned j = 0; j < n; j++) {
        iv[k++] = (struct iovec){srpc_rx_hdr(rx, j), SRPC_HDR_LEN};
        iv[k++] = place[j];
        if (tail_len)
            iv[k++] = (struct iovec){srpc_rx_tail(rx, j), tail_len};
        off += SRPC_HDR_LEN + place[j].iov_len + tail_len;
    }
    if (off - SRPC_HDR_LEN > rx->data_cap)
        return -EINVAL;
    iv[k++] = (struct iovec){srpc_rx_data(rx, 0) + off - SRPC_HDR_LEN, rx->data_cap - (off - SRPC_HDR_LEN)};
    int r = srpc_udp_rx_vectors(u, rx);
    if (r)
        return r;
    struct msghdr *m = &u->rx_msgs[0].msg_hdr;
    struct iovec *saved = m->msg_iov;
    m->msg_iov = iv;
    m->msg_iovlen = k;
    r = srpc_udp_recv_socket(u, rx, 1);
    m->msg_iov = saved; /* back to the burst layout */
    m->msg_iovlen = 2;
    return r;
}

int srpc_udp_peek(srpc_udp_t *u, uint8_t hdr[SRPC_HDR_LEN], struct sockaddr_storage *src)
{
    if (u->rx_faults) /* every datagram must pass the injector */
        return -ENOTSUP;
    struct iovec iv = {hdr, SRPC_HDR_LEN};
    union {
        struct cmsghdr align;
        uint8_t b[GRO_CTL_SPACE];
    } ctl;
    struct msghdr m = {.msg_name = src, .msg_namelen = sizeof(*src), .msg_iov = &iv, .msg_iovlen = 1,
                       .msg_control = u->gro ? ctl.b : NULL, .msg_controllen = u->gro ? sizeof(ctl.b) : 0};
    ssize_t len = recvmsg(u->fd, &m, MSG_PEEK | MSG_DONTWAIT | MSG_TRUNC); /* the full length */
    if (len < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
    const uint32_t g = u->gro ? srpc_udp_gro_size(&m) : 0;
    if (g && (size_t)len > g)
        return -E2BIG; /* datagrams coalesced: rx_burst takes them apart */
    return len > INT32_MAX ? -EMSGSIZE : (int)len;
}

int srpc_udp_recv_into(srpc_udp_t *u, uint8_t hdr[SRPC_HDR_LEN], void *dst, uint32_t dlen, uint8_t *tail,
                       uint32_t tail_len)
{
    /* writes at most dlen into dst, then at most tail_len into tail */
    struct iovec iv[3] = {{hdr, SRPC_HDR_LEN}, {dst, dlen}, {tail, tail_len}};
    struct msghdr m = {.msg_iov = iv, .msg_iovlen = tail_len ? 3 : 2};
    ssize_t got = recvmsg(u->fd, &m, MSG_DONTWAIT);
    if (got < 0)
        return -errno;
    return got > INT32_MAX ? -EMSGSIZE : (int)got;
}
