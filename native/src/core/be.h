/* be.h: big-endian (network order) integers read from and written to byte buffers, one byte at a time (no alignment, any host order): the wire header's and version 4's trailer's. */
#ifndef SRPC_BE_H
#define SRPC_BE_H

#include <stdint.h>

static inline void srpc_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void srpc_put32(uint8_t *p, uint32_t v)
{
    srpc_put16(p, (uint16_t)(v >> 16));
    srpc_put16(p + 2, (uint16_t)v);
}

static inline void srpc_put64(uint8_t *p, uint64_t v)
{
    srpc_put32(p, (uint32_t)(v >> 32));
    srpc_put32(p + 4, (uint32_t)v);
}

static inline uint16_t srpc_get16(const uint8_t *p)
{
    return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}

static inline uint32_t srpc_get32(const uint8_t *p)
{
    return (uint32_t)srpc_get16(p) << 16 | srpc_get16(p + 2);
}

static inline uint64_t srpc_get64(const uint8_t *p)
{
    return (uint64_t)srpc_get32(p) << 32 | srpc_get32(p + 4);
}

#endif
