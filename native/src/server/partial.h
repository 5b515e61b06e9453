/* partial.h: multi-segment requests being put together in the call table: the memory caps (in all and per client address), reassembly straight into a reserved Tensor Queue element, moving a message that holds its queue back out of it, and expiry. Lock held throughout. */
#ifndef SRPC_PARTIAL_H
#define SRPC_PARTIAL_H

#include <stdint.h>

#include "server/server_state.h"

/* Whether a new partial message of msg_len bytes in nseg segments from address a fits the
 * memory caps: 0, or the drop reason (SRPC_DROP_MEM_CAP, SRPC_DROP_CLIENT_MEM_CAP). */
int srpc_partial_admit_locked(srpc_server_t *srv, const srpc_addr_t *a, uint32_t msg_len, uint16_t nseg);
/* Starts the message of call-table entry idx (a new entry in state CT_PARTIAL) from its first
 * segment seen (h, segment size seg): in place in the next element of fn's request Tensor
 * Queue when fn has one input and a free element and few are reserved (SRPC_PLACE_MAX_FRACTION),
 * else in a pool buffer; counts it against the caps and puts it on the expiry list. The
 * segment itself is added by the caller. Returns 0, or -ENOMEM (the entry is removed). */
int srpc_partial_start_locked(srpc_server_t *srv, uint32_t idx, srpc_fn_t *fn, const srpc_hdr_t *h, uint32_t seg,
                              uint64_t now);
/* A completed message leaves the table's partial state: off the expiry list, uncounted, its
 * element no longer reserved. *placed_seq gets its element when it was reassembled in place
 * (returns 1: nothing to copy), else *msg gets its reassembly state (returns 0: the caller
 * copies buf and frees it with srpc_partial_free_buf_locked). The entry stays, for the caller
 * to queue the call. */
int srpc_partial_finish_locked(srpc_server_t *srv, uint32_t idx, uint64_t *placed_seq, srpc_reasm_t *msg);
void srpc_partial_free_buf_locked(srpc_server_t *srv, srpc_reasm_t *msg);
/* Drops entry idx's message (inconsistent, expired, or the server going away): its memory is
 * freed and uncounted, a reserved element is skipped (VOID), and the entry removed. Returns how
 * many calls became ready behind the element (the caller wakes the worker). */
unsigned srpc_partial_drop_locked(srpc_server_t *srv, uint32_t idx);
/* A call completed behind a message being reassembled in its element waits for it, since
 * batches keep arrival order. A message still partial SRPC_UNPLACE_AFTER_US after it took its
 * element moves to a pool buffer and gives the element up. Returns the calls made ready. */
unsigned srpc_partial_unblock_locked(srpc_server_t *srv, uint64_t now);
/* Drops the partial messages whose time is up (each counted as a reassembly timeout). Returns
 * the calls made ready. */
unsigned srpc_partial_expire_locked(srpc_server_t *srv, uint64_t now);
/* Whether anything here needs the timers soon: partial messages or reserved elements. */
int srpc_partial_pending_locked(const srpc_server_t *srv);

#endif /* SRPC_PARTIAL_H */
