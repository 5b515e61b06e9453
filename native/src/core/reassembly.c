/* reassembly.c: segment bitmap, S consistency and placement of segment data (reassembly.h). */
#include "core/reassembly.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static size_t bitmap_words(uint16_t nseg) { return ((size_t)nseg + 63) / 64; }

size_t srpc_reasm_footprint(uint32_t msg_len, uint16_t nseg)
{
    return (size_t)msg_len + bitmap_words(nseg) * sizeof(uint64_t);
}

void srpc_bufpool_init(srpc_bufpool_t *p, size_t max_bytes)
{
    memset(p, 0, sizeof(*p));
    p->max_bytes = max_bytes;
}

void srpc_bufpool_destroy(srpc_bufpool_t *p)
{
    for (int i = 0; i < SRPC_POOL_SLOTS; i++)
        free(p->buf[i]);
    memset(p, 0, sizeof(*p));
}

/* The smallest cached buffer of at least `need` bytes, or a new one. */
static uint8_t *pool_get(srpc_bufpool_t *p, size_t need, size_t *cap)
{
    int best = -1;
    for (int i = 0; p && i < SRPC_POOL_SLOTS; i++)
        if (p->buf[i] && p->cap[i] >= need && (best < 0 || p->cap[i] < p->cap[best]))
            best = i;
    if (best < 0) {
        *cap = need;
        return malloc(need);
    }
    uint8_t *b = p->buf[best];
    *cap = p->cap[best];
    p->bytes -= p->cap[best];
    p->buf[best] = NULL;
    return b;
}

/* Keeps a buffer for reuse, evicting smaller ones to stay under max_bytes; else frees it. */
static void pool_put(srpc_bufpool_t *p, uint8_t *b, size_t cap)
{
    if (!b)
        return;
    if (!p || cap > p->max_bytes) {
        free(b);
        return;
    }
    for (;;) {
        int free_slot = -1, smallest = -1;
        for (int i = 0; i < SRPC_POOL_SLOTS; i++) {
            if (!p->buf[i])
                free_slot = i;
            else if (smallest < 0 || p->cap[i] < p->cap[smallest])
                smallest = i;
        }
        if (free_slot >= 0 && p->bytes + cap <= p->max_bytes) {
            p->buf[free_slot] = b;
            p->cap[free_slot] = cap;
            p->bytes += cap;
            return;
        }
        if (smallest < 0 || p->cap[smallest] >= cap) { /* keep the larger ones we have */
            free(b);
            return;
        }
        p->bytes -= p->cap[smallest];
        free(p->buf[smallest]);
        p->buf[smallest] = NULL;
    }
}

int srpc_reasm_init(srpc_reasm_t *r, const srpc_hdr_t *h, uint32_t seg_size, srpc_bufpool_t *pool)
{
    memset(r, 0, sizeof(*r));
    r->buf = pool_get(pool, h->msg_len ? h->msg_len : 1, &r->buf_cap);
    r->bitmap = calloc(bitmap_words(h->nseg), sizeof(uint64_t));
    if (!r->buf || !r->bitmap) {
        srpc_reasm_free(r, pool);
        return -ENOMEM;
    }
    r->msg_len = h->msg_len;
    r->nseg = h->nseg;
    r->seg_size = seg_size;
    return 0;
}

int srpc_reasm_unborrow(srpc_reasm_t *r, srpc_bufpool_t *pool)
{
    if (!r->borrowed)
        return 0;
    size_t cap;
    uint8_t *buf = pool_get(pool, r->msg_len ? r->msg_len : 1, &cap);
    if (!buf)
        return -ENOMEM;
    memcpy(buf, r->buf, r->msg_len);
    r->buf = buf;
    r->buf_cap = cap;
    r->borrowed = 0;
    return 0;
}

int srpc_reasm_init_at(srpc_reasm_t *r, const srpc_hdr_t *h, uint32_t seg_size, uint8_t *buf)
{
    memset(r, 0, sizeof(*r));
    r->bitmap = calloc(bitmap_words(h->nseg), sizeof(uint64_t));
    if (!r->bitmap)
        return -ENOMEM;
    r->buf = buf;
    r->buf_cap = h->msg_len;
    r->borrowed = 1;
    r->msg_len = h->msg_len;
    r->nseg = h->nseg;
    r->seg_size = seg_size;
    return 0;
}

int srpc_reasm_add(srpc_reasm_t *r, const srpc_hdr_t *h, uint32_t seg_size,
                   const uint8_t *data, uint32_t len)
{
    if (h->msg_len != r->msg_len || h->nseg != r->nseg || seg_size != r->seg_size ||
        h->seq >= r->nseg)
        return -EPROTO;
    uint64_t off = (uint64_t)h->seq * r->seg_size;
    if (off + len > r->msg_len)
        return -EPROTO; /* cannot happen after srpc_seg_check, kept as the last guard */
    uint64_t bit = 1ull << (h->seq & 63);
    uint64_t *w = &r->bitmap[h->seq >> 6];
    if (*w & bit)
        return -EALREADY;
    *w |= bit;
    if (len && data != r->buf + off) /* else the data was received in place */
        memcpy(r->buf + off, data, len);
    r->nrecv++;
    return r->nrecv == r->nseg ? 1 : 0;
}

uint8_t *srpc_reasm_slot(const srpc_reasm_t *r, const srpc_hdr_t *h, uint32_t seg_size, uint32_t len)
{
    if (h->msg_len != r->msg_len || h->nseg != r->nseg || seg_size != r->seg_size || h->seq >= r->nseg)
        return NULL;
    uint64_t off = (uint64_t)h->seq * r->seg_size;
    if (off + len > r->msg_len || (r->bitmap[h->seq >> 6] & (1ull << (h->seq & 63))))
        return NULL;
    return r->buf + off;
}

void srpc_reasm_free(srpc_reasm_t *r, srpc_bufpool_t *pool)
{
    if (!r->borrowed)
        pool_put(pool, r->buf, r->buf_cap);
    free(r->bitmap);
    r->buf = NULL;
    r->bitmap = NULL;
}
