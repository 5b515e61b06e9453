/* device_tq.c: device Tensor Queue, a ring of fixed-size elements in GPU memory mapped twice back to back with CUDA virtual memory management. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "gpu/gpu_driver.h"
#include "core/ring.h"
#include "splitrpc_gpu.h"

struct srpc_dtq {
    srpc_CUdeviceptr base;                   /* lower mapping; the upper one at base + ring_bytes */
    srpc_CUmemGenericAllocationHandle mem;   /* the one physical allocation, ring_bytes long */
    size_t ring_bytes;                       /* elem_size * capacity rounded up to the granularity */
    size_t elem_size;
    uint32_t capacity;
    int device;
};

static void device_prop(int device, srpc_CUmemAllocationProp *prop)
{
    *prop = (srpc_CUmemAllocationProp){0};
    prop->type = SRPC_CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->requestedHandleTypes = SRPC_CU_MEM_HANDLE_TYPE_NONE;
    prop->location.type = SRPC_CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = device;
}

/* The granularity of `device`, whose primary context the caller made current. */
static int granularity(int device, size_t *out)
{
    srpc_CUdevice dev;
    int vmm = 0;
    srpc_CUresult r = srpc_cu.DeviceGet(&dev, device);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuDeviceGet", r);
    r = srpc_cu.DeviceGetAttribute(&vmm, SRPC_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)", r);
    if (!vmm)
        return srpc_gpu_failf(-ENOTSUP, "CUDA device %d: no virtual memory management", device);
    srpc_CUmemAllocationProp prop;
    device_prop(device, &prop);
    size_t g = 0;
    r = srpc_cu.MemGetAllocationGranularity(&g, &prop, SRPC_CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuMemGetAllocationGranularity", r);
    if (g == 0)
        return srpc_gpu_failf(-EIO, "cuMemGetAllocationGranularity: 0");
    *out = g;
    return 0;
}

int srpc_gpu_granularity(int device, size_t *out)
{
    if (!out)
        return srpc_gpu_failf(-EINVAL, "srpc_gpu_granularity: NULL out");
    int rc = srpc_gpu_use_device(device);
    return rc ? rc : granularity(device, out);
}

/* Maps q->mem twice into a fresh reservation of 2 * ring_bytes and opens it read/write to
 * the device. On failure nothing of the reservation is left and q->base is 0. */
static int map_twice(srpc_dtq_t *q)
{
    size_t span = 2 * q->ring_bytes;
    srpc_CUdeviceptr base = 0;
    srpc_CUresult r = srpc_cu.MemAddressReserve(&base, span, 0, 0, 0);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuMemAddressReserve", r);

    int rc = 0;
    int mapped = 0;
    for (; mapped < 2; mapped++) {
        r = srpc_cu.MemMap(base + (srpc_CUdeviceptr)mapped * q->ring_bytes, q->ring_bytes, 0, q->mem, 0);
        if (r != SRPC_CUDA_SUCCESS) {
            rc = srpc_gpu_fail("cuMemMap", r);
            break;
        }
    }
    if (rc == 0) {
        srpc_CUmemAccessDesc access = {{SRPC_CU_MEM_LOCATION_TYPE_DEVICE, q->device},
                                       SRPC_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        r = srpc_cu.MemSetAccess(base, span, &access, 1);
        if (r != SRPC_CUDA_SUCCESS)
            rc = srpc_gpu_fail("cuMemSetAccess", r);
    }
    if (rc) {
        while (mapped-- > 0)
            srpc_cu.MemUnmap(base + (srpc_CUdeviceptr)mapped * q->ring_bytes, q->ring_bytes);
        srpc_cu.MemAddressFree(base, span);
        return rc;
    }
    q->base = base;
    return 0;
}

int srpc_dtq_create(int device, size_t elem_size, uint32_t capacity, srpc_dtq_t **out)
{
    if (!out)
        return srpc_gpu_failf(-EINVAL, "srpc_dtq_create: NULL out");
    *out = NULL;
    if (elem_size == 0 || capacity == 0 || device < 0)
        return srpc_gpu_failf(-EINVAL, "srpc_dtq_create: elem_size %zu, capacity %u, device %d",
                              elem_size, capacity, device);
    int rc = srpc_gpu_use_device(device);
    if (rc)
        return rc;
    size_t gran;
    if ((rc = granularity(device, &gran)))
        return rc;

    size_t bytes;
    if (__builtin_mul_overflow(elem_size, (size_t)capacity, &bytes) || bytes > SIZE_MAX - (gran - 1))
        return srpc_gpu_failf(-EOVERFLOW, "srpc_dtq_create: %zu x %u bytes overflow", elem_size, capacity);
    size_t ring_bytes = (bytes + gran - 1) / gran * gran;
    if (ring_bytes > SIZE_MAX / 2)
        return srpc_gpu_failf(-EOVERFLOW, "srpc_dtq_create: ring of %zu bytes too large", ring_bytes);

    srpc_dtq_t *q = calloc(1, sizeof(*q));
    if (!q)
        return srpc_gpu_failf(-ENOMEM, "srpc_dtq_create: out of host memory");
    q->ring_bytes = ring_bytes;
    q->elem_size = elem_size;
    q->capacity = capacity;
    q->device = device;

    srpc_CUmemAllocationProp prop;
    device_prop(device, &prop);
    srpc_CUresult r = srpc_cu.MemCreate(&q->mem, ring_bytes, &prop, 0);
    if (r != SRPC_CUDA_SUCCESS) {
        rc = srpc_gpu_fail("cuMemCreate", r);
        free(q);
        return rc;
    }
    if ((rc = map_twice(q))) {
        srpc_cu.MemRelease(q->mem);
        free(q);
        return rc;
    }
    srpc_gpu_held(SRPC_HELD_DTQ, 1);
    *out = q;
    return 0;
}

void srpc_dtq_destroy(srpc_dtq_t *q)
{
    if (!q)
        return;
    /* The context was current when q was made; make it current again for the calls below
     * (on failure they are tried anyway: the driver reports, nothing else can be done). */
    srpc_gpu_use_device(q->device);
    srpc_CUresult r;
    for (int half = 1; half >= 0; half--) {
        r = srpc_cu.MemUnmap(q->base + (srpc_CUdeviceptr)half * q->ring_bytes, q->ring_bytes);
        if (r != SRPC_CUDA_SUCCESS)
            srpc_gpu_fail("cuMemUnmap", r);
    }
    if ((r = srpc_cu.MemAddressFree(q->base, 2 * q->ring_bytes)) != SRPC_CUDA_SUCCESS)
        srpc_gpu_fail("cuMemAddressFree", r);
    if ((r = srpc_cu.MemRelease(q->mem)) != SRPC_CUDA_SUCCESS)
        srpc_gpu_fail("cuMemRelease", r);
    srpc_gpu_held(SRPC_HELD_DTQ, -1);
    free(q);
}

uint64_t srpc_dtq_base(const srpc_dtq_t *q)
{
    return q->base;
}

uint64_t srpc_dtq_elem(const srpc_dtq_t *q, uint64_t seq)
{
    return q->base + srpc_ring_offset(seq, q->elem_size, q->ring_bytes);
}

size_t srpc_dtq_ring_bytes(const srpc_dtq_t *q)
{
    return q->ring_bytes;
}

size_t srpc_dtq_elem_size(const srpc_dtq_t *q)
{
    return q->elem_size;
}

uint32_t srpc_dtq_capacity(const srpc_dtq_t *q)
{
    return q->capacity;
}

int srpc_dtq_device(const srpc_dtq_t *q)
{
    return q->device;
}
