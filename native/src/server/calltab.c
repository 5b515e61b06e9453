/* calltab.c: open hash of calls with a free list and FIFO expiry lists (see calltab.h). */
#include "server/calltab.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "core/auth.h"

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* A call's identity (docs/PROTOCOL.md, -v4.md): its address, req_id, func_id, version and key;
 * version 5's (PROTOCOL-v5.md) is its session, req_id and func_id, not its address (a client may
 * move; its key.addr is then only where replies go). */
static uint32_t key_hash(const srpc_call_key_t *k)
{
    if (k->session)
        return (uint32_t)mix64(mix64(k->req_id ^ ((uint64_t)k->func_id << 48) ^ ((uint64_t)k->version << 60)) ^
                               k->session ^ ((uint64_t)k->key_id << 16));
    uint64_t a, b;
    memcpy(&a, k->addr.ip, 8);
    memcpy(&b, k->addr.ip + 8, 8);
    uint64_t h = mix64(k->req_id ^ ((uint64_t)k->func_id << 48) ^ ((uint64_t)k->addr.port << 32) ^
                       ((uint64_t)k->version << 60));
    h = mix64(h ^ a);
    h = mix64(h ^ b ^ k->addr.family ^ ((uint64_t)k->key_id << 16) ^ ((uint64_t)k->addr.scope << 32));
    return (uint32_t)h;
}

static int key_eq(const srpc_call_key_t *x, const srpc_call_key_t *y)
{
    if (x->req_id != y->req_id || x->func_id != y->func_id || x->version != y->version || x->key_id != y->key_id ||
        x->session != y->session)
        return 0;
    return x->session || (x->addr.port == y->addr.port && x->addr.family == y->addr.family &&
                          x->addr.scope == y->addr.scope && memcmp(x->addr.ip, y->addr.ip, 16) == 0);
}

int ct_init(calltab_t *ct, uint32_t max_entries)
{
    if (max_entries == 0 || max_entries > (1u << 26))
        return -EINVAL;
    memset(ct, 0, sizeof(*ct));
    uint32_t nb = 1;
    while (nb < max_entries * 2u)
        nb <<= 1;
    ct->e = calloc(max_entries, sizeof(*ct->e));
    ct->hnext = malloc((size_t)max_entries * sizeof(uint32_t));
    ct->hash = calloc(max_entries, sizeof(uint32_t));
    ct->buckets = malloc((size_t)nb * sizeof(uint32_t));
    if (!ct->e || !ct->hnext || !ct->hash || !ct->buckets) {
        free(ct->e);
        free(ct->hnext);
        free(ct->hash);
        free(ct->buckets);
        memset(ct, 0, sizeof(*ct));
        return -ENOMEM;
    }
    memset(ct->buckets, 0xff, (size_t)nb * sizeof(uint32_t));
    ct->nbuckets_mask = nb - 1;
    ct->max_entries = max_entries;
    for (uint32_t i = 0; i < max_entries; i++) {
        ct->hnext[i] = i + 1 < max_entries ? i + 1 : CT_NONE;
        ct->e[i].list = CT_NLISTS;
    }
    ct->free_head = 0;
    for (int l = 0; l < CT_NLISTS; l++)
        ct->head[l] = ct->tail[l] = CT_NONE;
    return 0;
}

void ct_destroy(calltab_t *ct)
{
    free(ct->e);
    free(ct->hnext);
    free(ct->hash);
    free(ct->buckets);
    memset(ct, 0, sizeof(*ct));
}

void ct_key_from_sockaddr(srpc_call_key_t *k, const struct sockaddr *sa, const srpc_hdr_t *h)
{
    memset(k, 0, sizeof(*k));
    k->req_id = h->req_id;
    k->func_id = h->func_id;
    k->version = h->version ? h->version : SRPC_VERSION;
    k->addr.family = sa->sa_family;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        k->addr.port = s4->sin_port;
        memcpy(k->addr.ip, &s4->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        k->addr.port = s6->sin6_port;
        memcpy(k->addr.ip, &s6->sin6_addr, 16);
        k->addr.scope = s6->sin6_scope_id;
    }
}

socklen_t ct_key_to_sockaddr(const srpc_call_key_t *k, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (k->addr.family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
        s4->sin_family = AF_INET;
        s4->sin_port = k->addr.port;
        memcpy(&s4->sin_addr, k->addr.ip, 4);
        return sizeof(*s4);
    }
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    s6->sin6_family = AF_INET6;
    s6->sin6_port = k->addr.port;
    memcpy(&s6->sin6_addr, k->addr.ip, 16);
    s6->sin6_scope_id = k->addr.scope; /* a link-local client is answered on its own link */
    return sizeof(*s6);
}

uint32_t ct_find(const calltab_t *ct, const srpc_call_key_t *k)
{
    const uint32_t h = key_hash(k);
    for (uint32_t i = ct->buckets[h & ct->nbuckets_mask]; i != CT_NONE; i = ct->hnext[i])
        if (ct->hash[i] == h && key_eq(&ct->e[i].key, k))
            return i;
    return CT_NONE;
}

uint32_t ct_insert(calltab_t *ct, const srpc_call_key_t *k, uint8_t state)
{
    uint32_t i = ct->free_head;
    if (i == CT_NONE)
        return CT_NONE;
    ct_entry_t *e = &ct->e[i];
    ct->free_head = ct->hnext[i];
    memset(e, 0, sizeof(*e));
    e->key = *k;
    e->state = state;
    e->list = CT_NLISTS;
    e->lprev = e->lnext = CT_NONE;
    const uint32_t h = key_hash(k);
    uint32_t *b = &ct->buckets[h & ct->nbuckets_mask];
    ct->hash[i] = h;
    ct->hnext[i] = *b;
    *b = i;
    ct->used++;
    return i;
}

void ct_list_unlink(calltab_t *ct, uint32_t idx)
{
    ct_entry_t *e = &ct->e[idx];
    if (e->list >= CT_NLISTS)
        return;
    if (e->lprev != CT_NONE)
        ct->e[e->lprev].lnext = e->lnext;
    else
        ct->head[e->list] = e->lnext;
    if (e->lnext != CT_NONE)
        ct->e[e->lnext].lprev = e->lprev;
    else
        ct->tail[e->list] = e->lprev;
    ct->count[e->list]--;
    e->list = CT_NLISTS;
    e->lprev = e->lnext = CT_NONE;
}

void ct_list_push(calltab_t *ct, uint32_t idx, uint8_t list, uint64_t expires_ns)
{
    ct_list_unlink(ct, idx);
    ct_entry_t *e = &ct->e[idx];
    e->list = list;
    e->expires_ns = expires_ns;
    e->lnext = CT_NONE;
    e->lprev = ct->tail[list];
    if (e->lprev != CT_NONE)
        ct->e[e->lprev].lnext = idx;
    else
        ct->head[list] = idx;
    ct->tail[list] = idx;
    ct->count[list]++;
}

void ct_remove(calltab_t *ct, uint32_t idx)
{
    ct_entry_t *e = &ct->e[idx];
    ct_list_unlink(ct, idx);
    uint32_t *p = &ct->buckets[ct->hash[idx] & ct->nbuckets_mask];
    while (*p != CT_NONE && *p != idx)
        p = &ct->hnext[*p];
    if (*p == idx)
        *p = ct->hnext[idx];
    if (e->key.version >= SRPC_VERSION_4) /* its copy of the key's secret (version 5: the session's s2c) goes with it */
        srpc_auth_wipe(e->secret, sizeof(e->secret));
    e->state = CT_FREE;
    ct->hnext[idx] = ct->free_head;
    ct->free_head = idx;
    ct->used--;
}
