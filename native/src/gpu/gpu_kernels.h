/* gpu_kernels.h: the kernels of native/cuda/kernels.cu, embedded as a fatbin and loaded once per device. */
#ifndef SRPC_GPU_KERNELS_H
#define SRPC_GPU_KERNELS_H

#include <stddef.h>

#include "gpu/gpu_driver.h"

/* The fatbin, generated at build time by cmake/embed_file.cmake (kernels_none.c where the
 * build had no CUDA compiler: size 0). Aligned for cuModuleLoadData. */
extern const unsigned char srpc_kernels_fatbin[];
extern const size_t srpc_kernels_fatbin_size;

struct srpc_gpu_kernels {
    srpc_CUmodule mod;
    srpc_CUfunction mirror_fill;    /* srpc_mirror_fill(uint32_t *, u64 nwords, uint32_t salt) */
    srpc_CUfunction mirror_verify;  /* srpc_mirror_verify(const uint32_t *, u64, uint32_t, u64 *) */
    srpc_CUfunction o2_vecadd;      /* srpc_o2_vecadd(struct srpc_o2_ctrl *, uint32_t n_floats) */
    /* The embedding cache's (native/cuda/embed_cache.cuh), each taking one struct srpc_emb_kargs. */
    srpc_CUfunction emb_query, emb_replace, emb_update, emb_dump, emb_clear;
};

/* 0 when kernels are compiled in; else -ENOTSUP with the last error set. No driver call. */
int srpc_gpu_kernels_built(void);

/* The kernels on `device`, whose primary context the caller has made current: the module is
 * loaded and every function looked up on first use (so that nothing is loaded lazily later,
 * while a persistent kernel may be running), then kept for the life of the process.
 * 0, -ENOTSUP (no kernels compiled in, or none for this GPU) or a mapped CUDA error.
 * Any thread; *out is read-only and stays valid. */
int srpc_gpu_kernels(int device, const struct srpc_gpu_kernels **out);

#endif /* SRPC_GPU_KERNELS_H */
