/* fake_libcuda.c: a stand-in libcuda.so.1 for tests on machines without a GPU: one "device" whose memory (cuMemAlloc) is host memory that nothing may touch, enough to run the control flow of GPU code paths (alignment, attributes, frees) and count what they leave behind. Every other entry point answers CUDA_ERROR_NOT_SUPPORTED. It proves nothing about a real GPU. */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define OK 0
#define NOT_SUPPORTED 801
#define INVALID_VALUE 1
#define MAX_ALLOCS 64
#define GPU_PAGE ((uintptr_t)1 << 16)

typedef unsigned long long devptr;

static struct {
    devptr ptr;     /* what cuMemAlloc returned */
    void *map;      /* its mapping */
    size_t map_len;
} allocs[MAX_ALLOCS];
static int live, sync_memops_set;
static _Thread_local void *current;
static char ctx_token;

/* What the tests read (dlopen with RTLD_NOLOAD, dlsym). */
int fake_cuda_live_allocations(void) { return live; }
int fake_cuda_sync_memops_set(void) { return sync_memops_set; }

int cuInit(unsigned flags) { return flags ? INVALID_VALUE : OK; }
int cuDriverGetVersion(int *v) { *v = 13000; return OK; }
int cuGetErrorName(int err, const char **name)
{
    *name = err == NOT_SUPPORTED ? "CUDA_ERROR_NOT_SUPPORTED (fake libcuda)" : "CUDA_ERROR (fake libcuda)";
    return OK;
}
int cuDeviceGetCount(int *n) { *n = 1; return OK; }
int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return ordinal == 0 ? OK : 101; }
int cuDeviceGetName(char *name, int len, int dev)
{
    (void)dev;
    strncpy(name, "fake GPU", (size_t)len);
    return OK;
}
int cuDeviceGetAttribute(int *v, int attr, int dev) { (void)attr, (void)dev; *v = 0; return OK; }
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { (void)dev; *ctx = &ctx_token; return OK; }
int cuCtxSetCurrent(void *ctx) { current = ctx; return OK; }
int cuCtxGetCurrent(void **ctx) { *ctx = current; return OK; }
int cuCtxGetDevice(int *dev) { *dev = 0; return OK; }

/* Device memory: 4 KiB-aligned on purpose but never 64 KiB-aligned, so that callers that need
 * a GPU page boundary must find it themselves. */
int cuMemAlloc_v2(devptr *ptr, size_t size)
{
    if (!current)
        return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].ptr)
            continue;
        size_t len = size + 2 * GPU_PAGE;
        void *m = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
        uintptr_t p = ((uintptr_t)m + GPU_PAGE - 1) / GPU_PAGE * GPU_PAGE + 4096;
        allocs[i].ptr = p;
        allocs[i].map = m;
        allocs[i].map_len = len;
        *ptr = p;
        live++;
        return OK;
    }
    return 2;
}

int cuMemFree_v2(devptr ptr)
{
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].ptr == ptr && ptr) {
            munmap(allocs[i].map, allocs[i].map_len);
            allocs[i].ptr = 0;
            live--;
            return OK;
        }
    }
    return INVALID_VALUE;
}

/* CU_POINTER_ATTRIBUTE_SYNC_MEMOPS (6) = 1 on a pointer inside an allocation. */
int cuPointerSetAttribute(const void *value, int attr, devptr ptr)
{
    if (attr != 6 || *(const unsigned *)value != 1)
        return NOT_SUPPORTED;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].ptr && ptr >= allocs[i].ptr && ptr < (devptr)(uintptr_t)allocs[i].map + allocs[i].map_len) {
            sync_memops_set++;
            return OK;
        }
    }
    return INVALID_VALUE;
}

/* The rest of what gpu_driver.c resolves: present, and not supported. */
#define NOT_HERE(name) \
    int name() { return NOT_SUPPORTED; }
NOT_HERE(cuMemGetAllocationGranularity)
NOT_HERE(cuMemCreate)
NOT_HERE(cuMemAddressReserve)
NOT_HERE(cuMemMap)
NOT_HERE(cuMemSetAccess)
NOT_HERE(cuMemUnmap)
NOT_HERE(cuMemRelease)
NOT_HERE(cuMemAddressFree)
NOT_HERE(cuMemHostAlloc)
NOT_HERE(cuMemFreeHost)
NOT_HERE(cuMemHostRegister_v2)
NOT_HERE(cuMemHostUnregister)
NOT_HERE(cuMemHostGetDevicePointer_v2)
NOT_HERE(cuMemcpyHtoDAsync_v2)
NOT_HERE(cuMemcpyDtoHAsync_v2)
NOT_HERE(cuLaunchHostFunc)
NOT_HERE(cuStreamCreate)
NOT_HERE(cuStreamDestroy_v2)
NOT_HERE(cuStreamSynchronize)
NOT_HERE(cuModuleLoadData)
NOT_HERE(cuModuleUnload)
NOT_HERE(cuModuleGetFunction)
NOT_HERE(cuLaunchKernel)
