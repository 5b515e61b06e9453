/* codec.c: socket-free message codec: segmentation into datagrams and a one-message reassembler. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/reassembly.h"
#include "splitrpc_core.h"
#include "core/wire.h"

int srpc_msg_segment(const srpc_hdr_t *tmpl, const void *data, uint32_t len, uint32_t seg_size,
                     uint8_t *out, size_t cap, uint32_t *dgram_len, uint32_t max_dgrams)
{
    if (!tmpl || (!data && len) || !out || !dgram_len || tmpl->type > SRPC_ERROR ||
        seg_size == 0 || seg_size > SRPC_MAX_SEG_DATA || tmpl->version >= SRPC_VERSION_4)
        return -EINVAL; /* version 4 needs a key (splitrpc_auth.h: srpc_auth_seal), version 5 a session */
    seg_size = srpc_seg_data_max(tmpl->version, seg_size);
    const uint32_t check = tmpl->version == SRPC_VERSION_3 ? SRPC_DATA_CHECK_LEN : 0;
    uint32_t nseg = srpc_seg_count(len, seg_size);
    if (nseg > UINT16_MAX)
        return -EMSGSIZE;
    if (nseg > max_dgrams || (uint64_t)nseg * (SRPC_HDR_LEN + check) + len > cap)
        return -ENOBUFS;

    srpc_hdr_t h = *tmpl;
    h.nseg = (uint16_t)nseg;
    h.msg_len = len;
    const uint8_t *src = data;
    uint8_t *p = out;
    for (uint32_t seq = 0; seq < nseg; seq++) {
        uint32_t l = srpc_seg_len(len, seg_size, seq);
        h.seq = (uint16_t)seq;
        if (srpc_hdr_encode(&h, p) < 0)
            return -EINVAL; /* a version or req_id the header cannot carry */
        if (l)
            memcpy(p + SRPC_HDR_LEN, src + (size_t)seq * seg_size, l);
        if (check)
            srpc_put_data_check(p + SRPC_HDR_LEN + l, srpc_crc32c(0, p, SRPC_HDR_LEN + l));
        dgram_len[seq] = SRPC_HDR_LEN + l + check;
        p += SRPC_HDR_LEN + l + check;
    }
    return (int)nseg;
}

enum { R_IDLE = 0, R_PARTIAL, R_COMPLETE };

struct srpc_reassembler {
    uint32_t max_msg;
    int state;           /* R_IDLE, R_PARTIAL or R_COMPLETE */
    srpc_hdr_t hdr;      /* the message's header (first segment seen, seq 0) unless idle */
    srpc_reasm_t m;      /* unless idle */
    srpc_bufpool_t pool; /* keeps the last message's buffer for the next one */
};

int srpc_reassembler_create(uint32_t max_msg, srpc_reassembler_t **out)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    srpc_reassembler_t *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->max_msg = max_msg;
    srpc_bufpool_init(&r->pool, max_msg ? max_msg : 1); /* an empty message takes 1 byte */
    *out = r;
    return 0;
}

void srpc_reassembler_reset(srpc_reassembler_t *r)
{
    if (!r || r->state == R_IDLE)
        return;
    srpc_reasm_free(&r->m, &r->pool);
    r->state = R_IDLE;
}

void srpc_reassembler_destroy(srpc_reassembler_t *r)
{
    if (!r)
        return;
    srpc_reassembler_reset(r);
    srpc_bufpool_destroy(&r->pool);
    free(r);
}

static int same_message(const srpc_hdr_t *a, const srpc_hdr_t *b)
{
    return a->req_id == b->req_id && a->type == b->type && a->func_id == b->func_id && a->version == b->version;
}

int srpc_reassembler_push(srpc_reassembler_t *r, const uint8_t *dgram, size_t len)
{
    if (!r || (!dgram && len))
        return -EINVAL;
    srpc_hdr_t h;
    int rc = srpc_hdr_decode(dgram, len, &h);
    if (rc < 0)
        return rc;
    if (h.version >= SRPC_VERSION_4)
        return -EBADMSG; /* its tag needs a key (version 5: a session): not checked here */
    if (len - SRPC_HDR_LEN > UINT32_MAX)
        return -EPROTO;
    uint32_t dlen = (uint32_t)(len - SRPC_HDR_LEN);
    rc = srpc_data_check(&h, dgram, dgram + SRPC_HDR_LEN, &dlen); /* version 3: dlen loses the check */
    if (rc < 0)
        return rc;
    uint32_t s;
    rc = srpc_seg_check(&h, dlen, &s);
    if (rc < 0)
        return rc;
    const uint8_t *data = dgram + SRPC_HDR_LEN;

    if (r->state == R_IDLE || !same_message(&h, &r->hdr)) {
        if (r->state == R_PARTIAL)
            return -EBUSY;
        if (h.msg_len > r->max_msg)
            return -E2BIG;
        /* A completed message gives way to the new one; its buffer, back in the pool first,
         * is the one the new message takes. */
        srpc_reassembler_reset(r);
        rc = srpc_reasm_init(&r->m, &h, s, &r->pool);
        if (rc < 0)
            return rc;
        r->hdr = h;
        r->hdr.seq = 0;
        r->state = R_PARTIAL;
    }
    /* Of a completed message only -EALREADY (or -EPROTO) can come back: nothing changes. */
    rc = srpc_reasm_add(&r->m, &h, s, data, (uint32_t)dlen);
    if (rc == 1)
        r->state = R_COMPLETE;
    return rc;
}

const uint8_t *srpc_reassembler_message(const srpc_reassembler_t *r, srpc_hdr_t *hdr, uint32_t *len)
{
    if (!r || r->state != R_COMPLETE) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (hdr)
        *hdr = r->hdr;
    if (len)
        *len = r->m.msg_len;
    return r->m.buf;
}
