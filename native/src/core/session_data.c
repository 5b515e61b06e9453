/* session_data.c: version 5's data datagrams (session.h, docs/PROTOCOL-v5.md): the AEAD in pieces (ChaCha20-Poly1305 over a header apart from its data, AES-256-GCM, AEGIS-128L with its split tag), a message sealed under a session's keys or opened and checked, the trailer's fields; and the COOKIE's tag; the suites libsodium offers here. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/aes_keys.h"
#include "core/auth.h"
#include "core/be.h"
#include "core/session_data.h"
#include "core/sodium.h"

/* ----------------------------------------------------------------- the suites this build offers */

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

/* The n data pieces put together in enc, where an encrypting seal works; a piece already at its
 * place there (sealed in place) is not copied. */
static void gather(uint8_t *enc, const struct iovec *data, int n)
{
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (enc + at != (const uint8_t *)data[i].iov_base)
            memcpy(enc + at, data[i].iov_base, data[i].iov_len);
        at += data[i].iov_len;
    }
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

void srpc_v5_cookie_tag(const uint8_t k[SRPC_V5_KEY_LEN], const uint8_t nonce[NONCE_LEN], const uint8_t mac1[TAG_LEN],
                        const uint8_t *box, uint8_t tag[TAG_LEN])
{
    poly_t p;
    poly_start(&p, k, nonce);
    poly_add(&p, mac1, TAG_LEN, &p.ad_len);
    poly_pad(&p, p.ad_len);
    poly_add(&p, box, SRPC_V5_COOKIE_LEN_RAW, &p.ct_len);
    poly_pad(&p, p.ct_len);
    poly_end(&p, tag);
}

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
            gather(enc, data, n);
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
        gather(enc, data, n);
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
