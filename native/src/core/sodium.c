/* sodium.c: libsodium loaded at first use (sodium.h): the one place that opens it and finds its entry points. */
#include "core/sodium.h"

#include <dlfcn.h>
#include <pthread.h>

static srpc_sodium_t so;
static int so_ok;

#define SYM(field, name) (*(void **)&so.field = dlsym(h, name))

static void load(void)
{
    static const char *const names[] = {"libsodium.so.23", "libsodium.so.26", "libsodium.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    int (*sodium_init)(void) = (int (*)(void))dlsym(h, "sodium_init");
    size_t (*hash_bytes)(void) = (size_t (*)(void))dlsym(h, "crypto_generichash_blake2b_statebytes");
    size_t (*poly_bytes)(void) = (size_t (*)(void))dlsym(h, "crypto_onetimeauth_poly1305_statebytes");
    if (!SYM(hash_init, "crypto_generichash_blake2b_init") || !SYM(hash_update, "crypto_generichash_blake2b_update") ||
        !SYM(hash_final, "crypto_generichash_blake2b_final") || !SYM(hash, "crypto_generichash_blake2b") ||
        !SYM(verify16, "crypto_verify_16") || !SYM(random, "randombytes_buf") || !SYM(memzero, "sodium_memzero") ||
        !sodium_init || !hash_bytes || sodium_init() < 0)
        return; /* the handle stays open: harmless, and a later call finds nothing half-loaded */
    so.hash_state_bytes = hash_bytes();
    if (so.hash_state_bytes > SRPC_SODIUM_STATE_MAX)
        return;
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
    so_ok = 1;
}

const srpc_sodium_t *srpc_sodium(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load);
    return so_ok ? &so : NULL;
}
