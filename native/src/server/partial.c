/* partial.c: multi-segment requests being put together in the call table (see partial.h). */
#include "server/partial.h"

#include <errno.h>

#include "core/tunables.h"
#include "server/callring.h"

int srpc_partial_admit_locked(srpc_server_t *srv, const srpc_addr_t *a, uint32_t msg_len, uint16_t nseg)
{
    SRPC_ASSERT_LOCKED(srv);
    size_t need = srpc_reasm_footprint(msg_len, nseg);
    if (unlikely(srv->reasm_bytes + need > srv->cfg.reasm_mem_cap))
        return SRPC_DROP_MEM_CAP;
    if (unlikely(srcmem_get(&srv->srcmem, a) + need > srv->cfg.reasm_mem_cap_client))
        return SRPC_DROP_CLIENT_MEM_CAP;
    return 0;
}

/* A message's reassembly footprint counts against the caps, in all and by client address, from
 * its start to its end. */
static void count_partial(srpc_server_t *srv, const srpc_addr_t *a, size_t bytes)
{
    srv->reasm_bytes += bytes;
    srcmem_add(&srv->srcmem, a, bytes); /* cannot fail: one address per partial call at most */
}

static void uncount_partial(srpc_server_t *srv, const srpc_addr_t *a, const srpc_reasm_t *r)
{
    size_t bytes = srpc_reasm_footprint(r->msg_len, r->nseg);
    srv->reasm_bytes -= bytes;
    srcmem_sub(&srv->srcmem, a, bytes);
}

int srpc_partial_start_locked(srpc_server_t *srv, uint32_t idx, srpc_fn_t *fn, const srpc_hdr_t *h, uint32_t seg,
                              uint64_t now)
{
    SRPC_ASSERT_LOCKED(srv);
    ct_entry_t *e = &srv->ct.e[idx];
    /* One input tensor: the message is the element's bytes, so reassemble it in place (not for a
     * function whose classes are by cost: its class, so its queue, is known only once complete). */
    const int place = !fn->class_by_cost && fn->n_in == 1 && !srpc_ring_full(fn) &&
                      fn->reserved < fn->capacity / SRPC_PLACE_MAX_FRACTION;
    int r = place ? srpc_reasm_init_at(&e->u.partial, h, seg, srpc_tq_elem(fn->in_tq[0], fn->head))
                  : srpc_reasm_init(&e->u.partial, h, seg, &srv->pool);
    if (r != 0) {
        ct_remove(&srv->ct, idx);
        return -ENOMEM;
    }
    e->placed = (uint8_t)place;
    e->gen = ++srv->partial_gen;
    if (place)
        e->placed_seq = srpc_ring_reserve_locked(srv, fn, idx, now);
    count_partial(srv, &e->key.addr, srpc_reasm_footprint(h->msg_len, h->nseg));
    ct_list_push(&srv->ct, idx, CT_LIST_PARTIAL, now + (uint64_t)srv->cfg.reasm_timeout_us * 1000);
    return 0;
}

int srpc_partial_finish_locked(srpc_server_t *srv, uint32_t idx, uint64_t *placed_seq, srpc_reasm_t *msg)
{
    SRPC_ASSERT_LOCKED(srv);
    ct_entry_t *e = &srv->ct.e[idx];
    ct_list_unlink(&srv->ct, idx);
    uncount_partial(srv, &e->key.addr, &e->u.partial);
    if (e->placed) { /* already in its element: nothing to copy */
        *placed_seq = e->placed_seq;
        srpc_reasm_free(&e->u.partial, &srv->pool); /* the bitmap; a borrowed buffer stays */
        e->placed = 0;
        return 1;
    }
    *msg = e->u.partial;
    return 0;
}

void srpc_partial_free_buf_locked(srpc_server_t *srv, srpc_reasm_t *msg)
{
    SRPC_ASSERT_LOCKED(srv);
    srpc_reasm_free(msg, &srv->pool);
}

unsigned srpc_partial_drop_locked(srpc_server_t *srv, uint32_t idx)
{
    SRPC_ASSERT_LOCKED(srv);
    ct_entry_t *e = &srv->ct.e[idx];
    uncount_partial(srv, &e->key.addr, &e->u.partial);
    srpc_reasm_free(&e->u.partial, &srv->pool);
    unsigned ready = 0;
    if (e->placed) { /* its reserved element will never be filled: skip it */
        e->placed = 0;
        ready = srpc_ring_void_locked(srv, srpc_fn_lookup(srv, e->key.func_id, e->aux), e->placed_seq);
    }
    ct_remove(&srv->ct, idx);
    return ready;
}

unsigned srpc_partial_unblock_locked(srpc_server_t *srv, uint64_t now)
{
    SRPC_ASSERT_LOCKED(srv);
    unsigned ready = 0;
    for (uint32_t f = 0; f < srv->nfns; f++) {
        srpc_fn_t *fn = srv->fns[f];
        uint64_t seq;
        uint32_t idx;
        while (srpc_ring_blocked_by_reserved_locked(srv, fn, now, SRPC_UNPLACE_AFTER_US * 1000ull, &seq, &idx)) {
            ct_entry_t *e = &srv->ct.e[idx];
            if (srpc_reasm_unborrow(&e->u.partial, &srv->pool) != 0)
                break; /* no memory now: it waits for its completion or expiry */
            e->placed = 0;
            ST_ADD(srv, unplaced, 1);
            ready += srpc_ring_void_locked(srv, fn, seq);
        }
    }
    return ready;
}

unsigned srpc_partial_expire_locked(srpc_server_t *srv, uint64_t now)
{
    SRPC_ASSERT_LOCKED(srv);
    unsigned ready = 0;
    uint32_t i;
    while ((i = ct_list_head(&srv->ct, CT_LIST_PARTIAL)) != CT_NONE && srv->ct.e[i].expires_ns <= now) {
        ST_ADD(srv, drops[SRPC_DROP_REASM_TIMEOUT], 1);
        ready += srpc_partial_drop_locked(srv, i);
    }
    return ready;
}

int srpc_partial_pending_locked(const srpc_server_t *srv)
{
    if (srv->ct.count[CT_LIST_PARTIAL])
        return 1;
    for (uint32_t f = 0; f < srv->nfns; f++)
        if (srv->fns[f]->reserved)
            return 1;
    return 0;
}
