/* udp.c: the kernel UDP transport (see udp.h): sockets, recvmmsg bursts into header and data slots, messages to sendmmsg, in-place receive, fault injection of testing builds. */
#include "transport/udp.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tunables.h"
#include "core/auth.h"
#include "core/session.h"
#include "core/wire.h"
#include "transport/faults.h"

static int set_buf(int fd, int force_opt, int opt, int bytes)
{
    if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof(bytes)) != 0)
        (void)setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes)); /* capped by rmem_max */
    int got = 0;
    socklen_t l = sizeof(got);
    getsockopt(fd, SOL_SOCKET, opt, &got, &l);
    return got;
}

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103 /* linux/udp.h, kernel 4.18 and later */
#endif

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

#ifndef UDP_GRO
#define UDP_GRO 104 /* linux/udp.h, kernel 5.0 and later */
#endif
#define GRO_CTL_SPACE CMSG_SPACE(sizeof(int)) /* one UDP_GRO control message per datagram received */

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

/* The segment size of a coalesced datagram from m's control messages, else 0. */
static uint32_t gro_size(struct msghdr *m)
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

/* ------------------------------------------------------------------ receive */

/* The recvmmsg vectors for rx's slots (receiving thread): built when the slots change. */
static int rx_vectors(srpc_udp_t *u, srpc_rx_t *rx)
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

/* Receives up to max datagrams into slots [0, max). Returns the count, or -EAGAIN / -errno. */
static int rx_recv(srpc_udp_t *u, srpc_rx_t *rx, unsigned max)
{
    int r = rx_vectors(u, rx);
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
        rx->gso[i] = m->msg_control ? gro_size(m) : 0;
        m->msg_namelen = sizeof(rx->src[i]); /* the kernel wrote the source's length there */
        m->msg_controllen = m->msg_control ? GRO_CTL_SPACE : 0; /* and the control bytes' there */
    }
    return n;
}

#ifdef SRPC_FAULT_INJECTION
static int rx_burst_faulty(srpc_udp_t *u, srpc_rx_t *rx, unsigned max);
static void tx_release_held(srpc_udp_t *u);
#endif

int srpc_udp_rx_burst(srpc_udp_t *u, srpc_rx_t *rx, unsigned max)
{
    if (max == 0 || max > rx->burst)
        max = rx->burst;
#ifdef SRPC_FAULT_INJECTION
    if (u->tx_faults)
        tx_release_held(u);
    if (u->rx_faults)
        return rx_burst_faulty(u, rx, max);
#endif
    return rx_recv(u, rx, max);
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
    int r = rx_vectors(u, rx);
    if (r)
        return r;
    for (unsigned i = 0; i < n; i++) { /* header slot, place, then the rest where it lies whole */
        struct iovec *iv = u->rx_msgs[i].msg_hdr.msg_iov;
        iv[1] = place[i];
        iv[2] = (struct iovec){srpc_rx_data(rx, i) + place[i].iov_len, rx->data_cap - place[i].iov_len};
        u->rx_msgs[i].msg_hdr.msg_iovlen = 3;
    }
    r = rx_recv(u, rx, n);
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
    int r = rx_vectors(u, rx);
    if (r)
        return r;
    struct msghdr *m = &u->rx_msgs[0].msg_hdr;
    struct iovec *saved = m->msg_iov;
    m->msg_iov = iv;
    m->msg_iovlen = k;
    r = rx_recv(u, rx, 1);
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
    const uint32_t g = u->gro ? gro_size(&m) : 0;
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

/* ------------------------------------------------------------------ send */

#define TX_BURST 64                            /* datagrams per sendmmsg */
#define TAIL_MAX (SRPC_V5_TAIL_MAX > SRPC_AUTH_TRAILER_LEN ? SRPC_V5_TAIL_MAX : SRPC_AUTH_TRAILER_LEN)
#define TX_MAX_IOV (2 + SRPC_TX_MAX_PIECES)    /* a header, the pieces a segment spans, version 3's data check */
_Static_assert(SRPC_GSO_MAX_SEGS * TX_MAX_IOV <= 1024, "a coalesced run's iovecs fit one message (UIO_MAXIOV)");

/* Waits up to 50 ms for room in the send buffer. */
static int wait_writable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int r = poll(&p, 1, 50);
    return r > 0 ? 0 : -EAGAIN;
}

/* Hands cnt datagrams to the socket, waiting a little for room when it is full; *done gets
 * how many it took. Returns 0 or -errno. */
static int send_all(int fd, struct mmsghdr *msgs, unsigned cnt, unsigned *done)
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

#ifdef SRPC_FAULT_INJECTION
static int send_faulty(srpc_udp_t *u, struct mmsghdr *msgs, unsigned cnt, unsigned *done);
#endif

/* Datagrams built and not yet handed to the socket; owner[i]: the message of datagram i. */
typedef struct tx_batch {
    uint8_t hdr[TX_BURST][SRPC_HDR_LEN];
    uint8_t check[TX_BURST][TAIL_MAX]; /* version 3's data check, version 4's trailer or 5's tail */
    uint8_t *enc[TX_BURST]; /* version 5, an encrypting session: the datagram's ciphertext (malloc) */
    struct iovec iov[TX_BURST][TX_MAX_IOV];
    struct mmsghdr mm[TX_BURST];
    unsigned owner[TX_BURST];
    uint32_t len[TX_BURST]; /* each datagram's bytes */
    unsigned cnt;
} tx_batch_t;

static int same_dst(const struct msghdr *a, const struct msghdr *b)
{
    return a->msg_namelen == b->msg_namelen &&
           (a->msg_name == b->msg_name || memcmp(a->msg_name, b->msg_name, a->msg_namelen) == 0);
}

/* send_all of the batch with runs of datagrams to one destination, of one length L (the last
 * of a run may be shorter), handed to the kernel as one buffer that it cuts at L (UDP_SEGMENT):
 * one pass down the stack for the run instead of one per datagram. *done counts datagrams. A
 * send the kernel refuses for the option turns it off on this socket, and the rest go one by
 * one. */
static int send_coalesced(srpc_udp_t *u, tx_batch_t *b, unsigned *done)
{
    struct mmsghdr gm[TX_BURST];
    struct iovec giov[TX_BURST * TX_MAX_IOV];
    unsigned first[TX_BURST + 1]; /* datagram index that each coalesced message starts at */
    union {
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } ctl[TX_BURST];
    unsigned g = 0, nio = 0;
    const size_t seg_max = __atomic_load_n(&u->gso_seg_max, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < b->cnt;) {
        const struct msghdr *h0 = &b->mm[i].msg_hdr;
        const size_t L = b->len[i];
        size_t total = 0;
        unsigned j = i;
        first[g] = i;
        gm[g].msg_hdr = (struct msghdr){.msg_name = h0->msg_name, .msg_namelen = h0->msg_namelen,
                                        .msg_iov = giov + nio};
        gm[g].msg_len = 0;
        do { /* datagram j joins the run */
            const struct msghdr *h = &b->mm[j].msg_hdr;
            memcpy(giov + nio, h->msg_iov, h->msg_iovlen * sizeof(struct iovec));
            nio += (unsigned)h->msg_iovlen;
            gm[g].msg_hdr.msg_iovlen += h->msg_iovlen;
            total += b->len[j];
            if (b->len[j++] < L)
                break; /* a shorter one ends a run */
        } while (L <= seg_max && j < b->cnt && j - i < SRPC_GSO_MAX_SEGS && same_dst(h0, &b->mm[j].msg_hdr) &&
                 b->len[j] <= L && total + b->len[j] <= SRPC_GSO_MAX_BYTES);
        if (j - i > 1) { /* several: the kernel cuts them at L */
            gm[g].msg_hdr.msg_control = ctl[g].buf;
            gm[g].msg_hdr.msg_controllen = sizeof(ctl[g].buf);
            struct cmsghdr *c = CMSG_FIRSTHDR(&gm[g].msg_hdr);
            c->cmsg_level = SOL_UDP;
            c->cmsg_type = UDP_SEGMENT;
            c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            const uint16_t seg = (uint16_t)L;
            memcpy(CMSG_DATA(c), &seg, sizeof(seg));
        }
        g++;
        i = j;
    }
    first[g] = b->cnt;
    unsigned gdone = 0;
    int r = send_all(u->fd, gm, g, &gdone);
    *done = first[gdone];
    uint64_t coalesced = 0;
    for (unsigned k = 0; k < gdone; k++)
        coalesced += first[k + 1] - first[k] > 1 ? first[k + 1] - first[k] : 0;
    if (coalesced)
        __atomic_fetch_add(&u->tx_coalesced, coalesced, __ATOMIC_RELAXED);
    const int refused = r == -EMSGSIZE || r == -EINVAL || r == -EIO || r == -EOPNOTSUPP;
    if (refused && first[gdone + 1] - first[gdone] > 1) {
        /* The kernel refused a run it would have taken one datagram at a time. -EMSGSIZE (-EINVAL
         * on kernels before 2024's stable updates): L is more than the route's MTU takes whole
         * (IP fragments a single datagram, never a cut one), so runs of that length go one by
         * one from now on; -EIO or -EOPNOTSUPP: the device cannot (no checksum offload), so none
         * are coalesced any more. The rest of the batch goes one datagram per message; a
         * failure then is the datagrams' own. (A full buffer or an ICMP error changes nothing.) */
        const unsigned L = b->len[*done];
        if (r == -EMSGSIZE || r == -EINVAL) {
            if (L <= __atomic_load_n(&u->gso_seg_max, __ATOMIC_RELAXED))
                __atomic_store_n(&u->gso_seg_max, L - 1, __ATOMIC_RELAXED);
        } else {
            __atomic_store_n(&u->gso, 0, __ATOMIC_RELAXED);
        }
        unsigned rest = 0;
        r = send_all(u->fd, b->mm + *done, b->cnt - *done, &rest);
        *done += rest;
    }
    return r;
}

/* Sends what the batch holds; each owner's result counts its datagrams taken, or becomes the
 * error of the first one refused. */
static void tx_flush(srpc_udp_t *u, tx_batch_t *b, srpc_tx_msg_t *msgs)
{
    unsigned done = 0;
    int r;
#ifdef SRPC_FAULT_INJECTION
    if (u->tx_faults)
        r = send_faulty(u, b->mm, b->cnt, &done);
    else
#endif
    if (b->cnt > 1 && __atomic_load_n(&u->gso, __ATOMIC_RELAXED))
        r = send_coalesced(u, b, &done);
    else
        r = send_all(u->fd, b->mm, b->cnt, &done);
    for (unsigned i = 0; i < b->cnt; i++) {
        free(b->enc[i]);
        b->enc[i] = NULL;
        srpc_tx_msg_t *m = &msgs[b->owner[i]];
        if (i < done) {
            if (m->result >= 0)
                m->result++;
        } else if (m->result >= 0) {
            m->result = r < 0 ? r : -EIO;
        }
    }
    b->cnt = 0;
}

/* 0 when msg can be cut into datagrams (its segment count in *nseg, each segment's data bytes
 * in *seg), else -errno. */
static int tx_check(const srpc_tx_msg_t *m, uint32_t *nseg, uint32_t *seg)
{
    if (m->seg_size == 0 || m->seg_size > SRPC_MAX_SEG_DATA || m->npieces < 0 || m->npieces > SRPC_TX_MAX_PIECES ||
        (m->npieces && !m->pieces))
        return -EINVAL;
    uint64_t have = 0;
    for (int k = 0; k < m->npieces; k++)
        have += m->pieces[k].iov_len;
    if (have < m->len)
        return -EINVAL; /* pieces shorter than the message */
    *seg = srpc_seg_data_max(m->hdr.version, m->seg_size);
    if (m->hdr.version == SRPC_VERSION_5 && (m->auth.encrypt & SRPC_V5_FLAG_AEGIS)) /* its tag: 16 bytes longer */
        *seg = *seg > SRPC_V5_AEGIS_TAG_HEAD + 1 ? *seg - SRPC_V5_AEGIS_TAG_HEAD : 1;
    *nseg = srpc_seg_count(m->len, *seg);
    return *nseg > UINT16_MAX ? -EMSGSIZE : 0;
}

/* A message sent as it is (SRPC_TX_RAW): its one piece is the datagram. */
static void tx_raw(srpc_udp_t *u, tx_batch_t *b, srpc_tx_msg_t *msgs, unsigned i)
{
    srpc_tx_msg_t *m = &msgs[i];
    if (m->npieces != 1 || !m->pieces || m->pieces[0].iov_len != m->len || m->len > SRPC_HDR_LEN + SRPC_MAX_SEG_DATA) {
        m->result = -EINVAL;
        return;
    }
    m->result = 0;
    if (b->cnt == TX_BURST)
        tx_flush(u, b, msgs);
    const unsigned d = b->cnt;
    b->iov[d][0] = m->pieces[0];
    b->len[d] = m->len;
    b->enc[d] = NULL;
    b->mm[d].msg_hdr = (struct msghdr){.msg_name = (void *)m->dst, .msg_namelen = m->dst ? m->dstlen : 0,
                                      .msg_iov = b->iov[d], .msg_iovlen = 1};
    b->mm[d].msg_len = 0;
    b->owner[d] = i;
    b->cnt++;
}

int srpc_udp_send(srpc_udp_t *u, srpc_tx_msg_t *msgs, unsigned n)
{
    tx_batch_t b;
    b.cnt = 0;
    for (unsigned i = 0; i < n; i++) {
        srpc_tx_msg_t *m = &msgs[i];
        if (m->hdr.type == SRPC_TX_RAW) {
            tx_raw(u, &b, msgs, i);
            continue;
        }
        uint32_t nseg = 0, seg = 0;
        m->result = tx_check(m, &nseg, &seg);
        if (m->result < 0)
            continue;
        srpc_hdr_t h = m->hdr;
        h.nseg = (uint16_t)nseg;
        h.msg_len = m->len;
        const int v3 = h.version == SRPC_VERSION_3, v4 = h.version == SRPC_VERSION_4, v5 = h.version == SRPC_VERSION_5;
        if ((v4 || v5) && (!m->auth.secret || !m->auth.counter || srpc_auth_available() < 0 ||
                           (v5 && srpc_v5_available() < 0))) {
            m->result = -EINVAL; /* never sent unsigned */
            continue;
        }
        int piece = 0;      /* cursor into the pieces */
        size_t piece_off = 0;
        for (uint32_t seq = 0; seq < nseg && m->result >= 0; seq++) {
            if (b.cnt == TX_BURST)
                tx_flush(u, &b, msgs);
            const unsigned d = b.cnt;
            h.seq = (uint16_t)seq;
            srpc_hdr_encode(&h, b.hdr[d]);
            int k = 0;
            b.iov[d][k++] = (struct iovec){b.hdr[d], SRPC_HDR_LEN};
            const uint32_t dlen = srpc_seg_len(m->len, seg, seq);
            const uint32_t tail = v5 ? srpc_v5_tail_len(m->auth.encrypt) : srpc_tail_len(h.version);
            b.len[d] = SRPC_HDR_LEN + dlen + tail;
            b.enc[d] = NULL;
            /* Cannot run out of iovecs: a segment spans at most npieces <= SRPC_TX_MAX_PIECES. */
            for (uint32_t need = dlen; need > 0;) {
                size_t take = m->pieces[piece].iov_len - piece_off;
                if (take > need)
                    take = need;
                if (take)
                    b.iov[d][k++] = (struct iovec){(uint8_t *)m->pieces[piece].iov_base + piece_off, take};
                need -= (uint32_t)take;
                piece_off += take;
                if (piece_off == m->pieces[piece].iov_len) {
                    piece++;
                    piece_off = 0;
                }
            }
            if (v3) { /* the CRC-32C of the header and the segment's data, after the data */
                uint32_t crc = 0;
                for (int j = 0; j < k; j++)
                    crc = srpc_crc32c(crc, b.iov[d][j].iov_base, b.iov[d][j].iov_len);
                srpc_put_data_check(b.check[d], crc);
                b.iov[d][k++] = (struct iovec){b.check[d], SRPC_DATA_CHECK_LEN};
            } else if (v4) { /* the trailer: key, sender, counter, time and the tag over all before it */
                srpc_auth_sign_iov(m->auth.key_id, m->auth.secret, m->auth.sender, m->auth.counter, b.iov[d], k,
                                   b.check[d]);
                b.iov[d][k++] = (struct iovec){b.check[d], SRPC_AUTH_TRAILER_LEN};
            } else if (v5) { /* the session's trailer; an encrypting session's data as ciphertext */
                if ((m->auth.encrypt & SRPC_V5_FLAG_ENCRYPT) && dlen && !(b.enc[d] = malloc(dlen))) {
                    m->result = -ENOMEM;
                    break;
                }
                if (srpc_v5_seal_key(m->auth.secret, m->auth.sender, m->auth.encrypt,
                                     __atomic_add_fetch(m->auth.counter, 1, __ATOMIC_RELAXED), b.hdr[d], b.iov[d] + 1,
                                     k - 1, b.enc[d], b.check[d]) < 0) {
                    free(b.enc[d]); /* never sent unsealed */
                    b.enc[d] = NULL;
                    m->result = -EINVAL;
                    break;
                }
                if (b.enc[d]) {
                    b.iov[d][1] = (struct iovec){b.enc[d], dlen};
                    k = 2;
                }
                b.iov[d][k++] = (struct iovec){b.check[d], tail};
            }
            b.mm[d].msg_hdr = (struct msghdr){.msg_name = (void *)m->dst, .msg_namelen = m->dst ? m->dstlen : 0,
                                              .msg_iov = b.iov[d], .msg_iovlen = (size_t)k};
            b.mm[d].msg_len = 0;
            b.owner[d] = i;
            b.cnt++;
        }
    }
    if (b.cnt)
        tx_flush(u, &b, msgs);
    int whole = 0;
    for (unsigned i = 0; i < n; i++)
        whole += msgs[i].result >= 0;
    return whole;
}

int srpc_udp_send_msg(srpc_udp_t *u, const struct sockaddr *dst, socklen_t dstlen,
                      const srpc_hdr_t *tmpl, const struct iovec *pieces, int n,
                      uint32_t msg_len, uint32_t seg_size)
{
    srpc_tx_msg_t m = {.dst = dst, .dstlen = dstlen, .hdr = *tmpl, .pieces = pieces, .npieces = n,
                       .len = msg_len, .seg_size = seg_size};
    srpc_udp_send(u, &m, 1);
    return m.result;
}

/* ------------------------------------------------------------------ fault injection (testing builds) */

#ifdef SRPC_FAULT_INJECTION

/* Moves what came out of the RX injector into slots [0, max): header slot, data slot, source,
 * length and truncation, as recvmmsg would have left them. Returns the count. */
static unsigned rx_deliver(srpc_faults_t *f, srpc_rx_t *rx, unsigned max)
{
    unsigned out = 0;
    srpc_fault_dgram_t *d;
    while (out < max && (d = srpc_faults_pop(f)) != NULL) {
        uint32_t h = d->len < SRPC_HDR_LEN ? d->len : SRPC_HDR_LEN, dl = d->len - h;
        int trunc = (d->flags & MSG_TRUNC) != 0;
        if (dl > rx->data_cap) { /* cannot happen: it came from a slot of this size */
            dl = (uint32_t)rx->data_cap;
            trunc = 1;
        }
        memcpy(srpc_rx_hdr(rx, out), d->bytes, h);
        memcpy(srpc_rx_data(rx, out), d->bytes + h, dl);
        memset(&rx->src[out], 0, sizeof(rx->src[out]));
        memcpy(&rx->src[out], &d->addr, d->addrlen);
        rx->srclen[out] = d->addrlen;
        rx->len[out] = h + dl;
        rx->trunc[out] = (uint8_t)trunc;
        rx->dev[out] = 0;
        rx->gso[out] = 0;
        free(d);
        out++;
    }
    return out;
}

/* Pushes the n datagrams received into slots [0, n) through the RX injector. */
static void rx_push(srpc_faults_t *f, srpc_rx_t *rx, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        for (unsigned j = 0; j < srpc_rx_dgrams(rx, i); j++) { /* coalesced ones one by one */
            const srpc_rx_dg_t d = srpc_rx_dgram(rx, i, j);
            struct iovec iv[2] = {{(void *)d.hdr, d.len < SRPC_HDR_LEN ? d.len : SRPC_HDR_LEN},
                                  {(void *)d.data, d.len > SRPC_HDR_LEN ? d.len - SRPC_HDR_LEN : 0}};
            (void)srpc_faults_push(f, iv, 2, d.len, (const struct sockaddr *)&rx->src[i], rx->srclen[i],
                                   rx->trunc[i] ? MSG_TRUNC : 0); /* -ENOMEM: counted as discarded */
        }
}

/* srpc_udp_rx_burst through the RX injector: what it still has to give out goes first; else the
 * socket is read until something comes out (a few rounds at most, in case all were dropped),
 * and the datagram held back is let out once the socket has nothing more. */
static int rx_burst_faulty(srpc_udp_t *u, srpc_rx_t *rx, unsigned max)
{
    srpc_faults_t *f = u->rx_faults;
    int err = 0;
    for (int round = 0; round < 8 && srpc_faults_pending(f) == 0; round++) {
        int n = rx_recv(u, rx, max);
        if (n < 0) {
            if (n == -EAGAIN)
                srpc_faults_release(f);
            else
                err = n;
            break;
        }
        rx_push(f, rx, (unsigned)n);
    }
    unsigned out = rx_deliver(f, rx, max);
    return out ? (int)out : err ? err : -EAGAIN;
}

/* Sends what came out of the TX injector, up to TX_BURST datagrams per sendmmsg; what the
 * socket refuses is counted as discarded. Returns 0 or the last -errno. */
static int tx_drain(srpc_udp_t *u)
{
    srpc_faults_t *f = u->tx_faults;
    int rc = 0;
    for (;;) {
        srpc_fault_dgram_t *d[TX_BURST];
        struct iovec iov[TX_BURST];
        struct mmsghdr m[TX_BURST];
        unsigned k = 0;
        while (k < TX_BURST && (d[k] = srpc_faults_pop(f)) != NULL) {
            iov[k] = (struct iovec){d[k]->bytes, d[k]->len};
            m[k].msg_hdr = (struct msghdr){.msg_name = d[k]->addrlen ? &d[k]->addr : NULL,
                                           .msg_namelen = d[k]->addrlen, .msg_iov = &iov[k], .msg_iovlen = 1};
            m[k].msg_len = 0;
            k++;
        }
        if (k == 0)
            return rc;
        unsigned done;
        int r = send_all(u->fd, m, k, &done);
        if (r < 0) {
            srpc_faults_count_discarded(f, k - done);
            rc = r;
        }
        for (unsigned i = 0; i < k; i++)
            free(d[i]);
    }
}

/* The sending half of srpc_udp_send through the TX injector. The datagrams are copied in, so
 * whatever comes out (possibly another thread's) is sent from the injector's copies; every
 * datagram the injector takes counts as sent, dropped or not, as on a lossy wire. */
static int send_faulty(srpc_udp_t *u, struct mmsghdr *msgs, unsigned cnt, unsigned *done)
{
    unsigned take = 0;
    while (take < cnt && !srpc_faults_refuse(u->tx_faults)) /* a refusal ends the burst, as EAGAIN would */
        take++;
    for (unsigned i = 0; i < take; i++) {
        const struct msghdr *h = &msgs[i].msg_hdr;
        size_t len = 0;
        for (size_t k = 0; k < h->msg_iovlen; k++)
            len += h->msg_iov[k].iov_len;
        (void)srpc_faults_push(u->tx_faults, h->msg_iov, (int)h->msg_iovlen, (uint32_t)len, h->msg_name,
                               h->msg_namelen, 0); /* -ENOMEM: counted as discarded */
    }
    int r = tx_drain(u);
    *done = r < 0 ? 0 : take; /* what the socket refused fails the messages, as without faults */
    return r < 0 ? r : take < cnt ? -EAGAIN : 0;
}

/* Lets the TX datagram held back go out: called on every receive, so that a held reply or
 * request waits at most until the socket's owner looks for what came back. */
static void tx_release_held(srpc_udp_t *u)
{
    srpc_faults_release(u->tx_faults);
    (void)tx_drain(u); /* a refusal is counted as discarded */
}

int srpc_udp_set_faults(srpc_udp_t *u, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx, uint64_t seed)
{
    if (!u || (rx && srpc_faults_cfg_check(rx) != 0) || (tx && srpc_faults_cfg_check(tx) != 0))
        return -EINVAL;
    srpc_faults_t *nr = NULL, *nt = NULL;
    /* Two streams from one seed: distinct starting points of splitmix64. */
    if ((rx && srpc_faults_create(rx, seed, &nr) != 0) ||
        (tx && srpc_faults_create(tx, seed ^ 0x5bd1e9955bd1e995ull, &nt) != 0)) {
        srpc_faults_destroy(nr);
        return -ENOMEM;
    }
    srpc_faults_destroy(u->rx_faults);
    srpc_faults_destroy(u->tx_faults);
    u->rx_faults = nr;
    u->tx_faults = nt;
    return 0;
}

int srpc_udp_fault_counts(const srpc_udp_t *u, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx)
{
    if (!u)
        return -EINVAL;
    if (rx) {
        memset(rx, 0, sizeof(*rx));
        if (u->rx_faults)
            srpc_faults_counts(u->rx_faults, rx);
    }
    if (tx) {
        memset(tx, 0, sizeof(*tx));
        if (u->tx_faults)
            srpc_faults_counts(u->tx_faults, tx);
    }
    return 0;
}

#else /* no fault injection in this build: the hooks above are absent */

int srpc_udp_set_faults(srpc_udp_t *u, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx, uint64_t seed)
{
    (void)u, (void)rx, (void)tx, (void)seed;
    return -ENOTSUP;
}

int srpc_udp_fault_counts(const srpc_udp_t *u, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx)
{
    (void)u, (void)rx, (void)tx;
    return -ENOTSUP;
}

#endif

/* ------------------------------------------------------------------ the transport */

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
