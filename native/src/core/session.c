/* session.c: protocol version 5's handshake (session.h, docs/PROTOCOL-v5.md): INIT, ACCEPT and COOKIE made, parsed and checked, the key schedule, NO_SESSION; the data datagrams' sealing is session_data.c's. */
#include "core/session.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "core/aes_keys.h"
#include "core/auth.h"
#include "core/be.h"
#include "core/session_data.h"
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
_Static_assert(INIT_COOKIE_MAC + TAG_LEN == SRPC_V5_INIT_LEN, "INIT's layout");
_Static_assert(ACC_CONFIRM + TAG_LEN == SRPC_V5_ACCEPT_LEN, "ACCEPT's layout");
_Static_assert(COOKIE_BOX + SRPC_V5_COOKIE_LEN_RAW + TAG_LEN == SRPC_V5_COOKIE_LEN, "COOKIE's layout");


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
    srpc_v5_cookie_tag(k, out + COOKIE_NONCE, init + INIT_MAC1, box, box + SRPC_V5_COOKIE_LEN_RAW);
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
    srpc_v5_cookie_tag(k, d + COOKIE_NONCE, init + INIT_MAC1, box, tag);
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
