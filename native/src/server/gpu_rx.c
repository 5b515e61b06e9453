/* gpu_rx.c: requests whose data stayed in GPU memory, into the Tensor Queues (see gpu_rx.h). */
#include "server/gpu_rx.h"

#include <errno.h>
#include <stdlib.h>

#include "server/callring.h"
#include "server/cost.h"

int srpc_gpu_rx_init(srpc_server_t *srv)
{
    const int dev = srv->tp->payload_device;
    if (dev < 0)
        return 0;
    if (!(srv->rx.dev_calls = calloc(srv->rx.slots.burst, sizeof(*srv->rx.dev_calls))))
        return -ENOMEM;
    return srpc_gpu_stream_create(dev, &srv->rx.dev_stream);
}

void srpc_gpu_rx_free(srpc_server_t *srv)
{
    srpc_gpu_stream_destroy(srv->rx.dev_stream);
    srv->rx.dev_stream = 0;
    free(srv->rx.dev_calls);
    srv->rx.dev_calls = NULL;
}

int srpc_gpu_rx_enter_rx(srpc_server_t *srv, srpc_CUcontext *saved)
{
    SRPC_ASSERT_RX(srv);
    *saved = NULL;
    return srv->rx.dev_stream && srpc_gpu_enter(srv->tp->payload_device, saved) == 0;
}

void srpc_gpu_rx_leave_rx(srpc_server_t *srv, int entered, srpc_CUcontext saved)
{
    SRPC_ASSERT_RX(srv);
    if (entered)
        srpc_gpu_leave(saved);
}

int srpc_gpu_rx_copy_in_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t seq, uint64_t dev, uint32_t len)
{
    SRPC_ASSERT_LOCKED(srv);
    uint32_t off = 0;
    for (uint32_t k = 0; k < fn->n_in && off < len; k++) {
        uint32_t n = fn->n_in == 1 ? len : fn->in_size[k];
        int r = fn->gpu_device >= 0
                    ? srpc_gpu_copy_dtod(srpc_dtq_elem(fn->in_dtq[k], seq), dev + off, n, srv->rx.dev_stream)
                    : srpc_gpu_copy_dtoh(srpc_tq_elem(fn->in_tq[k], seq), dev + off, n, srv->rx.dev_stream);
        if (r)
            return r;
        off += n;
    }
    srv->rx.dev_calls[srv->rx.dev_copies++] = (struct srpc_dev_call){fn, seq}; /* one per datagram */
    return 0;
}

void srpc_gpu_rx_finish_locked(srpc_server_t *srv)
{
    SRPC_ASSERT_LOCKED(srv);
    const unsigned n = srv->rx.dev_copies;
    srv->rx.dev_copies = 0;
    if (n == 0)
        return;
    const int failed = srpc_gpu_stream_drain(srv->rx.dev_stream) != 0; /* the elements are read after it */
    for (unsigned i = 0; i < n; i++) {
        srpc_fn_t *fn = srv->rx.dev_calls[i].fn;
        if (failed)
            srpc_ring_refuse_locked(srv, fn, srv->rx.dev_calls[i].seq, SRPC_E_INTERNAL,
                                    "the copy of the request from GPU memory failed");
        else if (fn->cost_from == SRPC_COST_TABLE) /* its keys are in the host elements now */
            srpc_cost_admit_locked(srv, fn, srv->rx.dev_calls[i].seq, 0);
    }
}
