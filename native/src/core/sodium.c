/* sodium.c: libsodium loaded at first use (sodium.h): the one place that opens it and finds its entry points. */
#include "core/sodium.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static srpc_sodium_t so;
static int so_ok;
static char library[512]; /* the name or path it was loaded from */

#define SYM(field, name) (*(void **)&so.field = dlsym(h, name))

/* Fills `so` from library h: 1 when it has what version 4 needs (and version 5's, AES-256-GCM's
 * and AEGIS-128L's where they are), else 0 with `so` cleared. */
static int take(void *h)
{
    int (*sodium_init)(void) = (int (*)(void))dlsym(h, "sodium_init");
    size_t (*hash_bytes)(void) = (size_t (*)(void))dlsym(h, "crypto_generichash_blake2b_statebytes");
    size_t (*poly_bytes)(void) = (size_t (*)(void))dlsym(h, "crypto_onetimeauth_poly1305_statebytes");
    if (!SYM(hash_init, "crypto_generichash_blake2b_init") || !SYM(hash_update, "crypto_generichash_blake2b_update") ||
        !SYM(hash_final, "crypto_generichash_blake2b_final") || !SYM(hash, "crypto_generichash_blake2b") ||
        !SYM(verify16, "crypto_verify_16") || !SYM(random, "randombytes_buf") || !SYM(memzero, "sodium_memzero") ||
        !sodium_init || !hash_bytes || sodium_init() < 0 || (so.hash_state_bytes = hash_bytes()) > SRPC_SODIUM_STATE_MAX) {
        memset(&so, 0, sizeof(so));
        return 0;
    }
    so.v5 = SYM(x25519, "crypto_scalarmult_curve25519") && SYM(x25519_base, "crypto_scalarmult_curve25519_base") &&
            SYM(chacha20, "crypto_stream_chacha20_ietf") && SYM(chacha20_xor_ic, "crypto_stream_chacha20_ietf_xor_ic") &&
            SYM(poly_init, "crypto_onetimeauth_poly1305_init") &&
            SYM(poly_update, "crypto_onetimeauth_poly1305_update") &&
            SYM(poly_final, "crypto_onetimeauth_poly1305_final") && poly_bytes &&
            (so.poly_state_bytes = poly_bytes()) <= SRPC_SODIUM_STATE_MAX;
    int (*aes_ok)(void) = (int (*)(void))dlsym(h, "crypto_aead_aes256gcm_is_available");
    size_t (*aes_bytes)(void) = (size_t (*)(void))dlsym(h, "crypto_aead_aes256gcm_statebytes");
    so.aes = so.v5 && aes_ok && aes_ok() == 1 && SYM(aes_encrypt, "crypto_aead_aes256gcm_encrypt_detached") &&
             SYM(aes_decrypt, "crypto_aead_aes256gcm_decrypt_detached") &&
             SYM(aes_beforenm, "crypto_aead_aes256gcm_beforenm") &&
             SYM(aes_encrypt_afternm, "crypto_aead_aes256gcm_encrypt_detached_afternm") &&
             SYM(aes_decrypt_afternm, "crypto_aead_aes256gcm_decrypt_detached_afternm") && aes_bytes &&
             aes_bytes() <= SRPC_SODIUM_AES_STATE_MAX;
    /* libsodium's fast AEGIS-128L: AES-NI with AVX on x86-64 (else a slow portable one), ARM's crypto
     * extensions on ARM */
    int (*has_aesni)(void) = (int (*)(void))dlsym(h, "sodium_runtime_has_aesni");
    int (*has_avx)(void) = (int (*)(void))dlsym(h, "sodium_runtime_has_avx");
    int (*has_armcrypto)(void) = (int (*)(void))dlsym(h, "sodium_runtime_has_armcrypto");
    const int fast_aes = (has_aesni && has_avx && has_aesni() == 1 && has_avx() == 1) ||
                         (has_armcrypto && has_armcrypto() == 1);
    so.aegis = so.v5 && fast_aes &&
               SYM(aegis_encrypt, "crypto_aead_aegis128l_encrypt_detached") &&
               SYM(aegis_decrypt, "crypto_aead_aegis128l_decrypt_detached");
    return 1;
}

/* The library: $SPLITRPC_LIBSODIUM where it names one that loads (a path; splitrpc's Python package
 * sets it to a newer libsodium than the system's when it finds one: splitrpc/_native/sodium_pick.py),
 * else the system's, the newer ABI first (libsodium.so.26: 1.0.19 on, whose AES-256-GCM is faster). */
static void load(void)
{
    const char *want = getenv(SRPC_LIBSODIUM_ENV);
    const char *const names[] = {want && *want ? want : NULL, "libsodium.so.26", "libsodium.so.23", "libsodium.so"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        void *h = names[i] ? dlopen(names[i], RTLD_NOW | RTLD_LOCAL) : NULL;
        if (!h)
            continue;
        if (take(h)) {
            snprintf(library, sizeof(library), "%s", names[i]);
            so_ok = 1;
            return;
        }
        dlclose(h); /* not a libsodium with what is needed: the next one */
    }
}

const char *srpc_sodium_library(void)
{
    return srpc_sodium() ? library : NULL;
}

const srpc_sodium_t *srpc_sodium(void)
{
    static _Atomic int loaded; /* 1 once load has run, after which `so` and so_ok never change: every
                                  datagram's AEAD asks, and pthread_once each time is a call and a fence */
    if (!atomic_load_explicit(&loaded, memory_order_acquire)) {
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, load);
        atomic_store_explicit(&loaded, 1, memory_order_release);
    }
    return so_ok ? &so : NULL;
}
