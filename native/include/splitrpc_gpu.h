/* splitrpc_gpu.h: the GPU half of the flat C API: the CUDA driver loaded at run time, device Tensor Queues, pinned staging, stream-ordered copies and completion flags. */
#ifndef SPLITRPC_GPU_H
#define SPLITRPC_GPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library never links against CUDA: libcuda.so.1 is opened with dlopen on first use, so
 * the package builds, imports and serves on the CPU where there is no driver or no GPU. Every
 * function below returns 0 (or a count) or -errno; where the driver or the device is missing
 * they return -ENODEV, and srpc_gpu_last_error() says why. Device addresses (CUdeviceptr) and
 * streams (CUstream, e.g. CuPy's stream.ptr or torch's cuda_stream; 0 = the legacy default
 * stream) travel as uint64_t. Every function is thread-safe. One that names a device makes
 * that device's primary context (the one CuPy and PyTorch use; retained once, never released)
 * current on the calling thread; one that does not (pinned memory, copies, signal, sync) keeps
 * the thread's current context, or uses the last device initialised.
 * CUDA errors map to: INVALID_VALUE/HANDLE -EINVAL; OUT_OF_MEMORY -ENOMEM; no driver, no
 * device, driver mismatch -ENODEV; NOT_SUPPORTED, NO_BINARY_FOR_GPU -ENOTSUP; host memory
 * already registered -EEXIST, not registered -ENOENT; anything else -EIO. The last error is
 * kept per thread until the next failure. */

/* Loads the driver (once per process) and checks that device ordinal `device` exists.
 * Returns 0, -ENODEV (no libcuda, cuInit failed, no such device) or -EINVAL (device < 0). */
int srpc_gpu_init(int device);
/* Number of CUDA devices (0 when the driver loads but sees none), or -ENODEV. */
int srpc_gpu_device_count(void);
/* Text of the last failure on this thread (library not found, CUDA error name and the call
 * that returned it); "" when none. Valid until the thread's next GPU call. */
const char *srpc_gpu_last_error(void);
/* The device's name (e.g. "NVIDIA H200") into out (cap bytes, NUL-terminated). */
int srpc_gpu_device_name(int device, char *out, size_t cap);
/* The allocation granularity of the device's virtual memory management (cuMemCreate's
 * minimum): the ring of a device Tensor Queue is a multiple of it. */
int srpc_gpu_granularity(int device, size_t *out);

/* ------------------------------------------------------------------ what a device offers */

#define SRPC_GPU_NAME_LEN 256

/* Facts of one device, for `splitrpc check` and for logs (nothing on the data path reads them).
 * A capability that this driver cannot report reads -1; a size it cannot report reads 0. */
typedef struct srpc_gpu_info {
    char name[SRPC_GPU_NAME_LEN]; /* e.g. "NVIDIA H100 80GB HBM3" */
    int driver_version;           /* cuDriverGetVersion: 1000 * major + 10 * minor (13000: 13.0) */
    int cc_major, cc_minor;       /* compute capability */
    int multiprocessors;
    uint64_t total_memory;        /* bytes */
    int vmm;                      /* virtual memory management: device Tensor Queues need it */
    uint64_t granularity;         /* VMM allocation granularity in bytes (0 without VMM) */
    int map_host_memory;          /* pinned host memory mapped for the device */
    int unified_addressing;
    int host_register;            /* cuMemHostRegister of existing host memory */
    int stream_memops;            /* cuStreamWriteValue32 in use for completion flags (0: host functions) */
    int memops_v2;                /* the driver has the v2 stream memory operations */
    int gpudirect_rdma;           /* GPUDirect RDMA (a NIC writing device memory) */
    int pci_domain, pci_bus, pci_device;
} srpc_gpu_info_t;

/* Fills *out for device ordinal `device`. 0, -EINVAL (NULL out, device < 0), -ENODEV or a
 * mapped CUDA error when the name, driver version or compute capability cannot be read. */
int srpc_gpu_device_info(int device, srpc_gpu_info_t *out);
/* Free and total memory of `device` now (cuMemGetInfo); -ENOTSUP where the driver lacks it. */
int srpc_gpu_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes);
/* What this process holds of the driver through the library now: device Tensor Queues, pinned
 * allocations (srpc_gpu_host_alloc), host registrations, streams (srpc_gpu_stream_create) and
 * O2 kernels, each counted when taken and when given back. All zero once everything made has
 * been destroyed: a leak check that needs no help from the driver. Any thread. */
typedef struct srpc_gpu_live {
    int dtqs;
    int host_allocs;
    int host_registrations;
    int streams;
    int o2_kernels;
} srpc_gpu_live_t;
void srpc_gpu_live(srpc_gpu_live_t *out);
/* The architectures the embedded kernels were compiled for, e.g. "sm_80 sm_90 compute_90"
 * (sm_N: machine code, compute_N: PTX the driver compiles for newer GPUs); "" when the build
 * had no CUDA compiler. Static storage; no driver call. */
const char *srpc_gpu_kernel_archs(void);

/* ------------------------------------------------------------------ device tensor queue */

/* A ring of `capacity` elements of `elem_size` bytes in GPU memory: one physical allocation
 * (cuMemCreate) of ring_bytes = elem_size * capacity rounded up to the granularity, mapped
 * twice back to back into a reserved range of 2 * ring_bytes (cuMemAddressReserve, cuMemMap
 * twice, cuMemSetAccess read/write for the device), so that any run of <= capacity
 * consecutive elements is contiguous, wrapping or not. Element seq sits at
 * base + (seq * elem_size) mod ring_bytes, as in the host TQ. Owned by its creator;
 * create and destroy from any thread; nothing inside is locked. */
typedef struct srpc_dtq srpc_dtq_t;

int srpc_dtq_create(int device, size_t elem_size, uint32_t capacity, srpc_dtq_t **out);
void srpc_dtq_destroy(srpc_dtq_t *q); /* unmaps, releases; NULL is fine */
uint64_t srpc_dtq_base(const srpc_dtq_t *q);              /* device address, lower mapping */
uint64_t srpc_dtq_elem(const srpc_dtq_t *q, uint64_t seq); /* device address of element seq */
size_t srpc_dtq_ring_bytes(const srpc_dtq_t *q);
size_t srpc_dtq_elem_size(const srpc_dtq_t *q);
uint32_t srpc_dtq_capacity(const srpc_dtq_t *q);
int srpc_dtq_device(const srpc_dtq_t *q);

/* GPU self-test of the double mapping: a kernel writes a pattern through the upper mapping
 * (base + ring_bytes + i) and a second kernel reads it back through the lower one (base + i),
 * and the same the other way round. Returns 0 when every byte matched, -EIO when one did not,
 * -ENOTSUP when the library was built without nvcc (no kernels), -ENODEV without a GPU. */
int srpc_dtq_check_mirror(srpc_dtq_t *q);

/* ------------------------------------------------------------------ pinned host memory */

/* Page-locks [p, p + len) (page-aligned) and maps it for every device (cuMemHostRegister with
 * PORTABLE | DEVICEMAP); *dev (may be NULL) gets its device address. */
int srpc_gpu_host_register(void *p, size_t len, uint64_t *dev);
int srpc_gpu_host_unregister(void *p);
/* Allocates len bytes of pinned, device-mapped host memory (cuMemHostAlloc PORTABLE |
 * DEVICEMAP), zeroed; *dev gets its device address. */
int srpc_gpu_host_alloc(size_t len, void **host, uint64_t *dev);
void srpc_gpu_host_free(void *host);

/* ------------------------------------------------------------------ stream-ordered work */

/* Asynchronous copies on `stream` (cuMemcpyHtoDAsync / cuMemcpyDtoHAsync / cuMemcpyDtoDAsync):
 * queued, not done, at return; the host memory must stay valid until the stream reaches them. */
int srpc_gpu_copy_htod(uint64_t dst, const void *src, size_t len, uint64_t stream);
int srpc_gpu_copy_dtoh(void *dst, uint64_t src, size_t len, uint64_t stream);
int srpc_gpu_copy_dtod(uint64_t dst, uint64_t src, size_t len, uint64_t stream);
/* A non-blocking stream of device `device` (cuStreamCreate) for the caller to own; destroy it
 * with srpc_gpu_stream_destroy (0 is fine). */
int srpc_gpu_stream_create(int device, uint64_t *out);
void srpc_gpu_stream_destroy(uint64_t stream);
/* Makes *flag become `value` once all work queued on `stream` before this call is done:
 * cuStreamWriteValue32 to flag_dev (the device address of flag, which lives in memory from
 * srpc_gpu_host_alloc) where the device supports stream memory operations, else a host
 * function (cuLaunchHostFunc) that stores the value with release order. Readers load *flag
 * with acquire order. flag_dev == 0: always the host function (flag may be ordinary memory). */
int srpc_gpu_signal(uint64_t stream, uint32_t *flag, uint64_t flag_dev, uint32_t value);
/* Waits until `stream` has finished its work, SRPC_GPU_WAIT_TIMEOUT_MS (tunables.h) at most:
 * then -ETIMEDOUT, the last error naming the stream and the wait (the work may still run: memory
 * it targets must not be freed). Any thread. */
int srpc_gpu_stream_sync(uint64_t stream);
/* The same wait where the caller hands back, after it, memory the stream's copies target (ring
 * slots, receive buffers): past SRPC_GPU_WAIT_TIMEOUT_MS it says so on stderr once and waits on,
 * since a late copy into reused memory would corrupt another call. Any thread. */
int srpc_gpu_stream_drain(uint64_t stream);

/* ------------------------------------------------------------------ O2 orchestration */

/* GPU-managed orchestration (SplitRPC §3.2, O2) for the vecadd service: one persistent kernel,
 * launched once on a stream of its own, polls a doorbell in pinned mapped host memory and
 * serves batches of float32 vectors of n_floats elements, y = x + 1, with no kernel launch per
 * batch. Batches are served in submission order from a ring of SRPC_O2_SLOTS descriptors. */
#define SRPC_O2_SLOTS 64
typedef struct srpc_o2 srpc_o2_t;

/* Launches the kernel on `device`. -ENOTSUP without kernels (built without nvcc) or without
 * stream memory operations, -ENODEV without a GPU. While it runs, anything that waits for the
 * whole device (cuCtxSynchronize, torch.cuda.synchronize, cuMemFree) waits for it: allocate
 * queues before start and free them after stop. */
int srpc_o2_start(int device, uint32_t n_floats, srpc_o2_t **out);
/* One batch for the kernel: `count` vectors at device address `in` (contiguous), outputs to
 * device-accessible memory (device memory, or mapped pinned host memory such as a registered
 * staging TQ): the first out_floats floats at `out`, the others at `out_rest` (an output ring
 * that wraps; out_floats 0 means all at `out`). When the outputs are written and visible to the host
 * (__threadfence_system), the kernel sets *done (mapped host memory, device address
 * done_dev, or 0 to look it up) to done_value. */
typedef struct srpc_o2_batch {
    uint64_t in;
    uint64_t out;
    uint64_t out_rest;
    uint32_t count;
    uint32_t out_floats;
    uint32_t *done;
    uint64_t done_dev;
    uint32_t done_value;
} srpc_o2_batch_t;
/* Hands one batch to the kernel. The doorbell is rung on `stream` with cuStreamWriteValue32
 * after the work already queued there (the batch's host-to-device copy), so the kernel never
 * reads a batch before its data has arrived. Clears *done first. -EINVAL for a NULL address,
 * count 0, or out_floats above count * n_floats; -EBUSY when SRPC_O2_SLOTS batches are outstanding. One
 * submitting thread at a time. */
int srpc_o2_submit(srpc_o2_t *o, const srpc_o2_batch_t *batch, uint64_t stream);
/* The float32 elements per vector the kernel was started for (0 for NULL). Any thread. */
uint32_t srpc_o2_vector_floats(const srpc_o2_t *o);
/* Serves what was submitted, tells the kernel to finish, waits for it and frees everything
 * (NULL is fine). Not concurrently with a submit. Waits SRPC_GPU_WAIT_TIMEOUT_MS (tunables.h)
 * at most: then -ETIMEDOUT, the last error naming the counts and the first unserved slot's
 * doorbell, and the handle left allocated (the kernel may still be reading it). */
int srpc_o2_stop(srpc_o2_t *o);

#ifdef __cplusplus
}
#endif
#endif /* SPLITRPC_GPU_H */
