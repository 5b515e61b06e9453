/* function.h: a registered function's storage: its configuration checked, its Tensor Queues (host ones, or device ones with pinned host staging laid out slot for slot), its call records and done words; and freeing them. */
#ifndef SRPC_FUNCTION_H
#define SRPC_FUNCTION_H

#include "server/server_state.h"

/* The function fc describes, on a server configured as cfg (its message and segment limits).
 * Returns 0, -EINVAL (a bad configuration), -EMSGSIZE (a request over max_message, or a reply
 * too long to number in 16-bit segments), -ENOMEM, or a GPU error (-ENODEV without a usable
 * device). Before the server starts. */
int srpc_function_create(const srpc_server_config_t *cfg, const srpc_func_config_t *fc, srpc_fn_t **out);
/* Frees everything; a GPU function's streams must be idle (srpc_server_destroy). NULL is fine. */
void srpc_function_free(srpc_fn_t *fn);

#endif /* SRPC_FUNCTION_H */
