/* native_fns.c: the built-in services as native functions (srpc_native_fn, run inline by the server's worker): vecadd and echo computed in C, what the runtime costs with no Python in the loop; and the vecadd sum the minimal server shares. */
#include <string.h>

#include "splitrpc_server.h"
#include "splitrpc_tools.h"
#include "tools/builtin_c.h"

void srpc_tool_vecadd(const uint8_t *in, uint8_t *out, uint32_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (uint32_t i = 0; i < n; i++) { /* the host's floats are the wire's: a loop the compiler vectorises */
        float f;
        memcpy(&f, in + 4 * (size_t)i, 4);
        f += 1.0f;
        memcpy(out + 4 * (size_t)i, &f, 4);
    }
#else
    for (uint32_t i = 0; i < n; i++, in += 4, out += 4) {
        uint32_t u = (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24;
        float f;
        memcpy(&f, &u, 4);
        f += 1.0f;
        memcpy(&u, &f, 4);
        out[0] = (uint8_t)u, out[1] = (uint8_t)(u >> 8), out[2] = (uint8_t)(u >> 16), out[3] = (uint8_t)(u >> 24);
    }
#endif
}

int srpc_native_vecadd(void *ctx, struct srpc_server *srv, struct srpc_batch *b)
{
    (void)ctx, (void)srv;
    /* One input and one output of 4-byte elements, the batch's calls back to back in each. */
    srpc_tool_vecadd(b->in[0], b->out[0], (uint32_t)((uint64_t)b->count * SRPC_NATIVE_VECADD_BYTES / 4));
    return 0;
}

int srpc_native_echo(void *ctx, struct srpc_server *srv, struct srpc_batch *b)
{
    (void)srv;
    const uint32_t max = ctx ? *(const uint32_t *)ctx : 0;
    if (!b->in_len || !b->out_len || !max)
        return SRPC_E_INTERNAL; /* not registered as a raw function, or without its size */
    for (uint32_t i = 0; i < b->count; i++) {
        const uint32_t n = b->in_len[i];
        if (n > max)
            return SRPC_E_INTERNAL; /* a request longer than the size it was given (a wrong registration) */
        /* Element i of a raw function's TQs: the function's element sizes apart (ctx: that size). */
        memcpy(b->out[0] + (size_t)i * max, b->in[0] + (size_t)i * max, n);
        b->out_len[i] = n;
    }
    return 0;
}
