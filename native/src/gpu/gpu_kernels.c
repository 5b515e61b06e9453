/* gpu_kernels.c: loads the embedded kernel fatbin into each device's primary context once and looks up its functions. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "gpu/gpu_kernels.h"

static struct srpc_gpu_kernels kernels[SRPC_GPU_MAX_DEVICES];
static int loaded[SRPC_GPU_MAX_DEVICES]; /* 1 once kernels[d] is complete (release order) */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

int srpc_gpu_kernels_built(void)
{
    if (srpc_kernels_fatbin_size == 0)
        return srpc_gpu_failf(-ENOTSUP, "splitrpc was built without a CUDA compiler: no GPU kernels");
    return 0;
}

static int load(int device, struct srpc_gpu_kernels *k)
{
    srpc_CUresult r = srpc_cu.ModuleLoadData(&k->mod, srpc_kernels_fatbin);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuModuleLoadData(splitrpc kernels)", r);
    static const struct {
        const char *name;
        size_t off;
    } fns[] = {
        {"srpc_mirror_fill", offsetof(struct srpc_gpu_kernels, mirror_fill)},
        {"srpc_mirror_verify", offsetof(struct srpc_gpu_kernels, mirror_verify)},
        {"srpc_o2_vecadd", offsetof(struct srpc_gpu_kernels, o2_vecadd)},
        {"srpc_emb_query", offsetof(struct srpc_gpu_kernels, emb_query)},
        {"srpc_emb_replace", offsetof(struct srpc_gpu_kernels, emb_replace)},
        {"srpc_emb_update", offsetof(struct srpc_gpu_kernels, emb_update)},
        {"srpc_emb_dump", offsetof(struct srpc_gpu_kernels, emb_dump)},
        {"srpc_emb_clear", offsetof(struct srpc_gpu_kernels, emb_clear)},
    };
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
        srpc_CUfunction *f = (srpc_CUfunction *)((char *)k + fns[i].off);
        r = srpc_cu.ModuleGetFunction(f, k->mod, fns[i].name);
        if (r != SRPC_CUDA_SUCCESS) {
            char call[80];
            snprintf(call, sizeof(call), "cuModuleGetFunction(%s) on device %d", fns[i].name, device);
            int rc = srpc_gpu_fail(call, r);
            srpc_cu.ModuleUnload(k->mod);
            k->mod = NULL;
            return rc;
        }
    }
    return 0;
}

int srpc_gpu_kernels(int device, const struct srpc_gpu_kernels **out)
{
    int rc = srpc_gpu_kernels_built();
    if (rc)
        return rc;
    if (device < 0 || device >= SRPC_GPU_MAX_DEVICES)
        return srpc_gpu_failf(-ENODEV, "no CUDA device %d", device);
    if (!__atomic_load_n(&loaded[device], __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&load_lock);
        if (!loaded[device]) {
            rc = load(device, &kernels[device]);
            if (rc == 0)
                __atomic_store_n(&loaded[device], 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&load_lock);
        if (rc)
            return rc;
    }
    *out = &kernels[device];
    return 0;
}
