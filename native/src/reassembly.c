/* reassembly.c: segment bitmap, S consistency and placement of segment data (reassembly.h). */
#include "reassembly.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static size_t bitmap_words(uint16_t nseg) { return ((size_t)nseg + 63) / 64; }

size_t srpc_reasm_footprint(uint32_t msg_len, uint16_t nseg)
{
    return (size_t)msg_len + bitmap_words(nseg) * sizeof(uint64_t);
}

int srpc_reasm_init(srpc_reasm_t *r, const srpc_hdr_t *h, uint32_t seg_size)
{
    memset(r, 0, sizeof(*r));
    r->buf = malloc(h->msg_len ? h->msg_len : 1);
    r->bitmap = calloc(bitmap_words(h->nseg), sizeof(uint64_t));
    if (!r->buf || !r->bitmap) {
        srpc_reasm_free(r);
        return -ENOMEM;
    }
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
    if (len)
        memcpy(r->buf + off, data, len);
    r->nrecv++;
    return r->nrecv == r->nseg ? 1 : 0;
}

void srpc_reasm_free(srpc_reasm_t *r)
{
    free(r->buf);
    free(r->bitmap);
    r->buf = NULL;
    r->bitmap = NULL;
}
