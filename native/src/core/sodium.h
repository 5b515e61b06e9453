/* sodium.h: libsodium, loaded at first use (dlopen) so that a build and a process without authentication never need it: the one table of the entry points versions 4 and 5 use (keyed BLAKE2b, X25519, ChaCha20 and Poly1305, AES-256-GCM and AEGIS-128L where there, random bytes, wiping). */
#ifndef SRPC_SODIUM_H
#define SRPC_SODIUM_H

#include <stddef.h>
#include <stdint.h>

#define SRPC_SODIUM_STATE_MAX 512 /* a BLAKE2b state: 384 bytes, 64-aligned; Poly1305's: 256 (checked at load) */
#define SRPC_SODIUM_AES_STATE_MAX 512 /* an expanded AES-256-GCM key (crypto_aead_aes256gcm_state): 512 (checked at load) */

/* libsodium's detached AEAD calls (crypto_aead_*_encrypt_detached, *_decrypt_detached): one shape
 * for every suite that has them. */
typedef int (*srpc_sodium_seal_fn)(unsigned char *c, unsigned char *mac, unsigned long long *maclen,
                                   const unsigned char *m, unsigned long long mlen, const unsigned char *ad,
                                   unsigned long long adlen, const unsigned char *nsec, const unsigned char *npub,
                                   const unsigned char *k);
typedef int (*srpc_sodium_open_fn)(unsigned char *m, unsigned char *nsec, const unsigned char *c,
                                   unsigned long long clen, const unsigned char *mac, const unsigned char *ad,
                                   unsigned long long adlen, const unsigned char *npub, const unsigned char *k);

/* The entry points (libsodium's ABI since 1.0.12: libsodium.so.23 is Debian 12's, .so.26 1.0.19's on). */
typedef struct srpc_sodium {
    size_t hash_state_bytes, poly_state_bytes;
    /* keyed BLAKE2b (RFC 7693), incremental and in one call */
    int (*hash_init)(void *state, const unsigned char *key, size_t keylen, size_t outlen);
    int (*hash_update)(void *state, const unsigned char *in, unsigned long long inlen);
    int (*hash_final)(void *state, unsigned char *out, size_t outlen);
    int (*hash)(unsigned char *out, size_t outlen, const unsigned char *in, unsigned long long inlen,
                const unsigned char *key, size_t keylen);
    int (*verify16)(const unsigned char *x, const unsigned char *y); /* constant time: 0 when equal */
    void (*random)(void *buf, size_t size);
    void (*memzero)(void *pnt, size_t len);
    /* version 5: X25519 (RFC 7748), the ChaCha20 stream and Poly1305 of RFC 8439 */
    int v5; /* 1 when the entry points below are there */
    int (*x25519)(unsigned char *q, const unsigned char *n, const unsigned char *p);
    int (*x25519_base)(unsigned char *q, const unsigned char *n);
    int (*chacha20)(unsigned char *c, unsigned long long clen, const unsigned char *n, const unsigned char *k);
    int (*chacha20_xor_ic)(unsigned char *c, const unsigned char *m, unsigned long long mlen, const unsigned char *n,
                           uint32_t ic, const unsigned char *k);
    int (*poly_init)(void *state, const unsigned char *key);
    int (*poly_update)(void *state, const unsigned char *in, unsigned long long inlen);
    int (*poly_final)(void *state, unsigned char *out);
    /* version 5's AES-256-GCM suite: 1 when the entry points are there and the CPU has AES-NI and
     * PCLMUL (libsodium's crypto_aead_aes256gcm_is_available) */
    int aes;
    srpc_sodium_seal_fn aes_encrypt;
    srpc_sodium_open_fn aes_decrypt;
    /* the same with the key expanded once (core/aes_keys.h): state of SRPC_SODIUM_AES_STATE_MAX bytes, 16-aligned */
    int (*aes_beforenm)(void *state, const unsigned char *k);
    int (*aes_encrypt_afternm)(unsigned char *c, unsigned char *mac, unsigned long long *maclen, const unsigned char *m,
                               unsigned long long mlen, const unsigned char *ad, unsigned long long adlen,
                               const unsigned char *nsec, const unsigned char *npub, const void *state);
    int (*aes_decrypt_afternm)(unsigned char *m, unsigned char *nsec, const unsigned char *c, unsigned long long clen,
                               const unsigned char *mac, const unsigned char *ad, unsigned long long adlen,
                               const unsigned char *npub, const void *state);
    /* version 5's AEGIS-128L suite: 1 when libsodium has it (1.0.19 on) and the CPU what its fast
     * code needs (AES-NI and AVX, or ARM's crypto extensions; else libsodium's AEGIS is a slow
     * portable one) */
    int aegis;
    srpc_sodium_seal_fn aegis_encrypt;
    srpc_sodium_open_fn aegis_decrypt;
} srpc_sodium_t;

/* The environment variable naming a libsodium to load before the system's (a path or a soname). */
#define SRPC_LIBSODIUM_ENV "SPLITRPC_LIBSODIUM"

/* The library's entry points, or NULL when it cannot be loaded (or lacks those of version 4).
 * Loaded once; any thread. */
const srpc_sodium_t *srpc_sodium(void);

/* The name or path the library was loaded from, or NULL without one. Any thread. */
const char *srpc_sodium_library(void);

#endif
