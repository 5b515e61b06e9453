/* gpu_stream.c: pinned host memory, stream-ordered copies, completion flags and stream synchronisation on the CUDA driver. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/tunables.h"
#include "gpu/gpu_driver.h"
#include "splitrpc_gpu.h"

/* ------------------------------------------------------------------ pinned host memory */

int srpc_gpu_host_register(void *p, size_t len, uint64_t *dev)
{
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        page = 4096;
    if (!p || len == 0 || (uintptr_t)p % (uintptr_t)page)
        return srpc_gpu_failf(-EINVAL, "srpc_gpu_host_register: %p, %zu bytes (page-aligned, > 0)", p, len);
    int rc = srpc_gpu_use_any();
    if (rc)
        return rc;
    srpc_CUresult r = srpc_cu.MemHostRegister(p, len, SRPC_CU_MEMHOSTREGISTER_PORTABLE |
                                                          SRPC_CU_MEMHOSTREGISTER_DEVICEMAP);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuMemHostRegister", r);
    if (dev) {
        srpc_CUdeviceptr d = 0;
        if ((r = srpc_cu.MemHostGetDevicePointer(&d, p, 0)) != SRPC_CUDA_SUCCESS) {
            rc = srpc_gpu_fail("cuMemHostGetDevicePointer", r);
            srpc_cu.MemHostUnregister(p);
            return rc;
        }
        *dev = d;
    }
    srpc_gpu_held(SRPC_HELD_HOST_REGISTER, 1);
    return 0;
}

int srpc_gpu_host_unregister(void *p)
{
    if (!p)
        return srpc_gpu_failf(-EINVAL, "srpc_gpu_host_unregister: NULL");
    int rc = srpc_gpu_use_any();
    if (rc)
        return rc;
    srpc_CUresult r = srpc_cu.MemHostUnregister(p);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuMemHostUnregister", r);
    srpc_gpu_held(SRPC_HELD_HOST_REGISTER, -1);
    return 0;
}

int srpc_gpu_host_alloc(size_t len, void **host, uint64_t *dev)
{
    if (!host || len == 0)
        return srpc_gpu_failf(-EINVAL, "srpc_gpu_host_alloc: %zu bytes, host %p", len, (void *)host);
    *host = NULL;
    if (dev)
        *dev = 0;
    int rc = srpc_gpu_use_any();
    if (rc)
        return rc;
    void *p = NULL;
    srpc_CUresult r = srpc_cu.MemHostAlloc(&p, len, SRPC_CU_MEMHOSTALLOC_PORTABLE | SRPC_CU_MEMHOSTALLOC_DEVICEMAP);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuMemHostAlloc", r);
    srpc_CUdeviceptr d = 0;
    if ((r = srpc_cu.MemHostGetDevicePointer(&d, p, 0)) != SRPC_CUDA_SUCCESS) {
        rc = srpc_gpu_fail("cuMemHostGetDevicePointer", r);
        srpc_cu.MemFreeHost(p);
        return rc;
    }
    memset(p, 0, len);
    *host = p;
    if (dev)
        *dev = d;
    srpc_gpu_held(SRPC_HELD_HOST_ALLOC, 1);
    return 0;
}

void srpc_gpu_host_free(void *host)
{
    if (!host || srpc_gpu_use_any())
        return;
    srpc_CUresult r = srpc_cu.MemFreeHost(host);
    if (r != SRPC_CUDA_SUCCESS)
        srpc_gpu_fail("cuMemFreeHost", r);
    else
        srpc_gpu_held(SRPC_HELD_HOST_ALLOC, -1);
}

/* ------------------------------------------------------------------ copies */

int srpc_gpu_copy_htod(uint64_t dst, const void *src, size_t len, uint64_t stream)
{
    if (!dst || !src)
        return srpc_gpu_failf(-EINVAL, "srpc_gpu_copy_htod: NULL address");
    if (len == 0)
        return 0;
    int rc = srpc_gpu_use_any();
    if (rc)
        return rc;
    srpc_CUresult r = srpc_cu.MemcpyHtoDAsync(dst, src, len, srpc_gpu_stream(stream));
    return r == SRPC_CUDA_SUCCESS ? 0 : srpc_gpu_fail("cuMemcpyHtoDAsync", r);
}

int srpc_gpu_copy_dtoh(void *dst, uint64_t src, size_t len, uint64_t stream)
{
    if (!dst || !src)
        return srpc_gpu_failf(-EINVAL, "srpc_gpu_copy_dtoh: NULL address");
    if (len == 0)
        return 0;
    int rc = srpc_gpu_use_any();
    if (rc)
        return rc;
    srpc_CUresult r = srpc_cu.MemcpyDtoHAsync(dst, src, len, srpc_gpu_stream(stream));
    return r == SRPC_CUDA_SUCCESS ? 0 : srpc_gpu_fail("cuMemcpyDtoHAsync", r);
}

/* ------------------------------------------------------------------ completion flags */

/* A host function's record: made by srpc_gpu_signal, freed by the host function. */
struct flag_store {
    uint32_t *flag;
    uint32_t value;
};

static void store_flag(void *arg)
{
    struct flag_store *s = arg;
    __atomic_store_n(s->flag, s->value, __ATOMIC_RELEASE);
    free(s);
}

static int signal_by_host_func(srpc_CUstream s, uint32_t *flag, uint32_t value)
{
    struct flag_store *rec = malloc(sizeof(*rec));
    if (!rec)
        return srpc_gpu_failf(-ENOMEM, "srpc_gpu_signal: out of host memory");
    rec->flag = flag;
    rec->value = value;
    srpc_CUresult r = srpc_cu.LaunchHostFunc(s, store_flag, rec);
    if (r != SRPC_CUDA_SUCCESS) {
        free(rec);
        return srpc_gpu_fail("cuLaunchHostFunc", r);
    }
    return 0;
}

/* flag_dev == 0: always a host function (flag may then be any host memory). */
int srpc_gpu_signal(uint64_t stream, uint32_t *flag, uint64_t flag_dev, uint32_t value)
{
    if (!flag)
        return srpc_gpu_failf(-EINVAL, "srpc_gpu_signal: NULL flag");
    int rc = srpc_gpu_use_any();
    if (rc)
        return rc;
    srpc_CUstream s = srpc_gpu_stream(stream);
    if (flag_dev) {
        srpc_CUdevice dev = -1; /* the handle of a device is its ordinal */
        srpc_CUresult r = srpc_cu.CtxGetDevice(&dev);
        if (r != SRPC_CUDA_SUCCESS)
            return srpc_gpu_fail("cuCtxGetDevice", r);
        if (srpc_gpu_memops(dev)) {
            r = srpc_cu.StreamWriteValue32(s, flag_dev, value, SRPC_CU_STREAM_WRITE_VALUE_DEFAULT);
            if (r == SRPC_CUDA_SUCCESS)
                return 0;
            if (r != SRPC_CUDA_ERROR_NOT_SUPPORTED)
                return srpc_gpu_fail("cuStreamWriteValue32", r);
            srpc_gpu_memops_off(dev); /* and use the host function from now on */
        }
    }
    return signal_by_host_func(s, flag, value);
}

int srpc_gpu_copy_dtod(uint64_t dst, uint64_t src, size_t len, uint64_t stream)
{
    if (!dst || !src)
        return srpc_gpu_failf(-EINVAL, "srpc_gpu_copy_dtod: NULL address");
    if (len == 0)
        return 0;
    int rc = srpc_gpu_use_any();
    if (rc)
        return rc;
    srpc_CUresult r = srpc_cu.MemcpyDtoDAsync(dst, src, len, srpc_gpu_stream(stream));
    return r == SRPC_CUDA_SUCCESS ? 0 : srpc_gpu_fail("cuMemcpyDtoDAsync", r);
}

int srpc_gpu_stream_create(int device, uint64_t *out)
{
    if (!out)
        return srpc_gpu_failf(-EINVAL, "srpc_gpu_stream_create: NULL out");
    *out = 0;
    int rc = srpc_gpu_use_device(device);
    if (rc)
        return rc;
    srpc_CUstream s = NULL;
    srpc_CUresult r = srpc_cu.StreamCreate(&s, SRPC_CU_STREAM_NON_BLOCKING);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuStreamCreate", r);
    *out = (uint64_t)(uintptr_t)s;
    srpc_gpu_held(SRPC_HELD_STREAM, 1);
    return 0;
}

void srpc_gpu_stream_destroy(uint64_t stream)
{
    if (stream && srpc_gpu_use_any() == 0 && srpc_cu.StreamDestroy(srpc_gpu_stream(stream)) == SRPC_CUDA_SUCCESS)
        srpc_gpu_held(SRPC_HELD_STREAM, -1);
}

int srpc_gpu_wait_stream(srpc_CUstream s, const char *what, int keep_waiting)
{
    /* cuStreamQuery in a loop rather than cuStreamSynchronize, which has no deadline: it polls
     * without sleeping for SRPC_GPU_WAIT_SPIN_NS (cuStreamSynchronize's default scheduling spins
     * too), then sleeps a little more each time, up to 1 ms. */
    uint64_t t0 = 0;
    unsigned pause_us = 1;
    int said = 0;
    srpc_CUresult r;
    while ((r = srpc_cu.StreamQuery(s)) == SRPC_CUDA_ERROR_NOT_READY) {
        const uint64_t now = srpc_now_ns();
        if (!t0) {
            t0 = now;
            continue;
        }
        if (!said && now - t0 >= (uint64_t)SRPC_GPU_WAIT_TIMEOUT_MS * 1000000u) {
            int rc = srpc_gpu_failf(-ETIMEDOUT,
                                    "waiting for %s on CUDA stream %p: not completed after %u ms (a kernel that "
                                    "does not return, or a wait on work that never comes)",
                                    what, (void *)s, (unsigned)((now - t0) / 1000000u));
            if (!keep_waiting)
                return rc;
            /* Memory that the queued work still targets cannot be handed back: say so, and wait. */
            fprintf(stderr, "splitrpc: %s; still waiting (the memory it targets is not reused before it ends)\n",
                    srpc_gpu_last_error());
            said = 1;
        }
        if (now - t0 >= SRPC_GPU_WAIT_SPIN_NS) {
            usleep(pause_us);
            if (pause_us < 1000)
                pause_us *= 2;
        }
    }
    if (r == SRPC_CUDA_SUCCESS)
        return 0;
    char call[96];
    snprintf(call, sizeof(call), "cuStreamQuery (waiting for %s)", what);
    return srpc_gpu_fail(call, r);
}

int srpc_gpu_stream_sync(uint64_t stream)
{
    int rc = srpc_gpu_use_any();
    return rc ? rc : srpc_gpu_wait_stream(srpc_gpu_stream(stream), "the stream's work", 0);
}

int srpc_gpu_stream_drain(uint64_t stream)
{
    int rc = srpc_gpu_use_any();
    return rc ? rc : srpc_gpu_wait_stream(srpc_gpu_stream(stream), "the stream's copies", 1);
}
