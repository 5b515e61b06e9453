/* splitrpc_embed.h: an embedding cache (HugeCTR HPS's L1), in host memory or in a GPU's: a set-associative slab cache of (key, vector, access counter), least-recently-used eviction by a counter; batched query, replace, update and dump. */
#ifndef SPLITRPC_EMBED_H
#define SPLITRPC_EMBED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SRPC_EMB_SLAB 32                /* slots per slab */
#define SRPC_EMB_MAX_SLABS_PER_SET 64
#define SRPC_EMB_MAX_DIM 65536          /* floats per vector */

/* Layout: a key maps to one slabset (srpc_emb_cache_set_of: splitmix64's finaliser of the key,
 * modulo the number of slabsets) and lives in one of its slabs_per_set x SRPC_EMB_SLAB slots,
 * found by a linear probe of the set. Every slot has an access counter: 0 while empty, else the
 * value of the cache's global counter when the key was last inserted or hit (each touch takes the
 * next value, so counters are distinct). A full slabset evicts its slot of the smallest counter.
 * Any int64 is a valid key.
 *
 * Threads: every function but create and destroy may be called by any number of threads at
 * once; each key's slabset is locked while that key is read or written, so a vector is never seen
 * half written. A batch is not atomic as a whole. The caller owns keys, vectors and outputs; the
 * cache copies vectors in and out. */
typedef struct srpc_emb_cache srpc_emb_cache_t;

/* A cache of vectors of dim floats with room for at least capacity keys:
 * ceil(capacity / (SRPC_EMB_SLAB * slabs_per_set)) slabsets. 0 with *out; -EINVAL (dim 0 or over
 * SRPC_EMB_MAX_DIM, capacity 0, slabs_per_set 0 or over SRPC_EMB_MAX_SLABS_PER_SET), -EOVERFLOW
 * (too large to address), -ENOMEM. */
int srpc_emb_cache_create(uint32_t dim, uint64_t capacity, uint32_t slabs_per_set, srpc_emb_cache_t **out);
/* Frees the cache; no other thread may be using it. NULL is ignored. */
void srpc_emb_cache_destroy(srpc_emb_cache_t *c);

uint32_t srpc_emb_cache_dim(const srpc_emb_cache_t *c);
uint64_t srpc_emb_cache_slots(const srpc_emb_cache_t *c);  /* slabsets x slots per set */
uint64_t srpc_emb_cache_sets(const srpc_emb_cache_t *c);
uint64_t srpc_emb_cache_set_of(const srpc_emb_cache_t *c, int64_t key);  /* the slabset of key */
uint64_t srpc_emb_cache_size(const srpc_emb_cache_t *c);   /* keys cached now */

/* Query: for each of n keys, a cached one has its vector copied to out[i * dim ..], hit[i] = 1
 * and becomes the most recently used; a missing one gets hit[i] = 0 and its row of out is left as
 * it was. Returns the number of hits, or -EINVAL (a NULL array with n > 0). */
int64_t srpc_emb_cache_query(srpc_emb_cache_t *c, const int64_t *keys, uint64_t n, float *out, uint8_t *hit);

/* Replace: inserts each key with vecs[i * dim ..]: a cached key has its vector overwritten; else
 * it fills an empty slot of its slabset, else it evicts the set's least recently used key. Each
 * becomes the most recently used (a key repeated in the batch: its last vector stays). Returns
 * the number of keys evicted, or -EINVAL. */
int64_t srpc_emb_cache_replace(srpc_emb_cache_t *c, const int64_t *keys, uint64_t n, const float *vecs);

/* Update: overwrites the vectors of the keys already cached, leaving their recency; keys not
 * cached are skipped. Returns how many were cached, or -EINVAL. */
int64_t srpc_emb_cache_update(srpc_emb_cache_t *c, const int64_t *keys, uint64_t n, const float *vecs);

/* Dump: writes the cached keys (slabset by slabset, each set locked while it is read) to
 * keys_out, at most cap of them. Returns how many were written; -ENOBUFS when more keys were
 * cached than cap (the first cap are written). */
int64_t srpc_emb_cache_dump(srpc_emb_cache_t *c, int64_t *keys_out, uint64_t cap);

/* Empties the cache. */
void srpc_emb_cache_clear(srpc_emb_cache_t *c);

/* ------------------------------------------------------------------ the cache on a GPU
 * The same cache in the memory of a CUDA device (HPS's GPU L1): the same layout, slabset choice
 * and LRU rule, and the same calls, each run as a kernel over the batch (a warp per key;
 * native/cuda/embed_cache.cuh) on the cache's own stream. A batch's outcome is the one of
 * applying its keys in index order, as the host cache does (the same keys cached, the same
 * vectors, a key repeated in a query or replace batch keeping its last), except that:
 *  - dump returns the keys in no particular order;
 *  - update must be given each key once (a repeated key's row may end up mixing its vectors:
 *    two warps write it at once), and then returns what the host cache's does;
 *  - replace's count of evictions, for a batch without repeated keys, may be lower by the keys
 *    of the batch that were cached before it and that the host cache, going in index order,
 *    evicts with an earlier key of the batch and puts back (the device touches them first); for a
 *    batch with repeated keys the count is unspecified (the keys cached are not). Batches
 * larger than max_batch keys are run max_batch at a time through the cache's staging buffers
 * (pinned host memory and device memory).
 *
 * Every call returns what the host cache's does (but for the exceptions above), or -errno with
 * srpc_gpu_last_error() saying why: -ENOTSUP (no kernels compiled in), -ENODEV (no driver or device), -ENOMEM (device or
 * pinned memory), -EIO (a copy or a kernel failed: the cache's content is then unknown until
 * srpc_emb_dcache_clear succeeds; until then every call but clear and destroy returns -EIO).
 * Threads: any number may call at once; the calls of one cache are serialised by its mutex.
 * Each call makes the device's primary context current for its duration and restores the
 * thread's own context afterwards. The caller owns keys, vectors and outputs. */
typedef struct srpc_emb_dcache srpc_emb_dcache_t;

/* Default and largest staging batch (keys per kernel launch), and the most bytes of vectors the
 * default batch stages (wide vectors get a smaller default batch). */
#define SRPC_EMB_DEVICE_BATCH 8192
#define SRPC_EMB_DEVICE_MAX_BATCH 1048576
#define SRPC_EMB_DEVICE_STAGING_BYTES 33554432

/* A cache on device ordinal `device`; the arguments as srpc_emb_cache_create's, and max_batch
 * (0: SRPC_EMB_DEVICE_BATCH, or fewer keys where dim floats each would stage more than
 * SRPC_EMB_DEVICE_STAGING_BYTES; at most SRPC_EMB_DEVICE_MAX_BATCH). Staging takes about
 * max_batch * (4 * dim + 9) bytes of pinned and of device memory. 0 with *out, -EINVAL,
 * -EOVERFLOW, -ENOMEM, -ENOTSUP or -ENODEV. */
int srpc_emb_dcache_create(int device, uint32_t dim, uint64_t capacity, uint32_t slabs_per_set, uint32_t max_batch,
                           srpc_emb_dcache_t **out);
/* Waits for its stream, frees its memory and stream; no other thread may be using it. NULL is ignored. */
void srpc_emb_dcache_destroy(srpc_emb_dcache_t *c);

int srpc_emb_dcache_device(const srpc_emb_dcache_t *c);
uint64_t srpc_emb_dcache_slots(const srpc_emb_dcache_t *c);
uint64_t srpc_emb_dcache_sets(const srpc_emb_dcache_t *c);
uint64_t srpc_emb_dcache_set_of(const srpc_emb_dcache_t *c, int64_t key); /* as the host cache's */
uint64_t srpc_emb_dcache_size(srpc_emb_dcache_t *c);   /* keys cached now */

/* As srpc_emb_cache_query, with the hits' vectors written to host memory out. */
int64_t srpc_emb_dcache_query(srpc_emb_dcache_t *c, const int64_t *keys, uint64_t n, float *out, uint8_t *hit);
/* As srpc_emb_cache_query, with the hits' vectors written by the kernel to device memory
 * out_dev (n * dim floats, rows of misses left alone) and only the hit flags copied back: the
 * vectors never cross to the host. The kernel runs on the cache's own stream, which waits for no
 * other: work of the caller's still queued on out_dev must be complete before the call (e.g. its
 * stream synchronised). out_dev's writes are complete when the call returns. */
int64_t srpc_emb_dcache_query_device(srpc_emb_dcache_t *c, const int64_t *keys, uint64_t n, uint64_t out_dev,
                                     uint8_t *hit);
int64_t srpc_emb_dcache_replace(srpc_emb_dcache_t *c, const int64_t *keys, uint64_t n, const float *vecs);
int64_t srpc_emb_dcache_update(srpc_emb_dcache_t *c, const int64_t *keys, uint64_t n, const float *vecs);
int64_t srpc_emb_dcache_dump(srpc_emb_dcache_t *c, int64_t *keys_out, uint64_t cap);
/* Empties the cache (and clears a failed cache's -EIO state). 0 or -errno. */
int srpc_emb_dcache_clear(srpc_emb_dcache_t *c);

#ifdef __cplusplus
}
#endif
#endif /* SPLITRPC_EMBED_H */
