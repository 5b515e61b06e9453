/* test_fake_cuda.c: the emulated driver (fake_libcuda.c) against the driver's documented behaviour: virtual memory management and its error codes for misuse, the same pages at two addresses, device memory the CPU cannot touch, mapped host memory, stream stores, this project's kernels by name, and the accounting that leak checks rely on. Run with LD_LIBRARY_PATH=<build>/fake_cuda. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

typedef unsigned long long devptr;
struct prop {
    int type, handle_types, loc_type, loc_id;
    void *win32;
    unsigned char flags[8];
};
struct access_desc {
    int loc_type, loc_id, flags;
};

static void *lib;
#define FN(ret, name, ...) static ret (*name)(__VA_ARGS__)
FN(int, cuInit, unsigned);
FN(int, cuDevicePrimaryCtxRetain, void **, int);
FN(int, cuCtxSetCurrent, void *);
FN(int, cuMemGetAllocationGranularity, size_t *, const struct prop *, int);
FN(int, cuMemCreate, unsigned long long *, size_t, const struct prop *, unsigned long long);
FN(int, cuMemRelease, unsigned long long);
FN(int, cuMemAddressReserve, devptr *, size_t, size_t, devptr, unsigned long long);
FN(int, cuMemAddressFree, devptr, size_t);
FN(int, cuMemMap, devptr, size_t, size_t, unsigned long long, unsigned long long);
FN(int, cuMemUnmap, devptr, size_t);
FN(int, cuMemSetAccess, devptr, size_t, const struct access_desc *, size_t);
FN(int, cuMemcpyHtoDAsync_v2, devptr, const void *, size_t, void *);
FN(int, cuMemcpyDtoHAsync_v2, void *, devptr, size_t, void *);
FN(int, cuMemHostAlloc, void **, size_t, unsigned);
FN(int, cuMemFreeHost, void *);
FN(int, cuMemHostRegister_v2, void *, size_t, unsigned);
FN(int, cuMemHostUnregister, void *);
FN(int, cuMemHostGetDevicePointer_v2, devptr *, void *, unsigned);
FN(int, cuStreamWriteValue32_v2, void *, devptr, uint32_t, unsigned);
FN(int, cuModuleLoadData, void **, const void *);
FN(int, cuModuleUnload, void *);
FN(int, cuModuleGetFunction, void **, void *, const char *);
FN(int, cuLaunchKernel, void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
   void **, void **);
FN(int, fake_cuda_vmm_live_handles, void);
FN(int, fake_cuda_vmm_live_reservations, void);
FN(int, fake_cuda_vmm_live_mappings, void);
FN(int, fake_cuda_host_live, void);
FN(int, fake_cuda_live_modules, void);
FN(void, fake_cuda_fail_launches, int);
FN(int, cuStreamCreate, void **, unsigned);
FN(int, cuStreamDestroy_v2, void *);
FN(int, cuStreamSynchronize, void *);
FN(int, cuLaunchHostFunc, void *, void (*)(void *), void *);
FN(int, cuMemAlloc_v2, devptr *, size_t);
FN(int, cuMemFree_v2, devptr);
FN(int, fake_cuda_live_streams, void);
FN(void, fake_cuda_fail_stream_writes, int, int);
FN(unsigned long long, fake_cuda_stream_writes, void);
FN(void, fake_cuda_set_device_memory, size_t);
FN(size_t, fake_cuda_device_memory_used, void);
FN(void, fake_cuda_fail_mapping, int);
FN(void, fake_cuda_fail_stream_creates, int);
FN(int, cuMemGetInfo_v2, size_t *, size_t *);
FN(int, cuDeviceTotalMem_v2, size_t *, int);
FN(int, cuDeviceGetAttribute, int *, int, int);

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        printf("FAIL: %s not in the emulated driver\n", name);
        exit(1);
    }
    return p;
}
#define LOAD(name) (*(void **)&name = sym(#name))

static const struct prop dev0 = {1, 0, 1, 0, NULL, {0}};
static const struct access_desc rw = {1, 0, 3};

static int live_vmm(void)
{
    return fake_cuda_vmm_live_handles() + fake_cuda_vmm_live_reservations() + fake_cuda_vmm_live_mappings();
}

/* A device of limited memory: allocations past it fail with OUT_OF_MEMORY (2) and take
 * nothing; freeing makes room again. A mapping fails on request. */
static void test_device_memory(size_t g)
{
    const size_t base_use = fake_cuda_device_memory_used();
    unsigned long long h = 0, h2 = 0;
    devptr d = 0, d2 = 0, va = 0;
    fake_cuda_set_device_memory(base_use + 2 * g);
    CHECK(cuMemCreate(&h, g, &dev0, 0) == 0 && fake_cuda_device_memory_used() == base_use + g, "within capacity");
    CHECK(cuMemCreate(&h2, 2 * g, &dev0, 0) == 2, "past capacity: OUT_OF_MEMORY");
    CHECK(cuMemAlloc_v2(&d, g + 1) == 2 && fake_cuda_device_memory_used() == base_use + g,
          "cuMemAlloc past capacity takes nothing");
    CHECK(cuMemAlloc_v2(&d, g) == 0 && cuMemAlloc_v2(&d2, 1) == 2, "up to capacity, then full");
    CHECK(cuMemFree_v2(d) == 0 && cuMemAlloc_v2(&d2, g) == 0 && cuMemFree_v2(d2) == 0, "freed memory is room again");
    CHECK(cuMemAddressReserve(&va, 2 * g, 0, 0, 0) == 0, "reserve");
    fake_cuda_fail_mapping(2);
    CHECK(cuMemMap(va, g, 0, h, 0) == 0 && cuMemMap(va + g, g, 0, h, 0) == 2, "the second mapping fails on request");
    CHECK(cuMemMap(va + g, g, 0, h, 0) == 0, "the next one maps");
    CHECK(cuMemRelease(h) == 0 && fake_cuda_device_memory_used() == base_use + g, "a released handle still mapped");
    CHECK(cuMemUnmap(va, 2 * g) == 0 && cuMemAddressFree(va, 2 * g) == 0 &&
              fake_cuda_device_memory_used() == base_use, "unmapped: its memory is free");
    fake_cuda_fail_mapping(0); /* whatever the checks above left */
    fake_cuda_set_device_memory(0);
    CHECK(cuMemCreate(&h, 4 * g, &dev0, 0) == 0 && cuMemRelease(h) == 0, "no limit");
}

/* Memory counts (cuMemGetInfo, cuDeviceTotalMem) follow the allocations and the capacity; the
 * capacity was set from FAKE_CUDA_INJECT when the library was loaded (main sets it). */
static void test_memory_info_and_env(size_t g)
{
    size_t total = 0, free_ = 0, t2 = 0;
    CHECK(cuDeviceTotalMem_v2(&total, 0) == 0 && total == 64 * g, "capacity from FAKE_CUDA_INJECT: %zu", total);
    CHECK(cuMemGetInfo_v2(&free_, &t2) == 0 && t2 == total && free_ == total - fake_cuda_device_memory_used(),
          "free %zu of %zu", free_, t2);
    unsigned long long h = 0;
    size_t before = free_;
    CHECK(cuMemCreate(&h, 2 * g, &dev0, 0) == 0 && cuMemGetInfo_v2(&free_, &t2) == 0 && free_ == before - 2 * g,
          "an allocation takes its size from free");
    CHECK(cuMemRelease(h) == 0 && cuMemGetInfo_v2(&free_, &t2) == 0 && free_ == before, "a release gives it back");
    CHECK(cuDeviceTotalMem_v2(&total, 1) == 101 && cuMemGetInfo_v2(NULL, &t2) == 1, "bad device, NULL out");
    int v = -1;
    CHECK(cuDeviceGetAttribute(&v, 99, 0) == 0 && v == 1, "HOST_REGISTER_SUPPORTED");
    CHECK(cuDeviceGetAttribute(&v, 116, 0) == 0 && v == 0, "no GPUDirect RDMA");
    fake_cuda_set_device_memory(0);
    CHECK(cuDeviceTotalMem_v2(&total, 0) == 0 && total == (size_t)16 << 30, "no limit: 16 GiB");
}

static void test_vmm_misuse(size_t g)
{
    unsigned long long h = 0, h2 = 0;
    devptr base = 0, other = 0;
    struct prop dev1 = dev0;
    dev1.loc_id = 1;
    CHECK(cuMemCreate(&h, g + 4096, &dev0, 0) == 1, "size not a multiple of the granularity");
    CHECK(cuMemCreate(&h, g, &dev1, 0) == 101, "no device 1");
    CHECK(cuMemCreate(&h, g, &dev0, 0) == 0 && h, "create");
    CHECK(cuMemCreate(&h2, 2 * g, &dev0, 0) == 0 && h2 != h, "create another");
    CHECK(cuMemAddressReserve(&base, g + 1, 0, 0, 0) == 1, "reserve a size not a multiple");
    CHECK(cuMemAddressReserve(&base, 4 * g, 0, 0, 0) == 0 && base % g == 0, "reserve");
    CHECK(cuMemAddressReserve(&other, 2 * g, 4 * g, 0, 0) == 0 && other % (4 * g) == 0, "reserve aligned");
    CHECK(cuMemMap(base + 4096, g, 0, h, 0) == 1, "map at a misaligned address");
    CHECK(cuMemMap(base + 3 * g, 2 * g, 0, h2, 0) == 1, "map past the reservation");
    CHECK(cuMemMap(base, 2 * g, 0, h, 0) == 1, "map more than the handle has");
    CHECK(cuMemMap(base, g, g, h2, 0) == 0, "map the handle's second half");
    CHECK(cuMemMap(base, g, 0, h, 0) == 1, "map over a mapping");
    CHECK(cuMemMap(base + 2 * g, g, 0, 999, 0) == 400, "map an unknown handle");
    CHECK(cuMemSetAccess(base, 2 * g, &rw, 1) == 1, "access over an unmapped part");
    char buf[64] = "hello";
    CHECK(cuMemcpyHtoDAsync_v2(base, buf, sizeof(buf), NULL) != 0, "copy before access is set");
    CHECK(cuMemSetAccess(base, g, &rw, 1) == 0, "access");
    CHECK(cuMemcpyHtoDAsync_v2(base, buf, sizeof(buf), NULL) == 0, "copy after");
    CHECK(cuMemcpyHtoDAsync_v2(base + g - 8, buf, sizeof(buf), NULL) != 0, "copy running off the mapping");
    CHECK(cuMemUnmap(base, g / 2) == 1, "unmap half a mapping");
    CHECK(cuMemAddressFree(base, 4 * g) == 1, "free a reservation with a mapping in it");
    CHECK(cuMemAddressFree(base, 2 * g) == 1, "free part of a reservation");
    CHECK(cuMemRelease(h2) == 0, "release while mapped (the memory stays until unmapped)");
    CHECK(cuMemRelease(h2) == 1, "release twice");
    CHECK(fake_cuda_vmm_live_handles() == 2, "a released, still mapped handle is live");
    CHECK(cuMemUnmap(base, g) == 0, "unmap");
    CHECK(fake_cuda_vmm_live_handles() == 1, "unmapped: its memory is freed");
    CHECK(cuMemcpyHtoDAsync_v2(base, buf, sizeof(buf), NULL) != 0, "copy after unmap");
    CHECK(cuMemAddressFree(base, 4 * g) == 0 && cuMemAddressFree(other, 2 * g) == 0, "free");
    CHECK(cuMemRelease(h) == 0, "release");
    CHECK(live_vmm() == 0, "left: %d", live_vmm());
}

/* The same pages at two addresses back to back (a device Tensor Queue): written through one,
 * read through the other; a copy crossing from one mapping to the next is one copy. */
static void test_double_mapping(size_t g)
{
    unsigned long long h = 0;
    devptr base = 0;
    CHECK(cuMemCreate(&h, g, &dev0, 0) == 0, "create");
    CHECK(cuMemAddressReserve(&base, 2 * g, 0, 0, 0) == 0, "reserve");
    CHECK(cuMemMap(base, g, 0, h, 0) == 0 && cuMemMap(base + g, g, 0, h, 0) == 0, "map twice");
    CHECK(cuMemSetAccess(base, 2 * g, &rw, 1) == 0, "access over both");
    uint32_t *pat = malloc(g), *back = malloc(g);
    for (size_t i = 0; i < g / 4; i++)
        pat[i] = (uint32_t)(i * 2654435761u);
    CHECK(cuMemcpyHtoDAsync_v2(base + g, pat, g, NULL) == 0, "write the upper mapping");
    memset(back, 0, g);
    CHECK(cuMemcpyDtoHAsync_v2(back, base, g, NULL) == 0 && memcmp(pat, back, g) == 0, "read the lower one");
    /* a run that wraps: its tail lands at the ring's start */
    CHECK(cuMemcpyHtoDAsync_v2(base + g - 4096, pat, 8192, NULL) == 0, "a copy across the two mappings");
    memset(back, 0, 8192);
    CHECK(cuMemcpyDtoHAsync_v2(back, base, 4096, NULL) == 0 && memcmp(back, (char *)pat + 4096, 4096) == 0,
          "the wrapped tail at the start");

    /* the CPU may not touch device memory: a read in a child process crashes it */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* the default action, not a sanitizer's report */
        volatile char c = *(volatile char *)(uintptr_t)base;
        (void)c;
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK((WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV) || (WIFEXITED(st) && WEXITSTATUS(st) != 0),
          "a host read of device memory did not crash (status %#x)", st);

    /* this project's kernels by name: the mirror self-test's fill and verify */
    void *mod = NULL, *fill = NULL, *verify = NULL, *nope = NULL;
    static const char image[] = "fatbin";
    CHECK(cuModuleLoadData(&mod, image) == 0 && mod, "module");
    CHECK(cuModuleGetFunction(&fill, mod, "srpc_mirror_fill") == 0, "fill");
    CHECK(cuModuleGetFunction(&verify, mod, "srpc_mirror_verify") == 0, "verify");
    CHECK(cuModuleGetFunction(&nope, mod, "no_such_kernel") == 500, "an unknown kernel: CUDA_ERROR_NOT_FOUND");
    void *hostmem = NULL;
    devptr counter = 0;
    CHECK(cuMemHostAlloc(&hostmem, 4096, 2) == 0 && cuMemHostGetDevicePointer_v2(&counter, hostmem, 0) == 0,
          "mapped host memory for the counter");
    unsigned long long nwords = g / 4;
    uint32_t salt = 12345;
    devptr wr = base + g, rd = base;
    void *fa[] = {&wr, &nwords, &salt}, *va[] = {&rd, &nwords, &salt, &counter};
    CHECK(cuLaunchKernel(fill, 64, 1, 1, 256, 1, 1, 0, NULL, fa, NULL) == 0, "fill the upper mapping");
    CHECK(cuLaunchKernel(verify, 64, 1, 1, 256, 1, 1, 0, NULL, va, NULL) == 0, "verify the lower one");
    CHECK(*(unsigned long long *)hostmem == 0, "%llu words differ", *(unsigned long long *)hostmem);
    salt = 999; /* verify with another pattern: every word differs */
    CHECK(cuLaunchKernel(verify, 64, 1, 1, 256, 1, 1, 0, NULL, va, NULL) == 0, "verify, wrong salt");
    CHECK(*(unsigned long long *)hostmem == nwords, "%llu of %llu differ", *(unsigned long long *)hostmem, nwords);
    fake_cuda_fail_launches(1);
    CHECK(cuLaunchKernel(fill, 64, 1, 1, 256, 1, 1, 0, NULL, fa, NULL) == 719, "an injected launch failure");
    CHECK(cuLaunchKernel(fill, 64, 1, 1, 256, 1, 1, 0, NULL, fa, NULL) == 0, "the next launch runs");
    CHECK(cuLaunchKernel(fill, 0, 1, 1, 256, 1, 1, 0, NULL, fa, NULL) == 1, "an empty grid");
    CHECK(cuStreamWriteValue32_v2(NULL, counter, 77, 0) == 0 && *(volatile uint32_t *)hostmem == 77,
          "a stream store to mapped host memory");
    CHECK(cuStreamWriteValue32_v2(NULL, counter + 1, 77, 0) == 1, "a misaligned store");
    const unsigned long long stores = fake_cuda_stream_writes();
    fake_cuda_fail_stream_writes(2, 801);
    CHECK(cuStreamWriteValue32_v2(NULL, counter, 78, 0) == 801 && cuStreamWriteValue32_v2(NULL, counter, 79, 0) == 801,
          "two injected store failures (NOT_SUPPORTED)");
    CHECK(*(volatile uint32_t *)hostmem == 77 && fake_cuda_stream_writes() == stores, "a failed store stores nothing");
    CHECK(cuStreamWriteValue32_v2(NULL, counter, 80, 0) == 0 && *(volatile uint32_t *)hostmem == 80 &&
          fake_cuda_stream_writes() == stores + 1, "the next store is queued and counted");
    CHECK(cuModuleUnload(mod) == 0 && cuModuleUnload(mod) == 400 && fake_cuda_live_modules() == 0, "unload");
    CHECK(cuMemFreeHost(hostmem) == 0, "free host");

    CHECK(cuMemUnmap(base, 2 * g) == 0, "unmap both mappings at once");
    CHECK(cuMemAddressFree(base, 2 * g) == 0 && cuMemRelease(h) == 0, "free");
    CHECK(live_vmm() == 0, "left: %d", live_vmm());
    free(pat);
    free(back);
}

static void test_host_memory(void)
{
    size_t len = 3 * 4096;
    char *p = aligned_alloc(4096, len);
    devptr d = 0;
    CHECK(cuMemHostGetDevicePointer_v2(&d, p, 0) == 1, "device pointer of unregistered memory");
    CHECK(cuMemHostRegister_v2(p, len, 3) == 0, "register");
    CHECK(cuMemHostRegister_v2(p + 4096, 4096, 3) == 712, "register an overlapping range");
    CHECK(cuMemHostGetDevicePointer_v2(&d, p + 100, 0) == 0 && d == (devptr)(uintptr_t)(p + 100), "device pointer");
    CHECK(cuMemHostUnregister(p + 4096) == 713, "unregister from the middle");
    CHECK(cuMemHostUnregister(p) == 0 && cuMemHostUnregister(p) == 713, "unregister, twice");
    CHECK(cuMemFreeHost(p) == 1, "cuMemFreeHost of memory it did not allocate");
    free(p);
    void *h = NULL;
    CHECK(cuMemHostAlloc(&h, len, 3) == 0 && h, "host alloc");
    CHECK(cuMemHostUnregister(h) == 713, "unregister allocated memory");
    CHECK(cuMemFreeHost(h) == 0 && cuMemFreeHost(h) == 1, "free, twice");
    CHECK(fake_cuda_host_live() == 0, "left: %d", fake_cuda_host_live());
}

/* ------------------------------------------------------------------ streams */

/* A host function that waits for its gate, then records the order it ran in. */
struct gate {
    pthread_mutex_t m;
    pthread_cond_t cv;
    int open[8], done_order[16], ndone; /* ids 0..7; the later cases run ids 6 and 7 again */
};
static struct gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, {0}, 0};
struct gated {
    int id;
};
static void gated_fn(void *arg)
{
    int id = ((struct gated *)arg)->id;
    pthread_mutex_lock(&gate.m);
    while (!gate.open[id])
        pthread_cond_wait(&gate.cv, &gate.m);
    if (gate.ndone < (int)(sizeof(gate.done_order) / sizeof(gate.done_order[0])))
        gate.done_order[gate.ndone++] = id;
    pthread_mutex_unlock(&gate.m);
}
static void open_gate(int id)
{
    pthread_mutex_lock(&gate.m);
    gate.open[id] = 1;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.m);
}
static int done_count(void)
{
    pthread_mutex_lock(&gate.m);
    int n = gate.ndone;
    pthread_mutex_unlock(&gate.m);
    return n;
}

struct legacy_copy {
    devptr src;
    uint32_t *dst;
    volatile int done;
};
static void *ctx;
static void *legacy_copier(void *arg)
{
    struct legacy_copy *c = arg;
    cuCtxSetCurrent(ctx); /* the context is per thread */
    cuMemcpyDtoHAsync_v2(c->dst, c->src, 4, NULL); /* the legacy stream: after the blocking streams */
    __atomic_store_n(&c->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Each stream's work runs in order on a thread of its own: 8 streams, each held by a gated host
 * function before a copy; released in reverse order, they complete in that order, and no copy
 * ran before its gate. The legacy stream waits for blocking streams. Memory freed while a copy
 * is queued makes that stream's next synchronisation fail, and the one after succeed. */
static void test_streams(void)
{
    enum { N = 8 };
    void *s[N];
    devptr d = 0;
    CHECK(cuMemAlloc_v2(&d, N * 4) == 0, "alloc");
    uint32_t vals[N], back[N];
    struct gated g[N];
    for (int i = 0; i < N; i++) {
        vals[i] = 100 + (uint32_t)i;
        back[i] = 0;
        g[i].id = i;
        CHECK(cuStreamCreate(&s[i], 1) == 0, "stream %d", i); /* non-blocking */
        CHECK(cuLaunchHostFunc(s[i], gated_fn, &g[i]) == 0, "host fn %d", i);
        CHECK(cuMemcpyHtoDAsync_v2(d + 4 * (devptr)i, &vals[i], 4, s[i]) == 0, "htod %d", i);
        CHECK(cuMemcpyDtoHAsync_v2(&back[i], d + 4 * (devptr)i, 4, s[i]) == 0, "dtoh %d", i);
    }
    CHECK(fake_cuda_live_streams() == N, "%d streams", fake_cuda_live_streams());
    usleep(20000);
    CHECK(done_count() == 0, "a host function ran before its gate");
    for (int i = 0; i < N; i++)
        CHECK(__atomic_load_n(&back[i], __ATOMIC_SEQ_CST) == 0, "stream %d's copies ran before its host function", i);
    for (int i = N - 1; i >= 0; i--) {
        open_gate(i);
        while (done_count() < N - i)
            usleep(100);
    }
    for (int i = 0; i < N; i++) {
        CHECK(cuStreamSynchronize(s[i]) == 0, "sync %d", i);
        CHECK(back[i] == vals[i], "stream %d: %u", i, back[i]);
        CHECK(gate.done_order[i] == N - 1 - i, "completion %d was stream %d", i, gate.done_order[i]);
    }

    /* the legacy default stream waits for a blocking stream's queued work */
    void *blocking = NULL;
    struct gated g2 = {7};
    gate.open[7] = 0;
    CHECK(cuStreamCreate(&blocking, 0) == 0, "blocking stream");
    CHECK(cuLaunchHostFunc(blocking, gated_fn, &g2) == 0, "gated work on it");
    uint32_t got = 0;
    struct legacy_copy lc = {d, &got, 0};
    pthread_t t;
    pthread_create(&t, NULL, legacy_copier, &lc);
    usleep(20000);
    CHECK(!__atomic_load_n(&lc.done, __ATOMIC_SEQ_CST), "a legacy-stream copy ran before a blocking stream's work");
    open_gate(7);
    pthread_join(t, NULL);
    CHECK(lc.done && got == vals[0], "the legacy copy after: %u", got);
    CHECK(cuStreamSynchronize(blocking) == 0 && cuStreamDestroy_v2(blocking) == 0, "blocking stream");

    /* an error while queued work runs belongs to the stream's next synchronisation */
    struct gated g3 = {6};
    gate.open[6] = 0;
    uint32_t sink = 0;
    CHECK(cuLaunchHostFunc(s[0], gated_fn, &g3) == 0, "gate");
    CHECK(cuMemcpyDtoHAsync_v2(&sink, d, 4, s[0]) == 0, "a copy queued (the memory is live now)");
    CHECK(cuMemFree_v2(d) == 0, "free it before the copy runs");
    open_gate(6);
    CHECK(cuStreamSynchronize(s[0]) == 700, "the copy of freed memory: CUDA_ERROR_ILLEGAL_ADDRESS");
    CHECK(cuStreamSynchronize(s[0]) == 0, "the next synchronisation is clean");
    for (int i = 0; i < N; i++)
        CHECK(cuStreamDestroy_v2(s[i]) == 0, "destroy %d", i);
    CHECK(cuStreamDestroy_v2(s[0]) == 1, "destroy twice");
    CHECK(fake_cuda_live_streams() == 0, "%d streams left", fake_cuda_live_streams());
}

static void test_failed_stream_creation(void)
{
    void *s = NULL;
    const int live = fake_cuda_live_streams();
    fake_cuda_fail_stream_creates(1);
    CHECK(cuStreamCreate(&s, 1) == 2 && fake_cuda_live_streams() == live, "an injected failure: OUT_OF_MEMORY");
    CHECK(cuStreamCreate(&s, 1) == 0 && s && cuStreamDestroy_v2(s) == 0, "the next creation");
}

int main(void)
{
    /* Read by the library's constructor: 64 granules of 2 MiB (an unknown item is ignored). */
    setenv("FAKE_CUDA_INJECT", "device_memory=134217728,no_such_fault=1", 1);
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib || !dlsym(lib, "fake_cuda_vmm_live_mappings")) {
        printf("FAIL: the emulated libcuda.so.1 is not on LD_LIBRARY_PATH (%s)\n", lib ? "a real driver" : dlerror());
        return 1;
    }
    LOAD(cuInit), LOAD(cuDevicePrimaryCtxRetain), LOAD(cuCtxSetCurrent), LOAD(cuMemGetAllocationGranularity);
    LOAD(cuMemCreate), LOAD(cuMemRelease), LOAD(cuMemAddressReserve), LOAD(cuMemAddressFree), LOAD(cuMemMap);
    LOAD(cuMemUnmap), LOAD(cuMemSetAccess), LOAD(cuMemcpyHtoDAsync_v2), LOAD(cuMemcpyDtoHAsync_v2);
    LOAD(cuMemHostAlloc), LOAD(cuMemFreeHost), LOAD(cuMemHostRegister_v2), LOAD(cuMemHostUnregister);
    LOAD(cuMemHostGetDevicePointer_v2), LOAD(cuStreamWriteValue32_v2), LOAD(cuModuleLoadData);
    LOAD(cuModuleUnload), LOAD(cuModuleGetFunction), LOAD(cuLaunchKernel), LOAD(fake_cuda_vmm_live_handles);
    LOAD(fake_cuda_vmm_live_reservations), LOAD(fake_cuda_vmm_live_mappings), LOAD(fake_cuda_host_live);
    LOAD(fake_cuda_live_modules), LOAD(fake_cuda_fail_launches), LOAD(cuStreamCreate), LOAD(cuStreamDestroy_v2);
    LOAD(cuStreamSynchronize), LOAD(cuLaunchHostFunc), LOAD(cuMemAlloc_v2), LOAD(cuMemFree_v2);
    LOAD(fake_cuda_live_streams), LOAD(fake_cuda_fail_stream_writes), LOAD(fake_cuda_stream_writes);
    LOAD(fake_cuda_set_device_memory), LOAD(fake_cuda_device_memory_used), LOAD(fake_cuda_fail_mapping);
    LOAD(fake_cuda_fail_stream_creates), LOAD(cuMemGetInfo_v2), LOAD(cuDeviceTotalMem_v2), LOAD(cuDeviceGetAttribute);

    CHECK(cuInit(0) == 0 && cuDevicePrimaryCtxRetain(&ctx, 0) == 0 && cuCtxSetCurrent(ctx) == 0, "context");
    size_t g = 0;
    CHECK(cuMemGetAllocationGranularity(&g, &dev0, 0) == 0 && g && (g & (g - 1)) == 0, "granularity %zu", g);
    if (g) {
        test_memory_info_and_env(g);
        test_vmm_misuse(g);
        test_device_memory(g);
        test_double_mapping(g);
    }
    test_host_memory();
    test_streams();
    test_failed_stream_creation();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
