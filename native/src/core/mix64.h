/* mix64.h: splitmix64's finaliser, the one 64-bit mixer of the GNN sampler's draws and the embedding cache's slabset choice (the call table keeps murmur3's fmix64, its own). */
#ifndef SRPC_MIX64_H
#define SRPC_MIX64_H

#include <stdint.h>

#ifdef __CUDACC__ /* the embedding cache's kernels (native/cuda/embed_cache.cuh) choose slabsets with it too */
#define SRPC_MIX64_FN static __host__ __device__ __forceinline__
#else
#define SRPC_MIX64_FN static inline
#endif

/* A bijection of 64-bit words with good avalanche. Pure: any thread. */
SRPC_MIX64_FN uint64_t srpc_mix64(uint64_t z)
{
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ull;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif /* SRPC_MIX64_H */
