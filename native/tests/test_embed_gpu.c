/* test_embed_gpu.c: the embedding cache on a GPU (srpc_emb_dcache_*) against the host cache, batch for batch: random queries, replaces (evictions inside one batch included), updates, dumps and clears give the same hits, vectors and content, and the same counts (evictions: as the header bounds them); batches larger than the staging; bad arguments; a failed kernel (emulated driver) leaves the cache refusing calls until cleared; nothing held after destroy. Runs on the emulated driver (LD_LIBRARY_PATH=<build>/fake_cuda) or on a GPU. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "splitrpc.h"

#include "check.h"

#define DIM 5

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int cmp64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void test_arguments(void)
{
    srpc_emb_dcache_t *c = NULL;
    CHECK(srpc_emb_dcache_create(0, DIM, 10, 1, 0, NULL) == -EINVAL, "no out");
    CHECK(srpc_emb_dcache_create(-1, DIM, 10, 1, 0, &c) == -EINVAL && !c, "device -1");
    CHECK(srpc_emb_dcache_create(0, 0, 10, 1, 0, &c) == -EINVAL, "dim 0");
    CHECK(srpc_emb_dcache_create(0, DIM, 0, 1, 0, &c) == -EINVAL, "capacity 0");
    CHECK(srpc_emb_dcache_create(0, DIM, 10, 0, 0, &c) == -EINVAL, "no slabs");
    CHECK(srpc_emb_dcache_create(0, DIM, 10, 1, SRPC_EMB_DEVICE_MAX_BATCH + 1, &c) == -EINVAL, "batch too large");
    CHECK(srpc_emb_dcache_create(0, SRPC_EMB_MAX_DIM, UINT64_MAX / 2, 1, 0, &c) == -EOVERFLOW, "too large");
    CHECK(srpc_emb_dcache_create(0, 0, 10, 1, 0, &c) == -EINVAL, "dim 0, default batch");
    CHECK(srpc_emb_dcache_query(NULL, NULL, 0, NULL, NULL) == -EINVAL, "NULL cache");
    CHECK(srpc_emb_dcache_clear(NULL) == -EINVAL, "clear NULL");
    srpc_emb_dcache_destroy(NULL);
}

/* The vector of key k written at step t. */
static void vec_of(float *row, int64_t k, int t)
{
    for (int d = 0; d < DIM; d++)
        row[d] = (float)(k % 997) + (float)t * 1000.0f + (float)d / 8.0f;
}

/* Both caches' dumps as sorted key lists, compared. */
static int same_content(srpc_emb_cache_t *h, srpc_emb_dcache_t *g, uint64_t slots)
{
    int64_t *a = malloc(slots * 8), *b = malloc(slots * 8);
    const int64_t na = srpc_emb_cache_dump(h, a, slots), nb = srpc_emb_dcache_dump(g, b, slots);
    int same = na >= 0 && na == nb && (uint64_t)nb == srpc_emb_dcache_size(g);
    if (same) {
        qsort(a, (size_t)na, 8, cmp64);
        qsort(b, (size_t)nb, 8, cmp64);
        same = memcmp(a, b, (size_t)na * 8) == 0;
        for (int64_t i = 0, j = 0; !same && (i < na || j < nb);) {
            if (j >= nb || (i < na && a[i] < b[j])) {
                fprintf(stderr, "  host only: %lld (set %llu)\n", (long long)a[i], (unsigned long long)srpc_emb_cache_set_of(h, a[i]));
                i++;
            } else if (i >= na || b[j] < a[i]) {
                fprintf(stderr, "  device only: %lld (set %llu)\n", (long long)b[j], (unsigned long long)srpc_emb_cache_set_of(h, b[j]));
                j++;
            } else {
                i++, j++;
            }
        }
    }
    if (!same)
        fprintf(stderr, "content: host %lld keys, device %lld keys (size %llu)\n", (long long)na, (long long)nb,
                (unsigned long long)srpc_emb_dcache_size(g));
    free(a);
    free(b);
    return same;
}

/* Random batches of keys from a small range (so that sets fill and evict, inside one batch too)
 * through both caches; max_batch 7 runs most batches in several launches. */
static void test_against_host_cache(uint32_t slabs, uint64_t capacity, int64_t key_range, uint32_t max_batch)
{
    srpc_emb_cache_t *h;
    srpc_emb_dcache_t *g;
    CHECK(srpc_emb_cache_create(DIM, capacity, slabs, &h) == 0, "host cache");
    int rc = srpc_emb_dcache_create(0, DIM, capacity, slabs, max_batch, &g);
    CHECK(rc == 0, "srpc_emb_dcache_create: %d %s", rc, srpc_gpu_last_error());
    if (rc) {
        srpc_emb_cache_destroy(h);
        return;
    }
    const uint64_t slots = srpc_emb_dcache_slots(g);
    CHECK(slots == srpc_emb_cache_slots(h) && srpc_emb_dcache_sets(g) == srpc_emb_cache_sets(h), "layout");
    enum { MAXN = 300 };
    int64_t keys[MAXN];
    float vecs[MAXN * DIM], oh[MAXN * DIM], og[MAXN * DIM];
    uint8_t hh[MAXN], hg[MAXN];
    int bad = 0;
    for (int step = 0; step < 400 && !bad; step++) {
        const int op = (int)(next() % 10);
        uint32_t n = (uint32_t)(next() % MAXN);
        const int distinct = op == 9 || (next() & 1); /* update batches always; replace half the time */
        for (uint32_t i = 0; i < n; i++) {
            int64_t k;
            int again;
            do { /* a few negative and extreme keys too */
                k = (int64_t)(next() % (uint64_t)key_range) - key_range / 8;
                if (next() % 64 == 0)
                    k = (next() & 1) ? INT64_MIN + (int64_t)(next() % 3) : INT64_MAX - (int64_t)(next() % 3);
                again = 0;
                for (uint32_t j = 0; distinct && j < i; j++)
                    again |= keys[j] == k;
            } while (again);
            keys[i] = k;
            vec_of(vecs + (size_t)i * DIM, k, step * MAXN + (int)i); /* a repeat's vectors differ: the last must win */
        }
        if (op < 4) { /* query */
            memset(oh, 0, sizeof(oh));
            memset(og, 0, sizeof(og));
            const int64_t a = srpc_emb_cache_query(h, keys, n, oh, hh);
            const int64_t b = srpc_emb_dcache_query(g, keys, n, og, hg);
            bad |= a != b || memcmp(hh, hg, n) || memcmp(oh, og, (size_t)n * DIM * 4);
            CHECK(!bad, "step %d query of %u: hits %lld / %lld", step, n, (long long)a, (long long)b);
        } else if (op < 8) { /* replace */
            /* the batch's keys cached before it: the host cache counts one more eviction for
             * each that an earlier key of the batch evicted before it came back */
            int64_t before[4096];
            const int64_t nb = srpc_emb_cache_dump(h, before, 4096);
            int64_t was = 0;
            for (uint32_t i = 0; i < n; i++)
                for (int64_t j = 0; j < nb; j++)
                    if (before[j] == keys[i]) {
                        was++;
                        break;
                    }
            const int64_t a = srpc_emb_cache_replace(h, keys, n, vecs);
            const int64_t b = srpc_emb_dcache_replace(g, keys, n, vecs);
            bad |= nb < 0 || b < 0 || (distinct && (b > a || a - b > was));
            CHECK(!bad, "step %d replace of %u: evicted %lld / %lld (%lld cached before)", step, n, (long long)a,
                  (long long)b, (long long)was);
        } else if (op == 8) {
            if (next() % 8 == 0) {
                srpc_emb_cache_clear(h);
                CHECK(srpc_emb_dcache_clear(g) == 0, "clear");
            }
        } else { /* update */
            const int64_t a = srpc_emb_cache_update(h, keys, n, vecs);
            const int64_t b = srpc_emb_dcache_update(g, keys, n, vecs);
            bad |= a != b;
            CHECK(!bad, "step %d update of %u: %lld / %lld", step, n, (long long)a, (long long)b);
        }
        bad |= !same_content(h, g, slots);
        CHECK(!bad, "step %d (op %d): the same keys cached", step, op);
    }
    /* every cached key's vector, through both */
    int64_t *all = malloc(slots * 8);
    const int64_t n = srpc_emb_cache_dump(h, all, slots);
    float *vh = calloc((size_t)(n + 1) * DIM, 4), *vg = calloc((size_t)(n + 1) * DIM, 4);
    uint8_t *h1 = malloc((size_t)n + 1), *h2 = malloc((size_t)n + 1);
    CHECK(srpc_emb_cache_query(h, all, (uint64_t)n, vh, h1) == n && srpc_emb_dcache_query(g, all, (uint64_t)n, vg, h2) == n &&
              memcmp(vh, vg, (size_t)n * DIM * 4) == 0,
          "every cached vector the same (%lld keys)", (long long)n);
    int64_t small[2];
    CHECK(n < 3 || srpc_emb_dcache_dump(g, small, 2) == -ENOBUFS, "dump past cap");
    free(all), free(vh), free(vg), free(h1), free(h2);
    srpc_emb_cache_destroy(h);
    srpc_emb_dcache_destroy(g);
}

/* A kernel that fails (the emulated driver's fake_cuda_fail_launches): the call fails, every
 * call after it is refused with -EIO until a clear succeeds; then the cache works. */
static void test_failed_launch(void *lib)
{
    void (*fail)(int);
    *(void **)&fail = lib ? dlsym(lib, "fake_cuda_fail_launches") : NULL;
    if (!fail)
        return;
    srpc_emb_dcache_t *g;
    CHECK(srpc_emb_dcache_create(0, DIM, 64, 1, 0, &g) == 0, "create");
    int64_t k[2] = {1, 2};
    float v[2 * DIM], out[2 * DIM];
    uint8_t hit[2];
    vec_of(v, 1, 0), vec_of(v + DIM, 2, 0);
    CHECK(srpc_emb_dcache_replace(g, k, 2, v) == 0, "replace");
    fail(1);
    int64_t rc = srpc_emb_dcache_replace(g, k, 2, v);
    CHECK(rc == -EIO, "failed launch: %lld (%s)", (long long)rc, srpc_gpu_last_error());
    CHECK(strstr(srpc_gpu_last_error(), "srpc_emb_replace") != NULL, "the error names the kernel: %s",
          srpc_gpu_last_error());
    CHECK(srpc_emb_dcache_query(g, k, 2, out, hit) == -EIO, "refused until cleared");
    CHECK(srpc_emb_dcache_clear(g) == 0, "clear");
    CHECK(srpc_emb_dcache_query(g, k, 2, out, hit) == 0 && srpc_emb_dcache_size(g) == 0, "empty after the clear");
    CHECK(srpc_emb_dcache_replace(g, k, 2, v) == 0 && srpc_emb_dcache_query(g, k, 2, out, hit) == 2 &&
              memcmp(out, v, sizeof(v)) == 0,
          "works again");
    srpc_emb_dcache_destroy(g);
}

/* Vectors written by the query kernel to device memory, only the flags coming back. */
static void test_query_device(void)
{
    srpc_emb_dcache_t *g;
    CHECK(srpc_emb_dcache_create(0, DIM, 64, 1, 4, &g) == 0, "create");
    int64_t k[6] = {5, 6, 7, 8, 9, 10};
    float v[6 * DIM], back[6 * DIM];
    uint8_t hit[6];
    for (int i = 0; i < 6; i++)
        vec_of(v + i * DIM, k[i], 1);
    CHECK(srpc_emb_dcache_replace(g, k, 3, v) == 0, "replace");
    void *host;
    uint64_t dev;
    CHECK(srpc_gpu_host_alloc(sizeof(back), &host, &dev) == 0, "pinned output");
    memset(host, 0, sizeof(back));
    CHECK(srpc_emb_dcache_query_device(g, k, 0, 0, hit) == 0, "empty batch");
    CHECK(srpc_emb_dcache_query_device(g, k, 6, 0, hit) == -EINVAL, "no output");
    CHECK(srpc_emb_dcache_query_device(g, k, 6, dev, hit) == 3, "3 hits");
    memcpy(back, host, sizeof(back));
    CHECK(hit[0] && hit[1] && hit[2] && !hit[3] && !hit[4] && !hit[5], "flags");
    CHECK(memcmp(back, v, 3 * DIM * 4) == 0, "the hits' rows");
    float zero[3 * DIM] = {0};
    CHECK(memcmp(back + 3 * DIM, zero, sizeof(zero)) == 0, "the misses' rows left alone");
    srpc_gpu_host_free(host);
    srpc_emb_dcache_destroy(g);
}

/* The widest vectors with the default staging: a smaller default batch (staging stays at
 * SRPC_EMB_DEVICE_STAGING_BYTES), the rows whole after several launches. */
static void test_wide_vectors(void)
{
    const uint32_t dim = SRPC_EMB_MAX_DIM;
    srpc_emb_dcache_t *g;
    CHECK(srpc_emb_dcache_create(0, dim, 300, 1, 0, &g) == 0, "create dim %u: %s", dim, srpc_gpu_last_error());
    enum { N = 200 }; /* more than the 128 keys the default staging holds at this width */
    int64_t *k = malloc(N * 8);
    float *v = malloc((size_t)N * dim * 4), *out = calloc((size_t)N * dim, 4);
    uint8_t *hit = malloc(N);
    for (int i = 0; i < N; i++) {
        k[i] = 1000 + i;
        for (uint32_t d = 0; d < dim; d += 4096)
            v[(size_t)i * dim + d] = (float)(i * 7 + d);
    }
    CHECK(srpc_emb_dcache_replace(g, k, N, v) >= 0 && srpc_emb_dcache_query(g, k, N, out, hit) == N &&
              memcmp(out, v, (size_t)N * dim * 4) == 0,
          "wide rows whole: %s", srpc_gpu_last_error());
    free(k), free(v), free(out), free(hit);
    srpc_emb_dcache_destroy(g);
}

int main(void)
{
    test_arguments();
    srpc_emb_dcache_t *probe = NULL;
    int rc = srpc_emb_dcache_create(0, DIM, 10, 1, 0, &probe);
    if (rc == -ENODEV || rc == -ENOTSUP) {
        printf("no GPU cache here (%d: %s): only the argument checks ran\n", rc, srpc_gpu_last_error());
        printf("%d passed, %d failed\n", passed, failed);
        return failed ? 1 : 0;
    }
    CHECK(rc == 0, "create: %d %s", rc, srpc_gpu_last_error());
    srpc_emb_dcache_destroy(probe);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    int (*allocs)(void) = NULL;
    *(void **)&allocs = lib ? dlsym(lib, "fake_cuda_live_allocations") : NULL;
    const int allocs0 = allocs ? allocs() : 0;
    srpc_gpu_live_t before, after;
    srpc_gpu_live(&before);

    test_against_host_cache(1, 96, 400, 7);          /* 3 sets of 32: evictions in most batches */
    test_against_host_cache(2, 1000, 3000, 0);       /* 16 sets of 64, batches in one launch */
    test_against_host_cache(1, 32, 100000, 64);      /* one set, keys mostly new: LRU in one batch */
    test_query_device();
    test_wide_vectors();
    test_failed_launch(lib);

    srpc_gpu_live(&after);
    CHECK(after.streams == before.streams && after.host_allocs == before.host_allocs, "nothing held: streams %d->%d",
          before.streams, after.streams);
    CHECK(!allocs || allocs() == allocs0, "device memory back: %d -> %d", allocs0, allocs ? allocs() : 0);
    printf("%s\n", allocs ? "EMULATED driver (fake libcuda): the kernels' host implementations ran"
                          : "a CUDA driver: the kernels ran");
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
