/* srcmem.c: per-client-address byte counts in an open-addressing table with backward-shift delete. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/srcmem.h"

static int same(const srcmem_slot_t *s, const srpc_addr_t *a)
{
    return s->family == a->family && memcmp(s->ip, a->ip, 16) == 0;
}

static uint32_t home(const srcmem_t *m, const srpc_addr_t *a)
{
    uint64_t x, y;
    memcpy(&x, a->ip, 8);
    memcpy(&y, a->ip + 8, 8);
    x ^= y * 0x9e3779b97f4a7c15ull ^ a->family;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return (uint32_t)x & m->mask;
}

int srcmem_init(srcmem_t *m, uint32_t max_clients)
{
    memset(m, 0, sizeof(*m));
    if (max_clients == 0 || max_clients > (1u << 26))
        return -EINVAL;
    uint32_t n = 2;
    while (n < 2 * max_clients)
        n <<= 1;
    if (!(m->s = calloc(n, sizeof(*m->s))))
        return -ENOMEM;
    m->mask = n - 1;
    m->max_used = max_clients;
    return 0;
}

void srcmem_destroy(srcmem_t *m)
{
    free(m->s);
    memset(m, 0, sizeof(*m));
}

/* The slot of a's address, or the free slot where it would go. The table is never full (at
 * most half used), so the probe ends. */
static uint32_t probe(const srcmem_t *m, const srpc_addr_t *a)
{
    uint32_t i = home(m, a);
    while (m->s[i].family && !same(&m->s[i], a))
        i = (i + 1) & m->mask;
    return i;
}

uint64_t srcmem_get(const srcmem_t *m, const srpc_addr_t *a)
{
    const srcmem_slot_t *s = &m->s[probe(m, a)];
    return s->family ? s->bytes : 0;
}

int srcmem_add(srcmem_t *m, const srpc_addr_t *a, uint64_t bytes)
{
    if (!a->family) /* 0 marks a free slot */
        return -EINVAL;
    srcmem_slot_t *s = &m->s[probe(m, a)];
    if (!s->family) {
        if (m->used >= m->max_used)
            return -ENOSPC;
        s->family = a->family;
        memcpy(s->ip, a->ip, 16);
        s->bytes = 0;
        m->used++;
    }
    s->bytes += bytes;
    return 0;
}

void srcmem_sub(srcmem_t *m, const srpc_addr_t *a, uint64_t bytes)
{
    uint32_t i = probe(m, a);
    srcmem_slot_t *s = &m->s[i];
    if (!s->family)
        return;
    s->bytes = bytes < s->bytes ? s->bytes - bytes : 0;
    if (s->bytes)
        return;
    /* Backward-shift delete: later slots of the run that may live here move back. */
    m->used--;
    for (uint32_t j = (i + 1) & m->mask; m->s[j].family; j = (j + 1) & m->mask) {
        srpc_addr_t aj = {.family = m->s[j].family};
        memcpy(aj.ip, m->s[j].ip, 16);
        uint32_t h = home(m, &aj);
        /* j's entry may fill the hole at i when its home is not in (i, j] cyclically */
        if (((j - h) & m->mask) >= ((j - i) & m->mask)) {
            m->s[i] = m->s[j];
            i = j;
        }
    }
    m->s[i].family = 0;
    m->s[i].bytes = 0;
}
