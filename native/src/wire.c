/* wire.c: encode, decode and check the control header (PROTOCOL.md v1, docs/PROTOCOL-v2.md) and the segmentation. */
#include <errno.h>
#include <stdint.h>

#include "splitrpc.h"
#include "wire.h"

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
    put16(p, (uint16_t)(v >> 16));
    put16(p + 2, (uint16_t)v);
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)get16(p) << 16 | get16(p + 2);
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

/* CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, not reflected, no final XOR), one table
 * lookup per byte. The table is built at compile time from the polynomial. */
#define CRC_STEP(c) ((c) & 0x8000 ? ((c) << 1 ^ 0x1021) & 0xffff : ((c) << 1) & 0xffff)
#define CRC_ENTRY(b) CRC_STEP(CRC_STEP(CRC_STEP(CRC_STEP(CRC_STEP(CRC_STEP(CRC_STEP(CRC_STEP((b) << 8))))))))
#define CRC_ROW(b) CRC_ENTRY(b), CRC_ENTRY(b + 1), CRC_ENTRY(b + 2), CRC_ENTRY(b + 3), \
                   CRC_ENTRY(b + 4), CRC_ENTRY(b + 5), CRC_ENTRY(b + 6), CRC_ENTRY(b + 7)
#define CRC_ROWS(b) CRC_ROW(b), CRC_ROW(b + 8), CRC_ROW(b + 16), CRC_ROW(b + 24)
static const uint16_t crc_table[256] = {CRC_ROWS(0), CRC_ROWS(32), CRC_ROWS(64), CRC_ROWS(96),
                                        CRC_ROWS(128), CRC_ROWS(160), CRC_ROWS(192), CRC_ROWS(224)};

uint16_t srpc_hdr_check16(const uint8_t hdr[SRPC_HDR_LEN])
{
    uint16_t c = 0xffff;
    for (int i = 0; i < SRPC_HDR_LEN; i++) {
        uint8_t b = i == SRPC_OFF_CHECK || i == SRPC_OFF_CHECK + 1 ? 0 : hdr[i];
        c = (uint16_t)(c << 8 ^ crc_table[(c >> 8 ^ b) & 0xff]);
    }
    return c;
}

int srpc_hdr_encode(const srpc_hdr_t *h, uint8_t out[SRPC_HDR_LEN])
{
    if (!h || !out)
        return -EINVAL;
    unsigned ver = h->version ? h->version : SRPC_VERSION;
    if (h->type > SRPC_ERROR || ver > SRPC_VERSION_2 ||
        (ver == SRPC_VERSION_2 && h->req_id > SRPC_REQ_ID_V2_MASK))
        return -EINVAL;
    out[SRPC_OFF_MAGIC] = SRPC_MAGIC;
    out[SRPC_OFF_VER_TYPE] = (uint8_t)(ver << 4 | h->type);
    put16(out + SRPC_OFF_FUNC_ID, h->func_id);
    put64(out + SRPC_OFF_REQ_ID, h->req_id); /* v2: the top 16 bits are 0, the check's place */
    put16(out + SRPC_OFF_SEQ, h->seq);
    put16(out + SRPC_OFF_NSEG, h->nseg);
    put32(out + SRPC_OFF_MSG_LEN, h->msg_len);
    put16(out + SRPC_OFF_AUX, h->aux);
    if (ver == SRPC_VERSION_2)
        put16(out + SRPC_OFF_CHECK, srpc_hdr_check16(out));
    return 0;
}

int srpc_hdr_decode(const uint8_t *buf, size_t len, srpc_hdr_t *out)
{
    if (len < SRPC_HDR_LEN)
        return -EMSGSIZE;
    if (!buf || !out)
        return -EINVAL;
    unsigned ver = buf[SRPC_OFF_VER_TYPE] >> 4;
    if (ver == SRPC_VERSION_2 && get16(buf + SRPC_OFF_CHECK) != srpc_hdr_check16(buf))
        return -EILSEQ; /* before believing any field, the magic included */
    if (buf[SRPC_OFF_MAGIC] != SRPC_MAGIC)
        return -EBADMSG;
    if (ver != SRPC_VERSION && ver != SRPC_VERSION_2)
        return -EBADMSG;
    uint8_t type = buf[SRPC_OFF_VER_TYPE] & 0x0f;
    if (type > SRPC_ERROR)
        return -EBADMSG;
    uint16_t seq = get16(buf + SRPC_OFF_SEQ);
    uint16_t nseg = get16(buf + SRPC_OFF_NSEG);
    if (nseg == 0 || seq >= nseg)
        return -EPROTO;

    out->type = type;
    out->version = (uint8_t)ver;
    out->func_id = get16(buf + SRPC_OFF_FUNC_ID);
    out->req_id = get64(buf + SRPC_OFF_REQ_ID);
    if (ver == SRPC_VERSION_2)
        out->req_id &= SRPC_REQ_ID_V2_MASK;
    out->seq = seq;
    out->nseg = nseg;
    out->msg_len = get32(buf + SRPC_OFF_MSG_LEN);
    out->aux = get16(buf + SRPC_OFF_AUX);
    return 0;
}

/* All arithmetic in uint64_t: nseg < 2^16, S <= SRPC_MAX_SEG_DATA < 2^17 (checked before any
 * product), msg_len < 2^32, so no product can overflow. */
int srpc_seg_check(const srpc_hdr_t *h, size_t data_len, uint32_t *seg_size)
{
    if (!h || !seg_size)
        return -EINVAL;
    uint64_t nseg = h->nseg, msg_len = h->msg_len, len = data_len, s;
    if (nseg == 0 || h->seq >= nseg)
        return -EPROTO;

    if (nseg == 1) {
        if (len != msg_len)
            return -EPROTO;
        *seg_size = h->msg_len;
        return 0;
    }

    if (h->seq < nseg - 1) { /* non-last: its length is S */
        s = len;
        if (s < 1 || s > SRPC_MAX_SEG_DATA)
            return -EPROTO;
    } else { /* last: L = msg_len - (nseg-1)*S, 1 <= L <= S */
        if (len < 1 || len > msg_len)
            return -EPROTO;
        if ((msg_len - len) % (nseg - 1) != 0)
            return -EPROTO;
        s = (msg_len - len) / (nseg - 1);
        if (len > s || s > SRPC_MAX_SEG_DATA)
            return -EPROTO;
    }
    if ((nseg - 1) * s >= msg_len || nseg * s < msg_len)
        return -EPROTO;
    *seg_size = (uint32_t)s;
    return 0;
}

uint32_t srpc_seg_count(uint32_t msg_len, uint32_t seg_size)
{
    if (msg_len <= seg_size)
        return 1;
    if (seg_size == 0) /* outside the contract (seg_size >= 1): no valid count */
        return 0;
    return (uint32_t)(((uint64_t)msg_len + seg_size - 1) / seg_size);
}

const char *srpc_strerror(int code)
{
    switch (code) {
    case 0: return "OK";
    case SRPC_E_UNKNOWN_FUNCTION: return "UNKNOWN_FUNCTION";
    case SRPC_E_BAD_REQUEST: return "BAD_REQUEST";
    case SRPC_E_BUSY: return "BUSY";
    case SRPC_E_DEADLINE: return "DEADLINE";
    case SRPC_E_INTERNAL: return "INTERNAL";
    case SRPC_E_TOO_LARGE: return "TOO_LARGE";
    case SRPC_E_TIMEOUT: return "TIMEOUT";
    case SRPC_E_PENDING: return "PENDING";
    case SRPC_E_INVALID: return "INVALID";
    case SRPC_E_SEND: return "SEND_FAILED";
    default: return "UNKNOWN";
    }
}
