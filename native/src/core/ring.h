/* ring.h: where element seq of a Tensor Queue ring sits, shared by the host and device queues. */
#ifndef SRPC_RING_H
#define SRPC_RING_H

#include <stddef.h>
#include <stdint.h>

/* Byte offset of element seq in a ring of ring_bytes holding elements of elem_size bytes:
 * (seq * elem_size) mod ring_bytes, with the product taken in 128 bits. */
static inline size_t srpc_ring_offset(uint64_t seq, size_t elem_size, size_t ring_bytes)
{
    __extension__ typedef unsigned __int128 u128;
    return (size_t)((u128)seq * elem_size % ring_bytes);
}

#endif
