/* test_faults.c: the fault injector of testing builds (draws, reordering without loss, one-bit corruption, settings) and calls that all complete through lossy sockets. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
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

#include "transport/faults.h"
#include "splitrpc.h"
#include "transport/udp.h"

#include "check.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double ms_since(uint64_t t0) { return (double)(now_ns() - t0) / 1e6; }

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

#ifdef SRPC_FAULT_INJECTION

/* |got - mean| within 6 standard deviations of a count of about `mean` (Poisson-like). */
static int near(uint64_t got, double mean) { return fabs((double)got - mean) <= 6 * sqrt(mean) + 10; }

static srpc_faults_t *mk_faults(double drop, double dup, double reorder, double corrupt, uint64_t seed)
{
    srpc_faults_cfg_t c = {.drop = drop, .dup = dup, .reorder = reorder, .corrupt = corrupt};
    srpc_faults_t *f = NULL;
    int r = srpc_faults_create(&c, seed, &f);
    CHECK(r == 0 && f, "srpc_faults_create: %d", r);
    if (!f) {
        printf("%d passed, %d failed\n", passed, failed);
        exit(2);
    }
    return f;
}

/* Its number sits after the header bytes, which corruption may change. */
#define NUM_OFF 24

/* Pushes a datagram carrying its number (and filler up to len bytes, at least NUM_OFF + 4). */
static void push_num(srpc_faults_t *f, uint32_t num, uint32_t len)
{
    uint8_t b[64] = {0};
    memcpy(b + NUM_OFF, &num, sizeof(num));
    struct iovec iv = {b, len};
    if (srpc_faults_push(f, &iv, 1, len, NULL, 0, 0) != 0)
        CHECK(0, "push %u", num);
}

/* Pops everything waiting; counts each number seen into seen[] and the datagrams into *out. */
static void pop_all(srpc_faults_t *f, uint8_t *seen, uint32_t n, uint64_t *out, uint32_t *last, uint64_t *inversions)
{
    srpc_fault_dgram_t *d;
    while ((d = srpc_faults_pop(f)) != NULL) {
        uint32_t num;
        memcpy(&num, d->bytes + NUM_OFF, sizeof(num));
        if (num < n && seen[num] < 255)
            seen[num]++;
        if (num < *last)
            (*inversions)++;
        *last = num;
        (*out)++;
        free(d);
    }
}

/* ------------------------------------------------------------------ the injector alone */

static void test_settings(void)
{
    const double bad[] = {NAN, -0.01, 1.01, INFINITY, -INFINITY};
    srpc_faults_t *f = NULL;
    for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        for (int field = 0; field < 4; field++) {
            srpc_faults_cfg_t c = {0};
            double *p[4] = {&c.drop, &c.dup, &c.reorder, &c.corrupt};
            *p[field] = bad[i];
            CHECK(srpc_faults_cfg_check(&c) == -EINVAL, "bad value %g in field %d accepted", bad[i], field);
            CHECK(srpc_faults_create(&c, 1, &f) == -EINVAL && !f, "create with %g in field %d", bad[i], field);
        }
    srpc_faults_cfg_t edge = {.drop = 0, .dup = 1, .reorder = 0.5, .corrupt = 1};
    CHECK(srpc_faults_cfg_check(&edge) == 0, "0, 1 and 0.5 are probabilities");
    CHECK(srpc_faults_cfg_check(NULL) == -EINVAL, "NULL settings");
    CHECK(srpc_faults_create(&edge, 1, NULL) == -EINVAL, "NULL out");
    srpc_faults_destroy(NULL);
}

/* The counts of a long stream for a fixed seed, against what the probabilities predict. */
static void test_counts(void)
{
    const uint32_t N = 200000;
    const double pd = 0.3, pu = 0.1, pr = 0.1, pc = 0.05;
    srpc_faults_t *f = mk_faults(pd, pu, pr, pc, 42);
    uint8_t *seen = calloc(N, 1);
    uint64_t out = 0, inv = 0;
    uint32_t last = 0;
    for (uint32_t i = 0; i < N; i++) {
        push_num(f, i, 32);
        if (i % 7 == 0)
            pop_all(f, seen, N, &out, &last, &inv);
    }
    srpc_faults_release(f);
    pop_all(f, seen, N, &out, &last, &inv);
    srpc_fault_counts_t c;
    srpc_faults_counts(f, &c);
    /* Among the datagrams kept (1 - pd), a fraction h is held back, with h = pr (1 - h): the
     * one after a held datagram releases it and cannot be held itself. */
    double kept = N * (1 - pd), h = pr / (1 + pr);
    CHECK(c.in == N, "in %llu", (unsigned long long)c.in);
    CHECK(near(c.dropped, N * pd), "dropped %llu, expected about %.0f", (unsigned long long)c.dropped, N * pd);
    CHECK(near(c.corrupted, kept * pc), "corrupted %llu, expected about %.0f", (unsigned long long)c.corrupted,
          kept * pc);
    CHECK(near(c.reordered, kept * h), "reordered %llu, expected about %.0f", (unsigned long long)c.reordered,
          kept * h);
    CHECK(near(c.duplicated, kept * (1 - h) * pu), "duplicated %llu, expected about %.0f",
          (unsigned long long)c.duplicated, kept * (1 - h) * pu);
    CHECK(out == c.in - c.dropped + c.duplicated, "out %llu != in - dropped + duplicated", (unsigned long long)out);
    CHECK(c.discarded == 0 && srpc_faults_pending(f) == 0, "nothing left");
    uint64_t zero = 0, twice = 0, more = 0;
    for (uint32_t i = 0; i < N; i++) {
        zero += seen[i] == 0;
        twice += seen[i] == 2;
        more += seen[i] > 2;
    }
    CHECK(zero == c.dropped && twice == c.duplicated && more == 0, "per datagram: %llu lost, %llu twice, %llu more",
          (unsigned long long)zero, (unsigned long long)twice, (unsigned long long)more);
    CHECK(inv > 0, "no datagram came out of order");
    srpc_faults_destroy(f);

    /* The same seed draws the same fates; another seed others. */
    srpc_fault_counts_t a, b, d;
    srpc_faults_t *fa = mk_faults(pd, pu, pr, pc, 7), *fb = mk_faults(pd, pu, pr, pc, 7),
                  *fd = mk_faults(pd, pu, pr, pc, 8);
    for (uint32_t i = 0; i < 5000; i++) {
        push_num(fa, i, 32);
        push_num(fb, i, 32);
        push_num(fd, i, 32);
    }
    srpc_faults_counts(fa, &a);
    srpc_faults_counts(fb, &b);
    srpc_faults_counts(fd, &d);
    CHECK(memcmp(&a, &b, sizeof(a)) == 0, "same seed, different counts");
    CHECK(a.dropped != d.dropped || a.duplicated != d.duplicated || a.reordered != d.reordered,
          "another seed, the same counts");
    srpc_faults_destroy(fa);
    srpc_faults_destroy(fb);
    srpc_faults_destroy(fd);
    free(seen);
}

/* Reordering alone: every datagram comes out exactly once, some out of order, whether the
 * stream is taken datagram by datagram, in bursts, or with releases in between. */
static void test_reorder_keeps_all(void)
{
    const uint32_t N = 20000;
    for (int mode = 0; mode < 3; mode++) {
        srpc_faults_t *f = mk_faults(0, 0, 0.5, 0, 100 + (uint64_t)mode);
        uint8_t *seen = calloc(N, 1);
        uint64_t out = 0, inv = 0;
        uint32_t last = 0;
        for (uint32_t i = 0; i < N; i++) {
            push_num(f, i, 28);
            if (mode == 0 || (mode == 1 && rnd() % 5 == 0))
                pop_all(f, seen, N, &out, &last, &inv);
            if (mode == 2 && rnd() % 3 == 0) { /* as a burst that found the socket empty */
                srpc_faults_release(f);
                pop_all(f, seen, N, &out, &last, &inv);
            }
        }
        srpc_faults_release(f);
        pop_all(f, seen, N, &out, &last, &inv);
        srpc_fault_counts_t c;
        srpc_faults_counts(f, &c);
        uint32_t once = 0;
        for (uint32_t i = 0; i < N; i++)
            once += seen[i] == 1;
        CHECK(once == N && out == N, "mode %d: %u of %u came out once, %llu in all", mode, once, N,
              (unsigned long long)out);
        CHECK(c.reordered > N / 5 && inv > 0 && inv <= c.reordered, "mode %d: reordered %llu, inversions %llu",
              mode, (unsigned long long)c.reordered, (unsigned long long)inv);
        CHECK(c.dropped == 0 && c.duplicated == 0 && c.corrupted == 0 && c.discarded == 0, "mode %d: other faults",
              mode);
        srpc_faults_destroy(f);
        free(seen);
    }

    /* A held datagram is not lost by discarding: it is freed and counted. */
    srpc_faults_t *f = mk_faults(0, 0, 1, 0, 5);
    push_num(f, 1, 28);
    CHECK(srpc_faults_pending(f) == 0, "the first datagram is held back");
    push_num(f, 2, 28); /* cannot be held (one is): it comes out, then the held one */
    srpc_fault_dgram_t *a = srpc_faults_pop(f), *b = srpc_faults_pop(f);
    uint32_t na = 0, nb = 0;
    if (a)
        memcpy(&na, a->bytes + NUM_OFF, 4);
    if (b)
        memcpy(&nb, b->bytes + NUM_OFF, 4);
    CHECK(a && b && na == 2 && nb == 1, "held datagram after the next one: %u then %u", na, nb);
    free(a);
    free(b);
    push_num(f, 3, 28); /* held */
    srpc_faults_discard(f);
    srpc_fault_counts_t c;
    srpc_faults_counts(f, &c);
    CHECK(c.discarded == 1 && c.reordered == 2 && !srpc_faults_pop(f), "discarded %llu", (unsigned long long)c.discarded);
    srpc_faults_destroy(f);

    /* Destroying with datagrams held and waiting frees them (ASan would report a leak). */
    f = mk_faults(0, 1, 0.5, 0, 6);
    for (uint32_t i = 0; i < 9; i++)
        push_num(f, i, 40);
    srpc_faults_destroy(f);
}

/* Corruption flips exactly one bit, in the first min(len, 22) bytes, of the copy only; every
 * header bit gets its turn. */
static void test_corrupt(void)
{
    srpc_faults_t *f = mk_faults(0, 0, 0, 1, 9);
    unsigned hits[SRPC_HDR_LEN * 8] = {0};
    int bad = 0;
    struct sockaddr_in src = {.sin_family = AF_INET, .sin_port = htons(4242)};
    src.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int t = 0; t < 20000 && bad < 5; t++) {
        uint8_t in[100], keep[100];
        uint32_t len = t < 200 ? 1 + (uint32_t)(rnd() % SRPC_HDR_LEN) : 1 + (uint32_t)(rnd() % sizeof(in));
        for (uint32_t i = 0; i < len; i++)
            in[i] = (uint8_t)rnd();
        memcpy(keep, in, len);
        struct iovec iv[2] = {{in, len / 2}, {in + len / 2, len - len / 2}}; /* gathered from two pieces */
        if (srpc_faults_push(f, iv, 2, len, (struct sockaddr *)&src, sizeof(src), MSG_TRUNC) != 0)
            CHECK(0, "push");
        srpc_fault_dgram_t *d = srpc_faults_pop(f);
        if (!d) {
            bad++;
            CHECK(0, "nothing came out");
            continue;
        }
        int flips = 0, where = -1;
        for (uint32_t i = 0; i < len && d->len == len; i++)
            for (int b = 0; b < 8; b++)
                if ((d->bytes[i] ^ in[i]) >> b & 1) {
                    flips++;
                    where = (int)i * 8 + b;
                }
        uint32_t span = len < SRPC_HDR_LEN ? len : SRPC_HDR_LEN;
        if (d->len != len || flips != 1 || where < 0 || where >= (int)span * 8 || memcmp(in, keep, len) != 0 ||
            d->addrlen != sizeof(src) || memcmp(&d->addr, &src, sizeof(src)) != 0 || d->flags != MSG_TRUNC) {
            bad++;
            CHECK(0, "len %u: %d bits flipped, at bit %d, came out %u bytes", len, flips, where, d->len);
        } else {
            hits[where]++;
        }
        free(d);
    }
    unsigned missed = 0;
    for (unsigned i = 0; i < SRPC_HDR_LEN * 8; i++)
        missed += hits[i] == 0;
    CHECK(missed == 0, "%u header bits never flipped", missed);
    srpc_fault_counts_t c;
    srpc_faults_counts(f, &c);
    CHECK(c.corrupted == c.in && c.in > 0, "corrupted %llu of %llu", (unsigned long long)c.corrupted,
          (unsigned long long)c.in);
    srpc_faults_destroy(f);
}

/* ------------------------------------------------------------------ the transport's hooks */

static int plain_sock(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof(a);
    int sz = 8 << 20;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || getsockname(fd, (struct sockaddr *)&a, &l) != 0) {
        fprintf(stderr, "plain socket: %s\n", strerror(errno));
        exit(2);
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    *port = ntohs(a.sin_port);
    return fd;
}

/* What arrives through an RX injector: each datagram zero, one or two times as the counters
 * say, bytes and source intact, the held one let out when the socket runs dry. */
static void test_rx_hook(void)
{
    const uint32_t N = 3000;
    srpc_udp_t u;
    memset(&u, 0xab, sizeof(u)); /* srpc_udp_open must not trust what was there */
    int r = srpc_udp_open(&u, "127.0.0.1", 0, 1, 4 << 20);
    CHECK(r == 0 && !u.rx_faults && !u.tx_faults, "open: %d", r);
    srpc_faults_cfg_t c = {.drop = 0.2, .dup = 0.2, .reorder = 0.3};
    CHECK(srpc_udp_set_faults(&u, &c, NULL, 11) == 0, "set faults");
    srpc_rx_t rx;
    CHECK(srpc_rx_init(&rx, 8, 2048) == 0, "rx init");
    uint16_t sport;
    int s = plain_sock(&sport);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)srpc_udp_local_port(&u))};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    uint8_t *seen = calloc(N, 1);
    uint32_t got = 0, bad = 0;
    for (uint32_t i = 0; i < N; i++) {
        uint8_t b[64];
        uint32_t len = 4 + i % 50; /* some shorter than a header */
        for (uint32_t k = 0; k < len; k++)
            b[k] = (uint8_t)(i * 7 + k);
        memcpy(b, &i, 4);
        if (sendto(s, b, len, 0, (struct sockaddr *)&to, sizeof(to)) != (ssize_t)len)
            CHECK(0, "sendto: %s", strerror(errno));
        if (i % 100 != 99 && i != N - 1)
            continue;
        for (int idle = 0; idle < 50;) { /* drain what was sent */
            int n = srpc_udp_rx_burst(&u, &rx, 0);
            if (n <= 0) {
                idle++;
                usleep(200);
                continue;
            }
            for (int j = 0; j < n; j++) {
                uint32_t len2 = rx.len[j], num;
                uint8_t whole[64];
                uint32_t hl = len2 < SRPC_HDR_LEN ? len2 : SRPC_HDR_LEN;
                memcpy(whole, srpc_rx_hdr(&rx, (unsigned)j), hl);
                memcpy(whole + hl, srpc_rx_data(&rx, (unsigned)j), len2 - hl);
                memcpy(&num, whole, 4);
                const struct sockaddr_in *from = (const struct sockaddr_in *)&rx.src[j];
                int ok = num < N && len2 == 4 + num % 50 && from->sin_port == htons(sport) &&
                         rx.srclen[j] == sizeof(*from);
                for (uint32_t k = 4; ok && k < len2; k++)
                    ok = whole[k] == (uint8_t)(num * 7 + k);
                if (!ok) {
                    bad++;
                    continue;
                }
                seen[num]++;
                got++;
            }
        }
    }
    srpc_fault_counts_t rc, tc;
    CHECK(srpc_udp_fault_counts(&u, &rc, &tc) == 0, "counts");
    uint32_t zero = 0, twice = 0, more = 0;
    for (uint32_t i = 0; i < N; i++) {
        zero += seen[i] == 0;
        twice += seen[i] == 2;
        more += seen[i] > 2;
    }
    CHECK(bad == 0, "%u datagrams came out damaged", bad);
    CHECK(rc.in == N && got == rc.in - rc.dropped + rc.duplicated, "in %llu, got %u",
          (unsigned long long)rc.in, got);
    CHECK(zero == rc.dropped && twice == rc.duplicated && more == 0, "%u lost (%llu dropped), %u twice (%llu)", zero,
          (unsigned long long)rc.dropped, twice, (unsigned long long)rc.duplicated);
    CHECK(rc.reordered > 0 && rc.dropped > 0 && rc.duplicated > 0, "faults happened");
    CHECK(tc.in == 0, "no TX injector, no TX counts");
    srpc_rx_free(&rx);
    srpc_udp_close(&u);
    close(s);
    free(seen);
}

/* What leaves through a TX injector: srpc_udp_send_msg counts every segment as sent, each
 * arrives zero, one or two times, and the held one leaves at the next receive. */
static void test_tx_hook(void)
{
    const uint32_t N = 1500;
    uint16_t port;
    int s = plain_sock(&port);
    srpc_udp_t u;
    int r = srpc_udp_open(&u, "127.0.0.1", port, 0, 4 << 20);
    CHECK(r == 0, "open: %d", r);
    srpc_faults_cfg_t c = {.drop = 0.2, .dup = 0.2, .reorder = 0.3};
    CHECK(srpc_udp_set_faults(&u, NULL, &c, 12) == 0, "set faults");
    static uint8_t data[3 * 1000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 13);
    uint8_t *seen = calloc(N * 3, 1);
    uint32_t segs = 0, got = 0, bad = 0;
    for (uint32_t i = 0; i < N; i++) { /* every tenth message has 3 segments */
        uint32_t len = i % 10 == 0 ? sizeof(data) : 100;
        srpc_hdr_t h = {.type = SRPC_RESPONSE, .func_id = 1, .req_id = i};
        struct iovec iv = {data, len};
        int n = srpc_udp_send_msg(&u, NULL, 0, &h, &iv, 1, len, 1000);
        if (n != (i % 10 == 0 ? 3 : 1))
            CHECK(0, "send_msg %u: %d", i, n);
        segs += n > 0 ? (uint32_t)n : 0;
        if (i % 20 != 19 && i != N - 1)
            continue;
        srpc_rx_t rx; /* a receive on the sending socket lets the held datagram out */
        if (i == N - 1 && srpc_rx_init(&rx, 4, 2048) == 0) {
            CHECK(srpc_udp_rx_burst(&u, &rx, 0) == -EAGAIN, "nothing to receive");
            srpc_rx_free(&rx);
        }
        uint8_t b[2048];
        int n2;
        struct pollfd p = {.fd = s, .events = POLLIN};
        while (poll(&p, 1, i == N - 1 ? 50 : 1) > 0 && (n2 = (int)recv(s, b, sizeof(b), MSG_DONTWAIT)) >= 0) {
            /* v1 header fields by offset: req_id at 4 (8 bytes), seq at 12 (2 bytes) */
            uint32_t id = (uint32_t)b[8] << 24 | (uint32_t)b[9] << 16 | (uint32_t)b[10] << 8 | b[11];
            uint32_t seq = (uint32_t)b[12] << 8 | b[13];
            uint32_t want = id % 10 == 0 ? 1000 : 100;
            if (n2 < SRPC_HDR_LEN || id >= N || seq >= 3 || (uint32_t)n2 != SRPC_HDR_LEN + want ||
                memcmp(b + SRPC_HDR_LEN, data + seq * 1000, want) != 0) {
                bad++;
                continue;
            }
            seen[id * 3 + seq]++;
            got++;
        }
    }
    srpc_fault_counts_t tc;
    CHECK(srpc_udp_fault_counts(&u, NULL, &tc) == 0, "counts");
    uint32_t zero = 0, twice = 0, more = 0;
    for (uint32_t i = 0; i < N; i++)
        for (uint32_t k = 0; k < (i % 10 == 0 ? 3u : 1u); k++) {
            zero += seen[i * 3 + k] == 0;
            twice += seen[i * 3 + k] == 2;
            more += seen[i * 3 + k] > 2;
        }
    CHECK(bad == 0, "%u datagrams came out damaged", bad);
    CHECK(tc.in == segs && got == tc.in - tc.dropped + tc.duplicated && tc.discarded == 0,
          "in %llu of %u segments, got %u", (unsigned long long)tc.in, segs, got);
    CHECK(zero == tc.dropped && twice == tc.duplicated && more == 0, "%u lost (%llu dropped), %u twice (%llu)", zero,
          (unsigned long long)tc.dropped, twice, (unsigned long long)tc.duplicated);
    CHECK(tc.reordered > 0 && tc.dropped > 0 && tc.duplicated > 0, "faults happened");

    /* A datagram still held when the socket closes is freed (ASan: no leak). */
    c = (srpc_faults_cfg_t){.reorder = 1};
    CHECK(srpc_udp_set_faults(&u, NULL, &c, 13) == 0, "set faults again");
    srpc_hdr_t h = {.type = SRPC_RESPONSE, .func_id = 1, .req_id = 1};
    struct iovec iv = {data, 10};
    CHECK(srpc_udp_send_msg(&u, NULL, 0, &h, &iv, 1, 10, 1000) == 1, "send into the hold");
    CHECK(srpc_udp_fault_counts(&u, NULL, &tc) == 0 && tc.reordered == 1, "held");
    srpc_udp_close(&u);
    close(s);
    free(seen);
}

/* ------------------------------------------------------------------ end to end */

enum { F_VECADD = 1, F_ECHO = 3 };
#define ECHO_MAX (256u << 10)
#define BIG 200000u

typedef struct srv_ctx {
    srpc_server_t *srv;
    pthread_t th;
    atomic_int exit_rc, finished;
} srv_ctx_t;

static void run_batch(srpc_server_t *srv, srpc_batch_t *b)
{
    if (b->func_id == F_ECHO) {
        for (uint32_t i = 0; i < b->count; i++) {
            memcpy(b->out[0] + (size_t)i * ECHO_MAX, b->in[0] + (size_t)i * ECHO_MAX, b->in_len[i]);
            b->out_len[i] = b->in_len[i];
        }
    } else {
        const float *x = (const float *)b->in[0];
        float *o = (float *)b->out[0];
        for (size_t i = 0; i < (size_t)b->count * 256; i++)
            o[i] = x[i] + 1.0f;
    }
    srpc_server_complete(srv, b, 0, NULL);
}

static void *worker_main(void *p)
{
    srv_ctx_t *s = p;
    for (;;) {
        srpc_batch_t b;
        int r = srpc_server_next_batch(s->srv, &b, 100000);
        if (r == -ETIMEDOUT)
            continue;
        if (r != 0) {
            atomic_store(&s->exit_rc, r);
            break;
        }
        run_batch(s->srv, &b);
    }
    atomic_store(&s->finished, 1);
    return NULL;
}

/* A server with vecadd (float32[256] + 1) and a raw echo of up to 256 KiB, faults set. */
static srv_ctx_t *server_up(const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx, uint64_t seed)
{
    srv_ctx_t *s = calloc(1, sizeof(*s));
    srpc_server_config_t cfg;
    srpc_server_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.wait_mode = SRPC_WAIT_BLOCK;
    int r = s ? srpc_server_create(&cfg, &s->srv) : -ENOMEM;
    CHECK(r == 0, "srpc_server_create: %d", r);
    if (r) {
        printf("%d passed, %d failed\n", passed, failed);
        exit(2);
    }
    uint32_t vin = 1024, ein = ECHO_MAX;
    srpc_func_config_t v = {.func_id = F_VECADD, .n_in = 1, .n_out = 1, .in_sizes = &vin, .out_sizes = &vin,
                            .capacity = 256, .max_batch = 32};
    srpc_func_config_t e = {.func_id = F_ECHO, .raw = 1, .n_in = 1, .n_out = 1, .in_sizes = &ein, .out_sizes = &ein,
                            .capacity = 8, .max_batch = 4};
    CHECK(srpc_server_add_function(s->srv, &v) == 0 && srpc_server_add_function(s->srv, &e) == 0, "functions");
    CHECK((r = srpc_server_set_faults(s->srv, rx, tx, seed)) == 0, "server faults: %d", r);
    CHECK(srpc_server_start(s->srv) == 0, "start");
    CHECK(srpc_server_set_faults(s->srv, rx, tx, seed) == -EBUSY, "faults set on a running server");
    if (pthread_create(&s->th, NULL, worker_main, s) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        exit(2);
    }
    return s;
}

static void server_down(srv_ctx_t *s)
{
    CHECK(srpc_server_stop(s->srv) == 0, "stop");
    for (int i = 0; i < 3000 && !atomic_load(&s->finished); i++)
        usleep(1000);
    if (!atomic_load(&s->finished)) {
        CHECK(0, "worker did not leave next_batch");
        printf("%d passed, %d failed\n", passed, failed);
        exit(1);
    }
    pthread_join(s->th, NULL);
    CHECK(atomic_load(&s->exit_rc) == -ESHUTDOWN, "worker exit %d", atomic_load(&s->exit_rc));
    srpc_server_destroy(s->srv);
    free(s);
}

/* A retransmitting client: segments of 4 KiB (under SRPC_DIRECT_MIN, so the server's RX
 * faults see every datagram), short timeouts, practically endless retries. */
static srpc_client_t *client_up(int port, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx, uint64_t seed)
{
    srpc_client_config_t cfg;
    srpc_client_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = (uint16_t)port;
    cfg.seg_size = 4096;
    cfg.retries = 100000;
    cfg.rto_min_us = 2000;
    cfg.rto_initial_us = 10000;
    cfg.rto_max_us = 10000;
    srpc_client_t *c = NULL;
    int r = srpc_client_create(&cfg, &c);
    CHECK(r == 0, "srpc_client_create: %d", r);
    if (r) {
        printf("%d passed, %d failed\n", passed, failed);
        exit(2);
    }
    CHECK((r = srpc_client_set_faults(c, rx, tx, seed)) == 0, "client faults: %d", r);
    return c;
}

/* The request of call i: float32[256] (all the same when `same`: a corrupted req_id may then
 * pair a request with another call's id without changing the answer), or echo bytes. */
static void fill_request(uint8_t *buf, uint32_t len, uint32_t i, int same)
{
    if (len == 1024) {
        float *v = (float *)buf;
        for (int j = 0; j < 256; j++)
            v[j] = same ? (float)j : (float)(i * 3 + (uint32_t)j);
    } else {
        for (uint32_t j = 0; j < len; j++)
            buf[j] = (uint8_t)(j * 31 + i + (j >> 9));
    }
}

static int reply_ok(const uint8_t *req, uint32_t len, int code, const uint8_t *out, uint32_t out_len)
{
    if (code != 0 || out_len != len)
        return 0;
    if (len != 1024)
        return memcmp(req, out, len) == 0;
    for (int j = 0; j < 256; j++) {
        float a, b;
        memcpy(&a, req + 4 * j, 4);
        memcpy(&b, out + 4 * j, 4);
        if (b != a + 1.0f)
            return 0;
    }
    return 1;
}

/* n calls of len bytes (1024: vecadd, else echo) with up to conc outstanding; returns how
 * many completed with the right answer within limit_ms. */
static uint32_t run_calls(srpc_client_t *c, uint32_t n, uint32_t len, uint32_t conc, int same, int limit_ms)
{
    enum { MAXC = 64 };
    uint64_t ids[MAXC], idx[MAXC], done_ids[MAXC];
    int busy[MAXC] = {0};
    uint8_t *req = malloc((size_t)MAXC * len);
    uint32_t sent = 0, finished = 0, right = 0;
    uint64_t until = now_ns() + (uint64_t)limit_ms * 1000000;
    if (conc > MAXC)
        conc = MAXC;
    while (finished < n && now_ns() < until) {
        for (uint32_t k = 0; k < conc && sent < n; k++) {
            if (busy[k])
                continue;
            fill_request(req + (size_t)k * len, len, sent, same);
            int r = srpc_client_send(c, len == 1024 ? F_VECADD : F_ECHO, req + (size_t)k * len, len, 0, &ids[k]);
            if (r) {
                CHECK(0, "send: %d", r);
                free(req);
                return right;
            }
            idx[k] = sent++;
            busy[k] = 1;
        }
        int m = srpc_client_wait_any(c, done_ids, MAXC, 200000);
        for (int j = 0; j < m; j++) {
            uint32_t k = 0;
            while (k < conc && !(busy[k] && ids[k] == done_ids[j]))
                k++;
            if (k == conc) {
                CHECK(0, "a finished call nobody sent");
                continue;
            }
            int code = -1;
            const uint8_t *out = NULL;
            uint32_t ol = 0;
            srpc_client_result(c, ids[k], &code, &out, &ol);
            if (reply_ok(req + (size_t)k * len, len, code, out, ol))
                right++;
            else if (right + 5 > finished) /* print the first few only */
                fprintf(stderr, "call %llu (%u bytes): code %d, %u bytes back\n", (unsigned long long)idx[k], len,
                        code, ol);
            srpc_client_release(c, ids[k]);
            busy[k] = 0;
            finished++;
        }
    }
    for (uint32_t k = 0; k < conc; k++)
        if (busy[k])
            srpc_client_release(c, ids[k]);
    free(req);
    return right;
}

static void print_counts(const char *who, const srpc_fault_counts_t *c)
{
    printf("  %-10s in %6llu dropped %5llu dup %5llu reordered %5llu corrupted %5llu discarded %llu\n", who,
           (unsigned long long)c->in, (unsigned long long)c->dropped, (unsigned long long)c->duplicated,
           (unsigned long long)c->reordered, (unsigned long long)c->corrupted, (unsigned long long)c->discarded);
}

/* One scenario: the same faults on both sides, both ways; n_small vecadd calls and n_big echo
 * calls of about 200 KB; every call must complete with the right answer. */
static void scenario(const char *name, srpc_faults_cfg_t f, uint32_t n_small, uint32_t n_big, int same)
{
    uint64_t t0 = now_ns();
    srv_ctx_t *s = server_up(&f, &f, 1000 + n_small);
    srpc_client_t *c = client_up(srpc_server_port(s->srv), &f, &f, 2000 + n_small);
    uint32_t ok = run_calls(c, n_small, 1024, 32, same, 60000);
    CHECK(ok == n_small, "%s: %u of %u vecadd calls right", name, ok, n_small);
    if (n_big) {
        ok = run_calls(c, n_big, BIG + 17, 4, 0, 60000);
        CHECK(ok == n_big, "%s: %u of %u calls of %u bytes right", name, ok, n_big, BIG + 17);
    }
    srpc_fault_counts_t cr, ct, sr, st;
    CHECK(srpc_client_fault_counts(c, &cr, &ct) == 0 && srpc_server_fault_counts(s->srv, &sr, &st) == 0, "counts");
    srpc_client_stats_t cs;
    srpc_client_stats(c, &cs);
    printf("%s: %u + %u calls in %.0f ms, %llu retransmissions\n", name, n_small, n_big, ms_since(t0),
           (unsigned long long)cs.retransmits);
    print_counts("client rx", &cr);
    print_counts("client tx", &ct);
    print_counts("server rx", &sr);
    print_counts("server tx", &st);
    const srpc_fault_counts_t *all[4] = {&cr, &ct, &sr, &st};
    for (int i = 0; i < 4; i++) {
        const srpc_fault_counts_t *k = all[i];
        CHECK(k->in > 0 && (f.drop == 0 || k->dropped > 0) && (f.dup == 0 || k->duplicated > 0) &&
                  (f.reorder == 0 || k->reordered > 0) && (f.corrupt == 0 || k->corrupted > 0),
              "%s: injector %d did not inject every fault it was given", name, i);
        CHECK(f.drop == 0 || near(k->dropped, (double)k->in * f.drop), "%s: injector %d dropped %llu of %llu", name,
              i, (unsigned long long)k->dropped, (unsigned long long)k->in);
    }
    CHECK(cs.retransmits > 0, "%s: no retransmission", name);
    srpc_client_destroy(c);
    server_down(s);
}

static void test_api(void)
{
    srpc_faults_cfg_t good = {.drop = 0.1}, bad = {.drop = NAN};
    srpc_fault_counts_t rc, tc;
    CHECK(srpc_server_set_faults(NULL, &good, NULL, 1) == -EINVAL, "NULL server");
    CHECK(srpc_client_set_faults(NULL, &good, NULL, 1) == -EINVAL, "NULL client");
    CHECK(srpc_server_fault_counts(NULL, &rc, &tc) == -EINVAL, "NULL server counts");
    CHECK(srpc_client_fault_counts(NULL, &rc, &tc) == -EINVAL, "NULL client counts");
    srpc_server_config_t sc;
    srpc_server_config_init(&sc);
    sc.host = "127.0.0.1";
    sc.port = 0;
    srpc_server_t *srv = NULL;
    CHECK(srpc_server_create(&sc, &srv) == 0, "server");
    if (!srv)
        return;
    CHECK(srpc_server_set_faults(srv, &bad, NULL, 1) == -EINVAL, "NaN accepted (rx)");
    CHECK(srpc_server_set_faults(srv, NULL, &bad, 1) == -EINVAL, "NaN accepted (tx)");
    CHECK(srpc_server_fault_counts(srv, &rc, &tc) == 0 && rc.in == 0 && tc.in == 0, "no injectors: zeros");
    CHECK(srpc_server_set_faults(srv, &good, &good, 1) == 0, "set");
    CHECK(srpc_server_set_faults(srv, &good, NULL, 2) == 0, "set again (replaces)");
    CHECK(srpc_server_fault_counts(srv, &rc, NULL) == 0, "rx counts only");
    srpc_client_config_t cc;
    srpc_client_config_init(&cc);
    cc.host = "127.0.0.1";
    cc.port = (uint16_t)srpc_server_port(srv);
    srpc_client_t *cl = NULL;
    CHECK(srpc_client_create(&cc, &cl) == 0, "client");
    if (cl) {
        srpc_faults_cfg_t neg = {.reorder = -1}, big = {.corrupt = 2};
        CHECK(srpc_client_set_faults(cl, &neg, NULL, 1) == -EINVAL, "-1 accepted");
        CHECK(srpc_client_set_faults(cl, NULL, &big, 1) == -EINVAL, "2 accepted");
        CHECK(srpc_client_set_faults(cl, NULL, &good, 1) == 0, "client set");
        CHECK(srpc_client_fault_counts(cl, NULL, &tc) == 0 && tc.in == 0, "client counts");
        srpc_client_destroy(cl);
    }
    srpc_server_destroy(srv); /* frees the injectors (ASan: no leak) */
}

#else /* no SRPC_FAULT_INJECTION */

/* Without fault injection compiled in, the public setters say so. */
static void test_unsupported(void)
{
    srpc_server_config_t sc;
    srpc_server_config_init(&sc);
    sc.host = "127.0.0.1";
    sc.port = 0;
    srpc_server_t *srv = NULL;
    CHECK(srpc_server_create(&sc, &srv) == 0, "server");
    srpc_faults_cfg_t f = {.drop = 0.3};
    srpc_fault_counts_t rc, tc;
    CHECK(srpc_server_set_faults(srv, &f, &f, 1) == -ENOTSUP, "set faults without fault injection");
    CHECK(srpc_server_fault_counts(srv, &rc, &tc) == -ENOTSUP, "counts without fault injection");
    srpc_server_destroy(srv);
}

#endif

int main(void)
{
    uint64_t t0 = now_ns();
#ifdef SRPC_FAULT_INJECTION
    CHECK(srpc_features() & SRPC_FEATURE_FAULTS, "srpc_features says fault injection is in");
    test_settings();
    test_counts();
    test_reorder_keeps_all();
    test_corrupt();
    test_rx_hook();
    test_tx_hook();
    test_api();
    srpc_faults_cfg_t drop30 = {.drop = 0.3};
    scenario("30% drop", drop30, 2000, 4, 0);
    srpc_faults_cfg_t mixed = {.drop = 0.1, .dup = 0.2, .reorder = 0.2};
    scenario("drop+dup+reorder", mixed, 1000, 2, 0);
    srpc_faults_cfg_t bits = {.drop = 0.05, .corrupt = 0.1};
    scenario("corrupt", bits, 300, 0, 1);
#else
    (void)rnd;
    CHECK(!(srpc_features() & SRPC_FEATURE_FAULTS), "srpc_features says fault injection is out");
    test_unsupported();
    printf("fault injection not compiled in (SPLITRPC_FAULT_INJECTION=OFF): setters checked only\n");
#endif
    fprintf(stderr, "test_faults: %.1f s\n", ms_since(t0) / 1000);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
