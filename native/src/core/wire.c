/* wire.c: encode, decode and check the control header (docs/PROTOCOL.md v1, docs/PROTOCOL-v2.md, -v3.md, -v4.md), version 3's data check, and the segmentation. */
#include <errno.h>
#include <stdint.h>

#include "splitrpc_core.h"
#include "core/be.h"
#include "core/wire.h"

/* CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, not reflected, no final XOR), two bytes per
 * step with two independent lookups (slicing by two: the CRC is linear, so the state XOR two
 * bytes splits into its high byte followed by a zero byte, and its low byte). The tables were
 * generated from the polynomial; tests check the result against the specification's example
 * and a bit-by-bit implementation. */
/* crc_t0[b]: the CRC-16/CCITT (poly 0x1021) of byte b followed by nothing, from state 0 */
static const uint16_t crc_t0[256] = {
    0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50a5, 0x60c6, 0x70e7,
    0x8108, 0x9129, 0xa14a, 0xb16b, 0xc18c, 0xd1ad, 0xe1ce, 0xf1ef,
    0x1231, 0x0210, 0x3273, 0x2252, 0x52b5, 0x4294, 0x72f7, 0x62d6,
    0x9339, 0x8318, 0xb37b, 0xa35a, 0xd3bd, 0xc39c, 0xf3ff, 0xe3de,
    0x2462, 0x3443, 0x0420, 0x1401, 0x64e6, 0x74c7, 0x44a4, 0x5485,
    0xa56a, 0xb54b, 0x8528, 0x9509, 0xe5ee, 0xf5cf, 0xc5ac, 0xd58d,
    0x3653, 0x2672, 0x1611, 0x0630, 0x76d7, 0x66f6, 0x5695, 0x46b4,
    0xb75b, 0xa77a, 0x9719, 0x8738, 0xf7df, 0xe7fe, 0xd79d, 0xc7bc,
    0x48c4, 0x58e5, 0x6886, 0x78a7, 0x0840, 0x1861, 0x2802, 0x3823,
    0xc9cc, 0xd9ed, 0xe98e, 0xf9af, 0x8948, 0x9969, 0xa90a, 0xb92b,
    0x5af5, 0x4ad4, 0x7ab7, 0x6a96, 0x1a71, 0x0a50, 0x3a33, 0x2a12,
    0xdbfd, 0xcbdc, 0xfbbf, 0xeb9e, 0x9b79, 0x8b58, 0xbb3b, 0xab1a,
    0x6ca6, 0x7c87, 0x4ce4, 0x5cc5, 0x2c22, 0x3c03, 0x0c60, 0x1c41,
    0xedae, 0xfd8f, 0xcdec, 0xddcd, 0xad2a, 0xbd0b, 0x8d68, 0x9d49,
    0x7e97, 0x6eb6, 0x5ed5, 0x4ef4, 0x3e13, 0x2e32, 0x1e51, 0x0e70,
    0xff9f, 0xefbe, 0xdfdd, 0xcffc, 0xbf1b, 0xaf3a, 0x9f59, 0x8f78,
    0x9188, 0x81a9, 0xb1ca, 0xa1eb, 0xd10c, 0xc12d, 0xf14e, 0xe16f,
    0x1080, 0x00a1, 0x30c2, 0x20e3, 0x5004, 0x4025, 0x7046, 0x6067,
    0x83b9, 0x9398, 0xa3fb, 0xb3da, 0xc33d, 0xd31c, 0xe37f, 0xf35e,
    0x02b1, 0x1290, 0x22f3, 0x32d2, 0x4235, 0x5214, 0x6277, 0x7256,
    0xb5ea, 0xa5cb, 0x95a8, 0x8589, 0xf56e, 0xe54f, 0xd52c, 0xc50d,
    0x34e2, 0x24c3, 0x14a0, 0x0481, 0x7466, 0x6447, 0x5424, 0x4405,
    0xa7db, 0xb7fa, 0x8799, 0x97b8, 0xe75f, 0xf77e, 0xc71d, 0xd73c,
    0x26d3, 0x36f2, 0x0691, 0x16b0, 0x6657, 0x7676, 0x4615, 0x5634,
    0xd94c, 0xc96d, 0xf90e, 0xe92f, 0x99c8, 0x89e9, 0xb98a, 0xa9ab,
    0x5844, 0x4865, 0x7806, 0x6827, 0x18c0, 0x08e1, 0x3882, 0x28a3,
    0xcb7d, 0xdb5c, 0xeb3f, 0xfb1e, 0x8bf9, 0x9bd8, 0xabbb, 0xbb9a,
    0x4a75, 0x5a54, 0x6a37, 0x7a16, 0x0af1, 0x1ad0, 0x2ab3, 0x3a92,
    0xfd2e, 0xed0f, 0xdd6c, 0xcd4d, 0xbdaa, 0xad8b, 0x9de8, 0x8dc9,
    0x7c26, 0x6c07, 0x5c64, 0x4c45, 0x3ca2, 0x2c83, 0x1ce0, 0x0cc1,
    0xef1f, 0xff3e, 0xcf5d, 0xdf7c, 0xaf9b, 0xbfba, 0x8fd9, 0x9ff8,
    0x6e17, 0x7e36, 0x4e55, 0x5e74, 0x2e93, 0x3eb2, 0x0ed1, 0x1ef0,
};
/* crc_t1[b]: the same of byte b followed by one zero byte (slicing by two) */
static const uint16_t crc_t1[256] = {
    0x0000, 0x3331, 0x6662, 0x5553, 0xccc4, 0xfff5, 0xaaa6, 0x9997,
    0x89a9, 0xba98, 0xefcb, 0xdcfa, 0x456d, 0x765c, 0x230f, 0x103e,
    0x0373, 0x3042, 0x6511, 0x5620, 0xcfb7, 0xfc86, 0xa9d5, 0x9ae4,
    0x8ada, 0xb9eb, 0xecb8, 0xdf89, 0x461e, 0x752f, 0x207c, 0x134d,
    0x06e6, 0x35d7, 0x6084, 0x53b5, 0xca22, 0xf913, 0xac40, 0x9f71,
    0x8f4f, 0xbc7e, 0xe92d, 0xda1c, 0x438b, 0x70ba, 0x25e9, 0x16d8,
    0x0595, 0x36a4, 0x63f7, 0x50c6, 0xc951, 0xfa60, 0xaf33, 0x9c02,
    0x8c3c, 0xbf0d, 0xea5e, 0xd96f, 0x40f8, 0x73c9, 0x269a, 0x15ab,
    0x0dcc, 0x3efd, 0x6bae, 0x589f, 0xc108, 0xf239, 0xa76a, 0x945b,
    0x8465, 0xb754, 0xe207, 0xd136, 0x48a1, 0x7b90, 0x2ec3, 0x1df2,
    0x0ebf, 0x3d8e, 0x68dd, 0x5bec, 0xc27b, 0xf14a, 0xa419, 0x9728,
    0x8716, 0xb427, 0xe174, 0xd245, 0x4bd2, 0x78e3, 0x2db0, 0x1e81,
    0x0b2a, 0x381b, 0x6d48, 0x5e79, 0xc7ee, 0xf4df, 0xa18c, 0x92bd,
    0x8283, 0xb1b2, 0xe4e1, 0xd7d0, 0x4e47, 0x7d76, 0x2825, 0x1b14,
    0x0859, 0x3b68, 0x6e3b, 0x5d0a, 0xc49d, 0xf7ac, 0xa2ff, 0x91ce,
    0x81f0, 0xb2c1, 0xe792, 0xd4a3, 0x4d34, 0x7e05, 0x2b56, 0x1867,
    0x1b98, 0x28a9, 0x7dfa, 0x4ecb, 0xd75c, 0xe46d, 0xb13e, 0x820f,
    0x9231, 0xa100, 0xf453, 0xc762, 0x5ef5, 0x6dc4, 0x3897, 0x0ba6,
    0x18eb, 0x2bda, 0x7e89, 0x4db8, 0xd42f, 0xe71e, 0xb24d, 0x817c,
    0x9142, 0xa273, 0xf720, 0xc411, 0x5d86, 0x6eb7, 0x3be4, 0x08d5,
    0x1d7e, 0x2e4f, 0x7b1c, 0x482d, 0xd1ba, 0xe28b, 0xb7d8, 0x84e9,
    0x94d7, 0xa7e6, 0xf2b5, 0xc184, 0x5813, 0x6b22, 0x3e71, 0x0d40,
    0x1e0d, 0x2d3c, 0x786f, 0x4b5e, 0xd2c9, 0xe1f8, 0xb4ab, 0x879a,
    0x97a4, 0xa495, 0xf1c6, 0xc2f7, 0x5b60, 0x6851, 0x3d02, 0x0e33,
    0x1654, 0x2565, 0x7036, 0x4307, 0xda90, 0xe9a1, 0xbcf2, 0x8fc3,
    0x9ffd, 0xaccc, 0xf99f, 0xcaae, 0x5339, 0x6008, 0x355b, 0x066a,
    0x1527, 0x2616, 0x7345, 0x4074, 0xd9e3, 0xead2, 0xbf81, 0x8cb0,
    0x9c8e, 0xafbf, 0xfaec, 0xc9dd, 0x504a, 0x637b, 0x3628, 0x0519,
    0x10b2, 0x2383, 0x76d0, 0x45e1, 0xdc76, 0xef47, 0xba14, 0x8925,
    0x991b, 0xaa2a, 0xff79, 0xcc48, 0x55df, 0x66ee, 0x33bd, 0x008c,
    0x13c1, 0x20f0, 0x75a3, 0x4692, 0xdf05, 0xec34, 0xb967, 0x8a56,
    0x9a68, 0xa959, 0xfc0a, 0xcf3b, 0x56ac, 0x659d, 0x30ce, 0x03ff,
};

_Static_assert(SRPC_HDR_LEN % 2 == 0 && SRPC_OFF_CHECK % 2 == 0, "the check is computed two bytes at a time");

uint16_t srpc_hdr_check16(const uint8_t hdr[SRPC_HDR_LEN])
{
    uint16_t c = 0xffff;
    for (int i = 0; i < SRPC_HDR_LEN; i += 2) { /* 11 steps; bytes 4..5, the check's place, as 0 */
        uint16_t w = i == SRPC_OFF_CHECK ? 0 : (uint16_t)(hdr[i] << 8 | hdr[i + 1]);
        uint16_t x = c ^ w;
        c = (uint16_t)(crc_t1[x >> 8] ^ crc_t0[x & 0xff]);
    }
    return c;
}

int srpc_hdr_encode(const srpc_hdr_t *h, uint8_t out[SRPC_HDR_LEN])
{
    if (!h || !out)
        return -EINVAL;
    unsigned ver = h->version ? h->version : SRPC_VERSION;
    if (h->type > SRPC_ERROR || ver > SRPC_VERSION_5 || (ver >= SRPC_VERSION_2 && h->req_id > SRPC_REQ_ID_V2_MASK))
        return -EINVAL;
    out[SRPC_OFF_MAGIC] = SRPC_MAGIC;
    out[SRPC_OFF_VER_TYPE] = (uint8_t)(ver << 4 | h->type);
    srpc_put16(out + SRPC_OFF_FUNC_ID, h->func_id);
    srpc_put64(out + SRPC_OFF_REQ_ID, h->req_id); /* v2..v5: the top 16 bits are 0, the check's place */
    srpc_put16(out + SRPC_OFF_SEQ, h->seq);
    srpc_put16(out + SRPC_OFF_NSEG, h->nseg);
    srpc_put32(out + SRPC_OFF_MSG_LEN, h->msg_len);
    srpc_put16(out + SRPC_OFF_AUX, h->aux);
    if (ver >= SRPC_VERSION_2)
        srpc_put16(out + SRPC_OFF_CHECK, srpc_hdr_check16(out));
    return 0;
}

int srpc_hdr_decode(const uint8_t *buf, size_t len, srpc_hdr_t *out)
{
    if (len < SRPC_HDR_LEN)
        return -EMSGSIZE;
    if (!buf || !out)
        return -EINVAL;
    unsigned ver = buf[SRPC_OFF_VER_TYPE] >> 4;
    if (ver >= SRPC_VERSION_2 && ver <= SRPC_VERSION_5 && srpc_get16(buf + SRPC_OFF_CHECK) != srpc_hdr_check16(buf))
        return -EILSEQ; /* before believing any field, the magic included */
    if (buf[SRPC_OFF_MAGIC] != SRPC_MAGIC)
        return -EBADMSG;
    if (ver < SRPC_VERSION || ver > SRPC_VERSION_5)
        return -EBADMSG; /* (version 5's handshake types are read by core/session.c, not here) */
    uint8_t type = buf[SRPC_OFF_VER_TYPE] & 0x0f;
    if (type > SRPC_ERROR)
        return -EBADMSG;
    uint16_t seq = srpc_get16(buf + SRPC_OFF_SEQ);
    uint16_t nseg = srpc_get16(buf + SRPC_OFF_NSEG);
    if (nseg == 0 || seq >= nseg)
        return -EPROTO;

    out->type = type;
    out->version = (uint8_t)ver;
    out->func_id = srpc_get16(buf + SRPC_OFF_FUNC_ID);
    out->req_id = srpc_get64(buf + SRPC_OFF_REQ_ID);
    if (ver >= SRPC_VERSION_2)
        out->req_id &= SRPC_REQ_ID_V2_MASK;
    out->seq = seq;
    out->nseg = nseg;
    out->msg_len = srpc_get32(buf + SRPC_OFF_MSG_LEN);
    out->aux = srpc_get16(buf + SRPC_OFF_AUX);
    return 0;
}

int srpc_data_check(const srpc_hdr_t *h, const uint8_t hdr[SRPC_HDR_LEN], const uint8_t *data, uint32_t *len)
{
    if (h->version != SRPC_VERSION_3)
        return 0;
    if (*len < SRPC_DATA_CHECK_LEN)
        return -EMSGSIZE;
    const uint32_t n = *len - SRPC_DATA_CHECK_LEN;
    if (!srpc_data_check_ok(hdr, data, n, data + n))
        return -EILSEQ;
    *len = n;
    return 0;
}

uint32_t srpc_seg_data_max(unsigned version, uint32_t seg_size)
{
    const uint32_t tail = srpc_tail_len(version);
    return seg_size > tail + 1 ? seg_size - tail : 1;
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
    case SRPC_E_DRAINING: return "DRAINING";
    case SRPC_E_FORBIDDEN: return "FORBIDDEN";
    case SRPC_E_TIMEOUT: return "TIMEOUT";
    case SRPC_E_PENDING: return "PENDING";
    case SRPC_E_UNAVAILABLE: return "UNAVAILABLE";
    case SRPC_E_INVALID: return "INVALID";
    case SRPC_E_SEND: return "SEND_FAILED";
    case SRPC_E_CLOSED: return "CLOSED";
    default: return "UNKNOWN";
    }
}
