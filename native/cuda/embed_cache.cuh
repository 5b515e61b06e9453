/* embed_cache.cuh: the embedding cache's kernels (HPS's GPU L1), included by kernels.cu: query, replace, update, dump and clear over the slabset layout of splitrpc_embed.h in device memory, a warp per key (a lane per slot of each 32-slot slab), one argument block (embed/emb_gpu_abi.h). */
#include <stdint.h>

#include "core/mix64.h"
#include "embed/emb_gpu_abi.h"

static_assert(sizeof(struct srpc_emb_kargs) == SRPC_EMB_KARGS_SIZE, "srpc_emb_kargs layout");

/* The key this warp handles (i < a.n checked by the caller), its lane, and its slabset's first slot. */
struct emb_warp {
    uint64_t i;
    unsigned lane;
    long long key;
    uint64_t set, base;
};

static __device__ __forceinline__ bool emb_warp_of(const struct srpc_emb_kargs &a, struct emb_warp *w)
{
    w->i = (uint64_t)blockIdx.x * SRPC_EMB_WARPS + threadIdx.x / 32;
    w->lane = threadIdx.x & 31;
    if (w->i >= a.n)
        return false; /* the whole warp: i is the same for its 32 lanes */
    w->key = ((const long long *)(uintptr_t)a.in_keys)[w->i];
    w->set = srpc_mix64((uint64_t)w->key) % a.sets;
    w->base = w->set * a.per_set;
    return true;
}

/* The slot holding w's key, or -1, for every lane: lane j reads slot j of each slab. Loads go
 * through L2 (__ldcg): other warps of the same launch write these words. A key is in at most
 * one slot of its set. */
static __device__ __forceinline__ long long emb_find(const struct srpc_emb_kargs &a, const struct emb_warp &w)
{
    const long long *keys = (const long long *)(uintptr_t)a.keys;
    const unsigned long long *ctr = (const unsigned long long *)(uintptr_t)a.counters;
    for (uint32_t s = 0; s < a.per_set; s += 32) {
        const uint64_t j = w.base + s + w.lane;
        const bool match = __ldcg(ctr + j) != 0 && __ldcg(keys + j) == w.key;
        const unsigned b = __ballot_sync(0xffffffffu, match);
        if (b)
            return (long long)(w.base + s + (unsigned)__ffs(b) - 1);
    }
    return -1;
}

/* Copies dim floats, lane by lane (coalesced across the warp). */
static __device__ __forceinline__ void emb_copy(float *dst, const float *src, uint32_t dim, unsigned lane)
{
    for (uint32_t d = lane; d < dim; d += 32)
        dst[d] = __ldcg(src + d);
}

/* Query: a hit's vector to out_vecs' row i, hit[i] = 1, its counter raised to clock + i + 1
 * (atomicMax: the same key twice in a batch keeps the later); a miss gets hit[i] = 0 and its row
 * is not written. count[0] += hits. No lock: a query changes counters only. */
extern "C" __global__ void __launch_bounds__(SRPC_EMB_THREADS) srpc_emb_query(struct srpc_emb_kargs a)
{
    struct emb_warp w;
    if (!emb_warp_of(a, &w))
        return;
    const long long j = emb_find(a, w);
    if (j >= 0)
        emb_copy((float *)(uintptr_t)a.out_vecs + w.i * a.dim,
                 (const float *)(uintptr_t)a.vectors + (uint64_t)j * a.dim, a.dim, w.lane);
    if (w.lane == 0) {
        ((uint8_t *)(uintptr_t)a.hit)[w.i] = j >= 0;
        if (j >= 0) {
            atomicMax((unsigned long long *)(uintptr_t)a.counters + j, (unsigned long long)(a.clock + w.i + 1));
            atomicAdd((unsigned long long *)(uintptr_t)a.count, 1ull);
        }
    }
}

static __device__ __forceinline__ void emb_lock(uint32_t *l)
{
    unsigned ns = 32;
    while (atomicCAS(l, 0u, 1u) != 0u) {
        __nanosleep(ns);
        if (ns < 1024)
            ns *= 2;
    }
    __threadfence();
}

/* Replace, under the set's lock (lane 0 takes it). Phase 0: a cached key gets the vector and
 * counter clock + i + 1 unless it already holds a higher counter (a later index of the same
 * batch), and hit[i] = 1; else hit[i] = 0. Phase 1, for the keys with hit[i] = 0: a key cached
 * by now is handled as in phase 0 (a repeat of the batch); a new key takes the set's first empty
 * slot (count[1]++), else evicts the slot of the lowest counter when that is below its own, else
 * is not inserted (in index order a later key would have evicted it); both count as evicted
 * (count[0]++). */
extern "C" __global__ void __launch_bounds__(SRPC_EMB_THREADS) srpc_emb_replace(struct srpc_emb_kargs a)
{
    struct emb_warp w;
    if (!emb_warp_of(a, &w))
        return;
    uint8_t *mark = (uint8_t *)(uintptr_t)a.hit + w.i;
    if (a.phase == 1 && *mark)
        return;
    uint32_t *lock = (uint32_t *)(uintptr_t)a.locks + w.set;
    if (w.lane == 0)
        emb_lock(lock);
    __syncwarp();
    long long *keys = (long long *)(uintptr_t)a.keys;
    unsigned long long *ctr = (unsigned long long *)(uintptr_t)a.counters;
    unsigned long long *count = (unsigned long long *)(uintptr_t)a.count;
    const unsigned long long mine = a.clock + w.i + 1;
    long long at = emb_find(a, w);
    bool write = false;
    if (at >= 0) {
        write = __ldcg(ctr + at) < mine;
    } else if (a.phase == 1) {
        /* the first empty slot in slot order, else the lowest counter (counters are distinct) */
        long long empty = -1;
        unsigned long long low = ~0ull;
        long long low_at = -1;
        for (uint32_t s = 0; s < a.per_set && empty < 0; s += 32) {
            const uint64_t j = w.base + s + w.lane;
            const unsigned long long c = __ldcg(ctr + j);
            const unsigned b = __ballot_sync(0xffffffffu, c == 0);
            if (b) {
                empty = (long long)(w.base + s + (unsigned)__ffs(b) - 1);
            } else if (c < low) {
                low = c;
                low_at = (long long)j;
            }
        }
        if (empty >= 0) {
            at = empty;
            write = true;
            if (w.lane == 0)
                atomicAdd(count + 1, 1ull);
        } else {
            for (int off = 16; off > 0; off >>= 1) { /* the warp's lowest counter and its slot */
                const unsigned long long oc = __shfl_down_sync(0xffffffffu, low, off);
                const long long oa = __shfl_down_sync(0xffffffffu, low_at, off);
                if (oc < low) {
                    low = oc;
                    low_at = oa;
                }
            }
            low = __shfl_sync(0xffffffffu, low, 0);
            low_at = __shfl_sync(0xffffffffu, low_at, 0);
            write = low < mine;
            at = low_at;
            if (w.lane == 0)
                atomicAdd(count, 1ull);
        }
    }
    if (write) {
        float *dst = (float *)(uintptr_t)a.vectors + (uint64_t)at * a.dim;
        const float *src = (const float *)(uintptr_t)a.in_vecs + w.i * a.dim;
        for (uint32_t d = w.lane; d < a.dim; d += 32)
            dst[d] = src[d];
    }
    __threadfence(); /* every lane's writes before the lock is let go */
    __syncwarp();
    if (w.lane == 0) {
        if (write) {
            keys[at] = w.key;
            ctr[at] = mine;
        }
        if (a.phase == 0)
            *mark = at >= 0;
        __threadfence();
        atomicExch(lock, 0u);
    }
}

/* Update: a cached key's vector overwritten (its counter left); count[0] += how many were
 * cached. No lock: an update changes no key or counter. A key repeated in one batch gets one of
 * its vectors (the host passes each key once). */
extern "C" __global__ void __launch_bounds__(SRPC_EMB_THREADS) srpc_emb_update(struct srpc_emb_kargs a)
{
    struct emb_warp w;
    if (!emb_warp_of(a, &w))
        return;
    const long long j = emb_find(a, w);
    if (j < 0)
        return;
    float *dst = (float *)(uintptr_t)a.vectors + (uint64_t)j * a.dim;
    const float *src = (const float *)(uintptr_t)a.in_vecs + w.i * a.dim;
    for (uint32_t d = w.lane; d < a.dim; d += 32)
        dst[d] = src[d];
    if (w.lane == 0)
        atomicAdd((unsigned long long *)(uintptr_t)a.count, 1ull);
}

/* Dump: a thread per slot of the range [clock, clock + n); a cached key is written to in_keys at
 * the next place (in no particular order), count[0] counting them; past cap, count[1] = 1. */
extern "C" __global__ void srpc_emb_dump(struct srpc_emb_kargs a)
{
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    unsigned long long *count = (unsigned long long *)(uintptr_t)a.count;
    for (uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j < a.n; j += stride) {
        const uint64_t slot = a.clock + j;
        if (((const unsigned long long *)(uintptr_t)a.counters)[slot] == 0)
            continue;
        const unsigned long long at = atomicAdd(count, 1ull);
        if (at < a.cap)
            ((long long *)(uintptr_t)a.in_keys)[at] = ((const long long *)(uintptr_t)a.keys)[slot];
        else
            count[1] = 1;
    }
}

/* Clear: a thread per set (n = sets): its slots empty, its lock free. */
extern "C" __global__ void srpc_emb_clear(struct srpc_emb_kargs a)
{
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t s = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; s < a.n; s += stride) {
        unsigned long long *ctr = (unsigned long long *)(uintptr_t)a.counters + s * a.per_set;
        for (uint32_t j = 0; j < a.per_set; j++)
            ctr[j] = 0;
        ((uint32_t *)(uintptr_t)a.locks)[s] = 0;
    }
}
