/* fake_libcuda.c: an emulated libcuda.so.1 for tests on machines without a GPU (test-only, never in the wheel). One "device" whose memory the CPU must not touch: every device address handed out lies in a PROT_NONE view (a host read of device memory crashes the test), and the emulated copies, stores and flags go through a read-write shadow of the same pages. cuMemAlloc: a memfd mapped twice. Virtual memory management as the driver has it: allocation granularity, cuMemCreate (a memfd), cuMemAddressReserve (a PROT_NONE range, with a shadow range beside it), cuMemMap (the same pages at several addresses, and in the shadow at the same offsets, so a range that crosses from one mapping to the next is contiguous there too), cuMemSetAccess, unmap/release/free, with the driver's error codes for misuse; mapped host memory (cuMemHostAlloc, cuMemHostRegister: device pointer = host pointer, as with unified addressing). Each created stream runs its work (copies, cuStreamWriteValue32, host functions, kernels) in order on a thread of its own, so completion is asynchronous and out of order across streams; the legacy default stream waits for the blocking streams; an error while queued work runs is returned by the stream's next synchronisation; copies, synchronisations, launches, mappings, stream creations or stream stores fail on request (fake_cuda_fail_*), the device's memory can be limited (fake_cuda_set_device_memory: OUT_OF_MEMORY past it), a mapping can be broken (fake_cuda_break_mapping) and the O2 kernel held (fake_cuda_pause_o2); the fake_cuda_* functions count what was done and what is still live. This project's kernels are run by name with host implementations (the mirror self-test, the O2 persistent vecadd polling its doorbells on its stream's thread, and the embedding cache's five, keys in an order not the index order). It proves nothing about a real GPU. */
#define _GNU_SOURCE /* memfd_create */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu/mirror_word.h" /* the mirror self-test's pattern, as the kernel computes it */
#include "gpu/o2_abi.h"      /* the O2 control block the emulated persistent kernel serves */
#include "core/mix64.h"      /* the embedding cache's slabset choice */
#include "embed/emb_gpu_abi.h" /* the embedding kernels' argument block */

#define OK 0
#define INVALID_VALUE 1
#define OUT_OF_MEMORY 2
#define INVALID_DEVICE 101
#define INVALID_CONTEXT 201
#define INVALID_HANDLE 400
#define HOST_MEMORY_ALREADY_REGISTERED 712
#define HOST_MEMORY_NOT_REGISTERED 713
#define NOT_SUPPORTED 801
#define NOT_READY 600
#define MAX_ALLOCS 512
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
static char *vmm_shadow_of(devptr p, size_t n);
static char *host_of(devptr p, size_t n);
static char *shadow_of(devptr p, size_t n)
{
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].ptr && p >= allocs[i].ptr && n <= allocs[i].size && p - allocs[i].ptr <= allocs[i].size - n)
            return allocs[i].shadow + (p - (uintptr_t)allocs[i].map);
    }
    char *v = vmm_shadow_of(p, n);
    return v ? v : host_of(p, n);
}

/* ------------------------------------------------------------------ virtual memory management
 * Guarded by lock. A handle (cuMemCreate) is index + 1 of handles[]: a memfd of `size` bytes,
 * freed once released and no longer mapped (as the driver frees the physical memory then). A
 * reservation is a PROT_NONE range at `base` (its addresses handed out) and one of the same
 * size at `shadow`; a mapping puts the handle's pages at [ptr, ptr + size), PROT_NONE, and at
 * the same offset of the shadow, read-write. Copies need access set (cuMemSetAccess). */
#define GRANULARITY ((size_t)2 << 20)
#define MAX_HANDLES 64
#define MAX_RESERVED 64
#define MAX_MAPS 256
static struct {
    int fd;
    size_t size;
    int released, maps;
} handles[MAX_HANDLES];
static struct {
    uintptr_t base;
    size_t size;
    char *shadow;
} reserved[MAX_RESERVED];
static struct {
    uintptr_t ptr;
    size_t size, offset;
    int handle; /* index into handles[] */
    int access;
} maps[MAX_MAPS];
static int vmm_handles, vmm_reserved, vmm_maps; /* live counts, for the tests' leak checks */

int fake_cuda_vmm_live_handles(void) { return __atomic_load_n(&vmm_handles, __ATOMIC_SEQ_CST); }
int fake_cuda_vmm_live_reservations(void) { return __atomic_load_n(&vmm_reserved, __ATOMIC_SEQ_CST); }
int fake_cuda_vmm_live_mappings(void) { return __atomic_load_n(&vmm_maps, __ATOMIC_SEQ_CST); }

static int reservation_of(uintptr_t p, size_t n)
{
    for (int i = 0; i < MAX_RESERVED; i++)
        if (reserved[i].base && p >= reserved[i].base && n <= reserved[i].size && p - reserved[i].base <= reserved[i].size - n)
            return i;
    return -1;
}
static int map_at(uintptr_t p) /* the mapping holding address p, or -1 */
{
    for (int i = 0; i < MAX_MAPS; i++)
        if (maps[i].size && p >= maps[i].ptr && p - maps[i].ptr < maps[i].size)
            return i;
    return -1;
}
/* [p, p + n) wholly mapped (with access if need_access): one mapping after another. */
static int mapped(uintptr_t p, size_t n, int need_access)
{
    for (uintptr_t cur = p, end = p + n; cur < end;) {
        int m = map_at(cur);
        if (m < 0 || (need_access && !maps[m].access))
            return 0;
        cur = maps[m].ptr + maps[m].size;
    }
    return 1;
}
static char *vmm_shadow_of(devptr p, size_t n)
{
    int r = reservation_of((uintptr_t)p, n ? n : 1);
    if (r < 0 || !mapped((uintptr_t)p, n ? n : 1, 1))
        return NULL;
    return reserved[r].shadow + ((uintptr_t)p - reserved[r].base);
}
/* Device memory in use (cuMemAlloc and cuMemCreate sizes) and the device's capacity, 0: no
 * limit (fake_cuda_set_device_memory). An allocation past the capacity fails with
 * CUDA_ERROR_OUT_OF_MEMORY, as on a full GPU. Lock held. */
static size_t mem_used, mem_capacity;
static int mem_take(size_t size)
{
    if (mem_capacity && (size > mem_capacity || mem_used > mem_capacity - size))
        return 0;
    mem_used += size;
    return 1;
}
void fake_cuda_set_device_memory(size_t bytes)
{
    pthread_mutex_lock(&lock);
    mem_capacity = bytes;
    pthread_mutex_unlock(&lock);
}
size_t fake_cuda_device_memory_used(void)
{
    pthread_mutex_lock(&lock);
    size_t n = mem_used;
    pthread_mutex_unlock(&lock);
    return n;
}

static void handle_unref(int h) /* lock held */
{
    if (handles[h].released && handles[h].maps == 0 && handles[h].size) {
        mem_used -= handles[h].size;
        close(handles[h].fd);
        memset(&handles[h], 0, sizeof(handles[h]));
        __atomic_sub_fetch(&vmm_handles, 1, __ATOMIC_SEQ_CST);
    }
}

/* struct layouts of cuda.h (CUmemAllocationProp, CUmemAccessDesc), the fields read here */
struct prop {
    int type, handle_types, loc_type, loc_id;
};
struct access_desc {
    int loc_type, loc_id, flags;
};

int cuMemGetAllocationGranularity(size_t *g, const struct prop *prop, int option)
{
    if (!g || !prop || (option != 0 && option != 1) || prop->loc_type != 1 || prop->loc_id != 0)
        return INVALID_VALUE;
    *g = GRANULARITY;
    return OK;
}

int cuMemCreate(unsigned long long *handle, size_t size, const struct prop *prop, unsigned long long flags)
{
    if (!current)
        return INVALID_CONTEXT;
    if (!handle || !prop || flags || size == 0 || size % GRANULARITY || prop->type != 1 || prop->loc_type != 1)
        return INVALID_VALUE;
    if (prop->loc_id != 0)
        return INVALID_DEVICE;
    int rc = OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_HANDLES; i++) {
        if (handles[i].size)
            continue;
        if (!mem_take(size))
            break;
        int fd = memfd_create("fake_cuda_vmm", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
            if (fd >= 0)
                close(fd);
            mem_used -= size;
            break;
        }
        handles[i].fd = fd;
        handles[i].size = size;
        *handle = (unsigned long long)i + 1;
        __atomic_add_fetch(&vmm_handles, 1, __ATOMIC_SEQ_CST);
        rc = OK;
        break;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int handle_index(unsigned long long h) /* lock held: index of a live, unreleased handle, or -1 */
{
    return h >= 1 && h <= MAX_HANDLES && handles[h - 1].size && !handles[h - 1].released ? (int)(h - 1) : -1;
}

int cuMemRelease(unsigned long long h)
{
    pthread_mutex_lock(&lock);
    int i = handle_index(h), rc = INVALID_VALUE; /* unknown, or released twice */
    if (i >= 0) {
        handles[i].released = 1;
        handle_unref(i);
        rc = OK;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* A PROT_NONE range of `size` aligned to `align` (at least the granularity); addr (a hint) and
 * flags must be 0 here. */
int cuMemAddressReserve(devptr *ptr, size_t size, size_t align, devptr addr, unsigned long long flags)
{
    if (!ptr || size == 0 || size % GRANULARITY || flags || addr || (align & (align - 1)))
        return INVALID_VALUE;
    if (align < GRANULARITY)
        align = GRANULARITY;
    if (size > SIZE_MAX / 2 - align)
        return OUT_OF_MEMORY;
    int rc = OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_RESERVED; i++) {
        if (reserved[i].base)
            continue;
        size_t len = size + align;
        char *m = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            break;
        char *sh = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (sh == MAP_FAILED) {
            munmap(m, len);
            break;
        }
        uintptr_t base = ((uintptr_t)m + align - 1) / align * align;
        if (base > (uintptr_t)m)
            munmap(m, base - (uintptr_t)m);
        if ((uintptr_t)m + len > base + size)
            munmap((char *)base + size, (uintptr_t)m + len - (base + size));
        reserved[i].base = base;
        reserved[i].size = size;
        reserved[i].shadow = sh;
        *ptr = base;
        __atomic_add_fetch(&vmm_reserved, 1, __ATOMIC_SEQ_CST);
        rc = OK;
        break;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Only a whole reservation, with nothing mapped in it. */
int cuMemAddressFree(devptr ptr, size_t size)
{
    int rc = INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_RESERVED; i++) {
        if (!reserved[i].base || reserved[i].base != ptr || reserved[i].size != size)
            continue;
        int busy = 0;
        for (int m = 0; m < MAX_MAPS; m++)
            busy |= maps[m].size && maps[m].ptr >= ptr && maps[m].ptr - ptr < size;
        if (!busy) {
            munmap((void *)reserved[i].base, size);
            munmap(reserved[i].shadow, size);
            memset(&reserved[i], 0, sizeof(reserved[i]));
            __atomic_sub_fetch(&vmm_reserved, 1, __ATOMIC_SEQ_CST);
            rc = OK;
        }
        break;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Injected broken mapping, lock held: the break_map-th valid cuMemMap from now (1: the next that
 * passes the argument checks and finds a slot) gives its range pages of its own instead of the
 * handle's, as a faulty double mapping would; the device TQ mirror self-test must then find the
 * two views differ. */
static int break_map, fail_map;
void fake_cuda_break_mapping(int nth)
{
    pthread_mutex_lock(&lock);
    break_map = nth > 0 ? nth : 0;
    pthread_mutex_unlock(&lock);
}
/* The nth valid cuMemMap from now (1: the next, counted as for break_map) fails with
 * CUDA_ERROR_OUT_OF_MEMORY. */
void fake_cuda_fail_mapping(int nth)
{
    pthread_mutex_lock(&lock);
    fail_map = nth > 0 ? nth : 0;
    pthread_mutex_unlock(&lock);
}

int cuMemMap(devptr ptr, size_t size, size_t offset, unsigned long long h, unsigned long long flags)
{
    if (flags || size == 0 || size % GRANULARITY || offset % GRANULARITY || ptr % GRANULARITY)
        return INVALID_VALUE;
    int rc = INVALID_VALUE;
    pthread_mutex_lock(&lock);
    int hi = handle_index(h), r = reservation_of((uintptr_t)ptr, size), slot = -1;
    if (hi < 0) {
        rc = INVALID_HANDLE;
        goto out;
    }
    if (r < 0 || offset > handles[hi].size || size > handles[hi].size - offset)
        goto out;
    for (int m = 0; m < MAX_MAPS; m++) {
        if (maps[m].size && maps[m].ptr < ptr + size && ptr < maps[m].ptr + maps[m].size)
            goto out; /* overlaps a mapping */
        if (!maps[m].size && slot < 0)
            slot = m;
    }
    if (slot < 0 || (fail_map > 0 && --fail_map == 0)) {
        rc = OUT_OF_MEMORY;
        goto out;
    }
    char *sh = reserved[r].shadow + ((uintptr_t)ptr - reserved[r].base);
    const int broken = break_map > 0 && --break_map == 0;
    if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, handles[hi].fd, (off_t)offset) ==
            MAP_FAILED ||
        (broken ? mmap(sh, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0)
                : mmap(sh, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, handles[hi].fd, (off_t)offset)) ==
            MAP_FAILED) {
        rc = OUT_OF_MEMORY;
        goto out;
    }
    maps[slot].ptr = (uintptr_t)ptr;
    maps[slot].size = size;
    maps[slot].offset = offset;
    maps[slot].handle = hi;
    maps[slot].access = 0;
    handles[hi].maps++;
    __atomic_add_fetch(&vmm_maps, 1, __ATOMIC_SEQ_CST);
    rc = OK;
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Read-write access for device 0 over a range that is wholly mapped. */
int cuMemSetAccess(devptr ptr, size_t size, const struct access_desc *desc, size_t count)
{
    if (!desc || count != 1 || size == 0 || desc->loc_type != 1 || desc->loc_id != 0 || (desc->flags != 3 && desc->flags != 0))
        return INVALID_VALUE;
    int rc = INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (mapped((uintptr_t)ptr, size, 0)) {
        for (uintptr_t cur = ptr, end = ptr + size; cur < end;) {
            int m = map_at(cur);
            maps[m].access = desc->flags == 3;
            cur = maps[m].ptr + maps[m].size;
        }
        rc = OK;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Whole mappings only, as the driver requires; the addresses stay reserved. */
int cuMemUnmap(devptr ptr, size_t size)
{
    int rc = INVALID_VALUE;
    pthread_mutex_lock(&lock);
    int r = reservation_of((uintptr_t)ptr, size ? size : 1);
    if (r < 0 || size == 0 || !mapped((uintptr_t)ptr, size, 0))
        goto out;
    for (uintptr_t cur = ptr, end = ptr + size; cur < end;) { /* no mapping may stick out past the end */
        int m = map_at(cur);
        if (maps[m].ptr < (uintptr_t)ptr || maps[m].ptr + maps[m].size > end)
            goto out;
        cur = maps[m].ptr + maps[m].size;
    }
    for (uintptr_t cur = ptr, end = ptr + size; cur < end;) {
        int m = map_at(cur);
        uintptr_t next = maps[m].ptr + maps[m].size;
        char *sh = reserved[r].shadow + (maps[m].ptr - reserved[r].base);
        mmap((void *)maps[m].ptr, maps[m].size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        mmap(sh, maps[m].size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        int h = maps[m].handle;
        memset(&maps[m], 0, sizeof(maps[m]));
        handles[h].maps--;
        handle_unref(h);
        __atomic_sub_fetch(&vmm_maps, 1, __ATOMIC_SEQ_CST);
        cur = next;
    }
    rc = OK;
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ------------------------------------------------------------------ mapped host memory
 * Guarded by lock. Ranges allocated (cuMemHostAlloc) or registered (cuMemHostRegister); with
 * unified addressing their device pointer is their host address. */
#define MAX_HOST 64
static struct {
    char *p;
    size_t size;
    int allocated; /* 1: cuMemHostAlloc's (mmap), 0: registered */
} host[MAX_HOST];
static int host_live;
int fake_cuda_host_live(void) { return __atomic_load_n(&host_live, __ATOMIC_SEQ_CST); }

static int host_index(const char *p, size_t n)
{
    for (int i = 0; i < MAX_HOST; i++)
        if (host[i].p && p >= host[i].p && n <= host[i].size && (size_t)(p - host[i].p) <= host[i].size - n)
            return i;
    return -1;
}
static char *host_of(devptr p, size_t n)
{
    return host_index((char *)(uintptr_t)p, n ? n : 1) >= 0 ? (char *)(uintptr_t)p : NULL;
}
static int host_add(char *p, size_t size, int allocated) /* lock held */
{
    for (int i = 0; i < MAX_HOST; i++)
        if (host[i].p && p < host[i].p + host[i].size && host[i].p < p + size)
            return HOST_MEMORY_ALREADY_REGISTERED;
    for (int i = 0; i < MAX_HOST; i++)
        if (!host[i].p) {
            host[i].p = p;
            host[i].size = size;
            host[i].allocated = allocated;
            __atomic_add_fetch(&host_live, 1, __ATOMIC_SEQ_CST);
            return OK;
        }
    return OUT_OF_MEMORY;
}

int cuMemHostAlloc(void **pp, size_t size, unsigned flags)
{
    if (!current)
        return INVALID_CONTEXT;
    if (!pp || size == 0 || (flags & ~0x7u))
        return INVALID_VALUE;
    char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    int rc = host_add(p, size, 1);
    pthread_mutex_unlock(&lock);
    if (rc != OK) {
        munmap(p, size);
        return rc;
    }
    *pp = p;
    return OK;
}

int cuMemFreeHost(void *p)
{
    int rc = INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_HOST; i++)
        if (host[i].p && host[i].p == p && host[i].allocated) {
            munmap(host[i].p, host[i].size);
            memset(&host[i], 0, sizeof(host[i]));
            __atomic_sub_fetch(&host_live, 1, __ATOMIC_SEQ_CST);
            rc = OK;
            break;
        }
    pthread_mutex_unlock(&lock);
    return rc;
}

int cuMemHostRegister_v2(void *p, size_t size, unsigned flags)
{
    if (!current)
        return INVALID_CONTEXT;
    if (!p || size == 0 || (flags & ~0xfu))
        return INVALID_VALUE;
    pthread_mutex_lock(&lock);
    int rc = host_add(p, size, 0);
    pthread_mutex_unlock(&lock);
    return rc;
}

int cuMemHostUnregister(void *p)
{
    int rc = HOST_MEMORY_NOT_REGISTERED;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_HOST; i++)
        if (host[i].p && host[i].p == p && !host[i].allocated) {
            memset(&host[i], 0, sizeof(host[i]));
            __atomic_sub_fetch(&host_live, 1, __ATOMIC_SEQ_CST);
            rc = OK;
            break;
        }
    pthread_mutex_unlock(&lock);
    return rc;
}

int cuMemHostGetDevicePointer_v2(devptr *d, void *p, unsigned flags)
{
    if (!d || flags)
        return INVALID_VALUE;
    pthread_mutex_lock(&lock);
    int i = host_index(p, 1);
    pthread_mutex_unlock(&lock);
    if (i < 0)
        return INVALID_VALUE;
    *d = (devptr)(uintptr_t)p;
    return OK;
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
/* The names of the codes this driver returns, as cuda.h has them; INVALID_VALUE for others. */
int cuGetErrorName(int err, const char **name)
{
    static const struct {
        int code;
        const char *name;
    } names[] = {{0, "CUDA_SUCCESS"}, {1, "CUDA_ERROR_INVALID_VALUE"}, {2, "CUDA_ERROR_OUT_OF_MEMORY"},
                 {101, "CUDA_ERROR_INVALID_DEVICE"}, {201, "CUDA_ERROR_INVALID_CONTEXT"},
                 {400, "CUDA_ERROR_INVALID_HANDLE"}, {500, "CUDA_ERROR_NOT_FOUND"},
                 {700, "CUDA_ERROR_ILLEGAL_ADDRESS"}, {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"},
                 {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"}, {719, "CUDA_ERROR_LAUNCH_FAILED"},
                 {801, "CUDA_ERROR_NOT_SUPPORTED"}};
    if (!name)
        return INVALID_VALUE;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (names[i].code == err) {
            *name = names[i].name;
            return OK;
        }
    *name = NULL;
    return INVALID_VALUE;
}
int cuDeviceGetCount(int *n) { *n = 1; return OK; }
int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return ordinal == 0 ? OK : 101; }
int cuDeviceGetName(char *name, int len, int dev)
{
    (void)dev;
    strncpy(name, "fake GPU", (size_t)len);
    return OK;
}
/* What the runtime asks: mapped host memory, unified addressing, host registration, stream
 * memory operations and virtual memory management are supported, GPUDirect RDMA is not;
 * compute capability 9.0, 4 multiprocessors, PCI 0000:01:00. */
int cuDeviceGetAttribute(int *v, int attr, int dev)
{
    if (dev != 0)
        return INVALID_DEVICE;
    switch (attr) {
    case 19:  /* CAN_MAP_HOST_MEMORY */
    case 33:  /* PCI_BUS_ID */
    case 41:  /* UNIFIED_ADDRESSING */
    case 92:  /* CAN_USE_STREAM_MEM_OPS_V1 */
    case 99:  /* HOST_REGISTER_SUPPORTED */
    case 102: /* VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
        *v = 1;
        break;
    case 16: /* MULTIPROCESSOR_COUNT */
        *v = 4;
        break;
    case 75: /* COMPUTE_CAPABILITY_MAJOR */
        *v = 9;
        break;
    default: /* COMPUTE_CAPABILITY_MINOR, PCI domain and device, GPU_DIRECT_RDMA_SUPPORTED, ... */
        *v = 0;
    }
    return OK;
}
/* The device's memory: its capacity (fake_cuda_set_device_memory), else 16 GiB. */
#define DEFAULT_DEVICE_MEMORY ((size_t)16 << 30)
int cuDeviceTotalMem_v2(size_t *bytes, int dev)
{
    if (!bytes)
        return INVALID_VALUE;
    if (dev != 0)
        return INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    *bytes = mem_capacity ? mem_capacity : DEFAULT_DEVICE_MEMORY;
    pthread_mutex_unlock(&lock);
    return OK;
}
int cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    if (!free_bytes || !total_bytes)
        return INVALID_VALUE;
    if (!current)
        return INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    size_t total = mem_capacity ? mem_capacity : DEFAULT_DEVICE_MEMORY;
    *total_bytes = total;
    *free_bytes = mem_used < total ? total - mem_used : 0;
    pthread_mutex_unlock(&lock);
    return OK;
}
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
        if (!mem_take(size))
            break;
        int fd = memfd_create("fake_cuda", MFD_CLOEXEC);
        void *m = MAP_FAILED, *s = MAP_FAILED;
        if (fd < 0 || ftruncate(fd, (off_t)len) != 0 ||
            (m = mmap(NULL, len, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0)) == MAP_FAILED ||
            (s = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
            if (m != MAP_FAILED)
                munmap(m, len);
            if (fd >= 0)
                close(fd);
            mem_used -= size;
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
            mem_used -= allocs[i].size;
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

/* ------------------------------------------------------------------ streams
 * A created stream is a token, &streams[i], and a thread that runs its work in the order it was
 * queued: copies, stores, host functions and kernels complete asynchronously, and streams
 * complete out of order with respect to one another, as on a GPU. Work is checked when it is
 * queued (a bad pointer is refused then) and run later; an error while it runs (the memory was
 * freed meanwhile, an injected sync failure) is the stream's, returned by its next
 * cuStreamSynchronize. NULL and CU_STREAM_LEGACY (1) are the legacy default stream: its work
 * waits for every blocking stream's queued work (streams created without NON_BLOCKING), then
 * runs on the caller's thread. CU_STREAM_PER_THREAD (2) runs on the caller's thread at once.
 * Guarded by lock; a stream thread sleeps on stream_cv. */
enum { OP_COPY, OP_WRITE32, OP_HOSTFN, OP_KERNEL };
struct op {
    struct op *next;
    int type, kind; /* kind: the copy's (HTOD, DTOH, DTOD) or the kernel's */
    devptr dd, sd;
    void *dh;
    const void *sh;
    size_t n;
    uint32_t value;
    void (*fn)(void *);
    void *user;
    devptr kp0, kp3; /* a kernel's parameters, copied when launched */
    unsigned long long kn;
    uint32_t ksalt;
    struct srpc_emb_kargs ea; /* an embedding kernel's one parameter */
    unsigned long long kwarps; /* its grid's warps (warp-per-key kernels) or threads */
};
static struct {
    int thread;      /* its thread runs (until it has drained a destroyed stream) */
    int blocking;    /* created without CU_STREAM_NON_BLOCKING */
    int pending;     /* queued and not yet complete */
    int error;       /* the first error of its work since its last synchronisation */
    struct op *head, *tail;
} st[MAX_STREAMS];
static pthread_cond_t stream_cv = PTHREAD_COND_INITIALIZER;
static int stream_index(const void *s) /* a live created stream's index, else -1 */
{
    uintptr_t a = (uintptr_t)s, b = (uintptr_t)streams;
    return a >= b && a < b + MAX_STREAMS && streams[a - b] ? (int)(a - b) : -1;
}
static int stream_ok(const void *s)
{
    return (uintptr_t)s <= 2 || stream_index(s) >= 0;
}

static int run_op(struct op *o); /* lock held (released around a host function, and by O2 while it polls) */

/* fake_cuda_hold_streams: while set, no created stream runs its queued work (a GPU that has
 * stopped making progress): a synchronisation waits, a query says not ready. Lock taken. */
static int streams_held;
void fake_cuda_hold_streams(int on)
{
    pthread_mutex_lock(&lock);
    streams_held = on;
    pthread_cond_broadcast(&stream_cv);
    pthread_mutex_unlock(&lock);
}

static void *stream_thread(void *arg)
{
    int i = (int)(intptr_t)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        while ((!st[i].head || streams_held) && streams[i])
            pthread_cond_wait(&stream_cv, &lock);
        struct op *o = st[i].head;
        if (!o) /* destroyed, and its work is done */
            break;
        int rc = run_op(o);
        st[i].head = o->next;
        if (!st[i].head)
            st[i].tail = NULL;
        if (rc && !st[i].error)
            st[i].error = rc;
        st[i].pending--;
        free(o);
        pthread_cond_broadcast(&stream_cv);
    }
    st[i].thread = 0;
    pthread_cond_broadcast(&stream_cv);
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* Queues o on stream s (its thread runs it), or runs it now on the legacy or per-thread
 * default stream. Lock held. Returns the error of a work run now, else OK. */
static int submit(void *s, struct op *o)
{
    int i = stream_index(s);
    if (i >= 0) {
        o->next = NULL;
        if (st[i].tail)
            st[i].tail->next = o;
        else
            st[i].head = o;
        st[i].tail = o;
        st[i].pending++;
        pthread_cond_broadcast(&stream_cv);
        return OK;
    }
    if ((uintptr_t)s <= 1) /* legacy default stream: after every blocking stream's work */
        for (int k = 0; k < MAX_STREAMS; k++)
            while (st[k].thread && st[k].blocking && st[k].pending)
                pthread_cond_wait(&stream_cv, &lock);
    int rc = run_op(o);
    free(o);
    return rc;
}

static int fail_stream_creates; /* the next n cuStreamCreate calls fail with OUT_OF_MEMORY */
void fake_cuda_fail_stream_creates(int n)
{
    pthread_mutex_lock(&lock);
    fail_stream_creates = n;
    pthread_mutex_unlock(&lock);
}

int cuStreamCreate(void **stream, unsigned flags)
{
    if (!stream || flags > 1) /* CU_STREAM_DEFAULT, CU_STREAM_NON_BLOCKING */
        return INVALID_VALUE;
    if (!current)
        return INVALID_CONTEXT;
    int rc = OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    if (fail_stream_creates > 0) {
        fail_stream_creates--;
        pthread_mutex_unlock(&lock);
        return OUT_OF_MEMORY;
    }
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (!streams[i] && !st[i].thread) {
            pthread_t t;
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            streams[i] = 1;
            st[i].thread = 1;
            st[i].blocking = flags == 0;
            st[i].pending = st[i].error = 0;
            if (pthread_create(&t, &attr, stream_thread, (void *)(intptr_t)i) != 0) {
                streams[i] = 0;
                st[i].thread = 0;
            } else {
                *stream = &streams[i];
                __atomic_add_fetch(&live_streams, 1, __ATOMIC_SEQ_CST);
                rc = OK;
            }
            pthread_attr_destroy(&attr);
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* As the driver: returns at once; work already queued completes, then the stream is freed. */
int cuStreamDestroy_v2(void *stream)
{
    int rc = INVALID_VALUE;
    pthread_mutex_lock(&lock);
    int i = stream_index(stream);
    if (i >= 0) {
        streams[i] = 0;
        __atomic_sub_fetch(&live_streams, 1, __ATOMIC_SEQ_CST);
        pthread_cond_broadcast(&stream_cv);
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

/* A created stream i whose queued work is done: its first error since the last synchronisation
 * (cleared), or an injected failure of a synchronisation after copies of a kind
 * (fake_cuda_fail_syncs_after). Lock held. */
static int sync_done(int i)
{
    int err = st[i].error, fail = 0;
    st[i].error = 0;
    for (int k = 0; k < 3 && !fail; k++)
        if ((pending_kinds[i] & (1u << k)) && fail_syncs[k] > 0)
            fail = fail_syncs[k]--;
    pending_kinds[i] = 0;
    return fail ? ILLEGAL_ADDRESS : err;
}

/* Waits for the stream's queued work (the legacy stream: every blocking stream's); returns the
 * first error of that work since the last synchronisation, or an injected failure. */
int cuStreamSynchronize(void *stream)
{
    pthread_mutex_lock(&lock);
    int ok = stream_ok(stream), i = stream_index(stream), err = OK;
    if (ok && i >= 0) {
        while (st[i].pending)
            pthread_cond_wait(&stream_cv, &lock);
        err = sync_done(i);
    } else if (ok && (uintptr_t)stream <= 1) {
        for (int k = 0; k < MAX_STREAMS; k++)
            while (st[k].thread && st[k].blocking && st[k].pending)
                pthread_cond_wait(&stream_cv, &lock);
    }
    pthread_mutex_unlock(&lock);
    if (!ok)
        return INVALID_VALUE;
    if (err)
        return err;
    __atomic_add_fetch(&stream_syncs, 1, __ATOMIC_SEQ_CST);
    return OK;
}

/* CUDA_ERROR_NOT_READY while the stream has queued or running work (the O2 kernel, until it
 * returns); once it has none, what cuStreamSynchronize would return (its first error, an injected
 * failure; a success counts as a synchronisation). The legacy stream: NOT_READY while a blocking
 * stream has work. The library waits with this, under a deadline (srpc_gpu_wait_stream). */
int cuStreamQuery(void *stream)
{
    pthread_mutex_lock(&lock);
    int ok = stream_ok(stream), i = stream_index(stream), busy = 0, err = OK;
    if (ok && i >= 0) {
        busy = st[i].pending != 0;
        if (!busy)
            err = sync_done(i);
    } else if (ok && (uintptr_t)stream <= 1) {
        for (int k = 0; k < MAX_STREAMS && !busy; k++)
            busy = st[k].thread && st[k].blocking && st[k].pending;
    }
    pthread_mutex_unlock(&lock);
    if (!ok)
        return INVALID_VALUE;
    if (busy)
        return NOT_READY;
    if (err)
        return err;
    __atomic_add_fetch(&stream_syncs, 1, __ATOMIC_SEQ_CST);
    return OK;
}

static struct op *new_op(int type)
{
    struct op *o = calloc(1, sizeof(*o));
    if (o)
        o->type = type;
    return o;
}

/* A copy of n bytes: to host dh or device dd, from host sh or device sd, as kind says. Device
 * ranges must lie wholly inside live, accessible device memory (or mapped host memory), when
 * queued and when run; they are read and written through the shadow. */
static int copy(int kind, devptr dd, void *dh, devptr sd, const void *sh, size_t n, void *stream)
{
    if (!current)
        return INVALID_CONTEXT;
    int rc = INVALID_VALUE;
    pthread_mutex_lock(&lock);
    char *d = kind == DTOH ? (char *)dh : shadow_of(dd, n);
    const char *s = kind == HTOD ? (const char *)sh : shadow_of(sd, n);
    if (stream_ok(stream) && d && s && fail_copies[kind] > 0) {
        fail_copies[kind]--;
        rc = ILLEGAL_ADDRESS;
    } else if (stream_ok(stream) && d && s) {
        struct op *o = new_op(OP_COPY);
        if (!o) {
            rc = OUT_OF_MEMORY;
        } else {
            o->kind = kind, o->dd = dd, o->dh = dh, o->sd = sd, o->sh = sh, o->n = n;
            if (stream_index(stream) >= 0)
                pending_kinds[stream_index(stream)] |= 1u << kind;
            rc = submit(stream, o);
        }
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
/* The synchronous copies: on the legacy stream, which waits for the blocking streams. */
int cuMemcpyHtoD_v2(devptr dst, const void *src, size_t n) { return copy(HTOD, dst, NULL, 0, src, n, NULL); }
int cuMemcpyDtoH_v2(void *dst, devptr src, size_t n) { return copy(DTOH, 0, dst, src, NULL, n, NULL); }
int cuMemcpyDtoD_v2(devptr dst, devptr src, size_t n) { return copy(DTOD, dst, NULL, src, NULL, n, NULL); }

/* Injected store failures, lock held: the next fail_writes cuStreamWriteValue32 calls return
 * fail_writes_code (801, CUDA_ERROR_NOT_SUPPORTED: a driver without stream memory operations;
 * any other: a store that could not be queued). writes: the stores queued. */
static int fail_writes, fail_writes_code;
static unsigned long long writes;
void fake_cuda_fail_stream_writes(int n, int code)
{
    pthread_mutex_lock(&lock);
    fail_writes = n, fail_writes_code = code;
    pthread_mutex_unlock(&lock);
}
unsigned long long fake_cuda_stream_writes(void) { return __atomic_load_n(&writes, __ATOMIC_SEQ_CST); }

/* A 32-bit store to device (or mapped host) memory, after the stream's earlier work. */
int cuStreamWriteValue32_v2(void *stream, devptr addr, uint32_t value, unsigned flags)
{
    if (flags || (addr & 3))
        return INVALID_VALUE;
    int rc = INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (stream_ok(stream) && shadow_of(addr, 4) && fail_writes > 0) {
        fail_writes--;
        rc = fail_writes_code;
    } else if (stream_ok(stream) && shadow_of(addr, 4)) {
        struct op *o = new_op(OP_WRITE32);
        if (!o) {
            rc = OUT_OF_MEMORY;
        } else {
            o->dd = addr, o->value = value;
            rc = submit(stream, o);
            if (rc == OK)
                __atomic_add_fetch(&writes, 1, __ATOMIC_SEQ_CST);
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* The host function runs after the stream's earlier work, on its thread (the caller's for the
 * default streams), outside the emulation's lock. */
int cuLaunchHostFunc(void *stream, void (*fn)(void *), void *user)
{
    if (!fn)
        return INVALID_VALUE;
    int rc = INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (stream_ok(stream)) {
        struct op *o = new_op(OP_HOSTFN);
        if (!o) {
            rc = OUT_OF_MEMORY;
        } else {
            o->fn = fn, o->user = user;
            rc = submit(stream, o);
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ------------------------------------------------------------------ kernels
 * This project's own kernels (native/cuda/kernels.cu), by name, each with a host
 * implementation that reads and writes device memory through the shadow: the mirror self-test
 * and the O2 persistent vecadd (run_o2).
 * Any image loads (the fatbin is not read); modules and launches are counted. */
#define NOT_FOUND 500
enum { K_MIRROR_FILL, K_MIRROR_VERIFY, K_O2_VECADD, K_EMB_QUERY, K_EMB_REPLACE, K_EMB_UPDATE, K_EMB_DUMP, K_EMB_CLEAR,
       K_COUNT };
static const char *const kernel_names[K_COUNT] = {"srpc_mirror_fill", "srpc_mirror_verify", "srpc_o2_vecadd",
                                                  "srpc_emb_query", "srpc_emb_replace", "srpc_emb_update",
                                                  "srpc_emb_dump", "srpc_emb_clear"};
static char kernel_tokens[K_COUNT]; /* a CUfunction is &kernel_tokens[k] */
static char module_token;
static int modules_live, fail_launches;
static unsigned long long launches[K_COUNT];

int fake_cuda_live_modules(void) { return __atomic_load_n(&modules_live, __ATOMIC_SEQ_CST); }
unsigned long long fake_cuda_launches(int k)
{
    return k >= 0 && k < K_COUNT ? __atomic_load_n(&launches[k], __ATOMIC_SEQ_CST) : 0;
}
/* The next n launches fail with CUDA_ERROR_LAUNCH_FAILED (719). */
void fake_cuda_fail_launches(int n)
{
    pthread_mutex_lock(&lock);
    fail_launches = n;
    pthread_mutex_unlock(&lock);
}

/* For an emulated array library whose operations are not kernels of this driver (tests/emu/cupy):
 * takes one injected launch failure, if any, as its next "kernel launch" would: 719 or 0. */
int fake_cuda_take_launch_failure(void)
{
    pthread_mutex_lock(&lock);
    int rc = fail_launches > 0 ? (fail_launches--, 719) : 0;
    pthread_mutex_unlock(&lock);
    return rc;
}

int cuModuleLoadData(void **mod, const void *image)
{
    if (!current)
        return INVALID_CONTEXT;
    if (!mod || !image)
        return INVALID_VALUE;
    *mod = &module_token;
    __atomic_add_fetch(&modules_live, 1, __ATOMIC_SEQ_CST);
    return OK;
}
int cuModuleUnload(void *mod)
{
    if (mod != &module_token || __atomic_load_n(&modules_live, __ATOMIC_SEQ_CST) <= 0)
        return INVALID_HANDLE;
    __atomic_sub_fetch(&modules_live, 1, __ATOMIC_SEQ_CST);
    return OK;
}
int cuModuleGetFunction(void **f, void *mod, const char *name)
{
    if (!f || !name || mod != &module_token)
        return INVALID_HANDLE;
    for (int k = 0; k < K_COUNT; k++)
        if (strcmp(name, kernel_names[k]) == 0) {
            *f = &kernel_tokens[k];
            return OK;
        }
    return NOT_FOUND;
}


/* Runs the kernel now (the grid shape only has to be non-empty). Device memory it touches must
 * be accessible (as a real kernel would fault: CUDA_ERROR_ILLEGAL_ADDRESS). */
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra)
{
    (void)shared;
    if (!current)
        return INVALID_CONTEXT;
    uintptr_t a = (uintptr_t)f, b = (uintptr_t)kernel_tokens;
    if (a < b || a >= b + K_COUNT)
        return INVALID_HANDLE;
    int k = (int)(a - b);
    if (!params || extra || !gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024)
        return INVALID_VALUE;
    if (k == K_O2_VECADD && (gx != 1 || gy != 1 || gz != 1 || bx * by * bz != SRPC_O2_THREADS))
        return INVALID_VALUE; /* one block of its __launch_bounds__ */
    if (k >= K_EMB_QUERY && bx * by * bz != SRPC_EMB_THREADS)
        return INVALID_VALUE; /* the blocks they are written for */
    int rc = OK;
    pthread_mutex_lock(&lock);
    if (!stream_ok(stream)) {
        rc = INVALID_VALUE;
    } else if (fail_launches > 0) {
        fail_launches--;
        rc = 719; /* CUDA_ERROR_LAUNCH_FAILED */
    } else {
        struct op *o = new_op(OP_KERNEL);
        if (!o) {
            rc = OUT_OF_MEMORY;
        } else { /* the parameters are read now, as the driver does */
            o->kind = k;
            if (k >= K_EMB_QUERY) {
                memcpy(&o->ea, params[0], sizeof(o->ea));
                const unsigned long long threads = (unsigned long long)gx * gy * gz * bx * by * bz;
                o->kwarps = k <= K_EMB_UPDATE ? threads / 32 : threads;
                rc = submit(stream, o);
                pthread_mutex_unlock(&lock);
                return rc;
            }
            o->kp0 = *(devptr *)params[0];
            if (k == K_O2_VECADD) {
                o->kn = *(uint32_t *)params[1]; /* floats per vector */
            } else {
                o->kn = *(unsigned long long *)params[1];
                o->ksalt = *(uint32_t *)params[2];
                o->kp3 = k == K_MIRROR_VERIFY ? *(devptr *)params[3] : 0;
            }
            rc = submit(stream, o);
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* The O2 persistent vecadd (kernels.cu's srpc_o2_vecadd) on its stream's thread, for as long as
 * the kernel would run: polls batch seq's doorbell in the mapped control block (without the
 * lock, sleeping a little more each time up to 50 us), then with the lock computes y = x + 1
 * through the shadow, sets the batch's done word and the consumed count; returns once stop is
 * set and stop_seq batches are served; while paused (fake_cuda_pause_o2) it serves none, so the
 * descriptor ring fills as behind a busy GPU. A descriptor pointing outside device memory faults the
 * kernel (CUDA_ERROR_ILLEGAL_ADDRESS at the stream's next synchronisation). Lock held. */
/* fake_cuda_pause_o2: the kernel serves no batch while set; srpc_o2_stop with batches still
 * unserved then waits until it is cleared. */
static int o2_paused;
void fake_cuda_pause_o2(int on) { __atomic_store_n(&o2_paused, on, __ATOMIC_SEQ_CST); }

static int run_o2(devptr ctrl_dev, uint32_t n_floats)
{
    struct srpc_o2_ctrl *ctrl = (struct srpc_o2_ctrl *)(void *)shadow_of(ctrl_dev, sizeof(struct srpc_o2_ctrl));
    if (!ctrl)
        return ILLEGAL_ADDRESS;
    for (uint32_t seq = 0;; seq++) {
        struct srpc_o2_slot *slot = &ctrl->slot[seq % SRPC_O2_SLOTS];
        int exit_now = 0;
        unsigned sleep_us = 1;
        pthread_mutex_unlock(&lock);
        while (__atomic_load_n(&slot->ready, __ATOMIC_ACQUIRE) != seq + 1 ||
               __atomic_load_n(&o2_paused, __ATOMIC_SEQ_CST)) {
            if (__atomic_load_n(&ctrl->stop, __ATOMIC_ACQUIRE) &&
                __atomic_load_n(&ctrl->stop_seq, __ATOMIC_ACQUIRE) == seq) {
                exit_now = 1;
                break;
            }
            usleep(sleep_us);
            if (sleep_us < 50)
                sleep_us *= 2;
        }
        pthread_mutex_lock(&lock);
        if (exit_now)
            break;
        unsigned long long total = (unsigned long long)slot->count * n_floats, first = slot->out_floats;
        if (first > total || total > SIZE_MAX / 4)
            return ILLEGAL_ADDRESS;
        const float *in = (const float *)(void *)shadow_of(slot->in, (size_t)total * 4);
        float *out = (float *)(void *)shadow_of(slot->out, (size_t)first * 4);
        float *rest = total > first ? (float *)(void *)shadow_of(slot->out_rest, (size_t)(total - first) * 4) : NULL;
        uint32_t *done = (uint32_t *)(void *)shadow_of(slot->done, 4);
        if (!in || !out || (total > first && !rest) || !done)
            return ILLEGAL_ADDRESS;
        for (unsigned long long i = 0; i < first; i++)
            out[i] = in[i] + 1.0f;
        for (unsigned long long i = first; i < total; i++)
            rest[i - first] = in[i] + 1.0f;
        __atomic_store_n(done, slot->done_value, __ATOMIC_RELEASE);
        __atomic_store_n(&ctrl->consumed, seq + 1, __ATOMIC_RELEASE);
    }
    __atomic_add_fetch(&launches[K_O2_VECADD], 1, __ATOMIC_SEQ_CST);
    return OK;
}

/* The embedding cache's kernels (native/cuda/embed_cache.cuh) over the shadow, key by key, in
 * an order of their own: the kernels run their warps in any order, and their rules (a batch's
 * outcome is that of its keys in index order) are exercised here by descending index order on
 * odd launches and a random permutation (seeded by the launch count) on even ones, never the
 * host cache's. Only the keys the grid covers are handled, as on a GPU. Lock held. */
static uint64_t *emb_order(uint64_t n, unsigned long long launch)
{
    uint64_t *o = malloc((n ? n : 1) * sizeof(*o));
    if (!o)
        return NULL;
    for (uint64_t i = 0; i < n; i++)
        o[i] = n - 1 - i;
    if (launch % 2 == 0) {
        uint64_t x = 0x9e3779b97f4a7c15ull ^ launch;
        for (uint64_t i = n; i > 1; i--) { /* Fisher-Yates */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            const uint64_t j = x % i, t = o[i - 1];
            o[i - 1] = o[j], o[j] = t;
        }
    }
    return o;
}

static long long emb_find(const struct srpc_emb_kargs *a, const int64_t *keys, const uint64_t *ctr, uint64_t base,
                          int64_t key)
{
    for (uint64_t j = base; j < base + a->per_set; j++)
        if (ctr[j] != 0 && keys[j] == key)
            return (long long)j;
    return -1;
}

static int run_emb(int kind, const struct srpc_emb_kargs *a, unsigned long long grid)
{
    const uint64_t slots = a->sets * a->per_set, row = (uint64_t)a->dim * 4;
    int64_t *keys = (int64_t *)(void *)shadow_of(a->keys, slots * 8);
    uint64_t *ctr = (uint64_t *)(void *)shadow_of(a->counters, slots * 8);
    float *vec = (float *)(void *)shadow_of(a->vectors, slots * row);
    uint32_t *locks = (uint32_t *)(void *)shadow_of(a->locks, a->sets * 4);
    uint64_t *count = (uint64_t *)(void *)shadow_of(a->count, 16);
    if (!keys || !ctr || !vec || !locks || !count || !a->per_set || a->per_set % 32)
        return ILLEGAL_ADDRESS;
    const uint64_t n = a->n < grid ? a->n : grid;
    if (kind == K_EMB_CLEAR) {
        for (uint64_t s = 0; s < n && s < a->sets; s++) {
            memset(ctr + s * a->per_set, 0, (size_t)a->per_set * 8);
            locks[s] = 0;
        }
    } else if (kind == K_EMB_DUMP) {
        int64_t *out = a->cap ? (int64_t *)(void *)shadow_of(a->in_keys, a->cap * 8) : NULL;
        if ((a->cap && !out) || a->clock > slots || n > slots - a->clock)
            return ILLEGAL_ADDRESS;
        for (uint64_t j = a->clock; j < a->clock + n; j++) {
            if (ctr[j] == 0)
                continue;
            const uint64_t at = count[0]++;
            if (at < a->cap)
                out[at] = keys[j];
            else
                count[1] = 1;
        }
    } else if (n) {
        const int64_t *in = (const int64_t *)(void *)shadow_of(a->in_keys, n * 8);
        float *vin = kind == K_EMB_QUERY ? NULL : (float *)(void *)shadow_of(a->in_vecs, n * row);
        float *vout = kind == K_EMB_QUERY ? (float *)(void *)shadow_of(a->out_vecs, n * row) : NULL;
        uint8_t *hit = kind == K_EMB_QUERY ? (uint8_t *)(void *)shadow_of(a->hit, n) : NULL;
        if (!in || (kind == K_EMB_QUERY ? !vout || !hit : !vin))
            return ILLEGAL_ADDRESS;
        uint64_t *order = emb_order(n, launches[kind]);
        if (!order)
            return OUT_OF_MEMORY;
        for (uint64_t at = 0; at < n; at++) {
            const uint64_t i = order[at];
            const uint64_t base = srpc_mix64((uint64_t)in[i]) % a->sets * a->per_set, mine = a->clock + i + 1;
            long long j = emb_find(a, keys, ctr, base, in[i]);
            if (kind == K_EMB_QUERY) {
                hit[i] = j >= 0;
                if (j >= 0) {
                    memcpy(vout + i * a->dim, vec + (uint64_t)j * a->dim, row);
                    ctr[j] = ctr[j] > mine ? ctr[j] : mine;
                    count[0]++;
                }
            } else if (kind == K_EMB_UPDATE) {
                if (j >= 0) {
                    memcpy(vec + (uint64_t)j * a->dim, vin + i * a->dim, row);
                    count[0]++;
                }
            } else { /* replace: phase 0 the keys cached, phase 1 the others (marked in hit) */
                uint8_t *mark = (uint8_t *)(void *)shadow_of(a->hit + i, 1);
                if (!mark) {
                    free(order);
                    return ILLEGAL_ADDRESS;
                }
                if (a->phase == 1 && *mark)
                    continue;
                int write = 0;
                if (j >= 0) {
                    write = ctr[j] < mine;
                } else if (a->phase == 1) {
                    long long empty = -1, low = -1;
                    for (uint64_t s = base; s < base + a->per_set && empty < 0; s++) {
                        if (ctr[s] == 0)
                            empty = (long long)s;
                        else if (low < 0 || ctr[s] < ctr[low])
                            low = (long long)s;
                    }
                    if (empty >= 0) {
                        j = empty, write = 1;
                        count[1]++;
                    } else {
                        j = low, write = ctr[low] < mine;
                        count[0]++;
                    }
                }
                if (write) {
                    memcpy(vec + (uint64_t)j * a->dim, vin + i * a->dim, row);
                    keys[j] = in[i];
                    ctr[j] = mine;
                }
                if (a->phase == 0)
                    *mark = j >= 0;
            }
        }
        free(order);
    }
    __atomic_add_fetch(&launches[kind], 1, __ATOMIC_SEQ_CST);
    return OK;
}

/* Runs one queued work. Lock held; released around a host function. */
static int run_op(struct op *o)
{
    switch (o->type) {
    case OP_COPY: {
        char *d = o->kind == DTOH ? (char *)o->dh : shadow_of(o->dd, o->n);
        const char *s = o->kind == HTOD ? (const char *)o->sh : shadow_of(o->sd, o->n);
        if (!d || !s)
            return ILLEGAL_ADDRESS; /* freed since it was queued */
        if (o->n)
            memmove(d, s, o->n);
        __atomic_add_fetch(&copies[o->kind], 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&copy_bytes[o->kind], o->n, __ATOMIC_SEQ_CST);
        return OK;
    }
    case OP_WRITE32: {
        char *p = shadow_of(o->dd, 4);
        if (!p)
            return ILLEGAL_ADDRESS;
        __atomic_store_n((uint32_t *)(void *)p, o->value, __ATOMIC_RELEASE);
        return OK;
    }
    case OP_HOSTFN:
        pthread_mutex_unlock(&lock);
        o->fn(o->user);
        pthread_mutex_lock(&lock);
        return OK;
    case OP_KERNEL: {
        if (o->kind >= K_EMB_QUERY)
            return run_emb(o->kind, &o->ea, o->kwarps);
        if (o->kind == K_O2_VECADD)
            return run_o2(o->kp0, (uint32_t)o->kn);
        unsigned long long n = o->kn;
        uint32_t *w = n <= SIZE_MAX / 4 ? (uint32_t *)(void *)shadow_of(o->kp0, (size_t)n * 4) : NULL;
        if (!w)
            return ILLEGAL_ADDRESS;
        if (o->kind == K_MIRROR_FILL) {
            for (unsigned long long i = 0; i < n; i++)
                w[i] = srpc_mirror_word(i, o->ksalt);
        } else {
            unsigned long long bad = 0, *counter = (unsigned long long *)(void *)shadow_of(o->kp3, 8);
            if (!counter)
                return ILLEGAL_ADDRESS;
            for (unsigned long long i = 0; i < n; i++)
                bad += w[i] != srpc_mirror_word(i, o->ksalt);
            *counter += bad;
        }
        __atomic_add_fetch(&launches[o->kind], 1, __ATOMIC_SEQ_CST);
        return OK;
    }
    }
    return INVALID_VALUE;
}

/* SPLITRPC_EMULATED_FAULT (bench/gpu/run.sh's dry run, tests/test_gpu_check_script.py): one named
 * fault of the kinds a first GPU run may meet, for showing that each is reported:
 *   o2-hang       the O2 kernel serves no batch (pause_o2)
 *   stream-hang   no stream runs its queued work (hold_streams)
 *   launch-error  the next kernel launch fails (fail_launches=1)
 * An unknown name is reported on stderr and ignored. */
static void fault_from_env(void)
{
    const char *f = getenv("SPLITRPC_EMULATED_FAULT");
    if (!f || !*f)
        return;
    if (!strcmp(f, "o2-hang"))
        fake_cuda_pause_o2(1);
    else if (!strcmp(f, "stream-hang"))
        fake_cuda_hold_streams(1);
    else if (!strcmp(f, "launch-error"))
        fake_cuda_fail_launches(1);
    else
        fprintf(stderr, "fake libcuda: SPLITRPC_EMULATED_FAULT=%s not known (o2-hang, stream-hang, launch-error): "
                        "ignored\n", f);
}

/* Fault injection from the environment, for code under test that runs in a child process
 * (`splitrpc check` runs each section in one): FAKE_CUDA_INJECT, read once when the library is
 * loaded, is a comma list of
 *   break_mapping=N  fail_mapping=N  fail_launches=N  fail_stream_creates=N  pause_o2=0|1
 *   device_memory=BYTES  fail_copies=KIND:N  fail_syncs_after=KIND:N  fail_stream_writes=N:CODE
 * each calling the fake_cuda_* function of that name. An item it does not know is reported on
 * stderr and ignored (the test that wrote it then sees no fault, and fails). */
__attribute__((constructor)) static void inject_from_env(void)
{
    fault_from_env();
    const char *env = getenv("FAKE_CUDA_INJECT");
    if (!env || !*env)
        return;
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", env);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            fprintf(stderr, "fake libcuda: FAKE_CUDA_INJECT item '%s' has no '=': ignored\n", item);
            continue;
        }
        *eq = '\0';
        const char *name = item, *val = eq + 1;
        long long a = strtoll(val, NULL, 0), b = 0;
        const char *colon = strchr(val, ':');
        if (colon)
            b = strtoll(colon + 1, NULL, 0);
        if (!strcmp(name, "break_mapping"))
            fake_cuda_break_mapping((int)a);
        else if (!strcmp(name, "fail_mapping"))
            fake_cuda_fail_mapping((int)a);
        else if (!strcmp(name, "fail_launches"))
            fake_cuda_fail_launches((int)a);
        else if (!strcmp(name, "fail_stream_creates"))
            fake_cuda_fail_stream_creates((int)a);
        else if (!strcmp(name, "pause_o2"))
            fake_cuda_pause_o2((int)a);
        else if (!strcmp(name, "device_memory"))
            fake_cuda_set_device_memory((size_t)a);
        else if (!strcmp(name, "fail_copies") && colon)
            fake_cuda_fail_copies((int)a, (int)b);
        else if (!strcmp(name, "fail_syncs_after") && colon)
            fake_cuda_fail_syncs_after((int)a, (int)b);
        else if (!strcmp(name, "fail_stream_writes") && colon)
            fake_cuda_fail_stream_writes((int)a, (int)b);
        else
            fprintf(stderr, "fake libcuda: FAKE_CUDA_INJECT item '%s=%s' not known: ignored\n", name, val);
    }
}
