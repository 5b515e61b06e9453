/* srcmem.h: bytes of partial messages held per client address (the IP, not the port), for the
 * server's per-client reassembly memory cap. Owned by the engine: its lock serialises every call. */
#ifndef SRPC_SRCMEM_H
#define SRPC_SRCMEM_H

#include <stdint.h>

#include "server/calltab.h"

typedef struct srcmem_slot {
    uint64_t bytes;
    uint16_t family; /* 0: free */
    uint8_t ip[16];
} srcmem_slot_t;

typedef struct srcmem {
    srcmem_slot_t *s;
    uint32_t mask;
    uint32_t used, max_used;
} srcmem_t;

/* A table for up to max_clients addresses at once (the call table's size bounds them: every
 * partial message is a call). Returns 0, -EINVAL or -ENOMEM. */
int srcmem_init(srcmem_t *m, uint32_t max_clients);
void srcmem_destroy(srcmem_t *m);
/* Bytes held now by a's address (0 when none). */
uint64_t srcmem_get(const srcmem_t *m, const srpc_addr_t *a);
/* Adds bytes to a's address. Returns 0, -EINVAL (family 0), or -ENOSPC when max_clients
 * addresses hold bytes already. */
int srcmem_add(srcmem_t *m, const srpc_addr_t *a, uint64_t bytes);
/* Takes bytes back (at most what the address holds); the address is forgotten at 0. */
void srcmem_sub(srcmem_t *m, const srpc_addr_t *a, uint64_t bytes);

#endif /* SRPC_SRCMEM_H */
