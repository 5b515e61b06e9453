/* proto_min.c: the minimal server of the protocol, a benchmark peer: one thread, one loop, recvmmsg and sendmmsg, each request answered alone (no batching, no queues, no reply cache), the built-in services computed in C. The bar that splitrpc's own overhead is measured against. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/tunables.h"
#include "splitrpc_tools.h"
#include "tools/builtin_c.h"
#include "tools/udp_socket.h"
#include "transport/transport.h"

#define MIN_BURST 32                 /* datagrams per recvmmsg */
#define MIN_RX_BYTES 65536           /* one receive buffer: any UDP datagram fits */
#define MIN_PARTIALS 32              /* multi-segment requests being put together at once */
#define MIN_TX_MAX 1024              /* datagrams per sendmmsg flush: a largest reply at 1450 B fits */
#define MIN_TX_BYTES (2u * SRPC_MIN_MAX_MSG + MIN_TX_MAX * (SRPC_HDR_LEN + SRPC_DATA_CHECK_LEN))
#define MIN_POLL_MS 10               /* block mode: longest sleep between two looks at *stop */

/* The built-in services (server/builtin.py) by function id, with the sizes they accept. */
#define FN_VECADD 1
#define FN_ECHO 3
#define FN_HEAD 4
#define VECADD_BYTES (256u * 4u)
#define HEAD_IN_BYTES (3u * 224u * 224u * 4u)
#define HEAD_OUT_BYTES 4000u

/* A request whose segments are still coming. */
typedef struct partial {
    int used;
    struct sockaddr_storage src;
    socklen_t srclen;
    srpc_hdr_t h;       /* seq 0's fields; seq itself unused */
    uint32_t seg;       /* S */
    uint32_t have;      /* segments received */
    uint64_t touched;   /* last segment's arrival (least recently touched is evicted first) */
    uint8_t *buf;       /* msg_len bytes (capacity cap) */
    uint32_t cap;
    uint8_t *seen;      /* one bit per segment (capacity seen_cap bytes) */
    uint32_t seen_cap;
} partial_t;

typedef struct min_srv {
    int fd;
    struct mmsghdr rx[MIN_BURST];
    struct iovec rx_iov[MIN_BURST];
    struct sockaddr_storage rx_src[MIN_BURST];
    uint8_t *rx_buf;                       /* MIN_BURST * MIN_RX_BYTES */
    struct mmsghdr tx[MIN_TX_MAX];
    struct iovec tx_iov[MIN_TX_MAX];
    struct sockaddr_storage tx_dst[MIN_TX_MAX];
    uint32_t tx_len[MIN_TX_MAX];
    uint32_t tx_n;                         /* datagrams waiting to be sent */
    size_t tx_off;                         /* bytes of tx_buf they take */
    uint8_t *tx_buf;                       /* MIN_TX_BYTES */
    uint8_t *out;                          /* one reply's bytes (SRPC_MIN_MAX_MSG) */
    partial_t part[MIN_PARTIALS];
} min_srv_t;

/* Sends what waits; a full socket buffer drops the rest, as the network would. */
static void flush(min_srv_t *s)
{
    uint32_t i = 0;
    while (i < s->tx_n) {
        int n = sendmmsg(s->fd, s->tx + i, s->tx_n - i, MSG_DONTWAIT);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            break;
        }
        i += (uint32_t)n;
    }
    s->tx_n = 0;
    s->tx_off = 0;
}

/* Queues the reply (a RESPONSE with code 0, else an ERROR with that code) of len bytes at data
 * to dst, cut at the segment size splitrpc's server uses for that destination. */
static void reply(min_srv_t *s, const srpc_hdr_t *req, int code, const void *data, uint32_t len,
                  const struct sockaddr *dst, socklen_t dstlen)
{
    const srpc_hdr_t t = {.type = code ? SRPC_ERROR : SRPC_RESPONSE, .version = req->version,
                          .func_id = req->func_id, .req_id = req->req_id, .aux = (uint16_t)code};
    const uint32_t seg = srpc_sockaddr_is_loopback(dst) ? SRPC_DEF_SEG_SIZE_LOOPBACK : SRPC_DEF_SEG_SIZE;
    for (int attempt = 0; attempt < 2; attempt++) {
        int n = srpc_msg_segment(&t, data, len, seg, s->tx_buf + s->tx_off, MIN_TX_BYTES - s->tx_off,
                                 s->tx_len + s->tx_n, MIN_TX_MAX - s->tx_n);
        if (n == -ENOBUFS && s->tx_n > 0) { /* no room behind the replies waiting: send them first */
            flush(s);
            continue;
        }
        if (n <= 0)
            return; /* cannot be cut (never for the sizes this server makes) */
        for (int k = 0; k < n; k++) {
            const uint32_t i = s->tx_n++;
            memcpy(&s->tx_dst[i], dst, dstlen);
            s->tx_iov[i] = (struct iovec){.iov_base = s->tx_buf + s->tx_off, .iov_len = s->tx_len[i]};
            s->tx[i].msg_hdr = (struct msghdr){.msg_name = &s->tx_dst[i], .msg_namelen = dstlen,
                                               .msg_iov = &s->tx_iov[i], .msg_iovlen = 1};
            s->tx_off += s->tx_len[i];
        }
        return;
    }
}

static void fail(min_srv_t *s, const srpc_hdr_t *h, int code, const char *why, const struct sockaddr *dst,
                 socklen_t dstlen)
{
    reply(s, h, code, why, (uint32_t)strlen(why), dst, dstlen);
}

/* One whole request: its function's answer, or the error the splitrpc server would give. */
static void serve_call(min_srv_t *s, const srpc_hdr_t *h, const uint8_t *msg, const struct sockaddr *src,
                       socklen_t srclen)
{
    switch (h->func_id) {
    case FN_VECADD:
        if (h->msg_len != VECADD_BYTES) {
            fail(s, h, SRPC_E_BAD_REQUEST, "vecadd takes 1024 bytes", src, srclen);
        } else {
            srpc_tool_vecadd(msg, s->out, VECADD_BYTES / 4);
            reply(s, h, 0, s->out, VECADD_BYTES, src, srclen);
        }
        break;
    case FN_ECHO:
        reply(s, h, 0, msg, h->msg_len, src, srclen);
        break;
    case FN_HEAD:
        if (h->msg_len != HEAD_IN_BYTES)
            fail(s, h, SRPC_E_BAD_REQUEST, "head takes 602112 bytes", src, srclen);
        else
            reply(s, h, 0, msg, HEAD_OUT_BYTES, src, srclen);
        break;
    default:
        fail(s, h, SRPC_E_UNKNOWN_FUNCTION, "unknown function", src, srclen);
    }
}

static int same_call(const partial_t *p, const srpc_hdr_t *h, const struct sockaddr *src, socklen_t srclen)
{
    return p->used && p->h.req_id == h->req_id && p->h.func_id == h->func_id && p->h.version == h->version &&
           p->srclen == srclen && memcmp(&p->src, src, srclen) == 0;
}

/* The slot of this segment's request: its own, else a free one, else the least recently touched
 * (whose request is dropped: its client retransmits). */
static partial_t *slot_for(min_srv_t *s, const srpc_hdr_t *h, const struct sockaddr *src, socklen_t srclen,
                           int *fresh)
{
    partial_t *victim = NULL;
    for (int i = 0; i < MIN_PARTIALS; i++) {
        partial_t *p = &s->part[i];
        if (same_call(p, h, src, srclen)) {
            *fresh = 0;
            return p;
        }
        if (!victim || (victim->used && (!p->used || p->touched < victim->touched)))
            victim = p;
    }
    *fresh = 1;
    return victim;
}

/* A segment of a request of several: kept until all have come, then served. */
static void add_segment(min_srv_t *s, const srpc_hdr_t *h, uint32_t seg, const uint8_t *data, uint32_t dlen,
                        const struct sockaddr *src, socklen_t srclen)
{
    const uint64_t off = (uint64_t)h->seq * seg;
    if (off + dlen > h->msg_len) /* srpc_seg_check rules it out; checked again before the copy */
        return;
    int fresh;
    partial_t *p = slot_for(s, h, src, srclen, &fresh);
    if (fresh) {
        const uint32_t seen_bytes = (h->nseg + 7u) / 8u;
        if (p->cap < h->msg_len) {
            uint8_t *b = realloc(p->buf, h->msg_len);
            if (!b)
                return;
            p->buf = b, p->cap = h->msg_len;
        }
        if (p->seen_cap < seen_bytes) {
            uint8_t *b = realloc(p->seen, seen_bytes);
            if (!b)
                return;
            p->seen = b, p->seen_cap = seen_bytes;
        }
        memset(p->seen, 0, seen_bytes);
        p->used = 1, p->h = *h, p->seg = seg, p->have = 0;
        memcpy(&p->src, src, srclen);
        p->srclen = srclen;
    } else if (p->h.msg_len != h->msg_len || p->h.nseg != h->nseg || p->seg != seg) {
        return; /* disagrees with the segments before it: dropped */
    }
    p->touched = srpc_now_ns();
    const uint8_t bit = (uint8_t)(1u << (h->seq & 7));
    if (p->seen[h->seq / 8] & bit)
        return; /* a duplicate */
    p->seen[h->seq / 8] |= bit;
    memcpy(p->buf + off, data, dlen);
    if (++p->have == h->nseg) {
        p->used = 0;
        serve_call(s, &p->h, p->buf, src, srclen);
    }
}

/* One received datagram, hostile until checked: a bad one is dropped alone. */
static void on_datagram(min_srv_t *s, uint8_t *dg, uint32_t len, const struct sockaddr *src, socklen_t srclen)
{
    srpc_hdr_t h;
    if (srpc_hdr_decode(dg, len, &h) != 0 || h.type != SRPC_REQUEST)
        return;
    uint32_t dlen = len - SRPC_HDR_LEN, seg;
    const uint8_t *data = dg + SRPC_HDR_LEN;
    if (srpc_data_check(&h, dg, data, &dlen) != 0 || srpc_seg_check(&h, dlen, &seg) != 0)
        return;
    if (h.msg_len > SRPC_MIN_MAX_MSG) {
        if (h.seq == 0)
            fail(s, &h, SRPC_E_TOO_LARGE, "larger than this server takes", src, srclen);
        return;
    }
    if (h.nseg == 1)
        serve_call(s, &h, data, src, srclen);
    else
        add_segment(s, &h, seg, data, dlen, src, srclen);
}

static void min_free(min_srv_t *s)
{
    if (s->fd >= 0)
        close(s->fd);
    for (int i = 0; i < MIN_PARTIALS; i++) {
        free(s->part[i].buf);
        free(s->part[i].seen);
    }
    free(s->rx_buf);
    free(s->tx_buf);
    free(s->out);
    free(s);
}

int srpc_min_serve(const char *host, uint16_t port, int busy, volatile int *stop)
{
    if (!stop)
        return -EINVAL;
    min_srv_t *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->fd = -1;
    s->rx_buf = malloc((size_t)MIN_BURST * MIN_RX_BYTES);
    s->tx_buf = malloc(MIN_TX_BYTES);
    s->out = malloc(SRPC_MIN_MAX_MSG);
    if (!s->rx_buf || !s->tx_buf || !s->out) {
        min_free(s);
        return -ENOMEM;
    }
    s->fd = srpc_tool_udp_socket(host, port, 1);
    if (s->fd < 0) {
        int rc = s->fd;
        s->fd = -1;
        min_free(s);
        return rc;
    }
    for (int i = 0; i < MIN_BURST; i++)
        s->rx_iov[i] = (struct iovec){.iov_base = s->rx_buf + (size_t)i * MIN_RX_BYTES, .iov_len = MIN_RX_BYTES};
    int rc = 0;
    while (!__atomic_load_n(stop, __ATOMIC_RELAXED)) {
        for (int i = 0; i < MIN_BURST; i++)
            s->rx[i].msg_hdr = (struct msghdr){.msg_name = &s->rx_src[i], .msg_namelen = sizeof(s->rx_src[i]),
                                               .msg_iov = &s->rx_iov[i], .msg_iovlen = 1};
        int n = recvmmsg(s->fd, s->rx, MIN_BURST, MSG_DONTWAIT, NULL);
        if (n <= 0) {
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNREFUSED) {
                rc = -errno;
                break;
            }
            if (!busy) {
                struct pollfd p = {.fd = s->fd, .events = POLLIN};
                poll(&p, 1, MIN_POLL_MS);
            }
            continue;
        }
        for (int i = 0; i < n; i++) {
            if (s->rx[i].msg_hdr.msg_flags & MSG_TRUNC)
                continue; /* longer than any UDP datagram: cannot be ours */
            on_datagram(s, s->rx_iov[i].iov_base, s->rx[i].msg_len, (const struct sockaddr *)&s->rx_src[i],
                        s->rx[i].msg_hdr.msg_namelen);
        }
        flush(s);
    }
    min_free(s);
    return rc;
}
