/* transport_udp.c: kernel UDP transport (see transport_udp.h). */
#include "transport_udp.h"
#include "faults.h"
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
    u->rx_faults = u->tx_faults = NULL; /* srpc_udp_set_faults, after opening */
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
    rx->dev = calloc(burst, sizeof(*rx->dev));
    if (!rx->hdr || !rx->data || !rx->msgs || !rx->iov || !rx->src || !rx->dev) {
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
    free(rx->dev);
    memset(rx, 0, sizeof(*rx));
}

/* Receives up to max datagrams into slots [0, max). Returns the count, or -EAGAIN / -errno. */
static int rx_recv(srpc_udp_t *u, srpc_rx_t *rx, unsigned max)
{
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

#ifdef SRPC_FAULT_INJECTION
static int rx_burst_faulty(srpc_udp_t *u, srpc_rx_t *rx, unsigned max);
static void tx_release_held(srpc_udp_t *u);
#endif

int srpc_rx_burst(srpc_udp_t *u, srpc_rx_t *rx, unsigned max)
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

#define TX_BURST 32
#define TX_MAX_IOV (2 + SRPC_MAX_TENSORS)

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
static int send_faulty(srpc_udp_t *u, struct mmsghdr *msgs, unsigned cnt);
#endif

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
        unsigned done;
        int r;
#ifdef SRPC_FAULT_INJECTION
        if (u->tx_faults)
            r = send_faulty(u, msgs, cnt);
        else
#endif
            r = send_all(u->fd, msgs, cnt, &done);
        if (r < 0)
            return r;
        sent += cnt;
    }
    return (int)nseg;
}

/* ------------------------------------------------------------------ fault injection (testing builds) */

#ifdef SRPC_FAULT_INJECTION

/* Moves what came out of the RX injector into slots [0, max): header slot, payload slot,
 * source, length and flags, as recvmmsg would have left them. Returns the count. */
static unsigned rx_deliver(srpc_faults_t *f, srpc_rx_t *rx, unsigned max)
{
    unsigned out = 0;
    srpc_fault_dgram_t *d;
    while (out < max && (d = srpc_faults_pop(f)) != NULL) {
        uint32_t h = d->len < SRPC_HDR_LEN ? d->len : SRPC_HDR_LEN, dl = d->len - h;
        int flags = d->flags;
        if (dl > rx->data_cap) { /* cannot happen: it came from a slot of this size */
            dl = (uint32_t)rx->data_cap;
            flags |= MSG_TRUNC;
        }
        memcpy(srpc_rx_hdr(rx, out), d->bytes, h);
        memcpy(srpc_rx_data(rx, out), d->bytes + h, dl);
        memset(&rx->src[out], 0, sizeof(rx->src[out]));
        memcpy(&rx->src[out], &d->addr, d->addrlen);
        struct msghdr *m = &rx->msgs[out].msg_hdr;
        m->msg_name = &rx->src[out];
        m->msg_namelen = d->addrlen;
        m->msg_iov = &rx->iov[2 * out];
        m->msg_iovlen = 2;
        m->msg_control = NULL;
        m->msg_controllen = 0;
        m->msg_flags = flags;
        rx->msgs[out].msg_len = h + dl;
        free(d);
        out++;
    }
    return out;
}

/* Pushes the n datagrams received into slots [0, n) through the RX injector. */
static void rx_push(srpc_faults_t *f, srpc_rx_t *rx, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        const struct mmsghdr *m = &rx->msgs[i];
        uint32_t len = m->msg_len;
        struct iovec iv[2] = {{srpc_rx_hdr(rx, i), len < SRPC_HDR_LEN ? len : SRPC_HDR_LEN},
                              {srpc_rx_data(rx, i), len > SRPC_HDR_LEN ? len - SRPC_HDR_LEN : 0}};
        (void)srpc_faults_push(f, iv, 2, len, (const struct sockaddr *)&rx->src[i], m->msg_hdr.msg_namelen,
                               m->msg_hdr.msg_flags); /* -ENOMEM: counted as discarded */
    }
}

/* srpc_rx_burst through the RX injector: what it still has to give out goes first; else the
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

/* The sending half of srpc_udp_send_msg through the TX injector. The datagrams are copied
 * in, so whatever comes out (possibly another thread's) is sent from the injector's copies. */
static int send_faulty(srpc_udp_t *u, struct mmsghdr *msgs, unsigned cnt)
{
    for (unsigned i = 0; i < cnt; i++) {
        const struct msghdr *h = &msgs[i].msg_hdr;
        size_t len = 0;
        for (size_t k = 0; k < h->msg_iovlen; k++)
            len += h->msg_iov[k].iov_len;
        (void)srpc_faults_push(u->tx_faults, h->msg_iov, (int)h->msg_iovlen, (uint32_t)len, h->msg_name,
                               h->msg_namelen, 0); /* -ENOMEM: counted as discarded */
    }
    return tx_drain(u);
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
