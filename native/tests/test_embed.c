/* test_embed.c: the embedding cache: bad arguments, hits and misses, overwrite on replace, LRU eviction inside one slabset, update of cached keys only, dump and clear, and threads querying and replacing overlapping keys at once (every hit must be its key's whole vector). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "splitrpc.h"

#include "check.h"

#define DIM 8

/* The vector every writer stores for key k (version v): a reader can tell a torn row. */
static void fill(float *row, int64_t k, int v)
{
    for (int d = 0; d < DIM; d++)
        row[d] = (float)((k % 1000) * 10 + v) + (float)d / 100.0f;
}

static int row_is(const float *row, int64_t k, int v)
{
    float want[DIM];
    fill(want, k, v);
    return memcmp(row, want, sizeof(want)) == 0;
}

static void test_arguments(void)
{
    srpc_emb_cache_t *c = NULL;
    CHECK(srpc_emb_cache_create(0, 10, 1, &c) == -EINVAL, "dim 0");
    CHECK(srpc_emb_cache_create(SRPC_EMB_MAX_DIM + 1, 10, 1, &c) == -EINVAL, "dim too large");
    CHECK(srpc_emb_cache_create(4, 0, 1, &c) == -EINVAL, "capacity 0");
    CHECK(srpc_emb_cache_create(4, 10, 0, &c) == -EINVAL, "no slabs");
    CHECK(srpc_emb_cache_create(4, 10, SRPC_EMB_MAX_SLABS_PER_SET + 1, &c) == -EINVAL, "too many slabs");
    CHECK(srpc_emb_cache_create(4, 10, 1, NULL) == -EINVAL, "no out");
    CHECK(srpc_emb_cache_create(SRPC_EMB_MAX_DIM, UINT64_MAX / 2, 1, &c) == -EOVERFLOW, "too large");
    CHECK(srpc_emb_cache_create(DIM, 100, 2, &c) == 0 && c, "create");
    CHECK(srpc_emb_cache_sets(c) == 2 && srpc_emb_cache_slots(c) == 128, "sets %llu", (unsigned long long)srpc_emb_cache_sets(c));
    CHECK(srpc_emb_cache_dim(c) == DIM, "dim");
    CHECK(srpc_emb_cache_query(c, NULL, 1, NULL, NULL) == -EINVAL, "query NULL");
    CHECK(srpc_emb_cache_replace(c, NULL, 1, NULL) == -EINVAL, "replace NULL");
    CHECK(srpc_emb_cache_update(c, NULL, 1, NULL) == -EINVAL, "update NULL");
    CHECK(srpc_emb_cache_dump(c, NULL, 1) == -EINVAL, "dump NULL");
    CHECK(srpc_emb_cache_query(c, NULL, 0, NULL, NULL) == 0, "empty batch");
    srpc_emb_cache_destroy(c);
    srpc_emb_cache_destroy(NULL);
}

static void test_hits_overwrite_update_dump(void)
{
    srpc_emb_cache_t *c;
    CHECK(srpc_emb_cache_create(DIM, 1000, 1, &c) == 0, "create");
    int64_t keys[5] = {7, -3, INT64_MIN, INT64_MAX, 0};
    float vecs[5 * DIM], out[5 * DIM];
    uint8_t hit[5];
    for (int i = 0; i < 5; i++)
        fill(vecs + i * DIM, keys[i], 1);
    CHECK(srpc_emb_cache_replace(c, keys, 3, vecs) == 0, "insert 3");
    CHECK(srpc_emb_cache_size(c) == 3, "size 3");
    memset(out, 0, sizeof(out));
    CHECK(srpc_emb_cache_query(c, keys, 5, out, hit) == 3, "3 hits");
    for (int i = 0; i < 5; i++) {
        CHECK(hit[i] == (i < 3), "hit %d", i);
        if (i < 3)
            CHECK(row_is(out + i * DIM, keys[i], 1), "row %d", i);
        else
            CHECK(out[i * DIM] == 0.0f, "a miss leaves its row alone");
    }
    fill(vecs, keys[0], 2); /* overwrite on replace, a repeated key keeps its last vector */
    float twice[2 * DIM];
    fill(twice, keys[1], 5);
    fill(twice + DIM, keys[1], 6);
    int64_t rep[2] = {keys[1], keys[1]};
    CHECK(srpc_emb_cache_replace(c, keys, 1, vecs) == 0 && srpc_emb_cache_replace(c, rep, 2, twice) == 0, "replace");
    CHECK(srpc_emb_cache_size(c) == 3, "still 3");
    CHECK(srpc_emb_cache_query(c, keys, 2, out, hit) == 2 && row_is(out, keys[0], 2) && row_is(out + DIM, keys[1], 6), "overwritten");
    /* update: cached keys only */
    fill(vecs + 2 * DIM, keys[2], 9);
    fill(vecs + 3 * DIM, keys[3], 9);
    CHECK(srpc_emb_cache_update(c, keys + 2, 2, vecs + 2 * DIM) == 1, "one of two cached");
    CHECK(srpc_emb_cache_query(c, keys + 2, 2, out, hit) == 1 && row_is(out, keys[2], 9) && !hit[1], "updated, other not inserted");
    int64_t dumped[8];
    CHECK(srpc_emb_cache_dump(c, dumped, 8) == 3, "dump 3");
    int seen = 0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            seen += dumped[i] == keys[j];
    CHECK(seen == 3, "dump lists the cached keys");
    CHECK(srpc_emb_cache_dump(c, dumped, 2) == -ENOBUFS, "dump too small");
    CHECK(srpc_emb_cache_dump(c, dumped, 3) == 3, "dump exactly");
    srpc_emb_cache_clear(c);
    CHECK(srpc_emb_cache_size(c) == 0 && srpc_emb_cache_query(c, keys, 3, out, hit) == 0, "cleared");
    srpc_emb_cache_destroy(c);
}

/* One slabset of 32 slots: the 33rd key evicts the least recently used, a query refreshes. */
static void test_lru(void)
{
    srpc_emb_cache_t *c;
    CHECK(srpc_emb_cache_create(DIM, 32, 1, &c) == 0 && srpc_emb_cache_sets(c) == 1, "one set");
    float v[DIM], out[DIM];
    uint8_t hit;
    for (int64_t k = 0; k < 32; k++) {
        fill(v, k, 0);
        CHECK(srpc_emb_cache_replace(c, &k, 1, v) == 0, "fill %lld", (long long)k);
    }
    int64_t k0 = 0;
    CHECK(srpc_emb_cache_query(c, &k0, 1, out, &hit) == 1, "touch 0: now key 1 is the oldest");
    int64_t k = 100;
    fill(v, k, 0);
    CHECK(srpc_emb_cache_replace(c, &k, 1, v) == 1, "one eviction");
    int64_t k1 = 1;
    CHECK(srpc_emb_cache_query(c, &k1, 1, out, &hit) == 0, "1 evicted");
    CHECK(srpc_emb_cache_query(c, &k0, 1, out, &hit) == 1, "0 kept");
    /* update does not refresh: key 2 is the oldest now, even after an update */
    fill(v, 2, 7);
    int64_t k2 = 2;
    CHECK(srpc_emb_cache_update(c, &k2, 1, v) == 1, "update 2");
    k = 101;
    CHECK(srpc_emb_cache_replace(c, &k, 1, v) == 1 && srpc_emb_cache_query(c, &k2, 1, out, &hit) == 0, "2 evicted");
    CHECK(srpc_emb_cache_size(c) == 32, "full");
    srpc_emb_cache_destroy(c);
}

#define THREADS 4
#define KEYS 300
#define ROUNDS 3000

static srpc_emb_cache_t *shared;

static void *hammer(void *arg)
{
    const int id = (int)(intptr_t)arg;
    uint64_t s = 88172645463325252ull + (uint64_t)id;
    float v[4 * DIM], out[4 * DIM];
    int64_t keys[4];
    uint8_t hit[4];
    long bad = 0;
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < 4; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            keys[i] = (int64_t)(s % KEYS);
            fill(v + i * DIM, keys[i], 0);
        }
        if (r % 3 == 0)
            srpc_emb_cache_replace(shared, keys, 4, v);
        else if (r % 3 == 1)
            srpc_emb_cache_update(shared, keys, 4, v);
        if (srpc_emb_cache_query(shared, keys, 4, out, hit) < 0)
            bad++;
        for (int i = 0; i < 4; i++)
            if (hit[i] && !row_is(out + i * DIM, keys[i], 0))
                bad++;
        if (r % 500 == 0) {
            int64_t d[512];
            if (srpc_emb_cache_dump(shared, d, 512) < 0)
                bad++;
        }
    }
    return (void *)bad;
}

static void test_threads(void)
{
    CHECK(srpc_emb_cache_create(DIM, 128, 1, &shared) == 0, "create"); /* 4 sets of 32: evictions all along */
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, hammer, (void *)(intptr_t)i);
    long bad = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)r;
    }
    CHECK(bad == 0, "%ld torn rows or errors", bad);
    CHECK(srpc_emb_cache_size(shared) <= srpc_emb_cache_slots(shared), "size within slots");
    srpc_emb_cache_destroy(shared);
}

int main(void)
{
    test_arguments();
    test_hits_overwrite_update_dump();
    test_lru();
    test_threads();
    printf("test_embed: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
