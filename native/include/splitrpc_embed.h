/* splitrpc_embed.h: an embedding cache in host memory (HugeCTR HPS's L1, on the CPU): a set-associative slab cache of (key, vector, access counter), one lock per slabset, least-recently-used eviction by a global counter. */
#ifndef SPLITRPC_EMBED_H
#define SPLITRPC_EMBED_H

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

#ifdef __cplusplus
}
#endif
#endif /* SPLITRPC_EMBED_H */
