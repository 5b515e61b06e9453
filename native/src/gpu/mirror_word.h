/* mirror_word.h: the device Tensor Queue mirror self-test's pattern word, one definition for the kernel (native/cuda/kernels.cu) and the emulated driver's host implementation of it (native/tests/fake_libcuda.c). */
#ifndef SRPC_MIRROR_WORD_H
#define SRPC_MIRROR_WORD_H

#include <stdint.h>

#ifdef __CUDACC__
#define SRPC_MIRROR_FN static __device__ __forceinline__
#else
#define SRPC_MIRROR_FN static inline
#endif

/* The pattern word at index i: for a fixed salt, distinct for every i below 2^32, so a
 * mapping shifted by any whole number of words is caught, as well as one that is not there. */
SRPC_MIRROR_FN uint32_t srpc_mirror_word(unsigned long long i, uint32_t salt)
{
    uint32_t x = (uint32_t)i ^ ((uint32_t)(i >> 32) * 0x85ebca6bu) ^ salt;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

#endif /* SRPC_MIRROR_WORD_H */
