/* test_core.c: standalone tests of the wire codec, the host Tensor Queue and the raw UDP baseline. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "splitrpc.h"
#include "wire.h"

#include "check.h"

/* ------------------------------------------------------------------ header */

static int hdr_equal(const srpc_hdr_t *a, const srpc_hdr_t *b)
{
    return a->type == b->type && a->func_id == b->func_id && a->req_id == b->req_id &&
           a->seq == b->seq && a->nseg == b->nseg && a->msg_len == b->msg_len &&
           a->aux == b->aux;
}

static void test_hdr_roundtrip(void)
{
    const srpc_hdr_t cases[] = {
        {SRPC_ERROR, 0xffff, UINT64_MAX, 0xfffe, 0xffff, UINT32_MAX, 0xffff},
        {SRPC_REQUEST, 0, 0, 0, 1, 0, 0},
        {SRPC_RESPONSE, 1, 1, 0, 1, 1, 1},
        {SRPC_REQUEST, 0x1234, 0x0102030405060708ull, 7, 8, 0xdeadbeef, 0x8001},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t buf[SRPC_HDR_LEN];
        srpc_hdr_t out;
        memset(&out, 0x5a, sizeof(out));
        CHECK(srpc_hdr_encode(&cases[i], buf) == 0, "case %zu", i);
        CHECK(srpc_hdr_decode(buf, sizeof(buf), &out) == 0, "case %zu", i);
        CHECK(hdr_equal(&cases[i], &out), "case %zu", i);
    }

    /* All-zero fields encode (nseg 0 is the decoder's business) but do not decode. */
    srpc_hdr_t zero = {0};
    uint8_t buf[SRPC_HDR_LEN];
    srpc_hdr_t out;
    CHECK(srpc_hdr_encode(&zero, buf) == 0, "zero header");
    CHECK(srpc_hdr_decode(buf, sizeof(buf), &out) == -EPROTO, "zero nseg");

    for (uint8_t t = 3; t < 16; t++) {
        srpc_hdr_t h = {.type = t, .nseg = 1};
        CHECK(srpc_hdr_encode(&h, buf) == -EINVAL, "encode type %u", t);
    }
}

static void test_hdr_layout(void)
{
    const srpc_hdr_t h = {SRPC_ERROR, 0x1234, 0x0102030405060708ull, 0x0a0b, 0x0c0d,
                          0x11223344, 0x5566};
    const uint8_t want[SRPC_HDR_LEN] = {0xa5, 0x12, 0x12, 0x34, 0x01, 0x02, 0x03, 0x04,
                                        0x05, 0x06, 0x07, 0x08, 0x0a, 0x0b, 0x0c, 0x0d,
                                        0x11, 0x22, 0x33, 0x44, 0x55, 0x66};
    uint8_t buf[SRPC_HDR_LEN + 1];
    buf[SRPC_HDR_LEN] = 0xee;
    CHECK(srpc_hdr_encode(&h, buf) == 0, "encode");
    CHECK(memcmp(buf, want, SRPC_HDR_LEN) == 0, "bytes differ from PROTOCOL.md layout");
    CHECK(buf[SRPC_HDR_LEN] == 0xee, "encode wrote past 22 bytes");

    /* The mirror struct agrees with the bytes once swapped from network order. */
    struct srpc_wire_hdr w;
    memcpy(&w, buf, sizeof(w));
    CHECK(w.magic == SRPC_MAGIC && ntohs(w.func_id) == 0x1234 && ntohs(w.seq) == 0x0a0b &&
              ntohs(w.nseg) == 0x0c0d && ntohl(w.msg_len) == 0x11223344 &&
              ntohs(w.aux) == 0x5566,
          "wire struct mirror");
}

static void test_hdr_reject(void)
{
    const srpc_hdr_t h = {SRPC_REQUEST, 3, 42, 0, 1, 10, 0};
    uint8_t good[SRPC_HDR_LEN], buf[SRPC_HDR_LEN];
    srpc_hdr_t out;
    srpc_hdr_encode(&h, good);

    for (size_t len = 0; len < SRPC_HDR_LEN; len++) {
        /* A heap copy of exactly len bytes: ASan catches any read past it. */
        uint8_t *p = malloc(len ? len : 1);
        memcpy(p, good, len);
        CHECK(srpc_hdr_decode(p, len, &out) == -EMSGSIZE, "short len %zu", len);
        free(p);
    }
    CHECK(srpc_hdr_decode(NULL, 0, &out) == -EMSGSIZE, "NULL empty");

    memcpy(buf, good, sizeof(buf));
    buf[0] = 0xa4;
    CHECK(srpc_hdr_decode(buf, sizeof(buf), &out) == -EBADMSG, "bad magic");

    for (int v = 0; v < 16; v++) {
        if (v == SRPC_VERSION)
            continue;
        memcpy(buf, good, sizeof(buf));
        buf[1] = (uint8_t)(v << 4 | SRPC_REQUEST);
        CHECK(srpc_hdr_decode(buf, sizeof(buf), &out) == -EBADMSG, "version %d", v);
    }
    for (int t = 3; t < 16; t++) {
        memcpy(buf, good, sizeof(buf));
        buf[1] = (uint8_t)(SRPC_VERSION << 4 | t);
        CHECK(srpc_hdr_decode(buf, sizeof(buf), &out) == -EBADMSG, "type %d", t);
    }

    const struct { uint16_t seq, nseg; } bad[] = {{0, 0}, {1, 0}, {1, 1}, {5, 5}, {6, 5},
                                                  {0xffff, 0xffff}, {0xffff, 1}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        srpc_hdr_t b = h;
        b.seq = bad[i].seq;
        b.nseg = bad[i].nseg;
        srpc_hdr_encode(&b, buf);
        CHECK(srpc_hdr_decode(buf, sizeof(buf), &out) == -EPROTO, "seq %u nseg %u",
              bad[i].seq, bad[i].nseg);
    }

    /* A longer datagram decodes: the data follows the header. */
    uint8_t longer[SRPC_HDR_LEN + 10] = {0};
    memcpy(longer, good, SRPC_HDR_LEN);
    CHECK(srpc_hdr_decode(longer, sizeof(longer), &out) == 0 && hdr_equal(&h, &out), "long");
}

/* ------------------------------------------------------------------ segmentation */

static int seg(uint16_t seq, uint16_t nseg, uint32_t msg_len, size_t data_len, uint32_t *s)
{
    srpc_hdr_t h = {.type = SRPC_REQUEST, .seq = seq, .nseg = nseg, .msg_len = msg_len};
    *s = 0xdeadbeef;
    return srpc_seg_check(&h, data_len, s);
}

static void test_seg_table(void)
{
    const struct {
        uint16_t seq, nseg;
        uint32_t msg_len;
        size_t data_len;
        int rc;
        uint32_t s;
    } t[] = {
        /* single segment: exactly msg_len */
        {0, 1, 0, 0, 0, 0},
        {0, 1, 1, 1, 0, 1},
        {0, 1, 1450, 1450, 0, 1450},
        {0, 1, 10, 9, -EPROTO, 0},
        {0, 1, 10, 11, -EPROTO, 0},
        {0, 1, 0, 1, -EPROTO, 0},
        /* two and three segments, S = 1450 */
        {0, 2, 1451, 1450, 0, 1450},
        {1, 2, 1451, 1, 0, 1450},
        {1, 2, 2900, 1450, 0, 1450},          /* L == S */
        {2, 3, 2901, 1, 0, 1450},              /* last-segment derivation */
        {1, 3, 2901, 1450, 0, 1450},
        {2, 3, 2901, 2, -EPROTO, 0},           /* 2899 not divisible by 2 */
        {2, 3, 10, 4, -EPROTO, 0},             /* S = 3 < L = 4 */
        {1, 2, 10, 6, -EPROTO, 0},             /* S = 4 < L = 6 */
        {0, 2, 10, 0, -EPROTO, 0},             /* non-last of length 0 */
        {1, 3, 10, 0, -EPROTO, 0},
        {1, 2, 10, 0, -EPROTO, 0},             /* last of length 0 */
        {1, 2, 10, 11, -EPROTO, 0},            /* last longer than the message */
        {0, 3, 2900, 1450, -EPROTO, 0},        /* msg_len too small for nseg */
        {0, 2, 1450, 1450, -EPROTO, 0},
        {0, 2, 2901, 1450, -EPROTO, 0},        /* msg_len too large for nseg */
        {0, 2, 0, 1, -EPROTO, 0},
        /* S = 1 */
        {0, 2, 2, 1, 0, 1},
        {1, 2, 2, 1, 0, 1},
        {0, 3, 2, 1, -EPROTO, 0},
        /* the largest S */
        {0, 2, 65486, 65485, 0, 65485},
        {1, 2, 65486, 1, 0, 65485},
        {0, 2, 65487, 65486, -EPROTO, 0},      /* S over SRPC_MAX_SEG_DATA */
        {1, 2, 65487, 1, -EPROTO, 0},          /* derived S over the limit */
        {65534, 65535, 4291559475u, 65485, 0, 65485},    /* the largest message */
        {0, 65535, 4291559475u, 65485, 0, 65485},
        {0, 65535, UINT32_MAX, 65485, -EPROTO, 0},
        {65534, 65535, UINT32_MAX, 65485, -EPROTO, 0},
        /* lengths that would overflow 64-bit products */
        {0, 2, UINT32_MAX, SIZE_MAX, -EPROTO, 0},
        {1, 2, UINT32_MAX, SIZE_MAX, -EPROTO, 0},
        {0, 1, UINT32_MAX, SIZE_MAX, -EPROTO, 0},
        {0, 65535, UINT32_MAX, (size_t)1 << 48, -EPROTO, 0},
        /* header rules re-checked */
        {0, 0, 0, 0, -EPROTO, 0},
        {2, 2, 10, 5, -EPROTO, 0},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        uint32_t s;
        int rc = seg(t[i].seq, t[i].nseg, t[i].msg_len, t[i].data_len, &s);
        CHECK(rc == t[i].rc && (rc != 0 || s == t[i].s), "row %zu: rc %d S %u", i, rc, s);
    }
}

/* Every segment of well-cut messages checks, and gives back the S it was cut with. */
static void test_seg_generated(void)
{
    const uint32_t sizes[] = {1, 2, 3, 1450, 8950, 65485};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        uint32_t S = sizes[k];
        const uint64_t lens[] = {0, 1, S - 1, S, S + 1, 2ull * S - 1, 2ull * S, 2ull * S + 1,
                                 100ull * S + 7, 65535ull * S};
        int bad = 0, n = 0;
        for (size_t j = 0; j < sizeof(lens) / sizeof(lens[0]); j++) {
            uint32_t m = (uint32_t)lens[j];
            uint32_t nseg = srpc_seg_count(m, S);
            if (nseg > 65535)
                continue;
            for (uint32_t q = 0; q < nseg; q++) {
                if (nseg > 8 && q > 2 && q + 3 < nseg && q != nseg / 2)
                    continue;
                uint32_t len = nseg == 1 ? m : q + 1 < nseg ? S : m - (nseg - 1) * S;
                uint32_t want = nseg == 1 ? m : S, got;
                n++;
                if (seg((uint16_t)q, (uint16_t)nseg, m, len, &got) != 0 || got != want) {
                    bad++;
                    fprintf(stderr, "S %u m %u seq %u/%u len %u -> S %u\n", S, m, q, nseg,
                            len, got);
                }
            }
            /* One segment more or (from three) one fewer than the cut is impossible. */
            if (nseg < 65535 && S <= SRPC_MAX_SEG_DATA) {
                n++;
                bad += seg(0, (uint16_t)(nseg + 1), m, S, &(uint32_t){0}) != -EPROTO;
            }
            if (nseg >= 3) {
                n++;
                bad += seg(0, (uint16_t)(nseg - 1), m, S, &(uint32_t){0}) != -EPROTO;
            }
        }
        CHECK(bad == 0 && n > 0, "S %u: %d of %d wrong", S, bad, n);
    }
}

static void test_seg_count(void)
{
    const struct { uint32_t m, s, want; } t[] = {
        {0, 1, 1}, {0, 1450, 1}, {0, 0, 1}, {1, 1, 1}, {2, 1, 2}, {1449, 1450, 1},
        {1450, 1450, 1}, {1451, 1450, 2}, {2900, 1450, 2}, {2901, 1450, 3},
        {UINT32_MAX, 1, UINT32_MAX}, {UINT32_MAX, UINT32_MAX, 1},
        {UINT32_MAX, 65485, 65588}, {UINT32_MAX - 1, UINT32_MAX, 1},
        {5, 0, 0}, /* outside the contract: no division by zero */
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        uint32_t got = srpc_seg_count(t[i].m, t[i].s);
        CHECK(got == t[i].want, "count(%u, %u) = %u, want %u", t[i].m, t[i].s, got, t[i].want);
    }
}

static void test_strerror(void)
{
    CHECK(strcmp(srpc_strerror(0), "OK") == 0, "0");
    CHECK(strcmp(srpc_strerror(SRPC_E_UNKNOWN_FUNCTION), "UNKNOWN_FUNCTION") == 0, "1");
    CHECK(strcmp(srpc_strerror(SRPC_E_BAD_REQUEST), "BAD_REQUEST") == 0, "2");
    CHECK(strcmp(srpc_strerror(SRPC_E_BUSY), "BUSY") == 0, "3");
    CHECK(strcmp(srpc_strerror(SRPC_E_DEADLINE), "DEADLINE") == 0, "4");
    CHECK(strcmp(srpc_strerror(SRPC_E_INTERNAL), "INTERNAL") == 0, "5");
    CHECK(strcmp(srpc_strerror(SRPC_E_TOO_LARGE), "TOO_LARGE") == 0, "6");
    CHECK(strcmp(srpc_strerror(SRPC_E_TIMEOUT), "TIMEOUT") == 0, "100");
    CHECK(strcmp(srpc_strerror(SRPC_E_PENDING), "PENDING") == 0, "101");
    CHECK(strcmp(srpc_strerror(SRPC_E_MAX), "UNKNOWN") == 0, "7");
    CHECK(strcmp(srpc_strerror(-1), "UNKNOWN") == 0, "-1");
}

/* ------------------------------------------------------------------ tensor queue */

static uint8_t pattern(uint64_t start, uint64_t i, size_t j)
{
    return (uint8_t)(start * 7 + i * 13 + j * 3 + 1);
}

static void test_tq_one(size_t elem_size, uint32_t cap)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    srpc_tq_t *tq = NULL;
    int rc = srpc_tq_create(elem_size, cap, &tq);
    CHECK(rc == 0 && tq, "create(%zu, %u) = %d", elem_size, cap, rc);
    if (!tq)
        return;

    size_t bytes = elem_size * cap, rb = srpc_tq_ring_bytes(tq);
    uint8_t *base = srpc_tq_base(tq);
    CHECK(rb % page == 0 && rb >= bytes && rb < bytes + page, "ring_bytes %zu for %zu", rb,
          bytes);
    CHECK(srpc_tq_elem_size(tq) == elem_size && srpc_tq_capacity(tq) == cap, "getters");
    CHECK(srpc_tq_elem(tq, 0) == base, "elem 0 at base");

    /* The two mappings are the same memory, both ways. */
    size_t offs[] = {0, rb / 2, rb - 1};
    int alias_ok = 1;
    for (size_t k = 0; k < 3; k++) {
        base[rb + offs[k]] = (uint8_t)(0x40 + k);
        alias_ok &= base[offs[k]] == 0x40 + k;
        base[offs[k]] = (uint8_t)(0x80 + k);
        alias_ok &= base[rb + offs[k]] == 0x80 + k;
    }
    CHECK(alias_ok, "upper and lower mappings alias (elem %zu)", elem_size);

    /* From every start in [0, 2*cap), a run of cap elements is contiguous from the first
     * element's address, and each element reads back where srpc_tq_elem() puts it. */
    int run_ok = 1, where_ok = 1;
    for (uint64_t start = 0; start < 2ull * cap; start++) {
        uint8_t *first = srpc_tq_elem(tq, start);
        for (uint32_t i = 0; i < cap; i++) {
            uint8_t *p = first + (size_t)i * elem_size;
            for (size_t j = 0; j < elem_size; j++)
                p[j] = pattern(start, i, j);
        }
        for (uint32_t i = 0; i < cap; i++) {
            const uint8_t *q = srpc_tq_elem(tq, start + i);
            where_ok &= q >= base && q < base + rb;
            where_ok &= (size_t)(q - base) == (start + i) * elem_size % rb;
            for (size_t j = 0; j < elem_size; j++)
                run_ok &= q[j] == pattern(start, i, j);
        }
    }
    CHECK(run_ok, "runs contiguous (elem %zu cap %u)", elem_size, cap);
    CHECK(where_ok, "elem addresses (elem %zu cap %u)", elem_size, cap);

    /* Huge running counters stay in the ring and follow (seq * elem_size) mod ring_bytes. */
    __extension__ typedef unsigned __int128 u128;
    const uint64_t seqs[] = {UINT64_MAX, UINT64_MAX - 1, 1ull << 63, (1ull << 32) + 5};
    int big_ok = 1;
    for (size_t k = 0; k < 4; k++) {
        uint8_t *q = srpc_tq_elem(tq, seqs[k]);
        big_ok &= (size_t)(q - base) == (size_t)((u128)seqs[k] * elem_size % rb);
    }
    CHECK(big_ok, "large seq (elem %zu)", elem_size);
    srpc_tq_destroy(tq);
}

static void test_tq(void)
{
    test_tq_one(1, 1);
    test_tq_one(1, 7);
    test_tq_one(1000, 3);
    test_tq_one(1000, 5); /* 5000 bytes: ring of two pages, elements straddle the end */
    test_tq_one(4096, 1);
    test_tq_one(4096, 4);
    test_tq_one(602112, 3);

    srpc_tq_t *tq = (srpc_tq_t *)0x1;
    CHECK(srpc_tq_create(0, 4, &tq) == -EINVAL, "elem 0");
    CHECK(srpc_tq_create(16, 0, &tq) == -EINVAL, "capacity 0");
    CHECK(srpc_tq_create(16, 4, NULL) == -EINVAL, "NULL out");
    CHECK(srpc_tq_create(SIZE_MAX, 2, &tq) == -EOVERFLOW, "product overflow");
    CHECK(srpc_tq_create(SIZE_MAX / 2 + 1, 2, &tq) == -EOVERFLOW, "product overflow 2");
    CHECK(srpc_tq_create(SIZE_MAX - 10, 1, &tq) == -EOVERFLOW, "page rounding overflow");
    CHECK(srpc_tq_create(SIZE_MAX / 2 + 1, 1, &tq) == -EOVERFLOW, "double mapping overflow");
    CHECK(tq == NULL, "out cleared on failure");

    /* 2^48 bytes of reservation: more than 47-bit user space, so a mapping step fails and
     * everything must be cleaned up (ASan / valgrind see any leak). */
    tq = NULL;
    int rc = srpc_tq_create((size_t)1 << 46, 2, &tq);
    CHECK((rc < 0 && tq == NULL) || (rc == 0 && tq), "address space exhausted: %d", rc);
    srpc_tq_destroy(tq);
    srpc_tq_destroy(NULL);
    passed++; /* destroy(NULL) returned */
}

/* ------------------------------------------------------------------ raw UDP */

struct server_arg {
    uint16_t port;
    int busy;
    uint32_t req, resp; /* resp 0: echo mode */
    volatile int stop;
    int rc;
};

static void *server_main(void *p)
{
    struct server_arg *a = p;
    a->rc = srpc_raw_echo_serve("127.0.0.1", a->port, a->busy, a->req, a->resp, &a->stop);
    return NULL;
}

static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    close(fd);
    return ntohs(sa.sin_port);
}

static int all_positive(const uint64_t *v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] == 0)
            return 0;
    return 1;
}

static void test_raw_udp_server(int server_busy)
{
    struct server_arg a = {.port = free_port(), .busy = server_busy};
    CHECK(a.port != 0, "free port");
    pthread_t th;
    if (pthread_create(&th, NULL, server_main, &a) != 0) {
        CHECK(0, "pthread_create");
        return;
    }

    /* Wait until the server answers (it binds in its own thread). */
    uint64_t lat[50];
    int rc = -1;
    for (int tries = 0; tries < 100 && rc != 0; tries++) {
        rc = srpc_raw_pingpong("127.0.0.1", a.port, 8, 0, 0, 0, 1, lat);
        if (rc != 0)
            nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    CHECK(rc == 0, "server up: %d", rc);

    for (int busy = 0; busy < 2; busy++) {
        memset(lat, 0, sizeof(lat));
        rc = srpc_raw_pingpong("127.0.0.1", a.port, 1024, 0, busy, 5, 50, lat);
        CHECK(rc == 0, "pingpong busy %d: %d", busy, rc);
        CHECK(all_positive(lat, 50), "latencies busy %d", busy);
    }
    rc = srpc_raw_pingpong("localhost", a.port, 0, 0, 0, 0, 2, lat);
    CHECK(rc == 0 && all_positive(lat, 2), "empty datagrams by name: %d", rc);
    rc = srpc_raw_pingpong("127.0.0.1", a.port, 65507, 0, 0, 0, 2, lat);
    CHECK(rc == 0 && all_positive(lat, 2), "largest datagram: %d", rc);

    __atomic_store_n(&a.stop, 1, __ATOMIC_RELAXED);
    pthread_join(th, NULL);
    CHECK(a.rc == 0, "server returned %d", a.rc);

    /* Nobody listens any more: an error, not a hang. */
    rc = srpc_raw_pingpong("127.0.0.1", a.port, 16, 0, 0, 0, 1, lat);
    CHECK(rc == -ECONNREFUSED || rc == -ETIMEDOUT, "closed port: %d", rc);
}

/* Message mode: a head-sized request in 10 datagrams answered by 4000 bytes. */
static void test_raw_udp_message(void)
{
    struct server_arg a = {.port = free_port(), .busy = 0, .req = 602112, .resp = 4000};
    pthread_t th;
    if (pthread_create(&th, NULL, server_main, &a) != 0) {
        CHECK(0, "pthread_create");
        return;
    }
    uint64_t lat[20];
    int rc = -1;
    for (int tries = 0; tries < 100 && rc != 0; tries++) {
        rc = srpc_raw_pingpong("127.0.0.1", a.port, 602112, 4000, 0, 0, 1, lat);
        if (rc != 0)
            nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    CHECK(rc == 0, "message server up: %d", rc);
    memset(lat, 0, sizeof(lat));
    rc = srpc_raw_pingpong("127.0.0.1", a.port, 602112, 4000, 1, 2, 20, lat);
    CHECK(rc == 0 && all_positive(lat, 20), "message pingpong: %d", rc);
    __atomic_store_n(&a.stop, 1, __ATOMIC_RELAXED);
    pthread_join(th, NULL);
    CHECK(a.rc == 0, "message server returned %d", a.rc);
}

static void test_raw_udp(void)
{
    test_raw_udp_server(0);
    test_raw_udp_server(1);

    uint64_t lat[1];
    CHECK(srpc_raw_pingpong("127.0.0.1", 9, 65508, 0, 0, 0, 1, lat) == -EMSGSIZE, "too big");
    CHECK(srpc_raw_pingpong("127.0.0.1", 9, 8, 0, 0, 0, 1, NULL) == -EINVAL, "NULL lat");
    CHECK(srpc_raw_pingpong(NULL, 9, 8, 0, 0, 0, 1, lat) == -EINVAL, "NULL host");
    CHECK(srpc_raw_pingpong("no.such.host.invalid", 9, 8, 0, 0, 0, 1, lat) < 0, "bad name");
    CHECK(srpc_raw_echo_serve("127.0.0.1", 0, 0, 0, 0, NULL) == -EINVAL, "NULL stop");
    volatile int stop = 1;
    CHECK(srpc_raw_echo_serve("127.0.0.1", 0, 1, 0, 0, &stop) == 0, "stop before start");
    test_raw_udp_message();
}


/* ------------------------------------------------------------------ arrival schedules */

/* Mean rate and coefficient of variation of the gaps of a schedule. */
static void gap_stats(const uint64_t *at, uint32_t n, double *rate, double *cv)
{
    double sum = 0, sq = 0, prev = 0;
    for (uint32_t i = 0; i < n; i++) {
        double g = ((double)at[i] - prev) / 1e9;
        prev = (double)at[i];
        sum += g;
        sq += g * g;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    *rate = 1.0 / mean;
    *cv = sqrt(var > 0 ? var : 0) / mean;
}

static void test_schedules(void)
{
    enum { N = 200000 };
    static uint64_t at[N], at2[N];
    double rate, cv;
    CHECK(srpc_schedule_fill(SRPC_ARRIVAL_CONSTANT, 1000.0, 0, 1, at, 5) == 0 && at[0] == 1000000 &&
              at[4] == 5000000, "constant 1000/s: %llu %llu", (unsigned long long)at[0], (unsigned long long)at[4]);
    CHECK(srpc_schedule_fill(SRPC_ARRIVAL_POISSON, 50000.0, 0, 7, at, N) == 0, "poisson fill");
    gap_stats(at, N, &rate, &cv);
    CHECK(fabs(rate / 50000.0 - 1) < 0.02 && fabs(cv - 1) < 0.02, "poisson rate %.1f cv %.3f", rate, cv);
    CHECK(srpc_schedule_fill(SRPC_ARRIVAL_POISSON, 50000.0, 0, 7, at2, N) == 0 &&
              memcmp(at, at2, sizeof(at)) == 0, "same seed, same schedule");
    CHECK(srpc_schedule_fill(SRPC_ARRIVAL_POISSON, 50000.0, 0, 8, at2, N) == 0 &&
              memcmp(at, at2, sizeof(at)) != 0, "another seed, another schedule");
    CHECK(srpc_schedule_fill(SRPC_ARRIVAL_HYPEREXP, 20000.0, 3.0, 3, at, N) == 0, "hyperexp fill");
    gap_stats(at, N, &rate, &cv);
    CHECK(fabs(rate / 20000.0 - 1) < 0.04 && fabs(cv / 3.0 - 1) < 0.1, "hyperexp rate %.1f cv %.3f", rate, cv);
    int sorted = 1;
    for (uint32_t i = 1; i < N; i++)
        sorted &= at[i] >= at[i - 1];
    CHECK(sorted, "hyperexp due times non-decreasing");
    CHECK(srpc_schedule_fill(SRPC_ARRIVAL_HYPEREXP, 100.0, 1.0, 1, at, 4) == -EINVAL, "hyperexp cv 1");
    CHECK(srpc_schedule_fill(SRPC_ARRIVAL_POISSON, 0.0, 0, 1, at, 4) == -EINVAL, "rate 0");
    CHECK(srpc_schedule_fill(SRPC_ARRIVAL_POISSON, NAN, 0, 1, at, 4) == -EINVAL, "rate NaN");
    CHECK(srpc_schedule_fill(9, 100.0, 0, 1, at, 4) == -EINVAL, "unknown kind");

    /* A trace: 1000/s for 1 s, nothing for 1 s, 4000/s for 0.5 s (end_s cuts the last piece). */
    const double t[] = {0.0, 1.0, 2.0}, r[] = {1000.0, 0.0, 4000.0};
    int n = srpc_schedule_trace(SRPC_ARRIVAL_POISSON, 0, t, r, 3, 2.5, 5, at, N);
    uint32_t piece[3] = {0, 0, 0};
    for (int i = 0; i < n; i++)
        piece[at[i] < 1000000000ull ? 0 : at[i] < 2000000000ull ? 1 : 2]++;
    CHECK(n > 0 && fabs(piece[0] - 1000.0) < 150 && piece[1] == 0 && fabs(piece[2] - 2000.0) < 250 &&
              at[n - 1] < 2500000000ull, "trace pieces %u %u %u of %d", piece[0], piece[1], piece[2], n);
    n = srpc_schedule_trace(SRPC_ARRIVAL_CONSTANT, 0, t, r, 3, 2.5, 5, at, N);
    CHECK(n >= 2997 && n <= 3000 && at[0] == 1000000, "constant trace count %d", n);
    CHECK(srpc_schedule_trace(SRPC_ARRIVAL_POISSON, 0, t, r, 3, 2.5, 5, at, 100) == -ENOBUFS, "trace ENOBUFS");
    const double tbad[] = {0.0, 0.0};
    CHECK(srpc_schedule_trace(SRPC_ARRIVAL_POISSON, 0, tbad, r, 2, 2.5, 5, at, N) == -EINVAL, "times not increasing");
    const double rbad[] = {1.0, -1.0};
    CHECK(srpc_schedule_trace(SRPC_ARRIVAL_POISSON, 0, t, rbad, 2, 2.5, 5, at, N) == -EINVAL, "negative rate");
}

int main(void)
{
    test_hdr_roundtrip();
    test_hdr_layout();
    test_hdr_reject();
    test_seg_table();
    test_seg_generated();
    test_seg_count();
    test_strerror();
    test_tq();
    test_raw_udp();
    test_schedules();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
