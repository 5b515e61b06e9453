/* auth.h: internal side of version 4's authentication (docs/PROTOCOL-v4.md): the trailer's layout, signing a datagram given as pieces, checking one. */
#ifndef SRPC_AUTH_INTERNAL_H
#define SRPC_AUTH_INTERNAL_H

#include <stdint.h>
#include <sys/uio.h>

#include "splitrpc_auth.h"

/* The trailer, after a datagram's data: every integer big-endian. */
#define SRPC_AUTH_OFF_KEY 0      /* u32 key id */
#define SRPC_AUTH_OFF_SENDER 4   /* u64 sender number */
#define SRPC_AUTH_OFF_COUNTER 12 /* u64 the sender's datagram counter */
#define SRPC_AUTH_OFF_TIME 20    /* u32 the sender's clock, ms since the epoch mod 2^32 */
#define SRPC_AUTH_OFF_TAG 24     /* 16 bytes: BLAKE2b-128 keyed with the secret over all before it */
_Static_assert(SRPC_AUTH_OFF_TAG + SRPC_AUTH_TAG_LEN == SRPC_AUTH_TRAILER_LEN, "trailer is 40 bytes");

typedef struct srpc_auth_fields {
    uint32_t key_id;
    uint64_t sender, counter;
    uint32_t time_ms;
} srpc_auth_fields_t;

/* The trailer's fields (the tag not checked). */
void srpc_auth_fields(const uint8_t trailer[SRPC_AUTH_TRAILER_LEN], srpc_auth_fields_t *f);

/* The clock that datagrams carry: ms since the epoch, mod 2^32. */
uint32_t srpc_auth_now_ms(void);
/* The same, whole (the server's bookkeeping). */
uint64_t srpc_auth_now_ms64(void);

/* Writes the trailer of the datagram whose bytes (header, then data) are the n parts: key key_id
 * with secret, sender number sender, the next value of *counter (advanced atomically: any thread),
 * the time, the tag. 0 or -ENOTSUP. */
int srpc_auth_sign_iov(uint32_t key_id, const uint8_t *secret, uint64_t sender, uint64_t *counter,
                       const struct iovec *parts, int n, uint8_t trailer[SRPC_AUTH_TRAILER_LEN]);

/* The same with the counter and time given (tests: windows, skew). */
int srpc_auth_sign_at(uint32_t key_id, const uint8_t *secret, uint64_t sender, uint64_t counter, uint32_t time_ms,
                      const struct iovec *parts, int n, uint8_t trailer[SRPC_AUTH_TRAILER_LEN]);

/* 1 when trailer's tag is right for secret over the 22 header bytes at hdr and dlen data bytes at
 * data, else 0. Compares in constant time. */
int srpc_auth_check(const uint8_t *secret, const uint8_t *hdr, const uint8_t *data, uint32_t dlen,
                    const uint8_t trailer[SRPC_AUTH_TRAILER_LEN]);

/* Zeroes len bytes at p in a way the compiler keeps (libsodium's sodium_memzero where loaded):
 * secrets and hash states are wiped before their memory is let go. */
void srpc_auth_wipe(void *p, size_t len);

/* Random bytes from the library's generator (sender numbers). 0 or -ENOTSUP. */
int srpc_auth_random(void *buf, size_t len);

#endif
