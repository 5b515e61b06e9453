/* wire.h: internal mirror of the 22-byte control header of docs/PROTOCOL.md (its version 2 check, version 3's data check), pinned by static asserts. */
#ifndef SRPC_WIRE_H
#define SRPC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "splitrpc_core.h"

/* The header as it lies on the wire: every multi-byte field big-endian, no padding.
 * Documentation and layout checks only: wire.c reads and writes the bytes one by one and
 * never overlays this struct on a buffer (alignment and byte order would bite). */
struct srpc_wire_hdr {
    uint8_t magic;    /* SRPC_MAGIC */
    uint8_t ver_type; /* version << 4 | type */
    uint16_t func_id;
    uint64_t req_id;
    uint16_t seq;
    uint16_t nseg;
    uint32_t msg_len;
    uint16_t aux;
} __attribute__((packed));

#define SRPC_OFF_MAGIC 0
#define SRPC_OFF_VER_TYPE 1
#define SRPC_OFF_FUNC_ID 2
#define SRPC_OFF_REQ_ID 4
#define SRPC_OFF_CHECK 4  /* version 2: the CRC-16 header check; req_id keeps bytes 6..11 */
#define SRPC_OFF_SEQ 12
#define SRPC_OFF_NSEG 14
#define SRPC_OFF_MSG_LEN 16
#define SRPC_OFF_AUX 20

_Static_assert(sizeof(struct srpc_wire_hdr) == SRPC_HDR_LEN, "wire header is 22 bytes");
_Static_assert(offsetof(struct srpc_wire_hdr, magic) == SRPC_OFF_MAGIC, "magic at 0");
_Static_assert(offsetof(struct srpc_wire_hdr, ver_type) == SRPC_OFF_VER_TYPE, "ver_type at 1");
_Static_assert(offsetof(struct srpc_wire_hdr, func_id) == SRPC_OFF_FUNC_ID, "func_id at 2");
_Static_assert(offsetof(struct srpc_wire_hdr, req_id) == SRPC_OFF_REQ_ID, "req_id at 4");
_Static_assert(offsetof(struct srpc_wire_hdr, seq) == SRPC_OFF_SEQ, "seq at 12");
_Static_assert(offsetof(struct srpc_wire_hdr, nseg) == SRPC_OFF_NSEG, "nseg at 14");
_Static_assert(offsetof(struct srpc_wire_hdr, msg_len) == SRPC_OFF_MSG_LEN, "msg_len at 16");
_Static_assert(offsetof(struct srpc_wire_hdr, aux) == SRPC_OFF_AUX, "aux at 20");
/* 14 Ethernet + 20 IPv4 + 8 UDP + header = one 64-byte cache line. */
_Static_assert(14 + 20 + 8 + SRPC_HDR_LEN == 64, "control part of a frame is 64 bytes");
_Static_assert(SRPC_MAX_SEG_DATA == 65507 - SRPC_HDR_LEN, "largest IPv4 UDP payload less header");

/* Data bytes of segment seq of a msg_len-byte message cut at seg_size (docs/PROTOCOL.md,
 * Segmentation): seg_size for every segment but the last, the rest for the last, msg_len for
 * a single segment; 0 past the end. The senders (srpc_udp_send_msg, srpc_msg_segment) share it. */
static inline uint32_t srpc_seg_len(uint32_t msg_len, uint32_t seg_size, uint32_t seq)
{
    uint64_t off = (uint64_t)seq * seg_size;
    if (off >= msg_len)
        return 0;
    return msg_len - off < seg_size ? (uint32_t)(msg_len - off) : seg_size;
}

/* The bytes that follow a datagram's data in version `version`: version 3's data check, version
 * 4's authentication trailer, version 5's session trailer, else none. */
static inline uint32_t srpc_tail_len(unsigned version)
{
    return version == SRPC_VERSION_3   ? SRPC_DATA_CHECK_LEN
           : version == SRPC_VERSION_4 ? SRPC_AUTH_TRAILER_LEN
           : version == SRPC_VERSION_5 ? SRPC_V5_TRAILER_LEN
                                       : 0;
}

/* Version 3's data check (docs/PROTOCOL-v3.md) as it follows a datagram's data: big-endian. */
static inline void srpc_put_data_check(uint8_t out[SRPC_DATA_CHECK_LEN], uint32_t crc)
{
    out[0] = (uint8_t)(crc >> 24);
    out[1] = (uint8_t)(crc >> 16);
    out[2] = (uint8_t)(crc >> 8);
    out[3] = (uint8_t)crc;
}

/* 1 when tail holds version 3's data check of the header hdr and the dlen data bytes at data. */
static inline int srpc_data_check_ok(const uint8_t hdr[SRPC_HDR_LEN], const uint8_t *data, uint32_t dlen,
                                     const uint8_t tail[SRPC_DATA_CHECK_LEN])
{
    uint32_t want = (uint32_t)tail[0] << 24 | (uint32_t)tail[1] << 16 | (uint32_t)tail[2] << 8 | tail[3];
    return want == srpc_crc32c(srpc_crc32c(0, hdr, SRPC_HDR_LEN), data, dlen);
}

#endif /* SRPC_WIRE_H */
