/* gpu_driver.c: loads the CUDA driver with dlopen once per process, maps its errors to -errno with a per-thread message, keeps each device's primary context, and counts what the library holds of the driver. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gpu/gpu_driver.h"
#include "splitrpc_gpu.h"

struct srpc_cu_api srpc_cu;

#define SRPC_GPU_ERR_LEN 384

/* The outcome of the one load, written inside pthread_once and read-only afterwards. */
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_msg[SRPC_GPU_ERR_LEN];
static int dev_count;

/* Per device: the retained primary context (published with release order, never released)
 * and whether stream memory operations work there (0 unknown, 1 no, 2 yes). */
static struct {
    srpc_CUcontext ctx;
    int memops;
} devs[SRPC_GPU_MAX_DEVICES];
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static int default_device; /* the last device passed to a successful srpc_gpu_init */

static _Thread_local char last_err[SRPC_GPU_ERR_LEN];

/* ------------------------------------------------------------------ errors */

static const char *cu_error_name(srpc_CUresult r)
{
    const char *name = NULL;
    if (srpc_cu.GetErrorName && srpc_cu.GetErrorName(r, &name) != SRPC_CUDA_SUCCESS)
        name = NULL;
    return name ? name : "unknown CUDA error";
}

static int map_cu_error(srpc_CUresult r)
{
    switch (r) {
    case SRPC_CUDA_ERROR_INVALID_VALUE:
    case SRPC_CUDA_ERROR_INVALID_HANDLE:
        return -EINVAL;
    case SRPC_CUDA_ERROR_OUT_OF_MEMORY:
        return -ENOMEM;
    case SRPC_CUDA_ERROR_NOT_INITIALIZED:
    case SRPC_CUDA_ERROR_DEINITIALIZED:
    case SRPC_CUDA_ERROR_STUB_LIBRARY:
    case SRPC_CUDA_ERROR_DEVICE_UNAVAILABLE:
    case SRPC_CUDA_ERROR_NO_DEVICE:
    case SRPC_CUDA_ERROR_INVALID_DEVICE:
    case SRPC_CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case SRPC_CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
        return -ENODEV;
    case SRPC_CUDA_ERROR_NOT_SUPPORTED:
    case SRPC_CUDA_ERROR_NO_BINARY_FOR_GPU:
        return -ENOTSUP;
    case SRPC_CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
        return -EEXIST;
    case SRPC_CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
        return -ENOENT;
    default:
        return -EIO;
    }
}

int srpc_gpu_fail(const char *call, srpc_CUresult r)
{
    snprintf(last_err, sizeof(last_err), "%s: %s (%d)", call, cu_error_name(r), r);
    return map_cu_error(r);
}

int srpc_gpu_failf(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_err, sizeof(last_err), fmt, ap);
    va_end(ap);
    return err;
}

const char *srpc_gpu_last_error(void)
{
    return last_err;
}

/* ------------------------------------------------------------------ loading */

_Static_assert(sizeof(void *) == sizeof(void (*)(void)), "dlsym results must fit function pointers");

/* Stores symbol `name` of h into the function pointer at slot; 0 when it is missing. */
static int sym(void *h, const char *name, void *slot)
{
    void *p = dlsym(h, name);
    if (!p)
        return 0;
    memcpy(slot, &p, sizeof(p));
    return 1;
}

static void load_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        char first[160];
        const char *e = dlerror();
        snprintf(first, sizeof(first), "%s", e ? e : "libcuda.so.1: not found");
        h = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(load_msg, sizeof(load_msg), "CUDA driver not loaded (dlopen): %s", first);
            load_rc = -ENODEV;
            return;
        }
    }

    static const struct {
        const char *name;
        size_t off;
    } table[] = {
#define SRPC_SYM(field, name) {name, offsetof(struct srpc_cu_api, field)}
        SRPC_SYM(Init, "cuInit"),
        SRPC_SYM(DriverGetVersion, "cuDriverGetVersion"),
        SRPC_SYM(GetErrorName, "cuGetErrorName"),
        SRPC_SYM(DeviceGet, "cuDeviceGet"),
        SRPC_SYM(DeviceGetCount, "cuDeviceGetCount"),
        SRPC_SYM(DeviceGetName, "cuDeviceGetName"),
        SRPC_SYM(DeviceGetAttribute, "cuDeviceGetAttribute"),
        SRPC_SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
        SRPC_SYM(CtxSetCurrent, "cuCtxSetCurrent"),
        SRPC_SYM(CtxGetCurrent, "cuCtxGetCurrent"),
        SRPC_SYM(CtxGetDevice, "cuCtxGetDevice"),
        SRPC_SYM(MemGetAllocationGranularity, "cuMemGetAllocationGranularity"),
        SRPC_SYM(MemCreate, "cuMemCreate"),
        SRPC_SYM(MemAddressReserve, "cuMemAddressReserve"),
        SRPC_SYM(MemMap, "cuMemMap"),
        SRPC_SYM(MemSetAccess, "cuMemSetAccess"),
        SRPC_SYM(MemUnmap, "cuMemUnmap"),
        SRPC_SYM(MemRelease, "cuMemRelease"),
        SRPC_SYM(MemAddressFree, "cuMemAddressFree"),
        SRPC_SYM(MemAlloc, "cuMemAlloc_v2"),
        SRPC_SYM(MemFree, "cuMemFree_v2"),
        SRPC_SYM(MemHostAlloc, "cuMemHostAlloc"),
        SRPC_SYM(MemFreeHost, "cuMemFreeHost"),
        SRPC_SYM(MemHostRegister, "cuMemHostRegister_v2"),
        SRPC_SYM(MemHostUnregister, "cuMemHostUnregister"),
        SRPC_SYM(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"),
        SRPC_SYM(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
        SRPC_SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
        SRPC_SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
        SRPC_SYM(LaunchHostFunc, "cuLaunchHostFunc"),
        SRPC_SYM(StreamCreate, "cuStreamCreate"),
        SRPC_SYM(StreamDestroy, "cuStreamDestroy_v2"),
        SRPC_SYM(StreamSynchronize, "cuStreamSynchronize"),
        SRPC_SYM(StreamQuery, "cuStreamQuery"),
        SRPC_SYM(ModuleLoadData, "cuModuleLoadData"),
        SRPC_SYM(ModuleUnload, "cuModuleUnload"),
        SRPC_SYM(ModuleGetFunction, "cuModuleGetFunction"),
        SRPC_SYM(LaunchKernel, "cuLaunchKernel"),
#undef SRPC_SYM
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (!sym(h, table[i].name, (char *)&srpc_cu + table[i].off)) {
            snprintf(load_msg, sizeof(load_msg),
                     "CUDA driver libcuda too old: symbol %s missing", table[i].name);
            memset(&srpc_cu, 0, sizeof(srpc_cu));
            dlclose(h);
            load_rc = -ENODEV;
            return;
        }
    }
    /* Optional: the v2 stream memory operations (CUDA 11.7+), else the v1 ones. */
    if (sym(h, "cuStreamWriteValue32_v2", &srpc_cu.StreamWriteValue32))
        srpc_cu.write_value_v2 = 1;
    else
        sym(h, "cuStreamWriteValue32", &srpc_cu.StreamWriteValue32);
    sym(h, "cuPointerSetAttribute", &srpc_cu.PointerSetAttribute); /* optional: NULL if missing */
    sym(h, "cuDeviceTotalMem_v2", &srpc_cu.DeviceTotalMem);         /* optional: for reports */
    sym(h, "cuMemGetInfo_v2", &srpc_cu.MemGetInfo);                 /* optional: for reports */

    srpc_CUresult r = srpc_cu.Init(0);
    if (r == SRPC_CUDA_ERROR_NO_DEVICE) {
        /* The driver works and sees no device: a count of 0, not a failure. */
        dev_count = 0;
        return;
    }
    if (r != SRPC_CUDA_SUCCESS) {
        snprintf(load_msg, sizeof(load_msg), "cuInit (libcuda loaded): %s (%d)", cu_error_name(r), r);
        load_rc = -ENODEV;
        return; /* libcuda stays loaded: unloading it after cuInit is not safe */
    }
    int n = 0;
    r = srpc_cu.DeviceGetCount(&n);
    if (r != SRPC_CUDA_SUCCESS) {
        snprintf(load_msg, sizeof(load_msg), "cuDeviceGetCount: %s (%d)", cu_error_name(r), r);
        load_rc = -ENODEV;
        return;
    }
    dev_count = n;
}

int srpc_gpu_load(void)
{
    pthread_once(&load_once, load_driver);
    if (load_rc) {
        snprintf(last_err, sizeof(last_err), "%s", load_msg);
        return load_rc;
    }
    return 0;
}

/* ------------------------------------------------------------------ contexts */

/* The device's retained primary context (retaining it on first use), or NULL with the
 * error in *rc. The caller has checked the ordinal. */
static srpc_CUcontext primary_ctx(int device, int *rc)
{
    srpc_CUcontext ctx = __atomic_load_n(&devs[device].ctx, __ATOMIC_ACQUIRE);
    if (ctx)
        return ctx;
    pthread_mutex_lock(&ctx_lock);
    ctx = devs[device].ctx;
    if (!ctx) {
        srpc_CUdevice dev;
        srpc_CUresult r = srpc_cu.DeviceGet(&dev, device);
        if (r != SRPC_CUDA_SUCCESS)
            *rc = srpc_gpu_fail("cuDeviceGet", r);
        else if ((r = srpc_cu.DevicePrimaryCtxRetain(&ctx, dev)) != SRPC_CUDA_SUCCESS)
            *rc = srpc_gpu_fail("cuDevicePrimaryCtxRetain", r);
        else
            __atomic_store_n(&devs[device].ctx, ctx, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&ctx_lock);
    return ctx;
}

/* 0 when `device` is an ordinal this process can use; else the error (last error set). */
static int check_ordinal(int device)
{
    if (device < 0)
        return srpc_gpu_failf(-EINVAL, "invalid CUDA device ordinal %d", device);
    int rc = srpc_gpu_load();
    if (rc)
        return rc;
    if (device >= dev_count)
        return srpc_gpu_failf(-ENODEV, "no CUDA device %d (%d found)", device, dev_count);
    if (device >= SRPC_GPU_MAX_DEVICES)
        return srpc_gpu_failf(-ENODEV, "CUDA device %d: at most %d devices are supported",
                              device, SRPC_GPU_MAX_DEVICES);
    return 0;
}

int srpc_gpu_use_device(int device)
{
    int rc = check_ordinal(device);
    if (rc)
        return rc;
    srpc_CUcontext ctx = primary_ctx(device, &rc);
    if (!ctx)
        return rc;
    srpc_CUcontext cur = NULL;
    srpc_CUresult r = srpc_cu.CtxGetCurrent(&cur);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuCtxGetCurrent", r);
    if (cur != ctx && (r = srpc_cu.CtxSetCurrent(ctx)) != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuCtxSetCurrent", r);
    return 0;
}

int srpc_gpu_enter(int device, srpc_CUcontext *saved)
{
    *saved = NULL;
    int rc = srpc_gpu_load();
    if (rc)
        return rc;
    if (srpc_cu.CtxGetCurrent(saved) != SRPC_CUDA_SUCCESS)
        *saved = NULL;
    return srpc_gpu_use_device(device);
}

void srpc_gpu_leave(srpc_CUcontext saved)
{
    srpc_CUcontext cur = NULL;
    if (srpc_cu.CtxGetCurrent && srpc_cu.CtxGetCurrent(&cur) == SRPC_CUDA_SUCCESS && cur != saved)
        srpc_cu.CtxSetCurrent(saved);
}

int srpc_gpu_use_any(void)
{
    int rc = srpc_gpu_load();
    if (rc)
        return rc;
    srpc_CUcontext cur = NULL;
    if (srpc_cu.CtxGetCurrent(&cur) == SRPC_CUDA_SUCCESS && cur)
        return 0;
    return srpc_gpu_use_device(__atomic_load_n(&default_device, __ATOMIC_RELAXED));
}

int srpc_gpu_memops(int device)
{
    if (device < 0 || device >= SRPC_GPU_MAX_DEVICES || !srpc_cu.StreamWriteValue32)
        return 0;
    int v = __atomic_load_n(&devs[device].memops, __ATOMIC_RELAXED);
    if (!v) {
        v = 1;
        if (srpc_cu.write_value_v2) {
            v = 2; /* the v2 memory operations are available on every platform */
        } else {
            srpc_CUdevice dev;
            int on = 0;
            if (srpc_cu.DeviceGet(&dev, device) == SRPC_CUDA_SUCCESS &&
                srpc_cu.DeviceGetAttribute(&on, SRPC_CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1,
                                           dev) == SRPC_CUDA_SUCCESS && on)
                v = 2;
        }
        __atomic_store_n(&devs[device].memops, v, __ATOMIC_RELAXED);
    }
    return v == 2;
}

void srpc_gpu_memops_off(int device)
{
    if (device >= 0 && device < SRPC_GPU_MAX_DEVICES)
        __atomic_store_n(&devs[device].memops, 1, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------ what the library holds */

static int held[SRPC_HELD_KINDS]; /* __atomic */

void srpc_gpu_held(int what, int delta)
{
    if (what >= 0 && what < SRPC_HELD_KINDS)
        __atomic_add_fetch(&held[what], delta, __ATOMIC_RELAXED);
}

void srpc_gpu_live(srpc_gpu_live_t *out)
{
    if (!out)
        return;
    out->dtqs = __atomic_load_n(&held[SRPC_HELD_DTQ], __ATOMIC_RELAXED);
    out->host_allocs = __atomic_load_n(&held[SRPC_HELD_HOST_ALLOC], __ATOMIC_RELAXED);
    out->host_registrations = __atomic_load_n(&held[SRPC_HELD_HOST_REGISTER], __ATOMIC_RELAXED);
    out->streams = __atomic_load_n(&held[SRPC_HELD_STREAM], __ATOMIC_RELAXED);
    out->o2_kernels = __atomic_load_n(&held[SRPC_HELD_O2], __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------ public: devices */

int srpc_gpu_init(int device)
{
    int rc = srpc_gpu_use_device(device);
    if (rc == 0)
        __atomic_store_n(&default_device, device, __ATOMIC_RELAXED);
    return rc;
}

int srpc_gpu_device_count(void)
{
    int rc = srpc_gpu_load();
    return rc ? rc : dev_count;
}

int srpc_gpu_device_name(int device, char *out, size_t cap)
{
    if (!out || cap == 0)
        return srpc_gpu_failf(-EINVAL, "srpc_gpu_device_name: no output buffer");
    out[0] = '\0';
    int rc = check_ordinal(device);
    if (rc)
        return rc;
    srpc_CUdevice dev;
    srpc_CUresult r = srpc_cu.DeviceGet(&dev, device);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuDeviceGet", r);
    r = srpc_cu.DeviceGetName(out, cap > INT_MAX ? INT_MAX : (int)cap, dev);
    out[cap - 1] = '\0';
    if (r != SRPC_CUDA_SUCCESS) {
        out[0] = '\0';
        return srpc_gpu_fail("cuDeviceGetName", r);
    }
    return 0;
}
