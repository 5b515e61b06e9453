/* reassembly.h: one multi-segment message being put together from segments that arrive in
 * any order, duplicated or not at all (docs/PROTOCOL.md, Segmentation). Single-owner. */
#ifndef SRPC_REASSEMBLY_H
#define SRPC_REASSEMBLY_H

#include <stddef.h>
#include <stdint.h>

#include "splitrpc_core.h"

/* A few freed message buffers kept for reuse: a large message that is malloc'd and freed per
 * call makes the allocator return its pages and fault them in again (~35 us per 588 KiB).
 * Single-owner, like the messages. */
#define SRPC_POOL_SLOTS 8
typedef struct srpc_bufpool {
    uint8_t *buf[SRPC_POOL_SLOTS];
    size_t cap[SRPC_POOL_SLOTS];
    size_t bytes, max_bytes; /* cached bytes and their bound */
} srpc_bufpool_t;

void srpc_bufpool_init(srpc_bufpool_t *p, size_t max_bytes);
void srpc_bufpool_destroy(srpc_bufpool_t *p);

typedef struct srpc_reasm {
    uint8_t *buf;      /* msg_len bytes (buf_cap allocated), owned */
    size_t buf_cap;
    uint64_t *bitmap;  /* one bit per segment, owned */
    uint32_t msg_len, seg_size;
    uint16_t nseg, nrecv;
    uint8_t borrowed;  /* buf belongs to someone else (a Tensor Queue element): never freed */
} srpc_reasm_t;

/* Bytes that reasm_init allocates for a message: what memory caps count. */
size_t srpc_reasm_footprint(uint32_t msg_len, uint16_t nseg);

/* Starts a message from the header and segment size S of its first segment seen
 * (srpc_seg_check already passed), taking its buffer from pool when one fits (pool may be
 * NULL). Returns 0 or -ENOMEM. */
int srpc_reasm_init(srpc_reasm_t *r, const srpc_hdr_t *h, uint32_t seg_size, srpc_bufpool_t *pool);

/* Like srpc_reasm_init, but the message is put together in buf (msg_len bytes, owned by the
 * caller and kept valid until srpc_reasm_free). Returns 0 or -ENOMEM (the bitmap). */
/* A message reassembled in a borrowed buffer moves to a buffer of its own (from pool when one
 * fits): the bytes so far are copied, the borrowed buffer is no longer touched. Returns 0, or
 * -ENOMEM (nothing changed). No-op for a message that owns its buffer. */
int srpc_reasm_unborrow(srpc_reasm_t *r, srpc_bufpool_t *pool);
int srpc_reasm_init_at(srpc_reasm_t *r, const srpc_hdr_t *h, uint32_t seg_size, uint8_t *buf);

/* Adds one checked segment. Returns 1 when the message became complete, 0 when the
 * segment was new, -EALREADY for a duplicate, -EPROTO when it disagrees with the message
 * (msg_len, nseg or S). Never writes outside buf. */
int srpc_reasm_add(srpc_reasm_t *r, const srpc_hdr_t *h, uint32_t seg_size,
                   const uint8_t *data, uint32_t len);

/* Frees the message; its buffer goes back to pool when one is given (may be NULL). */
/* Where segment h->seq of len bytes goes in the message buffer, if the segment is new and
 * consistent with the message (else NULL): lets a receiver place its data there directly and
 * then call srpc_reasm_add with that same pointer, which then copies nothing. */
uint8_t *srpc_reasm_slot(const srpc_reasm_t *r, const srpc_hdr_t *h, uint32_t seg_size, uint32_t len);

void srpc_reasm_free(srpc_reasm_t *r, srpc_bufpool_t *pool);

#endif
