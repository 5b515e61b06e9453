/* test_gpu.c: tests of the GPU API (splitrpc_gpu.h): argument checks and -ENODEV without a driver; device Tensor Queues, copies, flags and O2 on a GPU. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "splitrpc.h"
#include "splitrpc_gpu.h"

#include "check.h"

#define PAGE 4096

static int have_kernels(void)
{
    return (srpc_features() & SRPC_FEATURE_CUDA) != 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Spins (acquire loads) until *flag == value or timeout_s passes; 1 when it got there. */
static int wait_flag(const uint32_t *flag, uint32_t value, double timeout_s)
{
    double end = now_s() + timeout_s;
    while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != value) {
        if (now_s() > end)
            return 0;
    }
    return 1;
}

/* A GPU test that cannot go on without hanging (a kernel that never answers): report and
 * leave without stopping anything. */
static void give_up(const char *why)
{
    failed++;
    fprintf(stderr, "FAIL: %s (last error: %s); giving up\n", why, srpc_gpu_last_error());
    printf("%d passed, %d failed\n", passed, failed);
    fflush(stdout);
    _exit(1);
}

/* ------------------------------------------------------------------ anywhere */

/* Bad arguments are refused before the driver is looked for. */
static void test_bad_args(void)
{
    char name[64];
    size_t g;
    srpc_dtq_t *q = (srpc_dtq_t *)1;
    srpc_o2_t *o = (srpc_o2_t *)1;
    void *h = (void *)1;
    uint64_t d = 1;
    uint32_t flag = 0, in[4] = {0};

    CHECK(srpc_gpu_init(-1) == -EINVAL, "init(-1)");
    CHECK(srpc_gpu_device_name(0, NULL, 64) == -EINVAL, "name NULL");
    CHECK(srpc_gpu_device_name(0, name, 0) == -EINVAL, "name cap 0");
    CHECK(srpc_gpu_device_name(-1, name, sizeof(name)) == -EINVAL, "name device -1");
    CHECK(srpc_gpu_granularity(0, NULL) == -EINVAL, "granularity NULL");
    CHECK(srpc_gpu_granularity(-1, &g) == -EINVAL, "granularity -1");
    srpc_gpu_info_t info;
    uint64_t fr = 1, tot = 1;
    CHECK(srpc_gpu_device_info(0, NULL) == -EINVAL, "device_info NULL");
    CHECK(srpc_gpu_device_info(-1, &info) == -EINVAL, "device_info -1");
    CHECK(srpc_gpu_mem_info(0, NULL, &tot) == -EINVAL && srpc_gpu_mem_info(0, &fr, NULL) == -EINVAL, "mem_info NULL");
    CHECK(srpc_gpu_mem_info(-1, &fr, &tot) == -EINVAL && fr == 0 && tot == 0, "mem_info -1");
    /* What the kernels were built for: "sm_N ... compute_N" exactly when they are compiled in. */
    const char *archs = srpc_gpu_kernel_archs();
    CHECK(have_kernels() ? (strncmp(archs, "sm_", 3) == 0 && strstr(archs, " compute_") != NULL) : archs[0] == '\0',
          "kernel archs '%s'", archs);

    CHECK(srpc_dtq_create(0, 64, 16, NULL) == -EINVAL, "dtq NULL out");
    CHECK(srpc_dtq_create(0, 0, 16, &q) == -EINVAL && q == NULL, "dtq elem 0");
    q = (srpc_dtq_t *)1;
    CHECK(srpc_dtq_create(0, 64, 0, &q) == -EINVAL && q == NULL, "dtq capacity 0");
    CHECK(srpc_dtq_create(-1, 64, 16, &q) == -EINVAL, "dtq device -1");
    CHECK(srpc_dtq_check_mirror(NULL) == -EINVAL, "mirror NULL");
    srpc_dtq_destroy(NULL);
    passed++; /* destroy(NULL) returned */

    CHECK(srpc_gpu_host_alloc(0, &h, &d) == -EINVAL, "host_alloc 0 bytes");
    CHECK(srpc_gpu_host_alloc(PAGE, NULL, &d) == -EINVAL, "host_alloc NULL host");
    CHECK(srpc_gpu_host_register(NULL, PAGE, &d) == -EINVAL, "register NULL");
    CHECK(srpc_gpu_host_register((char *)in + 1, PAGE, &d) == -EINVAL, "register unaligned");
    CHECK(srpc_gpu_host_unregister(NULL) == -EINVAL, "unregister NULL");
    srpc_gpu_host_free(NULL);
    passed++;

    CHECK(srpc_gpu_copy_htod(0, in, sizeof(in), 0) == -EINVAL, "htod dst 0");
    CHECK(srpc_gpu_copy_htod(1, NULL, sizeof(in), 0) == -EINVAL, "htod src NULL");
    CHECK(srpc_gpu_copy_dtoh(NULL, 1, sizeof(in), 0) == -EINVAL, "dtoh dst NULL");
    CHECK(srpc_gpu_copy_dtoh(in, 0, sizeof(in), 0) == -EINVAL, "dtoh src 0");
    CHECK(srpc_gpu_signal(0, NULL, 0, 1) == -EINVAL, "signal NULL flag");

    CHECK(srpc_o2_start(0, 256, NULL) == -EINVAL, "o2 NULL out");
    CHECK(srpc_o2_start(0, 0, &o) == -EINVAL && o == NULL, "o2 n_floats 0");
    CHECK(srpc_o2_start(-1, 256, &o) == -EINVAL, "o2 device -1");
    srpc_o2_batch_t ob = {.in = 1, .out = 1, .count = 1, .done = &flag, .done_dev = 1};
    CHECK(srpc_o2_submit(NULL, &ob, 0) == -EINVAL, "submit NULL");
    CHECK(srpc_o2_vector_floats(NULL) == 0, "vector_floats NULL");
    CHECK(srpc_o2_stop(NULL) == 0, "stop NULL");
    CHECK(srpc_gpu_last_error()[0] != '\0', "no last error after failures");
}

static void *other_thread(void *arg)
{
    int *ok = arg;
    ok[0] = srpc_gpu_last_error()[0] == '\0';
    ok[1] = srpc_gpu_init(-7) == -EINVAL && strstr(srpc_gpu_last_error(), "-7") != NULL;
    return NULL;
}

/* The last error is per thread. */
static void test_last_error_per_thread(void)
{
    CHECK(srpc_gpu_init(-3) == -EINVAL, "init(-3)");
    char mine[256];
    snprintf(mine, sizeof(mine), "%s", srpc_gpu_last_error());
    CHECK(strstr(mine, "-3") != NULL, "message names the ordinal: %s", mine);
    int ok[2] = {0, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread, ok) == 0, "thread");
    pthread_join(t, NULL);
    CHECK(ok[0], "a new thread starts with no last error");
    CHECK(ok[1], "the other thread sees its own failure");
    CHECK(strcmp(mine, srpc_gpu_last_error()) == 0, "this thread's message changed: %s",
          srpc_gpu_last_error());
}

/* ------------------------------------------------------------------ no driver or no device */

static void test_without_gpu(void)
{
    const char *e = srpc_gpu_last_error();
    CHECK(e[0] != '\0', "no last error");
    CHECK(strstr(e, "libcuda") || strstr(e, "CUDA device"), "message: %s", e);
    printf("no GPU: %s\n", e);

    char name[64] = "x";
    size_t g = 0;
    srpc_dtq_t *q = (srpc_dtq_t *)1;
    void *h = (void *)1;
    uint64_t d = 1;
    uint32_t flag = 0, buf[4] = {0};
    srpc_o2_t *o = (srpc_o2_t *)1;

    CHECK(srpc_gpu_init(0) == -ENODEV, "init again");
    CHECK(srpc_gpu_device_count() == -ENODEV || srpc_gpu_device_count() == 0, "count");
    CHECK(srpc_gpu_device_name(0, name, sizeof(name)) == -ENODEV && name[0] == '\0', "name");
    CHECK(srpc_gpu_granularity(0, &g) == -ENODEV, "granularity");
    srpc_gpu_info_t info;
    uint64_t fr, tot;
    CHECK(srpc_gpu_device_info(0, &info) == -ENODEV && info.name[0] == '\0', "device_info");
    CHECK(srpc_gpu_mem_info(0, &fr, &tot) == -ENODEV, "mem_info");
    CHECK(srpc_dtq_create(0, 1024, 64, &q) == -ENODEV && q == NULL, "dtq_create");
    CHECK(srpc_gpu_host_alloc(PAGE, &h, &d) == -ENODEV && h == NULL && d == 0, "host_alloc");
    void *page = aligned_alloc(PAGE, PAGE);
    CHECK(page != NULL, "aligned_alloc");
    CHECK(srpc_gpu_host_register(page, PAGE, &d) == -ENODEV, "register");
    CHECK(srpc_gpu_host_unregister(page) == -ENODEV, "unregister");
    free(page);
    CHECK(srpc_gpu_copy_htod(1, buf, sizeof(buf), 0) == -ENODEV, "htod");
    CHECK(srpc_gpu_copy_dtoh(buf, 1, sizeof(buf), 0) == -ENODEV, "dtoh");
    CHECK(srpc_gpu_copy_htod(1, buf, 0, 0) == 0, "an empty copy is done at once");
    CHECK(srpc_gpu_signal(0, &flag, 0, 1) == -ENODEV && flag == 0, "signal");
    CHECK(srpc_gpu_stream_sync(0) == -ENODEV, "stream_sync");
    /* Without kernels compiled in, O2 says so before it looks for a driver. */
    int want = have_kernels() ? -ENODEV : -ENOTSUP;
    CHECK(srpc_o2_start(0, 256, &o) == want && o == NULL, "o2_start");
    CHECK(strstr(srpc_gpu_last_error(), have_kernels() ? "CUDA" : "without") != NULL, "o2 message: %s",
          srpc_gpu_last_error());
}

/* ------------------------------------------------------------------ with a GPU */

static uint64_t expect_elem(const srpc_dtq_t *q, uint64_t seq)
{
    __extension__ typedef unsigned __int128 u128;
    return srpc_dtq_base(q) + (uint64_t)((u128)seq * srpc_dtq_elem_size(q) % srpc_dtq_ring_bytes(q));
}

static void test_device_info(size_t *gran)
{
    char name[128];
    CHECK(srpc_gpu_device_count() >= 1, "count %d", srpc_gpu_device_count());
    CHECK(srpc_gpu_device_name(0, name, sizeof(name)) == 0 && name[0], "name: %s", srpc_gpu_last_error());
    char tiny[4];
    CHECK(srpc_gpu_device_name(0, tiny, sizeof(tiny)) == 0 && strlen(tiny) < sizeof(tiny), "short name");
    CHECK(srpc_gpu_device_name(srpc_gpu_device_count(), name, sizeof(name)) == -ENODEV, "past the last");
    CHECK(srpc_gpu_init(srpc_gpu_device_count()) == -ENODEV, "init past the last");
    *gran = 0;
    CHECK(srpc_gpu_granularity(0, gran) == 0 && *gran > 0 && (*gran & (*gran - 1)) == 0,
          "granularity %zu", *gran);
    srpc_gpu_device_name(0, name, sizeof(name));
    srpc_gpu_info_t info;
    CHECK(srpc_gpu_device_info(0, &info) == 0, "device_info: %s", srpc_gpu_last_error());
    CHECK(strcmp(info.name, name) == 0 && info.driver_version > 0 && info.cc_major >= 1 && info.cc_minor >= 0,
          "info: '%s' driver %d cc %d.%d", info.name, info.driver_version, info.cc_major, info.cc_minor);
    CHECK(info.vmm == 1 && info.granularity == *gran && info.total_memory > 0, "info: vmm %d granularity %llu",
          info.vmm, (unsigned long long)info.granularity);
    CHECK((info.stream_memops == 0 || info.stream_memops == 1) && (info.memops_v2 == 0 || info.memops_v2 == 1), "info: memops");
    CHECK(srpc_gpu_device_info(srpc_gpu_device_count(), &info) == -ENODEV, "device_info past the last");
    uint64_t fr = 0, tot = 0;
    CHECK(srpc_gpu_mem_info(0, &fr, &tot) == 0 && tot > 0 && fr <= tot, "mem_info %llu of %llu: %s",
          (unsigned long long)fr, (unsigned long long)tot, srpc_gpu_last_error());
    printf("GPU 0: %s, VMM granularity %zu bytes, kernels %s\n", name, *gran,
           have_kernels() ? "compiled in" : "not compiled in");
}

static void test_dtq_layout(size_t gran)
{
    static const struct {
        size_t elem;
        uint32_t cap;
    } cases[] = {{1, 1}, {4, 1}, {1024, 256}, {3000, 7}, {4096, 1024}, {1 << 20, 5}, {12345, 333},
                 {1000, 3000}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        srpc_dtq_t *q = NULL;
        int rc = srpc_dtq_create(0, cases[i].elem, cases[i].cap, &q);
        CHECK(rc == 0 && q, "case %zu: %d %s", i, rc, srpc_gpu_last_error());
        if (!q)
            continue;
        size_t need = cases[i].elem * cases[i].cap;
        size_t ring = srpc_dtq_ring_bytes(q);
        uint64_t base = srpc_dtq_base(q);
        CHECK(ring % gran == 0 && ring >= need && ring - need < gran, "case %zu: ring %zu", i, ring);
        CHECK(base != 0 && base % gran == 0, "case %zu: base %#llx", i, (unsigned long long)base);
        CHECK(srpc_dtq_elem_size(q) == cases[i].elem && srpc_dtq_capacity(q) == cases[i].cap &&
                  srpc_dtq_device(q) == 0, "case %zu: accessors", i);
        const uint64_t seqs[] = {0, 1, cases[i].cap - 1, cases[i].cap, cases[i].cap + 1ull,
                                 2ull * cases[i].cap + 3, 1000000007ull, 1ull << 40, 1ull << 63,
                                 UINT64_MAX - 1, UINT64_MAX};
        CHECK(srpc_dtq_elem(q, 0) == base, "case %zu: elem 0", i);
        for (size_t k = 0; k < sizeof(seqs) / sizeof(seqs[0]); k++) {
            uint64_t a = srpc_dtq_elem(q, seqs[k]);
            CHECK(a == expect_elem(q, seqs[k]) && a >= base && a < base + ring,
                  "case %zu seq %llu: %#llx", i, (unsigned long long)seqs[k], (unsigned long long)a);
        }
        if (have_kernels())
            CHECK(srpc_dtq_check_mirror(q) == 0, "case %zu: mirror: %s", i, srpc_gpu_last_error());
        else
            CHECK(srpc_dtq_check_mirror(q) == -ENOTSUP, "case %zu: mirror without kernels", i);
        srpc_dtq_destroy(q);
    }
}

static void fill_pattern(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

/* Bytes written through one mapping with the copy engine read back through the other, and a
 * run of elements that wraps around the end written at once and read element by element. */
static void test_dtq_copies(void)
{
    srpc_dtq_t *q = NULL;
    srpc_gpu_live_t before, now;
    srpc_gpu_live(&before);
    CHECK(srpc_dtq_create(0, 4096, 600, &q) == 0, "create: %s", srpc_gpu_last_error());
    srpc_gpu_live(&now);
    CHECK(now.dtqs == before.dtqs + 1, "a queue made: %d held, %d before", now.dtqs, before.dtqs);
    if (!q)
        return;
    size_t ring = srpc_dtq_ring_bytes(q), elem = srpc_dtq_elem_size(q);
    uint64_t base = srpc_dtq_base(q);
    uint8_t *pat = NULL, *back = NULL;
    uint64_t pat_dev, back_dev;
    CHECK(srpc_gpu_host_alloc(ring, (void **)&pat, &pat_dev) == 0, "pinned: %s", srpc_gpu_last_error());
    CHECK(srpc_gpu_host_alloc(ring, (void **)&back, &back_dev) == 0, "pinned: %s", srpc_gpu_last_error());
    srpc_gpu_live(&now);
    CHECK(now.host_allocs == before.host_allocs + 2, "two pinned buffers: %d held", now.host_allocs);
    if (!pat || !back)
        goto out;

    for (int dir = 0; dir < 2; dir++) {
        uint64_t wr = dir ? base : base + ring, rd = dir ? base + ring : base;
        fill_pattern(pat, ring, 11 + dir);
        memset(back, 0, ring);
        CHECK(srpc_gpu_copy_htod(wr, pat, ring, 0) == 0, "htod: %s", srpc_gpu_last_error());
        CHECK(srpc_gpu_copy_dtoh(back, rd, ring, 0) == 0, "dtoh: %s", srpc_gpu_last_error());
        CHECK(srpc_gpu_stream_sync(0) == 0, "sync: %s", srpc_gpu_last_error());
        CHECK(memcmp(pat, back, ring) == 0, "direction %d: the two mappings differ", dir);
    }

    uint64_t s = ring / elem - 1; /* its run of 3 elements crosses the end of the ring */
    CHECK(srpc_dtq_elem(q, s) + 3 * elem > base + ring, "run does not wrap");
    fill_pattern(pat, 3 * elem, 99);
    memset(back, 0, 3 * elem);
    CHECK(srpc_gpu_copy_htod(srpc_dtq_elem(q, s), pat, 3 * elem, 0) == 0, "htod run");
    for (uint64_t k = 0; k < 3; k++)
        CHECK(srpc_gpu_copy_dtoh(back + k * elem, srpc_dtq_elem(q, s + k), elem, 0) == 0, "dtoh %llu",
              (unsigned long long)k);
    CHECK(srpc_gpu_stream_sync(0) == 0, "sync");
    CHECK(memcmp(pat, back, 3 * elem) == 0, "wrapped run differs from its elements");
out:
    srpc_gpu_host_free(pat);
    srpc_gpu_host_free(back);
    srpc_dtq_destroy(q);
}

/* Registered memory, copies and completion flags, both ways of signalling. */
static void test_pinned_and_signal(void)
{
    const size_t len = 16 * PAGE;
    uint8_t *src = aligned_alloc(PAGE, len), *dst = NULL;
    uint32_t *flags = NULL, plain_flag = 0;
    uint64_t src_dev = 0, dst_dev = 0, flags_dev = 0;
    srpc_dtq_t *q = NULL;
    CHECK(src != NULL, "aligned_alloc");
    CHECK(srpc_gpu_host_register(src, len, &src_dev) == 0 && src_dev, "register: %s", srpc_gpu_last_error());
    CHECK(srpc_gpu_host_register(src, len, NULL) == -EEXIST, "register twice: %s", srpc_gpu_last_error());
    srpc_gpu_live_t live;
    srpc_gpu_live(&live);
    CHECK(live.host_registrations == 1, "registrations held: %d (the failed second one is not)", live.host_registrations);
    uint64_t st = 0;
    CHECK(srpc_gpu_stream_create(0, &st) == 0 && st, "stream: %s", srpc_gpu_last_error());
    srpc_gpu_live(&live);
    CHECK(live.streams == 1, "streams held: %d", live.streams);
    srpc_gpu_stream_destroy(st);
    srpc_gpu_live(&live);
    CHECK(live.streams == 0, "streams held after destroy: %d", live.streams);
    CHECK(srpc_gpu_host_alloc(len, (void **)&dst, &dst_dev) == 0 && dst_dev, "alloc: %s", srpc_gpu_last_error());
    CHECK(srpc_gpu_host_alloc(PAGE, (void **)&flags, &flags_dev) == 0, "alloc flags");
    CHECK(srpc_dtq_create(0, len, 1, &q) == 0, "dtq: %s", srpc_gpu_last_error());
    if (!dst || !flags || !q)
        goto out;
    int zero = 1;
    for (size_t i = 0; i < len; i++)
        zero &= dst[i] == 0;
    CHECK(zero, "host_alloc memory is not zeroed");

    for (int way = 0; way < 3; way++) {
        /* 0: cuStreamWriteValue32 (where supported), 1: host function, 2: host function on
         * ordinary memory. The flag must follow the copies queued before it. */
        uint32_t *f = way == 2 ? &plain_flag : &flags[way];
        uint64_t fdev = way == 0 ? flags_dev : 0;
        uint32_t value = 7 + (uint32_t)way;
        fill_pattern(src, len, 5 + (uint32_t)way);
        memset(dst, 0, len);
        CHECK(srpc_gpu_copy_htod(srpc_dtq_base(q), src, len, 0) == 0, "htod");
        CHECK(srpc_gpu_copy_dtoh(dst, srpc_dtq_base(q), len, 0) == 0, "dtoh");
        CHECK(srpc_gpu_signal(0, f, fdev, value) == 0, "signal way %d: %s", way, srpc_gpu_last_error());
        if (!wait_flag(f, value, 10.0))
            give_up("a completion flag never came");
        CHECK(memcmp(src, dst, len) == 0, "way %d: the flag came before the copy was done", way);
        CHECK(srpc_gpu_stream_sync(0) == 0, "sync");
    }
out:
    srpc_dtq_destroy(q);
    if (src_dev) {
        CHECK(srpc_gpu_host_unregister(src) == 0, "unregister: %s", srpc_gpu_last_error());
        CHECK(srpc_gpu_host_unregister(src) < 0, "unregister twice");
    }
    free(src);
    srpc_gpu_host_free(dst);
    srpc_gpu_host_free(flags);
}

#define O2_FLOATS 256
#define O2_VEC_BYTES (O2_FLOATS * sizeof(float))
#define O2_CAP 128
#define O2_BATCHES 96

/* Batches of vecadd through the persistent kernel: several outstanding at a time, the request
 * ring wrapping several times, one batch written straight to mapped host memory. */
static void test_o2(void)
{
    srpc_o2_t *o = NULL;
    if (!have_kernels()) {
        CHECK(srpc_o2_start(0, O2_FLOATS, &o) == -ENOTSUP && !o, "o2 without kernels");
        return;
    }
    /* Everything is allocated before the kernel starts and freed after it stops. */
    srpc_dtq_t *qin = NULL, *qout = NULL;
    float *in = NULL, *out = NULL, *rest = NULL;
    uint32_t *done = NULL;
    uint64_t in_dev, out_dev, rest_dev, done_dev;
    const size_t stage = (size_t)O2_BATCHES * 16 * O2_VEC_BYTES;
    CHECK(srpc_dtq_create(0, O2_VEC_BYTES, O2_CAP, &qin) == 0, "qin");
    CHECK(srpc_dtq_create(0, O2_VEC_BYTES, O2_CAP, &qout) == 0, "qout");
    CHECK(srpc_gpu_host_alloc(stage, (void **)&in, &in_dev) == 0, "in");
    CHECK(srpc_gpu_host_alloc(stage, (void **)&out, &out_dev) == 0, "out");
    CHECK(srpc_gpu_host_alloc(stage, (void **)&rest, &rest_dev) == 0, "rest");
    CHECK(srpc_gpu_host_alloc(O2_BATCHES * sizeof(uint32_t), (void **)&done, &done_dev) == 0, "done");
    if (!qin || !qout || !in || !out || !rest || !done)
        goto out;
    for (size_t i = 0; i < stage / sizeof(float); i++)
        in[i] = (float)(i % 100003) * 0.25f - 7.0f;

    int rc = srpc_o2_start(0, O2_FLOATS, &o);
    if (rc == -ENOTSUP) {
        printf("O2 not supported here: %s\n", srpc_gpu_last_error());
        goto out;
    }
    CHECK(rc == 0 && o, "o2_start: %d %s", rc, srpc_gpu_last_error());
    if (!o)
        goto out;
    CHECK(srpc_o2_vector_floats(o) == O2_FLOATS, "vector_floats");
    srpc_gpu_live_t live;
    srpc_gpu_live(&live);
    CHECK(live.o2_kernels == 1, "O2 kernels held: %d", live.o2_kernels);

    uint64_t seq = 0;          /* next element of the request and response TQs */
    size_t vec = 0;            /* next vector of the staging buffers */
    uint32_t busy = 0;
    uint32_t split = 0;        /* the direct batch's outputs: this many floats at out, the rest at rest */
    uint64_t first_seq[O2_BATCHES];
    uint32_t count[O2_BATCHES];
    size_t first_vec[O2_BATCHES];
    int b = 0;
    while (b < O2_BATCHES) {
        /* A round: batches until the request TQ is full (at most O2_CAP elements in use). */
        int round_start = b;
        uint32_t used = 0;
        while (b < O2_BATCHES) {
            uint32_t c = 1 + (uint32_t)((b * 7) % 16);
            if (used + c > O2_CAP)
                break;
            first_seq[b] = seq;
            first_vec[b] = vec;
            count[b] = c;
            int direct = b == O2_BATCHES - 1; /* outputs straight to mapped host memory */
            CHECK(srpc_gpu_copy_htod(srpc_dtq_elem(qin, seq), in + vec * O2_FLOATS, c * O2_VEC_BYTES, 0) == 0,
                  "htod: %s", srpc_gpu_last_error());
            /* The direct batch is split as a wrapping output ring would be, at an odd float. */
            split = direct ? c * O2_FLOATS / 2 + 1 : 0;
            srpc_o2_batch_t ob = {
                .in = srpc_dtq_elem(qin, seq),
                .out = direct ? out_dev + vec * O2_VEC_BYTES : srpc_dtq_elem(qout, seq),
                .out_rest = direct ? rest_dev : 0,
                .count = c,
                .out_floats = split,
                .done = &done[b],
                .done_dev = done_dev + (uint64_t)b * sizeof(uint32_t),
                .done_value = 0x80000000u | (uint32_t)b,
            };
            done[b] = 5;
            for (;;) {
                rc = srpc_o2_submit(o, &ob, 0);
                if (rc != -EBUSY)
                    break;
                busy++;
            }
            CHECK(rc == 0, "submit %d: %d %s", b, rc, srpc_gpu_last_error());
            /* the kernel may already be writing it: an atomic read (TSan on the emulated driver) */
            CHECK(__atomic_load_n(&done[b], __ATOMIC_ACQUIRE) != 5, "submit does not clear the done flag");
            seq += c;
            vec += c;
            used += c;
            b++;
        }
        CHECK(b - round_start > 1, "a round has a single batch");
        for (int k = round_start; k < b; k++) {
            if (!wait_flag(&done[k], 0x80000000u | (uint32_t)k, 10.0))
                give_up("an O2 batch never completed");
            if (k != O2_BATCHES - 1)
                CHECK(srpc_gpu_copy_dtoh(out + first_vec[k] * O2_FLOATS, srpc_dtq_elem(qout, first_seq[k]),
                                         count[k] * O2_VEC_BYTES, 0) == 0, "dtoh");
        }
        CHECK(srpc_gpu_stream_sync(0) == 0, "sync: %s", srpc_gpu_last_error());
    }
    CHECK(seq > 2 * O2_CAP, "the request ring did not wrap twice (%llu)", (unsigned long long)seq);

    size_t wrong = 0, split_at = first_vec[O2_BATCHES - 1] * O2_FLOATS + split;
    for (size_t i = 0; i < vec * O2_FLOATS; i++)
        wrong += (i < split_at ? out[i] : rest[i - split_at]) != in[i] + 1.0f;
    CHECK(wrong == 0, "%zu of %zu outputs are not input + 1", wrong, vec * O2_FLOATS);
    for (int k = 0; k < O2_BATCHES; k++)
        CHECK(done[k] == (0x80000000u | (uint32_t)k), "done word %d = %#x", k, done[k]);
    srpc_o2_batch_t bad = {.in = 0, .out = out_dev, .count = 1, .done = &done[0], .done_dev = done_dev};
    CHECK(srpc_o2_submit(o, &bad, 0) == -EINVAL, "submit NULL input");
    bad.in = in_dev;
    bad.count = 0;
    CHECK(srpc_o2_submit(o, &bad, 0) == -EINVAL, "submit 0 vectors");
    bad.count = 2;
    bad.out_floats = 2 * O2_FLOATS + 1;
    CHECK(srpc_o2_submit(o, &bad, 0) == -EINVAL, "submit more floats at out than the batch has");
    bad.out_floats = O2_FLOATS;
    CHECK(srpc_o2_submit(o, &bad, 0) == -EINVAL, "submit split without out_rest");
    CHECK(srpc_o2_stop(o) == 0, "stop: %s", srpc_gpu_last_error());
    printf("O2: %d batches, %zu vectors, %u busy retries\n", O2_BATCHES, vec, busy);
out:
    srpc_dtq_destroy(qin);
    srpc_dtq_destroy(qout);
    srpc_gpu_host_free(in);
    srpc_gpu_host_free(out);
    srpc_gpu_host_free(rest);
    srpc_gpu_host_free(done);
}

/* The emulated driver's live mappings + reservations + handles (0 on a real driver). */
static int vmm_live(void *lib)
{
    static const char *const counts[] = {"fake_cuda_vmm_live_mappings", "fake_cuda_vmm_live_reservations",
                                         "fake_cuda_vmm_live_handles"};
    int n = 0;
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        int (*f)(void);
        *(void **)&f = dlsym(lib, counts[i]);
        n += f ? f() : 0;
    }
    return n;
}

/* Under the emulated driver, device TQs against faults no GPU gives on demand: a full device
 * (cuMemCreate out of memory), a second mapping that fails (the first is undone, the
 * reservation freed), and an upper mapping that does not show the lower one's pages
 * (fake_cuda_break_mapping: the mirror self-test reports -EIO with both directions' counts).
 * Each leaves nothing in the driver's accounting, and the next queue is sound. On a real
 * driver, nothing to check. */
static void test_dtq_faults_on_emulation(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void (*brk)(int) = NULL, (*fail_map)(int) = NULL, (*capacity)(size_t) = NULL;
    size_t (*used)(void) = NULL;
    if (lib) {
        *(void **)&brk = dlsym(lib, "fake_cuda_break_mapping");
        *(void **)&fail_map = dlsym(lib, "fake_cuda_fail_mapping");
        *(void **)&capacity = dlsym(lib, "fake_cuda_set_device_memory");
        *(void **)&used = dlsym(lib, "fake_cuda_device_memory_used");
    }
    if (!brk || !fail_map || !capacity || !used) {
        if (lib)
            dlclose(lib);
        return;
    }
    srpc_dtq_t *q = NULL;
    const int live = vmm_live(lib);
    capacity(used() + 1); /* no room for a ring */
    CHECK(srpc_dtq_create(0, 4096, 512, &q) == -ENOMEM && q == NULL &&
              strstr(srpc_gpu_last_error(), "cuMemCreate") && strstr(srpc_gpu_last_error(), "OUT_OF_MEMORY"),
          "a full device: %s", srpc_gpu_last_error());
    capacity(0);
    CHECK(vmm_live(lib) == live, "after a full device: %d live, %d before", vmm_live(lib), live);

    fail_map(2); /* the upper mapping fails */
    CHECK(srpc_dtq_create(0, 4096, 512, &q) == -ENOMEM && q == NULL && strstr(srpc_gpu_last_error(), "cuMemMap"),
          "a failed second mapping: %s", srpc_gpu_last_error());
    fail_map(0);
    CHECK(vmm_live(lib) == live, "after a failed mapping: %d live, %d before", vmm_live(lib), live);

    if (have_kernels()) {
        brk(2); /* the create maps the ring twice: lower, then upper */
        CHECK(srpc_dtq_create(0, 4096, 512, &q) == 0, "dtq: %s", srpc_gpu_last_error());
        brk(0);
        if (q) {
            const size_t words = srpc_dtq_ring_bytes(q) / 4;
            char up[96], down[96];
            snprintf(up, sizeof(up), ": %zu of %zu words differ written above/read below", words, words);
            snprintf(down, sizeof(down), ", %zu written below/read above", words);
            CHECK(srpc_dtq_check_mirror(q) == -EIO && strstr(srpc_gpu_last_error(), up) &&
                      strstr(srpc_gpu_last_error(), down),
                  "a broken mirror, both ways: %s", srpc_gpu_last_error());
            srpc_dtq_destroy(q);
            q = NULL;
        }
    }
    CHECK(srpc_dtq_create(0, 4096, 512, &q) == 0, "the next queue: %s", srpc_gpu_last_error());
    if (q && have_kernels())
        CHECK(srpc_dtq_check_mirror(q) == 0, "the next queue's mirror: %s", srpc_gpu_last_error());
    srpc_dtq_destroy(q);
    CHECK(vmm_live(lib) == live, "at the end: %d live, %d before", vmm_live(lib), live);
    dlclose(lib);
}

/* On any driver, the library's own count of what it holds: nothing once every queue, buffer,
 * registration, stream and O2 kernel the tests made is gone (failed creations counted none). */
static void test_nothing_held(void)
{
    srpc_gpu_live_t l = {-1, -1, -1, -1, -1};
    srpc_gpu_live(&l);
    CHECK(l.dtqs == 0 && l.host_allocs == 0 && l.host_registrations == 0 && l.streams == 0 && l.o2_kernels == 0,
          "held after the tests: %d queues, %d pinned, %d registered, %d streams, %d O2", l.dtqs, l.host_allocs,
          l.host_registrations, l.streams, l.o2_kernels);
    srpc_gpu_live(NULL); /* harmless */
}

/* Under the emulated driver (native/tests/fake_libcuda.c), its accounting: every device Tensor
 * Queue's mappings, reservations and allocations and every pinned buffer freed. On a real
 * driver, nothing to check. */
static void test_nothing_left_on_emulation(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib)
        return;
    static const char *const counts[] = {"fake_cuda_vmm_live_mappings", "fake_cuda_vmm_live_reservations",
                                         "fake_cuda_vmm_live_handles", "fake_cuda_host_live"};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        int (*f)(void);
        *(void **)&f = dlsym(lib, counts[i]);
        if (!f)
            break; /* a real driver */
        CHECK(f() == 0, "emulated driver: %s = %d after the tests", counts[i], f());
    }
    dlclose(lib);
}

int main(void)
{
    test_bad_args();
    test_last_error_per_thread();
    int rc = srpc_gpu_init(0);
    if (rc == -ENODEV) {
        test_without_gpu();
    } else {
        CHECK(rc == 0, "srpc_gpu_init(0) = %d: %s", rc, srpc_gpu_last_error());
        if (rc == 0) {
            size_t gran = 0;
            test_device_info(&gran);
            if (gran) {
                test_dtq_layout(gran);
                test_dtq_copies();
                test_pinned_and_signal();
                test_o2();
                test_dtq_faults_on_emulation();
                test_nothing_held();
                test_nothing_left_on_emulation();
            }
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
