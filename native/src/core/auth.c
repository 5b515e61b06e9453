/* auth.c: version 4's MAC (docs/PROTOCOL-v4.md) over libsodium's keyed BLAKE2b, loaded at first use so that a build and a process without authentication never need it; the trailer. */
#include "core/auth.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "core/be.h"
#include "core/wire.h"

/* libsodium's entry points that we use (its ABI since 1.0.0: libsodium.so.23 is Debian 12's). */
static struct {
    int ok;
    size_t state_bytes;
    int (*init)(void *state, const unsigned char *key, size_t keylen, size_t outlen);
    int (*update)(void *state, const unsigned char *in, unsigned long long inlen);
    int (*final)(void *state, unsigned char *out, size_t outlen);
    int (*verify16)(const unsigned char *x, const unsigned char *y);
    void (*random)(void *buf, size_t size);
    void (*memzero)(void *pnt, size_t len);
} so;

#define STATE_MAX 512 /* crypto_generichash_blake2b_state: 384 bytes, 64-aligned (checked at load) */

static void load(void)
{
    static const char *const names[] = {"libsodium.so.23", "libsodium.so.26", "libsodium.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    int (*sodium_init)(void) = (int (*)(void))dlsym(h, "sodium_init");
    size_t (*statebytes)(void) = (size_t (*)(void))dlsym(h, "crypto_generichash_blake2b_statebytes");
    so.init = (int (*)(void *, const unsigned char *, size_t, size_t))dlsym(h, "crypto_generichash_blake2b_init");
    so.update = (int (*)(void *, const unsigned char *, unsigned long long))dlsym(h, "crypto_generichash_blake2b_update");
    so.final = (int (*)(void *, unsigned char *, size_t))dlsym(h, "crypto_generichash_blake2b_final");
    so.verify16 = (int (*)(const unsigned char *, const unsigned char *))dlsym(h, "crypto_verify_16");
    so.random = (void (*)(void *, size_t))dlsym(h, "randombytes_buf");
    so.memzero = (void (*)(void *, size_t))dlsym(h, "sodium_memzero");
    if (!sodium_init || !statebytes || !so.init || !so.update || !so.final || !so.verify16 || !so.random ||
        !so.memzero || sodium_init() < 0)
        return; /* the handle stays open: harmless, and a later call finds nothing half-loaded */
    so.state_bytes = statebytes();
    so.ok = so.state_bytes <= STATE_MAX;
}

int srpc_auth_available(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load);
    return so.ok ? 0 : -ENOTSUP;
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
    if (so.ok) {
        so.memzero(p, len);
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
    _Alignas(64) unsigned char st[STATE_MAX];
    so.init(st, secret, SRPC_AUTH_SECRET_LEN, SRPC_AUTH_TAG_LEN);
    for (int i = 0; i < n; i++)
        if (parts[i].iov_len)
            so.update(st, parts[i].iov_base, parts[i].iov_len);
    so.update(st, head, SRPC_AUTH_OFF_TAG);
    so.final(st, tag, SRPC_AUTH_TAG_LEN);
    so.memzero(st, so.state_bytes);
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
    return so.verify16(tag, trailer + SRPC_AUTH_OFF_TAG) == 0;
}

int srpc_auth_random(void *buf, size_t len)
{
    if (srpc_auth_available() < 0)
        return -ENOTSUP;
    so.random(buf, len);
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
        so.random(&s->sender, sizeof(s->sender));
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
