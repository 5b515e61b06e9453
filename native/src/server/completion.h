/* completion.h: the end of a batch: completed now, or deferred and finished when its done word is written (by another thread or a GPU stream), always oldest first per function; finishing sends the batch's replies (with those of the batches before it that the worker held, reply.h), moves its calls to the reply cache and recycles its elements. Worker thread. */
#ifndef SRPC_COMPLETION_H
#define SRPC_COMPLETION_H

#include <stdint.h>

#include "server/server_state.h"

/* The function of a batch handed out and neither completed nor deferred yet, else NULL. */
srpc_fn_t *srpc_completion_open_fn_w(srpc_server_t *srv, const srpc_batch_t *b);
/* Puts such a batch in flight (b->count becomes 0) and returns its done word. */
uint32_t *srpc_completion_hand_back_w(srpc_server_t *srv, srpc_fn_t *fn, srpc_batch_t *b);

/* srpc_server_complete and srpc_server_poll without the flush of the replies held (reply.h) at
 * their end: next_batch's own, which flushes them when it hands out no batch, or when holding on
 * longer would not be safe or short (srpc_reply_hold_check_w). */
int srpc_completion_complete_w(srpc_server_t *srv, srpc_batch_t *b, int status, const char *msg);
int srpc_completion_poll_w(srpc_server_t *srv);

/* srpc_server_complete, srpc_server_defer and srpc_server_poll (splitrpc_server.h) live here. */

#endif /* SRPC_COMPLETION_H */
