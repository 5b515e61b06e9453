/* gpu_rx.h: requests whose data a transport left in GPU memory (a DPDK port with a GPU payload pool): the receive burst in the payload device's context, each request copied into its Tensor Queue element on one stream, and that stream waited for before the calls become visible. */
#ifndef SRPC_GPU_RX_H
#define SRPC_GPU_RX_H

#include <stdint.h>

#include "gpu/gpu_driver.h"
#include "server/server_state.h"

/* The stream and call list, when the transport's payloads land in device memory (else
 * nothing). Returns 0 or a GPU error. */
int srpc_gpu_rx_init(srpc_server_t *srv);
void srpc_gpu_rx_free(srpc_server_t *srv);
/* Around a receive burst: makes the payload device's context current (once for the transport's
 * copies and ours) and puts the thread's own back. Without device payloads, nothing. rx. */
int srpc_gpu_rx_enter_rx(srpc_server_t *srv, srpc_CUcontext *saved);
void srpc_gpu_rx_leave_rx(srpc_server_t *srv, int entered, srpc_CUcontext saved);
/* Queues the copies of the request at device address dev (len bytes) into element seq of fn's
 * input queues, laid out as srpc_tq_scatter lays it out: device to device into a GPU function's
 * device TQs, device to host into a host function's TQs. Returns 0 or a GPU error. */
int srpc_gpu_rx_copy_in_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t seq, uint64_t dev, uint32_t len);
/* Waits for the burst's copies. If they failed, their calls are marked so that the worker
 * answers them INTERNAL instead of running them on whatever their elements held before. */
void srpc_gpu_rx_finish_locked(srpc_server_t *srv);

#endif /* SRPC_GPU_RX_H */
