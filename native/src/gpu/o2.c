/* o2.c: GPU-managed orchestration (O2): one persistent vecadd kernel fed through a descriptor ring whose doorbells are rung by cuStreamWriteValue32. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/tunables.h"

#include "gpu/gpu_driver.h"
#include "gpu/gpu_kernels.h"
#include "gpu/o2_abi.h"
#include "splitrpc_gpu.h"

struct srpc_o2 {
    struct srpc_o2_ctrl *ctrl;   /* control block: pinned, device-mapped host memory */
    srpc_CUdeviceptr ctrl_dev;   /* its device address, the kernel's argument */
    srpc_CUstream stream;        /* the kernel's own non-blocking stream */
    uint32_t submitted;          /* batches handed over so far; the submitting thread's */
    uint32_t n_floats;
    int device;
};

/* Frees what start made; the kernel is not running (never launched, or finished). */
static void o2_free(srpc_o2_t *o)
{
    srpc_CUresult r;
    if (o->stream && (r = srpc_cu.StreamDestroy(o->stream)) != SRPC_CUDA_SUCCESS)
        srpc_gpu_fail("cuStreamDestroy", r);
    if (o->ctrl && (r = srpc_cu.MemFreeHost(o->ctrl)) != SRPC_CUDA_SUCCESS)
        srpc_gpu_fail("cuMemFreeHost", r);
    free(o);
}

/* Checks in this order: arguments (-EINVAL), kernels compiled in (-ENOTSUP), driver and
 * device (-ENODEV), stream memory operations on the device (-ENOTSUP). */
int srpc_o2_start(int device, uint32_t n_floats, srpc_o2_t **out)
{
    if (!out)
        return srpc_gpu_failf(-EINVAL, "srpc_o2_start: NULL out");
    *out = NULL;
    if (n_floats == 0 || device < 0)
        return srpc_gpu_failf(-EINVAL, "srpc_o2_start: device %d, n_floats %u", device, n_floats);
    int rc = srpc_gpu_kernels_built();
    if (rc || (rc = srpc_gpu_use_device(device)))
        return rc;
    if (!srpc_gpu_memops(device))
        return srpc_gpu_failf(-ENOTSUP, "CUDA device %d: no stream memory operations (cuStreamWriteValue32)",
                              device);
    const struct srpc_gpu_kernels *k;
    if ((rc = srpc_gpu_kernels(device, &k)))
        return rc;

    srpc_o2_t *o = calloc(1, sizeof(*o));
    if (!o)
        return srpc_gpu_failf(-ENOMEM, "srpc_o2_start: out of host memory");
    o->n_floats = n_floats;
    o->device = device;
    void *ctrl = NULL;
    srpc_CUresult r = srpc_cu.MemHostAlloc(&ctrl, sizeof(*o->ctrl),
                                           SRPC_CU_MEMHOSTALLOC_PORTABLE | SRPC_CU_MEMHOSTALLOC_DEVICEMAP);
    if (r != SRPC_CUDA_SUCCESS) {
        rc = srpc_gpu_fail("cuMemHostAlloc", r);
        goto fail;
    }
    o->ctrl = ctrl;
    memset(o->ctrl, 0, sizeof(*o->ctrl));
    if ((r = srpc_cu.MemHostGetDevicePointer(&o->ctrl_dev, ctrl, 0)) != SRPC_CUDA_SUCCESS) {
        rc = srpc_gpu_fail("cuMemHostGetDevicePointer", r);
        goto fail;
    }
    if ((r = srpc_cu.StreamCreate(&o->stream, SRPC_CU_STREAM_NON_BLOCKING)) != SRPC_CUDA_SUCCESS) {
        rc = srpc_gpu_fail("cuStreamCreate", r);
        o->stream = NULL;
        goto fail;
    }
    void *args[] = {&o->ctrl_dev, &o->n_floats};
    r = srpc_cu.LaunchKernel(k->o2_vecadd, 1, 1, 1, SRPC_O2_THREADS, 1, 1, 0, o->stream, args, NULL);
    if (r != SRPC_CUDA_SUCCESS) {
        rc = srpc_gpu_fail("cuLaunchKernel(srpc_o2_vecadd)", r);
        goto fail;
    }
    srpc_gpu_held(SRPC_HELD_O2, 1);
    *out = o;
    return 0;
fail:
    o2_free(o);
    return rc;
}

int srpc_o2_submit(srpc_o2_t *o, const srpc_o2_batch_t *b, uint64_t stream)
{
    if (!o || !b || !b->in || !b->out || b->count == 0 || !b->done)
        return srpc_gpu_failf(-EINVAL, "srpc_o2_submit: NULL handle or address, or no vectors");
    const uint64_t total = (uint64_t)b->count * o->n_floats;
    if (total > UINT32_MAX || b->out_floats > total || (b->out_floats && b->out_floats < total && !b->out_rest))
        return srpc_gpu_failf(-EINVAL, "srpc_o2_submit: %u vectors of %u floats, %u of them at out",
                              b->count, o->n_floats, b->out_floats);
    const uint32_t first = b->out_floats ? b->out_floats : (uint32_t)total;
    int rc = srpc_gpu_use_device(o->device);
    if (rc)
        return rc;
    srpc_CUresult r;
    srpc_CUdeviceptr done_addr = b->done_dev;
    if (!done_addr && (r = srpc_cu.MemHostGetDevicePointer(&done_addr, b->done, 0)) != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuMemHostGetDevicePointer(done)", r);

    /* A slot is free again once the kernel has finished the batch that used it last. */
    uint32_t consumed = __atomic_load_n(&o->ctrl->consumed, __ATOMIC_ACQUIRE);
    if ((uint32_t)(o->submitted - consumed) >= SRPC_O2_SLOTS)
        return srpc_gpu_failf(-EBUSY, "srpc_o2_submit: %u batches outstanding", SRPC_O2_SLOTS);

    uint32_t idx = o->submitted % SRPC_O2_SLOTS;
    struct srpc_o2_slot *slot = &o->ctrl->slot[idx];
    slot->in = b->in;
    slot->out = b->out;
    slot->out_rest = first < total ? b->out_rest : 0;
    slot->done = done_addr;
    slot->out_floats = first;
    slot->done_value = b->done_value;
    __atomic_store_n(b->done, 0, __ATOMIC_RELAXED);
    /* A sequentially consistent store (a full barrier): the descriptor and the cleared
     * flag are in memory before the driver queues the doorbell write, which the GPU
     * performs only after the stream's earlier work. */
    __atomic_store_n(&slot->count, b->count, __ATOMIC_SEQ_CST);
    srpc_CUdeviceptr bell = o->ctrl_dev + offsetof(struct srpc_o2_ctrl, slot) +
                            (srpc_CUdeviceptr)idx * sizeof(struct srpc_o2_slot) +
                            offsetof(struct srpc_o2_slot, ready);
    r = srpc_cu.StreamWriteValue32(srpc_gpu_stream(stream), bell, o->submitted + 1,
                                   SRPC_CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r != SRPC_CUDA_SUCCESS)
        return srpc_gpu_fail("cuStreamWriteValue32(O2 doorbell)", r);
    o->submitted++;
    return 0;
}

uint32_t srpc_o2_vector_floats(const srpc_o2_t *o)
{
    return o ? o->n_floats : 0;
}

/* The diagnosis of an O2 kernel that has not returned: what was handed over, what it served,
 * and whether the doorbell of the first batch it has not served was rung (the submitting
 * stream's write ran: the kernel does not see it) or not (that stream has not got there). */
static int o2_hung(const srpc_o2_t *o, unsigned waited_ms)
{
    uint32_t consumed = __atomic_load_n(&o->ctrl->consumed, __ATOMIC_ACQUIRE);
    uint32_t rung = 0, unserved = o->submitted - consumed;
    if (unserved > SRPC_O2_SLOTS)
        unserved = SRPC_O2_SLOTS; /* a consumed count past submitted: reported as read */
    for (uint32_t s = consumed; s != consumed + unserved; s++)
        rung += __atomic_load_n(&o->ctrl->slot[s % SRPC_O2_SLOTS].ready, __ATOMIC_ACQUIRE) == s + 1;
    uint32_t next = consumed % SRPC_O2_SLOTS;
    return srpc_gpu_failf(-ETIMEDOUT,
                          "srpc_o2_stop: the O2 kernel has not returned after %u ms: submitted %u, consumed %u, "
                          "stop_seq %u; %u of %u unserved doorbells rung; slot %u ready %u (wants %u); kernel "
                          "and control block left in place",
                          waited_ms, o->submitted, consumed, o->ctrl->stop_seq, rung, o->submitted - consumed,
                          next, o->ctrl->slot[next].ready, consumed + 1);
}

/* Every batch submitted so far is served before the kernel returns: their doorbells must come
 * (their streams must make progress). The wait is srpc_gpu_wait_stream's (its deadline,
 * SRPC_GPU_WAIT_TIMEOUT_MS); past it, -ETIMEDOUT with o2_hung's diagnosis, and the handle, its
 * control block and stream are leaked on purpose (the kernel may still read them). */
int srpc_o2_stop(srpc_o2_t *o)
{
    if (!o)
        return 0;
    int rc = srpc_gpu_use_device(o->device);
    __atomic_store_n(&o->ctrl->stop_seq, o->submitted, __ATOMIC_RELAXED);
    __atomic_store_n(&o->ctrl->stop, 1, __ATOMIC_SEQ_CST); /* after stop_seq, a full barrier */
    int w = srpc_gpu_wait_stream(o->stream, "the O2 kernel", 0);
    if (w == -ETIMEDOUT)
        return o2_hung(o, SRPC_GPU_WAIT_TIMEOUT_MS);
    if (w)
        rc = w; /* the kernel's fault, as the last error */
    o2_free(o);
    srpc_gpu_held(SRPC_HELD_O2, -1);
    return rc;
}
