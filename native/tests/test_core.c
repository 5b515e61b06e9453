/* test_core.c: standalone tests of the wire codec, the message codec, the host Tensor Queue, the raw UDP baseline and the minimal protocol server. */
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

#include "server/allowlist.h"
#include "splitrpc.h"
#include "server/srcmem.h"
#include "core/wire.h"

#include "check.h"

/* ------------------------------------------------------------------ header */

static int hdr_equal(const srpc_hdr_t *a, const srpc_hdr_t *b)
{
    return a->type == b->type && a->version == b->version && a->func_id == b->func_id && a->req_id == b->req_id &&
           a->seq == b->seq && a->nseg == b->nseg && a->msg_len == b->msg_len &&
           a->aux == b->aux;
}

/* Bit by bit, from the definition: the reference the fast paths are held to. */
static uint32_t crc32c_bits(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    while (n--) {
        c ^= *p++;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? c >> 1 ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

static void test_crc32c(void)
{
    CHECK(srpc_crc32c(0, "123456789", 9) == 0xe3069283u, "check value %08x", srpc_crc32c(0, "123456789", 9));
    CHECK(srpc_crc32c_tables(0, "123456789", 9) == 0xe3069283u, "tables' check value");
    CHECK(srpc_crc32c(0, NULL, 0) == 0 && srpc_crc32c(0x1234, "x", 0) == 0x1234, "no bytes: crc unchanged");
    /* lengths across both three-stream block sizes (3 * 256, 3 * 8192) and odd alignments */
    enum { MAX = 3 * 8192 * 2 + 777 };
    static uint8_t buf[MAX + 8];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < sizeof(buf); i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
    static const size_t lens[] = {1, 7, 8, 9, 63, 255, 256, 767, 768, 769, 1024, 1450, 4096, 8191,
                                  24575, 24576, 24577, 3 * 8192 + 3 * 256 + 5, MAX};
    int bad = 0;
    for (size_t a = 0; a < 8; a++)
        for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
            uint32_t want = crc32c_bits(buf + a, lens[k]);
            bad += srpc_crc32c(0, buf + a, lens[k]) != want;
            bad += srpc_crc32c_tables(0, buf + a, lens[k]) != want;
            /* continued in two calls at an odd split: the same crc */
            size_t cut = lens[k] / 3 + 1;
            bad += srpc_crc32c(srpc_crc32c(0, buf + a, cut), buf + a + cut, lens[k] - cut) != want;
        }
    CHECK(bad == 0, "%d of %zu results differ from the bitwise crc", bad, 3 * 8 * sizeof(lens) / sizeof(lens[0]));
    /* one flipped bit anywhere changes it */
    uint32_t base = srpc_crc32c(0, buf, 4096);
    int same = 0;
    for (size_t i = 0; i < 4096 * 8; i += 97) {
        buf[i / 8] ^= (uint8_t)(1u << (i % 8));
        same += srpc_crc32c(0, buf, 4096) == base;
        buf[i / 8] ^= (uint8_t)(1u << (i % 8));
    }
    CHECK(same == 0, "%d single-bit flips went unseen", same);
    CHECK(srpc_crc32c_hardware() == 0 || srpc_crc32c_hardware() == 1, "hardware: %d", srpc_crc32c_hardware());
    printf("crc32c: %s\n", srpc_crc32c_hardware() ? "CPU instruction" : "tables");
}

static void test_hdr_roundtrip(void)
{
    const srpc_hdr_t cases[] = {
        {SRPC_ERROR, 1, 0xffff, UINT64_MAX, 0xfffe, 0xffff, UINT32_MAX, 0xffff},
        {SRPC_REQUEST, 1, 0, 0, 0, 1, 0, 0},
        {SRPC_RESPONSE, 1, 1, 1, 0, 1, 1, 1},
        {SRPC_REQUEST, 1, 0x1234, 0x0102030405060708ull, 7, 8, 0xdeadbeef, 0x8001},
        {SRPC_REQUEST, 2, 0x1234, 0x030405060708ull, 7, 8, 0xdeadbeef, 0x8001},
        {SRPC_ERROR, 2, 0xffff, SRPC_REQ_ID_V2_MASK, 0xfffe, 0xffff, UINT32_MAX, 0xffff},
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
    const srpc_hdr_t h = {.type = SRPC_ERROR, .func_id = 0x1234, .req_id = 0x0102030405060708ull,
                          .seq = 0x0a0b, .nseg = 0x0c0d, .msg_len = 0x11223344, .aux = 0x5566};
    const uint8_t want[SRPC_HDR_LEN] = {0xa5, 0x12, 0x12, 0x34, 0x01, 0x02, 0x03, 0x04,
                                        0x05, 0x06, 0x07, 0x08, 0x0a, 0x0b, 0x0c, 0x0d,
                                        0x11, 0x22, 0x33, 0x44, 0x55, 0x66};
    uint8_t buf[SRPC_HDR_LEN + 1];
    buf[SRPC_HDR_LEN] = 0xee;
    CHECK(srpc_hdr_encode(&h, buf) == 0, "encode");
    CHECK(memcmp(buf, want, SRPC_HDR_LEN) == 0, "bytes differ from docs/PROTOCOL.md layout");
    CHECK(buf[SRPC_HDR_LEN] == 0xee, "encode wrote past 22 bytes");

    /* The mirror struct agrees with the bytes once swapped from network order. */
    struct srpc_wire_hdr w;
    memcpy(&w, buf, sizeof(w));
    CHECK(w.magic == SRPC_MAGIC && ntohs(w.func_id) == 0x1234 && ntohs(w.seq) == 0x0a0b &&
              ntohs(w.nseg) == 0x0c0d && ntohl(w.msg_len) == 0x11223344 &&
              ntohs(w.aux) == 0x5566,
          "wire struct mirror");
}

/* Version 2: docs/PROTOCOL-v2.md's example bytes, a round trip, and every one-byte change of a
 * header caught by the check before any other field is believed. */
static void test_hdr_v2(void)
{
    const srpc_hdr_t h = {.type = SRPC_REQUEST, .version = SRPC_VERSION_2, .func_id = 1, .req_id = 1,
                          .nseg = 1, .msg_len = 1024};
    const uint8_t want[SRPC_HDR_LEN] = {0xa5, 0x20, 0x00, 0x01, 0xfc, 0x68, 0, 0, 0, 0, 0, 0x01,
                                        0, 0, 0, 0x01, 0, 0, 0x04, 0, 0, 0};
    uint8_t buf[SRPC_HDR_LEN];
    srpc_hdr_t out;
    CHECK(srpc_hdr_encode(&h, buf) == 0, "encode v2");
    CHECK(memcmp(buf, want, SRPC_HDR_LEN) == 0, "v2 bytes differ from docs/PROTOCOL-v2.md's example");
    CHECK(srpc_hdr_check16(buf) == 0xfc68, "check of the example");
    CHECK(srpc_hdr_decode(buf, sizeof(buf), &out) == 0 && out.version == 2 && out.req_id == 1 &&
              out.msg_len == 1024 && out.func_id == 1, "decode v2");

    srpc_hdr_t big = h;
    big.req_id = 0xfedcba9876543ull; /* 52 bits: over the 48 a v2 header carries */
    CHECK(srpc_hdr_encode(&big, buf) == -EINVAL, "v2 req_id over 48 bits");
    big.req_id = SRPC_REQ_ID_V2_MASK;
    big.seq = 3, big.nseg = 9, big.aux = 0xbeef, big.type = SRPC_ERROR;
    CHECK(srpc_hdr_encode(&big, buf) == 0 && srpc_hdr_decode(buf, sizeof(buf), &out) == 0 &&
              out.req_id == SRPC_REQ_ID_V2_MASK && out.seq == 3 && out.nseg == 9 && out.aux == 0xbeef &&
              out.type == SRPC_ERROR && out.version == 2, "v2 round trip");
    srpc_hdr_t v6 = h;
    v6.version = 6;
    CHECK(srpc_hdr_encode(&v6, buf) == -EINVAL, "version 6 refused");
    srpc_hdr_t v5 = big;
    v5.version = SRPC_VERSION_5; /* docs/PROTOCOL-v5.md: version 2's header */
    CHECK(srpc_hdr_encode(&v5, buf) == 0 && srpc_hdr_decode(buf, sizeof(buf), &out) == 0 && out.version == 5 &&
              out.req_id == SRPC_REQ_ID_V2_MASK,
          "v5 round trip");
    srpc_hdr_t v4 = big;
    v4.version = SRPC_VERSION_4;
    CHECK(srpc_hdr_encode(&v4, buf) == 0 && srpc_hdr_decode(buf, sizeof(buf), &out) == 0 && out.version == 4 &&
              out.req_id == SRPC_REQ_ID_V2_MASK && srpc_hdr_check16(buf) == (uint16_t)(buf[4] << 8 | buf[5]),
          "version 4: version 2's header with its check");

    uint8_t good[SRPC_HDR_LEN];
    srpc_hdr_encode(&big, good);
    unsigned missed = 0;
    for (int i = 0; i < SRPC_HDR_LEN; i++)
        for (int x = 1; x < 256; x++) {
            memcpy(buf, good, SRPC_HDR_LEN);
            buf[i] ^= (uint8_t)x;
            int r = srpc_hdr_decode(buf, sizeof(buf), &out);
            /* A changed version nibble may leave version 2 (then magic/version/seq checks apply,
             * or it reads as a version 1 header: the client and server drop it by version). */
            if (r == 0 && out.version == 2)
                missed++;
            if (i != 1 && r != -EILSEQ)
                missed++;
        }
    CHECK(missed == 0, "%u one-byte changes not caught by the check", missed);
}

static void test_hdr_reject(void)
{
    const srpc_hdr_t h = {.type = SRPC_REQUEST, .version = 1, .func_id = 3, .req_id = 42, .nseg = 1, .msg_len = 10};
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
        if (v >= SRPC_VERSION && v <= SRPC_VERSION_5)
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

/* ------------------------------------------------------------------ message codec */

static uint8_t msg_byte(uint32_t i) { return (uint8_t)(i * 31 + (i >> 8) * 7 + 3); }

/* Segments a len-byte message at S and checks every datagram against docs/PROTOCOL.md. Returns
 * the datagram count (or the error), with out/dlen/offs filled. */
static int segment_checked(const srpc_hdr_t *tmpl, const uint8_t *msg, uint32_t len, uint32_t S,
                           uint8_t *out, size_t cap, uint32_t *dlen, size_t *offs, uint32_t max)
{
    int n = srpc_msg_segment(tmpl, msg, len, S, out, cap, dlen, max);
    CHECK(n == (int)srpc_seg_count(len, S), "segment(len %u, S %u) = %d", len, S, n);
    if (n <= 0)
        return n;
    int ok = 1;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        offs[i] = off;
        srpc_hdr_t h;
        ok &= srpc_hdr_decode(out + off, dlen[i], &h) == 0;
        uint32_t want = i < n - 1 ? S : len - (uint32_t)(n - 1) * S;
        ok &= dlen[i] == SRPC_HDR_LEN + want;
        ok &= h.type == tmpl->type && h.func_id == tmpl->func_id && h.req_id == tmpl->req_id &&
              h.aux == tmpl->aux && h.seq == i && h.nseg == n && h.msg_len == len;
        uint32_t s;
        ok &= srpc_seg_check(&h, dlen[i] - SRPC_HDR_LEN, &s) == 0 && (n == 1 || s == S);
        ok &= memcmp(out + off + SRPC_HDR_LEN, msg + (size_t)i * S, want) == 0;
        off += dlen[i];
    }
    CHECK(ok && off == len + (size_t)n * SRPC_HDR_LEN, "datagrams of len %u at S %u", len, S);
    return n;
}

/* Pushes datagrams in the given order (a -1 entry ends it); dup: every datagram twice. */
static void reassemble_checked(srpc_reassembler_t *r, const srpc_hdr_t *tmpl, const uint8_t *msg,
                               uint32_t len, uint32_t S, const uint8_t *out, const uint32_t *dlen,
                               const size_t *offs, const uint32_t *order, int n, int dup,
                               const char *how)
{
    int ok = 1;
    for (int k = 0; k < n; k++) {
        uint32_t i = order[k];
        int rc = srpc_reassembler_push(r, out + offs[i], dlen[i]);
        ok &= rc == (k == n - 1 ? 1 : 0);
        ok &= (srpc_reassembler_message(r, NULL, NULL) != NULL) == (k == n - 1);
        if (dup)
            ok &= srpc_reassembler_push(r, out + offs[i], dlen[i]) == -EALREADY;
    }
    CHECK(ok, "push results (len %u, S %u, %s)", len, S, how);
    srpc_hdr_t h;
    uint32_t got = 12345;
    const uint8_t *m = srpc_reassembler_message(r, &h, &got);
    CHECK(m && got == len && (len == 0 || memcmp(m, msg, len) == 0), "message (len %u, S %u, %s)",
          len, S, how);
    CHECK(h.type == tmpl->type && h.func_id == tmpl->func_id && h.req_id == tmpl->req_id &&
              h.aux == tmpl->aux && h.seq == 0 && h.nseg == n && h.msg_len == len,
          "message header (len %u, S %u, %s)", len, S, how);
    /* A late duplicate of the completed message changes nothing. */
    CHECK(srpc_reassembler_push(r, out + offs[order[0]], dlen[order[0]]) == -EALREADY &&
              srpc_reassembler_message(r, NULL, &got) == m && got == len,
          "late duplicate (len %u, S %u, %s)", len, S, how);
}

static void test_codec_roundtrip(void)
{
    const uint32_t big = 602112; /* 588 KiB, the head service's request */
    const uint32_t sizes[] = {1450, 8950, 64000};
    uint8_t *msg = malloc(big);
    size_t cap = big + 1024 * SRPC_HDR_LEN;
    uint8_t *out = malloc(cap);
    uint32_t dlen[1024], order[1024];
    size_t offs[1024];
    srpc_reassembler_t *r = NULL;
    CHECK(srpc_reassembler_create(big, &r) == 0 && r, "reassembler_create");
    if (!msg || !out || !r)
        goto done;
    for (uint32_t i = 0; i < big; i++)
        msg[i] = msg_byte(i);
    CHECK(srpc_reassembler_message(r, NULL, NULL) == NULL, "no message yet");

    for (size_t si = 0; si < 3; si++) {
        uint32_t S = sizes[si];
        const uint32_t lens[] = {0, 1, S - 1, S, S + 1, big};
        for (size_t li = 0; li < 6; li++) {
            uint32_t len = lens[li];
            srpc_hdr_t tmpl = {.type = (uint8_t)(li % 3), .func_id = (uint16_t)(40 + li),
                               .req_id = 0x0102030405060708ull + si * 16 + li, .seq = 77,
                               .nseg = 99, .msg_len = 5, .aux = (uint16_t)(si + 1)};
            int n = segment_checked(&tmpl, msg, len, S, out, cap, dlen, offs, 1024);
            if (n <= 0)
                continue;
            for (int k = 0; k < n; k++)
                order[k] = (uint32_t)k;
            reassemble_checked(r, &tmpl, msg, len, S, out, dlen, offs, order, n, 0, "in order");
            const uint8_t *first = srpc_reassembler_message(r, NULL, NULL);
            srpc_reassembler_reset(r);
            CHECK(srpc_reassembler_message(r, NULL, NULL) == NULL, "reset drops the message");
            for (int k = 0; k < n; k++)
                order[k] = (uint32_t)(n - 1 - k);
            reassemble_checked(r, &tmpl, msg, len, S, out, dlen, offs, order, n, 0, "reversed");
            CHECK(srpc_reassembler_message(r, NULL, NULL) == first, "buffer reused after reset (len %u)", len);
            srpc_reassembler_reset(r);
            /* Shuffled, every datagram twice. */
            uint64_t x = 0x9e3779b97f4a7c15ull ^ len;
            for (int k = n - 1; k > 0; k--) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t j = (uint32_t)((x >> 33) % (uint64_t)(k + 1)), t = order[k];
                order[k] = order[j];
                order[j] = t;
            }
            reassemble_checked(r, &tmpl, msg, len, S, out, dlen, offs, order, n, 1, "shuffled, duplicated");
            /* No reset: the next message replaces the completed one. */
        }
    }
done:
    srpc_reassembler_destroy(r);
    srpc_reassembler_destroy(NULL);
    free(out);
    free(msg);
}

/* Hostile datagrams: valid segments of random messages, mutated (bytes flipped, truncated,
 * extended, header fields rewritten), fed to a reassembler. It must never read or write out
 * of bounds (this test also runs under ASan+UBSan), only return documented codes, and any
 * message it completes must have the length its header announced. */
static uint64_t fz_state = 0x2545F4914F6CDD1Dull;
static volatile unsigned fz_sink; /* keeps the reads of completed messages */
static uint32_t fz(uint32_t n)
{
    fz_state ^= fz_state << 13;
    fz_state ^= fz_state >> 7;
    fz_state ^= fz_state << 17;
    return n ? (uint32_t)(fz_state % n) : 0;
}

/* Version 3 (docs/PROTOCOL-v3.md): every datagram ends with the CRC-32C of its header and data;
 * one changed byte anywhere in it is refused, and the message still comes together. */
static void test_codec_v3(void)
{
    enum { LEN = 5000, SEG = 1450 };
    static uint8_t msg[LEN], out[LEN + 8 * 26], bad[SEG + 26];
    for (int i = 0; i < LEN; i++)
        msg[i] = (uint8_t)(i * 31 + 7);
    uint32_t dl[8];
    srpc_hdr_t t = {.type = SRPC_REQUEST, .version = SRPC_VERSION_3, .func_id = 9, .req_id = 0x123456789abcull};
    CHECK(srpc_seg_data_max(SRPC_VERSION_3, SEG) == SEG - 4 && srpc_seg_data_max(SRPC_VERSION_2, SEG) == SEG &&
              srpc_seg_data_max(SRPC_VERSION_3, 3) == 1, "v3 segments carry 4 bytes less data");
    CHECK(srpc_msg_segment(&t, msg, LEN, SEG, out, LEN + 4 * 26 - 1, dl, 8) == -ENOBUFS, "room for the checks too");
    int n = srpc_msg_segment(&t, msg, LEN, SEG, out, sizeof(out), dl, 8);
    CHECK(n == 4 && dl[0] == SEG + 22 && dl[3] == LEN - 3 * (SEG - 4) + 26, "n %d, lengths %u %u", n, dl[0], dl[3]);
    size_t off[8] = {0};
    for (int i = 1; i < n; i++)
        off[i] = off[i - 1] + dl[i - 1];
    for (int i = 0; i < n; i++) { /* the check is the CRC of the rest, big-endian, at the end */
        const uint8_t *d = out + off[i];
        uint32_t c = srpc_crc32c(0, d, dl[i] - 4), got = (uint32_t)d[dl[i] - 4] << 24 | (uint32_t)d[dl[i] - 3] << 16 |
                                                         (uint32_t)d[dl[i] - 2] << 8 | d[dl[i] - 1];
        CHECK(c == got, "datagram %d's check", i);
    }
    srpc_reassembler_t *r;
    CHECK(srpc_reassembler_create(LEN, &r) == 0, "create");
    int refused = 0, tries = 0;
    for (uint32_t pos = 0; pos < dl[1]; pos += 7, tries++) { /* any byte of datagram 1, check included */
        memcpy(bad, out + off[1], dl[1]);
        bad[pos] ^= 0x10;
        int rc = srpc_reassembler_push(r, bad, dl[1]);
        refused += rc == -EILSEQ;
    }
    CHECK(refused == tries, "%d of %d damaged datagrams refused with -EILSEQ", refused, tries);
    memcpy(bad, out + off[1], dl[1]);
    bad[1] = (uint8_t)(SRPC_VERSION_2 << 4 | SRPC_REQUEST); /* the same bytes read as version 2 */
    CHECK(srpc_reassembler_push(r, bad, dl[1]) == -EILSEQ, "a version 3 datagram relabelled v2 fails its header check");
    srpc_hdr_t tiny = t;
    uint8_t small[30];
    uint32_t sl;
    CHECK(srpc_msg_segment(&tiny, NULL, 0, SEG, small, sizeof(small), &sl, 1) == 1 && sl == 26, "empty message: 26 bytes");
    CHECK(srpc_reassembler_push(r, small, 25) == -EMSGSIZE, "shorter than its check");
    for (int i = n - 1; i >= 0; i--) {
        int rc = srpc_reassembler_push(r, out + off[i], dl[i]);
        CHECK(rc == (i == 0 ? 1 : 0), "segment %d: %d", i, rc);
    }
    srpc_hdr_t h;
    uint32_t len;
    const uint8_t *m = srpc_reassembler_message(r, &h, &len);
    CHECK(m && len == LEN && memcmp(m, msg, LEN) == 0 && h.version == SRPC_VERSION_3 && h.req_id == t.req_id,
          "the v3 message comes together");
    srpc_reassembler_destroy(r);
    t.req_id = 1ull << 48;
    CHECK(srpc_msg_segment(&t, msg, 10, SEG, out, sizeof(out), dl, 8) == -EINVAL, "v3 req_id over 48 bits");
}

static void test_codec_fuzz(void)
{
    enum { MAXMSG = 20000, MAXD = 64 };
    static uint8_t msg[MAXMSG], out[MAXMSG + MAXD * SRPC_HDR_LEN + 64], dg[SRPC_HDR_LEN + 9000 + 16];
    static uint32_t lens[MAXD];
    srpc_reassembler_t *r = NULL;
    CHECK(srpc_reassembler_create(MAXMSG, &r) == 0, "fuzz reassembler");
    if (!r)
        return;
    /* Single-threaded: under TSan, which looks only for races, a quarter of the rounds (they were
     * most of test_core's 30 s there, in a suite near CI's 30 minutes) */
#if defined(__SANITIZE_THREAD__)
    unsigned bad_code = 0, bad_len = 0, completed = 0, rounds = 5000;
#else
    unsigned bad_code = 0, bad_len = 0, completed = 0, rounds = 20000;
#endif
    for (unsigned it = 0; it < rounds; it++) {
        uint32_t len = fz(MAXMSG + 1), seg = 1 + fz(it % 3 ? 1500 : 9000);
        for (uint32_t i = 0; i < len; i++)
            msg[i] = (uint8_t)fz(256);
        srpc_hdr_t h = {.type = SRPC_REQUEST, .func_id = (uint16_t)fz(4), .req_id = fz(3)};
        int n = srpc_msg_segment(&h, msg, len, seg, out, sizeof(out), lens, MAXD);
        if (n <= 0)
            continue; /* more than MAXD segments: another message */
        if (it % 16 == 0)
            srpc_reassembler_reset(r);
        size_t off = 0;
        for (int d = 0; d < n; off += lens[d], d++) {
            size_t l = lens[d];
            if (l > sizeof(dg) - 16)
                continue;
            memcpy(dg, out + off, l);
            switch (fz(6)) {
            case 0: dg[fz((uint32_t)l)] ^= (uint8_t)(1 + fz(255)); break;        /* flip a byte */
            case 1: l = fz((uint32_t)l + 1); break;                              /* truncate */
            case 2: l += 1 + fz(16); break;                                      /* garbage tail */
            case 3: dg[2 + fz(SRPC_HDR_LEN - 2)] = (uint8_t)fz(256); break;      /* header field */
            default: break;                                                      /* as sent */
            }
            int rc = srpc_reassembler_push(r, dg, l);
            if (rc != 0 && rc != 1 && rc != -EALREADY && rc != -EBADMSG && rc != -EILSEQ && rc != -EMSGSIZE && rc != -EPROTO &&
                rc != -EBUSY && rc != -E2BIG)
                bad_code++;
            if (rc == 1) {
                srpc_hdr_t mh;
                uint32_t ml = 0;
                const uint8_t *m = srpc_reassembler_message(r, &mh, &ml);
                completed++;
                if (!m || ml != mh.msg_len)
                    bad_len++;
                else
                    for (uint32_t i = 0; i < ml; i++) /* reads every byte: ASan checks the bounds */
                        fz_sink += m[i];
                srpc_reassembler_reset(r);
            }
        }
    }
    CHECK(bad_code == 0 && bad_len == 0 && completed > rounds / 200, "fuzz: %u undocumented codes, %u bad messages, %u completed",
          bad_code, bad_len, completed);
    srpc_reassembler_destroy(r);
}

static void test_codec_errors(void)
{
    enum { S = 100, LEN = 250, NSEG = 3 };
    uint8_t msg[LEN], out[LEN + NSEG * SRPC_HDR_LEN], bad[LEN + NSEG * SRPC_HDR_LEN];
    uint32_t dlen[NSEG];
    for (uint32_t i = 0; i < LEN; i++)
        msg[i] = msg_byte(i);
    srpc_hdr_t tmpl = {.type = SRPC_REQUEST, .func_id = 3, .req_id = 42, .aux = 0};

    /* srpc_msg_segment */
    size_t need = sizeof(out);
    CHECK(srpc_msg_segment(&tmpl, msg, LEN, S, out, need - 1, dlen, NSEG) == -ENOBUFS, "cap one short");
    CHECK(srpc_msg_segment(&tmpl, msg, LEN, S, out, need, dlen, NSEG - 1) == -ENOBUFS, "max_dgrams one short");
    CHECK(srpc_msg_segment(&tmpl, msg, 0, S, out, SRPC_HDR_LEN - 1, dlen, 1) == -ENOBUFS, "empty message, cap 21");
    CHECK(srpc_msg_segment(&tmpl, msg, 0, S, out, SRPC_HDR_LEN, dlen, 0) == -ENOBUFS, "max_dgrams 0");
    CHECK(srpc_msg_segment(&tmpl, msg, LEN, 0, out, need, dlen, NSEG) == -EINVAL, "S 0");
    CHECK(srpc_msg_segment(&tmpl, msg, LEN, SRPC_MAX_SEG_DATA + 1, out, need, dlen, NSEG) == -EINVAL, "S too large");
    CHECK(srpc_msg_segment(NULL, msg, LEN, S, out, need, dlen, NSEG) == -EINVAL, "NULL tmpl");
    CHECK(srpc_msg_segment(&tmpl, NULL, LEN, S, out, need, dlen, NSEG) == -EINVAL, "NULL data");
    CHECK(srpc_msg_segment(&tmpl, msg, LEN, S, NULL, need, dlen, NSEG) == -EINVAL, "NULL out");
    CHECK(srpc_msg_segment(&tmpl, msg, LEN, S, out, need, NULL, NSEG) == -EINVAL, "NULL dgram_len");
    srpc_hdr_t t3 = tmpl;
    t3.type = 3;
    CHECK(srpc_msg_segment(&t3, msg, LEN, S, out, need, dlen, NSEG) == -EINVAL, "type 3");
    CHECK(srpc_msg_segment(&tmpl, msg, 65536, 1, out, need, dlen, NSEG) == -EMSGSIZE, "65536 segments");
    CHECK(srpc_msg_segment(&tmpl, NULL, 0, 1, out, need, dlen, NSEG) == 1, "empty message, NULL data");
    CHECK(srpc_msg_segment(&tmpl, msg, LEN, S, out, need, dlen, NSEG) == NSEG, "exact fit");
    const size_t o1 = dlen[0], o2 = dlen[0] + dlen[1]; /* datagrams 1 and 2 */

    srpc_reassembler_t *r = NULL;
    CHECK(srpc_reassembler_create(LEN, NULL) == -EINVAL, "create NULL out");
    CHECK(srpc_reassembler_create(LEN, &r) == 0, "create");
    if (!r)
        return;
    CHECK(srpc_reassembler_push(NULL, out, dlen[0]) == -EINVAL, "push to NULL");
    CHECK(srpc_reassembler_push(r, NULL, 30) == -EINVAL, "NULL datagram");

    /* Malformed datagrams, alone and while a message is in progress: nothing changes. */
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1)
            CHECK(srpc_reassembler_push(r, out + o1, dlen[1]) == 0, "segment 1 starts the message");
        CHECK(srpc_reassembler_push(r, out, SRPC_HDR_LEN - 1) == -EMSGSIZE, "short (%d)", phase);
        CHECK(srpc_reassembler_push(r, out, 0) == -EMSGSIZE, "empty (%d)", phase);
        memcpy(bad, out, dlen[0]);
        bad[0] = 0x5A;
        CHECK(srpc_reassembler_push(r, bad, dlen[0]) == -EBADMSG, "bad magic (%d)", phase);
        memcpy(bad, out, dlen[0]);
        bad[1] = (uint8_t)(6 << 4 | SRPC_REQUEST);
        CHECK(srpc_reassembler_push(r, bad, dlen[0]) == -EBADMSG, "version 6 (%d)", phase);
        bad[1] = (uint8_t)(SRPC_VERSION_5 << 4 | SRPC_REQUEST), bad[4] = bad[5] = 0;
        const uint16_t c5 = srpc_hdr_check16(bad);
        bad[4] = (uint8_t)(c5 >> 8), bad[5] = (uint8_t)c5;
        CHECK(srpc_reassembler_push(r, bad, dlen[0]) == -EBADMSG, "version 5: its session's tag unchecked (%d)",
              phase);
        memcpy(bad, out, dlen[0]);
        bad[1] = (uint8_t)(SRPC_VERSION_4 << 4 | SRPC_REQUEST), bad[4] = bad[5] = 0;
        const uint16_t c4 = srpc_hdr_check16(bad);
        bad[4] = (uint8_t)(c4 >> 8), bad[5] = (uint8_t)c4;
        CHECK(srpc_reassembler_push(r, bad, dlen[0]) == -EBADMSG, "version 4, its tag unchecked here (%d)", phase);
        bad[1] = (uint8_t)(SRPC_VERSION << 4 | 3);
        CHECK(srpc_reassembler_push(r, bad, dlen[0]) == -EBADMSG, "type 3 (%d)", phase);
        srpc_hdr_t h = tmpl;
        h.seq = NSEG;
        h.nseg = NSEG;
        h.msg_len = LEN;
        srpc_hdr_encode(&h, bad);
        CHECK(srpc_reassembler_push(r, bad, SRPC_HDR_LEN + S) == -EPROTO, "seq >= nseg (%d)", phase);
        h.seq = 0;
        h.nseg = 0;
        srpc_hdr_encode(&h, bad);
        CHECK(srpc_reassembler_push(r, bad, SRPC_HDR_LEN + S) == -EPROTO, "nseg 0 (%d)", phase);
        /* Same message, msg_len 240 (still a valid 3-segment message at S 100). */
        memcpy(bad, out, dlen[0]);
        h = tmpl;
        h.seq = 0;
        h.nseg = NSEG;
        h.msg_len = LEN - 10;
        srpc_hdr_encode(&h, bad);
        CHECK(srpc_reassembler_push(r, bad, dlen[0]) == (phase ? -EPROTO : 0),
              "msg_len disagrees (%d)", phase);
        if (phase == 0)
            srpc_reassembler_reset(r);
        /* Same message, segment 0 of S 101: disagrees with S 100. */
        h.msg_len = LEN;
        srpc_hdr_encode(&h, bad);
        memcpy(bad + SRPC_HDR_LEN, msg, S + 1);
        CHECK(srpc_reassembler_push(r, bad, SRPC_HDR_LEN + S + 1) == (phase ? -EPROTO : 0),
              "S disagrees (%d)", phase);
        if (phase == 0)
            srpc_reassembler_reset(r);
        /* A single segment that does not carry msg_len bytes. */
        h.nseg = 1;
        h.msg_len = 10;
        srpc_hdr_encode(&h, bad);
        CHECK(srpc_reassembler_push(r, bad, SRPC_HDR_LEN + 9) == -EPROTO, "single short (%d)", phase);
        /* Another message: other req_id, func_id or type. */
        h = tmpl;
        h.nseg = 1;
        h.msg_len = 4;
        h.req_id = 43;
        srpc_hdr_encode(&h, bad);
        CHECK(srpc_reassembler_push(r, bad, SRPC_HDR_LEN + 4) == (phase ? -EBUSY : 1),
              "other req_id (%d)", phase);
        h.req_id = tmpl.req_id;
        h.func_id = 4;
        srpc_hdr_encode(&h, bad);
        CHECK(srpc_reassembler_push(r, bad, SRPC_HDR_LEN + 4) == (phase ? -EBUSY : 1),
              "other func_id (%d)", phase);
        h.func_id = tmpl.func_id;
        h.type = SRPC_RESPONSE;
        srpc_hdr_encode(&h, bad);
        CHECK(srpc_reassembler_push(r, bad, SRPC_HDR_LEN + 4) == (phase ? -EBUSY : 1),
              "other type (%d)", phase);
        /* Larger than max_msg (one and several segments). */
        h = tmpl;
        h.req_id = 44;
        h.nseg = 1;
        h.msg_len = LEN + 1;
        srpc_hdr_encode(&h, bad);
        CHECK(srpc_reassembler_push(r, bad, SRPC_HDR_LEN + LEN + 1) == (phase ? -EBUSY : -E2BIG),
              "msg_len > max (%d)", phase);
        h.nseg = NSEG;
        srpc_hdr_encode(&h, bad);
        CHECK(srpc_reassembler_push(r, bad, SRPC_HDR_LEN + S) == (phase ? -EBUSY : -E2BIG),
              "msg_len > max, 3 segments (%d)", phase);
        if (phase == 0) {
            /* The last accepted single-segment message is still there; -E2BIG kept it. */
            srpc_hdr_t mh;
            uint32_t ml;
            CHECK(srpc_reassembler_message(r, &mh, &ml) && mh.type == SRPC_RESPONSE && ml == 4,
                  "rejected datagrams keep the completed message");
            srpc_reassembler_reset(r);
        }
    }
    /* The message in progress survived all of it. */
    CHECK(srpc_reassembler_push(r, out + o1, dlen[1]) == -EALREADY, "duplicate of segment 1");
    CHECK(srpc_reassembler_push(r, out + o2, dlen[2]) == 0, "segment 2");
    CHECK(srpc_reassembler_message(r, NULL, NULL) == NULL, "not complete yet");
    CHECK(srpc_reassembler_push(r, out, dlen[0]) == 1, "segment 0 completes");
    uint32_t ml = 0;
    const uint8_t *m = srpc_reassembler_message(r, NULL, &ml);
    CHECK(m && ml == LEN && memcmp(m, msg, LEN) == 0, "message intact after rejections");
    /* A segment of a new message replaces the completed one. */
    srpc_hdr_t h = tmpl;
    h.req_id = 45;
    h.nseg = 1;
    h.msg_len = 3;
    srpc_hdr_encode(&h, bad);
    memcpy(bad + SRPC_HDR_LEN, "abc", 3);
    CHECK(srpc_reassembler_push(r, bad, SRPC_HDR_LEN + 3) == 1, "new message after a completed one");
    srpc_hdr_t mh;
    m = srpc_reassembler_message(r, &mh, &ml);
    CHECK(m && ml == 3 && memcmp(m, "abc", 3) == 0 && mh.req_id == 45, "the new message");
    srpc_reassembler_destroy(r);

    /* max_msg 0: only empty messages. */
    CHECK(srpc_reassembler_create(0, &r) == 0, "create(0)");
    if (r) {
        h.msg_len = 0;
        srpc_hdr_encode(&h, bad);
        CHECK(srpc_reassembler_push(r, bad, SRPC_HDR_LEN) == 1, "empty message");
        CHECK(srpc_reassembler_message(r, NULL, &ml) != NULL && ml == 0, "empty message read");
        h.req_id = 46;
        h.msg_len = 1;
        srpc_hdr_encode(&h, bad);
        CHECK(srpc_reassembler_push(r, bad, SRPC_HDR_LEN + 1) == -E2BIG, "1 byte > max 0");
        srpc_reassembler_destroy(r);
    }
}

/* Scatter into 2 TQs (1000-byte and 24-byte elements, 5 each: rings of 8192 and 4096 bytes,
 * so requests land across the ring end), read back, and every invalid argument. */
static void test_tq_scatter(void)
{
    srpc_tq_t *tq[2] = {NULL, NULL};
    CHECK(srpc_tq_create(1000, 5, &tq[0]) == 0 && srpc_tq_create(24, 5, &tq[1]) == 0, "create");
    if (!tq[0] || !tq[1])
        goto done;
    const uint32_t sizes[2] = {1000, 24};
    uint8_t req[1024];
    int ok = 1;
    for (uint64_t seq = 0; seq < 23; seq++) {
        for (uint32_t i = 0; i < 1024; i++)
            req[i] = (uint8_t)(seq * 5 + i);
        ok &= srpc_tq_scatter(tq, sizes, 2, seq, req, 1024) == 0;
        ok &= memcmp(srpc_tq_elem(tq[0], seq), req, 1000) == 0;
        ok &= memcmp(srpc_tq_elem(tq[1], seq), req + 1000, 24) == 0;
    }
    CHECK(ok, "scatter into 2 TQs");
    /* Five consecutive requests read back as one contiguous run of each TQ. */
    for (uint64_t seq = 100; seq < 105; seq++) {
        for (uint32_t i = 0; i < 1024; i++)
            req[i] = (uint8_t)(seq * 3 + i);
        ok &= srpc_tq_scatter(tq, sizes, 2, seq, req, 1024) == 0;
    }
    const uint8_t *run0 = srpc_tq_elem(tq[0], 100), *run1 = srpc_tq_elem(tq[1], 100);
    for (uint64_t k = 0; k < 5; k++)
        for (uint32_t i = 0; i < 1024; i++)
            ok &= (i < 1000 ? run0[k * 1000 + i] : run1[k * 24 + i - 1000]) == (uint8_t)((100 + k) * 3 + i);
    CHECK(ok, "contiguous runs after scatter");

    /* One tensor: len may be shorter than the element; the rest is untouched. */
    uint8_t *e = srpc_tq_elem(tq[0], 7);
    memset(e, 0xEE, 1000);
    CHECK(srpc_tq_scatter(tq, sizes, 1, 7, "hello", 5) == 0, "one short tensor");
    CHECK(memcmp(e, "hello", 5) == 0 && e[5] == 0xEE && e[999] == 0xEE, "copied 5 bytes only");
    CHECK(srpc_tq_scatter(tq, sizes, 1, 7, NULL, 0) == 0 && e[0] == 'h', "empty request");

    /* Errors copy nothing. */
    memset(e, 0xEE, 1000);
    memset(req, 0x11, sizeof(req));
    const uint32_t too_big[2] = {1001, 24}, short_sizes[2] = {1000, 23};
    CHECK(srpc_tq_scatter(tq, sizes, 2, 7, req, 1023) == -EINVAL, "len < sum");
    CHECK(srpc_tq_scatter(tq, sizes, 2, 7, req, 1025) == -EINVAL, "len > sum");
    CHECK(srpc_tq_scatter(tq, sizes, 1, 7, req, 1001) == -EINVAL, "one tensor, len > size");
    CHECK(srpc_tq_scatter(tq, too_big, 2, 7, req, 1025) == -EINVAL, "size > element");
    CHECK(srpc_tq_scatter(tq, too_big, 1, 7, req, 5) == -EINVAL, "one size > element");
    CHECK(srpc_tq_scatter(tq, short_sizes, 2, 7, req, 1024) == -EINVAL, "sizes disagree with len");
    CHECK(srpc_tq_scatter(tq, sizes, 0, 7, req, 0) == -EINVAL, "n 0");
    CHECK(srpc_tq_scatter(NULL, sizes, 2, 7, req, 1024) == -EINVAL, "NULL tqs");
    CHECK(srpc_tq_scatter(tq, NULL, 2, 7, req, 1024) == -EINVAL, "NULL sizes");
    CHECK(srpc_tq_scatter(tq, sizes, 2, 7, NULL, 1024) == -EINVAL, "NULL data");
    srpc_tq_t *with_null[2] = {tq[0], NULL};
    CHECK(srpc_tq_scatter(with_null, sizes, 2, 7, req, 1024) == -EINVAL, "NULL TQ");
    CHECK(e[0] == 0xEE && e[999] == 0xEE, "nothing copied on error");
done:
    srpc_tq_destroy(tq[0]);
    srpc_tq_destroy(tq[1]);
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
    uint64_t el = 0;
    memset(lat, 0, sizeof(lat));
    rc = srpc_raw_closed_loop("127.0.0.1", a.port, 1024, 0, 0, 16, 20, 50, lat, &el);
    CHECK(rc == 0 && all_positive(lat, 50) && el > 0, "closed loop, 16 outstanding: %d", rc);
    CHECK(srpc_raw_closed_loop("127.0.0.1", a.port, 8, 0, 0, 0, 0, 1, lat, NULL) == -EINVAL, "concurrency 0");

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
    memset(lat, 0, sizeof(lat));
    rc = srpc_raw_closed_loop("127.0.0.1", a.port, 602112, 4000, 0, 4, 2, 20, lat, NULL);
    CHECK(rc == 0 && all_positive(lat, 20), "message closed loop, 4 outstanding: %d", rc);
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

/* ------------------------------------------------------------------ allow-list */

static struct sockaddr_storage sa4(const char *ip)
{
    struct sockaddr_storage ss = {0};
    struct sockaddr_in *s = (struct sockaddr_in *)&ss;
    s->sin_family = AF_INET;
    inet_pton(AF_INET, ip, &s->sin_addr);
    return ss;
}

static struct sockaddr_storage sa6(const char *ip)
{
    struct sockaddr_storage ss = {0};
    struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
    s->sin6_family = AF_INET6;
    inet_pton(AF_INET6, ip, &s->sin6_addr);
    return ss;
}

/* Per-address byte counts against a plain array model: random adds and subtractions over a
 * small table, so probe runs wrap and backward-shift deletes move entries. */
static void test_srcmem(void)
{
    enum { MAXC = 48, NADDR = 64 };
    srcmem_t m;
    CHECK(srcmem_init(&m, 0) == -EINVAL, "0 clients refused");
    CHECK(srcmem_init(&m, MAXC) == 0, "init");
    uint64_t model[NADDR] = {0};
    unsigned live = 0, full = 0, bad = 0;
    uint64_t x = 12345;
    for (int op = 0; op < 200000; op++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        unsigned a = (unsigned)(x >> 33) % NADDR;
        srpc_addr_t ad = {.family = (a & 1) ? AF_INET6 : AF_INET};
        ad.ip[(a * 7) % 16] = (uint8_t)(a + 1);
        ad.ip[0] ^= (uint8_t)(a >> 3);
        uint64_t n = (x >> 20) % 5000 + 1;
        if ((x >> 40) % 3) {
            int r = srcmem_add(&m, &ad, n);
            if (r == -ENOSPC) {
                full++;
                if (model[a] != 0 || live < MAXC)
                    bad++;
            } else if (r == 0) {
                live += model[a] == 0;
                model[a] += n;
            } else {
                bad++;
            }
        } else {
            srcmem_sub(&m, &ad, n);
            uint64_t before = model[a];
            model[a] = n < model[a] ? model[a] - n : 0;
            live -= before != 0 && model[a] == 0;
        }
        if (op % 97 == 0)
            for (unsigned b = 0; b < NADDR; b++) {
                srpc_addr_t bd = {.family = (b & 1) ? AF_INET6 : AF_INET};
                bd.ip[(b * 7) % 16] = (uint8_t)(b + 1);
                bd.ip[0] ^= (uint8_t)(b >> 3);
                bad += srcmem_get(&m, &bd) != model[b];
            }
    }
    CHECK(bad == 0, "%u disagreements with the model", bad);
    CHECK(full > 0 && m.used == live, "table filled up at times (%u) and counts %u live addresses (%u)", full,
          m.used, live);
    srpc_addr_t zero = {0};
    CHECK(srcmem_add(&m, &zero, 1) == -EINVAL, "family 0 refused");
    srcmem_destroy(&m);
}

static void test_allowlist(void)
{
    srpc_allowlist_t l;
    CHECK(srpc_allowlist_parse(&l, NULL) == 0 && l.n == 0, "NULL: everyone");
    struct sockaddr_storage a = sa4("203.0.113.9");
    CHECK(srpc_allowlist_match(&l, (struct sockaddr *)&a), "an empty list allows all");
    CHECK(srpc_allowlist_parse(&l, "10.0.0.0/8, 192.168.1.7,fd00::/8  2001:db8::1") == 0 && l.n == 4, "parse 4");
    const struct {
        const char *ip;
        int v6, want;
    } cases[] = {{"10.1.2.3", 0, 1}, {"10.255.255.255", 0, 1}, {"11.0.0.1", 0, 0}, {"9.255.255.255", 0, 0},
                 {"192.168.1.7", 0, 1}, {"192.168.1.8", 0, 0}, {"fd12::5", 1, 1}, {"fe00::1", 1, 0},
                 {"2001:db8::1", 1, 1}, {"2001:db8::2", 1, 0}, {"::ffff:10.9.9.9", 1, 1},
                 {"::ffff:11.9.9.9", 1, 0}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct sockaddr_storage s = cases[i].v6 ? sa6(cases[i].ip) : sa4(cases[i].ip);
        CHECK(srpc_allowlist_match(&l, (struct sockaddr *)&s) == cases[i].want, "%s", cases[i].ip);
    }
    CHECK(srpc_allowlist_parse(&l, "10.0.0.0/12") == 0, "/12");
    a = sa4("10.15.255.255");
    struct sockaddr_storage b = sa4("10.16.0.0");
    CHECK(srpc_allowlist_match(&l, (struct sockaddr *)&a) && !srpc_allowlist_match(&l, (struct sockaddr *)&b),
          "a prefix that is not a whole byte");
    CHECK(srpc_allowlist_parse(&l, "0.0.0.0/0") == 0 && srpc_allowlist_match(&l, (struct sockaddr *)&b), "/0");
    const char *bad[] = {"10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8x", "host.example",
                         "10.0.0", "1.2.3.4/+8"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(srpc_allowlist_parse(&l, bad[i]) == -EINVAL && l.n == 0, "'%s' refused", bad[i]);
    char many[33 * 12 + 1] = "";
    for (int i = 0; i < 33; i++)
        sprintf(many + strlen(many), "10.0.0.%d,", i);
    CHECK(srpc_allowlist_parse(&l, many) == -E2BIG, "33 entries");
}

/* ------------------------------------------------------------------ minimal protocol server */

struct min_arg {
    uint16_t port;
    int busy;
    volatile int stop;
    int rc;
};

static void *min_main(void *p)
{
    struct min_arg *a = p;
    a->rc = srpc_min_serve("127.0.0.1", a->port, a->busy, &a->stop);
    return NULL;
}

/* Right answers in each version (one and several segments, calls outstanding), the errors, and
 * hostile datagrams dropped with serving going on (run under ASan+UBSan and TSan). */
static void test_min_server_mode(int busy)
{
    struct min_arg a = {.port = free_port(), .busy = busy};
    pthread_t th;
    if (a.port == 0 || pthread_create(&th, NULL, min_main, &a) != 0) {
        CHECK(0, "min server thread");
        return;
    }
    static float x[256], y[256];
    static uint8_t big[602112], out[602112];
    for (int i = 0; i < 256; i++)
        x[i] = (float)i * 0.5f - 7.25f;
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 31u + 7u);
    for (unsigned v = 1; v <= 3; v++) {
        srpc_client_config_t cfg;
        srpc_client_config_init(&cfg);
        cfg.host = "127.0.0.1", cfg.port = a.port, cfg.version = (uint8_t)v, cfg.seg_size = 8950;
        cfg.wait_for_ready = 1, cfg.max_reply = sizeof(out);
        srpc_client_t *c = NULL;
        int rc = srpc_client_create(&cfg, &c);
        CHECK(rc == 0, "client v%u: %d", v, rc);
        if (rc)
            continue;
        uint32_t n = 0;
        int code = -1;
        rc = srpc_client_call(c, 1, x, sizeof(x), y, sizeof(y), &n, &code, 5000000);
        int right = rc == 0 && code == 0 && n == sizeof(y);
        for (int i = 0; right && i < 256; i++)
            right = y[i] == x[i] + 1.0f;
        CHECK(right, "vecadd v%u: rc %d code %d len %u", v, rc, code, n);
        rc = srpc_client_call(c, 3, big, 300000, out, sizeof(out), &n, &code, 5000000);
        CHECK(rc == 0 && code == 0 && n == 300000 && memcmp(out, big, n) == 0, "echo 300000 v%u: %d %d %u", v, rc,
              code, n);
        rc = srpc_client_call(c, 4, big, sizeof(big), out, sizeof(out), &n, &code, 5000000);
        CHECK(rc == 0 && code == 0 && n == 4000 && memcmp(out, big, 4000) == 0, "head v%u: %d %d %u", v, rc, code, n);
        rc = srpc_client_call(c, 77, "x", 1, out, sizeof(out), &n, &code, 5000000);
        CHECK(rc == 0 && code == SRPC_E_UNKNOWN_FUNCTION, "unknown function v%u: %d %d", v, rc, code);
        rc = srpc_client_call(c, 1, x, 12, out, sizeof(out), &n, &code, 5000000);
        CHECK(rc == 0 && code == SRPC_E_BAD_REQUEST, "vecadd short v%u: %d %d", v, rc, code);
        uint64_t lat[64], errs = 0, el = 0;
        rc = srpc_client_closed_loop(c, 4, big, sizeof(big), 8, 4, 64, 5000000, lat, &errs, &el);
        CHECK(rc == 0 && errs == 0 && all_positive(lat, 64), "head, 8 outstanding v%u: %d errors %llu", v, rc,
              (unsigned long long)errs);
        srpc_client_destroy(c);
    }
    /* Hostile datagrams: truncated, garbage, bad checks, impossible segmentation, a too large
     * request, segments that disagree. None may crash it; only the too-large one is answered. */
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(a.port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    static uint8_t dg[65536];
    srand(7);
    for (int k = 0; k < 2000; k++) {
        size_t len = (size_t)(rand() % 200);
        for (size_t i = 0; i < len; i++)
            dg[i] = (uint8_t)rand();
        if (k % 2 && len >= SRPC_HDR_LEN) { /* a valid v2 header over random fields: reaches the segment logic */
            srpc_hdr_t h = {.type = SRPC_REQUEST, .version = 2, .func_id = (uint16_t)(1 + rand() % 4),
                            .req_id = (uint64_t)(rand() % 8), .nseg = (uint16_t)(1 + rand() % 4),
                            .msg_len = (uint32_t)(rand() % 400)};
            h.seq = (uint16_t)(rand() % h.nseg);
            srpc_hdr_encode(&h, dg);
        }
        (void)sendto(fd, dg, len, 0, (struct sockaddr *)&sa, sizeof(sa));
    }
    srpc_hdr_t h = {.type = SRPC_REQUEST, .version = 2, .func_id = 3, .req_id = 99, .seq = 0, .nseg = 50,
                    .msg_len = 2000000};
    memset(dg, 0, 40000 + SRPC_HDR_LEN);
    srpc_hdr_encode(&h, dg);
    (void)sendto(fd, dg, 40000 + SRPC_HDR_LEN, 0, (struct sockaddr *)&sa, sizeof(sa));
    struct timeval tv = {.tv_sec = 1};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int too_large = 0;
    for (;;) { /* the answers to the random valid ones come first; the last is TOO_LARGE */
        ssize_t r = recv(fd, dg, sizeof(dg), 0);
        srpc_hdr_t g;
        if (r < 0)
            break;
        if (srpc_hdr_decode(dg, (size_t)r, &g) == 0 && g.req_id == 99)
            too_large = g.type == SRPC_ERROR && g.aux == SRPC_E_TOO_LARGE;
    }
    close(fd);
    CHECK(too_large, "a request larger than SRPC_MIN_MAX_MSG is answered TOO_LARGE");
    srpc_client_config_t cfg;
    srpc_client_config_init(&cfg);
    cfg.host = "127.0.0.1", cfg.port = a.port;
    srpc_client_t *c = NULL;
    uint32_t n = 0;
    int code = -1;
    int rc = srpc_client_create(&cfg, &c);
    if (rc == 0)
        rc = srpc_client_call(c, 1, x, sizeof(x), y, sizeof(y), &n, &code, 5000000);
    CHECK(rc == 0 && code == 0 && y[3] == x[3] + 1.0f, "served after the hostile datagrams: %d %d", rc, code);
    srpc_client_destroy(c);
    if (busy) { /* the many-socket client against it: right replies, and ERRORs counted */
        static uint64_t lat[500];
        uint64_t el = 0, errs = 99;
        rc = srpc_multi_closed_loop("127.0.0.1", a.port, 64, 1, x, sizeof(x), y, sizeof(y), 8, 50, 500, lat, &el,
                                    &errs);
        CHECK(rc == 0 && errs == 0 && all_positive(lat, 500) && el > 0, "64 sockets, 8 outstanding: %d errors %llu",
              rc, (unsigned long long)errs);
        static float wrong[256];
        rc = srpc_multi_closed_loop("127.0.0.1", a.port, 3, 1, x, sizeof(x), wrong, sizeof(wrong), 2, 0, 20, lat,
                                    NULL, &errs);
        CHECK(rc == 0 && errs == 20, "replies unlike expect counted: %d %llu", rc, (unsigned long long)errs);
        rc = srpc_multi_closed_loop("127.0.0.1", a.port, 2, 77, x, 4, NULL, 0, 1, 0, 10, lat, NULL, &errs);
        CHECK(rc == 0 && errs == 10, "ERROR replies counted: %d %llu", rc, (unsigned long long)errs);
        CHECK(srpc_multi_closed_loop("127.0.0.1", a.port, 0, 1, x, 4, NULL, 0, 1, 0, 1, lat, NULL, &errs) == -EINVAL,
              "no sockets");
        CHECK(srpc_multi_closed_loop("127.0.0.1", a.port, 1, 1, x, 65486, NULL, 0, 1, 0, 1, lat, NULL, &errs) ==
                  -EINVAL, "a request over one datagram");
    }
    __atomic_store_n(&a.stop, 1, __ATOMIC_RELAXED);
    pthread_join(th, NULL);
    CHECK(a.rc == 0, "min server returned %d", a.rc);
}

static void test_min_server(void)
{
    test_min_server_mode(0);
    test_min_server_mode(1);
    int stop = 0;
    CHECK(srpc_min_serve("127.0.0.1", 0, 0, NULL) == -EINVAL, "NULL stop");
    stop = 1;
    CHECK(srpc_min_serve("127.0.0.1", 0, 1, &stop) == 0, "stop before start");
}

int main(void)
{
    test_allowlist();
    test_srcmem();
    test_crc32c();
    test_hdr_roundtrip();
    test_hdr_layout();
    test_hdr_v2();
    test_hdr_reject();
    test_seg_table();
    test_seg_generated();
    test_seg_count();
    test_strerror();
    test_tq();
    test_codec_roundtrip();
    test_codec_errors();
    test_codec_v3();
    test_codec_fuzz();
    test_tq_scatter();
    test_raw_udp();
    test_min_server();
    test_schedules();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
