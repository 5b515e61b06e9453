/* cache.c: the set-associative embedding cache of splitrpc_embed.h: slabsets of slots (key, counter, vector) in three flat arrays, a mutex per slabset, LRU by a global atomic counter. */
#include "splitrpc_embed.h"

#include "core/mix64.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct srpc_emb_cache {
    uint32_t dim;
    uint32_t per_set;          /* slots per slabset: slabs_per_set * SRPC_EMB_SLAB */
    uint64_t sets;
    _Atomic uint64_t clock;    /* the last counter handed out */
    _Atomic uint64_t size;     /* keys cached */
    pthread_mutex_t *locks;    /* one per slabset */
    int64_t *keys;             /* sets * per_set */
    uint64_t *counters;        /* 0: empty */
    float *vectors;            /* sets * per_set * dim */
};

int srpc_emb_cache_create(uint32_t dim, uint64_t capacity, uint32_t slabs_per_set, srpc_emb_cache_t **out)
{
    if (!out || dim == 0 || dim > SRPC_EMB_MAX_DIM || capacity == 0 || slabs_per_set == 0 ||
        slabs_per_set > SRPC_EMB_MAX_SLABS_PER_SET)
        return -EINVAL;
    *out = NULL;
    const uint64_t per_set = (uint64_t)slabs_per_set * SRPC_EMB_SLAB;
    const uint64_t sets = capacity / per_set + (capacity % per_set != 0);
    if (sets > (UINT64_MAX / per_set) || sets * per_set > (SIZE_MAX / sizeof(float)) / dim ||
        sets > SIZE_MAX / sizeof(pthread_mutex_t))
        return -EOVERFLOW;
    const uint64_t slots = sets * per_set;
    srpc_emb_cache_t *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->dim = dim;
    c->per_set = (uint32_t)per_set;
    c->sets = sets;
    c->locks = malloc(sets * sizeof(*c->locks));
    c->keys = malloc(slots * sizeof(*c->keys));
    c->counters = calloc(slots, sizeof(*c->counters));
    c->vectors = malloc(slots * dim * sizeof(*c->vectors));
    if (!c->locks || !c->keys || !c->counters || !c->vectors) {
        free(c->locks);
        c->locks = NULL;
        srpc_emb_cache_destroy(c);
        return -ENOMEM;
    }
    for (uint64_t s = 0; s < sets; s++)
        pthread_mutex_init(&c->locks[s], NULL);
    atomic_init(&c->clock, 0);
    atomic_init(&c->size, 0);
    *out = c;
    return 0;
}

void srpc_emb_cache_destroy(srpc_emb_cache_t *c)
{
    if (!c)
        return;
    if (c->locks)
        for (uint64_t s = 0; s < c->sets; s++)
            pthread_mutex_destroy(&c->locks[s]);
    free(c->locks);
    free(c->keys);
    free(c->counters);
    free(c->vectors);
    free(c);
}

uint32_t srpc_emb_cache_dim(const srpc_emb_cache_t *c) { return c->dim; }
uint64_t srpc_emb_cache_slots(const srpc_emb_cache_t *c) { return c->sets * c->per_set; }
uint64_t srpc_emb_cache_sets(const srpc_emb_cache_t *c) { return c->sets; }
uint64_t srpc_emb_cache_size(const srpc_emb_cache_t *c) { return atomic_load(&((srpc_emb_cache_t *)c)->size); }

uint64_t srpc_emb_cache_set_of(const srpc_emb_cache_t *c, int64_t key)
{
    return srpc_mix64((uint64_t)key) % c->sets;
}

static uint64_t tick(srpc_emb_cache_t *c)
{
    return atomic_fetch_add_explicit(&c->clock, 1, memory_order_relaxed) + 1;
}

/* The slot of key in set s (locked by the caller), or -1. */
static int64_t find(const srpc_emb_cache_t *c, uint64_t s, int64_t key)
{
    const uint64_t base = s * c->per_set;
    for (uint64_t j = base; j < base + c->per_set; j++)
        if (c->counters[j] != 0 && c->keys[j] == key)
            return (int64_t)j;
    return -1;
}

int64_t srpc_emb_cache_query(srpc_emb_cache_t *c, const int64_t *keys, uint64_t n, float *out, uint8_t *hit)
{
    if (!c || (n && (!keys || !out || !hit)))
        return -EINVAL;
    int64_t hits = 0;
    const size_t row = (size_t)c->dim * sizeof(float);
    for (uint64_t i = 0; i < n; i++) {
        const uint64_t s = srpc_emb_cache_set_of(c, keys[i]);
        pthread_mutex_lock(&c->locks[s]);
        const int64_t j = find(c, s, keys[i]);
        if (j >= 0) {
            memcpy(out + i * c->dim, c->vectors + (uint64_t)j * c->dim, row);
            c->counters[j] = tick(c);
            hits++;
        }
        pthread_mutex_unlock(&c->locks[s]);
        hit[i] = j >= 0;
    }
    return hits;
}

int64_t srpc_emb_cache_replace(srpc_emb_cache_t *c, const int64_t *keys, uint64_t n, const float *vecs)
{
    if (!c || (n && (!keys || !vecs)))
        return -EINVAL;
    int64_t evicted = 0;
    const size_t row = (size_t)c->dim * sizeof(float);
    for (uint64_t i = 0; i < n; i++) {
        const uint64_t s = srpc_emb_cache_set_of(c, keys[i]);
        const uint64_t base = s * c->per_set;
        pthread_mutex_lock(&c->locks[s]);
        int64_t at = -1, empty = -1, lru = -1;
        for (uint64_t j = base; j < base + c->per_set; j++) {
            if (c->counters[j] == 0) {
                if (empty < 0)
                    empty = (int64_t)j;
            } else if (c->keys[j] == keys[i]) {
                at = (int64_t)j;
                break;
            } else if (lru < 0 || c->counters[j] < c->counters[lru]) {
                lru = (int64_t)j;
            }
        }
        if (at < 0 && empty >= 0) {
            at = empty;
            atomic_fetch_add_explicit(&c->size, 1, memory_order_relaxed);
        } else if (at < 0) {
            at = lru;
            evicted++;
        }
        c->keys[at] = keys[i];
        memcpy(c->vectors + (uint64_t)at * c->dim, vecs + i * c->dim, row);
        c->counters[at] = tick(c);
        pthread_mutex_unlock(&c->locks[s]);
    }
    return evicted;
}

int64_t srpc_emb_cache_update(srpc_emb_cache_t *c, const int64_t *keys, uint64_t n, const float *vecs)
{
    if (!c || (n && (!keys || !vecs)))
        return -EINVAL;
    int64_t updated = 0;
    const size_t row = (size_t)c->dim * sizeof(float);
    for (uint64_t i = 0; i < n; i++) {
        const uint64_t s = srpc_emb_cache_set_of(c, keys[i]);
        pthread_mutex_lock(&c->locks[s]);
        const int64_t j = find(c, s, keys[i]);
        if (j >= 0) {
            memcpy(c->vectors + (uint64_t)j * c->dim, vecs + i * c->dim, row);
            updated++;
        }
        pthread_mutex_unlock(&c->locks[s]);
    }
    return updated;
}

int64_t srpc_emb_cache_dump(srpc_emb_cache_t *c, int64_t *keys_out, uint64_t cap)
{
    if (!c || (cap && !keys_out))
        return -EINVAL;
    uint64_t n = 0;
    int full = 0;
    for (uint64_t s = 0; s < c->sets && !full; s++) {
        const uint64_t base = s * c->per_set;
        pthread_mutex_lock(&c->locks[s]);
        for (uint64_t j = base; j < base + c->per_set; j++) {
            if (c->counters[j] == 0)
                continue;
            if (n == cap) {
                full = 1;
                break;
            }
            keys_out[n++] = c->keys[j];
        }
        pthread_mutex_unlock(&c->locks[s]);
    }
    return full ? -ENOBUFS : (int64_t)n;
}

void srpc_emb_cache_clear(srpc_emb_cache_t *c)
{
    for (uint64_t s = 0; s < c->sets; s++) {
        const uint64_t base = s * c->per_set;
        pthread_mutex_lock(&c->locks[s]);
        uint64_t dropped = 0;
        for (uint64_t j = base; j < base + c->per_set; j++) {
            dropped += c->counters[j] != 0;
            c->counters[j] = 0;
        }
        atomic_fetch_sub_explicit(&c->size, dropped, memory_order_relaxed);
        pthread_mutex_unlock(&c->locks[s]);
    }
}
