/* cost.h: admission cost: each call's cost, from the keys of its request looked up in its function's table or from its request header's aux, computed by the engine when the request is complete; a hostile key refuses that call alone. */
#ifndef SRPC_COST_H
#define SRPC_COST_H

#include <stddef.h>
#include <stdint.h>

#include "server/server_state.h"

/* Checks and takes a function's cost settings (fc->cost_*, max_batch_cost): copies the table
 * and makes the batch's cost array. Registration (no thread runs yet). Returns 0, -EINVAL (an
 * unknown source; a table that is empty, on a GPU function, with keys of a size other than 4 or
 * 8, or keys that do not lie within one input tensor) or -ENOMEM. */
int srpc_cost_setup(srpc_fn_t *fn, const srpc_func_config_t *fc);
void srpc_cost_free(srpc_fn_t *fn);

/* Sets the cost of the call in element seq of fn (RX_COMPLETE: its request, of the length its
 * record says, is in the host elements; aux: its header's aux), or refuses the call with
 * BAD_REQUEST saying which key is bad. The engine calls it when it fills the element (after the
 * copy out of GPU memory for a request that arrived there). Lock held. */
void srpc_cost_admit_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t seq, uint16_t aux);

/* The class (0 .. n_classes - 1) of a call to fn, a function whose classes are by cost
 * (class_by_cost), from its whole request (len bytes at req, in host memory, as sent) and its
 * header's aux: the class whose range holds its cost (*cost: the call's admission cost, as
 * srpc_cost_admit_locked would set it). -EINVAL with why (n bytes) for a request whose cost keys
 * are bad (outside the table, not whole, no room): the caller refuses that call alone. Pure:
 * reads fn's read-only settings; any thread. */
int srpc_cost_class(const srpc_fn_t *fn, const uint8_t *req, uint32_t len, uint16_t aux, uint32_t *cost, char *why,
                    size_t n);

#endif /* SRPC_COST_H */
