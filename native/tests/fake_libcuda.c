/* fake_libcuda.c: a stand-in libcuda.so.1 for tests on machines without a GPU: one "device" whose memory (cuMemAlloc) is a memfd mapped twice, a PROT_NONE view whose addresses are handed out (the CPU faults if it touches them) and a read-write shadow through which the copies go (cuMemcpy HtoD/DtoH/DtoD, sync and async, done at once), streams that are tokens, and copies or synchronisations made to fail on request (fake_cuda_fail_*): enough to run the control flow of GPU code paths (alignment, attributes, copies, streams, frees) and count what they do and leave behind. Every other entry point answers CUDA_ERROR_NOT_SUPPORTED. It proves nothing about a real GPU. */
#define _GNU_SOURCE /* memfd_create */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define OK 0
#define INVALID_VALUE 1
#define OUT_OF_MEMORY 2
#define INVALID_CONTEXT 201
#define NOT_SUPPORTED 801
#define MAX_ALLOCS 64
#define MAX_STREAMS 64
#define GPU_PAGE ((uintptr_t)1 << 16)

typedef unsigned long long devptr;

/* Guarded by lock. */
static struct {
    devptr ptr;     /* what cuMemAlloc returned */
    size_t size;    /* what it was asked for: a copy stays inside [ptr, ptr + size) */
    void *map;      /* the device view: PROT_NONE, its addresses handed out */
    char *shadow;   /* the same pages, read-write: what the copies use */
    size_t map_len; /* of both mappings and of the memfd */
    int fd;
} allocs[MAX_ALLOCS];
static char streams[MAX_STREAMS]; /* 1: live; its token is &streams[i] */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Counters: __atomic, read without the lock. */
static int live, sync_memops_set, live_streams, stream_syncs;
static unsigned long long copies[3], copy_bytes[3]; /* by kind */
enum { HTOD, DTOH, DTOD };

static _Thread_local void *current;
static char ctx_token;

/* What the tests read (dlopen with RTLD_NOLOAD, dlsym). */
int fake_cuda_live_allocations(void) { return __atomic_load_n(&live, __ATOMIC_SEQ_CST); }
int fake_cuda_sync_memops_set(void) { return __atomic_load_n(&sync_memops_set, __ATOMIC_SEQ_CST); }
int fake_cuda_live_streams(void) { return __atomic_load_n(&live_streams, __ATOMIC_SEQ_CST); }
int fake_cuda_stream_syncs(void) { return __atomic_load_n(&stream_syncs, __ATOMIC_SEQ_CST); }
/* Copy calls that copied (sync and async together), and their bytes: kind 0 HtoD, 1 DtoH, 2 DtoD. */
unsigned long long fake_cuda_copies(int kind)
{
    return kind >= 0 && kind < 3 ? __atomic_load_n(&copies[kind], __ATOMIC_SEQ_CST) : 0;
}
unsigned long long fake_cuda_copy_bytes(int kind)
{
    return kind >= 0 && kind < 3 ? __atomic_load_n(&copy_bytes[kind], __ATOMIC_SEQ_CST) : 0;
}
/* Zeroes the copy and synchronize counters (not the allocations, not the streams). */
void fake_cuda_reset_counts(void)
{
    for (int k = 0; k < 3; k++) {
        __atomic_store_n(&copies[k], 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&copy_bytes[k], 0, __ATOMIC_SEQ_CST);
    }
    __atomic_store_n(&stream_syncs, 0, __ATOMIC_SEQ_CST);
}

/* The shadow of device range [p, p + n) if it lies wholly inside one live allocation, else
 * NULL. Lock held. */
static char *shadow_of(devptr p, size_t n)
{
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].ptr && p >= allocs[i].ptr && n <= allocs[i].size && p - allocs[i].ptr <= allocs[i].size - n)
            return allocs[i].shadow + (p - (uintptr_t)allocs[i].map);
    }
    return NULL;
}

/* The host-readable address of device address p; NULL if p is not inside a live allocation. */
void *fake_cuda_shadow(devptr p)
{
    pthread_mutex_lock(&lock);
    void *s = shadow_of(p, 1);
    pthread_mutex_unlock(&lock);
    return s;
}

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
 * a GPU page boundary must find it themselves. A memfd mapped twice: PROT_NONE where its
 * addresses are handed out, read-write for the copies (the shadow). */
int cuMemAlloc_v2(devptr *ptr, size_t size)
{
    if (!current)
        return INVALID_CONTEXT;
    if (size > SIZE_MAX - 2 * GPU_PAGE)
        return OUT_OF_MEMORY;
    size_t len = size + 2 * GPU_PAGE;
    int rc = OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].ptr)
            continue;
        int fd = memfd_create("fake_cuda", MFD_CLOEXEC);
        if (fd < 0)
            break;
        void *m = MAP_FAILED, *s = MAP_FAILED;
        if (ftruncate(fd, (off_t)len) != 0 ||
            (m = mmap(NULL, len, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0)) == MAP_FAILED ||
            (s = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
            if (m != MAP_FAILED)
                munmap(m, len);
            close(fd);
            break;
        }
        uintptr_t p = ((uintptr_t)m + GPU_PAGE - 1) / GPU_PAGE * GPU_PAGE + 4096;
        allocs[i].ptr = p;
        allocs[i].size = size;
        allocs[i].map = m;
        allocs[i].shadow = s;
        allocs[i].map_len = len;
        allocs[i].fd = fd;
        *ptr = p;
        __atomic_add_fetch(&live, 1, __ATOMIC_SEQ_CST);
        rc = OK;
        break;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int cuMemFree_v2(devptr ptr)
{
    int rc = INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].ptr == ptr && ptr) {
            munmap(allocs[i].map, allocs[i].map_len);
            munmap(allocs[i].shadow, allocs[i].map_len);
            close(allocs[i].fd);
            memset(&allocs[i], 0, sizeof(allocs[i]));
            __atomic_sub_fetch(&live, 1, __ATOMIC_SEQ_CST);
            rc = OK;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* CU_POINTER_ATTRIBUTE_SYNC_MEMOPS (6) = 1 on a pointer inside an allocation. */
int cuPointerSetAttribute(const void *value, int attr, devptr ptr)
{
    if (attr != 6 || *(const unsigned *)value != 1)
        return NOT_SUPPORTED;
    int rc = INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].ptr && ptr >= allocs[i].ptr && ptr < (devptr)(uintptr_t)allocs[i].map + allocs[i].map_len) {
            __atomic_add_fetch(&sync_memops_set, 1, __ATOMIC_SEQ_CST);
            rc = OK;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Streams: tokens, &streams[i]; stream_index is i for a live one, else -1. Lock held.
 * NULL (the default stream), CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) may be used
 * too, not destroyed. */
static int stream_index(const void *s)
{
    uintptr_t a = (uintptr_t)s, b = (uintptr_t)streams;
    return a >= b && a < b + MAX_STREAMS && streams[a - b] ? (int)(a - b) : -1;
}
static int stream_ok(const void *s)
{
    return (uintptr_t)s <= 2 || stream_index(s) >= 0;
}

int cuStreamCreate(void **stream, unsigned flags)
{
    if (!stream || flags > 1) /* CU_STREAM_DEFAULT, CU_STREAM_NON_BLOCKING */
        return INVALID_VALUE;
    if (!current)
        return INVALID_CONTEXT;
    int rc = OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (!streams[i]) {
            streams[i] = 1;
            *stream = &streams[i];
            __atomic_add_fetch(&live_streams, 1, __ATOMIC_SEQ_CST);
            rc = OK;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int cuStreamDestroy_v2(void *stream)
{
    int rc = INVALID_VALUE;
    pthread_mutex_lock(&lock);
    int i = stream_index(stream);
    if (i >= 0) {
        streams[i] = 0;
        __atomic_sub_fetch(&live_streams, 1, __ATOMIC_SEQ_CST);
        rc = OK;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Injected faults (tests of error paths), lock held: the next fail_copies[k] copies of kind k
 * fail; the next fail_syncs[k] synchronisations of a stream that had a copy of kind k queued
 * since its last one fail. CUDA_ERROR_ILLEGAL_ADDRESS, as a faulting copy would give. */
#define ILLEGAL_ADDRESS 700
static int fail_copies[3], fail_syncs[3];
static unsigned pending_kinds[MAX_STREAMS]; /* per stream: 1 << kind of the copies since its last sync */
void fake_cuda_fail_copies(int kind, int n)
{
    pthread_mutex_lock(&lock);
    if (kind >= 0 && kind < 3)
        fail_copies[kind] = n;
    pthread_mutex_unlock(&lock);
}
void fake_cuda_fail_syncs_after(int kind, int n)
{
    pthread_mutex_lock(&lock);
    if (kind >= 0 && kind < 3)
        fail_syncs[kind] = n;
    pthread_mutex_unlock(&lock);
}

/* Copies are done when they are called: there is nothing to wait for. */
int cuStreamSynchronize(void *stream)
{
    pthread_mutex_lock(&lock);
    int ok = stream_ok(stream), i = stream_index(stream), fail = 0;
    if (ok && i >= 0) {
        for (int k = 0; k < 3 && !fail; k++)
            if ((pending_kinds[i] & (1u << k)) && fail_syncs[k] > 0)
                fail = fail_syncs[k]--;
        pending_kinds[i] = 0;
    }
    pthread_mutex_unlock(&lock);
    if (!ok)
        return INVALID_VALUE;
    if (fail)
        return ILLEGAL_ADDRESS;
    __atomic_add_fetch(&stream_syncs, 1, __ATOMIC_SEQ_CST);
    return OK;
}

/* A copy of n bytes, done now: to host dh or device dd, from host sh or device sd, as kind
 * says. Device ranges must lie wholly inside one live allocation; they are read and written
 * through the shadow. Nothing is copied on an error. */
static int copy(int kind, devptr dd, void *dh, devptr sd, const void *sh, size_t n, void *stream)
{
    if (!current)
        return INVALID_CONTEXT;
    int rc = INVALID_VALUE;
    pthread_mutex_lock(&lock); /* held while copying: a concurrent cuMemFree waits */
    char *d = kind == DTOH ? (char *)dh : shadow_of(dd, n);
    const char *s = kind == HTOD ? (const char *)sh : shadow_of(sd, n);
    if (stream_ok(stream) && d && s && fail_copies[kind] > 0) {
        fail_copies[kind]--;
        rc = ILLEGAL_ADDRESS;
    } else if (stream_ok(stream) && d && s) {
        if (stream_index(stream) >= 0)
            pending_kinds[stream_index(stream)] |= 1u << kind;
        if (n)
            memmove(d, s, n);
        __atomic_add_fetch(&copies[kind], 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&copy_bytes[kind], n, __ATOMIC_SEQ_CST);
        rc = OK;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int cuMemcpyHtoDAsync_v2(devptr dst, const void *src, size_t n, void *stream)
{
    return copy(HTOD, dst, NULL, 0, src, n, stream);
}
int cuMemcpyDtoHAsync_v2(void *dst, devptr src, size_t n, void *stream)
{
    return copy(DTOH, 0, dst, src, NULL, n, stream);
}
int cuMemcpyDtoDAsync_v2(devptr dst, devptr src, size_t n, void *stream)
{
    return copy(DTOD, dst, NULL, src, NULL, n, stream);
}
int cuMemcpyHtoD_v2(devptr dst, const void *src, size_t n) { return copy(HTOD, dst, NULL, 0, src, n, NULL); }
int cuMemcpyDtoH_v2(void *dst, devptr src, size_t n) { return copy(DTOH, 0, dst, src, NULL, n, NULL); }
int cuMemcpyDtoD_v2(devptr dst, devptr src, size_t n) { return copy(DTOD, dst, NULL, src, NULL, n, NULL); }

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
NOT_HERE(cuLaunchHostFunc)
NOT_HERE(cuModuleLoadData)
NOT_HERE(cuModuleUnload)
NOT_HERE(cuModuleGetFunction)
NOT_HERE(cuLaunchKernel)
