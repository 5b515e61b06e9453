/* device_cache.c: the embedding cache in a GPU's memory (splitrpc_embed.h's srpc_emb_dcache_*): one device allocation for the slabsets and a batch's staging, one pinned host allocation, a stream of its own; each call copies a batch in, runs one kernel of native/cuda/embed_cache.cuh and copies the results back. */
#include "splitrpc_embed.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mix64.h"
#include "embed/emb_gpu_abi.h"
#include "gpu/gpu_driver.h"
#include "gpu/gpu_kernels.h"
#include "splitrpc_gpu.h" /* srpc_gpu_last_error */

_Static_assert(sizeof(struct srpc_emb_kargs) == SRPC_EMB_KARGS_SIZE, "srpc_emb_kargs layout");

#define ALIGN 256 /* every region of the device allocation starts on this */

struct srpc_emb_dcache {
    int device;
    uint32_t dim, per_set, max_batch;
    uint64_t sets, slots;
    const struct srpc_gpu_kernels *k;
    srpc_CUstream stream;
    srpc_CUdeviceptr mem;   /* cuMemAlloc: the cache, then the staging (regions in a) */
    void *host;             /* cuMemHostAlloc: count[2], keys[max_batch], vecs[max_batch * dim], hit[max_batch] */
    int64_t *h_keys;
    float *h_vecs;
    uint8_t *h_hit;
    uint64_t *h_count;
    struct srpc_emb_kargs a; /* the regions' addresses; per call: n, clock, cap, out_vecs */
    /* under lock: */
    pthread_mutex_t lock;
    uint64_t clock;  /* the last counter handed out */
    uint64_t size;   /* keys cached (the replace kernel counts the slots it fills) */
    int failed;      /* a copy or a kernel failed: -EIO until a clear succeeds */
};

static uint64_t up(uint64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

void srpc_emb_dcache_destroy(srpc_emb_dcache_t *c)
{
    if (!c)
        return;
    srpc_CUcontext saved = NULL;
    if (srpc_gpu_enter(c->device, &saved) == 0) {
        if (c->stream) {
            srpc_gpu_wait_stream(c->stream, "the embedding cache's work before it is freed", 1);
            srpc_cu.StreamDestroy(c->stream);
            srpc_gpu_held(SRPC_HELD_STREAM, -1);
        }
        if (c->mem)
            srpc_cu.MemFree(c->mem);
        if (c->host) {
            srpc_cu.MemFreeHost(c->host);
            srpc_gpu_held(SRPC_HELD_HOST_ALLOC, -1);
        }
        srpc_gpu_leave(saved);
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int srpc_emb_dcache_create(int device, uint32_t dim, uint64_t capacity, uint32_t slabs_per_set, uint32_t max_batch,
                           srpc_emb_dcache_t **out)
{
    if (!out)
        return srpc_gpu_failf(-EINVAL, "srpc_emb_dcache_create: NULL out");
    *out = NULL;
    if (max_batch == 0 && dim > 0) {
        const uint64_t fit = SRPC_EMB_DEVICE_STAGING_BYTES / ((uint64_t)dim * sizeof(float));
        max_batch = fit < 1 ? 1 : fit < SRPC_EMB_DEVICE_BATCH ? (uint32_t)fit : SRPC_EMB_DEVICE_BATCH;
    }
    if (device < 0 || dim == 0 || dim > SRPC_EMB_MAX_DIM || capacity == 0 || slabs_per_set == 0 ||
        slabs_per_set > SRPC_EMB_MAX_SLABS_PER_SET || max_batch > SRPC_EMB_DEVICE_MAX_BATCH)
        return srpc_gpu_failf(-EINVAL, "srpc_emb_dcache_create: device %d, dim %u, capacity %llu, slabs_per_set %u, "
                              "max_batch %u", device, dim, (unsigned long long)capacity, slabs_per_set, max_batch);
    const uint64_t per_set = (uint64_t)slabs_per_set * SRPC_EMB_SLAB;
    const uint64_t sets = capacity / per_set + (capacity % per_set != 0);
    /* bytes of each region, checked against overflow: slots * (16 + 4 * dim) is the largest */
    if (sets > UINT32_MAX || sets * per_set > ((1ull << 62) / 4) / (4 + (uint64_t)dim))
        return srpc_gpu_failf(-EOVERFLOW, "srpc_emb_dcache_create: capacity %llu too large",
                              (unsigned long long)capacity);
    int rc = srpc_gpu_kernels_built();
    if (rc)
        return rc;
    srpc_CUcontext saved = NULL;
    if ((rc = srpc_gpu_enter(device, &saved)))
        return rc;
    srpc_emb_dcache_t *c = calloc(1, sizeof(*c));
    if (!c) {
        srpc_gpu_leave(saved);
        return srpc_gpu_failf(-ENOMEM, "srpc_emb_dcache_create: out of host memory");
    }
    pthread_mutex_init(&c->lock, NULL);
    c->device = device;
    c->dim = dim;
    c->per_set = (uint32_t)per_set;
    c->max_batch = max_batch;
    c->sets = sets;
    c->slots = sets * per_set;
    srpc_CUresult r;
    if ((rc = srpc_gpu_kernels(device, &c->k)))
        goto fail;

    const uint64_t row = (uint64_t)dim * sizeof(float);
    uint64_t at = 0;
    const uint64_t o_keys = at;     at += up(c->slots * 8);
    const uint64_t o_ctr = at;      at += up(c->slots * 8);
    const uint64_t o_vec = at;      at += up(c->slots * row);
    const uint64_t o_locks = at;    at += up(sets * 4);
    const uint64_t o_count = at;    at += up(16);
    const uint64_t o_in_keys = at;  at += up((uint64_t)max_batch * 8);
    const uint64_t o_in_vecs = at;  at += up((uint64_t)max_batch * row);
    const uint64_t o_hit = at;      at += up(max_batch);
    if ((r = srpc_cu.MemAlloc(&c->mem, at)) != SRPC_CUDA_SUCCESS) {
        c->mem = 0;
        rc = srpc_gpu_fail("cuMemAlloc(embedding cache)", r);
        goto fail;
    }
    /* pinned: count[2], keys[max_batch], vecs[max_batch * dim], hit[max_batch], each region aligned */
    const uint64_t h_keys_at = up(16), h_vecs_at = h_keys_at + up((uint64_t)max_batch * 8),
                   h_hit_at = h_vecs_at + up((uint64_t)max_batch * row), host_len = h_hit_at + up(max_batch);
    if ((r = srpc_cu.MemHostAlloc(&c->host, host_len, SRPC_CU_MEMHOSTALLOC_PORTABLE)) != SRPC_CUDA_SUCCESS) {
        c->host = NULL;
        rc = srpc_gpu_fail("cuMemHostAlloc(embedding cache staging)", r);
        goto fail;
    }
    srpc_gpu_held(SRPC_HELD_HOST_ALLOC, 1);
    c->h_count = c->host;
    c->h_keys = (int64_t *)(void *)((char *)c->host + h_keys_at);
    c->h_vecs = (float *)(void *)((char *)c->host + h_vecs_at);
    c->h_hit = (uint8_t *)c->host + h_hit_at;
    if ((r = srpc_cu.StreamCreate(&c->stream, SRPC_CU_STREAM_NON_BLOCKING)) != SRPC_CUDA_SUCCESS) {
        c->stream = NULL;
        rc = srpc_gpu_fail("cuStreamCreate(embedding cache)", r);
        goto fail;
    }
    srpc_gpu_held(SRPC_HELD_STREAM, 1);
    c->a = (struct srpc_emb_kargs){.keys = c->mem + o_keys, .counters = c->mem + o_ctr, .vectors = c->mem + o_vec,
                                   .locks = c->mem + o_locks, .in_keys = c->mem + o_in_keys,
                                   .in_vecs = c->mem + o_in_vecs, .out_vecs = c->mem + o_in_vecs,
                                   .hit = c->mem + o_hit, .count = c->mem + o_count, .sets = sets,
                                   .dim = dim, .per_set = c->per_set};
    srpc_gpu_leave(saved);
    if ((rc = srpc_emb_dcache_clear(c))) /* device memory starts with anything in it */
        goto fail_left;
    *out = c;
    return 0;
fail:
    srpc_gpu_leave(saved);
fail_left:
    srpc_emb_dcache_destroy(c);
    return rc;
}

int srpc_emb_dcache_device(const srpc_emb_dcache_t *c) { return c->device; }
uint64_t srpc_emb_dcache_slots(const srpc_emb_dcache_t *c) { return c->slots; }
uint64_t srpc_emb_dcache_sets(const srpc_emb_dcache_t *c) { return c->sets; }
uint64_t srpc_emb_dcache_set_of(const srpc_emb_dcache_t *c, int64_t key) { return srpc_mix64((uint64_t)key) % c->sets; }

uint64_t srpc_emb_dcache_size(srpc_emb_dcache_t *c)
{
    pthread_mutex_lock(&c->lock);
    const uint64_t n = c->size;
    pthread_mutex_unlock(&c->lock);
    return n;
}

/* ------------------------------------------------------------------ one kernel over a batch */

/* A failure after work was queued: the cache's content is unknown from here. The stream is
 * drained first, so that no copy still queued reads or writes the staging after the call
 * returns (its result is not looked at: the failure said is the first). Lock held. */
static int broke(srpc_emb_dcache_t *c, const char *call, srpc_CUresult r)
{
    c->failed = 1;
    srpc_gpu_fail(call, r); /* the driver's reason, as the last error */
    char said[256];
    snprintf(said, sizeof(said), "%s", srpc_gpu_last_error());
    srpc_gpu_wait_stream(c->stream, "the embedding cache's queued copies", 1);
    srpc_gpu_failf(-EIO, "%s", said); /* the failure said is the first, not the wait's */
    return -EIO; /* whatever the driver said: the cache's state, not the caller's argument */
}

/* Queues: count zeroed, keys (and vecs) in, the kernel over a->n keys at a warp each (replace:
 * its two phases), or over a->n items at a thread each; then copies count back and, if asked,
 * the hit flags; and waits. Lock held, context current. */
static int run(srpc_emb_dcache_t *c, srpc_CUfunction f, const char *name, struct srpc_emb_kargs *a, int warp_per_key,
               int copy_vecs_in, int copy_hit_back)
{
    srpc_CUresult r;
    c->h_count[0] = c->h_count[1] = 0;
    if ((r = srpc_cu.MemcpyHtoDAsync(a->count, c->h_count, 16, c->stream)) != SRPC_CUDA_SUCCESS)
        return broke(c, "cuMemcpyHtoDAsync(count)", r);
    if (warp_per_key && a->n) {
        if ((r = srpc_cu.MemcpyHtoDAsync(a->in_keys, c->h_keys, (size_t)a->n * 8, c->stream)) != SRPC_CUDA_SUCCESS)
            return broke(c, "cuMemcpyHtoDAsync(keys)", r);
        if (copy_vecs_in && (r = srpc_cu.MemcpyHtoDAsync(a->in_vecs, c->h_vecs, (size_t)a->n * c->dim * sizeof(float),
                                                         c->stream)) != SRPC_CUDA_SUCCESS)
            return broke(c, "cuMemcpyHtoDAsync(vectors)", r);
    }
    const uint32_t phases = f == c->k->emb_replace ? 2 : 1;
    for (uint32_t phase = 0; a->n && phase < phases; phase++) {
        const unsigned blocks = warp_per_key ? (a->n + SRPC_EMB_WARPS - 1) / SRPC_EMB_WARPS
                                             : (a->n + SRPC_EMB_THREADS - 1) / SRPC_EMB_THREADS;
        struct srpc_emb_kargs arg = *a;
        arg.phase = phase;
        void *params[] = {&arg}; /* read by the driver at the launch */
        if ((r = srpc_cu.LaunchKernel(f, blocks, 1, 1, SRPC_EMB_THREADS, 1, 1, 0, c->stream, params, NULL)) !=
            SRPC_CUDA_SUCCESS)
            return broke(c, name, r);
    }
    if ((r = srpc_cu.MemcpyDtoHAsync(c->h_count, a->count, 16, c->stream)) != SRPC_CUDA_SUCCESS)
        return broke(c, "cuMemcpyDtoHAsync(count)", r);
    if (copy_hit_back && a->n &&
        (r = srpc_cu.MemcpyDtoHAsync(c->h_hit, a->hit, a->n, c->stream)) != SRPC_CUDA_SUCCESS)
        return broke(c, "cuMemcpyDtoHAsync(hit)", r);
    int rc = srpc_gpu_wait_stream(c->stream, "the embedding cache's kernels", 0);
    if (rc) /* the stream's error or no progress: the cache's content is unknown from here */
        c->failed = 1;
    return rc;
}

/* Takes the lock and the device's context: 0, or -EIO for a failed cache (nothing taken). */
static int begin(srpc_emb_dcache_t *c, srpc_CUcontext *saved)
{
    pthread_mutex_lock(&c->lock);
    int rc = c->failed ? srpc_gpu_failf(-EIO, "the embedding cache on device %d failed earlier: clear() it", c->device)
                       : srpc_gpu_enter(c->device, saved);
    if (rc)
        pthread_mutex_unlock(&c->lock);
    return rc;
}

static void end(srpc_emb_dcache_t *c, srpc_CUcontext saved)
{
    srpc_gpu_leave(saved);
    pthread_mutex_unlock(&c->lock);
}

/* ------------------------------------------------------------------ the calls */

/* The launch arguments of the chunk of keys [off, off + *m) of a batch of n (at most max_batch
 * keys), its keys copied into the pinned staging. Lock held. */
static struct srpc_emb_kargs chunk(srpc_emb_dcache_t *c, const int64_t *keys, uint64_t off, uint64_t n, uint32_t *m)
{
    *m = (uint32_t)(n - off < c->max_batch ? n - off : c->max_batch);
    struct srpc_emb_kargs a = c->a;
    a.n = *m;
    a.clock = c->clock;
    memcpy(c->h_keys, keys + off, (size_t)*m * 8);
    return a;
}

static int64_t query(srpc_emb_dcache_t *c, const int64_t *keys, uint64_t n, float *out, uint64_t out_dev,
                     uint8_t *hit)
{
    if (!c || (n && (!keys || !hit || (!out && !out_dev))))
        return srpc_gpu_failf(-EINVAL, "srpc_emb_dcache_query: NULL argument");
    srpc_CUcontext saved;
    int rc = begin(c, &saved);
    if (rc)
        return rc;
    const uint64_t row = c->dim;
    int64_t hits = 0;
    for (uint64_t off = 0; off < n; off += c->max_batch) {
        uint32_t m;
        struct srpc_emb_kargs a = chunk(c, keys, off, n, &m);
        if (out_dev)
            a.out_vecs = out_dev + off * row * sizeof(float);
        srpc_CUresult r;
        if ((rc = run(c, c->k->emb_query, "cuLaunchKernel(srpc_emb_query)", &a, 1, 0, 1)))
            break;
        c->clock += m;
        if (!out_dev && c->h_count[0]) {
            if ((r = srpc_cu.MemcpyDtoHAsync(c->h_vecs, a.out_vecs, (size_t)m * row * sizeof(float), c->stream)) !=
                SRPC_CUDA_SUCCESS) {
                rc = broke(c, "cuMemcpyDtoHAsync(vectors)", r);
                break;
            }
            if ((rc = srpc_gpu_wait_stream(c->stream, "the embedding cache's vectors", 0))) {
                c->failed = 1;
                break;
            }
        }
        for (uint32_t i = 0; i < m; i++) {
            hit[off + i] = c->h_hit[i] != 0;
            if (!out_dev && c->h_hit[i])
                memcpy(out + (off + i) * row, c->h_vecs + (uint64_t)i * row, row * sizeof(float));
        }
        hits += (int64_t)c->h_count[0];
    }
    end(c, saved);
    return rc ? rc : hits;
}

int64_t srpc_emb_dcache_query(srpc_emb_dcache_t *c, const int64_t *keys, uint64_t n, float *out, uint8_t *hit)
{
    return query(c, keys, n, out, 0, hit);
}

int64_t srpc_emb_dcache_query_device(srpc_emb_dcache_t *c, const int64_t *keys, uint64_t n, uint64_t out_dev,
                                     uint8_t *hit)
{
    if (n && !out_dev)
        return srpc_gpu_failf(-EINVAL, "srpc_emb_dcache_query_device: no device output");
    return query(c, keys, n, NULL, out_dev, hit);
}

/* Replace (update = 0) or update (1): returns evicted or updated. */
static int64_t write_batch(srpc_emb_dcache_t *c, const int64_t *keys, uint64_t n, const float *vecs, int update)
{
    if (!c || (n && (!keys || !vecs)))
        return srpc_gpu_failf(-EINVAL, "srpc_emb_dcache_%s: NULL argument", update ? "update" : "replace");
    srpc_CUcontext saved;
    int rc = begin(c, &saved);
    if (rc)
        return rc;
    int64_t total = 0;
    for (uint64_t off = 0; off < n; off += c->max_batch) {
        uint32_t m;
        struct srpc_emb_kargs a = chunk(c, keys, off, n, &m);
        memcpy(c->h_vecs, vecs + off * c->dim, (size_t)m * c->dim * sizeof(float));
        if ((rc = run(c, update ? c->k->emb_update : c->k->emb_replace,
                      update ? "cuLaunchKernel(srpc_emb_update)" : "cuLaunchKernel(srpc_emb_replace)", &a, 1, 1, 0)))
            break;
        if (!update) {
            c->clock += m;
            c->size += c->h_count[1];
        }
        total += (int64_t)c->h_count[0];
    }
    end(c, saved);
    return rc ? rc : total;
}

int64_t srpc_emb_dcache_replace(srpc_emb_dcache_t *c, const int64_t *keys, uint64_t n, const float *vecs)
{
    return write_batch(c, keys, n, vecs, 0);
}

int64_t srpc_emb_dcache_update(srpc_emb_dcache_t *c, const int64_t *keys, uint64_t n, const float *vecs)
{
    return write_batch(c, keys, n, vecs, 1);
}

int64_t srpc_emb_dcache_dump(srpc_emb_dcache_t *c, int64_t *keys_out, uint64_t cap)
{
    if (!c || (cap && !keys_out))
        return srpc_gpu_failf(-EINVAL, "srpc_emb_dcache_dump: NULL argument");
    srpc_CUcontext saved;
    int rc = begin(c, &saved);
    if (rc)
        return rc;
    uint64_t n = 0;
    int full = 0;
    /* a range of at most max_batch slots at a time: its keys fit the staging */
    for (uint64_t first = 0; first < c->slots && !full; first += c->max_batch) {
        struct srpc_emb_kargs a = c->a;
        a.n = (uint32_t)(c->slots - first < c->max_batch ? c->slots - first : c->max_batch);
        a.clock = first;
        a.cap = c->max_batch;
        srpc_CUresult r;
        if ((rc = run(c, c->k->emb_dump, "cuLaunchKernel(srpc_emb_dump)", &a, 0, 0, 0)))
            break;
        uint64_t got = c->h_count[0];
        if (got) {
            if ((r = srpc_cu.MemcpyDtoHAsync(c->h_keys, a.in_keys, (size_t)got * 8, c->stream)) != SRPC_CUDA_SUCCESS) {
                rc = broke(c, "cuMemcpyDtoHAsync(dumped keys)", r);
                break;
            }
            if ((rc = srpc_gpu_wait_stream(c->stream, "the embedding cache's dumped keys", 0))) {
                c->failed = 1;
                break;
            }
        }
        if (got > cap - n) {
            got = cap - n;
            full = 1;
        }
        if (got)
            memcpy(keys_out + n, c->h_keys, (size_t)got * 8);
        n += got;
    }
    end(c, saved);
    return rc ? rc : full ? -ENOBUFS : (int64_t)n;
}

int srpc_emb_dcache_clear(srpc_emb_dcache_t *c)
{
    if (!c)
        return srpc_gpu_failf(-EINVAL, "srpc_emb_dcache_clear: NULL cache");
    pthread_mutex_lock(&c->lock);
    srpc_CUcontext saved;
    int rc = srpc_gpu_enter(c->device, &saved);
    if (rc == 0) {
        struct srpc_emb_kargs a = c->a;
        a.n = (uint32_t)c->sets;
        rc = run(c, c->k->emb_clear, "cuLaunchKernel(srpc_emb_clear)", &a, 0, 0, 0);
        if (rc == 0) {
            c->failed = 0;
            c->size = 0;
        }
        srpc_gpu_leave(saved);
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}
