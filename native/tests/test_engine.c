/* test_engine.c: end-to-end tests of the server engine, worker hand-off and client over real loopback UDP sockets. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "splitrpc.h"
#include "core/session.h" /* SRPC_V5_TAIL_MAX */
#include "server/calltab.h"

#include "check.h"

/* ------------------------------------------------------------------ helpers */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double ms_since(uint64_t t0) { return (double)(now_ns() - t0) / 1e6; }

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

#define ECHO_MAX (1u << 20)
#define TMO_US 3000000 /* per call: generous, sanitizers on two cores */

enum {
    F_VECADD = 1,   /* float32[256] + 1 */
    F_SUM = 2,      /* float32[1024] + float32[1024] */
    F_ECHO = 3,     /* raw echo up to 1 MiB */
    F_BOOM = 4,     /* always INTERNAL "boom" */
    F_WRAP4K = 5,   /* float32[1024] + 1, capacity 5: the ring is exactly 5 pages */
    F_WRAP1K = 6,   /* float32[256] + 1, capacity 5: the ring is 2 pages = 8 elements */
    F_DEADLINE = 7, /* always DEADLINE, no text */
    F_BADSTATUS = 8, /* completes with status 42 (out of range), text "x" */
    F_SMALL = 10,   /* float32[256] + 1, capacity 2 (BUSY) */
    F_SLOW = 11,    /* float32[256] + 1, max_batch 4, max_delay 600 ms */
    F_PLACE = 12,   /* float32[256] + 1, capacity 6: at most 3 requests reassembled in place */
    NF = 16
};

typedef struct fdef {
    uint16_t id;
    int raw;
    uint32_t n_in, in_size, out_size, cap, max_batch, delay_us;
} fdef_t;

static const fdef_t D_VECADD = {F_VECADD, 0, 1, 1024, 1024, 256, 8, 0};
static const fdef_t D_SUM = {F_SUM, 0, 2, 4096, 4096, 64, 8, 0};
static const fdef_t D_ECHO = {F_ECHO, 1, 1, ECHO_MAX, ECHO_MAX, 8, 4, 0};
static const fdef_t D_BOOM = {F_BOOM, 0, 1, 1024, 1024, 64, 8, 0};
static const fdef_t D_WRAP4K = {F_WRAP4K, 0, 1, 4096, 4096, 5, 4, 10000};
static const fdef_t D_WRAP1K = {F_WRAP1K, 0, 1, 1024, 1024, 5, 4, 10000};
static const fdef_t D_DEADLINE = {F_DEADLINE, 0, 1, 1024, 1024, 16, 8, 0};
static const fdef_t D_BADSTATUS = {F_BADSTATUS, 0, 1, 1024, 1024, 16, 8, 0};
static const fdef_t D_SMALL = {F_SMALL, 0, 1, 1024, 1024, 2, 2, 0};
static const fdef_t D_SLOW = {F_SLOW, 0, 1, 1024, 1024, 16, 4, 600000};
static const fdef_t D_PLACE = {F_PLACE, 0, 1, 1024, 1024, 6, 8, 0};

/* A server with its one worker thread. */
typedef struct sctx {
    srpc_server_t *srv;
    int port;
    pthread_t th;
    int64_t worker_tmo_us;
    atomic_int paused, sleep_us, waiting, finished, exit_rc;
    atomic_uint_fast64_t ran[NF], completed[NF], batches[NF];
    atomic_int bad, complete_fail;
    atomic_int wrap_idx[NF], wrap_mem[NF];
    uint32_t cap[NF], esz[NF];
    uint8_t seen[NF][1024]; /* wrap functions: how often each request value was seen */
} sctx_t;

static size_t page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static void bad(sctx_t *s, const char *what, unsigned f, uint64_t seq)
{
    if (atomic_fetch_add(&s->bad, 1) < 10)
        fprintf(stderr, "worker: %s (func %u seq %llu)\n", what, f, (unsigned long long)seq);
}

/* Checks that the `count` elements of a wrap-test batch are readable contiguously from in[0]
 * and each holds its own request's index value, and counts ring wraps. */
static void check_wrap(sctx_t *s, const srpc_batch_t *b)
{
    unsigned f = b->func_id;
    uint32_t cap = s->cap[f], E = s->esz[f], nf = E / 4;
    if ((b->first_seq % cap) + b->count > cap)
        atomic_fetch_add(&s->wrap_idx[f], 1);
    size_t ps = page_size();
    uint64_t ring = ((uint64_t)cap * E + ps - 1) / ps * ps;
    if ((b->first_seq * E) % ring + (uint64_t)b->count * E > ring)
        atomic_fetch_add(&s->wrap_mem[f], 1);
    const float *in = (const float *)b->in[0];
    float prev = -1;
    for (uint32_t i = 0; i < b->count; i++) {
        float v = in[(size_t)i * nf];
        for (uint32_t j = 1; j < nf; j++)
            if (in[(size_t)i * nf + j] != v) {
                bad(s, "element not uniform", f, b->first_seq + i);
                break;
            }
        if (!(v >= 0 && v < 1024) || v != (float)(int)v) {
            bad(s, "element value out of range", f, b->first_seq + i);
            continue;
        }
        if (i > 0 && v != prev + 1)
            bad(s, "elements of a batch not consecutive requests", f, b->first_seq + i);
        if (++s->seen[f][(int)v] != 1)
            bad(s, "request value seen twice", f, b->first_seq + i);
        prev = v;
    }
}

static void run_batch(sctx_t *s, srpc_batch_t *b)
{
    unsigned f = b->func_id;
    uint32_t n = b->count;
    int status = 0;
    const char *msg = NULL;
    if (f >= NF || n == 0 || !b->in[0] || !b->out[0]) {
        bad(s, "bad batch", f, b->first_seq);
        srpc_server_complete(s->srv, b, SRPC_E_INTERNAL, "bad batch");
        return;
    }
    atomic_fetch_add(&s->batches[f], 1);
    atomic_fetch_add(&s->ran[f], n);
    switch (f) {
    case F_SUM: {
        const float *x = (const float *)b->in[0], *y = (const float *)b->in[1];
        float *o = (float *)b->out[0];
        if (!y)
            bad(s, "second input missing", f, b->first_seq);
        else
            for (size_t i = 0; i < (size_t)n * 1024; i++)
                o[i] = x[i] + y[i];
        break;
    }
    case F_ECHO:
        if (!b->in_len || !b->out_len) {
            bad(s, "raw lengths missing", f, b->first_seq);
            status = SRPC_E_INTERNAL;
            break;
        }
        for (uint32_t i = 0; i < n; i++) {
            const uint8_t *src = b->in[0] + (size_t)i * ECHO_MAX;
            if (b->in_len[i] > ECHO_MAX)
                bad(s, "raw in_len over the limit", f, b->first_seq + i);
            memcpy(b->out[0] + (size_t)i * ECHO_MAX, src, b->in_len[i]);
            b->out_len[i] = b->in_len[i];
            if (b->in_len[i] == 7 && memcmp(src, "OVERRUN", 7) == 0)
                b->out_len[i] = ECHO_MAX + 1; /* a reply over the registered size */
        }
        break;
    case F_BOOM:
        status = SRPC_E_INTERNAL;
        msg = "boom";
        break;
    case F_DEADLINE:
        status = SRPC_E_DEADLINE;
        break;
    case F_BADSTATUS:
        status = 42;
        msg = "x";
        break;
    default: { /* add one */
        if (f == F_WRAP4K || f == F_WRAP1K)
            check_wrap(s, b);
        size_t nf = s->esz[f] / 4;
        const float *x = (const float *)b->in[0];
        float *o = (float *)b->out[0];
        for (size_t i = 0; i < (size_t)n * nf; i++)
            o[i] = x[i] + 1.0f;
        break;
    }
    }
    if (srpc_server_complete(s->srv, b, status, msg) != 0)
        atomic_fetch_add(&s->complete_fail, 1);
    if (srpc_server_complete(s->srv, b, 0, NULL) != -EINVAL) /* a batch completes once */
        atomic_fetch_add(&s->complete_fail, 1);
    atomic_fetch_add(&s->completed[f], n);
}

static void *worker_main(void *p)
{
    sctx_t *s = p;
    for (;;) {
        if (atomic_load(&s->paused)) {
            sleep_us(300);
            continue;
        }
        srpc_batch_t b;
        atomic_store(&s->waiting, 1);
        int r = srpc_server_next_batch(s->srv, &b, s->worker_tmo_us);
        atomic_store(&s->waiting, 0);
        if (r == -ETIMEDOUT)
            continue;
        if (r != 0) {
            atomic_store(&s->exit_rc, r);
            break;
        }
        int sl = atomic_load(&s->sleep_us);
        if (sl)
            sleep_us(sl);
        run_batch(s, &b);
    }
    atomic_store(&s->finished, 1);
    return NULL;
}

typedef struct sopts {
    int wait_mode;
    uint32_t reasm_timeout_us; /* 0: default */
    int64_t worker_tmo_us;     /* 0: 100000 */
    int paused;
    int deferred; /* 1: created, not started (datagrams sent now queue up): server_go starts it */
} sopts_t;

static void server_go(sctx_t *s);

static sctx_t *server_up(const sopts_t *o, const fdef_t *const *defs, int n)
{
    sctx_t *s = calloc(1, sizeof(*s));
    if (!s) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    srpc_server_config_t cfg;
    srpc_server_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.wait_mode = o->wait_mode;
    if (o->reasm_timeout_us)
        cfg.reasm_timeout_us = o->reasm_timeout_us;
    int r = srpc_server_create(&cfg, &s->srv);
    CHECK(r == 0, "srpc_server_create: %d", r);
    if (r) {
        fprintf(stderr, "cannot create a server, giving up\n");
        exit(2);
    }
    s->port = srpc_server_port(s->srv);
    CHECK(s->port > 0 && s->port < 65536, "port %d", s->port);
    for (int i = 0; i < n; i++) {
        const fdef_t *d = defs[i];
        uint32_t ins[2] = {d->in_size, d->in_size}, outs[1] = {d->out_size};
        srpc_func_config_t fc = {.func_id = d->id, .raw = d->raw, .n_in = d->n_in, .n_out = 1,
                                 .in_sizes = ins, .out_sizes = outs, .capacity = d->cap,
                                 .max_batch = d->max_batch, .max_delay_us = d->delay_us};
        r = srpc_server_add_function(s->srv, &fc);
        CHECK(r == 0, "add function %u: %d", d->id, r);
        s->cap[d->id] = d->cap;
        s->esz[d->id] = d->in_size;
    }
    s->worker_tmo_us = o->worker_tmo_us ? o->worker_tmo_us : 100000;
    atomic_store(&s->paused, o->paused);
    if (!o->deferred)
        server_go(s);
    return s;
}

static void server_go(sctx_t *s)
{
    int r = srpc_server_start(s->srv);
    CHECK(r == 0, "srpc_server_start: %d", r);
    if (pthread_create(&s->th, NULL, worker_main, s) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        exit(2);
    }
}

/* Waits up to ms for a worker to finish; the caller gives up on the run when it does not. */
static int wait_finished(sctx_t *s, int ms)
{
    for (int i = 0; i < ms && !atomic_load(&s->finished); i++)
        sleep_us(1000);
    return atomic_load(&s->finished);
}

static void server_down(sctx_t *s)
{
    atomic_store(&s->paused, 0);
    CHECK(srpc_server_stop(s->srv) == 0, "stop");
    int fin = wait_finished(s, 3000);
    CHECK(fin, "worker did not leave next_batch after srpc_server_stop");
    if (!fin) {
        printf("%d passed, %d failed\n", passed, failed);
        exit(1); /* a stuck worker would touch a freed server */
    }
    pthread_join(s->th, NULL);
    CHECK(atomic_load(&s->exit_rc) == -ESHUTDOWN, "worker exit %d", atomic_load(&s->exit_rc));
    CHECK(atomic_load(&s->bad) == 0, "%d worker content errors", atomic_load(&s->bad));
    CHECK(atomic_load(&s->complete_fail) == 0, "%d srpc_server_complete failures",
          atomic_load(&s->complete_fail));
    srpc_server_destroy(s->srv);
    free(s);
}

static srpc_server_stats_t stats(sctx_t *s)
{
    srpc_server_stats_t st;
    memset(&st, 0, sizeof(st));
    CHECK(srpc_server_stats(s->srv, &st) == 0, "stats");
    return st;
}

/* Waits until the server has received `n` datagrams in all (so it has processed the ones
 * before them as well: one engine thread handles them in order). */
static int wait_rx(sctx_t *s, uint64_t n, int ms)
{
    srpc_server_stats_t st;
    for (int i = 0; i <= ms; i++) {
        srpc_server_stats(s->srv, &st);
        if (st.rx_datagrams >= n)
            return 1;
        sleep_us(1000);
    }
    return 0;
}

static int wait_completed(sctx_t *s, unsigned f, uint64_t n, int ms)
{
    for (int i = 0; i <= ms; i++) {
        if (atomic_load(&s->completed[f]) >= n)
            return 1;
        sleep_us(1000);
    }
    return 0;
}

static srpc_client_t *mk_client(int port, uint32_t seg)
{
    srpc_client_config_t cfg;
    srpc_client_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = (uint16_t)port;
    /* the server's answers as sent (BUSY included), the old client's 3 retransmissions, no window */
    cfg.retries = 3;
    cfg.window = 0;
    cfg.busy_retry = 0;
    cfg.seg_size = seg;
    srpc_client_t *c = NULL;
    int r = srpc_client_create(&cfg, &c);
    CHECK(r == 0 && c, "srpc_client_create: %d", r);
    if (r) {
        fprintf(stderr, "cannot create a client, giving up\n");
        exit(2);
    }
    return c;
}

static void fill_floats(float *v, size_t n, float base)
{
    for (size_t i = 0; i < n; i++)
        v[i] = base + (float)i * 0.25f;
}

/* One vecadd-like call (float32[nf] + 1) through srpc_client_call; 1 when byte-exact. */
static int addone_call(srpc_client_t *c, uint16_t f, size_t nf, float base)
{
    float in[1024], want[1024], out[1024];
    fill_floats(in, nf, base);
    for (size_t i = 0; i < nf; i++)
        want[i] = in[i] + 1.0f;
    uint32_t len = 0;
    int code = -1;
    int r = srpc_client_call(c, f, in, (uint32_t)(nf * 4), out, sizeof(out), &len, &code, TMO_US);
    if (r != 0 || code != 0 || len != nf * 4 || memcmp(out, want, nf * 4) != 0) {
        fprintf(stderr, "addone_call(func %u): r=%d code=%d len=%u\n", f, r, code, len);
        return 0;
    }
    return 1;
}

static int sum_call(srpc_client_t *c, float base)
{
    static float in[2048], want[1024], out[1024];
    fill_floats(in, 2048, base);
    for (int i = 0; i < 1024; i++)
        want[i] = in[i] + in[1024 + i];
    uint32_t len = 0;
    int code = -1;
    int r = srpc_client_call(c, F_SUM, in, sizeof(in), out, sizeof(out), &len, &code, TMO_US);
    if (r != 0 || code != 0 || len != 4096 || memcmp(out, want, 4096) != 0) {
        fprintf(stderr, "sum_call: r=%d code=%d len=%u\n", r, code, len);
        return 0;
    }
    return 1;
}

static uint8_t echo_in[ECHO_MAX + 16], echo_out[ECHO_MAX + 16];

static int echo_call(srpc_client_t *c, uint32_t size, uint32_t salt)
{
    for (uint32_t i = 0; i < size; i++)
        echo_in[i] = (uint8_t)(i * 131u + salt + (i >> 11));
    memset(echo_out, 0xee, size + 16);
    uint32_t len = 0xffffffffu;
    int code = -1;
    int r = srpc_client_call(c, F_ECHO, echo_in, size, echo_out, ECHO_MAX, &len, &code, TMO_US);
    if (r != 0 || code != 0 || len != size || memcmp(echo_in, echo_out, size) != 0 ||
        echo_out[size] != 0xee) {
        fprintf(stderr, "echo_call(%u): r=%d code=%d len=%u\n", size, r, code, len);
        return 0;
    }
    return 1;
}

/* A call expected to end in an ERROR; returns the code (or -1000 + r on a local failure)
 * and copies the text. */
static int error_call(srpc_client_t *c, uint16_t f, const void *data, uint32_t len, char *text,
                      uint32_t *text_len)
{
    static uint8_t out[SRPC_ERRMSG_MAX + 64];
    uint32_t l = 0;
    int code = -1;
    int r = srpc_client_call(c, f, data, len, out, sizeof(out), &l, &code, TMO_US);
    if (r != 0)
        return -1000 + r;
    if (text) {
        memcpy(text, out, l < SRPC_ERRMSG_MAX ? l : SRPC_ERRMSG_MAX);
        text[l < SRPC_ERRMSG_MAX ? l : SRPC_ERRMSG_MAX] = 0;
    }
    if (text_len)
        *text_len = l;
    return code;
}

/* ------------------------------------------------------------------ hand-made datagrams */

static int raw_sock(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        fprintf(stderr, "raw socket: %s\n", strerror(errno));
        exit(2);
    }
    int sz = 8 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    return fd;
}

static void raw_send(int fd, int port, const void *buf, size_t len)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ssize_t r = sendto(fd, buf, len, 0, (struct sockaddr *)&a, sizeof(a));
    CHECK(r == (ssize_t)len, "sendto %zu bytes: %zd (%s)", len, r, strerror(errno));
}

/* Next datagram within timeout_ms: its length, or -1. */
static int raw_recv(int fd, int timeout_ms, uint8_t *buf, size_t cap)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) <= 0)
        return -1;
    ssize_t n = recv(fd, buf, cap, MSG_DONTWAIT);
    return n < 0 ? -1 : (int)n;
}

static size_t mk_dg(uint8_t *out, uint8_t type, uint16_t func, uint64_t req, uint16_t seq,
                    uint16_t nseg, uint32_t msg_len, uint16_t aux, const void *data, size_t dlen)
{
    srpc_hdr_t h = {.type = type, .func_id = func, .req_id = req, .seq = seq, .nseg = nseg,
                    .msg_len = msg_len, .aux = aux};
    if (srpc_hdr_encode(&h, out) != 0)
        fprintf(stderr, "srpc_hdr_encode refused type %u\n", type);
    if (dlen)
        memcpy(out + SRPC_HDR_LEN, data, dlen);
    return SRPC_HDR_LEN + dlen;
}

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

#define CLS_VALID (-1)
/* What docs/PROTOCOL.md says a receiving server must do with one datagram, written from the text
 * (not from wire.c): the drop reason, or CLS_VALID for a well-formed REQUEST segment. */
/* CRC-16/CCITT-FALSE bit by bit, as docs/PROTOCOL-v2.md defines it (bytes 4..5 as zero):
 * independent of wire.c's table. */
static uint16_t v2_check(const uint8_t *d)
{
    uint16_t c = 0xffff;
    for (int i = 0; i < SRPC_HDR_LEN; i++) {
        c ^= (uint16_t)((i == 4 || i == 5 ? 0 : d[i]) << 8);
        for (int b = 0; b < 8; b++)
            c = c & 0x8000 ? (uint16_t)(c << 1 ^ 0x1021) : (uint16_t)(c << 1);
    }
    return c;
}

static int classify(const uint8_t *d, size_t n)
{
    if (n < SRPC_HDR_LEN)
        return SRPC_DROP_SHORT;
    const int ver = d[1] >> 4;
    if (ver >= 2 && ver <= 5 && be16(d + 4) != v2_check(d))
        return SRPC_DROP_BAD_CHECK;
    if (d[0] != 0xA5 || ver < 1 || ver > 5 || (d[1] & 15) > 2)
        return SRPC_DROP_BAD_HEADER;
    uint64_t seq = be16(d + 12), nseg = be16(d + 14), msg_len = be32(d + 16), len = n - SRPC_HDR_LEN, s;
    if (nseg == 0 || seq >= nseg)
        return SRPC_DROP_BAD_SEGMENT;
    if ((d[1] & 15) != SRPC_REQUEST)
        return SRPC_DROP_NOT_REQUEST;
    if (ver >= 4) /* a server without keys takes versions 1..3 */
        return SRPC_DROP_BAD_HEADER;
    if (ver == 3) { /* the data check: CRC-32C of header and data, big-endian after the data */
        if (len < 4)
            return SRPC_DROP_SHORT;
        len -= 4;
        uint32_t c = 0xffffffffu;
        for (size_t i = 0; i < SRPC_HDR_LEN + len; i++) {
            c ^= d[i];
            for (int b = 0; b < 8; b++)
                c = c & 1 ? c >> 1 ^ 0x82f63b78u : c >> 1;
        }
        if (~c != be32(d + SRPC_HDR_LEN + len))
            return SRPC_DROP_BAD_DATA_CHECK;
    }
    if (nseg == 1)
        return len == msg_len ? CLS_VALID : SRPC_DROP_BAD_SEGMENT;
    if (seq < nseg - 1) {
        if (len == 0)
            return SRPC_DROP_BAD_SEGMENT;
        s = len;
    } else {
        if (len == 0 || len > msg_len || (msg_len - len) % (nseg - 1))
            return SRPC_DROP_BAD_SEGMENT;
        s = (msg_len - len) / (nseg - 1);
        if (len > s)
            return SRPC_DROP_BAD_SEGMENT;
    }
    if (s > SRPC_MAX_SEG_DATA || (nseg - 1) * s >= msg_len || nseg * s < msg_len)
        return SRPC_DROP_BAD_SEGMENT;
    return CLS_VALID;
}

/* A vecadd RESPONSE on a raw socket: header fields and data byte-exact. */
static int vec_reply_ok(const uint8_t *dg, int n, uint16_t func, uint64_t req, const float *in)
{
    srpc_hdr_t h;
    if (n != SRPC_HDR_LEN + 1024 || srpc_hdr_decode(dg, (size_t)n, &h) != 0)
        return 0;
    if (h.type != SRPC_RESPONSE || h.func_id != func || h.req_id != req || h.seq != 0 || h.nseg != 1 ||
        h.msg_len != 1024 || h.aux != 0)
        return 0;
    float want[256];
    for (int i = 0; i < 256; i++)
        want[i] = in[i] + 1.0f;
    return memcmp(dg + SRPC_HDR_LEN, want, 1024) == 0;
}

/* An ERROR on a raw socket with the given code and text (NULL: none). */
static int err_reply_ok(const uint8_t *dg, int n, uint16_t func, uint64_t req, int code, const char *text)
{
    srpc_hdr_t h;
    size_t tl = text ? strlen(text) : 0;
    if (n < SRPC_HDR_LEN || srpc_hdr_decode(dg, (size_t)n, &h) != 0)
        return 0;
    return h.type == SRPC_ERROR && h.func_id == func && h.req_id == req && h.seq == 0 && h.nseg == 1 &&
           h.aux == code && h.msg_len == tl && (size_t)n == SRPC_HDR_LEN + tl &&
           (tl == 0 || memcmp(dg + SRPC_HDR_LEN, text, tl) == 0);
}

static uint8_t rbuf[70000];

/* Nothing more arrives on fd within ms. */
static int quiet(int fd, int ms) { return raw_recv(fd, ms, rbuf, sizeof(rbuf)) < 0; }

/* ------------------------------------------------------------------ tests */

/* Happy paths of functions 1, 2 and 3 through srpc_client_call. */
static void test_happy(sctx_t *s, const char *mode)
{
    srpc_client_t *cd = mk_client(s->port, 0), *c1450 = mk_client(s->port, 1450);
    CHECK(addone_call(cd, F_VECADD, 256, 1.5f), "%s vecadd", mode);
    CHECK(addone_call(c1450, F_VECADD, 256, -7.0f), "%s vecadd, S=1450", mode);
    CHECK(sum_call(cd, 3.0f), "%s sum", mode);
    CHECK(sum_call(c1450, -100.0f), "%s sum, S=1450 (6 segments)", mode);
    static const uint32_t sizes[] = {0, 1, 1449, 1450, 1451, 65000, 65001, ECHO_MAX};
    for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        CHECK(echo_call(cd, sizes[i], i), "%s echo %u bytes, default S", mode, sizes[i]);
        CHECK(echo_call(c1450, sizes[i], i + 100), "%s echo %u bytes, S=1450", mode, sizes[i]);
    }
    /* a reply larger than the caller's buffer */
    uint32_t len = 0;
    int code = -1;
    static uint8_t small[100];
    memset(echo_in, 7, 200);
    int r = srpc_client_call(cd, F_ECHO, echo_in, 200, small, sizeof(small), &len, &code, TMO_US);
    CHECK(r == -ENOBUFS && len == 200, "%s short buffer: r=%d len=%u", mode, r, len);
    srpc_client_stats_t cs;
    CHECK(srpc_client_stats(c1450, &cs) == 0 && cs.errors == 0 && cs.timeouts == 0 &&
              cs.replies == cs.sent_calls,
          "%s client stats: sent %llu replies %llu errors %llu", mode, (unsigned long long)cs.sent_calls,
          (unsigned long long)cs.replies, (unsigned long long)cs.errors);
    srpc_client_destroy(cd);
    srpc_client_destroy(c1450);
}

/* Every error code the server produces on its own, and the worker's INTERNAL/DEADLINE. */
static void test_errors(sctx_t *s)
{
    srpc_client_t *c = mk_client(s->port, 0), *c65 = mk_client(s->port, 65000);
    srpc_server_stats_t st0 = stats(s);
    char text[SRPC_ERRMSG_MAX + 1];
    uint32_t tl = 0;
    float v[256] = {0};

    int code = error_call(c, 99, v, sizeof(v), text, &tl);
    CHECK(code == SRPC_E_UNKNOWN_FUNCTION && tl > 0, "func 99: code %d text '%s'", code, text);
    code = error_call(c, F_VECADD, v, 1000, text, &tl);
    CHECK(code == SRPC_E_BAD_REQUEST && tl > 0, "vecadd 1000 B: code %d", code);
    code = error_call(c, F_VECADD, v, 0, text, &tl);
    CHECK(code == SRPC_E_BAD_REQUEST, "vecadd 0 B: code %d", code);
    static float two[2048 + 1];
    code = error_call(c, F_SUM, two, 8192 + 4, text, &tl);
    CHECK(code == SRPC_E_BAD_REQUEST, "sum 8196 B: code %d", code);
    memset(echo_in, 1, ECHO_MAX + 1);
    code = error_call(c65, F_ECHO, echo_in, ECHO_MAX + 1, text, &tl);
    CHECK(code == SRPC_E_TOO_LARGE && tl > 0, "echo 1 MiB + 1: code %d", code);
    code = error_call(c, F_BOOM, v, sizeof(v), text, &tl);
    CHECK(code == SRPC_E_INTERNAL && tl == 4 && strcmp(text, "boom") == 0, "boom: code %d text '%s' (%u)",
          code, text, tl);
    code = error_call(c, F_DEADLINE, v, sizeof(v), text, &tl);
    CHECK(code == SRPC_E_DEADLINE && tl == 0, "deadline: code %d len %u", code, tl);
    code = error_call(c, F_BADSTATUS, v, sizeof(v), text, &tl);
    CHECK(code == SRPC_E_INTERNAL && strcmp(text, "x") == 0, "status 42: code %d text '%s'", code, text);
    code = error_call(c, F_ECHO, "OVERRUN", 7, text, &tl);
    CHECK(code == SRPC_E_INTERNAL && strstr(text, "over the limit"), "raw reply over the limit: code %d '%s'",
          code, text);
    CHECK(echo_call(c, 7, 3), "echo after an over-long raw reply");

    /* a callback error does not stop the server */
    CHECK(addone_call(c, F_VECADD, 256, 42.0f), "vecadd after INTERNAL");

    /* several failing calls in flight: each gets its own ERROR */
    uint64_t ids[6];
    for (int i = 0; i < 6; i++)
        CHECK(srpc_client_send(c, F_BOOM, v, sizeof(v), 0, &ids[i]) == 0, "send boom %d", i);
    for (int i = 0; i < 6; i++) {
        int r = srpc_client_wait(c, ids[i], TMO_US), cd = -1;
        const uint8_t *d = NULL;
        uint32_t l = 0;
        srpc_client_result(c, ids[i], &cd, &d, &l);
        CHECK(r == 0 && cd == SRPC_E_INTERNAL && l == 4 && memcmp(d, "boom", 4) == 0,
              "boom %d: r=%d code=%d", i, r, cd);
        CHECK(srpc_client_release(c, ids[i]) == 0, "release");
    }
    CHECK(addone_call(c, F_VECADD, 256, 43.0f), "vecadd after a batch of INTERNAL");

    srpc_server_stats_t st = stats(s);
    CHECK(st.errors[SRPC_E_UNKNOWN_FUNCTION] - st0.errors[SRPC_E_UNKNOWN_FUNCTION] == 1, "UNKNOWN count");
    CHECK(st.errors[SRPC_E_BAD_REQUEST] - st0.errors[SRPC_E_BAD_REQUEST] == 3, "BAD_REQUEST count");
    CHECK(st.errors[SRPC_E_TOO_LARGE] - st0.errors[SRPC_E_TOO_LARGE] == 1, "TOO_LARGE count");
    CHECK(st.errors[SRPC_E_INTERNAL] - st0.errors[SRPC_E_INTERNAL] == 9, "INTERNAL count %llu",
          (unsigned long long)(st.errors[SRPC_E_INTERNAL] - st0.errors[SRPC_E_INTERNAL]));
    CHECK(st.errors[SRPC_E_DEADLINE] - st0.errors[SRPC_E_DEADLINE] == 1, "DEADLINE count");
    /* the 1 MiB + 1 request is 17 segments: the first is answered, the 16 others ignored */
    CHECK(st.drops[SRPC_DROP_REJECTED] - st0.drops[SRPC_DROP_REJECTED] == 16, "REJECTED drops %llu",
          (unsigned long long)(st.drops[SRPC_DROP_REJECTED] - st0.drops[SRPC_DROP_REJECTED]));
    CHECK(atomic_load(&s->ran[F_BOOM]) == 7, "boom ran %llu times", (unsigned long long)atomic_load(&s->ran[F_BOOM]));
    srpc_client_destroy(c);
    srpc_client_destroy(c65);
}

/* BUSY: a paused worker and a function of capacity 2. */
static void test_busy(int mode)
{
    const fdef_t *defs[] = {&D_SMALL};
    sopts_t o = {.wait_mode = mode, .paused = 1};
    sctx_t *s = server_up(&o, defs, 1);
    srpc_client_t *c = mk_client(s->port, 0);
    int fd = raw_sock();
    float in[4][256];
    uint64_t ids[4];
    for (int i = 0; i < 2; i++) {
        fill_floats(in[i], 256, (float)i * 10);
        CHECK(srpc_client_send(c, F_SMALL, in[i], 1024, 0, &ids[i]) == 0, "send %d", i);
    }
    CHECK(wait_rx(s, 2, 2000), "server saw the first two");
    /* a raw request while full: BUSY, and BUSY is not cached */
    float rin[256];
    fill_floats(rin, 256, 77.0f);
    uint8_t dg[SRPC_HDR_LEN + 1024];
    size_t dl = mk_dg(dg, SRPC_REQUEST, F_SMALL, 0xB0B, 0, 1, 1024, 0, rin, 1024);
    raw_send(fd, s->port, dg, dl);
    int n = raw_recv(fd, 2000, rbuf, sizeof(rbuf));
    srpc_hdr_t h;
    CHECK(n >= SRPC_HDR_LEN && srpc_hdr_decode(rbuf, (size_t)n, &h) == 0 && h.type == SRPC_ERROR &&
              h.aux == SRPC_E_BUSY && h.req_id == 0xB0B,
          "raw BUSY header");
    for (int i = 2; i < 4; i++) {
        fill_floats(in[i], 256, (float)i * 10);
        CHECK(srpc_client_send(c, F_SMALL, in[i], 1024, 0, &ids[i]) == 0, "send %d", i);
    }
    int busy = 0;
    for (int i = 2; i < 4; i++) {
        int r = srpc_client_wait(c, ids[i], TMO_US), code = -1;
        const uint8_t *d;
        uint32_t l;
        srpc_client_result(c, ids[i], &code, &d, &l);
        CHECK(r == 0 && code == SRPC_E_BUSY, "call %d: r=%d code=%d", i, r, code);
        busy += code == SRPC_E_BUSY;
        srpc_client_release(c, ids[i]);
    }
    CHECK(busy >= 1, "at least one BUSY (%d)", busy);
    for (int i = 0; i < 2; i++) {
        int code = -1;
        const uint8_t *d;
        uint32_t l;
        CHECK(srpc_client_result(c, ids[i], &code, &d, &l) == 0 && code == SRPC_E_PENDING,
              "call %d still pending while paused: %d", i, code);
    }
    CHECK(atomic_load(&s->ran[F_SMALL]) == 0, "nothing ran while paused");
    atomic_store(&s->paused, 0);
    for (int i = 0; i < 2; i++) {
        int r = srpc_client_wait(c, ids[i], TMO_US), code = -1;
        const uint8_t *d = NULL;
        uint32_t l = 0;
        srpc_client_result(c, ids[i], &code, &d, &l);
        float want[256];
        for (int j = 0; j < 256; j++)
            want[j] = in[i][j] + 1.0f;
        CHECK(r == 0 && code == 0 && l == 1024 && memcmp(d, want, 1024) == 0, "queued call %d: r=%d code=%d",
              i, r, code);
        srpc_client_release(c, ids[i]);
    }
    /* the raw retry of the BUSY call is a fresh attempt */
    CHECK(wait_completed(s, F_SMALL, 2, 2000), "first two completed");
    raw_send(fd, s->port, dg, dl);
    n = raw_recv(fd, 2000, rbuf, sizeof(rbuf));
    CHECK(vec_reply_ok(rbuf, n, F_SMALL, 0xB0B, rin), "retry after BUSY answered, n=%d", n);
    CHECK(addone_call(c, F_SMALL, 256, 5.0f), "call after BUSY");
    srpc_server_stats_t st = stats(s);
    CHECK(st.errors[SRPC_E_BUSY] == 3, "BUSY count %llu", (unsigned long long)st.errors[SRPC_E_BUSY]);
    CHECK(st.cache_hits == 0, "BUSY is not cached");
    CHECK(atomic_load(&s->ran[F_SMALL]) == 4, "ran %llu", (unsigned long long)atomic_load(&s->ran[F_SMALL]));
    close(fd);
    srpc_client_destroy(c);
    server_down(s);
}

/* A drain (srpc_server_drain): calls queued before it run and are answered, their duplicates too;
 * new calls get DRAINING (not cached: a retry is refused again, and served once the drain ends);
 * srpc_server_pending counts what is not yet answered. */
static void test_drain(void)
{
    const fdef_t *defs[] = {&D_VECADD};
    sopts_t o = {.wait_mode = SRPC_WAIT_BLOCK, .paused = 1};
    sctx_t *s = server_up(&o, defs, 1);
    srpc_client_t *c = mk_client(s->port, 0);
    int fd = raw_sock();
    float in[3][256];
    uint64_t ids[2], pending = 99;
    for (int i = 0; i < 2; i++) {
        fill_floats(in[i], 256, (float)i * 10);
        CHECK(srpc_client_send(c, F_VECADD, in[i], 1024, 0, &ids[i]) == 0, "send %d", i);
    }
    CHECK(wait_rx(s, 2, 2000), "server saw both");
    CHECK(srpc_server_pending(s->srv, &pending) == 0 && pending == 2, "pending %llu", (unsigned long long)pending);
    CHECK(srpc_server_drain(s->srv, 1) == 0 && srpc_server_drain(NULL, 1) == -EINVAL, "drain on");
    CHECK(srpc_server_pending(NULL, &pending) == -EINVAL && srpc_server_pending(s->srv, NULL) == -EINVAL,
          "pending args");
    fill_floats(in[2], 256, 77.0f);
    uint8_t dg[SRPC_HDR_LEN + 1024];
    size_t dl = mk_dg(dg, SRPC_REQUEST, F_VECADD, 0xD0D, 0, 1, 1024, 0, in[2], 1024);
    for (int k = 0; k < 2; k++) { /* refused twice: DRAINING is not cached */
        raw_send(fd, s->port, dg, dl);
        int n = raw_recv(fd, 2000, rbuf, sizeof(rbuf));
        CHECK(err_reply_ok(rbuf, n, F_VECADD, 0xD0D, SRPC_E_DRAINING, "server draining: no new calls"),
              "new call %d while draining: n=%d", k, n);
    }
    CHECK(strcmp(srpc_strerror(SRPC_E_DRAINING), "DRAINING") == 0, "name");
    atomic_store(&s->paused, 0);
    for (int i = 0; i < 2; i++) {
        int code = -1;
        const uint8_t *d = NULL;
        uint32_t l = 0;
        CHECK(srpc_client_wait(c, ids[i], TMO_US) == 0 && srpc_client_result(c, ids[i], &code, &d, &l) == 0 &&
                  code == 0 && l == 1024,
              "queued call %d answered while draining: code %d", i, code);
        srpc_client_release(c, ids[i]);
    }
    CHECK(wait_completed(s, F_VECADD, 2, 2000), "both completed");
    CHECK(srpc_server_pending(s->srv, &pending) == 0 && pending == 0, "nothing pending: %llu",
          (unsigned long long)pending);
    CHECK(srpc_server_drain(s->srv, 0) == 0, "drain off");
    raw_send(fd, s->port, dg, dl);
    int n = raw_recv(fd, 2000, rbuf, sizeof(rbuf));
    CHECK(vec_reply_ok(rbuf, n, F_VECADD, 0xD0D, in[2]), "the refused call, retried after the drain, runs: n=%d", n);
    srpc_server_stats_t st = stats(s);
    CHECK(st.errors[SRPC_E_DRAINING] == 2, "DRAINING count %llu", (unsigned long long)st.errors[SRPC_E_DRAINING]);
    close(fd);
    srpc_client_destroy(c);
    server_down(s);
}

/* Segments of a vecadd request in any order, with duplicates. */
static void test_segments(sctx_t *s)
{
    int fd = raw_sock();
    float in[256];
    fill_floats(in, 256, 0.5f);
    const uint8_t *bytes = (const uint8_t *)in;
    static const int orders[][6] = {
        {2, 1, 0, -1}, {1, 2, 0, -1}, {0, 2, 1, -1}, {2, 0, 1, -1}, {1, 1, 2, 2, 0, -1}, {2, 0, 2, 0, 1, -1},
    };
    const unsigned norders = sizeof(orders) / sizeof(orders[0]);
    srpc_server_stats_t st0 = stats(s);
    uint64_t ran0 = atomic_load(&s->ran[F_VECADD]);
    uint64_t req = 0x5e600000ull;
    uint8_t dg[SRPC_HDR_LEN + 400];
    for (unsigned o = 0; o < norders; o++, req++) {
        for (int k = 0; orders[o][k] >= 0; k++) {
            int seq = orders[o][k];
            uint32_t len = seq < 2 ? 400 : 224;
            size_t dl = mk_dg(dg, SRPC_REQUEST, F_VECADD, req, (uint16_t)seq, 3, 1024, 0, bytes + seq * 400, len);
            raw_send(fd, s->port, dg, dl);
        }
        int n = raw_recv(fd, 2000, rbuf, sizeof(rbuf));
        CHECK(vec_reply_ok(rbuf, n, F_VECADD, req, in), "order %u: reply n=%d", o, n);
        CHECK(quiet(fd, 30), "order %u: exactly one reply", o);
    }
    srpc_server_stats_t st = stats(s);
    CHECK(atomic_load(&s->ran[F_VECADD]) - ran0 == norders, "ran %llu",
          (unsigned long long)(atomic_load(&s->ran[F_VECADD]) - ran0));
    CHECK(st.drops[SRPC_DROP_DUPLICATE] - st0.drops[SRPC_DROP_DUPLICATE] == 4, "DUPLICATE drops %llu",
          (unsigned long long)(st.drops[SRPC_DROP_DUPLICATE] - st0.drops[SRPC_DROP_DUPLICATE]));
    CHECK(st.partial_msgs == 0 && st.reasm_bytes == 0, "nothing left partial");

    /* after the reply: a non-first segment again is ignored, segment 0 again re-sends the reply */
    uint64_t last = req - 1;
    size_t dl = mk_dg(dg, SRPC_REQUEST, F_VECADD, last, 1, 3, 1024, 0, bytes + 400, 400);
    raw_send(fd, s->port, dg, dl);
    CHECK(quiet(fd, 50), "segment 1 of a finished call: no reply");
    dl = mk_dg(dg, SRPC_REQUEST, F_VECADD, last, 0, 3, 1024, 0, bytes, 400);
    raw_send(fd, s->port, dg, dl);
    int n = raw_recv(fd, 2000, rbuf, sizeof(rbuf));
    CHECK(vec_reply_ok(rbuf, n, F_VECADD, last, in), "segment 0 of a finished call: cached reply");
    CHECK(quiet(fd, 30), "one cached reply");
    srpc_server_stats_t st2 = stats(s);
    CHECK(st2.cache_hits - st.cache_hits == 1, "cache hit");
    CHECK(st2.drops[SRPC_DROP_DUPLICATE] - st.drops[SRPC_DROP_DUPLICATE] == 1, "late segment 1 counted");
    CHECK(atomic_load(&s->ran[F_VECADD]) - ran0 == norders, "not run again");
    close(fd);
}

/* Malformed datagrams: no reply, counted for the right reason, nothing else disturbed. */
static void test_malformed(void)
{
    const fdef_t *defs[] = {&D_VECADD};
    sopts_t o = {.wait_mode = SRPC_WAIT_BLOCK};
    sctx_t *s = server_up(&o, defs, 1);
    int fd = raw_sock();
    uint64_t want[SRPC_DROP_MAX] = {0}, sent = 0;
    static uint8_t dg[65600];
    uint8_t data[1100];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 7);
#define SEND_BAD(len, reason, what)                                                         \
    do {                                                                                    \
        int c_ = classify(dg, (len));                                                       \
        CHECK(c_ == (reason), "%s: classified %d, meant %d", what, c_, (int)(reason));    \
        if (c_ >= 0)                                                                        \
            want[c_]++;                                                                     \
        raw_send(fd, s->port, dg, (len));                                                   \
        sent++;                                                                             \
    } while (0)
    size_t l;
    memset(dg, 0, 64);
    SEND_BAD(0, SRPC_DROP_SHORT, "0 bytes");
    memset(dg, 0xA5, 64);
    SEND_BAD(10, SRPC_DROP_SHORT, "10 bytes");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 1, 0, 1, 1024, 0, data, 0);
    SEND_BAD(21, SRPC_DROP_SHORT, "21 bytes");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 2, 0, 1, 1024, 0, data, 1024);
    dg[0] = 0x5A;
    SEND_BAD(l, SRPC_DROP_BAD_HEADER, "wrong magic");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 3, 0, 1, 1024, 0, data, 1024);
    dg[1] = 0x20;
    SEND_BAD(l, SRPC_DROP_BAD_CHECK, "version 2 without its check");
    dg[1] = 0x30;
    SEND_BAD(l, SRPC_DROP_BAD_CHECK, "version 3 without its check");
    dg[1] = 0x40;
    SEND_BAD(l, SRPC_DROP_BAD_CHECK, "version 4 without its check");
    dg[1] = 0x50;
    SEND_BAD(l, SRPC_DROP_BAD_CHECK, "version 5 without its check");
    dg[1] = 0x60;
    SEND_BAD(l, SRPC_DROP_BAD_HEADER, "version 6");
    dg[1] = 0x00;
    SEND_BAD(l, SRPC_DROP_BAD_HEADER, "version 0");
    dg[1] = 0x13;
    SEND_BAD(l, SRPC_DROP_BAD_HEADER, "type 3");
    dg[1] = 0x1f;
    SEND_BAD(l, SRPC_DROP_BAD_HEADER, "type 15");
    l = mk_dg(dg, SRPC_RESPONSE, F_VECADD, 4, 0, 1, 1024, 0, data, 1024);
    SEND_BAD(l, SRPC_DROP_NOT_REQUEST, "RESPONSE to the server");
    l = mk_dg(dg, SRPC_ERROR, F_VECADD, 5, 0, 1, 4, SRPC_E_INTERNAL, "boom", 4);
    SEND_BAD(l, SRPC_DROP_NOT_REQUEST, "ERROR to the server");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 6, 0, 0, 1024, 0, data, 1024);
    SEND_BAD(l, SRPC_DROP_BAD_SEGMENT, "nseg 0");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 7, 3, 3, 1024, 0, data, 224);
    SEND_BAD(l, SRPC_DROP_BAD_SEGMENT, "seq == nseg");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 8, 9, 3, 1024, 0, data, 224);
    SEND_BAD(l, SRPC_DROP_BAD_SEGMENT, "seq > nseg");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 9, 0, 1, 1024, 0, data, 1000);
    SEND_BAD(l, SRPC_DROP_BAD_SEGMENT, "single segment shorter than msg_len");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 10, 0, 1, 1024, 0, data, 1025);
    SEND_BAD(l, SRPC_DROP_BAD_SEGMENT, "single segment longer than msg_len");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 11, 0, 3, 1024, 0, data, 0);
    SEND_BAD(l, SRPC_DROP_BAD_SEGMENT, "empty non-last segment");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 12, 0, 3, 1024, 0, data, 600);
    SEND_BAD(l, SRPC_DROP_BAD_SEGMENT, "(nseg-1)*S >= msg_len");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 13, 0, 3, 1024, 0, data, 300);
    SEND_BAD(l, SRPC_DROP_BAD_SEGMENT, "nseg*S < msg_len");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 14, 2, 3, 1024, 0, data, 225);
    SEND_BAD(l, SRPC_DROP_BAD_SEGMENT, "last segment, S not whole");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 15, 1, 2, 1024, 0, data, 600);
    SEND_BAD(l, SRPC_DROP_BAD_SEGMENT, "last segment longer than S");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 16, 2, 3, 1024, 0, data, 0);
    SEND_BAD(l, SRPC_DROP_BAD_SEGMENT, "empty last segment");

    /* inconsistent segments: each is fine alone, the second disagrees with the first */
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 20, 0, 3, 1024, 0, data, 400);
    SEND_BAD(l, CLS_VALID, "first segment, S=400");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 20, 1, 3, 1024, 0, data, 450);
    SEND_BAD(l, CLS_VALID, "second segment, S=450");
    want[SRPC_DROP_INCONSISTENT]++;
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 21, 0, 3, 1024, 0, data, 400);
    SEND_BAD(l, CLS_VALID, "first segment, S=400");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 21, 2, 3, 1024, 0, data, 124);
    SEND_BAD(l, CLS_VALID, "last segment implying S=450");
    want[SRPC_DROP_INCONSISTENT]++;
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 22, 1, 3, 1024, 0, data, 400);
    SEND_BAD(l, CLS_VALID, "segment of msg_len 1024");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 22, 0, 3, 1000, 0, data, 400);
    SEND_BAD(l, CLS_VALID, "segment of msg_len 1000");
    want[SRPC_DROP_INCONSISTENT]++;
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 23, 1, 3, 1024, 0, data, 400);
    SEND_BAD(l, CLS_VALID, "segment of nseg 3");
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 23, 0, 2, 1024, 0, data, 600);
    SEND_BAD(l, CLS_VALID, "segment of nseg 2");
    want[SRPC_DROP_INCONSISTENT]++;

    /* 200 random datagrams, and 200 random ones behind a valid magic and version */
    int skipped = 0;
    for (int i = 0; i < 400; i++) {
        size_t len = (size_t)(rnd() % 1500);
        if (i % 50 == 49)
            len = 65507 - (size_t)(rnd() % 100);
        for (size_t j = 0; j < len; j++)
            dg[j] = (uint8_t)rnd();
        if (i >= 200) {
            if (len < SRPC_HDR_LEN)
                len = SRPC_HDR_LEN + len;
            dg[0] = 0xA5;
            dg[1] = (uint8_t)(0x10 | (dg[1] & 15));
            if (i % 4 == 0) /* small nseg and seq, so some get past the header */
                dg[14] = 0, dg[12] = 0, dg[13] = dg[13] % 4, dg[15] = (uint8_t)(1 + dg[15] % 4);
            if (i % 8 == 0 || i % 8 == 3) /* version 2: with its check right, or (3) most likely wrong */
                dg[1] = (uint8_t)(0x20 | (dg[1] & 15));
            if (i % 8 == 5) /* a version 3 request, header check right: data check wrong, or (13) right */
                dg[1] = (uint8_t)(0x30 | SRPC_REQUEST), dg[12] = dg[13] = dg[14] = 0, dg[15] = 1;
            if (i % 8 == 0 || i % 8 == 5) {
                uint16_t c = v2_check(dg);
                dg[4] = (uint8_t)(c >> 8), dg[5] = (uint8_t)c;
            }
            if (i % 16 == 13 && len >= SRPC_HDR_LEN + 4) {
                uint32_t c = srpc_crc32c(0, dg, len - 4);
                dg[len - 4] = (uint8_t)(c >> 24), dg[len - 3] = (uint8_t)(c >> 16);
                dg[len - 2] = (uint8_t)(c >> 8), dg[len - 1] = (uint8_t)c;
            }
        }
        int c = classify(dg, len);
        if (c == CLS_VALID) { /* a well-formed request would rightly be answered */
            skipped++;
            continue;
        }
        want[c]++;
        raw_send(fd, s->port, dg, len);
        sent++;
    }
    CHECK(skipped < 10, "random datagrams that were valid requests: %d", skipped);
    CHECK(wait_rx(s, sent, 3000), "server received all %llu datagrams", (unsigned long long)sent);
    CHECK(quiet(fd, 100), "no reply to any malformed datagram");
    srpc_server_stats_t st = stats(s);
    CHECK(st.rx_datagrams == sent, "rx %llu sent %llu", (unsigned long long)st.rx_datagrams, (unsigned long long)sent);
    static const char *names[SRPC_DROP_MAX] = {"SHORT", "BAD_HEADER", "BAD_SEGMENT", "TRUNCATED", "NOT_REQUEST",
                                               "INCONSISTENT", "REASM_TIMEOUT", "MEM_CAP", "TABLE_FULL",
                                               "DUPLICATE", "REJECTED", "TX_FAILED", "NOT_ALLOWED", "BAD_CHECK",
                                               "CLIENT_MEM_CAP", "BAD_DATA_CHECK"};
    for (int r = 0; r < SRPC_DROP_MAX; r++)
        CHECK(st.drops[r] == want[r], "drops[%s] = %llu, want %llu", names[r], (unsigned long long)st.drops[r],
              (unsigned long long)want[r]);
    CHECK(want[SRPC_DROP_SHORT] > 3 && want[SRPC_DROP_BAD_HEADER] > 50 && want[SRPC_DROP_BAD_SEGMENT] > 20 &&
              want[SRPC_DROP_NOT_REQUEST] > 5 && want[SRPC_DROP_BAD_CHECK] > 10 && want[SRPC_DROP_BAD_DATA_CHECK] > 5,
          "the random datagrams covered the reasons");
    CHECK(st.tx_datagrams == 0 && st.calls == 0, "nothing sent, nothing queued");
    CHECK(st.partial_msgs == 0 && st.reasm_bytes == 0, "inconsistent messages dropped whole: %llu partial",
          (unsigned long long)st.partial_msgs);
    CHECK(atomic_load(&s->ran[F_VECADD]) == 0, "nothing ran");
    /* the server still works, for a client call and for this very socket */
    srpc_client_t *c = mk_client(s->port, 0);
    CHECK(addone_call(c, F_VECADD, 256, 9.0f), "call after malformed datagrams");
    float in[256];
    fill_floats(in, 256, 11.0f);
    l = mk_dg(dg, SRPC_REQUEST, F_VECADD, 20, 0, 1, 1024, 0, in, 1024); /* req_id of a dropped message */
    raw_send(fd, s->port, dg, l);
    int n = raw_recv(fd, 2000, rbuf, sizeof(rbuf));
    CHECK(vec_reply_ok(rbuf, n, F_VECADD, 20, in), "raw call after malformed datagrams");
    srpc_client_destroy(c);
    close(fd);
    server_down(s);
#undef SEND_BAD
}

/* Retransmissions: the reply cache, and call identity. */
static void test_duplicates(void)
{
    const fdef_t *defs[] = {&D_VECADD, &D_BOOM, &D_DEADLINE};
    sopts_t o = {.wait_mode = SRPC_WAIT_BLOCK};
    sctx_t *s = server_up(&o, defs, 3);
    int a = raw_sock(), b = raw_sock();
    float in[256], in2[256];
    fill_floats(in, 256, 100.0f);
    fill_floats(in2, 256, 200.0f);
    uint8_t dg[SRPC_HDR_LEN + 1024], first[SRPC_HDR_LEN + 1024];
    size_t dl = mk_dg(dg, SRPC_REQUEST, F_VECADD, 1000, 0, 1, 1024, 0, in, 1024);
    raw_send(a, s->port, dg, dl);
    int n = raw_recv(a, 2000, rbuf, sizeof(rbuf));
    CHECK(vec_reply_ok(rbuf, n, F_VECADD, 1000, in), "first reply");
    memcpy(first, rbuf, sizeof(first));
    CHECK(wait_completed(s, F_VECADD, 1, 2000), "completed");
    raw_send(a, s->port, dg, dl);
    n = raw_recv(a, 2000, rbuf, sizeof(rbuf));
    CHECK(n == (int)sizeof(first) && memcmp(rbuf, first, sizeof(first)) == 0, "cached reply identical, n=%d", n);
    CHECK(quiet(a, 30), "one reply per retransmission");
    srpc_server_stats_t st = stats(s);
    CHECK(st.cache_hits == 1, "cache_hits %llu", (unsigned long long)st.cache_hits);
    CHECK(st.cached_replies == 1, "cached_replies %llu", (unsigned long long)st.cached_replies);
    CHECK(atomic_load(&s->ran[F_VECADD]) == 1, "ran once: %llu", (unsigned long long)atomic_load(&s->ran[F_VECADD]));

    /* the same req_id from two sockets: two calls */
    dl = mk_dg(dg, SRPC_REQUEST, F_VECADD, 2000, 0, 1, 1024, 0, in2, 1024);
    raw_send(a, s->port, dg, dl);
    raw_send(b, s->port, dg, dl);
    n = raw_recv(a, 2000, rbuf, sizeof(rbuf));
    CHECK(vec_reply_ok(rbuf, n, F_VECADD, 2000, in2), "socket a reply");
    n = raw_recv(b, 2000, rbuf, sizeof(rbuf));
    CHECK(vec_reply_ok(rbuf, n, F_VECADD, 2000, in2), "socket b reply");
    CHECK(quiet(a, 30) && quiet(b, 1), "one reply each");
    CHECK(atomic_load(&s->ran[F_VECADD]) == 3, "ran twice more: %llu", (unsigned long long)atomic_load(&s->ran[F_VECADD]));
    /* the same req_id with another func_id: another call */
    dl = mk_dg(dg, SRPC_REQUEST, F_BOOM, 1000, 0, 1, 1024, 0, in, 1024);
    raw_send(a, s->port, dg, dl);
    n = raw_recv(a, 2000, rbuf, sizeof(rbuf));
    CHECK(err_reply_ok(rbuf, n, F_BOOM, 1000, SRPC_E_INTERNAL, "boom"), "INTERNAL boom, n=%d", n);
    CHECK(wait_completed(s, F_BOOM, 1, 2000), "boom completed");
    /* INTERNAL is cached */
    raw_send(a, s->port, dg, dl);
    n = raw_recv(a, 2000, rbuf, sizeof(rbuf));
    CHECK(err_reply_ok(rbuf, n, F_BOOM, 1000, SRPC_E_INTERNAL, "boom"), "cached INTERNAL, n=%d", n);
    CHECK(atomic_load(&s->ran[F_BOOM]) == 1, "boom ran once");
    st = stats(s);
    CHECK(st.cache_hits == 2, "cache_hits %llu", (unsigned long long)st.cache_hits);
    /* DEADLINE is not cached: a retry runs again */
    dl = mk_dg(dg, SRPC_REQUEST, F_DEADLINE, 4000, 0, 1, 1024, 0, in, 1024);
    raw_send(a, s->port, dg, dl);
    n = raw_recv(a, 2000, rbuf, sizeof(rbuf));
    CHECK(err_reply_ok(rbuf, n, F_DEADLINE, 4000, SRPC_E_DEADLINE, NULL), "DEADLINE, n=%d", n);
    CHECK(wait_completed(s, F_DEADLINE, 1, 2000), "deadline completed");
    raw_send(a, s->port, dg, dl);
    n = raw_recv(a, 2000, rbuf, sizeof(rbuf));
    CHECK(err_reply_ok(rbuf, n, F_DEADLINE, 4000, SRPC_E_DEADLINE, NULL), "DEADLINE again, n=%d", n);
    CHECK(atomic_load(&s->ran[F_DEADLINE]) == 2, "deadline ran twice: %llu",
          (unsigned long long)atomic_load(&s->ran[F_DEADLINE]));
    st = stats(s);
    CHECK(st.cache_hits == 2, "cache_hits still %llu", (unsigned long long)st.cache_hits);
    /* UNKNOWN_FUNCTION for a multi-segment message: one ERROR on the first segment seen (here
     * seq 1), the other segments (seg 0 too) ignored, a retransmitted seq 1 answered again */
    uint64_t rej0 = st.drops[SRPC_DROP_REJECTED];
    dl = mk_dg(dg, SRPC_REQUEST, 99, 5000, 1, 3, 1024, 0, in, 400);
    raw_send(a, s->port, dg, dl);
    n = raw_recv(a, 2000, rbuf, sizeof(rbuf));
    srpc_hdr_t h;
    CHECK(n >= SRPC_HDR_LEN && srpc_hdr_decode(rbuf, (size_t)n, &h) == 0 && h.type == SRPC_ERROR &&
              h.aux == SRPC_E_UNKNOWN_FUNCTION && h.req_id == 5000 && h.func_id == 99,
          "UNKNOWN on the first segment seen");
    dl = mk_dg(dg, SRPC_REQUEST, 99, 5000, 2, 3, 1024, 0, in, 224);
    raw_send(a, s->port, dg, dl);
    CHECK(quiet(a, 50), "further segment ignored");
    dl = mk_dg(dg, SRPC_REQUEST, 99, 5000, 0, 3, 1024, 0, in, 400);
    raw_send(a, s->port, dg, dl);
    CHECK(quiet(a, 50), "segment 0 of a message rejected on segment 1 ignored");
    dl = mk_dg(dg, SRPC_REQUEST, 99, 5000, 1, 3, 1024, 0, in, 400);
    raw_send(a, s->port, dg, dl);
    n = raw_recv(a, 2000, rbuf, sizeof(rbuf));
    CHECK(n >= SRPC_HDR_LEN && srpc_hdr_decode(rbuf, (size_t)n, &h) == 0 && h.type == SRPC_ERROR &&
              h.aux == SRPC_E_UNKNOWN_FUNCTION && h.req_id == 5000,
          "retransmitted segment that showed the error answered again");
    st = stats(s);
    CHECK(st.drops[SRPC_DROP_REJECTED] - rej0 == 2, "REJECTED drops");
    CHECK(st.partial_msgs == 0, "no partial");
    close(a);
    close(b);
    server_down(s);
}

/* A partial message expires after reasm_timeout_us. */
static void test_reasm_timeout(int mode)
{
    const fdef_t *defs[] = {&D_VECADD};
    sopts_t o = {.wait_mode = mode, .reasm_timeout_us = 50000};
    sctx_t *s = server_up(&o, defs, 1);
    int fd = raw_sock();
    float in[256];
    fill_floats(in, 256, -3.0f);
    const uint8_t *bytes = (const uint8_t *)in;
    uint8_t dg[SRPC_HDR_LEN + 400];
    size_t dl = mk_dg(dg, SRPC_REQUEST, F_VECADD, 77, 0, 3, 1024, 0, bytes, 400);
    raw_send(fd, s->port, dg, dl);
    CHECK(wait_rx(s, 1, 2000), "segment received");
    srpc_server_stats_t st = stats(s);
    CHECK(st.partial_msgs == 1 && st.reasm_bytes >= 1024, "partial_msgs %llu reasm_bytes %llu",
          (unsigned long long)st.partial_msgs, (unsigned long long)st.reasm_bytes);
    sleep_us(200000);
    st = stats(s);
    CHECK(st.partial_msgs == 0 && st.reasm_bytes == 0, "expired: partial_msgs %llu reasm_bytes %llu",
          (unsigned long long)st.partial_msgs, (unsigned long long)st.reasm_bytes);
    CHECK(st.drops[SRPC_DROP_REASM_TIMEOUT] == 1, "REASM_TIMEOUT %llu",
          (unsigned long long)st.drops[SRPC_DROP_REASM_TIMEOUT]);
    CHECK(quiet(fd, 10), "no reply for an expired message");
    /* a complete retransmission afterwards is a normal call */
    for (int seq = 2; seq >= 0; seq--) {
        dl = mk_dg(dg, SRPC_REQUEST, F_VECADD, 77, (uint16_t)seq, 3, 1024, 0, bytes + seq * 400, seq < 2 ? 400 : 224);
        raw_send(fd, s->port, dg, dl);
    }
    int n = raw_recv(fd, 2000, rbuf, sizeof(rbuf));
    CHECK(vec_reply_ok(rbuf, n, F_VECADD, 77, in), "retransmission after expiry answered");
    /* a partial message still there at destroy is freed (leak check) */
    dl = mk_dg(dg, SRPC_REQUEST, F_VECADD, 78, 0, 3, 1024, 0, bytes, 400);
    raw_send(fd, s->port, dg, dl);
    CHECK(wait_rx(s, 5, 2000), "received");
    close(fd);
    server_down(s);
}


/* Sends segments [from, to) of a 3-segment 1024-byte F_PLACE request (400, 400, 224 bytes). */
static void send_segs(int fd, int port, uint64_t req, const float *in, int from, int to)
{
    uint8_t dg[SRPC_HDR_LEN + 400];
    const uint8_t *bytes = (const uint8_t *)in;
    for (int seq = from; seq < to; seq++) {
        size_t dl = mk_dg(dg, SRPC_REQUEST, F_PLACE, req, (uint16_t)seq, 3, 1024, 0, bytes + seq * 400,
                          seq < 2 ? 400 : 224);
        raw_send(fd, port, dg, dl);
    }
}

/* Receives n replies (any order) and checks each against its request: req_ids base..base+n-1
 * with inputs in[0..n-1]. */
static int replies_ok(int fd, uint64_t base, int n, float in[][256], int ms)
{
    int good = 0;
    for (int k = 0; k < n; k++) {
        int len = raw_recv(fd, ms, rbuf, sizeof(rbuf));
        srpc_hdr_t h;
        if (len < 0 || srpc_hdr_decode(rbuf, (size_t)len, &h) != 0 || h.req_id < base || h.req_id >= base + (uint64_t)n)
            continue;
        good += vec_reply_ok(rbuf, len, F_PLACE, h.req_id, in[h.req_id - base]);
    }
    return good;
}

/* Multi-segment requests of one-input functions are reassembled straight into their Tensor
 * Queue element. A call that completes while an earlier one is still arriving waits for it
 * (batches keep arrival order), but not for long: a request still partial after
 * SRPC_UNPLACE_AFTER_US moves to a pool buffer and frees the way; an element whose request
 * never completes (expired or inconsistent) is skipped and recycled, so capacity is not lost;
 * past capacity/2 reserved elements, requests fall back to pool buffers. */
static void test_placement(int mode)
{
    const fdef_t *defs[] = {&D_PLACE};
    sopts_t o = {.wait_mode = mode, .reasm_timeout_us = 50000};
    sctx_t *s = server_up(&o, defs, 1);
    int fd = raw_sock();
    static float in[8][256];
    for (int i = 0; i < 8; i++)
        fill_floats(in[i], 256, (float)i * 100.0f);
    uint8_t dg[SRPC_HDR_LEN + 1024];

    /* A (3 segments) starts, B (1 segment) completes first: A stays partial (its other
     * segments "lost"), so it moves out of its element and B is answered; A, completed later
     * from its pool buffer, is answered right too. */
    send_segs(fd, s->port, 200, in[0], 0, 1);
    size_t dl = mk_dg(dg, SRPC_REQUEST, F_PLACE, 201, 0, 1, 1024, 0, in[1], 1024);
    raw_send(fd, s->port, dg, dl);
    CHECK(wait_rx(s, 2, 2000), "mode %d: A's first segment and B received", mode);
    uint64_t t_b = now_ns();
    CHECK(replies_ok(fd, 201, 1, &in[1], 2000) == 1, "mode %d: B answered while A is partial", mode);
    CHECK(ms_since(t_b) < 45, "mode %d: B waited %.1f ms, not until A's expiry (50 ms)", mode, ms_since(t_b));
    CHECK(stats(s).unplaced == 1 && stats(s).partial_msgs == 1, "mode %d: A moved to a pool buffer", mode);
    send_segs(fd, s->port, 200, in[0], 1, 3);
    CHECK(replies_ok(fd, 200, 1, in, 2000) == 1, "mode %d: A answered right", mode);

    /* C never completes: it expires, its element is skipped, and D behind it is answered. */
    send_segs(fd, s->port, 300, in[2], 0, 2);
    dl = mk_dg(dg, SRPC_REQUEST, F_PLACE, 301, 0, 1, 1024, 0, in[3], 1024);
    raw_send(fd, s->port, dg, dl);
    uint64_t t0 = now_ns();
    int n = raw_recv(fd, 3000, rbuf, sizeof(rbuf));
    CHECK(vec_reply_ok(rbuf, n, F_PLACE, 301, in[3]), "mode %d: D answered after C expired (%.0f ms)", mode,
          ms_since(t0));
    srpc_server_stats_t st = stats(s);
    for (int w = 0; w < 200 && st.drops[SRPC_DROP_REASM_TIMEOUT] == 0; w++) {
        usleep(5000);
        st = stats(s);
    }
    CHECK(st.drops[SRPC_DROP_REASM_TIMEOUT] == 1, "mode %d: C expired", mode);

    /* E gets an inconsistent segment: dropped, its element skipped. */
    send_segs(fd, s->port, 400, in[4], 0, 1);
    dl = mk_dg(dg, SRPC_REQUEST, F_PLACE, 400, 1, 3, 1000, 0, in[4], 400); /* valid alone, not with seg 0 */
    raw_send(fd, s->port, dg, dl);
    CHECK(wait_rx(s, st.rx_datagrams + 2, 2000), "mode %d: E's segments received", mode);
    st = stats(s);
    CHECK(st.drops[SRPC_DROP_INCONSISTENT] == 1 && st.partial_msgs == 0, "mode %d: E dropped", mode);

    /* Capacity is intact: many calls go round the 6-element ring past the skipped ones. */
    srpc_client_t *c = mk_client(s->port, 400); /* 400-byte segments: 3 per request, placed */
    int ok = 0;
    for (int i = 0; i < 24; i++)
        ok += addone_call(c, F_PLACE, 256, (float)i);
    CHECK(ok == 24, "mode %d: %d of 24 calls after skipped elements", mode, ok);
    srpc_client_destroy(c);

    /* Four requests arrive interleaved: three are placed (capacity 6 / 2), one uses a pool
     * buffer; they complete in reverse order, and all four are right. */
    for (int i = 0; i < 4; i++)
        send_segs(fd, s->port, 500 + (uint64_t)i, in[4 + i], 0, 1);
    for (int i = 3; i >= 0; i--)
        send_segs(fd, s->port, 500 + (uint64_t)i, in[4 + i], 1, 3);
    CHECK(replies_ok(fd, 500, 4, &in[4], 2000) == 4, "mode %d: interleaved requests all answered right", mode);
    st = stats(s);
    CHECK(st.partial_msgs == 0 && st.reasm_bytes == 0 && atomic_load(&s->bad) == 0,
          "mode %d: nothing left partial (%llu), no bad batch", mode, (unsigned long long)st.partial_msgs);

    /* A placed request still arriving at destroy is freed (leak check). */
    uint64_t rx0 = stats(s).rx_datagrams;
    send_segs(fd, s->port, 600, in[0], 0, 1);
    CHECK(wait_rx(s, rx0 + 1, 2000), "received");
    close(fd);
    server_down(s);
}

/* ------------------------------------------------------------------ scattered receive */

#define SC_LEN 600000u /* 68 segments of 8950 bytes: more than a receive burst */
#define SC_SEG 8950u
#define SC_MAX_DG 80u
typedef struct sc_msg {
    uint8_t data[SC_LEN];
    uint8_t dg[SC_MAX_DG * (SC_SEG + SRPC_HDR_LEN + SRPC_DATA_CHECK_LEN)];
    uint32_t len[SC_MAX_DG];
    size_t off[SC_MAX_DG];
    int n;
} sc_msg_t;

/* An echo request of SC_LEN bytes (salt picks them) cut into datagrams of SC_SEG data bytes. */
static void sc_make(sc_msg_t *m, uint64_t req, unsigned version, uint32_t salt)
{
    for (uint32_t i = 0; i < SC_LEN; i++)
        m->data[i] = (uint8_t)(i * 2654435761u >> 13 ^ salt);
    srpc_hdr_t t = {.type = SRPC_REQUEST, .version = (uint8_t)version, .func_id = F_ECHO, .req_id = req};
    m->n = srpc_msg_segment(&t, m->data, SC_LEN, SC_SEG + (version == 3 ? SRPC_DATA_CHECK_LEN : 0), m->dg,
                            sizeof(m->dg), m->len, SC_MAX_DG);
    CHECK(m->n == 68, "segmented into %d datagrams", m->n);
    for (int i = 0; i < m->n; i++)
        m->off[i] = i ? m->off[i - 1] + m->len[i - 1] : 0;
}

static void sc_send(int fd, int port, const sc_msg_t *m, int i) { raw_send(fd, port, m->dg + m->off[i], m->len[i]); }

/* The echo reply of m on fd within ms, byte-exact. */
static int sc_reply_ok(int fd, const sc_msg_t *m, uint64_t req, int ms)
{
    srpc_reassembler_t *r = NULL;
    if (srpc_reassembler_create(SC_LEN, &r) != 0)
        return 0;
    int ok = 0, n;
    while (!ok && (n = raw_recv(fd, ms, rbuf, sizeof(rbuf))) > 0)
        if (srpc_reassembler_push(r, rbuf, (size_t)n) == 1) {
            srpc_hdr_t h;
            uint32_t len = 0;
            const uint8_t *got = srpc_reassembler_message(r, &h, &len);
            ok = h.type == SRPC_RESPONSE && h.req_id == req && len == SC_LEN && memcmp(got, m->data, SC_LEN) == 0 ? 1
                                                                                                              : -1;
        }
    srpc_reassembler_destroy(r);
    return ok == 1;
}

/* Segments queued before the server starts come in bursts: the first burst is copied, the
 * segments after it are expected and received scattered straight into their places. Each case
 * checks the reply byte for byte; the counters say which path each datagram took. */
static void test_scatter(int mode)
{
    static sc_msg_t a, b;
    const fdef_t *defs[] = {&D_ECHO};
    const int fa = raw_sock(), fb = raw_sock();

    /* In order: after the first burst every segment is where it was expected. */
    sopts_t o = {.wait_mode = mode, .deferred = 1};
    sctx_t *s = server_up(&o, defs, 1);
    sc_make(&a, 1, 1, 7);
    for (int i = 0; i < a.n; i++)
        sc_send(fa, s->port, &a, i);
    server_go(s);
    CHECK(sc_reply_ok(fa, &a, 1, 3000), "mode %d: in order: echoed", mode);
    srpc_server_stats_t st = stats(s);
    CHECK(st.rx_in_place >= 4 && st.rx_unscattered == 0 && st.rx_datagrams == 68,
          "mode %d: in order: %llu in place, %llu unscattered", mode, (unsigned long long)st.rx_in_place,
          (unsigned long long)st.rx_unscattered);
    server_down(s);

    /* Swapped pairs after the first burst: each datagram lands in its neighbour's place, and the
     * first handled of a pair would overwrite the other before it is moved out, unless all are
     * moved out first. Version 3: the data check reads each from where it landed. */
    s = server_up(&o, defs, 1);
    sc_make(&a, 2, 3, 9);
    for (int i = 0; i < 40; i++)
        sc_send(fa, s->port, &a, i);
    for (int i = 40; i + 1 < a.n; i += 2) {
        sc_send(fa, s->port, &a, i + 1);
        sc_send(fa, s->port, &a, i);
    }
    if (a.n % 2)
        sc_send(fa, s->port, &a, a.n - 1);
    server_go(s);
    CHECK(sc_reply_ok(fa, &a, 2, 3000), "mode %d: swapped pairs: echoed byte-exact", mode);
    st = stats(s);
    CHECK(st.rx_unscattered > 0 && st.drops[SRPC_DROP_DUPLICATE] == 0 && st.drops[SRPC_DROP_INCONSISTENT] == 0,
          "mode %d: swapped pairs: %llu unscattered", mode, (unsigned long long)st.rx_unscattered);
    server_down(s);

    /* Two messages interleaved from two sockets: half the expected places get the other one's
     * segments; both are echoed right. A corrupted version 3 segment among them is dropped by
     * its data check and its good copy, sent last, completes the message. */
    s = server_up(&o, defs, 1);
    sc_make(&a, 3, 3, 11);
    sc_make(&b, 4, 1, 13);
    for (int i = 0; i < a.n; i++) {
        if (i == 50) {
            uint8_t bad[SC_SEG + SRPC_HDR_LEN + SRPC_DATA_CHECK_LEN];
            memcpy(bad, a.dg + a.off[i], a.len[i]);
            bad[SRPC_HDR_LEN + 100] ^= 1;
            raw_send(fa, s->port, bad, a.len[i]);
        } else {
            sc_send(fa, s->port, &a, i);
        }
        sc_send(fb, s->port, &b, i);
    }
    sc_send(fa, s->port, &a, 50);
    server_go(s);
    CHECK(sc_reply_ok(fa, &a, 3, 3000), "mode %d: interleaved: first echoed", mode);
    CHECK(sc_reply_ok(fb, &b, 4, 3000), "mode %d: interleaved: second echoed", mode);
    st = stats(s);
    CHECK(st.rx_unscattered > 0 && st.drops[SRPC_DROP_BAD_DATA_CHECK] == 1 && st.partial_msgs == 0,
          "mode %d: interleaved: %llu unscattered, %llu bad data checks", mode, (unsigned long long)st.rx_unscattered,
          (unsigned long long)st.drops[SRPC_DROP_BAD_DATA_CHECK]);

    /* A segment that disagrees with its message (another msg_len, valid alone) in the middle
     * of the expected ones: the message is dropped, the segments after it too or as new partial
     * messages that expire; no reply, and the server goes on. */
    srpc_server_stats_t st0 = stats(s);
    sc_make(&a, 5, 1, 17);
    for (int i = 0; i < a.n; i++) {
        if (i == 45) {
            uint8_t dg[SRPC_HDR_LEN + 100];
            size_t dl = mk_dg(dg, SRPC_REQUEST, F_ECHO, 5, 1, 2, 200, 0, a.data, 100);
            raw_send(fa, s->port, dg, dl);
        }
        sc_send(fa, s->port, &a, i);
    }
    CHECK(wait_rx(s, st0.rx_datagrams + 69, 3000), "mode %d: disagreeing: all received", mode);
    CHECK(quiet(fa, 100), "mode %d: disagreeing: no reply", mode);
    st = stats(s);
    CHECK(st.drops[SRPC_DROP_INCONSISTENT] > st0.drops[SRPC_DROP_INCONSISTENT], "mode %d: disagreeing: counted",
          mode);
    sc_make(&a, 6, 1, 19);
    for (int i = 0; i < a.n; i++)
        sc_send(fa, s->port, &a, i);
    CHECK(sc_reply_ok(fa, &a, 6, 3000), "mode %d: the next message is echoed", mode);
    server_down(s);
    close(fa);
    close(fb);
}

/* ------------------------------------------------------------------ coalesced receive */

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

/* Sends n datagrams of seg bytes (the last may be shorter: len in all) at buf as one buffer the
 * kernel cuts (UDP segmentation offload). 0, or -1 where the kernel cannot. */
static int send_run(int fd, int port, const uint8_t *buf, size_t len, int seg)
{
    if (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof(seg)) != 0)
        return -1;
    raw_send(fd, port, buf, len);
    int zero = 0;
    setsockopt(fd, SOL_UDP, UDP_SEGMENT, &zero, sizeof(zero));
    return 0;
}

/* A run of calls sent as one buffer reaches the server coalesced (UDP receive offload) and is
 * taken apart: each call answered right; the largest run a buffer holds; a run whose last
 * datagram is shorter (and so fails its segment check alone); datagrams shorter than a header,
 * each dropped as short. */
static void test_coalesced(int mode)
{
    const fdef_t *defs[] = {&D_VECADD};
    sopts_t o = {.wait_mode = mode};
    sctx_t *s = server_up(&o, defs, 1);
    const int fd = raw_sock();
    enum { N = 62, DG = SRPC_HDR_LEN + 1024 }; /* 62 x 1046 bytes: as much as one buffer takes */
    static uint8_t run[N * DG];
    static float in[N][256];
    for (int i = 0; i < N; i++) {
        fill_floats(in[i], 256, (float)i * 10.0f);
        mk_dg(run + (size_t)i * DG, SRPC_REQUEST, F_VECADD, 7000 + (uint64_t)i, 0, 1, 1024, 0, in[i], 1024);
    }
    if (send_run(fd, s->port, run, sizeof(run), DG) != 0) {
        fprintf(stderr, "test_coalesced: no UDP_SEGMENT on this kernel, skipped\n");
        close(fd);
        server_down(s);
        return;
    }
    int good = 0;
    for (int k = 0; k < N; k++) {
        int len = raw_recv(fd, 2000, rbuf, sizeof(rbuf));
        srpc_hdr_t h;
        if (len > 0 && srpc_hdr_decode(rbuf, (size_t)len, &h) == 0 && h.req_id >= 7000 && h.req_id < 7000 + N)
            good += vec_reply_ok(rbuf, len, F_VECADD, h.req_id, in[h.req_id - 7000]);
    }
    CHECK(good == N, "mode %d: %d of %d calls of one run answered right", mode, good, N);
    srpc_server_stats_t st = stats(s);
    CHECK(st.rx_coalesced == N && st.rx_datagrams == N, "mode %d: %llu of %llu datagrams came coalesced", mode,
          (unsigned long long)st.rx_coalesced, (unsigned long long)st.rx_datagrams);

    /* the last one 100 bytes short: the others answered, it counted as a bad segment */
    send_run(fd, s->port, run, 4 * DG - 100, DG);
    good = 0;
    for (int k = 0; k < 3; k++) {
        int len = raw_recv(fd, 2000, rbuf, sizeof(rbuf));
        srpc_hdr_t h;
        if (len > 0 && srpc_hdr_decode(rbuf, (size_t)len, &h) == 0 && h.req_id < 7003)
            good += vec_reply_ok(rbuf, len, F_VECADD, h.req_id, in[h.req_id - 7000]);
    }
    CHECK(quiet(fd, 50), "mode %d: the short last datagram: no reply", mode);
    srpc_server_stats_t st2 = stats(s);
    CHECK(good == 3 && st2.drops[SRPC_DROP_BAD_SEGMENT] == st.drops[SRPC_DROP_BAD_SEGMENT] + 1 &&
              st2.cache_hits == st.cache_hits + 3 && st2.rx_coalesced == st.rx_coalesced + 4,
          "mode %d: a shorter last datagram fails alone (%d of 3 answered from the cache)", mode, good);

    /* ten datagrams of 11 bytes whose bytes together would be a valid request */
    send_run(fd, s->port, run + 5 * (size_t)DG, 110, 11);
    for (int w = 0; w < 2000 && stats(s).drops[SRPC_DROP_SHORT] < 10; w++)
        sleep_us(1000);
    srpc_server_stats_t st3 = stats(s);
    CHECK(st3.drops[SRPC_DROP_SHORT] == 10 && st3.calls == st2.calls && quiet(fd, 50),
          "mode %d: datagrams shorter than a header each dropped (%llu)", mode,
          (unsigned long long)st3.drops[SRPC_DROP_SHORT]);
    close(fd);
    server_down(s);
}

/* The echo replies of n (at most 3) messages on fd within ms, each byte-exact: req_id req[i]
 * carries want_len[i] bytes equal to want[i]. Datagrams go to the reassembler of their req_id. */
static int replies_exact(int fd, const uint64_t *req, const uint8_t *const *want, const uint32_t *want_len, int n,
                         int ms)
{
    srpc_reassembler_t *r[3] = {NULL, NULL, NULL};
    int ok[3] = {0, 0, 0}, got = 0, len;
    for (int i = 0; i < n; i++)
        if (srpc_reassembler_create(SC_LEN, &r[i]) != 0)
            return 0;
    while (got < n && (len = raw_recv(fd, ms, rbuf, sizeof(rbuf))) > 0) {
        srpc_hdr_t h;
        if (srpc_hdr_decode(rbuf, (size_t)len, &h) != 0)
            continue;
        for (int i = 0; i < n; i++)
            if (h.req_id == req[i] && !ok[i] && srpc_reassembler_push(r[i], rbuf, (size_t)len) == 1) {
                uint32_t l = 0;
                const uint8_t *d = srpc_reassembler_message(r[i], &h, &l);
                ok[i] = h.type == SRPC_RESPONSE && l == want_len[i] && !memcmp(d, want[i], l) ? 1 : -1;
                got++;
            }
    }
    int all = got == n;
    for (int i = 0; i < n; i++) {
        all = all && ok[i] == 1;
        srpc_reassembler_destroy(r[i]);
    }
    return all;
}

static int sc_replies_ok(int fd, const sc_msg_t *const *m, const uint64_t *req, int n, int ms)
{
    const uint8_t *want[3];
    uint32_t want_len[3];
    for (int i = 0; i < n; i++) {
        want[i] = m[i]->data;
        want_len[i] = SC_LEN;
    }
    return replies_exact(fd, req, want, want_len, n, ms);
}

/* Datagrams [from, to) of m as runs of at most per (one buffer each, the kernel cuts it). */
static void sc_send_runs(int fd, int port, const sc_msg_t *m, int from, int to, int per)
{
    for (int i = from; i < to; i += per) {
        const int k = to - i < per ? to - i : per;
        send_run(fd, port, m->dg + m->off[i], m->off[i + k - 1] + m->len[i + k - 1] - m->off[i], (int)m->len[i]);
    }
}

/* Queued before the server starts: A's first 31 segments one by one, then the run of its next
 * 7, so that the first receive burst (32 entries) ends with a coalesced run: from there on, A's
 * segments are expected in runs. Returns 0, or -1 where the kernel cannot send runs. */
static int sc_queue_start(int fd, int port, const sc_msg_t *a)
{
    int seg = (int)a->len[0];
    if (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof(seg)) != 0)
        return -1;
    seg = 0;
    setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof(seg));
    for (int i = 0; i < 31; i++)
        sc_send(fd, port, a, i);
    sc_send_runs(fd, port, a, 31, 38, 7);
    return 0;
}

/* The 60000-byte echo request C cut at 4000 bytes (15 datagrams back to back in c_dg). */
static uint8_t c_data[60000], c_dg[16 * (4000 + SRPC_HDR_LEN)];

static size_t c_make(uint64_t req)
{
    uint32_t clen[16];
    for (size_t i = 0; i < sizeof(c_data); i++)
        c_data[i] = (uint8_t)(i * 7 + req);
    srpc_hdr_t t = {.type = SRPC_REQUEST, .version = 1, .func_id = F_ECHO, .req_id = req};
    const int cn = srpc_msg_segment(&t, c_data, sizeof(c_data), 4000, c_dg, sizeof(c_dg), clen, 16);
    CHECK(cn == 15, "C cut into %d", cn);
    return sizeof(c_data) + 15u * SRPC_HDR_LEN;
}

/* Large segments sent in runs (one buffer of 7 for the kernel to cut) arrive coalesced; once
 * a run of a message has come, its next run is received laid out as the segments expected,
 * each header to its slot and each segment's data straight into its place. A run that holds
 * another message's segments of the same size moves those out first; a run laid out otherwise
 * (another segment size) is made whole; every reply is byte-exact. */
static void test_runs(int mode)
{
    static sc_msg_t a, b;
    const fdef_t *defs[] = {&D_ECHO};
    const int fa = raw_sock();
    sopts_t o = {.wait_mode = mode, .deferred = 1};

    for (unsigned version = 1; version <= 3; version += 2) { /* version 3: each data check read where it landed */
        sctx_t *s = server_up(&o, defs, 1);
        sc_make(&a, 10 + version, version, 23);
        if (sc_queue_start(fa, s->port, &a) != 0) {
            fprintf(stderr, "test_runs: no UDP_SEGMENT on this kernel, skipped\n");
            server_go(s);
            server_down(s);
            close(fa);
            return;
        }
        sc_send_runs(fa, s->port, &a, 38, a.n, 7);
        server_go(s);
        const sc_msg_t *one[] = {&a};
        const uint64_t rid[] = {10 + version};
        CHECK(sc_replies_ok(fa, one, rid, 1, 3000), "mode %d v%u: runs in order: echoed", mode, version);
        srpc_server_stats_t st = stats(s);
        CHECK(st.rx_in_place == 30 && st.rx_unscattered == 0 && st.rx_coalesced == 37 && st.rx_datagrams == 68,
              "mode %d v%u: runs: %llu in place, %llu coalesced, %llu unscattered", mode, version,
              (unsigned long long)st.rx_in_place, (unsigned long long)st.rx_coalesced,
              (unsigned long long)st.rx_unscattered);
        server_down(s);
    }

    /* A run holding A's next two (swapped), three of B (same size), then two more of A. */
    sctx_t *s = server_up(&o, defs, 1);
    sc_make(&a, 21, 1, 29);
    sc_make(&b, 22, 1, 31);
    sc_queue_start(fa, s->port, &a);
    sc_send_runs(fa, s->port, &a, 38, 45, 7);
    static uint8_t mixed[7 * (SC_SEG + SRPC_HDR_LEN)];
    size_t at = 0;
    const sc_msg_t *src[7] = {&a, &a, &b, &b, &b, &a, &a};
    const int seg[7] = {46, 45, 0, 1, 2, 47, 48}; /* the first two swapped: each in the other's place */
    for (int i = 0; i < 7; i++) {
        memcpy(mixed + at, src[i]->dg + src[i]->off[seg[i]], src[i]->len[seg[i]]);
        at += src[i]->len[seg[i]];
    }
    send_run(fa, s->port, mixed, at, (int)a.len[0]);
    sc_send_runs(fa, s->port, &a, 49, a.n, 7);
    sc_send_runs(fa, s->port, &b, 3, b.n, 7);
    server_go(s);
    const sc_msg_t *two[] = {&a, &b};
    const uint64_t rids[] = {21, 22};
    CHECK(sc_replies_ok(fa, two, rids, 2, 3000), "mode %d: a run of two messages: both echoed byte-exact", mode);
    srpc_server_stats_t st = stats(s);
    CHECK(st.rx_unscattered == 7 && st.drops[SRPC_DROP_INCONSISTENT] == 0 && st.partial_msgs == 0,
          "mode %d: a run of two messages: %llu unscattered (7)", mode, (unsigned long long)st.rx_unscattered);
    server_down(s);

    /* While A's next run is expected, a run of C cut at 4000 bytes. */
    s = server_up(&o, defs, 1);
    sc_make(&a, 31, 1, 37);
    sc_queue_start(fa, s->port, &a);
    sc_send_runs(fa, s->port, &a, 38, 45, 7);
    send_run(fa, s->port, c_dg, c_make(32), 4000 + SRPC_HDR_LEN);
    sc_send_runs(fa, s->port, &a, 45, a.n, 7);
    server_go(s);
    const uint64_t rid_ca[] = {32, 31};
    const uint8_t *want_ca[] = {c_data, a.data};
    const uint32_t len_ca[] = {sizeof(c_data), SC_LEN};
    CHECK(replies_exact(fa, rid_ca, want_ca, len_ca, 2, 3000), "mode %d: a run of another size, and the message "
          "expected meanwhile: both echoed byte-exact", mode);
    st = stats(s);
    CHECK(st.rx_unscattered == 15 && st.partial_msgs == 0, "mode %d: a run of another size: %llu unscattered (15)",
          mode, (unsigned long long)st.rx_unscattered);
    server_down(s);
    close(fa);
}

/* Batches form under load; a batch that wraps the ring end is contiguous and correct. */
static void test_batching(void)
{
    const fdef_t *defs[] = {&D_VECADD};
    sopts_t o = {.wait_mode = SRPC_WAIT_BLOCK};
    sctx_t *s = server_up(&o, defs, 1);
    atomic_store(&s->sleep_us, 2000);
    srpc_client_t *c = mk_client(s->port, 0);
    static float in[32][256];
    uint64_t ids[32];
    for (int i = 0; i < 32; i++) {
        fill_floats(in[i], 256, (float)i * 1000);
        CHECK(srpc_client_send(c, F_VECADD, in[i], 1024, 0, &ids[i]) == 0, "send %d", i);
    }
    int ok = 0;
    for (int i = 0; i < 32; i++) {
        int r = srpc_client_wait(c, ids[i], TMO_US), code = -1;
        const uint8_t *d = NULL;
        uint32_t l = 0;
        srpc_client_result(c, ids[i], &code, &d, &l);
        float want[256];
        for (int j = 0; j < 256; j++)
            want[j] = in[i][j] + 1.0f;
        ok += r == 0 && code == 0 && l == 1024 && memcmp(d, want, 1024) == 0;
        srpc_client_release(c, ids[i]);
    }
    CHECK(ok == 32, "%d of 32 correct", ok);
    srpc_server_stats_t st = stats(s);
    uint64_t big = 0, over = 0;
    for (int k = 2; k < SRPC_BATCH_HIST; k++)
        big += st.batch_hist[k];
    for (int k = 9; k < SRPC_BATCH_HIST; k++)
        over += st.batch_hist[k];
    CHECK(st.batches < 32 && st.batch_calls == 32 && big > 0, "batches %llu calls %llu, batches > 1: %llu",
          (unsigned long long)st.batches, (unsigned long long)st.batch_calls, (unsigned long long)big);
    CHECK(over == 0, "no batch over max_batch 8");
    srpc_client_destroy(c);
    server_down(s);

    /* wrapping batches: capacity 5, max_batch 4, rounds of 2, 3 or 4 calls held together by
     * max_delay (rounds of one size would meet the ring at the same index every time: between
     * rounds the ring is empty and moves on by its address period less one, callring.c) */
    const fdef_t *wdefs[] = {&D_WRAP4K, &D_WRAP1K};
    sctx_t *w = server_up(&o, wdefs, 2);
    atomic_store(&w->sleep_us, 500);
    c = mk_client(w->port, 0);
    static const uint16_t funcs[2] = {F_WRAP4K, F_WRAP1K};
    const int rounds = 20;
    for (int fi = 0; fi < 2; fi++) {
        uint16_t f = funcs[fi];
        uint32_t nf = f == F_WRAP4K ? 1024 : 256;
        int good = 0, busy = 0, sent = 0;
        for (int r = 0; r < rounds; r++) {
            static float win[4][1024];
            uint64_t wid[4];
            const int per = 2 + r % 3;
            for (int k = 0; k < per; k++) {
                for (uint32_t j = 0; j < nf; j++)
                    win[k][j] = (float)(sent + k);
                CHECK(srpc_client_send(c, f, win[k], nf * 4, 0, &wid[k]) == 0, "send");
            }
            for (int k = 0; k < per; k++) {
                int rc = srpc_client_wait(c, wid[k], TMO_US), code = -1;
                const uint8_t *d = NULL;
                uint32_t l = 0;
                srpc_client_result(c, wid[k], &code, &d, &l);
                busy += code == SRPC_E_BUSY;
                int same = rc == 0 && code == 0 && l == nf * 4;
                for (uint32_t j = 0; same && j < nf; j++) {
                    float v;
                    memcpy(&v, d + j * 4, 4);
                    same = v == (float)(sent + k) + 1.0f;
                }
                good += same;
                srpc_client_release(c, wid[k]);
            }
            /* the next round only after this one's ring slots are recycled */
            sent += per;
            CHECK(wait_completed(w, f, (uint64_t)sent, 2000), "round %d completed", r);
        }
        CHECK(good == sent && busy == 0, "func %u: %d of %d correct, %d BUSY", f, good, sent, busy);
        int seen = 0;
        for (int v = 0; v < sent; v++)
            seen += w->seen[f][v] == 1;
        CHECK(seen == sent, "func %u: %d distinct requests seen by the worker", f, seen);
        CHECK(atomic_load(&w->wrap_idx[f]) > 0, "func %u: %d batches wrapping capacity", f, atomic_load(&w->wrap_idx[f]));
        CHECK(atomic_load(&w->wrap_mem[f]) > 0, "func %u: %d batches wrapping the ring memory", f,
              atomic_load(&w->wrap_mem[f]));
    }
    st = stats(w);
    uint64_t big2 = 0;
    for (int k = 2; k < SRPC_BATCH_HIST; k++)
        big2 += st.batch_hist[k];
    CHECK(big2 > 0, "batches > 1 in the wrap test");
    CHECK(st.errors[SRPC_E_BUSY] == 0, "no BUSY");
    srpc_client_destroy(c);
    server_down(w);
}

/* The worker's max_delay hold must not delay other functions, nor a batch that filled up. */
static void test_hold(void)
{
    const fdef_t *defs[] = {&D_VECADD, &D_SLOW};
    sopts_t o = {.wait_mode = SRPC_WAIT_BLOCK, .worker_tmo_us = 2000000}; /* no early return */
    sctx_t *s = server_up(&o, defs, 2);
    srpc_client_t *c = mk_client(s->port, 0);
    float in[256];
    fill_floats(in, 256, 1.0f);
    uint64_t id, t0 = now_ns();
    CHECK(srpc_client_send(c, F_SLOW, in, 1024, 0, &id) == 0, "send slow");
    sleep_us(20000); /* the worker has seen it and holds it for max_delay */
    uint64_t t1 = now_ns();
    CHECK(addone_call(c, F_VECADD, 256, 2.0f), "vecadd while another function holds");
    double ms = ms_since(t1);
    CHECK(ms < 250, "vecadd took %.1f ms while func %u held its batch", ms, F_SLOW);
    CHECK(srpc_client_wait(c, id, TMO_US) == 0, "slow call done");
    ms = ms_since(t0);
    CHECK(ms >= 550, "a lone call waits for max_delay (%.1f ms)", ms);
    srpc_client_release(c, id);
    CHECK(wait_completed(s, F_SLOW, 1, 1000), "completed");

    /* a batch that reaches max_batch goes at once */
    uint64_t ids[4];
    t0 = now_ns();
    CHECK(srpc_client_send(c, F_SLOW, in, 1024, 0, &ids[0]) == 0, "send");
    sleep_us(20000);
    for (int i = 1; i < 4; i++)
        CHECK(srpc_client_send(c, F_SLOW, in, 1024, 0, &ids[i]) == 0, "send");
    for (int i = 0; i < 4; i++) {
        int code = -1;
        const uint8_t *d;
        uint32_t l;
        CHECK(srpc_client_wait(c, ids[i], TMO_US) == 0 && srpc_client_result(c, ids[i], &code, &d, &l) == 0 &&
                  code == 0,
              "full batch call %d", i);
        srpc_client_release(c, ids[i]);
    }
    ms = ms_since(t0);
    CHECK(ms < 250, "a full batch waited %.1f ms (max_delay 600 ms)", ms);
    srpc_client_destroy(c);
    server_down(s);
}

/* ---------------------------------------------------------------- native functions */

/* The server's counters once `replies` replies are counted (just after their send, so a client
 * may hold them first; at most a second) and nothing more comes for 20 ms. */
static srpc_server_stats_t stats_settled(sctx_t *s, uint64_t replies)
{
    srpc_server_stats_t st = stats(s);
    for (int t = 0; t < 1000 && st.replies < replies; t++) {
        sleep_us(1000);
        st = stats(s);
    }
    sleep_us(20000);
    return stats(s);
}

/* A native function that answers call 2 of each batch alone with BAD_REQUEST and the others
 * x + 1, or (ctx says) returns a code for the whole batch. */
static int native_mixed(void *ctx, srpc_server_t *srv, struct srpc_batch *b)
{
    const int code = ctx ? *(const int *)ctx : 0;
    if (code)
        return code;
    srpc_native_vecadd(NULL, srv, b);
    for (uint32_t i = 0; i < b->count; i++)
        if ((b->first_seq + i) % 7 == 2)
            srpc_server_fail_call(srv, b, i, SRPC_E_BAD_REQUEST, "call 2 of 7");
    return 0;
}

/* A native function's batches run inside next_batch (the worker loop never sees them), and run
 * to completion: a burst of one-datagram calls received together (sent before the server
 * started), as many as SRPC_REPLY_HOLD_CALLS in two batches, is one receive and one send,
 * whatever the wait mode. Then its error paths: a batch
 * failed with a code, an invalid code (INTERNAL), registration refused on a GPU or with
 * max_inflight. */
static void test_native(int mode)
{
    enum { N = 8 }; /* SRPC_REPLY_HOLD_CALLS */
    srpc_server_config_t cfg;
    srpc_server_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.wait_mode = mode;
    cfg.reply_hold_us = 1000000; /* the count and the burst decide, never a slow (sanitized) run */
    cfg.rx_takeover_us = 10000000; /* a paused worker's burst waits for it (below) */
    srpc_server_t *srv = NULL;
    CHECK(srpc_server_create(&cfg, &srv) == 0, "create");
    uint32_t sz[1] = {1024};
    srpc_func_config_t fc;
    srpc_func_config_init(&fc);
    fc.func_id = F_VECADD;
    fc.in_sizes = fc.out_sizes = sz;
    fc.capacity = 64;
    fc.max_batch = N / 2;
    fc.native = srpc_native_vecadd;
    fc.max_inflight = 2;
    CHECK(srpc_server_add_function(srv, &fc) == -EINVAL, "a native function with max_inflight is refused");
    fc.max_inflight = 0;
    fc.on_gpu = 1;
    CHECK(srpc_server_add_function(srv, &fc) == -EINVAL, "a native function on a GPU is refused");
    fc.on_gpu = 0;
    CHECK(srpc_server_add_function(srv, &fc) == 0, "add native vecadd");
    static int fail_code = 0;
    fc.func_id = F_SUM; /* the same sizes, another function: native_mixed */
    fc.native = native_mixed;
    fc.native_ctx = &fail_code;
    CHECK(srpc_server_add_function(srv, &fc) == 0, "add native mixed");
    const int port = srpc_server_port(srv);
    int fd = raw_sock();
    static float in[N][256];
    static uint8_t dg[SRPC_HDR_LEN + 1024];
    for (int i = 0; i < N; i++) {
        fill_floats(in[i], 256, (float)i);
        raw_send(fd, port, dg, mk_dg(dg, SRPC_REQUEST, F_VECADD, 500 + (uint64_t)i, 0, 1, 1024, 0, in[i], 1024));
    }
    sctx_t *s = calloc(1, sizeof(*s)); /* server_down frees it */
    if (!s)
        exit(2);
    s->srv = srv, s->port = port, s->worker_tmo_us = 100000;
    server_go(s); /* the worker loop: it never gets a native function's batch */
    int ok = 0;
    for (int i = 0; i < N; i++) {
        int n = raw_recv(fd, 2000, rbuf, sizeof(rbuf));
        srpc_hdr_t h;
        if (n > 0 && srpc_hdr_decode(rbuf, (size_t)n, &h) == 0 && h.req_id >= 500 && h.req_id < 500 + N)
            ok += vec_reply_ok(rbuf, n, F_VECADD, h.req_id, in[h.req_id - 500]);
    }
    CHECK(ok == N, "%s: %d of %d native vecadd replies right", mode == SRPC_WAIT_POLL ? "poll" : "block", ok, N);
    srpc_server_stats_t st = stats_settled(s, N);
    CHECK(st.rx_datagrams == N && st.rx_receives == 1 && st.tx_sends == 1 && st.replies == N && st.batches == 2,
          "a burst of %d calls: %lu receives, %lu sends, %lu batches (want 1, 1, 2)", N,
          (unsigned long)st.rx_receives, (unsigned long)st.tx_sends, (unsigned long)st.batches);
    /* One more than the hold takes: a burst of N + 1, received together while the worker is
     * paused, is one receive and two sends (the hold of at most 8 replies, SRPC_REPLY_HOLD_CALLS). */
    atomic_store(&s->paused, 1);
    sleep_us(300000); /* out of next_batch (its timeout is 100 ms) */
    srpc_server_stats_t st0 = stats(s);
    for (int i = 0; i <= N; i++)
        raw_send(fd, port, dg, mk_dg(dg, SRPC_REQUEST, F_VECADD, 600 + (uint64_t)i, 0, 1, 1024, 0, in[i % N], 1024));
    sleep_us(50000);
    atomic_store(&s->paused, 0);
    ok = 0;
    for (int i = 0; i <= N; i++) {
        int n = raw_recv(fd, 2000, rbuf, sizeof(rbuf));
        srpc_hdr_t h;
        if (n > 0 && srpc_hdr_decode(rbuf, (size_t)n, &h) == 0 && h.req_id >= 600 && h.req_id <= 600 + N)
            ok += vec_reply_ok(rbuf, n, F_VECADD, h.req_id, in[(h.req_id - 600) % N]);
    }
    CHECK(ok == N + 1, "%d of %d replies of the second burst right", ok, N + 1);
    st = stats_settled(s, st0.replies + N + 1);
    CHECK(st.rx_receives - st0.rx_receives == 1 && st.tx_sends - st0.tx_sends == 2,
          "a burst of %d calls: %lu receives, %lu sends (want 1, 2)", N + 1,
          (unsigned long)(st.rx_receives - st0.rx_receives), (unsigned long)(st.tx_sends - st0.tx_sends));
    /* Calls one at a time: call 2 of every 7 fails alone, the rest are right. */
    int good = 0, bad_req = 0;
    for (int i = 0; i < 14; i++) {
        raw_send(fd, port, dg, mk_dg(dg, SRPC_REQUEST, F_SUM, 900 + (uint64_t)i, 0, 1, 1024, 0, in[0], 1024));
        int n = raw_recv(fd, 2000, rbuf, sizeof(rbuf));
        good += vec_reply_ok(rbuf, n, F_SUM, 900 + (uint64_t)i, in[0]);
        bad_req += n > 0 && err_reply_ok(rbuf, n, F_SUM, 900 + (uint64_t)i, SRPC_E_BAD_REQUEST, "call 2 of 7");
    }
    CHECK(good == 12 && bad_req == 2, "native fail_call: %d right, %d BAD_REQUEST (want 12, 2)", good, bad_req);
    fail_code = SRPC_E_BUSY; /* the whole batch gets the code it returns */
    raw_send(fd, port, dg, mk_dg(dg, SRPC_REQUEST, F_SUM, 950, 0, 1, 1024, 0, in[0], 1024));
    int n = raw_recv(fd, 2000, rbuf, sizeof(rbuf));
    CHECK(err_reply_ok(rbuf, n, F_SUM, 950, SRPC_E_BUSY, "the native function failed"), "native code BUSY");
    fail_code = 77; /* not an error code: INTERNAL */
    raw_send(fd, port, dg, mk_dg(dg, SRPC_REQUEST, F_SUM, 951, 0, 1, 1024, 0, in[0], 1024));
    n = raw_recv(fd, 2000, rbuf, sizeof(rbuf));
    CHECK(err_reply_ok(rbuf, n, F_SUM, 951, SRPC_E_INTERNAL, "the native function returned an invalid code"),
          "native invalid code -> INTERNAL");
    fail_code = 0;
    close(fd);
    server_down(s);
}

/* A call that times out on the client; its late reply is dropped. */
static void test_client_timeout(void)
{
    const fdef_t *defs[] = {&D_VECADD};
    sopts_t o = {.wait_mode = SRPC_WAIT_BLOCK};
    sctx_t *s = server_up(&o, defs, 1);
    atomic_store(&s->sleep_us, 150000);
    srpc_client_t *c = mk_client(s->port, 0);
    float in[256], out[256];
    fill_floats(in, 256, 0.0f);
    uint32_t len = 0;
    int code = -1;
    uint64_t t0 = now_ns();
    int r = srpc_client_call(c, F_VECADD, in, 1024, out, sizeof(out), &len, &code, 50000);
    double ms = ms_since(t0);
    CHECK(r == -ETIMEDOUT && ms >= 49 && ms < 1000, "timed out: r=%d after %.1f ms", r, ms);
    atomic_store(&s->sleep_us, 0);
    CHECK(wait_completed(s, F_VECADD, 1, 2000), "the timed-out call still ran");
    sleep_us(20000);
    CHECK(addone_call(c, F_VECADD, 256, 1.0f), "next call");
    srpc_client_stats_t cs;
    srpc_client_stats(c, &cs);
    CHECK(cs.timeouts == 1 && cs.late_or_unknown == 1 && cs.replies == 1, "timeouts %llu late %llu replies %llu",
          (unsigned long long)cs.timeouts, (unsigned long long)cs.late_or_unknown, (unsigned long long)cs.replies);
    srpc_client_destroy(c);
    server_down(s);
}

/* Argument checks of the server and client API. */
static void test_api(void)
{
    srpc_server_config_t cfg;
    srpc_server_t *srv = NULL;
    srpc_server_config_init(&cfg);
    cfg.port = 0;
    cfg.seg_size = 0;
    CHECK(srpc_server_create(&cfg, &srv) == -EINVAL, "seg_size 0");
    srpc_server_config_init(&cfg);
    cfg.port = 0;
    cfg.wait_mode = 7;
    CHECK(srpc_server_create(&cfg, &srv) == -EINVAL, "wait_mode 7");
    srpc_server_config_init(&cfg);
    cfg.port = 0;
    cfg.seg_size_loopback = SRPC_MAX_SEG_DATA + 1;
    CHECK(srpc_server_create(&cfg, &srv) == -EINVAL, "seg_size_loopback too large");
    srpc_server_config_init(&cfg);
    cfg.port = 0;
    cfg.wait_mode = SRPC_WAIT_BLOCK;
    CHECK(srpc_server_create(&cfg, &srv) == 0, "create");
    uint32_t sz[2] = {1024, 1024}, zero[1] = {0}, huge[1] = {(1u << 20) + 1};
    srpc_func_config_t fc = {.func_id = 1, .n_in = 1, .n_out = 1, .in_sizes = sz, .out_sizes = sz,
                             .capacity = 4, .max_batch = 0};
    CHECK(srpc_server_add_function(srv, &fc) == -EINVAL, "max_batch 0");
    fc.max_batch = 2;
    fc.n_in = 0;
    CHECK(srpc_server_add_function(srv, &fc) == -EINVAL, "n_in 0");
    fc.n_in = SRPC_MAX_TENSORS + 1;
    CHECK(srpc_server_add_function(srv, &fc) == -EINVAL, "n_in 9");
    fc.n_in = 2;
    fc.raw = 1;
    CHECK(srpc_server_add_function(srv, &fc) == -EINVAL, "raw with 2 inputs");
    fc.raw = 0;
    fc.n_in = 1;
    fc.in_sizes = NULL;
    CHECK(srpc_server_add_function(srv, &fc) == -EINVAL, "no in_sizes");
    fc.in_sizes = zero;
    CHECK(srpc_server_add_function(srv, &fc) == -EINVAL, "fixed input of 0 bytes");
    fc.in_sizes = huge;
    CHECK(srpc_server_add_function(srv, &fc) == -EMSGSIZE, "input over max_message");
    fc.in_sizes = sz;
    CHECK(srpc_server_add_function(srv, &fc) == 0, "add");
    CHECK(srpc_server_add_function(srv, &fc) == -EEXIST, "add twice");
    { /* a reply must number its segments in 16 bits under the longest tail (AEGIS-128L's 48 bytes):
         with S = 1000, 65535 segments of 952 bytes, not of 1000 */
        srpc_server_t *s2;
        srpc_server_config_t c2 = cfg;
        c2.seg_size = c2.seg_size_loopback = 1000;
        uint32_t over[1] = {65535u * (1000 - SRPC_V5_TAIL_MAX) + 1};
        srpc_func_config_t f2 = fc;
        f2.out_sizes = over;
        f2.capacity = 1;
        f2.max_batch = 1;
        CHECK(srpc_server_create(&c2, &s2) == 0, "create with S = 1000");
        CHECK(srpc_server_add_function(s2, &f2) == -EMSGSIZE, "a reply of 65535 segments of 952 bytes and one more");
        over[0]--;
        CHECK(srpc_server_add_function(s2, &f2) == 0, "a reply of 65535 segments of 952 bytes");
        srpc_server_destroy(s2);
    }
    srpc_batch_t b;
    memset(&b, 0, sizeof(b));
    CHECK(srpc_server_next_batch(NULL, &b, 0) == -EINVAL, "next_batch NULL");
    CHECK(srpc_server_complete(srv, &b, 0, NULL) == -EINVAL, "complete an empty batch");
    CHECK(srpc_server_stats(srv, NULL) == -EINVAL, "stats NULL");
    CHECK(srpc_server_start(srv) == 0, "start");
    CHECK(srpc_server_start(srv) == -EINVAL, "start twice");
    fc.func_id = 2;
    CHECK(srpc_server_add_function(srv, &fc) == -EINVAL, "add after start");
    uint64_t t0 = now_ns();
    CHECK(srpc_server_next_batch(srv, &b, 20000) == -ETIMEDOUT, "next_batch times out");
    CHECK(ms_since(t0) >= 19, "waited its timeout");
    CHECK(srpc_server_next_batch(srv, &b, 0) == -ETIMEDOUT, "next_batch with timeout 0");
    b.func_id = 1;
    b.count = 1;
    b.first_seq = 0;
    CHECK(srpc_server_complete(srv, &b, 0, NULL) == -EINVAL, "complete a batch never handed out");
    srpc_server_destroy(srv); /* running: destroy stops it */

    srpc_client_config_t cc;
    srpc_client_config_init(&cc);
    srpc_client_t *c = NULL;
    cc.seg_size = SRPC_MAX_SEG_DATA + 1;
    CHECK(srpc_client_create(&cc, &c) == -EINVAL, "client seg_size too large");
    cc.seg_size = 1;
    cc.port = 9;
    cc.wait_for_ready = 1; /* nobody on port 9: the call waits (test_flow.c has it failing fast) */
    CHECK(srpc_client_create(&cc, &c) == 0, "client");
    uint64_t id = 0;
    static uint8_t buf[65536];
    CHECK(srpc_client_send(c, 1, buf, 65536, 0, &id) == -EMSGSIZE, "65536 segments");
    CHECK(srpc_client_send(c, 1, NULL, 5, 0, &id) == -EINVAL, "NULL data");
    CHECK(srpc_client_wait(c, 12345, 0) == -ENOENT, "wait unknown");
    int code;
    const uint8_t *d;
    uint32_t l;
    CHECK(srpc_client_result(c, 12345, &code, &d, &l) == -ENOENT, "result unknown");
    CHECK(srpc_client_release(c, 12345) == -ENOENT, "release unknown");
    CHECK(srpc_client_call(c, 1, buf, 4, NULL, 4, &l, &code, 1000) == -EINVAL, "call NULL out");
    uint64_t lat[1], errs, el;
    CHECK(srpc_client_closed_loop(c, 1, buf, 4, 0, 0, 1, 1000, lat, &errs, &el) == -EINVAL, "concurrency 0");
    CHECK(srpc_client_send(c, 1, buf, 4, 0, &id) == 0, "send to nobody");
    CHECK(srpc_client_wait(c, id, 10000) == -ETIMEDOUT, "wait times out");
    CHECK(srpc_client_result(c, id, &code, &d, &l) == 0 && code == SRPC_E_PENDING, "pending");
    srpc_client_destroy(c); /* with an unfinished call */
}

/* The native closed-loop driver. */
static void test_closed_loop(sctx_t *s, const char *mode, uint32_t n_calls)
{
    srpc_client_t *c = mk_client(s->port, 0);
    float in[256];
    fill_floats(in, 256, 0.0f);
    static const uint32_t conc[] = {1, 8};
    static uint64_t lat[200];
    for (int i = 0; i < 2; i++) {
        uint64_t errors = 99, elapsed = 0;
        memset(lat, 0, sizeof(lat));
        int r = srpc_client_closed_loop(c, F_VECADD, in, 1024, conc[i], 10, n_calls, TMO_US, lat, &errors, &elapsed);
        uint32_t zero = 0;
        for (uint32_t k = 0; k < n_calls; k++)
            zero += lat[k] == 0;
        CHECK(r == 0 && errors == 0 && zero == 0 && elapsed > 0,
              "%s closed loop concurrency %u: r=%d errors=%llu zero latencies=%u elapsed=%llu", mode, conc[i], r,
              (unsigned long long)errors, zero, (unsigned long long)elapsed);
    }
    srpc_client_stats_t cs;
    srpc_client_stats(c, &cs);
    CHECK(cs.errors == 0 && cs.timeouts == 0, "%s closed loop client errors %llu timeouts %llu", mode,
          (unsigned long long)cs.errors, (unsigned long long)cs.timeouts);
    srpc_client_destroy(c);
}


/* The load generator: open loop with many calls outstanding and reply checks, a reply that
 * differs from the expected one, timeouts against a port where nobody answers, and stop. */
static void test_load_run(sctx_t *s)
{
    enum { N = 3000 };
    static srpc_load_rec_t rec[N];
    static uint32_t order[N];
    static uint64_t sched[N];
    float in[256], want[256];
    fill_floats(in, 256, 2.0f);
    fill_floats(want, 256, 3.0f);
    srpc_client_t *c = mk_client(s->port, 0);
    CHECK(srpc_schedule_fill(SRPC_ARRIVAL_POISSON, 20000.0, 0, 11, sched, N) == 0, "schedule");
    srpc_load_params_t p = {.func_id = F_VECADD, .req = in, .req_len = 1024, .expect = want, .expect_len = 1024,
                            .sched_ns = sched, .n = N, .max_outstanding = 256, .timeout_us = TMO_US};
    srpc_load_progress_t prog = {0, 0, 0};
    uint64_t start = 0;
    CHECK(srpc_load_run(c, &p, rec, order, &prog, &start) == 0 && start > 0, "open loop run");
    uint32_t ok = 0, late = 0, seen_twice = 0;
    static uint8_t seen[N];
    memset(seen, 0, sizeof(seen));
    for (uint32_t i = 0; i < N; i++) {
        ok += rec[i].code == 0 && rec[i].reply_len == 1024;
        late += rec[i].sent_ns < rec[i].sched_ns || rec[i].done_ns < rec[i].sent_ns;
        seen_twice += seen[order[i]]++ != 0;
    }
    CHECK(ok == N && late == 0 && seen_twice == 0 && prog.finished == N && prog.sent == N,
          "open loop: %u ok, %u out of order, %u listed twice, finished %u", ok, late, seen_twice, prog.finished);

    want[7] += 1.0f; /* every reply now differs from the expectation */
    p.n = 50;
    p.concurrency = 4;
    CHECK(srpc_load_run(c, &p, rec, order, &prog, &start) == 0, "closed loop run");
    uint32_t invalid = 0;
    for (uint32_t i = 0; i < 50; i++)
        invalid += rec[i].code == SRPC_E_INVALID && rec[i].sched_ns == rec[i].sent_ns;
    CHECK(invalid == 50, "closed loop: %u of 50 replies flagged invalid", invalid);
    srpc_client_destroy(c);

    /* A bound socket that never reads: every call times out. */
    int sink = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    CHECK(sink >= 0 && bind(sink, (struct sockaddr *)&sa, sl) == 0 && getsockname(sink, (struct sockaddr *)&sa, &sl) == 0,
          "sink socket");
    srpc_client_t *nobody = mk_client(ntohs(sa.sin_port), 0);
    p.n = 20;
    p.timeout_us = 20000;
    uint64_t t0 = now_ns();
    CHECK(srpc_load_run(nobody, &p, rec, order, &prog, &start) == 0, "run against nobody");
    uint32_t tmo = 0;
    for (uint32_t i = 0; i < 20; i++)
        tmo += rec[i].code == SRPC_E_TIMEOUT && rec[i].done_ns - rec[i].sent_ns >= 20000000ull;
    CHECK(tmo == 20 && prog.finished == 20, "timeouts %u of 20 (%.0f ms)", tmo, ms_since(t0));
    prog.stop = 1;
    p.timeout_us = TMO_US;
    CHECK(srpc_load_run(nobody, &p, rec, order, &prog, &start) == 0 && prog.finished == 0 &&
              rec[0].code == SRPC_E_PENDING, "a stopped run leaves calls pending");
    p.n = 0;
    CHECK(srpc_load_run(nobody, &p, rec, order, &prog, &start) == -EINVAL, "n 0");
    p.n = 3;
    p.concurrency = 0;
    p.sched_ns = NULL;
    CHECK(srpc_load_run(nobody, &p, rec, order, &prog, &start) == -EINVAL, "open loop without schedule");
    uint64_t back[3] = {5, 4, 6};
    p.sched_ns = back;
    CHECK(srpc_load_run(nobody, &p, rec, order, &prog, &start) == -EINVAL, "schedule going back");
    srpc_client_destroy(nobody);
    close(sink);
}

/* A request set: calls send different requests (a 1 B one, an empty one, a 3000 B one that
 * takes several datagrams), each reply checked against its own request's expected reply;
 * per-call indices with runs of one request (sent together) and the i % n_reqs default; and
 * every malformed set rejected before anything is sent. */
static void test_load_set(sctx_t *s)
{
    enum { N = 600, BIG = 3000 };
    static srpc_load_rec_t rec[N];
    static uint32_t order[N], idx[N];
    static uint64_t sched[N];
    static uint8_t reqs[1 + BIG], exps[1 + BIG];
    reqs[0] = 'a';
    for (uint32_t i = 0; i < BIG; i++)
        reqs[1 + i] = (uint8_t)(i * 7 + 3);
    memcpy(exps, reqs, sizeof(reqs));
    const uint64_t off[4] = {0, 1, 1, 1 + BIG}, lens[3] = {1, 0, BIG};
    for (uint32_t i = 0; i < N; i++) /* runs of 1..5 calls with the same request */
        idx[i] = (i / (1 + i % 5)) % 3;
    srpc_client_t *c = mk_client(s->port, 0);
    CHECK(srpc_schedule_fill(SRPC_ARRIVAL_POISSON, 20000.0, 0, 5, sched, N) == 0, "set schedule");
    srpc_load_params_t p = {.func_id = F_ECHO, .sched_ns = sched, .n = N, .max_outstanding = 6, /* echo queues 8 */
                            .timeout_us = TMO_US, .n_reqs = 3, .reqs = reqs, .req_off = off, .req_index = idx,
                            .expects = exps, .expect_off = off};
    srpc_load_progress_t prog = {0, 0, 0};
    uint64_t start = 0;
    CHECK(srpc_load_run(c, &p, rec, order, &prog, &start) == 0, "set: open loop run");
    uint32_t ok = 0;
    for (uint32_t i = 0; i < N; i++)
        ok += rec[i].code == 0 && rec[i].reply_len == lens[idx[i]] && rec[i].sent_ns >= rec[i].sched_ns;
    CHECK(ok == N && prog.finished == N, "set: open loop %u of %u replies right", ok, N);

    exps[1 + 1234] ^= 0x10; /* request 2's expected reply is now wrong: exactly its calls are invalid */
    p.req_index = NULL;
    p.concurrency = 6;
    p.n = 300;
    CHECK(srpc_load_run(c, &p, rec, order, &prog, &start) == 0, "set: closed loop run");
    uint32_t right = 0;
    for (uint32_t i = 0; i < 300; i++)
        right += i % 3 == 2 ? rec[i].code == SRPC_E_INVALID && rec[i].reply_len == BIG
                            : rec[i].code == 0 && rec[i].reply_len == lens[i % 3];
    CHECK(right == 300, "set: %u of 300 calls with the outcome of their request (i %% 3)", right);
    p.expects = NULL;
    p.expect_off = NULL;
    p.n = 30;
    CHECK(srpc_load_run(c, &p, rec, order, &prog, &start) == 0, "set: run without expects");
    ok = 0;
    for (uint32_t i = 0; i < 30; i++)
        ok += rec[i].code == 0 && rec[i].reply_len == lens[i % 3];
    CHECK(ok == 30, "set: without expects, %u of 30 ok", ok);
    const uint16_t funcs[3] = {F_ECHO, 4321, F_ECHO}; /* request 1 calls a function nobody serves */
    p.req_func = funcs;
    CHECK(srpc_load_run(c, &p, rec, order, &prog, &start) == 0, "set: run over functions");
    ok = 0;
    for (uint32_t i = 0; i < 30; i++)
        ok += i % 3 == 1 ? rec[i].code == SRPC_E_UNKNOWN_FUNCTION : rec[i].code == 0 && rec[i].reply_len == lens[i % 3];
    CHECK(ok == 30, "set: each call to its request's function, %u of 30", ok);
    p.req_func = NULL;

    /* Malformed parameters: -EINVAL each, before anything is sent. */
    const srpc_load_params_t good = {.func_id = F_ECHO, .concurrency = 2, .n = 6, .timeout_us = TMO_US, .n_reqs = 3,
                                     .reqs = reqs, .req_off = off, .req_index = idx, .expects = exps,
                                     .expect_off = off};
    const uint64_t zero_first[4] = {1, 1, 1, 1 + BIG}, back[4] = {0, 2, 1, 1 + BIG},
                   huge[4] = {0, 1, 1, 1 + (1ull << 32)}, empty[4] = {0, 0, 0, 0};
    const uint32_t bad_idx[6] = {0, 1, 2, 3, 0, 1};
    const char *what[] = {"req and a set", "expect and a set", "a set's arrays without n_reqs", "req_off NULL",
                          "req_off[0] != 0", "req_off decreasing", "a request of 2^32 B", "reqs NULL, requests not empty",
                          "an index >= n_reqs", "expects without expect_off", "expect_off without expects",
                          "expect_off decreasing", "expect_off[0] != 0", "expects' end past 2^32 per reply",
                          "req_func without a set"};
    enum { NBAD = sizeof(what) / sizeof(what[0]) };
    for (int b = 0; b < NBAD; b++) {
        srpc_load_params_t q = good;
        switch (b) {
        case 0: q.req = reqs; q.req_len = 1; break;
        case 1: q.expect = exps; q.expect_len = 1; break;
        case 2: q.n_reqs = 0; break;
        case 3: q.req_off = NULL; break;
        case 4: q.req_off = zero_first; break;
        case 5: q.req_off = back; break;
        case 6: q.req_off = huge; break;
        case 7: q.reqs = NULL; break;
        case 8: q.req_index = bad_idx; break;
        case 9: q.expect_off = NULL; break;
        case 10: q.expects = NULL; break;
        case 11: q.expect_off = back; break;
        case 12: q.expect_off = zero_first; break;
        case 13: q.expect_off = huge; break;
        default: q.n_reqs = 0; q.reqs = NULL; q.req_off = NULL; q.req_index = NULL; q.expects = NULL;
            q.expect_off = NULL; q.req = reqs; q.req_len = 1; q.req_func = funcs; break;
        }
        CHECK(srpc_load_run(c, &q, rec, order, &prog, &start) == -EINVAL, "set: malformed (%s) rejected", what[b]);
    }
    srpc_load_params_t q = good; /* the same set well formed runs; empty requests need no buffer */
    CHECK(srpc_load_run(c, &q, rec, order, &prog, &start) == 0, "set: the well-formed set runs");
    q.reqs = NULL;
    q.req_off = empty;
    q.expects = NULL;
    q.expect_off = NULL;
    CHECK(srpc_load_run(c, &q, rec, order, &prog, &start) == 0 && rec[5].code == 0 && rec[5].reply_len == 0,
          "set: all-empty requests without a buffer");
    srpc_client_destroy(c);
}

/* Completion queues: users of one client each see only their own finished calls. A thread
 * reporting srpc_client_send's calls (as the Python futures do) runs beside two load runs on
 * the same client; before queues, whichever waited first took the others' replies. */
typedef struct {
    srpc_client_t *c;
    int calls, replies;
} cq_user_t;

static void *cq_async_user(void *arg)
{
    cq_user_t *u = arg;
    float in[256];
    fill_floats(in, 256, 1.0f);
    uint64_t ids[16];
    for (int i = 0; i < u->calls; i++) {
        uint64_t id;
        if (srpc_client_send(u->c, F_VECADD, in, 1024, 0, &id) != 0)
            return NULL;
        for (int got = 0; !got;) {
            int n = srpc_client_wait_any(u->c, ids, 16, TMO_US);
            if (n <= 0)
                return NULL;
            for (int k = 0; k < n; k++) {
                got |= ids[k] == id;
                u->replies += ids[k] == id;
                srpc_client_release(u->c, ids[k]);
            }
        }
    }
    return NULL;
}

typedef struct {
    srpc_client_t *c;
    srpc_load_rec_t rec[400];
    uint32_t order[400];
    int rc;
} cq_run_t;

static void *cq_load_user(void *arg)
{
    cq_run_t *r = arg;
    float in[256], want[256];
    fill_floats(in, 256, 2.0f);
    fill_floats(want, 256, 3.0f);
    srpc_load_params_t p = {.func_id = F_VECADD, .req = in, .req_len = 1024, .expect = want, .expect_len = 1024,
                            .concurrency = 4, .n = 400, .timeout_us = TMO_US};
    uint64_t start;
    r->rc = srpc_load_run(r->c, &p, r->rec, r->order, NULL, &start);
    return NULL;
}

static void test_completion_queues(sctx_t *s)
{
    srpc_client_t *c = mk_client(s->port, 0);
    srpc_client_cq_t *a = NULL, *b = NULL;
    CHECK(srpc_client_cq_create(c, &a) == 0 && srpc_client_cq_create(c, &b) == 0 && a && b, "cq create");
    CHECK(srpc_client_cq_create(NULL, &a) == -EINVAL && srpc_client_cq_create(c, NULL) == -EINVAL, "cq create NULL");
    float in[256];
    fill_floats(in, 256, 0.0f);
    uint64_t ia, ib, id, got[8];
    CHECK(srpc_client_send_cq(c, a, F_VECADD, in, 1024, 0, &ia) == 0 &&
              srpc_client_send_cq(c, b, F_VECADD, in, 1024, 0, &ib) == 0 &&
              srpc_client_send(c, F_VECADD, in, 1024, 0, &id) == 0, "send on three queues");
    CHECK(srpc_client_send_cq(c, NULL, F_VECADD, in, 1024, 0, &ia) == -EINVAL, "send to a NULL queue");
    CHECK(srpc_client_wait_cq(c, a, got, 8, TMO_US) == 1 && got[0] == ia, "queue a reports its call only");
    CHECK(srpc_client_wait_any(c, got, 8, TMO_US) == 1 && got[0] == id, "the client's queue reports its call only");
    CHECK(srpc_client_wait_cq(c, a, got, 8, 20000) == 0, "queue a has nothing more");
    CHECK(srpc_client_wait(c, ib, TMO_US) == 0, "b's call finished");
    srpc_client_cq_destroy(c, b); /* b's finished, unreported call: reported nowhere, still released by id */
    CHECK(srpc_client_wait_any(c, got, 8, 20000) == 0, "b's call is not reported on the client's queue");
    CHECK(srpc_client_release(c, ia) == 0 && srpc_client_release(c, ib) == 0 && srpc_client_release(c, id) == 0,
          "release");
    srpc_client_cq_destroy(c, a);
    srpc_client_cq_destroy(c, NULL);

    cq_user_t u = {.c = c, .calls = 300};
    static cq_run_t r1, r2;
    r1.c = r2.c = c;
    pthread_t tu, t1, t2;
    pthread_create(&tu, NULL, cq_async_user, &u);
    pthread_create(&t1, NULL, cq_load_user, &r1);
    pthread_create(&t2, NULL, cq_load_user, &r2);
    pthread_join(tu, NULL);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    uint32_t ok1 = 0, ok2 = 0;
    for (int i = 0; i < 400; i++) {
        ok1 += r1.rec[i].code == 0;
        ok2 += r2.rec[i].code == 0;
    }
    CHECK(u.replies == 300 && r1.rc == 0 && r2.rc == 0 && ok1 == 400 && ok2 == 400,
          "three users of one client: %d of 300 async replies, runs %u and %u of 400 ok", u.replies, ok1, ok2);
    srpc_client_destroy(c);
}

/* srpc_server_stop wakes a worker blocked in next_batch with no timeout. */
static void test_stop(int mode)
{
    const fdef_t *defs[] = {&D_VECADD};
    sopts_t o = {.wait_mode = mode, .worker_tmo_us = -1};
    sctx_t *s = server_up(&o, defs, 1);
    srpc_client_t *c = mk_client(s->port, 0);
    CHECK(addone_call(c, F_VECADD, 256, 1.0f), "call before stop (mode %d)", mode);
    srpc_client_destroy(c);
    for (int i = 0; i < 2000 && !atomic_load(&s->waiting); i++)
        sleep_us(1000);
    sleep_us(20000);
    CHECK(atomic_load(&s->waiting) == 1, "worker waits in next_batch");
    uint64_t t0 = now_ns();
    CHECK(srpc_server_stop(s->srv) == 0, "stop");
    int fin = wait_finished(s, 3000);
    CHECK(fin, "worker woken by stop (mode %d)", mode);
    if (!fin) {
        printf("%d passed, %d failed\n", passed, failed);
        exit(1);
    }
    double ms = ms_since(t0);
    CHECK(ms < 1000, "stop took %.1f ms", ms);
    CHECK(atomic_load(&s->exit_rc) == -ESHUTDOWN, "next_batch returned %d", atomic_load(&s->exit_rc));
    srpc_batch_t b;
    CHECK(srpc_server_next_batch(s->srv, &b, 1000) == -ESHUTDOWN, "next_batch after stop");
    CHECK(srpc_server_stop(s->srv) == 0, "second stop");
    pthread_join(s->th, NULL);
    srpc_server_destroy(s->srv);
    free(s);
}

/* Destroy with calls queued and never taken (leak check). */
static void test_destroy_with_queued(void)
{
    const fdef_t *defs[] = {&D_SMALL};
    sopts_t o = {.wait_mode = SRPC_WAIT_BLOCK, .paused = 1};
    sctx_t *s = server_up(&o, defs, 1);
    srpc_client_t *c = mk_client(s->port, 0);
    float in[256] = {0};
    uint64_t id;
    CHECK(srpc_client_send(c, F_SMALL, in, 1024, 0, &id) == 0, "send");
    CHECK(srpc_client_send(c, F_SMALL, in, 1024, 0, &id) == 0, "send");
    CHECK(wait_rx(s, 2, 2000), "received");
    CHECK(stats(s).calls == 2, "queued");
    /* stop first so the unpaused worker cannot take them */
    CHECK(srpc_server_stop(s->srv) == 0, "stop");
    server_down(s);
    srpc_client_destroy(c); /* with an unfinished call: freed */
}

/* A few cases again with a spinning engine and worker, and with the adaptive mode. */
static void test_mode(int mode, const char *name)
{
    const fdef_t *defs[] = {&D_VECADD, &D_SUM, &D_ECHO, &D_BOOM};
    sopts_t o = {.wait_mode = mode};
    sctx_t *s = server_up(&o, defs, 4);
    srpc_client_t *c = mk_client(s->port, 0);
    CHECK(addone_call(c, F_VECADD, 256, 3.0f), "%s vecadd", name);
    CHECK(sum_call(c, 4.0f), "%s sum", name);
    CHECK(echo_call(c, 1451, 1), "%s echo 1451", name);
    CHECK(echo_call(c, 65001, 2), "%s echo 65001", name);
    float v[256] = {0};
    char text[SRPC_ERRMSG_MAX + 1];
    uint32_t tl;
    CHECK(error_call(c, 99, v, sizeof(v), text, &tl) == SRPC_E_UNKNOWN_FUNCTION, "%s unknown", name);
    CHECK(error_call(c, F_BOOM, v, sizeof(v), text, &tl) == SRPC_E_INTERNAL && strcmp(text, "boom") == 0,
          "%s boom", name);
    CHECK(addone_call(c, F_VECADD, 256, 5.0f), "%s vecadd after boom", name);
    srpc_client_destroy(c);
    test_closed_loop(s, name, 50);
    server_down(s);
}

/* A call's address keeps an IPv6 scope id: fe80::1 on one link and on another are two clients, and
 * a reply goes back on the link its request came from. */
static void test_call_key_scope(void)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(5000), .sin6_scope_id = 2}, b;
    a.sin6_addr.s6_addr[0] = 0xfe;
    a.sin6_addr.s6_addr[1] = 0x80;
    a.sin6_addr.s6_addr[15] = 1;
    b = a;
    b.sin6_scope_id = 3;
    srpc_hdr_t h = {.version = SRPC_VERSION_2, .type = SRPC_REQUEST, .func_id = 1, .req_id = 42, .nseg = 1};
    srpc_call_key_t ka, kb;
    ct_key_from_sockaddr(&ka, (struct sockaddr *)&a, &h);
    ct_key_from_sockaddr(&kb, (struct sockaddr *)&b, &h);
    struct sockaddr_storage back;
    const socklen_t n = ct_key_to_sockaddr(&kb, &back);
    CHECK(n == sizeof(struct sockaddr_in6) && ((struct sockaddr_in6 *)&back)->sin6_scope_id == 3 &&
              memcmp(&((struct sockaddr_in6 *)&back)->sin6_addr, &b.sin6_addr, 16) == 0,
          "a reply's address keeps its request's scope id");
    calltab_t ct;
    CHECK(ct_init(&ct, 16) == 0, "a call table");
    const uint32_t ia = ct_insert(&ct, &ka, CT_PARTIAL);
    CHECK(ia != CT_NONE && ct_find(&ct, &ka) == ia && ct_find(&ct, &kb) == CT_NONE,
          "the same req_id from fe80::1 on another link: another call");
    ct_remove(&ct, ia);
    ct_destroy(&ct);
}

int main(void)
{
    uint64_t t0 = now_ns();
    test_call_key_scope();
    const fdef_t *defs[] = {&D_VECADD, &D_SUM, &D_ECHO, &D_BOOM, &D_DEADLINE, &D_BADSTATUS};
    sopts_t o = {.wait_mode = SRPC_WAIT_BLOCK};
    sctx_t *s = server_up(&o, defs, 6);
    test_happy(s, "block");
    test_errors(s);
    test_segments(s);
    test_closed_loop(s, "block", 200);
    test_load_run(s);
    test_load_set(s);
    test_completion_queues(s);
    server_down(s);

    test_api();
    test_busy(SRPC_WAIT_BLOCK);
    test_busy(SRPC_WAIT_POLL);
    test_malformed();
    test_duplicates();
    test_reasm_timeout(SRPC_WAIT_BLOCK);
    test_reasm_timeout(SRPC_WAIT_POLL);
    test_placement(SRPC_WAIT_BLOCK);
    test_placement(SRPC_WAIT_POLL);
    test_scatter(SRPC_WAIT_BLOCK);
    test_scatter(SRPC_WAIT_POLL);
    test_coalesced(SRPC_WAIT_BLOCK);
    test_coalesced(SRPC_WAIT_POLL);
    test_runs(SRPC_WAIT_BLOCK);
    test_runs(SRPC_WAIT_POLL);
    test_client_timeout();
    test_batching();
    test_hold();
    test_native(SRPC_WAIT_BLOCK);
    test_native(SRPC_WAIT_POLL);
    test_drain();
    test_stop(SRPC_WAIT_BLOCK);
    test_stop(SRPC_WAIT_POLL);
    test_destroy_with_queued();
    test_mode(SRPC_WAIT_POLL, "poll");
    test_mode(SRPC_WAIT_ADAPTIVE, "adaptive");
    fprintf(stderr, "test_engine: %.1f s\n", ms_since(t0) / 1000);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
