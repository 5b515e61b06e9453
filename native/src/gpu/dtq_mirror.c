/* dtq_mirror.c: srpc_dtq_check_mirror, the GPU self-test of a device Tensor Queue's double mapping. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include "gpu/gpu_driver.h"
#include "gpu/gpu_kernels.h"
#include "splitrpc_gpu.h"

#define MIRROR_THREADS 256
#define MIRROR_MAX_BLOCKS 1024

/* Per device, made on first use and kept: a mismatch counter in device memory and a
 * non-blocking stream. One check at a time per process (check_lock), so they are shared. */
static struct {
    srpc_CUdeviceptr counter;
    srpc_CUstream stream;
} aux[SRPC_GPU_MAX_DEVICES];
static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t checks; /* salts differ from one check to the next; under check_lock */

static int make_aux(int device)
{
    srpc_CUresult r;
    if (!aux[device].counter && (r = srpc_cu.MemAlloc(&aux[device].counter, sizeof(uint64_t))))
        return srpc_gpu_fail("cuMemAlloc", r);
    if (!aux[device].stream && (r = srpc_cu.StreamCreate(&aux[device].stream, SRPC_CU_STREAM_NON_BLOCKING)))
        return srpc_gpu_fail("cuStreamCreate", r);
    return 0;
}

/* Fills [wr, wr + ring) with the pattern, then counts the words of [rd, rd + ring) that
 * differ, on the check stream. Returns 0 with *bad set, or an error. */
static int one_way(const struct srpc_gpu_kernels *k, int device, srpc_CUdeviceptr wr,
                   srpc_CUdeviceptr rd, size_t ring, uint32_t salt, uint64_t *bad)
{
    srpc_CUstream s = aux[device].stream;
    srpc_CUdeviceptr counter = aux[device].counter;
    unsigned long long nwords = ring / 4;
    unsigned long long want = (nwords + MIRROR_THREADS - 1) / MIRROR_THREADS;
    unsigned blocks = want < MIRROR_MAX_BLOCKS ? (unsigned)want : MIRROR_MAX_BLOCKS;
    uint64_t zero = 0;

    srpc_CUresult r = srpc_cu.MemcpyHtoDAsync(counter, &zero, sizeof(zero), s);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuMemcpyHtoDAsync", r);
    void *fill_args[] = {&wr, &nwords, &salt};
    r = srpc_cu.LaunchKernel(k->mirror_fill, blocks, 1, 1, MIRROR_THREADS, 1, 1, 0, s, fill_args, NULL);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuLaunchKernel(srpc_mirror_fill)", r);
    void *verify_args[] = {&rd, &nwords, &salt, &counter};
    r = srpc_cu.LaunchKernel(k->mirror_verify, blocks, 1, 1, MIRROR_THREADS, 1, 1, 0, s, verify_args, NULL);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuLaunchKernel(srpc_mirror_verify)", r);
    /* The kernels first, with a deadline: a copy to pageable memory returns only once it is
     * done, and would wait for ever behind kernels that never end. Then the count, to pageable
     * memory (complete when the call returns); the last wait reports any fault of the copy. */
    int rc = srpc_gpu_wait_stream(s, "the mirror self-test's kernels", 0); /* the counter stays allocated */
    if (rc)
        return rc;
    if ((r = srpc_cu.MemcpyDtoHAsync(bad, counter, sizeof(*bad), s)) != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuMemcpyDtoHAsync", r);
    return srpc_gpu_wait_stream(s, "the mirror self-test's count", 1); /* *bad is the caller's stack */
}

/* Overwrites the whole ring: the queue's contents are lost. */
int srpc_dtq_check_mirror(srpc_dtq_t *q)
{
    if (!q)
        return srpc_gpu_failf(-EINVAL, "srpc_dtq_check_mirror: NULL queue");
    int rc = srpc_gpu_kernels_built();
    if (rc)
        return rc;
    int device = srpc_dtq_device(q);
    if ((rc = srpc_gpu_use_device(device)))
        return rc;
    const struct srpc_gpu_kernels *k;
    if ((rc = srpc_gpu_kernels(device, &k)))
        return rc;

    srpc_CUdeviceptr lower = srpc_dtq_base(q);
    size_t ring = srpc_dtq_ring_bytes(q);
    srpc_CUdeviceptr upper = lower + ring;

    pthread_mutex_lock(&check_lock);
    rc = make_aux(device);
    uint32_t salt = 0x9e3779b9u * ++checks;
    uint64_t bad_up = 0, bad_down = 0;
    if (rc == 0)
        rc = one_way(k, device, upper, lower, ring, salt, &bad_up);
    if (rc == 0)
        rc = one_way(k, device, lower, upper, ring, ~salt, &bad_down);
    pthread_mutex_unlock(&check_lock);
    if (rc)
        return rc;
    if (bad_up || bad_down)
        return srpc_gpu_failf(-EIO,
                              "device TQ mirror check: %llu of %zu words differ written above/read below, "
                              "%llu written below/read above",
                              (unsigned long long)bad_up, ring / 4, (unsigned long long)bad_down);
    return 0;
}
