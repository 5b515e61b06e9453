/* dpdk_payload_pool.c: the payload mempool of an RX buffer split from external memory, GPU (cuMemAlloc) or host (mmap), registered with DPDK and DMA-mapped for the port (see dpdk_payload_pool.h). Does not use DPDK's gpudev. */
#ifndef ALLOW_EXPERIMENTAL_API
#define ALLOW_EXPERIMENTAL_API /* rte_dev_dma_map, rte_pktmbuf_pool_create_extbuf (DPDK 22.11) */
#endif
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_memory.h>
#include <rte_mempool.h>

#include "dpdk/dpdk_payload_pool.h"
#include "gpu/gpu_driver.h"
#include "splitrpc_gpu.h" /* srpc_gpu_last_error */

#define GPU_PAGE ((size_t)1 << 16) /* GPUDirect RDMA maps GPU memory in 64 KiB pages */
#define POOL_CACHE 256

struct srpc_payload_pool {
    struct rte_mempool *mp;
    struct rte_device *dev; /* the device the region is DMA-mapped for (when mapped) */
    uint8_t *base;          /* the registered region: page-aligned, len bytes */
    size_t len;
    size_t page;            /* the page size it was registered with */
    rte_iova_t iova;        /* the region's IOVA (RTE_BAD_IOVA when unknown) */
    int kind;               /* SRPC_DPDK_PAYLOAD_HOST or _GPU */
    int device;             /* GPU: the CUDA device */
    srpc_CUdeviceptr gpu_alloc; /* GPU: what cuMemAlloc returned (base rounded up from it) */
    int registered, mapped, locked;
};

static _Thread_local char last_err[256];

static int failf(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failf(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_err, sizeof(last_err), fmt, ap);
    va_end(ap);
    return err;
}

const char *srpc_payload_pool_last_error(void)
{
    return last_err;
}

/* rte_errno as a -errno (DPDK's own codes above EOF mapped to -EIO). */
static int dpdk_err(void)
{
    int e = rte_errno;
    return e > 0 && e < RTE_MIN_ERRNO ? -e : -EIO;
}

/* The region in GPU memory: cuMemAlloc of one GPU page more than needed, so that a
 * 64 KiB-aligned region of len bytes fits in it; SYNC_MEMOPS set, as GPUDirect RDMA needs. */
static int gpu_region(srpc_payload_pool_t *pp, size_t bytes)
{
    int rc = srpc_gpu_use_device(pp->device);
    if (rc)
        return failf(rc, "payload pool in the memory of cuda:%d: %s", pp->device, srpc_gpu_last_error());
    if (!srpc_cu.PointerSetAttribute)
        return failf(-ENOTSUP, "payload pool in the memory of cuda:%d: the CUDA driver has no "
                     "cuPointerSetAttribute", pp->device);
    if (bytes > SIZE_MAX - 2 * GPU_PAGE)
        return failf(-EOVERFLOW, "payload pool of %zu bytes: too large", bytes);
    size_t len = (bytes + GPU_PAGE - 1) & ~(GPU_PAGE - 1);
    srpc_CUdeviceptr d = 0;
    srpc_CUresult r = srpc_cu.MemAlloc(&d, len + GPU_PAGE);
    if (r != SRPC_CUDA_SUCCESS) {
        rc = srpc_gpu_fail("cuMemAlloc", r);
        return failf(rc, "payload pool of %zu bytes in the memory of cuda:%d: %s", len, pp->device,
                     srpc_gpu_last_error());
    }
    pp->gpu_alloc = d;
    srpc_CUdeviceptr a = (d + GPU_PAGE - 1) & ~(srpc_CUdeviceptr)(GPU_PAGE - 1);
    unsigned one = 1;
    r = srpc_cu.PointerSetAttribute(&one, SRPC_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, a);
    if (r != SRPC_CUDA_SUCCESS) {
        rc = srpc_gpu_fail("cuPointerSetAttribute(SYNC_MEMOPS)", r);
        return failf(rc, "payload pool in the memory of cuda:%d: %s", pp->device, srpc_gpu_last_error());
    }
    pp->base = (uint8_t *)(uintptr_t)a;
    pp->len = len;
    pp->page = GPU_PAGE;
    return 0;
}

/* The region in host memory: whole pages of an anonymous mapping, populated, locked where the
 * memory lock limit allows (else left as it is: the port's DMA mapping pins what it needs),
 * and not inherited by child processes (a copy-on-write page under DMA would be wrong). */
static int host_region(srpc_payload_pool_t *pp, size_t bytes)
{
    long ps = sysconf(_SC_PAGESIZE);
    size_t page = ps > 0 ? (size_t)ps : 4096;
    if (bytes > SIZE_MAX - page)
        return failf(-EOVERFLOW, "payload pool of %zu bytes: too large", bytes);
    size_t len = (bytes + page - 1) / page * page;
    void *va = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (va == MAP_FAILED) {
        int e = errno;
        return failf(-e, "payload pool of %zu bytes in host memory: mmap: %s", len, strerror(e));
    }
    pp->base = va;
    pp->len = len;
    pp->page = page;
    (void)madvise(va, len, MADV_DONTFORK);
    pp->locked = mlock(va, len) == 0;
    return 0;
}

void srpc_payload_pool_destroy(srpc_payload_pool_t *pp)
{
    if (!pp)
        return;
    rte_mempool_free(pp->mp);
    if (pp->mapped && rte_dev_dma_unmap(pp->dev, pp->base, pp->iova, pp->len) < 0)
        failf(dpdk_err(), "payload pool %p: rte_dev_dma_unmap: %s", (void *)pp->base, rte_strerror(rte_errno));
    if (pp->registered && rte_extmem_unregister(pp->base, pp->len) != 0)
        failf(dpdk_err(), "payload pool %p: rte_extmem_unregister: %s", (void *)pp->base,
              rte_strerror(rte_errno));
    if (pp->kind == SRPC_DPDK_PAYLOAD_GPU) {
        if (pp->gpu_alloc) {
            srpc_gpu_use_device(pp->device); /* the context the memory belongs to */
            srpc_CUresult r = srpc_cu.MemFree(pp->gpu_alloc);
            if (r != SRPC_CUDA_SUCCESS)
                srpc_gpu_fail("cuMemFree", r);
        }
    } else if (pp->base) {
        if (pp->locked)
            munlock(pp->base, pp->len);
        munmap(pp->base, pp->len);
    }
    free(pp);
}

int srpc_payload_pool_create(const srpc_payload_pool_config_t *cfg, srpc_payload_pool_t **out)
{
    if (!out)
        return failf(-EINVAL, "srpc_payload_pool_create: NULL out");
    *out = NULL;
    if (!cfg || !cfg->name || !cfg->name[0] || strlen(cfg->name) >= RTE_MEMPOOL_NAMESIZE || cfg->n == 0 ||
        cfg->data_room <= RTE_PKTMBUF_HEADROOM || (cfg->on_gpu && cfg->gpu_device < 0))
        return failf(-EINVAL, "srpc_payload_pool_create: bad arguments (name, n %u, data room %u, device %d)",
                     cfg ? cfg->n : 0, cfg ? cfg->data_room : 0, cfg ? cfg->gpu_device : 0);
    if (!rte_eth_dev_is_valid_port(cfg->port_id))
        return failf(-ENODEV, "payload pool %s: no port %u", cfg->name, cfg->port_id);
    struct rte_eth_dev_info info;
    int rc = rte_eth_dev_info_get(cfg->port_id, &info);
    if (rc != 0)
        return failf(rc < 0 ? rc : -EIO, "payload pool %s: rte_eth_dev_info_get(%u): %s", cfg->name,
                     cfg->port_id, strerror(rc < 0 ? -rc : EIO));
    if (!info.device)
        return failf(-ENODEV, "payload pool %s: port %u has no device", cfg->name, cfg->port_id);
    const int va_mode = rte_eal_iova_mode() == RTE_IOVA_VA;
    if (!cfg->on_gpu && !va_mode)
        return failf(-ENOTSUP, "payload pool %s in host memory: the EAL runs IOVA as PA, and the pages of "
                     "an mmap have no contiguous physical address (--iova-mode=va lifts this)", cfg->name);
    /* Buffers at cache-line strides: elt_size is a uint16_t in rte_pktmbuf_extmem. */
    size_t elt = ((size_t)cfg->data_room + RTE_CACHE_LINE_SIZE - 1) & ~(size_t)(RTE_CACHE_LINE_SIZE - 1);
    if (elt > UINT16_MAX)
        return failf(-EINVAL, "payload pool %s: data room %u too large", cfg->name, cfg->data_room);

    srpc_payload_pool_t *pp = calloc(1, sizeof(*pp));
    if (!pp)
        return failf(-ENOMEM, "payload pool %s: out of memory", cfg->name);
    pp->kind = cfg->on_gpu ? SRPC_DPDK_PAYLOAD_GPU : SRPC_DPDK_PAYLOAD_HOST;
    pp->device = cfg->on_gpu ? cfg->gpu_device : -1;
    pp->iova = RTE_BAD_IOVA;
    const char *what = cfg->on_gpu ? "GPU" : "host";
    rc = cfg->on_gpu ? gpu_region(pp, (size_t)cfg->n * elt) : host_region(pp, (size_t)cfg->n * elt);
    if (rc)
        goto fail; /* the region's function said why */
    if (va_mode)
        pp->iova = (rte_iova_t)(uintptr_t)pp->base;

    if (rte_extmem_register(pp->base, pp->len, NULL, 0, pp->page) != 0) {
        rc = failf(dpdk_err(), "payload pool %s (%s memory, %zu bytes): rte_extmem_register: %s", cfg->name,
                   what, pp->len, rte_strerror(rte_errno));
        goto fail;
    }
    pp->registered = 1;
    if (rte_dev_dma_map(info.device, pp->base, pp->iova, pp->len) < 0) {
        /* ENOTSUP: the device's bus maps nothing (it reaches host memory as it is). GPU memory
         * that the device cannot map is of no use to it. */
        if (rte_errno != ENOTSUP || cfg->on_gpu) {
            rc = failf(dpdk_err(), "payload pool %s (%s memory, %zu bytes): rte_dev_dma_map for port %u: %s",
                       cfg->name, what, pp->len, cfg->port_id, rte_strerror(rte_errno));
            goto fail;
        }
    } else {
        pp->mapped = 1;
        pp->dev = info.device;
    }

    struct rte_pktmbuf_extmem ext = {
        .buf_ptr = pp->base, .buf_iova = pp->iova, .buf_len = pp->len, .elt_size = (uint16_t)elt};
    unsigned cache = cfg->n / 2 < POOL_CACHE ? cfg->n / 2 : POOL_CACHE; /* 1.5 x cache <= n */
    pp->mp = rte_pktmbuf_pool_create_extbuf(cfg->name, cfg->n, cache, 0, cfg->data_room, cfg->socket, &ext, 1);
    if (!pp->mp) {
        rc = failf(dpdk_err(), "payload pool %s (%s memory, %u mbufs): rte_pktmbuf_pool_create_extbuf: %s",
                   cfg->name, what, cfg->n, rte_strerror(rte_errno));
        goto fail;
    }
    last_err[0] = '\0';
    *out = pp;
    return 0;
fail:;
    char why[sizeof(last_err)];
    memcpy(why, last_err, sizeof(why)); /* destroy may write its own */
    srpc_payload_pool_destroy(pp);
    memcpy(last_err, why, sizeof(why));
    return rc;
}

struct rte_mempool *srpc_payload_pool_mempool(const srpc_payload_pool_t *pp)
{
    return pp->mp;
}

int srpc_payload_pool_kind(const srpc_payload_pool_t *pp)
{
    return pp->kind;
}

void *srpc_payload_pool_base(const srpc_payload_pool_t *pp)
{
    return pp->base;
}

size_t srpc_payload_pool_len(const srpc_payload_pool_t *pp)
{
    return pp->len;
}

int srpc_payload_pool_locked(const srpc_payload_pool_t *pp)
{
    return pp->kind == SRPC_DPDK_PAYLOAD_GPU ? 1 : pp->locked;
}
