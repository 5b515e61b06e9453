/* kernels.cu: the GPU kernels of splitrpc, built into a fatbin and loaded with the driver API: the device Tensor Queue mirror self-test, the O2 persistent vecadd server and the embedding cache (embed_cache.cuh). */
#include <stdint.h>

#include "gpu/mirror_word.h"
#include "gpu/o2_abi.h"

/* ------------------------------------------------------------------ mirror self-test */

/* Writes the pattern into dst[0, nwords). Grid-stride. */
extern "C" __global__ void srpc_mirror_fill(uint32_t *dst, unsigned long long nwords, uint32_t salt)
{
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < nwords;
         i += stride)
        dst[i] = srpc_mirror_word(i, salt);
}

/* Counts the words of src[0, nwords) that differ from the pattern into *mismatches. Reads
 * through L2 only (__ldcg): the words were written through the other mapping. */
extern "C" __global__ void srpc_mirror_verify(const uint32_t *src, unsigned long long nwords, uint32_t salt,
                                              unsigned long long *mismatches)
{
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long bad = 0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < nwords;
         i += stride)
        bad += __ldcg(src + i) != srpc_mirror_word(i, salt);
    if (bad)
        atomicAdd(mismatches, bad);
}

/* ------------------------------------------------------------------ O2 persistent vecadd */

/* y = x + 1 over total floats by the threads of one block. Loads go through L2 only
 * (__ldcg): the persistent block reads the same ring addresses again after every wrap, and a
 * line left in its L1 from an earlier batch would be stale. */
static __device__ __forceinline__ void vecadd_block(const float *in, float *out, unsigned long long total)
{
    if ((((uintptr_t)in | (uintptr_t)out) & 15u) == 0 && (total & 3u) == 0) {
        const float4 *in4 = (const float4 *)in;
        float4 *out4 = (float4 *)out;
        for (unsigned long long i = threadIdx.x; i < total / 4; i += blockDim.x) {
            float4 v = __ldcg(in4 + i);
            out4[i] = make_float4(v.x + 1.0f, v.y + 1.0f, v.z + 1.0f, v.w + 1.0f);
        }
    } else {
        for (unsigned long long i = threadIdx.x; i < total; i += blockDim.x)
            out[i] = __ldcg(in + i) + 1.0f;
    }
}

/* One block of SRPC_O2_THREADS threads, launched once. Batch s is served when its slot's
 * doorbell reads s + 1; batches are served in order. Thread 0 polls (volatile loads of the
 * mapped control block, __nanosleep between polls), then reads the descriptor after a
 * system fence (the doorbell write of cuStreamWriteValue32 comes after the host wrote the
 * descriptor and after the batch's input copy). After computing, every thread fences its
 * outputs system-wide, the block synchronises, and thread 0 sets the done flag, fences, and
 * publishes the consumed count. The kernel returns once stop is set and all stop_seq
 * submitted batches are served. */
extern "C" __global__ void __launch_bounds__(SRPC_O2_THREADS)
srpc_o2_vecadd(struct srpc_o2_ctrl *ctrl, uint32_t n_floats)
{
    __shared__ const float *s_in;
    __shared__ float *s_out, *s_out_rest;
    __shared__ uint32_t *s_done;
    __shared__ uint32_t s_done_value;
    __shared__ unsigned long long s_first, s_total; /* floats */
    __shared__ int s_exit;

    volatile struct srpc_o2_ctrl *vc = ctrl;
    for (uint32_t seq = 0;; seq++) {
        if (threadIdx.x == 0) {
            volatile struct srpc_o2_slot *slot = &vc->slot[seq % SRPC_O2_SLOTS];
            unsigned sleep_ns = 32;
            int exit_now = 0;
            while (slot->ready != seq + 1) {
                if (vc->stop) {
                    __threadfence_system(); /* stop_seq was written before stop */
                    if (vc->stop_seq == seq) {
                        exit_now = 1;
                        break;
                    }
                }
                __nanosleep(sleep_ns);
                if (sleep_ns < 1024)
                    sleep_ns *= 2;
            }
            if (!exit_now) {
                __threadfence_system(); /* the descriptor is read after its doorbell */
                s_in = (const float *)(uintptr_t)slot->in;
                s_out = (float *)(uintptr_t)slot->out;
                s_out_rest = (float *)(uintptr_t)slot->out_rest;
                s_done = (uint32_t *)(uintptr_t)slot->done;
                s_done_value = slot->done_value;
                s_first = slot->out_floats;
                s_total = (unsigned long long)slot->count * n_floats;
            }
            s_exit = exit_now;
        }
        __syncthreads();
        if (s_exit)
            return;
        vecadd_block(s_in, s_out, s_first);
        if (s_total > s_first)
            vecadd_block(s_in + s_first, s_out_rest, s_total - s_first);
        __threadfence_system(); /* this thread's outputs are visible to the host and the GPU */
        __syncthreads();        /* ... for every thread, before the batch is declared done */
        if (threadIdx.x == 0) {
            *(volatile uint32_t *)s_done = s_done_value;
            __threadfence_system();
            vc->consumed = seq + 1;
        }
    }
}

/* ------------------------------------------------------------------ the embedding cache (HPS's L1) */

#include "embed_cache.cuh"
