/* builtin_c.h: the built-in services' arithmetic in C, shared by the minimal server (proto_min.c) and the native functions (native_fns.c). */
#ifndef SRPC_TOOLS_BUILTIN_C_H
#define SRPC_TOOLS_BUILTIN_C_H

#include <stdint.h>

/* y = x + 1 over n little-endian float32s at any alignment (the sum server/builtin.py's vecadd makes). */
void srpc_tool_vecadd(const uint8_t *in, uint8_t *out, uint32_t n);

#endif /* SRPC_TOOLS_BUILTIN_C_H */
