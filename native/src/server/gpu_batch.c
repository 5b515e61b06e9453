/* gpu_batch.c: a GPU function's batch on its stream: requests from host staging to the device TQ, outputs back, the done word; or the whole batch handed to the O2 persistent kernel. Worker thread. */
#include <errno.h>

#include "gpu/gpu_driver.h"
#include "server/completion.h"
#include "splitrpc_gpu.h"

/* Queues the copies of tensor k of a batch between its host staging TQ and its device TQ,
 * which have the same ring: the elements sit at the same offsets in both. A batch that wraps
 * is copied in two pieces, each within the lower (page-locked) mapping of the staging TQ. */
static int copy_tensor(srpc_tq_t *hq, srpc_dtq_t *dq, uint64_t first, uint32_t count, int to_device,
                       uint64_t stream)
{
    const size_t ring = srpc_tq_ring_bytes(hq);
    size_t off = (size_t)(srpc_tq_elem(hq, first) - srpc_tq_base(hq));
    size_t left = (size_t)count * srpc_tq_elem_size(hq);
    while (left) {
        size_t len = left < ring - off ? left : ring - off;
        uint8_t *h = srpc_tq_base(hq) + off;
        uint64_t d = srpc_dtq_base(dq) + off;
        int r = to_device ? srpc_gpu_copy_htod(d, h, len, stream) : srpc_gpu_copy_dtoh(h, d, len, stream);
        if (r)
            return r;
        left -= len;
        off = 0;
    }
    return 0;
}

/* Whether call first + i of fn's batch has its request in the device TQs already. */
static int in_device(const srpc_fn_t *fn, uint64_t first, uint32_t i)
{
    return fn->calls[(first + i) % fn->capacity].dev_in == SRPC_DEV_IN_DEVICE;
}

/* The requests of a batch go from the staging TQs to the device TQs, except those the engine
 * copied there straight from GPU memory (SRPC_DEV_IN_DEVICE): one copy per run of the others. */
int srpc_server_stage_in(srpc_server_t *srv, const srpc_batch_t *b, uint64_t stream)
{
    srpc_fn_t *fn = srpc_completion_open_fn_w(srv, b);
    if (!fn || fn->gpu_device < 0)
        return -EINVAL;
    for (uint32_t i = 0, j; i < b->count; i = j) {
        while (i < b->count && in_device(fn, b->first_seq, i))
            i++;
        for (j = i; j < b->count && !in_device(fn, b->first_seq, j); j++)
            ;
        for (uint32_t k = 0; i < j && k < fn->n_in; k++) {
            int r = copy_tensor(fn->in_tq[k], fn->in_dtq[k], b->first_seq + i, j - i, 1, stream);
            if (r)
                return r;
        }
    }
    return 0;
}

int srpc_server_submit(srpc_server_t *srv, srpc_batch_t *b, uint64_t stream)
{
    srpc_fn_t *fn = srpc_completion_open_fn_w(srv, b);
    if (!fn || fn->gpu_device < 0)
        return -EINVAL;
    for (uint32_t k = 0; k < fn->n_out; k++) {
        int r = copy_tensor(fn->out_tq[k], fn->out_dtq[k], b->first_seq, b->count, 0, stream);
        if (r)
            return r; /* still open: the caller completes it with an error */
    }
    const uint64_t idx = b->first_seq % fn->capacity;
    uint32_t *done = srpc_completion_hand_back_w(srv, fn, b);
    if (srpc_gpu_signal(stream, done, fn->done_dev + idx * sizeof(uint32_t), SRPC_DONE) != 0) {
        /* No stream-ordered signal: wait here instead, so that no call is lost. */
        int r = srpc_gpu_stream_drain(stream); /* the batch's slots are handed back after it */
        __atomic_store_n(done, SRPC_DONE | (uint32_t)(r ? SRPC_E_INTERNAL : 0), __ATOMIC_RELEASE);
    }
    return 0;
}

/* O2: the kernel reads the requests from the device TQ and writes the outputs straight into
 * the page-locked output staging through its device mapping. The staging ring is mapped
 * twice on the host but registered once, so a batch that wraps there gets two output
 * addresses: one up to the end of the ring (an element may straddle it), one from its start. */
int srpc_server_submit_o2(srpc_server_t *srv, srpc_batch_t *b, struct srpc_o2 *o2, uint64_t stream)
{
    srpc_fn_t *fn = srpc_completion_open_fn_w(srv, b);
    if (!fn || fn->gpu_device < 0 || !o2)
        return -EINVAL;
    uint32_t floats = srpc_o2_vector_floats(o2);
    if (fn->n_in != 1 || fn->n_out != 1 || fn->in_size[0] != fn->out_size[0] ||
        fn->in_size[0] != (uint64_t)floats * sizeof(float))
        return srpc_gpu_failf(-EINVAL, "srpc_server_submit_o2: function %u is not %u floats in and out",
                              fn->func_id, floats);
    if (!fn->staging_pinned)
        return srpc_gpu_failf(-ENOTSUP, "srpc_server_submit_o2: the output staging of function %u is not "
                              "page-locked, so the GPU cannot write it", fn->func_id);
    srpc_tq_t *hq = fn->out_tq[0];
    const size_t ring = srpc_tq_ring_bytes(hq), size = srpc_tq_elem_size(hq);
    const size_t off = (size_t)(srpc_tq_elem(hq, b->first_seq) - srpc_tq_base(hq));
    const size_t bytes = (size_t)b->count * size, room = ring - off; /* room: before the ring's end */
    const uint64_t idx = b->first_seq % fn->capacity;
    srpc_o2_batch_t ob = {
        .in = srpc_dtq_elem(fn->in_dtq[0], b->first_seq),
        .out = fn->out_stage_dev[0] + off,
        .out_rest = fn->out_stage_dev[0],
        .count = b->count,
        .out_floats = (uint32_t)((bytes < room ? bytes : room) / sizeof(float)),
        .done = &fn->done_words[idx],
        .done_dev = fn->done_dev + idx * sizeof(uint32_t),
        .done_value = SRPC_DONE,
    };
    int r = srpc_o2_submit(o2, &ob, stream);
    if (r)
        return r; /* still open (-EBUSY included): the caller retries or completes it */
    srpc_completion_hand_back_w(srv, fn, b);
    return 0;
}
