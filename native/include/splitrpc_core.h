/* splitrpc_core.h: the core of the C API: the wire header, whole messages to and from datagrams, the host Tensor Queue, and what this build contains; every int function returns 0 (or a count) or -errno. */
#ifndef SPLITRPC_CORE_H
#define SPLITRPC_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ wire (docs/PROTOCOL.md v1, docs/PROTOCOL-v2.md, -v3.md, -v4.md) */

#define SRPC_HDR_LEN 22           /* control header bytes at the start of every datagram */
#define SRPC_MAGIC 0xA5
#define SRPC_VERSION 1            /* version 1: docs/PROTOCOL.md */
#define SRPC_VERSION_2 2          /* version 2: version 1 with a CRC-16 header check, 48-bit req_id */
#define SRPC_VERSION_3 3          /* version 3: version 2 with a CRC-32C data check after each datagram's data */
#define SRPC_DATA_CHECK_LEN 4     /* version 3: bytes of the data check at the end of a datagram */
#define SRPC_VERSION_4 4          /* version 4: version 2 with an authentication trailer after each datagram's data */
#define SRPC_AUTH_TRAILER_LEN 40  /* version 4: key id, sender, counter, time, tag (docs/PROTOCOL-v4.md) */
#define SRPC_VERSION_5 5          /* version 5: version 2 inside a session (docs/PROTOCOL-v5.md) */
#define SRPC_V5_TRAILER_LEN 32    /* version 5: session, counter, tag after each data datagram's data */
#define SRPC_REQ_ID_V2_MASK 0xffffffffffffull
#define SRPC_MAX_SEG_DATA 65485   /* 65507 (largest UDP/IPv4 payload) - 22 */
#define SRPC_ERRMSG_MAX 256       /* longest optional UTF-8 message of an ERROR datagram */

enum srpc_msg_type { SRPC_REQUEST = 0, SRPC_RESPONSE = 1, SRPC_ERROR = 2 };

enum srpc_error_code {
    SRPC_E_UNKNOWN_FUNCTION = 1,
    SRPC_E_BAD_REQUEST = 2,
    SRPC_E_BUSY = 3,
    SRPC_E_DEADLINE = 4,
    SRPC_E_INTERNAL = 5,
    SRPC_E_TOO_LARGE = 6,
    SRPC_E_DRAINING = 7, /* docs/PROTOCOL.md, Amendment 1: the server takes no new calls (it is stopping) */
    SRPC_E_FORBIDDEN = 8, /* docs/PROTOCOL-v4.md: the call's key may not call this function, or has expired */
    SRPC_E_MAX = 9 /* one past the last code; local-only codes below are never sent */
};
/* Local (client-side) outcomes, never on the wire. */
#define SRPC_E_TIMEOUT 100
#define SRPC_E_PENDING 101
#define SRPC_E_INVALID 102   /* load generator: a RESPONSE that differs from the expected reply */
#define SRPC_E_SEND 103      /* load generator: the request could not be sent */
#define SRPC_E_UNAVAILABLE 104 /* the server's address answered "unreachable" (ICMP port or host
                                  unreachable): the call failed without waiting for its deadline */
#define SRPC_E_CLOSED 105    /* the client was shut down (srpc_client_shutdown) before the call finished */

/* A decoded control header, fields in host order. */
typedef struct srpc_hdr {
    uint8_t type;     /* enum srpc_msg_type */
    uint8_t version;  /* 1, 2, 3 or 4; 0 is taken as 1 when encoding */
    uint16_t func_id;
    uint64_t req_id;
    uint16_t seq;
    uint16_t nseg;
    uint32_t msg_len;
    uint16_t aux;
} srpc_hdr_t;

/* Writes the 22-byte big-endian header of h->version (versions 2, 3 and 4 with the header check;
 * version 3's data check and version 4's trailer are the sender's, after the data). Returns 0, or
 * -EINVAL for a type > 2, a version other than 0..4, or a version 2..4 req_id over 48 bits. */
int srpc_hdr_encode(const srpc_hdr_t *h, uint8_t out[SRPC_HDR_LEN]);

/* Parses and checks the header alone: length >= 22, magic, version (1..4), the version 2..4
 * header check, type, nseg >= 1, seq < nseg. Returns 0, -EMSGSIZE (short), -EILSEQ (header
 * check mismatch, tested before any other field), -EBADMSG (magic/version/type) or -EPROTO
 * (seq/nseg). Never reads past len. A version 3 datagram's data check is srpc_data_check's. */
int srpc_hdr_decode(const uint8_t *buf, size_t len, srpc_hdr_t *out);

/* The version 2 check of a 22-byte header: CRC-16/CCITT-FALSE over it with bytes 4..5 as 0. */
uint16_t srpc_hdr_check16(const uint8_t hdr[SRPC_HDR_LEN]);

/* A version 3 datagram (docs/PROTOCOL-v3.md) whose header (decoded, h) is hdr: *len bytes follow
 * the header at data, the last SRPC_DATA_CHECK_LEN of them the CRC-32C of the header and the
 * data. Returns 0 with *len set to the data bytes' count, -EMSGSIZE when *len is shorter than the
 * check, or -EILSEQ when the check does not match. Other versions: 0, *len unchanged. Reads the
 * data (host memory). Any thread. */
int srpc_data_check(const srpc_hdr_t *h, const uint8_t hdr[SRPC_HDR_LEN], const uint8_t *data, uint32_t *len);

/* The data bytes a segment of a version `version` message carries when its sender's segment
 * size (the data budget of one datagram after the header, SRPC_MAX_SEG_DATA at most) is
 * seg_size: seg_size, less the data check for version 3 or the trailer for version 4 (at least 1). */
uint32_t srpc_seg_data_max(unsigned version, uint32_t seg_size);

/* Checks the segmentation rules of docs/PROTOCOL.md for one segment carrying data_len bytes
 * and derives the message's segment size S (for nseg == 1, S = msg_len).
 * Returns 0 with *seg_size set, or -EPROTO for an impossible combination. */
int srpc_seg_check(const srpc_hdr_t *h, size_t data_len, uint32_t *seg_size);

/* Number of segments for a message of msg_len bytes cut at seg_size (>= 1). */
uint32_t srpc_seg_count(uint32_t msg_len, uint32_t seg_size);

/* CRC-32C (Castagnoli; reflected polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF: the
 * check of the ASCII bytes "123456789" is 0xE3069283) of len bytes, continuing from crc (0 to
 * start; the result of one call is the crc of the next over the following bytes). Uses the CPU's
 * CRC instruction where present (SSE4.2, ARMv8 CRC). Any thread. */
uint32_t srpc_crc32c(uint32_t crc, const void *buf, size_t len);
/* The same by tables alone (for tests and comparison). */
uint32_t srpc_crc32c_tables(uint32_t crc, const void *buf, size_t len);
/* 1 when srpc_crc32c uses the CPU's instruction, else 0. */
int srpc_crc32c_hardware(void);

/* ------------------------------------------------------------------ message codec */

/* Whole messages to and from datagrams without a socket: what a client or server puts on the
 * wire and takes off it, for tests, tools and other transports. */

/* Cuts a message of len bytes into the datagrams a sender puts on the wire for it: each is the
 * header of tmpl (type, version, func_id, req_id, aux; seq, nseg and msg_len filled in) followed
 * by its segment of data (and for version 3 the data check), S = srpc_seg_data_max(version,
 * seg_size), seg_size 1..SRPC_MAX_SEG_DATA. The datagrams are written back to back into out (cap
 * bytes; len + 22 * count in all, 26 * count for version 3) and dgram_len[i] gets the length of
 * datagram i.
 * Returns the count of datagrams, -EINVAL (NULL pointer, type > 2, bad seg_size, version 4: it
 * needs a key), -EMSGSIZE
 * (more than 65535 segments) or -ENOBUFS (cap or max_dgrams too small; nothing written).
 * Reads data and tmpl only; any thread. */
int srpc_msg_segment(const srpc_hdr_t *tmpl, const void *data, uint32_t len, uint32_t seg_size,
                     uint8_t *out, size_t cap, uint32_t *dgram_len, uint32_t max_dgrams);

/* Puts one message at a time together from its datagrams, which may come in any order and
 * duplicated, checking each as untrusted input. Single-owner: one thread at a time uses it,
 * with no locking inside. The message buffer is kept for the next message (reuse, not a new
 * allocation, for messages of the same size or smaller). */
typedef struct srpc_reassembler srpc_reassembler_t;

/* max_msg: the largest msg_len accepted. Returns 0 or -EINVAL / -ENOMEM. */
int srpc_reassembler_create(uint32_t max_msg, srpc_reassembler_t **out);
/* Frees it and any message (NULL is fine). */
void srpc_reassembler_destroy(srpc_reassembler_t *r);

/* Adds one datagram (header and data, len bytes; copied, the caller keeps it). A segment of a
 * new message starts that message when none is in progress (a completed one is dropped).
 * Returns 1 when the message became complete, 0 when more segments are needed, or rejects
 * the datagram and changes nothing: -EMSGSIZE (shorter than the header, or a version 3 datagram
 * shorter than its data check), -EILSEQ (a header check or version 3 data check mismatch), -EBADMSG (magic, version or type;
 * version 4, whose tag needs a key), -EPROTO (impossible seq/nseg/msg_len/length, or disagreeing with the
 * message's msg_len, nseg or S), -EALREADY (a duplicate, also of the completed message),
 * -EBUSY (a segment of another message, by req_id, type, func_id or version, while one is in
 * progress), -E2BIG (msg_len > max_msg), -EINVAL (NULL r or dgram); or -ENOMEM (a
 * completed message was dropped all the same). */
int srpc_reassembler_push(srpc_reassembler_t *r, const uint8_t *dgram, size_t len);

/* The completed message: its bytes (NULL while none is complete), *hdr its header with seq 0
 * (may be NULL), *len its length (may be NULL). Valid until the next push or reset. */
const uint8_t *srpc_reassembler_message(const srpc_reassembler_t *r, srpc_hdr_t *hdr, uint32_t *len);

/* Drops the message in progress or completed; its buffer is kept for the next one. */
void srpc_reassembler_reset(srpc_reassembler_t *r);

/* ------------------------------------------------------------------ tensor queue (host) */

#define SRPC_MAX_TENSORS 8 /* inputs, and outputs, of one function */

/* A ring of `capacity` elements of `elem_size` bytes whose memory is mapped twice back to
 * back, so any run of <= capacity consecutive elements (wrapping or not) is contiguous.
 * Element `seq` (a running counter) lives at base + (seq * elem_size) mod ring_bytes, where
 * ring_bytes is capacity * elem_size rounded up to whole pages. Owned by its creator;
 * not thread-safe by itself (the engine serialises access). */
typedef struct srpc_tq srpc_tq_t;

int srpc_tq_create(size_t elem_size, uint32_t capacity, srpc_tq_t **out);
/* The same with ring_bytes rounded up to a multiple of align as well (a power of two, e.g. a
 * GPU's allocation granularity, so that this host TQ is laid out slot for slot like a device
 * TQ of the same element size and capacity). -EINVAL when align is not a power of two. */
int srpc_tq_create_aligned(size_t elem_size, uint32_t capacity, size_t align, srpc_tq_t **out);
void srpc_tq_destroy(srpc_tq_t *tq);
uint8_t *srpc_tq_elem(const srpc_tq_t *tq, uint64_t seq); /* lower-mapping address of seq */
uint8_t *srpc_tq_base(const srpc_tq_t *tq);
size_t srpc_tq_ring_bytes(const srpc_tq_t *tq);
size_t srpc_tq_elem_size(const srpc_tq_t *tq);
uint32_t srpc_tq_capacity(const srpc_tq_t *tq);

/* Copies one request into element seq of each of n Tensor Queues, as the server does for
 * every call: data holds the n tensors back to back, sizes[k] bytes for tqs[k]. n > 1: len
 * must be the sum of sizes; n == 1: len <= sizes[0] bytes are copied (a raw request may be
 * shorter than its element). Every sizes[k] fits its TQ's element. Returns 0, or -EINVAL
 * (nothing copied). Same thread rules as the TQs: the caller serialises access. */
int srpc_tq_scatter(srpc_tq_t *const *tqs, const uint32_t *sizes, uint32_t n, uint64_t seq,
                    const void *data, uint32_t len);

/* ------------------------------------------------------------------ build facts */

/* Bit set of what was compiled in: 1 CUDA kernels (built with nvcc), 2 DPDK, 4 sanitizers,
 * 8 fault injection (testing builds: srpc_server_set_faults works). */
#define SRPC_FEATURE_CUDA 1
#define SRPC_FEATURE_DPDK 2
#define SRPC_FEATURE_SANITIZE 4
#define SRPC_FEATURE_FAULTS 8
unsigned srpc_features(void);
const char *srpc_version(void);
const char *srpc_strerror(int code); /* name of an error code (1..8, 100..104) */

#ifdef __cplusplus
}
#endif
#endif /* SPLITRPC_CORE_H */
