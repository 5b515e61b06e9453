/* raw_udp.c: the raw kernel-UDP baseline, a plain echo server and a ping-pong client. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* SO_RCVBUFFORCE, SO_SNDBUFFORCE */
#endif
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "splitrpc_tools.h"
#include "tools/udp_socket.h"

#define RAW_MAX_SIZE 65507          /* largest UDP/IPv4 payload */
#define RAW_BUF_BYTES 65536         /* receive buffer: any datagram fits */
#define RAW_SOCK_BUF (32 << 20)     /* SO_RCVBUF / SO_SNDBUF wanted: as much as splitrpc asks for */
#define RAW_POLL_MS 10              /* server: longest time between two looks at *stop */
#define RAW_SPINS_PER_CHECK 1024    /* busy loops read the clock this often */
#define RAW_REPLY_TIMEOUT_NS 1000000000ull /* client: an echo must come back within 1 s */

static int stopped(volatile int *stop)
{
    return __atomic_load_n(stop, __ATOMIC_RELAXED) != 0;
}

static void set_bufs(int fd)
{
    int v = RAW_SOCK_BUF;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)) < 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v)) < 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
}

int srpc_tool_udp_socket(const char *host, uint16_t port, int server)
{
    if (!host && !server) /* a server may bind the wildcard address */
        return -EINVAL;
    char service[8];
    snprintf(service, sizeof(service), "%u", (unsigned)port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    hints.ai_flags = AI_NUMERICSERV | (server ? AI_PASSIVE : 0);
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        if (rc == EAI_SYSTEM)
            return errno ? -errno : -EIO;
        if (rc == EAI_MEMORY)
            return -ENOMEM;
        if (rc == EAI_AGAIN)
            return -EAGAIN;
        return -EADDRNOTAVAIL; /* unknown name or unusable address */
    }

    int err = -EADDRNOTAVAIL;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            err = -errno;
            continue;
        }
        set_bufs(fd);
        if ((server ? bind(fd, ai->ai_addr, ai->ai_addrlen)
                    : connect(fd, ai->ai_addr, ai->ai_addrlen)) == 0) {
            freeaddrinfo(res);
            return fd;
        }
        err = -errno;
        close(fd);
    }
    freeaddrinfo(res);
    return err;
}

/* Sends len bytes to dst (NULL: the connected peer) cut into SRPC_RAW_SEG-byte datagrams.
 * Returns 0 or -errno; a full socket buffer drops, as the network would. */
static int send_cut(int fd, const uint8_t *buf, uint32_t len, const struct sockaddr *dst, socklen_t dl)
{
    uint32_t off = 0;
    do {
        uint32_t n = len - off < SRPC_RAW_SEG ? len - off : SRPC_RAW_SEG;
        if (len <= RAW_MAX_SIZE)
            n = len; /* one datagram whenever it fits */
        if (sendto(fd, buf + off, n, MSG_DONTWAIT, dst, dst ? dl : 0) < 0 && errno != EAGAIN &&
            errno != ENOBUFS && errno != ECONNREFUSED)
            return -errno;
        off += n;
    } while (off < len);
    return 0;
}

/* Receives one datagram (if any). Echo mode sends it back; message mode counts bytes and
 * answers every req_size bytes with resp_size bytes. Returns 1 when one was handled, 0 when
 * none was waiting, -errno on a socket error. */
static int serve_one(int fd, uint8_t *buf, uint32_t req_size, uint32_t resp_size, uint64_t *have)
{
    struct sockaddr_storage src;
    socklen_t srclen = sizeof(src);
    ssize_t n = recvfrom(fd, buf, RAW_BUF_BYTES, MSG_DONTWAIT | MSG_TRUNC,
                         (struct sockaddr *)&src, &srclen);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return 0;
        if (errno == ECONNREFUSED) /* ICMP from an earlier reply to a closed port */
            return 1;
        return -errno;
    }
    if (n > RAW_BUF_BYTES) /* truncated: drop it */
        return 1;
    if (resp_size == 0) {
        (void)sendto(fd, buf, (size_t)n, MSG_DONTWAIT, (struct sockaddr *)&src, srclen);
        return 1;
    }
    *have += (uint64_t)n;
    if (*have >= req_size) {
        *have = 0;
        int r = send_cut(fd, buf, resp_size, (struct sockaddr *)&src, srclen);
        if (r < 0)
            return r;
    }
    return 1;
}

int srpc_raw_echo_serve(const char *host, uint16_t port, int busy, uint32_t req_size,
                        uint32_t resp_size, volatile int *stop)
{
    if (!stop || resp_size > RAW_BUF_BYTES * 64u)
        return -EINVAL;
    size_t bufsz = resp_size > RAW_BUF_BYTES ? resp_size : RAW_BUF_BYTES;
    uint8_t *buf = calloc(1, bufsz);
    if (!buf)
        return -ENOMEM;
    int fd = srpc_tool_udp_socket(host, port, 1);
    if (fd < 0) {
        free(buf);
        return fd;
    }
    int rc = 0;
    uint64_t have = 0;
    /* busy: one relaxed load of *stop per loop costs nothing next to the recvfrom syscall. */
    while (!stopped(stop)) {
        if (!busy) {
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            int pr = poll(&pfd, 1, RAW_POLL_MS);
            if (pr < 0 && errno != EINTR) {
                rc = -errno;
                break;
            }
            if (pr <= 0)
                continue;
        }
        int n = serve_one(fd, buf, req_size, resp_size, &have);
        if (n < 0) {
            rc = n;
            break;
        }
    }
    close(fd);
    free(buf);
    return rc;
}

/* Waits for one datagram on the connected socket fd. Returns its length or -errno. */
static ssize_t wait_datagram(int fd, uint8_t *buf, int busy, uint64_t deadline)
{
    for (uint32_t spins = 0;; spins++) {
        if (!busy) {
            int64_t left_ms = ((int64_t)(deadline - srpc_now_ns()) + 999999) / 1000000;
            if (left_ms <= 0)
                return -ETIMEDOUT;
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            int pr = poll(&pfd, 1, (int)left_ms);
            if (pr < 0 && errno != EINTR)
                return -errno;
            if (pr <= 0)
                continue;
        }
        ssize_t n = recv(fd, buf, RAW_BUF_BYTES, MSG_DONTWAIT | MSG_TRUNC);
        if (n >= 0)
            return n;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -errno;
        if (busy && spins % RAW_SPINS_PER_CHECK == 0 && srpc_now_ns() > deadline)
            return -ETIMEDOUT;
    }
}

int srpc_raw_closed_loop(const char *host, uint16_t port, uint32_t req_size, uint32_t resp_size, int busy,
                         uint32_t concurrency, uint32_t warmup, uint32_t n, uint64_t *lat_ns,
                         uint64_t *elapsed_ns)
{
    int echo = resp_size == 0;
    if ((echo && req_size > RAW_MAX_SIZE) || req_size > (1u << 30))
        return -EMSGSIZE;
    if ((n > 0 && !lat_ns) || concurrency == 0 || warmup > UINT32_MAX - n)
        return -EINVAL;
    uint8_t *tx = malloc(req_size ? req_size : 1);
    uint8_t *rx = malloc(RAW_BUF_BYTES);
    uint64_t *t0 = malloc(concurrency * sizeof(*t0)); /* send times, a FIFO: replies come in order */
    if (!tx || !rx || !t0) {
        free(tx);
        free(rx);
        free(t0);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < req_size; i++)
        tx[i] = (uint8_t)(i * 131u + 7u);

    int fd = srpc_tool_udp_socket(host, port, 0);
    int rc = fd < 0 ? fd : 0;
    const uint64_t total = (uint64_t)warmup + n;
    const uint32_t reply = echo ? req_size : resp_size;
    uint64_t sent = 0, done = 0, got = 0, start = srpc_now_ns();
    while (rc == 0 && done < total) {
        while (rc == 0 && sent < total && sent - done < concurrency) {
            t0[sent % concurrency] = srpc_now_ns();
            if (echo) {
                ssize_t k = send(fd, tx, req_size, 0);
                rc = k == (ssize_t)req_size ? 0 : k < 0 ? -errno : -EIO;
            } else {
                rc = send_cut(fd, tx, req_size, NULL, 0);
            }
            sent++;
        }
        if (rc)
            break;
        ssize_t k = wait_datagram(fd, rx, busy, srpc_now_ns() + RAW_REPLY_TIMEOUT_NS);
        if (k < 0) {
            rc = (int)k;
            break;
        }
        if (echo && (size_t)k != reply) {
            rc = -EBADMSG;
            break;
        }
        uint64_t replies = 1; /* echo: one datagram is one reply (a 0-byte echo too) */
        if (!echo) {
            got += (uint64_t)k;
            replies = got / reply;
            got %= reply;
        }
        for (uint64_t j = 0; j < replies && done < sent; j++, done++) {
            uint64_t t1 = srpc_now_ns();
            if (done == warmup)
                start = t1;
            if (done >= warmup)
                lat_ns[done - warmup] = t1 - t0[done % concurrency];
        }
    }
    if (elapsed_ns)
        *elapsed_ns = rc == 0 ? srpc_now_ns() - start : 0;
    if (fd >= 0)
        close(fd);
    free(tx);
    free(rx);
    free(t0);
    return rc;
}

int srpc_raw_pingpong(const char *host, uint16_t port, uint32_t req_size, uint32_t resp_size,
                      int busy, uint32_t warmup, uint32_t n, uint64_t *lat_ns)
{
    return srpc_raw_closed_loop(host, port, req_size, resp_size, busy, 1, warmup, n, lat_ns, NULL);
}
