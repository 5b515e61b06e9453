/* reassembly.h: one multi-segment message being put together from segments that arrive in
 * any order, duplicated or not at all (PROTOCOL.md, Segmentation). Single-owner. */
#ifndef SRPC_REASSEMBLY_H
#define SRPC_REASSEMBLY_H

#include <stddef.h>
#include <stdint.h>

#include "splitrpc.h"

typedef struct srpc_reasm {
    uint8_t *buf;      /* msg_len bytes, owned */
    uint64_t *bitmap;  /* one bit per segment, owned */
    uint32_t msg_len, seg_size;
    uint16_t nseg, nrecv;
} srpc_reasm_t;

/* Bytes that reasm_init allocates for a message: what memory caps count. */
size_t srpc_reasm_footprint(uint32_t msg_len, uint16_t nseg);

/* Starts a message from the header and segment size S of its first segment seen
 * (srpc_seg_check already passed). Returns 0 or -ENOMEM. */
int srpc_reasm_init(srpc_reasm_t *r, const srpc_hdr_t *h, uint32_t seg_size);

/* Adds one checked segment. Returns 1 when the message became complete, 0 when the
 * segment was new, -EALREADY for a duplicate, -EPROTO when it disagrees with the message
 * (msg_len, nseg or S). Never writes outside buf. */
int srpc_reasm_add(srpc_reasm_t *r, const srpc_hdr_t *h, uint32_t seg_size,
                   const uint8_t *data, uint32_t len);

void srpc_reasm_free(srpc_reasm_t *r);

#endif
