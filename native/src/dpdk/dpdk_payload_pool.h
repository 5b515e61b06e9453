/* dpdk_payload_pool.h: the payload mempool of an RX buffer split, made from external memory: GPU memory (cuMemAlloc through the run-time driver loader) or page-aligned host memory, registered with DPDK (rte_extmem_register), DMA-mapped for the port's device (rte_dev_dma_map) and carved into pinned external mbufs (rte_pktmbuf_pool_create_extbuf). */
#ifndef SRPC_DPDK_PAYLOAD_POOL_H
#define SRPC_DPDK_PAYLOAD_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "splitrpc_dpdk.h" /* SRPC_DPDK_PAYLOAD_HOST, SRPC_DPDK_PAYLOAD_GPU */

struct rte_mempool;
typedef struct srpc_payload_pool srpc_payload_pool_t;

typedef struct srpc_payload_pool_config {
    const char *name;   /* the mempool's name (unique among live mempools, < RTE_MEMPOOL_NAMESIZE) */
    uint16_t port_id;   /* the ethdev port whose device the memory is DMA-mapped for */
    unsigned n;         /* mbufs (each with its own data buffer in the region) */
    uint16_t data_room; /* bytes of each data buffer, RTE_PKTMBUF_HEADROOM included */
    int socket;         /* NUMA socket of the mbuf headers (host memory from DPDK) */
    int on_gpu;         /* 1: the buffers in the memory of CUDA device gpu_device; 0: host memory */
    int gpu_device;
} srpc_payload_pool_config_t;

/* Makes the pool: (GPU) cuMemAlloc of the region plus one GPU page, the region aligned to the
 * GPU page (64 KiB), CU_POINTER_ATTRIBUTE_SYNC_MEMOPS set; (host) an anonymous mmap, locked
 * in memory with mlock where allowed (else left unlocked), not inherited by children. Then
 * rte_extmem_register(region, len, NULL, 0, page), rte_dev_dma_map on the port's device, and
 * rte_pktmbuf_pool_create_extbuf with one rte_pktmbuf_extmem descriptor covering the region.
 * The mbufs' IOVA is the virtual address where the EAL runs IOVA-as-VA; host memory under
 * IOVA-as-PA is refused (-ENOTSUP: its pages have no contiguous physical address), GPU memory
 * then gets RTE_BAD_IOVA (a NIC that maps GPU memory, mlx5, addresses it by virtual address).
 * The caller's EAL must be initialised; primary process only. Never exits, never touches the
 * GPU region from the CPU. Returns 0 with *out set, or -errno with nothing left behind:
 * -EINVAL (arguments), -ENODEV (no such port; GPU: no CUDA driver or no such device),
 * -ENOTSUP (see above; GPU: the driver lacks cuPointerSetAttribute or refuses the attribute),
 * -ENOMEM, or DPDK's -rte_errno (e.g. rte_dev_dma_map refusing the region; for host memory a
 * bus that maps nothing, ENOTSUP, is accepted: its devices reach host memory as it is). The
 * reason of the last failure on this thread: srpc_payload_pool_last_error(). */
int srpc_payload_pool_create(const srpc_payload_pool_config_t *cfg, srpc_payload_pool_t **out);
/* Undoes create in reverse order: the mempool freed, then rte_dev_dma_unmap,
 * rte_extmem_unregister, munlock/munmap or cuMemFree. NULL is fine. Every mbuf of the pool
 * must be back in it (the RX queue released first). */
void srpc_payload_pool_destroy(srpc_payload_pool_t *pp);

struct rte_mempool *srpc_payload_pool_mempool(const srpc_payload_pool_t *pp);
/* SRPC_DPDK_PAYLOAD_HOST or SRPC_DPDK_PAYLOAD_GPU. */
int srpc_payload_pool_kind(const srpc_payload_pool_t *pp);
/* The registered region: [base, base + len), page-aligned (a device address for GPU memory). */
void *srpc_payload_pool_base(const srpc_payload_pool_t *pp);
size_t srpc_payload_pool_len(const srpc_payload_pool_t *pp);
/* Host memory: 1 when mlock locked it. GPU memory: always 1 (device memory). */
int srpc_payload_pool_locked(const srpc_payload_pool_t *pp);
/* Why the last srpc_payload_pool_create of this thread failed ("" if none). */
const char *srpc_payload_pool_last_error(void);

#endif /* SRPC_DPDK_PAYLOAD_POOL_H */
