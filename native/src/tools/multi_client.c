/* multi_client.c: a closed-loop client of the protocol spread over many UDP sockets (each a distinct client address to the server), one thread: how a server's cost grows with the clients it serves. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/clock.h"
#include "splitrpc_tools.h"
#include "tools/udp_socket.h"

#define MC_EVENTS 64                          /* readiness events per epoll_wait */
#define MC_RX_BYTES 65536                     /* one reply datagram */
#define MC_TIMEOUT_NS 1000000000ull           /* a call unanswered this long is an error */
#define MC_SLOT_BITS 16                       /* req_id: call number << 16 | slot */

typedef struct mc_slot {
    uint64_t req_id; /* 0: free */
    uint64_t t0;
    uint32_t rec;    /* index in lat_ns, or UINT32_MAX for a warm-up call */
} mc_slot_t;

typedef struct mc {
    int ep, *fd;
    uint32_t nsock, next_sock;
    uint64_t started, warmup, total; /* calls started (their req_id numbers), of warm-up, in all (call
                                        k < warmup is warm-up; call warmup + j is record j) */
    uint64_t t_first; /* when the first recorded call started */
    uint8_t *dg;     /* the request datagram: header rewritten per call */
    uint32_t dg_len;
    uint16_t func_id;
} mc_t;

static void mc_close(mc_t *m)
{
    for (uint32_t i = 0; m->fd && i < m->nsock; i++)
        if (m->fd[i] >= 0)
            close(m->fd[i]);
    if (m->ep >= 0)
        close(m->ep);
    free(m->fd);
    free(m->dg);
}

/* Sends the next call in slot s (on the next socket in turn). Returns 0 or -errno. */
static int start_call(mc_t *m, mc_slot_t *sl, uint32_t s, uint32_t rec)
{
    const uint64_t id = (m->started << MC_SLOT_BITS | s) & SRPC_REQ_ID_V2_MASK; /* started >= 1 here */
    const srpc_hdr_t h = {.type = SRPC_REQUEST, .version = SRPC_VERSION_2, .func_id = m->func_id, .req_id = id,
                          .seq = 0, .nseg = 1, .msg_len = m->dg_len - SRPC_HDR_LEN};
    int r = srpc_hdr_encode(&h, m->dg);
    if (r)
        return r;
    const int fd = m->fd[m->next_sock];
    m->next_sock = (m->next_sock + 1) % m->nsock;
    sl[s] = (mc_slot_t){.req_id = id, .t0 = srpc_now_ns(), .rec = rec};
    if (send(fd, m->dg, m->dg_len, MSG_DONTWAIT) < 0 && errno != EAGAIN && errno != ENOBUFS &&
        errno != ECONNREFUSED)
        return -errno;
    return 0; /* a full buffer (or an earlier ICMP error) loses the call: it times out, as on a network */
}

/* Starts the next call, if any is left, in slot s. Returns 0 or -errno. */
static int next_call(mc_t *m, mc_slot_t *sl, uint32_t s)
{
    if (m->started >= m->total)
        return 0;
    if (m->started == m->warmup)
        m->t_first = srpc_now_ns();
    const uint32_t rec = m->started < m->warmup ? UINT32_MAX : (uint32_t)(m->started - m->warmup);
    m->started++;
    return start_call(m, sl, s, rec);
}

int srpc_multi_closed_loop(const char *host, uint16_t port, uint32_t nsock, uint16_t func_id, const void *req,
                           uint32_t req_len, const void *expect, uint32_t expect_len, uint32_t concurrency,
                           uint32_t warmup, uint32_t n, uint64_t *lat_ns, uint64_t *elapsed_ns, uint64_t *errors)
{
    if (!host || nsock == 0 || (!req && req_len) || req_len > SRPC_MAX_SEG_DATA || concurrency == 0 ||
        concurrency > (1u << MC_SLOT_BITS) || n == 0 || !lat_ns || !errors)
        return -EINVAL;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < nsock + 64u) { /* one descriptor per socket */
        rl.rlim_cur = rl.rlim_max < nsock + 64u ? rl.rlim_max : nsock + 64u;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    mc_t m = {.ep = -1, .nsock = nsock, .func_id = func_id, .dg_len = SRPC_HDR_LEN + req_len};
    mc_slot_t *sl = calloc(concurrency, sizeof(*sl));
    uint8_t *rx = malloc(MC_RX_BYTES);
    m.fd = malloc(nsock * sizeof(int));
    for (uint32_t i = 0; m.fd && i < nsock; i++)
        m.fd[i] = -1;
    m.dg = malloc(m.dg_len);
    int rc = 0;
    if (!sl || !rx || !m.fd || !m.dg) {
        rc = -ENOMEM;
        goto out;
    }
    if (req_len)
        memcpy(m.dg + SRPC_HDR_LEN, req, req_len);
    if ((m.ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        rc = -errno;
        goto out;
    }
    for (uint32_t i = 0; i < nsock; i++) {
        if ((m.fd[i] = srpc_tool_udp_socket(host, port, 0)) < 0) {
            rc = m.fd[i];
            m.fd[i] = -1;
            goto out;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        if (epoll_ctl(m.ep, EPOLL_CTL_ADD, m.fd[i], &ev) < 0) {
            rc = -errno;
            goto out;
        }
    }
    *errors = 0;
    memset(lat_ns, 0, (size_t)n * sizeof(*lat_ns));
    m.warmup = warmup;
    m.total = (uint64_t)warmup + n;
    uint64_t finished = 0, last_sweep = srpc_now_ns();
    for (uint32_t s = 0; s < concurrency; s++)
        if ((rc = next_call(&m, sl, s)) != 0)
            goto out;
    struct epoll_event ev[MC_EVENTS];
    while (finished < m.total) {
        int ne = epoll_wait(m.ep, ev, MC_EVENTS, 0); /* busy: the lowest latency, as the other closed loops */
        if (ne < 0 && errno != EINTR) {
            rc = -errno;
            goto out;
        }
        for (int e = 0; e < ne; e++) {
            const int fd = m.fd[ev[e].data.u32];
            ssize_t len;
            while ((len = recv(fd, rx, MC_RX_BYTES, MSG_DONTWAIT)) >= 0) {
                const uint64_t now = srpc_now_ns();
                srpc_hdr_t h;
                if (srpc_hdr_decode(rx, (size_t)len, &h) != 0 || h.nseg != 1)
                    continue;
                const uint32_t s = (uint32_t)(h.req_id & ((1u << MC_SLOT_BITS) - 1));
                if (s >= concurrency || sl[s].req_id != h.req_id)
                    continue; /* a late reply to a call already counted lost */
                const int right = h.type == SRPC_RESPONSE &&
                                  (!expect || ((uint32_t)len - SRPC_HDR_LEN == expect_len &&
                                               memcmp(rx + SRPC_HDR_LEN, expect, expect_len) == 0));
                if (sl[s].rec != UINT32_MAX) {
                    if (right)
                        lat_ns[sl[s].rec] = now > sl[s].t0 ? now - sl[s].t0 : 1;
                    else
                        (*errors)++;
                }
                sl[s].req_id = 0;
                finished++;
                if ((rc = next_call(&m, sl, s)) != 0)
                    goto out;
            }
        }
        const uint64_t now = srpc_now_ns(); /* after every call started above */
        if (now - last_sweep > MC_TIMEOUT_NS / 10) { /* calls lost (a full buffer): errors, replaced */
            last_sweep = now;
            for (uint32_t s = 0; s < concurrency; s++) {
                if (!sl[s].req_id || now - sl[s].t0 < MC_TIMEOUT_NS)
                    continue;
                if (sl[s].rec != UINT32_MAX)
                    (*errors)++;
                sl[s].req_id = 0;
                finished++;
                if ((rc = next_call(&m, sl, s)) != 0)
                    goto out;
            }
        }
    }
    if (elapsed_ns)
        *elapsed_ns = srpc_now_ns() - m.t_first;
out:
    mc_close(&m);
    free(sl);
    free(rx);
    return rc;
}
