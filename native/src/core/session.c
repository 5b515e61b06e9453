/* session.c: protocol version 5's handshake, keys and data datagrams (session.h, docs/PROTOCOL-v5.md). */
#include "core/session.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "core/aes_keys.h"
#include "core/auth.h"
#include "core/be.h"
#include "core/sodium.h"

/* Offsets in the bodies (docs/PROTOCOL-v5.md's tables), from the datagram's start. */
#define INIT_KEY (SRPC_HDR_LEN + 0)
#define INIT_E (SRPC_HDR_LEN + 4)
#define INIT_TIME (SRPC_HDR_LEN + 36)
#define INIT_FLAGS (SRPC_HDR_LEN + 44)
#define INIT_PREV (SRPC_HDR_LEN + 48)
#define INIT_RESUME (SRPC_HDR_LEN + 56)
#define INIT_MAC1 SRPC_V5_INIT_MAC1
#define INIT_COOKIE_MAC (SRPC_HDR_LEN + 88)
#define ACC_KEY (SRPC_HDR_LEN + 0)
#define ACC_SESSION (SRPC_HDR_LEN + 4)
#define ACC_E (SRPC_HDR_LEN + 12)
#define ACC_FLAGS (SRPC_HDR_LEN + 44)
#define ACC_CONFIRM (SRPC_HDR_LEN + 48)
#define COOKIE_NONCE (SRPC_HDR_LEN + 0)
#define COOKIE_BOX (SRPC_HDR_LEN + 12)
#define TAG_LEN 16
#define NONCE_LEN 12
_Static_assert(INIT_COOKIE_MAC + TAG_LEN == SRPC_V5_INIT_LEN, "INIT's layout");
_Static_assert(ACC_CONFIRM + TAG_LEN == SRPC_V5_ACCEPT_LEN, "ACCEPT's layout");
_Static_assert(COOKIE_BOX + SRPC_V5_COOKIE_LEN_RAW + TAG_LEN == SRPC_V5_COOKIE_LEN, "COOKIE's layout");

#define FLAGS_KNOWN SRPC_V5_FLAGS_KNOWN
#define AEGIS_TAG_LEN 32
#define AEGIS_NONCE_LEN 16
#define AEGIS_KEY_LEN 16

int srpc_v5_available(void)
{
    const srpc_sodium_t *so = srpc_sodium();
    return so && so->v5 ? 0 : -ENOTSUP;
}

int srpc_v5_aes_available(void)
{
    const srpc_sodium_t *so = srpc_sodium();
    return so && so->aes;
}

int srpc_v5_aegis_available(void)
{
    const srpc_sodium_t *so = srpc_sodium();
    return so && so->aegis;
}

_Static_assert(SRPC_AUTH_SUITE_AES == SRPC_V5_FLAG_AES && SRPC_AUTH_SUITE_AEGIS == SRPC_V5_FLAG_AEGIS,
               "the public suite bits are the protocol's flags");

int srpc_auth_v5_suites(void)
{
    return (srpc_v5_aes_available() ? SRPC_AUTH_SUITE_AES : 0) | (srpc_v5_aegis_available() ? SRPC_AUTH_SUITE_AEGIS : 0);
}

uint32_t srpc_v5_suite_pick(uint32_t init_flags)
{
    const uint32_t enc = init_flags & SRPC_V5_FLAG_ENCRYPT;
    if ((init_flags & SRPC_V5_FLAG_AEGIS) && srpc_v5_aegis_available())
        return enc | SRPC_V5_FLAG_AEGIS;
    if ((init_flags & SRPC_V5_FLAG_AES) && srpc_v5_aes_available())
        return enc | SRPC_V5_FLAG_AES;
    return enc;
}

/* H(key, the n parts, outlen): keyed BLAKE2b over the parts in turn (key NULL: unkeyed). */
static void hash(uint8_t *out, size_t outlen, const uint8_t *key, size_t keylen, const void *const *part,
                 const size_t *plen, int n)
{
    const srpc_sodium_t *so = srpc_sodium();
    _Alignas(64) unsigned char st[SRPC_SODIUM_STATE_MAX];
    so->hash_init(st, key, key ? keylen : 0, outlen);
    for (int i = 0; i < n; i++)
        so->hash_update(st, part[i], plen[i]);
    so->hash_final(st, out, outlen);
    so->memzero(st, so->hash_state_bytes);
}

/* H(key, label, 32): a key derived by its label. */
static void derive(uint8_t out[SRPC_V5_KEY_LEN], const uint8_t key[SRPC_V5_KEY_LEN], const char *label)
{
    const void *p[1] = {label};
    const size_t l[1] = {strlen(label)};
    hash(out, SRPC_V5_KEY_LEN, key, SRPC_V5_KEY_LEN, p, l, 1);
}

/* A version 5 header of the given fields into out (its CRC-16 as version 2 computes it). */
static void put_hdr(uint8_t out[SRPC_HDR_LEN], unsigned type, uint16_t func_id, uint64_t req_id, uint16_t seq,
                    uint16_t nseg, uint32_t msg_len, uint16_t aux)
{
    out[SRPC_OFF_MAGIC] = SRPC_MAGIC;
    out[SRPC_OFF_VER_TYPE] = (uint8_t)(SRPC_VERSION_5 << 4 | type);
    srpc_put16(out + SRPC_OFF_FUNC_ID, func_id);
    srpc_put64(out + SRPC_OFF_REQ_ID, req_id & SRPC_REQ_ID_V2_MASK);
    srpc_put16(out + SRPC_OFF_SEQ, seq);
    srpc_put16(out + SRPC_OFF_NSEG, nseg);
    srpc_put32(out + SRPC_OFF_MSG_LEN, msg_len);
    srpc_put16(out + SRPC_OFF_AUX, aux);
    srpc_put16(out + SRPC_OFF_CHECK, srpc_hdr_check16(out));
}

/* 1 when the len bytes at d are a whole handshake datagram of type (its body body bytes):
 * magic, version 5, CRC-16, type, func_id 0, seq 0, nseg 1, msg_len body, aux 0. */
static int hs_ok(const uint8_t *d, size_t len, unsigned type, uint32_t body)
{
    return d && len == SRPC_HDR_LEN + body && d[SRPC_OFF_MAGIC] == SRPC_MAGIC &&
           d[SRPC_OFF_VER_TYPE] == (SRPC_VERSION_5 << 4 | type) &&
           srpc_get16(d + SRPC_OFF_CHECK) == srpc_hdr_check16(d) && srpc_get16(d + SRPC_OFF_FUNC_ID) == 0 &&
           srpc_get16(d + SRPC_OFF_SEQ) == 0 && srpc_get16(d + SRPC_OFF_NSEG) == 1 &&
           srpc_get32(d + SRPC_OFF_MSG_LEN) == body && srpc_get16(d + SRPC_OFF_AUX) == 0;
}

static uint64_t hs_id(const uint8_t *d)
{
    return srpc_get64(d + SRPC_OFF_REQ_ID) & SRPC_REQ_ID_V2_MASK;
}

int srpc_v5_keypair(uint8_t priv[SRPC_V5_KEY_LEN], uint8_t pub[SRPC_V5_KEY_LEN])
{
    if (srpc_v5_available() < 0)
        return -ENOTSUP;
    const srpc_sodium_t *so = srpc_sodium();
    so->random(priv, SRPC_V5_KEY_LEN);
    return so->x25519_base(pub, priv) == 0 ? 0 : -EINVAL;
}

/* H(key of keylen bytes, the INIT's first n bytes, 16): mac1 (n: up to mac1) or cookie_mac. */
static void init_mac(uint8_t out[TAG_LEN], const uint8_t *key, size_t keylen, const uint8_t *init, size_t n)
{
    const void *p[1] = {init};
    const size_t l[1] = {n};
    hash(out, TAG_LEN, key, keylen, p, l, 1);
}

static void mac1(uint8_t out[TAG_LEN], const uint8_t psk[SRPC_V5_KEY_LEN], const uint8_t *init)
{
    uint8_t k[SRPC_V5_KEY_LEN];
    derive(k, psk, "splitrpc v5 mac1");
    init_mac(out, k, sizeof(k), init, INIT_MAC1);
    srpc_auth_wipe(k, sizeof(k));
}

static void cookie_mac(uint8_t out[TAG_LEN], const uint8_t cookie[SRPC_V5_COOKIE_LEN_RAW], const uint8_t *init)
{
    init_mac(out, cookie, SRPC_V5_COOKIE_LEN_RAW, init, INIT_COOKIE_MAC);
}

/* resume: H(prev's k_c2s, "splitrpc v5 resume" || the INIT's bytes before it, 16). */
static void resume_mac(uint8_t out[TAG_LEN], const uint8_t prev_c2s[SRPC_V5_KEY_LEN], const uint8_t *init)
{
    static const char label[] = "splitrpc v5 resume";
    const void *p[2] = {label, init};
    const size_t l[2] = {sizeof(label) - 1, INIT_RESUME};
    hash(out, TAG_LEN, prev_c2s, SRPC_V5_KEY_LEN, p, l, 2);
}

int srpc_v5_init_resume_ok(const uint8_t init[SRPC_V5_INIT_LEN], const uint8_t prev_c2s[SRPC_V5_KEY_LEN])
{
    if (srpc_v5_available() < 0 || srpc_get64(init + INIT_PREV) == 0)
        return 0;
    uint8_t m[TAG_LEN];
    resume_mac(m, prev_c2s, init);
    return srpc_sodium()->verify16(m, init + INIT_RESUME) == 0;
}

int srpc_v5_init_make(uint8_t out[SRPC_V5_INIT_LEN], const uint8_t psk[SRPC_V5_KEY_LEN], uint32_t key_id,
                      uint64_t hs, const uint8_t e_priv[SRPC_V5_KEY_LEN], uint64_t time_ms, uint32_t flags,
                      const srpc_v5_keys_t *prev, const uint8_t *cookie)
{
    if (!out || !psk || !e_priv || key_id == 0 || hs == 0 || hs > SRPC_REQ_ID_V2_MASK || (flags & ~FLAGS_KNOWN))
        return -EINVAL;
    if (srpc_v5_available() < 0)
        return -ENOTSUP;
    put_hdr(out, SRPC_V5_INIT, 0, hs, 0, 1, SRPC_V5_INIT_BODY, 0);
    srpc_put32(out + INIT_KEY, key_id);
    if (srpc_sodium()->x25519_base(out + INIT_E, e_priv) != 0)
        return -EINVAL;
    srpc_put64(out + INIT_TIME, time_ms);
    srpc_put32(out + INIT_FLAGS, flags);
    srpc_put64(out + INIT_PREV, prev ? prev->session : 0);
    if (prev)
        resume_mac(out + INIT_RESUME, prev->c2s, out);
    else
        memset(out + INIT_RESUME, 0, TAG_LEN);
    mac1(out + INIT_MAC1, psk, out);
    if (cookie)
        cookie_mac(out + INIT_COOKIE_MAC, cookie, out);
    else
        memset(out + INIT_COOKIE_MAC, 0, TAG_LEN);
    return 0;
}

int srpc_v5_init_parse(const uint8_t *d, size_t len, srpc_v5_init_t *f)
{
    if (!f || !hs_ok(d, len, SRPC_V5_INIT, SRPC_V5_INIT_BODY) || hs_id(d) == 0)
        return -EBADMSG;
    f->hs_id = hs_id(d);
    f->key_id = srpc_get32(d + INIT_KEY);
    memcpy(f->e, d + INIT_E, SRPC_V5_KEY_LEN);
    f->time_ms = srpc_get64(d + INIT_TIME);
    f->flags = srpc_get32(d + INIT_FLAGS);
    f->prev_session = srpc_get64(d + INIT_PREV);
    return f->key_id == 0 || (f->flags & ~FLAGS_KNOWN) ? -EBADMSG : 0;
}

int srpc_v5_init_mac1_ok(const uint8_t init[SRPC_V5_INIT_LEN], const uint8_t psk[SRPC_V5_KEY_LEN])
{
    if (srpc_v5_available() < 0)
        return 0;
    uint8_t m[TAG_LEN];
    mac1(m, psk, init);
    return srpc_sodium()->verify16(m, init + INIT_MAC1) == 0;
}

int srpc_v5_init_cookie_ok(const uint8_t init[SRPC_V5_INIT_LEN], const uint8_t cookie[SRPC_V5_COOKIE_LEN_RAW])
{
    if (srpc_v5_available() < 0)
        return 0;
    uint8_t m[TAG_LEN];
    cookie_mac(m, cookie, init);
    return srpc_sodium()->verify16(m, init + INIT_COOKIE_MAC) == 0;
}

/* The key schedule (the page's "The session's keys"): from psk, dh and the transcript (the INIT
 * and the ACCEPT's first 70 bytes), the session's two keys and confirm. Wipes what it made. */
static void schedule(srpc_v5_keys_t *k, uint8_t confirm[TAG_LEN], const uint8_t psk[SRPC_V5_KEY_LEN],
                     const uint8_t dh[SRPC_V5_KEY_LEN], const uint8_t *init, const uint8_t *accept)
{
    uint8_t th[32], prk[SRPC_V5_KEY_LEN], kc[SRPC_V5_KEY_LEN];
    const void *tp[2] = {init, accept};
    const size_t tl[2] = {SRPC_V5_INIT_LEN, ACC_CONFIRM};
    hash(th, sizeof(th), NULL, 0, tp, tl, 2);
    static const char label[] = "splitrpc v5 prk";
    const void *pp[3] = {label, dh, th};
    const size_t pl[3] = {sizeof(label) - 1, SRPC_V5_KEY_LEN, sizeof(th)};
    hash(prk, sizeof(prk), psk, SRPC_V5_KEY_LEN, pp, pl, 3);
    derive(k->c2s, prk, "splitrpc v5 c2s");
    derive(k->s2c, prk, "splitrpc v5 s2c");
    derive(kc, prk, "splitrpc v5 confirm");
    const void *cp[1] = {th};
    const size_t cl[1] = {sizeof(th)};
    hash(confirm, TAG_LEN, kc, sizeof(kc), cp, cl, 1);
    srpc_auth_wipe(prk, sizeof(prk));
    srpc_auth_wipe(kc, sizeof(kc));
}

/* dh = X25519(priv, pub); 0, or -EPROTO for an all-zero result (a low-order point). */
static int shared(uint8_t dh[SRPC_V5_KEY_LEN], const uint8_t priv[SRPC_V5_KEY_LEN], const uint8_t pub[SRPC_V5_KEY_LEN])
{
    if (srpc_sodium()->x25519(dh, priv, pub) != 0) /* libsodium refuses an all-zero result itself */
        return -EPROTO;
    uint8_t any = 0;
    for (int i = 0; i < SRPC_V5_KEY_LEN; i++)
        any |= dh[i];
    return any ? 0 : -EPROTO;
}

int srpc_v5_accept_make(uint8_t out[SRPC_V5_ACCEPT_LEN], srpc_v5_keys_t *k, const uint8_t init[SRPC_V5_INIT_LEN],
                        const uint8_t psk[SRPC_V5_KEY_LEN], const uint8_t e_priv[SRPC_V5_KEY_LEN], uint64_t session,
                        uint32_t flags)
{
    if (!out || !k || !init || !psk || !e_priv || session == 0 || (flags & ~FLAGS_KNOWN) ||
        (flags & SRPC_V5_FLAG_AES && flags & SRPC_V5_FLAG_AEGIS))
        return -EINVAL;
    if (srpc_v5_available() < 0)
        return -ENOTSUP;
    uint8_t dh[SRPC_V5_KEY_LEN];
    int r = shared(dh, e_priv, init + INIT_E);
    if (r < 0) {
        srpc_auth_wipe(dh, sizeof(dh));
        return r;
    }
    put_hdr(out, SRPC_V5_ACCEPT, 0, hs_id(init), 0, 1, SRPC_V5_ACCEPT_BODY, 0);
    memcpy(out + ACC_KEY, init + INIT_KEY, 4);
    srpc_put64(out + ACC_SESSION, session);
    srpc_sodium()->x25519_base(out + ACC_E, e_priv);
    srpc_put32(out + ACC_FLAGS, flags);
    schedule(k, out + ACC_CONFIRM, psk, dh, init, out);
    srpc_auth_wipe(dh, sizeof(dh));
    k->session = session;
    k->encrypt = (uint8_t)flags;
    return 0;
}

int srpc_v5_accept_open(srpc_v5_keys_t *k, const uint8_t init[SRPC_V5_INIT_LEN], const uint8_t e_priv[SRPC_V5_KEY_LEN],
                        const uint8_t psk[SRPC_V5_KEY_LEN], const uint8_t *d, size_t len)
{
    if (!k || !init || !e_priv || !psk)
        return -EINVAL;
    if (srpc_v5_available() < 0)
        return -ENOTSUP;
    if (!hs_ok(d, len, SRPC_V5_ACCEPT, SRPC_V5_ACCEPT_BODY) || hs_id(d) != hs_id(init) ||
        memcmp(d + ACC_KEY, init + INIT_KEY, 4) != 0 || srpc_get64(d + ACC_SESSION) == 0 ||
        (srpc_get32(d + ACC_FLAGS) & ~FLAGS_KNOWN))
        return -EBADMSG;
    uint8_t dh[SRPC_V5_KEY_LEN], confirm[TAG_LEN];
    srpc_v5_keys_t got;
    if (shared(dh, e_priv, d + ACC_E) < 0) {
        srpc_auth_wipe(dh, sizeof(dh));
        return -EBADMSG;
    }
    schedule(&got, confirm, psk, dh, init, d);
    srpc_auth_wipe(dh, sizeof(dh));
    if (srpc_sodium()->verify16(confirm, d + ACC_CONFIRM) != 0) {
        srpc_auth_wipe(&got, sizeof(got));
        return -EBADMSG;
    }
    got.session = srpc_get64(d + ACC_SESSION);
    got.encrypt = (uint8_t)srpc_get32(d + ACC_FLAGS);
    const uint32_t offered = srpc_get32(init + INIT_FLAGS);
    if (((got.encrypt & SRPC_V5_FLAG_AES) && !(offered & SRPC_V5_FLAG_AES)) ||
        ((got.encrypt & SRPC_V5_FLAG_AEGIS) && !(offered & SRPC_V5_FLAG_AEGIS)) ||
        ((got.encrypt & SRPC_V5_FLAG_AES) && (got.encrypt & SRPC_V5_FLAG_AEGIS))) {
        srpc_auth_wipe(&got, sizeof(got));
        return -EBADMSG; /* a suite only where the client offered it, and one suite */
    }
    *k = got;
    srpc_auth_wipe(&got, sizeof(got));
    return 0;
}

size_t srpc_v5_addr_bytes(const struct sockaddr *src, uint8_t out[SRPC_V5_ADDR_MAX])
{
    if (src->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)src;
        memcpy(out, &s6->sin6_addr, 16);
        memcpy(out + 16, &s6->sin6_port, 2);
        memcpy(out + 18, &s6->sin6_scope_id, 4); /* fe80::1 on one link is not fe80::1 on another */
        return 22;
    }
    if (src->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)src;
        memcpy(out, &s4->sin_addr, 4);
        memcpy(out + 4, &s4->sin_port, 2);
        return 6;
    }
    return 0;
}

void srpc_v5_cookie_value(uint8_t cookie[SRPC_V5_COOKIE_LEN_RAW], const uint8_t secret[SRPC_V5_KEY_LEN],
                          const struct sockaddr *src)
{
    uint8_t a[SRPC_V5_ADDR_MAX];
    const void *p[1] = {a};
    const size_t l[1] = {srpc_v5_addr_bytes(src, a)};
    hash(cookie, SRPC_V5_COOKIE_LEN_RAW, secret, SRPC_V5_KEY_LEN, p, l, 1);
}

/* ----------------------------------------------------------------- the AEAD, in pieces
 * ChaCha20-Poly1305 as RFC 8439 builds it (section 2.8), from libsodium's ChaCha20 stream and
 * Poly1305, so that the associated data may be several pieces (a header apart from its data):
 * the Poly1305 key is the first 32 bytes of block 0; the text is encrypted from block 1; the tag
 * is Poly1305 over ad || pad16 || ciphertext || pad16 || le64(ad bytes) || le64(ciphertext bytes). */

typedef struct {
    _Alignas(64) unsigned char st[SRPC_SODIUM_STATE_MAX];
    uint64_t ad_len, ct_len;
} poly_t;

static void poly_start(poly_t *p, const uint8_t key[SRPC_V5_KEY_LEN], const uint8_t nonce[NONCE_LEN])
{
    const srpc_sodium_t *so = srpc_sodium();
    uint8_t block0[64] = {0};
    so->chacha20(block0, sizeof(block0), nonce, key);
    so->poly_init(p->st, block0);
    so->memzero(block0, sizeof(block0));
    p->ad_len = p->ct_len = 0;
}

static void poly_add(poly_t *p, const void *b, size_t n, uint64_t *count)
{
    if (n)
        srpc_sodium()->poly_update(p->st, b, n);
    *count += n;
}

static void poly_pad(poly_t *p, uint64_t count)
{
    static const uint8_t zero[16];
    if (count % 16)
        srpc_sodium()->poly_update(p->st, zero, 16 - count % 16);
}

static void poly_end(poly_t *p, uint8_t tag[TAG_LEN])
{
    const srpc_sodium_t *so = srpc_sodium();
    uint8_t lens[16];
    for (int i = 0; i < 8; i++) { /* little-endian, as RFC 8439 says */
        lens[i] = (uint8_t)(p->ad_len >> (8 * i));
        lens[8 + i] = (uint8_t)(p->ct_len >> (8 * i));
    }
    so->poly_update(p->st, lens, sizeof(lens));
    so->poly_final(p->st, tag);
    so->memzero(p->st, so->poly_state_bytes);
}

static void nonce_of(uint8_t nonce[NONCE_LEN], uint64_t counter)
{
    memset(nonce, 0, 4);
    srpc_put64(nonce + 4, counter);
}

/* AES-256-GCM in one call, with key's state expanded once per thread (core/aes_keys.h), or, when
 * that cannot be had (no memory), expanded for this call alone. */
static int aes_seal(const uint8_t key[SRPC_V5_KEY_LEN], const uint8_t nonce[NONCE_LEN], uint8_t *c, uint8_t tag[TAG_LEN],
                    const uint8_t *m, size_t mlen, const uint8_t *ad, size_t adlen)
{
    const srpc_sodium_t *so = srpc_sodium();
    const void *st = srpc_aes_state(key);
    return st ? so->aes_encrypt_afternm(c, tag, NULL, m, mlen, ad, adlen, NULL, nonce, st)
              : so->aes_encrypt(c, tag, NULL, m, mlen, ad, adlen, NULL, nonce, key);
}

static int aes_unseal(const uint8_t key[SRPC_V5_KEY_LEN], const uint8_t nonce[NONCE_LEN], uint8_t *m, const uint8_t *c,
                      size_t clen, const uint8_t tag[TAG_LEN], const uint8_t *ad, size_t adlen)
{
    const srpc_sodium_t *so = srpc_sodium();
    const void *st = srpc_aes_state(key);
    return st ? so->aes_decrypt_afternm(m, NULL, c, clen, tag, ad, adlen, nonce, st)
              : so->aes_decrypt(m, NULL, c, clen, tag, ad, adlen, nonce, key);
}

/* AEGIS-128L in one call (the page's "The AEGIS-128L suite"): the key is the session key's first
 * 16 bytes, the nonce 8 zero bytes then the counter, the tag 32 bytes. No state to keep: its key
 * schedule is its initialisation. */
static void aegis_nonce(uint8_t nonce[AEGIS_NONCE_LEN], uint64_t counter)
{
    memset(nonce, 0, 8);
    srpc_put64(nonce + 8, counter);
}

static int aegis_seal(const uint8_t key[SRPC_V5_KEY_LEN], uint64_t counter, uint8_t *c, uint8_t tag[AEGIS_TAG_LEN],
                      const uint8_t *m, size_t mlen, const uint8_t *ad, size_t adlen)
{
    uint8_t nonce[AEGIS_NONCE_LEN];
    aegis_nonce(nonce, counter);
    return srpc_sodium()->aegis_encrypt(c, tag, NULL, m, mlen, ad, adlen, NULL, nonce, key);
}

/* The tag's two halves as the datagram carries them: the first before the trailer, the second
 * its last 16 bytes. */
static void aegis_split(uint8_t *tail, const uint8_t tag[AEGIS_TAG_LEN])
{
    memcpy(tail, tag, SRPC_V5_AEGIS_TAG_HEAD);
    memcpy(tail + SRPC_V5_AEGIS_TAG_HEAD + 16, tag + SRPC_V5_AEGIS_TAG_HEAD, AEGIS_TAG_LEN - SRPC_V5_AEGIS_TAG_HEAD);
}

static void aegis_join(uint8_t tag[AEGIS_TAG_LEN], const uint8_t *tail)
{
    memcpy(tag, tail, SRPC_V5_AEGIS_TAG_HEAD);
    memcpy(tag + SRPC_V5_AEGIS_TAG_HEAD, tail + SRPC_V5_AEGIS_TAG_HEAD + 16, AEGIS_TAG_LEN - SRPC_V5_AEGIS_TAG_HEAD);
}

/* The AES-256-GCM suite (SRPC_V5_FLAG_AES): the layout of ChaCha20-Poly1305's, the AEAD replaced;
 * and AEGIS-128L's (SRPC_V5_FLAG_AEGIS, its tag 32 bytes: aegis). An authenticating session's tag
 * is over an empty plaintext with associated data the n pieces (header, data, session and
 * counter), which libsodium takes contiguous: gathered first (on the stack when small). 0,
 * -ENOMEM, or -EINVAL when libsodium fails (it does not, once available). */
#define AES_STACK 2048
static int gathered_tag(const uint8_t key[SRPC_V5_KEY_LEN], int aegis, uint64_t counter, const struct iovec *ad, int n,
                        uint8_t *tag)
{
    uint8_t small[AES_STACK], *buf = small;
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += ad[i].iov_len;
    if (len > sizeof(small) && !(buf = malloc(len)))
        return -ENOMEM;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (ad[i].iov_len)
            memcpy(buf + at, ad[i].iov_base, ad[i].iov_len);
        at += ad[i].iov_len;
    }
    uint8_t nonce[NONCE_LEN];
    nonce_of(nonce, counter);
    const int r = aegis ? aegis_seal(key, counter, NULL, tag, NULL, 0, buf, len)
                        : aes_seal(key, nonce, NULL, tag, NULL, 0, buf, len);
    if (buf != small)
        free(buf);
    return r == 0 ? 0 : -EINVAL;
}

/* The tag of a data datagram, its data encrypted in place first when enc (seal), or its tag
 * computed over the data as it came (open: the caller decrypts after the tag is right). */
static void data_tag(const uint8_t key[SRPC_V5_KEY_LEN], int encrypting, int seal, const uint8_t hdr[SRPC_HDR_LEN],
                     uint8_t *data, uint32_t len, const uint8_t ids[16], uint8_t tag[TAG_LEN])
{
    uint8_t nonce[NONCE_LEN];
    nonce_of(nonce, srpc_get64(ids + 8));
    poly_t p;
    poly_start(&p, key, nonce);
    poly_add(&p, hdr, SRPC_HDR_LEN, &p.ad_len);
    if (encrypting) {
        poly_add(&p, ids, 16, &p.ad_len);
        poly_pad(&p, p.ad_len);
        if (seal && len)
            srpc_sodium()->chacha20_xor_ic(data, data, len, nonce, 1, key);
        poly_add(&p, data, len, &p.ct_len);
        poly_pad(&p, p.ct_len);
    } else {
        poly_add(&p, data, len, &p.ad_len);
        poly_add(&p, ids, 16, &p.ad_len);
        poly_pad(&p, p.ad_len); /* the ciphertext is empty: no bytes, no padding */
    }
    poly_end(&p, tag);
}

/* The COOKIE's tag: associated data the INIT's mac1, ciphertext the 16 bytes at box. */
static void cookie_tag(const uint8_t k[SRPC_V5_KEY_LEN], const uint8_t nonce[NONCE_LEN], const uint8_t *init,
                       const uint8_t *box, uint8_t tag[TAG_LEN])
{
    poly_t p;
    poly_start(&p, k, nonce);
    poly_add(&p, init + INIT_MAC1, TAG_LEN, &p.ad_len);
    poly_pad(&p, p.ad_len);
    poly_add(&p, box, SRPC_V5_COOKIE_LEN_RAW, &p.ct_len);
    poly_pad(&p, p.ct_len);
    poly_end(&p, tag);
}

int srpc_v5_cookie_make(uint8_t out[SRPC_V5_COOKIE_LEN], const uint8_t init[SRPC_V5_INIT_LEN],
                        const uint8_t psk[SRPC_V5_KEY_LEN], const uint8_t cookie[SRPC_V5_COOKIE_LEN_RAW])
{
    if (srpc_v5_available() < 0)
        return -ENOTSUP;
    const srpc_sodium_t *so = srpc_sodium();
    put_hdr(out, SRPC_V5_COOKIE, 0, hs_id(init), 0, 1, SRPC_V5_COOKIE_BODY, 0);
    so->random(out + COOKIE_NONCE, NONCE_LEN);
    uint8_t k[SRPC_V5_KEY_LEN];
    derive(k, psk, "splitrpc v5 cookie");
    uint8_t *box = out + COOKIE_BOX;
    memcpy(box, cookie, SRPC_V5_COOKIE_LEN_RAW);
    so->chacha20_xor_ic(box, box, SRPC_V5_COOKIE_LEN_RAW, out + COOKIE_NONCE, 1, k);
    cookie_tag(k, out + COOKIE_NONCE, init, box, box + SRPC_V5_COOKIE_LEN_RAW);
    srpc_auth_wipe(k, sizeof(k));
    return 0;
}

int srpc_v5_cookie_open(uint8_t cookie[SRPC_V5_COOKIE_LEN_RAW], const uint8_t init[SRPC_V5_INIT_LEN],
                        const uint8_t psk[SRPC_V5_KEY_LEN], const uint8_t *d, size_t len)
{
    if (srpc_v5_available() < 0)
        return -ENOTSUP;
    if (!hs_ok(d, len, SRPC_V5_COOKIE, SRPC_V5_COOKIE_BODY) || hs_id(d) != hs_id(init))
        return -EBADMSG;
    const srpc_sodium_t *so = srpc_sodium();
    uint8_t k[SRPC_V5_KEY_LEN], tag[TAG_LEN];
    derive(k, psk, "splitrpc v5 cookie");
    const uint8_t *box = d + COOKIE_BOX;
    cookie_tag(k, d + COOKIE_NONCE, init, box, tag);
    int r = -EBADMSG;
    if (so->verify16(tag, box + SRPC_V5_COOKIE_LEN_RAW) == 0) {
        so->chacha20_xor_ic(cookie, box, SRPC_V5_COOKIE_LEN_RAW, d + COOKIE_NONCE, 1, k);
        r = 0;
    }
    srpc_auth_wipe(k, sizeof(k));
    return r;
}

void srpc_v5_no_session_make(uint8_t out[SRPC_V5_NO_SESSION_LEN], const srpc_hdr_t *h, uint64_t session)
{
    put_hdr(out, SRPC_V5_NO_SESSION, h->func_id, h->req_id, 0, 1, SRPC_V5_NO_SESSION_BODY, 0);
    srpc_put64(out + SRPC_HDR_LEN, session);
}

int srpc_v5_no_session_parse(const uint8_t *d, size_t len, uint64_t *session, uint16_t *func_id, uint64_t *req_id)
{
    if (!d || len != SRPC_V5_NO_SESSION_LEN || d[SRPC_OFF_MAGIC] != SRPC_MAGIC ||
        d[SRPC_OFF_VER_TYPE] != (SRPC_VERSION_5 << 4 | SRPC_V5_NO_SESSION) ||
        srpc_get16(d + SRPC_OFF_CHECK) != srpc_hdr_check16(d) || srpc_get16(d + SRPC_OFF_SEQ) != 0 ||
        srpc_get16(d + SRPC_OFF_NSEG) != 1 || srpc_get32(d + SRPC_OFF_MSG_LEN) != SRPC_V5_NO_SESSION_BODY ||
        srpc_get16(d + SRPC_OFF_AUX) != 0)
        return -EBADMSG;
    *session = srpc_get64(d + SRPC_HDR_LEN);
    *func_id = srpc_get16(d + SRPC_OFF_FUNC_ID);
    *req_id = hs_id(d);
    return 0;
}

/* Where a tail's session and counter (16 bytes) and tag are, for a session's flags: after the
 * AEGIS-128L tag's first half, else at its start (the tag, 16 bytes, after them). */
static size_t ids_at(unsigned flags)
{
    return flags & SRPC_V5_FLAG_AEGIS ? SRPC_V5_AEGIS_TAG_HEAD : 0;
}

/* The AES-256-GCM or AEGIS-128L tag (enc: the data encrypted in place first) of a datagram whose
 * data is one contiguous run; its tail written (ids already there). */
static int suite_seal(const uint8_t *key, unsigned flags, uint64_t counter, const uint8_t hdr[SRPC_HDR_LEN],
                      uint8_t *data, uint32_t len, uint8_t *tail)
{
    const int aegis = (flags & SRPC_V5_FLAG_AEGIS) != 0;
    uint8_t *ids = tail + ids_at(flags), tag[AEGIS_TAG_LEN];
    int r;
    if (flags & SRPC_V5_FLAG_ENCRYPT) { /* associated data: header || session || counter */
        uint8_t ad[SRPC_HDR_LEN + 16];
        memcpy(ad, hdr, SRPC_HDR_LEN);
        memcpy(ad + SRPC_HDR_LEN, ids, 16);
        if (aegis) {
            r = aegis_seal(key, counter, data, tag, data, len, ad, sizeof(ad)) == 0 ? 0 : -EINVAL;
        } else {
            uint8_t nonce[NONCE_LEN];
            nonce_of(nonce, counter);
            r = aes_seal(key, nonce, data, tag, data, len, ad, sizeof(ad)) == 0 ? 0 : -EINVAL;
        }
    } else {
        const struct iovec ad[3] = {{(void *)hdr, SRPC_HDR_LEN}, {data, len}, {ids, 16}};
        r = gathered_tag(key, aegis, counter, ad, 3, tag);
    }
    if (r == 0) {
        if (aegis)
            aegis_split(tail, tag);
        else
            memcpy(ids + 16, tag, TAG_LEN);
    }
    srpc_auth_wipe(tag, sizeof(tag));
    return r;
}

int srpc_v5_seal_key(const uint8_t key[SRPC_V5_KEY_LEN], uint64_t session, int encrypt, uint64_t counter,
                     const uint8_t hdr[SRPC_HDR_LEN], const struct iovec *data, int n, uint8_t *enc,
                     uint8_t *tail)
{
    if (!key || !hdr || n < 0 || (n && !data) || !tail || counter == 0 || counter >= SRPC_V5_MAX_COUNTER ||
        (encrypt & ~FLAGS_KNOWN) || (encrypt & SRPC_V5_FLAG_AES && encrypt & SRPC_V5_FLAG_AEGIS))
        return -EINVAL;
    if (srpc_v5_available() < 0)
        return -ENOTSUP;
    uint64_t len = 0;
    for (int i = 0; i < n; i++)
        len += data[i].iov_len;
    if ((encrypt & SRPC_V5_FLAG_ENCRYPT) && len && !enc)
        return -EINVAL;
    uint8_t *ids = tail + ids_at((unsigned)encrypt);
    srpc_put64(ids, session);
    srpc_put64(ids + 8, counter);
    if (encrypt & (SRPC_V5_FLAG_AES | SRPC_V5_FLAG_AEGIS)) {
        if (encrypt & SRPC_V5_FLAG_AES ? !srpc_v5_aes_available() : !srpc_v5_aegis_available())
            return -ENOTSUP;
        if (encrypt & SRPC_V5_FLAG_ENCRYPT) {
            uint64_t at = 0;
            for (int i = 0; i < n; i++) {
                if (enc + at != (const uint8_t *)data[i].iov_base) /* (already there: sealed in place) */
                    memcpy(enc + at, data[i].iov_base, data[i].iov_len);
                at += data[i].iov_len;
            }
            return suite_seal(key, (unsigned)encrypt, counter, hdr, enc, (uint32_t)len, tail);
        }
        if (n + 2 > SRPC_V5_MAX_PIECES)
            return -EINVAL;
        struct iovec ad[SRPC_V5_MAX_PIECES];
        ad[0] = (struct iovec){(void *)hdr, SRPC_HDR_LEN};
        for (int i = 0; i < n; i++)
            ad[i + 1] = data[i];
        ad[n + 1] = (struct iovec){ids, 16};
        uint8_t tag[AEGIS_TAG_LEN];
        const int aegis = (encrypt & SRPC_V5_FLAG_AEGIS) != 0, r = gathered_tag(key, aegis, counter, ad, n + 2, tag);
        if (r == 0) {
            if (aegis)
                aegis_split(tail, tag);
            else
                memcpy(ids + 16, tag, TAG_LEN);
        }
        return r;
    }
    poly_t p;
    uint8_t nonce[NONCE_LEN];
    nonce_of(nonce, counter);
    poly_start(&p, key, nonce);
    poly_add(&p, hdr, SRPC_HDR_LEN, &p.ad_len);
    if (encrypt & SRPC_V5_FLAG_ENCRYPT) {
        uint64_t at = 0;
        for (int i = 0; i < n; i++) {
            if (enc + at != (const uint8_t *)data[i].iov_base) /* (already there: sealed in place) */
                memcpy(enc + at, data[i].iov_base, data[i].iov_len);
            at += data[i].iov_len;
        }
        poly_add(&p, ids, 16, &p.ad_len);
        poly_pad(&p, p.ad_len);
        if (len)
            srpc_sodium()->chacha20_xor_ic(enc, enc, len, nonce, 1, key);
        poly_add(&p, enc, len, &p.ct_len);
        poly_pad(&p, p.ct_len);
    } else {
        for (int i = 0; i < n; i++)
            poly_add(&p, data[i].iov_base, data[i].iov_len, &p.ad_len);
        poly_add(&p, ids, 16, &p.ad_len);
        poly_pad(&p, p.ad_len);
    }
    poly_end(&p, ids + 16);
    return 0;
}

int srpc_v5_seal(const srpc_v5_keys_t *k, int to_server, uint64_t counter, const uint8_t hdr[SRPC_HDR_LEN],
                 uint8_t *data, uint32_t len, uint8_t *tail)
{
    if (!k || !hdr || (len && !data) || !tail || counter == 0 || counter >= SRPC_V5_MAX_COUNTER)
        return -EINVAL;
    if (srpc_v5_available() < 0)
        return -ENOTSUP;
    uint8_t *ids = tail + ids_at(k->encrypt);
    srpc_put64(ids, k->session);
    srpc_put64(ids + 8, counter);
    const uint8_t *key = to_server ? k->c2s : k->s2c;
    if (k->encrypt & (SRPC_V5_FLAG_AES | SRPC_V5_FLAG_AEGIS)) {
        if ((k->encrypt & SRPC_V5_FLAG_AES && k->encrypt & SRPC_V5_FLAG_AEGIS) ||
            (k->encrypt & SRPC_V5_FLAG_AES ? !srpc_v5_aes_available() : !srpc_v5_aegis_available()))
            return -ENOTSUP;
        return suite_seal(key, k->encrypt, counter, hdr, data, len, tail);
    }
    data_tag(key, k->encrypt & SRPC_V5_FLAG_ENCRYPT, 1, hdr, data, len, ids, ids + 16);
    return 0;
}

/* An AEGIS-128L session's datagram: 0 when its tag (the tail's halves) is right, the data then
 * decrypted in place in an encrypting session. */
static int aegis_open(const uint8_t *key, int encrypting, const uint8_t hdr[SRPC_HDR_LEN], uint8_t *data,
                      uint32_t len, const uint8_t *tail)
{
    const srpc_sodium_t *so = srpc_sodium();
    const uint8_t *ids = tail + SRPC_V5_AEGIS_TAG_HEAD;
    uint8_t tag[AEGIS_TAG_LEN], nonce[AEGIS_NONCE_LEN];
    aegis_join(tag, tail);
    aegis_nonce(nonce, srpc_get64(ids + 8));
    if (encrypting) {
        uint8_t ad[SRPC_HDR_LEN + 16];
        memcpy(ad, hdr, SRPC_HDR_LEN);
        memcpy(ad + SRPC_HDR_LEN, ids, 16);
        return so->aegis_decrypt(data, NULL, data, len, tag, ad, sizeof(ad), nonce, key) == 0 ? 0 : -EBADMSG;
    }
    /* An empty ciphertext: libsodium's decryption checks the tag over the associated data alone. */
    uint8_t small[AES_STACK], *buf = small;
    const size_t adlen = SRPC_HDR_LEN + (size_t)len + 16;
    if (adlen > sizeof(small) && !(buf = malloc(adlen)))
        return -EBADMSG; /* (no memory: refused, never taken unchecked) */
    memcpy(buf, hdr, SRPC_HDR_LEN);
    if (len)
        memcpy(buf + SRPC_HDR_LEN, data, len);
    memcpy(buf + SRPC_HDR_LEN + len, ids, 16);
    const int r = so->aegis_decrypt(NULL, NULL, NULL, 0, tag, buf, adlen, nonce, key);
    if (buf != small)
        free(buf);
    return r == 0 ? 0 : -EBADMSG;
}

int srpc_v5_open(const srpc_v5_keys_t *k, int to_server, const uint8_t hdr[SRPC_HDR_LEN], uint8_t *data,
                 uint32_t len, const uint8_t *tail)
{
    if (!k || !hdr || (len && !data) || !tail || srpc_v5_available() < 0)
        return -EBADMSG;
    const uint8_t *trailer = tail + ids_at(k->encrypt);
    if (srpc_get64(trailer) != k->session || srpc_get64(trailer + 8) == 0 ||
        srpc_get64(trailer + 8) >= SRPC_V5_MAX_COUNTER)
        return -EBADMSG;
    const uint8_t *key = to_server ? k->c2s : k->s2c;
    uint8_t tag[TAG_LEN];
    if (k->encrypt & SRPC_V5_FLAG_AEGIS) {
        if (!srpc_v5_aegis_available() || (k->encrypt & SRPC_V5_FLAG_AES))
            return -EBADMSG;
        return aegis_open(key, k->encrypt & SRPC_V5_FLAG_ENCRYPT, hdr, data, len, tail);
    }
    if (k->encrypt & SRPC_V5_FLAG_AES) {
        if (!srpc_v5_aes_available())
            return -EBADMSG;
        uint8_t nonce[NONCE_LEN];
        nonce_of(nonce, srpc_get64(trailer + 8));
        if (k->encrypt & SRPC_V5_FLAG_ENCRYPT) {
            uint8_t ad[SRPC_HDR_LEN + 16];
            memcpy(ad, hdr, SRPC_HDR_LEN);
            memcpy(ad + SRPC_HDR_LEN, trailer, 16);
            return aes_unseal(key, nonce, data, data, len, trailer + 16, ad, sizeof(ad)) == 0 ? 0 : -EBADMSG;
        }
        if (hdr + SRPC_HDR_LEN == data && data + len == trailer) { /* a datagram as it came: header, data,
                                                                     session and counter are contiguous */
            if (aes_seal(key, nonce, NULL, tag, NULL, 0, hdr, SRPC_HDR_LEN + (size_t)len + 16) != 0)
                return -EBADMSG; /* (libsodium does not fail here: fail closed all the same) */
        } else {
            const struct iovec ad[3] = {{(void *)hdr, SRPC_HDR_LEN}, {data, len}, {(void *)trailer, 16}};
            if (gathered_tag(key, 0, srpc_get64(trailer + 8), ad, 3, tag) < 0)
                return -EBADMSG;
        }
        return srpc_sodium()->verify16(tag, trailer + 16) == 0 ? 0 : -EBADMSG;
    }
    data_tag(key, k->encrypt & SRPC_V5_FLAG_ENCRYPT, 0, hdr, data, len, trailer, tag);
    if (srpc_sodium()->verify16(tag, trailer + 16) != 0)
        return -EBADMSG;
    if ((k->encrypt & SRPC_V5_FLAG_ENCRYPT) && len) {
        uint8_t nonce[NONCE_LEN];
        nonce_of(nonce, srpc_get64(trailer + 8));
        srpc_sodium()->chacha20_xor_ic(data, data, len, nonce, 1, key);
    }
    return 0;
}

uint64_t srpc_v5_trailer_session(const uint8_t trailer[SRPC_V5_TRAILER_LEN])
{
    return srpc_get64(trailer);
}

uint64_t srpc_v5_trailer_counter(const uint8_t trailer[SRPC_V5_TRAILER_LEN])
{
    return srpc_get64(trailer + 8);
}
