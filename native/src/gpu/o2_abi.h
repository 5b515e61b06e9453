/* o2_abi.h: the O2 control block in pinned, device-mapped host memory, shared by o2.c (host side) and native/cuda/kernels.cu (the persistent kernel). */
#ifndef SRPC_O2_ABI_H
#define SRPC_O2_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "splitrpc_gpu.h" /* SRPC_O2_SLOTS */

#define SRPC_O2_THREADS 256 /* threads of the one block of the persistent kernel */

/* One batch, written by the submitting thread before it rings the slot's doorbell. */
struct srpc_o2_slot {
    uint64_t in;         /* device address of count * n_floats input floats (contiguous) */
    uint64_t out;        /* device-accessible address of the first out_floats output floats */
    uint64_t out_rest;   /* ... and of the others (an output ring that wraps) */
    uint64_t done;       /* device address of the batch's done word (uint32_t, mapped host memory) */
    uint32_t count;      /* vectors in the batch */
    uint32_t out_floats; /* 1..count * n_floats */
    uint32_t done_value; /* what the done word is set to */
    uint32_t ready;      /* the doorbell: batch number + 1 (mod 2^32), written by cuStreamWriteValue32
                            on the submitter's stream once that stream's earlier work is done */
};

/* Batch number s (counted from 0 since the start) uses slot s % SRPC_O2_SLOTS. */
struct srpc_o2_ctrl {
    uint32_t stop;      /* host: set to 1 (after stop_seq) to end the kernel */
    uint32_t stop_seq;  /* host: the number of batches submitted; the kernel serves them all first */
    uint32_t consumed;  /* kernel: the number of batches finished (done flag already set) */
    uint32_t pad[13];   /* the slots start on a line of their own */
    struct srpc_o2_slot slot[SRPC_O2_SLOTS];
};

#ifdef __cplusplus
#define SRPC_O2_ASSERT(c, m) static_assert(c, m)
#else
#define SRPC_O2_ASSERT(c, m) _Static_assert(c, m)
#endif
SRPC_O2_ASSERT(sizeof(struct srpc_o2_slot) == 48, "slot layout");
SRPC_O2_ASSERT(offsetof(struct srpc_o2_slot, ready) == 44, "slot layout");
SRPC_O2_ASSERT(offsetof(struct srpc_o2_ctrl, slot) == 64, "control block layout");
SRPC_O2_ASSERT(sizeof(struct srpc_o2_ctrl) == 64 + 48 * SRPC_O2_SLOTS, "control block layout");

#endif /* SRPC_O2_ABI_H */
