/* function.c: a registered function's storage (see function.h). */
#include "server/function.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/session.h" /* SRPC_V5_TAIL_MAX */
#include "core/tunables.h"
#include "gpu/gpu_driver.h"
#include "server/cost.h"

/* Frees a staging TQ of a GPU function (page-locked when pinned) or a host TQ. */
static void staging_free(srpc_tq_t *tq, int pinned)
{
    if (tq && pinned)
        srpc_gpu_host_unregister(srpc_tq_base(tq));
    srpc_tq_destroy(tq);
}

void srpc_function_free(srpc_fn_t *fn)
{
    if (!fn)
        return;
    for (uint32_t k = 0; k < SRPC_MAX_TENSORS; k++) {
        staging_free(fn->in_tq[k], fn->staging_pinned);
        staging_free(fn->out_tq[k], fn->staging_pinned);
        srpc_dtq_destroy(fn->in_dtq[k]);
        srpc_dtq_destroy(fn->out_dtq[k]);
    }
    if (fn->gpu_device >= 0)
        srpc_gpu_host_free(fn->done_words);
    else
        free(fn->done_words);
    if (fn->calls)
        for (uint32_t i = 0; i < fn->capacity; i++)
            free(fn->calls[i].batch_msg), free(fn->calls[i].fail_msg);
    free(fn->calls);
    free(fn->batch_in_len);
    free(fn->batch_out_len);
    srpc_cost_free(fn);
    free(fn);
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Element seq of a TQ sits at (seq * elem) mod ring, which repeats every ring / gcd(elem, ring)
 * elements; the function's period is the lcm over its TQs (0 when above 2^24: not worth it). */
static uint64_t address_period(const srpc_fn_t *fn)
{
    uint64_t period = 1;
    for (uint32_t k = 0; k < fn->n_in + fn->n_out; k++) {
        const srpc_tq_t *tq = k < fn->n_in ? fn->in_tq[k] : fn->out_tq[k - fn->n_in];
        uint64_t ring = srpc_tq_ring_bytes(tq), p = ring / gcd64(srpc_tq_elem_size(tq), ring);
        period = period / gcd64(period, p) * p;
        if (period > (1u << 24))
            return 0;
    }
    return period;
}

/* One Tensor Queue of a GPU function: the device TQ and its host staging TQ, laid out slot
 * for slot (same ring size, so element seq sits at the same offset in both). */
static int gpu_queue(int dev, uint32_t size, uint32_t capacity, size_t gran, srpc_dtq_t **dq, srpc_tq_t **hq)
{
    int r = srpc_dtq_create(dev, size ? size : 1, capacity, dq);
    if (!r)
        r = srpc_tq_create_aligned(size ? size : 1, capacity, gran, hq);
    if (!r && srpc_tq_ring_bytes(*hq) != srpc_dtq_ring_bytes(*dq))
        r = -EIO; /* cannot happen when both round to the same granularity */
    return r;
}

/* The queues of a GPU function: device TQs, pinned host staging and done words in pinned,
 * device-mapped memory (the GPU writes them with srpc_gpu_signal). A staging TQ that cannot be
 * page-locked still works, with synchronous copies. */
static int gpu_queues(srpc_fn_t *fn, int dev)
{
    size_t gran;
    int r = srpc_gpu_init(dev);
    if (!r)
        r = srpc_gpu_granularity(dev, &gran);
    fn->gpu_device = dev; /* from here on srpc_function_free releases GPU resources */
    for (uint32_t k = 0; !r && k < fn->n_in; k++)
        r = gpu_queue(dev, fn->in_size[k], fn->capacity, gran, &fn->in_dtq[k], &fn->in_tq[k]);
    for (uint32_t k = 0; !r && k < fn->n_out; k++)
        r = gpu_queue(dev, fn->out_size[k], fn->capacity, gran, &fn->out_dtq[k], &fn->out_tq[k]);
    if (!r) {
        void *words;
        r = srpc_gpu_host_alloc(fn->capacity * sizeof(uint32_t), &words, &fn->done_dev);
        fn->done_words = r ? NULL : words;
    }
    if (r)
        return r;
    int pinned = 1;
    for (uint32_t k = 0; pinned && k < fn->n_in + fn->n_out; k++) {
        srpc_tq_t *tq = k < fn->n_in ? fn->in_tq[k] : fn->out_tq[k - fn->n_in];
        uint64_t dev_addr = 0;
        if (srpc_gpu_host_register(srpc_tq_base(tq), srpc_tq_ring_bytes(tq), &dev_addr) != 0) {
            for (uint32_t j = 0; j < k; j++) /* all or none, so that srpc_function_free knows */
                srpc_gpu_host_unregister(srpc_tq_base(j < fn->n_in ? fn->in_tq[j] : fn->out_tq[j - fn->n_in]));
            pinned = 0;
        } else if (k >= fn->n_in) {
            fn->out_stage_dev[k - fn->n_in] = dev_addr;
        }
    }
    fn->staging_pinned = pinned;
    return 0;
}

void srpc_func_config_init(srpc_func_config_t *fc)
{
    memset(fc, 0, sizeof(*fc));
    fc->n_in = fc->n_out = 1;
    fc->capacity = SRPC_DEF_TQ_CAPACITY;
    fc->max_batch = SRPC_DEF_MAX_BATCH;
}

int srpc_function_create(const srpc_server_config_t *cfg, const srpc_func_config_t *fc, srpc_fn_t **out)
{
    if (fc->n_in == 0 || fc->n_out == 0 || fc->n_in > SRPC_MAX_TENSORS || fc->n_out > SRPC_MAX_TENSORS ||
        (fc->raw && (fc->n_in != 1 || fc->n_out != 1)) || fc->max_batch == 0 || !fc->in_sizes || !fc->out_sizes ||
        (fc->native && (fc->on_gpu || fc->max_inflight))) /* a native function runs inline, on the host */
        return -EINVAL;
    srpc_fn_t *fn = calloc(1, sizeof(*fn));
    if (!fn)
        return -ENOMEM;
    fn->gpu_device = -1; /* a host function until its GPU queues exist */
    fn->cb_slow = 1;     /* until its first batch shows otherwise (rx_owner.c) */
    fn->away_ns = SRPC_AWAY_UNKNOWN;
    fn->func_id = fc->func_id;
    fn->raw = fc->raw;
    fn->n_in = fc->n_in;
    fn->n_out = fc->n_out;
    fn->capacity = fc->capacity ? fc->capacity : SRPC_DEF_TQ_CAPACITY;
    fn->max_batch = fc->max_batch < fn->capacity ? fc->max_batch : fn->capacity;
    fn->max_delay_us = fc->max_delay_us;
    fn->deadline_ns = (uint64_t)fc->deadline_us * 1000;
    fn->max_inflight = fc->max_inflight;
    fn->native = fc->native;
    fn->native_ctx = fc->native_ctx;

    fn->priority = fc->priority;
    fn->weight = fc->weight;
    uint64_t req = 0, resp = 0;
    int r = 0;
    for (uint32_t k = 0; k < fc->n_in; k++) {
        fn->in_size[k] = fc->in_sizes[k];
        req += fc->in_sizes[k];
        if (fc->in_sizes[k] == 0 && !fc->raw)
            r = -EINVAL;
    }
    for (uint32_t k = 0; k < fc->n_out; k++) {
        fn->out_size[k] = fc->out_sizes[k];
        resp += fc->out_sizes[k];
    }
    /* The smallest reply segment must still number a reply in 16 bits, with the longest tail a
     * reply may carry (version 5's with AEGIS-128L: SRPC_V5_TAIL_MAX) taken off its data. */
    uint32_t min_seg = cfg->seg_size < cfg->seg_size_loopback ? cfg->seg_size : cfg->seg_size_loopback;
    min_seg = min_seg > SRPC_V5_TAIL_MAX + 1 ? min_seg - SRPC_V5_TAIL_MAX : 1;
    if (req > cfg->max_message || resp > UINT32_MAX || srpc_seg_count((uint32_t)resp, min_seg) > UINT16_MAX)
        r = -EMSGSIZE;
    fn->req_bytes = (uint32_t)req;
    fn->resp_bytes = (uint32_t)resp;
    if (!r && fc->on_gpu && (fc->raw || fc->gpu_device < 0 || fc->cost_from == SRPC_COST_TABLE))
        r = -EINVAL; /* a cost table's keys are read from host memory */
    if (!r && fc->on_gpu)
        r = gpu_queues(fn, fc->gpu_device);
    for (uint32_t k = 0; !r && !fc->on_gpu && k < fc->n_in; k++)
        r = srpc_tq_create(fn->in_size[k] ? fn->in_size[k] : 1, fn->capacity, &fn->in_tq[k]);
    for (uint32_t k = 0; !r && !fc->on_gpu && k < fc->n_out; k++)
        r = srpc_tq_create(fn->out_size[k] ? fn->out_size[k] : 1, fn->capacity, &fn->out_tq[k]);
    if (!r)
        fn->period = address_period(fn);
    if (!r) {
        fn->calls = calloc(fn->capacity, sizeof(*fn->calls));
        fn->batch_in_len = calloc(fn->max_batch, sizeof(uint32_t));
        fn->batch_out_len = calloc(fn->max_batch, sizeof(uint32_t));
        if (!fc->on_gpu)
            fn->done_words = calloc(fn->capacity, sizeof(uint32_t));
        if (!fn->calls || !fn->batch_in_len || !fn->batch_out_len || !fn->done_words)
            r = -ENOMEM;
    }
    if (!r)
        r = srpc_cost_setup(fn, fc);
    if (r) {
        srpc_function_free(fn);
        return r;
    }
    *out = fn;
    return 0;
}
