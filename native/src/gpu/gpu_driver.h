/* gpu_driver.h: the CUDA driver API as loaded at run time with dlopen: the few types, constants and entry points the library uses, and the helpers every GPU file shares. */
#ifndef SRPC_GPU_DRIVER_H
#define SRPC_GPU_DRIVER_H

#include <stddef.h>
#include <stdint.h>

/* The library never includes cuda.h: the declarations below copy the layout and the values of
 * cuda.h (CUDA 13.0; the sizes and offsets used here are those of every release since the
 * VMM API appeared in 10.2) under srpc_ names, so that both headers can be included together.
 * native/tests/test_cuda_abi.c checks every size, offset and constant against cuda.h wherever
 * cuda.h is found. */

/* ------------------------------------------------------------------ types */

typedef int srpc_CUresult;                         /* enum cudaError_enum */
typedef unsigned long long srpc_CUdeviceptr;        /* CUdeviceptr (64-bit build) */
typedef int srpc_CUdevice;                          /* CUdevice */
typedef unsigned long long srpc_CUmemGenericAllocationHandle;
typedef struct srpc_CUctx_st *srpc_CUcontext;        /* opaque, never dereferenced */
typedef struct srpc_CUstream_st *srpc_CUstream;
typedef struct srpc_CUmod_st *srpc_CUmodule;
typedef struct srpc_CUfunc_st *srpc_CUfunction;
typedef void (*srpc_CUhostFn)(void *user_data);

typedef struct srpc_CUmemLocation {
    int type;   /* CUmemLocationType */
    int id;     /* device ordinal for SRPC_CU_MEM_LOCATION_TYPE_DEVICE */
} srpc_CUmemLocation;

typedef struct srpc_CUmemAllocationProp {
    int type;                   /* CUmemAllocationType */
    int requestedHandleTypes;   /* CUmemAllocationHandleType */
    srpc_CUmemLocation location;
    void *win32HandleMetaData;  /* must be NULL on Linux */
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} srpc_CUmemAllocationProp;

typedef struct srpc_CUmemAccessDesc {
    srpc_CUmemLocation location;
    int flags;  /* CUmemAccess_flags */
} srpc_CUmemAccessDesc;

/* ------------------------------------------------------------------ constants */

enum {
    SRPC_CUDA_SUCCESS = 0,
    SRPC_CUDA_ERROR_INVALID_VALUE = 1,
    SRPC_CUDA_ERROR_OUT_OF_MEMORY = 2,
    SRPC_CUDA_ERROR_NOT_INITIALIZED = 3,
    SRPC_CUDA_ERROR_DEINITIALIZED = 4,
    SRPC_CUDA_ERROR_STUB_LIBRARY = 34,
    SRPC_CUDA_ERROR_DEVICE_UNAVAILABLE = 46,
    SRPC_CUDA_ERROR_NO_DEVICE = 100,
    SRPC_CUDA_ERROR_INVALID_DEVICE = 101,
    SRPC_CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    SRPC_CUDA_ERROR_INVALID_HANDLE = 400,
    SRPC_CUDA_ERROR_NOT_READY = 600, /* cuStreamQuery: work still queued or running */
    SRPC_CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    SRPC_CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
    SRPC_CUDA_ERROR_NOT_SUPPORTED = 801,
    SRPC_CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
    SRPC_CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804
};

enum {
    SRPC_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    SRPC_CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
    SRPC_CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
    SRPC_CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
    SRPC_CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
    SRPC_CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
    SRPC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    SRPC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    /* 32-bit stream memory operations of the v1 API (cuStreamWriteValue32 without _v2):
     * CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS before CUDA 12, ..._V1 since. The v2 API
     * (CUDA 11.7+) is available on every platform and has no such attribute. */
    SRPC_CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 = 92,
    SRPC_CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED = 99,
    SRPC_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
    SRPC_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116
};

enum {
    SRPC_CU_MEM_ALLOCATION_TYPE_PINNED = 1,
    SRPC_CU_MEM_HANDLE_TYPE_NONE = 0,
    SRPC_CU_MEM_LOCATION_TYPE_DEVICE = 1,
    SRPC_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
    SRPC_CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
    SRPC_CU_MEMHOSTALLOC_PORTABLE = 0x01,
    SRPC_CU_MEMHOSTALLOC_DEVICEMAP = 0x02,
    SRPC_CU_MEMHOSTREGISTER_PORTABLE = 0x01,
    SRPC_CU_MEMHOSTREGISTER_DEVICEMAP = 0x02,
    SRPC_CU_STREAM_NON_BLOCKING = 0x1,
    SRPC_CU_STREAM_WRITE_VALUE_DEFAULT = 0x0
};

enum {
    /* CUpointer_attribute: memory that a NIC writes by DMA (GPUDirect RDMA) must have its
     * synchronous memory operations synchronised (cuPointerSetAttribute, value 1). */
    SRPC_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS = 6
};

/* ------------------------------------------------------------------ entry points */

/* Filled once per process by srpc_gpu_load(); read-only afterwards. Each member is the
 * symbol named in its comment (the versioned name cuda.h's macros map the API name to). */
struct srpc_cu_api {
    srpc_CUresult (*Init)(unsigned flags);                                    /* cuInit */
    srpc_CUresult (*DriverGetVersion)(int *version);                          /* cuDriverGetVersion */
    srpc_CUresult (*GetErrorName)(srpc_CUresult err, const char **name);      /* cuGetErrorName */
    srpc_CUresult (*DeviceGet)(srpc_CUdevice *dev, int ordinal);              /* cuDeviceGet */
    srpc_CUresult (*DeviceGetCount)(int *count);                              /* cuDeviceGetCount */
    srpc_CUresult (*DeviceGetName)(char *name, int len, srpc_CUdevice dev);   /* cuDeviceGetName */
    srpc_CUresult (*DeviceGetAttribute)(int *value, int attr, srpc_CUdevice dev); /* cuDeviceGetAttribute */
    srpc_CUresult (*DevicePrimaryCtxRetain)(srpc_CUcontext *ctx, srpc_CUdevice dev); /* cuDevicePrimaryCtxRetain */
    srpc_CUresult (*CtxSetCurrent)(srpc_CUcontext ctx);                       /* cuCtxSetCurrent */
    srpc_CUresult (*CtxGetCurrent)(srpc_CUcontext *ctx);                      /* cuCtxGetCurrent */
    srpc_CUresult (*CtxGetDevice)(srpc_CUdevice *dev);                        /* cuCtxGetDevice */
    srpc_CUresult (*MemGetAllocationGranularity)(size_t *gran, const srpc_CUmemAllocationProp *prop,
                                                 int option);                 /* cuMemGetAllocationGranularity */
    srpc_CUresult (*MemCreate)(srpc_CUmemGenericAllocationHandle *h, size_t size,
                               const srpc_CUmemAllocationProp *prop, unsigned long long flags); /* cuMemCreate */
    srpc_CUresult (*MemAddressReserve)(srpc_CUdeviceptr *ptr, size_t size, size_t align,
                                       srpc_CUdeviceptr addr, unsigned long long flags); /* cuMemAddressReserve */
    srpc_CUresult (*MemMap)(srpc_CUdeviceptr ptr, size_t size, size_t offset,
                            srpc_CUmemGenericAllocationHandle h, unsigned long long flags); /* cuMemMap */
    srpc_CUresult (*MemSetAccess)(srpc_CUdeviceptr ptr, size_t size, const srpc_CUmemAccessDesc *desc,
                                  size_t count);                              /* cuMemSetAccess */
    srpc_CUresult (*MemUnmap)(srpc_CUdeviceptr ptr, size_t size);             /* cuMemUnmap */
    srpc_CUresult (*MemRelease)(srpc_CUmemGenericAllocationHandle h);         /* cuMemRelease */
    srpc_CUresult (*MemAddressFree)(srpc_CUdeviceptr ptr, size_t size);       /* cuMemAddressFree */
    srpc_CUresult (*MemAlloc)(srpc_CUdeviceptr *ptr, size_t size);            /* cuMemAlloc_v2 */
    srpc_CUresult (*MemFree)(srpc_CUdeviceptr ptr);                           /* cuMemFree_v2 */
    srpc_CUresult (*MemHostAlloc)(void **p, size_t size, unsigned flags);     /* cuMemHostAlloc */
    srpc_CUresult (*MemFreeHost)(void *p);                                    /* cuMemFreeHost */
    srpc_CUresult (*MemHostRegister)(void *p, size_t size, unsigned flags);   /* cuMemHostRegister_v2 */
    srpc_CUresult (*MemHostUnregister)(void *p);                              /* cuMemHostUnregister */
    srpc_CUresult (*MemHostGetDevicePointer)(srpc_CUdeviceptr *dev, void *p, unsigned flags); /* cuMemHostGetDevicePointer_v2 */
    srpc_CUresult (*MemcpyHtoDAsync)(srpc_CUdeviceptr dst, const void *src, size_t len,
                                     srpc_CUstream s);                        /* cuMemcpyHtoDAsync_v2 */
    srpc_CUresult (*MemcpyDtoHAsync)(void *dst, srpc_CUdeviceptr src, size_t len,
                                     srpc_CUstream s);                        /* cuMemcpyDtoHAsync_v2 */
    srpc_CUresult (*MemcpyDtoDAsync)(srpc_CUdeviceptr dst, srpc_CUdeviceptr src, size_t len,
                                     srpc_CUstream s);                        /* cuMemcpyDtoDAsync_v2 */
    srpc_CUresult (*StreamWriteValue32)(srpc_CUstream s, srpc_CUdeviceptr addr, uint32_t value,
                                        unsigned flags);                      /* cuStreamWriteValue32_v2, else cuStreamWriteValue32 */
    srpc_CUresult (*LaunchHostFunc)(srpc_CUstream s, srpc_CUhostFn fn, void *user); /* cuLaunchHostFunc */
    srpc_CUresult (*StreamCreate)(srpc_CUstream *s, unsigned flags);          /* cuStreamCreate */
    srpc_CUresult (*StreamDestroy)(srpc_CUstream s);                          /* cuStreamDestroy_v2 */
    srpc_CUresult (*StreamSynchronize)(srpc_CUstream s);                      /* cuStreamSynchronize */
    srpc_CUresult (*StreamQuery)(srpc_CUstream s);                            /* cuStreamQuery */
    srpc_CUresult (*ModuleLoadData)(srpc_CUmodule *mod, const void *image);   /* cuModuleLoadData */
    srpc_CUresult (*ModuleUnload)(srpc_CUmodule mod);                         /* cuModuleUnload */
    srpc_CUresult (*ModuleGetFunction)(srpc_CUfunction *f, srpc_CUmodule mod, const char *name); /* cuModuleGetFunction */
    srpc_CUresult (*LaunchKernel)(srpc_CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                  unsigned bx, unsigned by, unsigned bz, unsigned shared_bytes,
                                  srpc_CUstream s, void **params, void **extra); /* cuLaunchKernel */
    int write_value_v2; /* 1: StreamWriteValue32 is the v2 entry point (no module parameter needed) */
    /* Optional entry points: NULL where the driver lacks them (the load does not fail). */
    srpc_CUresult (*PointerSetAttribute)(const void *value, int attribute,
                                         srpc_CUdeviceptr ptr);        /* cuPointerSetAttribute */
    srpc_CUresult (*DeviceTotalMem)(size_t *bytes, srpc_CUdevice dev); /* cuDeviceTotalMem_v2 */
    srpc_CUresult (*MemGetInfo)(size_t *free_bytes, size_t *total_bytes); /* cuMemGetInfo_v2 */
};

/* The driver's entry points; valid only after srpc_gpu_load() returned 0. */
extern struct srpc_cu_api srpc_cu;

/* ------------------------------------------------------------------ shared helpers */

/* Most devices handled per process; higher ordinals get -ENODEV. */
#define SRPC_GPU_MAX_DEVICES 64

/* Loads libcuda.so.1 (else libcuda.so), resolves the entry points and calls cuInit, once per
 * process; later calls return the first outcome. 0 or -ENODEV (last error set). Any thread. */
int srpc_gpu_load(void);

/* srpc_gpu_load(), checks the ordinal, retains the device's primary context (once per
 * process; it is never released) and makes it current on the calling thread. 0, -EINVAL
 * (device < 0), -ENODEV (no driver, no such device) or a mapped CUDA error. Any thread. */
int srpc_gpu_use_device(int device);

/* For calls that name no device (pinned memory, copies, flags, stream sync): keeps the
 * calling thread's current context if it has one (e.g. the one CuPy or torch made current),
 * else makes current the primary context of the last device passed to srpc_gpu_init
 * (device 0 until then). Same returns as srpc_gpu_use_device. Any thread. */
int srpc_gpu_use_any(void);

/* For a library thread's own GPU work on a thread it shares with the caller's code (a Python
 * worker whose CuPy context must not change under it): makes device's primary context current
 * and puts in *saved the one that was (NULL for none); srpc_gpu_leave(saved) makes that one
 * current again. Same returns as srpc_gpu_use_device. Any thread. */
int srpc_gpu_enter(int device, srpc_CUcontext *saved);
void srpc_gpu_leave(srpc_CUcontext saved);

/* Whether cuStreamWriteValue32 may be used on `device` (ordinal): always with the v2 entry
 * point, else as CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS(_V1) says. Queried once per
 * device; srpc_gpu_memops_off() records a device that answered CUDA_ERROR_NOT_SUPPORTED. */
int srpc_gpu_memops(int device);
void srpc_gpu_memops_off(int device);

/* Records "call: CUDA_ERROR_NAME (code)" as this thread's last error and returns the
 * matching -errno:
 *   CUDA_ERROR_INVALID_VALUE, _INVALID_HANDLE             -> -EINVAL
 *   CUDA_ERROR_OUT_OF_MEMORY                              -> -ENOMEM
 *   CUDA_ERROR_NOT_INITIALIZED, _DEINITIALIZED, _STUB_LIBRARY,
 *   _DEVICE_UNAVAILABLE, _NO_DEVICE, _INVALID_DEVICE, _SYSTEM_DRIVER_MISMATCH,
 *   _COMPAT_NOT_SUPPORTED_ON_DEVICE                       -> -ENODEV
 *   CUDA_ERROR_NOT_SUPPORTED, _NO_BINARY_FOR_GPU          -> -ENOTSUP
 *   CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED             -> -EEXIST
 *   CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED                 -> -ENOENT
 *   anything else                                         -> -EIO */
int srpc_gpu_fail(const char *call, srpc_CUresult r);
/* Records a printf-style message as this thread's last error and returns err (a -errno). */
int srpc_gpu_failf(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Waits for stream s's work: 0, or the error of that work. Every wait of the library on a stream
 * goes through here (cuStreamSynchronize has no deadline). After SRPC_GPU_WAIT_TIMEOUT_MS
 * (tunables.h): keep_waiting == 0, -ETIMEDOUT with a last error naming `what` was waited for;
 * keep_waiting == 1 (the work targets memory the caller would hand back after the wait: a late
 * copy would land in reused memory), that message on stderr once, and the wait goes on. Any
 * thread; the device's context current (srpc_gpu_use_device). gpu_stream.c. */
int srpc_gpu_wait_stream(srpc_CUstream s, const char *what, int keep_waiting);

/* What the library holds of the driver, counted where it is taken and where it is given back
 * (srpc_gpu_live reports it): for leak checks that work on any driver. Any thread. */
enum { SRPC_HELD_DTQ, SRPC_HELD_HOST_ALLOC, SRPC_HELD_HOST_REGISTER, SRPC_HELD_STREAM, SRPC_HELD_O2,
       SRPC_HELD_KINDS };
void srpc_gpu_held(int what, int delta);

/* Converts between the API's uint64_t handles and the driver's types. */
static inline srpc_CUstream srpc_gpu_stream(uint64_t s)
{
    return (srpc_CUstream)(uintptr_t)s;
}

#endif /* SRPC_GPU_DRIVER_H */
