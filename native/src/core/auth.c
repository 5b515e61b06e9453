/* auth.c: version 4's MAC (docs/PROTOCOL-v4.md) over libsodium's keyed BLAKE2b, loaded at first use so that a build and a process without authentication never need it; the trailer. */
#include "core/auth.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "core/be.h"
#include "core/sodium.h"
#include "core/wire.h"

int srpc_auth_available(void)
{
    return srpc_sodium() ? 0 : -ENOTSUP;
}

const char *srpc_auth_library(void)
{
    return srpc_sodium_library();
}

const char *srpc_auth_library_env(void)
{
    return SRPC_LIBSODIUM_ENV;
}

void srpc_auth_fields(const uint8_t trailer[SRPC_AUTH_TRAILER_LEN], srpc_auth_fields_t *f)
{
    f->key_id = srpc_get32(trailer + SRPC_AUTH_OFF_KEY);
    f->sender = srpc_get64(trailer + SRPC_AUTH_OFF_SENDER);
    f->counter = srpc_get64(trailer + SRPC_AUTH_OFF_COUNTER);
    f->time_ms = srpc_get32(trailer + SRPC_AUTH_OFF_TIME);
}

uint64_t srpc_auth_now_ms64(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint32_t srpc_auth_now_ms(void)
{
    return (uint32_t)srpc_auth_now_ms64();
}

void srpc_auth_wipe(void *p, size_t len)
{
    const srpc_sodium_t *so = srpc_sodium();
    if (so) {
        so->memzero(p, len);
        return;
    }
    volatile uint8_t *v = p;
    while (len--)
        *v++ = 0;
}

/* The tag over the n parts, then the trailer's first SRPC_AUTH_OFF_TAG bytes. The hash state
 * (as good as the key) is wiped after. */
static void mac(const uint8_t *secret, const struct iovec *parts, int n, const uint8_t *head,
                uint8_t tag[SRPC_AUTH_TAG_LEN])
{
    const srpc_sodium_t *so = srpc_sodium(); /* loaded: the callers checked */
    _Alignas(64) unsigned char st[SRPC_SODIUM_STATE_MAX];
    so->hash_init(st, secret, SRPC_AUTH_SECRET_LEN, SRPC_AUTH_TAG_LEN);
    for (int i = 0; i < n; i++)
        if (parts[i].iov_len)
            so->hash_update(st, parts[i].iov_base, parts[i].iov_len);
    so->hash_update(st, head, SRPC_AUTH_OFF_TAG);
    so->hash_final(st, tag, SRPC_AUTH_TAG_LEN);
    so->memzero(st, so->hash_state_bytes);
}

int srpc_auth_sign_at(uint32_t key_id, const uint8_t *secret, uint64_t sender, uint64_t counter, uint32_t time_ms,
                      const struct iovec *parts, int n, uint8_t trailer[SRPC_AUTH_TRAILER_LEN])
{
    if (srpc_auth_available() < 0)
        return -ENOTSUP;
    srpc_put32(trailer + SRPC_AUTH_OFF_KEY, key_id);
    srpc_put64(trailer + SRPC_AUTH_OFF_SENDER, sender);
    srpc_put64(trailer + SRPC_AUTH_OFF_COUNTER, counter);
    srpc_put32(trailer + SRPC_AUTH_OFF_TIME, time_ms);
    mac(secret, parts, n, trailer, trailer + SRPC_AUTH_OFF_TAG);
    return 0;
}

int srpc_auth_sign_iov(uint32_t key_id, const uint8_t *secret, uint64_t sender, uint64_t *counter,
                       const struct iovec *parts, int n, uint8_t trailer[SRPC_AUTH_TRAILER_LEN])
{
    if (srpc_auth_available() < 0)
        return -ENOTSUP; /* before the counter moves */
    return srpc_auth_sign_at(key_id, secret, sender, __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED),
                             srpc_auth_now_ms(), parts, n, trailer);
}

int srpc_auth_check(const uint8_t *secret, const uint8_t *hdr, const uint8_t *data, uint32_t dlen,
                    const uint8_t trailer[SRPC_AUTH_TRAILER_LEN])
{
    if (srpc_auth_available() < 0)
        return 0;
    const struct iovec parts[2] = {{(void *)hdr, SRPC_HDR_LEN}, {(void *)data, dlen}};
    uint8_t tag[SRPC_AUTH_TAG_LEN];
    mac(secret, parts, 2, trailer, tag);
    return srpc_sodium()->verify16(tag, trailer + SRPC_AUTH_OFF_TAG) == 0;
}

int srpc_auth_random(void *buf, size_t len)
{
    if (srpc_auth_available() < 0)
        return -ENOTSUP;
    srpc_sodium()->random(buf, len);
    return 0;
}

int srpc_auth_sender_init(srpc_auth_sender_t *s, uint32_t key_id, const uint8_t *secret, size_t len)
{
    if (!s || !secret || key_id == 0 || len != SRPC_AUTH_SECRET_LEN)
        return -EINVAL;
    if (srpc_auth_available() < 0)
        return -ENOTSUP;
    memset(s, 0, sizeof(*s));
    s->key_id = key_id;
    memcpy(s->secret, secret, len);
    do
        srpc_sodium()->random(&s->sender, sizeof(s->sender));
    while (s->sender == 0);
    return 0;
}

int srpc_auth_seal(srpc_auth_sender_t *s, uint8_t *buf, size_t len, size_t cap)
{
    if (!s || !buf || len < SRPC_HDR_LEN || len > SRPC_HDR_LEN + (size_t)SRPC_MAX_SEG_DATA - SRPC_AUTH_TRAILER_LEN)
        return -EINVAL;
    if (cap < len + SRPC_AUTH_TRAILER_LEN)
        return -ENOBUFS;
    const struct iovec part = {buf, len};
    int r = srpc_auth_sign_iov(s->key_id, s->secret, s->sender, &s->counter, &part, 1, buf + len);
    return r < 0 ? r : (int)(len + SRPC_AUTH_TRAILER_LEN);
}

int srpc_auth_tag_ok(const uint8_t *secret, const uint8_t *dgram, size_t len)
{
    if (srpc_auth_available() < 0)
        return -ENOTSUP;
    if (!secret || !dgram || len < SRPC_HDR_LEN + SRPC_AUTH_TRAILER_LEN || len > UINT32_MAX)
        return 0;
    const uint32_t dlen = (uint32_t)(len - SRPC_HDR_LEN - SRPC_AUTH_TRAILER_LEN);
    return srpc_auth_check(secret, dgram, dgram + SRPC_HDR_LEN, dlen, dgram + SRPC_HDR_LEN + dlen);
}
