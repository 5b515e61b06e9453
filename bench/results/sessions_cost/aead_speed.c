/* aead_speed.c: the AEADs of protocol version 5 (docs/PROTOCOL-v5.md) from libsodium, as splitrpc calls them: ChaCha20-Poly1305 (IETF) and AES-256-GCM, each authenticating (an empty plaintext, the data as associated data) and encrypting, one call per datagram with the key set up each time, and AES-256-GCM with its key expanded once (beforenm/afternm, as splitrpc's core/aes_keys.c keeps it per thread); median of 7 runs per size. The last line is a vecadd call's floor: the four AEAD operations of one call (the client seals the request, the server opens it and seals the reply, the client opens that) over 1 KiB each way, the header and trailer included, nothing else.
 * With a newer libsodium that has AEGIS-128L (1.0.19 on), its columns and floor too: AEGIS-128L
 * (a 16-byte nonce and tag), what a faster suite would cost. The library is the path given, else
 * the system's libsodium.so.23 or .26.
 * Build and run: cc -O2 -o aead_speed aead_speed.c -ldl && ./aead_speed [LIBSODIUM.so]
 * aead_speed_pynacl.out.txt: PyNaCl 1.6.2's (a Python extension: libpython preloaded),
 *   LD_PRELOAD=$(python -c 'import sysconfig as s; print(s.get_config_var("LIBDIR"))')/libpython3.11.so.1.0 \
 *   ./aead_speed $(python -c 'import nacl._sodium as m; print(m.__file__)') */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*after_fn)(unsigned char *, unsigned char *, unsigned long long *, const unsigned char *,
                        unsigned long long, const unsigned char *, unsigned long long, const unsigned char *,
                        const unsigned char *, const void *);
typedef int (*aead_fn)(unsigned char *, unsigned char *, unsigned long long *, const unsigned char *,
                       unsigned long long, const unsigned char *, unsigned long long, const unsigned char *,
                       const unsigned char *, const unsigned char *);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median µs of one call over n bytes (auth: data as associated data; else: encrypted), its nonce nonce_len bytes. */
static double time_nonce(aead_fn f, int auth, unsigned char *buf, unsigned char *out, size_t n, int nonce_len)
{
    unsigned char key[32] = {1}, npub[32] = {0}, mac[32];
    unsigned long long ml;
    int iters = n > 100000 ? 200 : n > 10000 ? 2000 : 100000;
    double r[7];
    for (int k = 0; k < 7; k++) {
        double t = now();
        for (int i = 0; i < iters; i++) {
            npub[nonce_len - 1] = (unsigned char)i;
            if (auth)
                f(NULL, mac, &ml, NULL, 0, buf, n, NULL, npub, key);
            else
                f(out, mac, &ml, buf, n, NULL, 0, NULL, npub, key);
        }
        r[k] = (now() - t) / iters * 1e6;
    }
    qsort(r, 7, sizeof(double), cmp);
    return r[3];
}

/* Median µs of one call over n bytes with a 12-byte nonce (ChaCha20-Poly1305 IETF, AES-256-GCM). */
static double time_one(aead_fn f, int auth, unsigned char *buf, unsigned char *out, size_t n)
{
    return time_nonce(f, auth, buf, out, n, 12);
}

static unsigned char aes_state[512] __attribute__((aligned(16))); /* crypto_aead_aes256gcm_state (512 bytes) */

/* As time_one, with the key expanded once before (afternm); ad: associated data bytes beside
 * an encrypted n (0: authenticating, n bytes of associated data). */
static double time_after(after_fn f, int auth, unsigned char *buf, unsigned char *out, size_t n, size_t ad)
{
    unsigned char npub[12] = {0}, mac[16];
    unsigned long long ml;
    int iters = n > 100000 ? 200 : n > 10000 ? 2000 : 100000;
    double r[7];
    for (int k = 0; k < 7; k++) {
        double t = now();
        for (int i = 0; i < iters; i++) {
            npub[11] = (unsigned char)i;
            if (auth)
                f(NULL, mac, &ml, NULL, 0, buf, n, NULL, npub, aes_state);
            else
                f(out, mac, &ml, buf, n, buf, ad, NULL, npub, aes_state);
        }
        r[k] = (now() - t) / iters * 1e6;
    }
    qsort(r, 7, sizeof(double), cmp);
    return r[3];
}

int main(int argc, char **argv)
{
    void *h = argc > 1 ? dlopen(argv[1], RTLD_NOW) : dlopen("libsodium.so.23", RTLD_NOW);
    if (!h && argc <= 1)
        h = dlopen("libsodium.so.26", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "no libsodium\n");
        return 1;
    }
    ((int (*)(void))dlsym(h, "sodium_init"))();
    int (*aes_ok)(void) = (int (*)(void))dlsym(h, "crypto_aead_aes256gcm_is_available");
    const char *(*ver)(void) = (const char *(*)(void))dlsym(h, "sodium_version_string");
    aead_fn chacha = (aead_fn)dlsym(h, "crypto_aead_chacha20poly1305_ietf_encrypt_detached");
    aead_fn aes = (aead_fn)dlsym(h, "crypto_aead_aes256gcm_encrypt_detached");
    after_fn aes_after = (after_fn)dlsym(h, "crypto_aead_aes256gcm_encrypt_detached_afternm");
    int (*before)(void *, const unsigned char *) = (int (*)(void *, const unsigned char *))dlsym(h, "crypto_aead_aes256gcm_beforenm");
    const int have_aes = aes_ok && aes_ok() && aes_after && before;
    if (have_aes) {
        unsigned char key[32] = {1};
        before(aes_state, key);
    }
    aead_fn aegis = (aead_fn)dlsym(h, "crypto_aead_aegis128l_encrypt_detached");
    printf("libsodium %s (%s); AES-256-GCM available: %d; AEGIS-128L: %s\n", ver ? ver() : "?",
           argc > 1 ? argv[1] : "the system's", aes_ok ? aes_ok() : 0, aegis ? "yes" : "no");
    printf("| bytes | ChaCha20-Poly1305 auth µs | encrypt µs | AES-256-GCM auth µs | encrypt µs | AES-256-GCM, key expanded once: auth µs | encrypt µs | ChaCha auth GB/s | AES auth GB/s |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    size_t sizes[] = {64, 1024, 2048, 8192, 65000, 602112};
    unsigned char *buf = calloc(1, 602112), *out = calloc(1, 602112);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        double ca = time_one(chacha, 1, buf, out, n), ce = time_one(chacha, 0, buf, out, n);
        double ga = aes_ok && aes_ok() ? time_one(aes, 1, buf, out, n) : 0, ge = aes_ok && aes_ok() ? time_one(aes, 0, buf, out, n) : 0;
        double xa = have_aes ? time_after(aes_after, 1, buf, out, n, 0) : 0, xe = have_aes ? time_after(aes_after, 0, buf, out, n, 80) : 0;
        printf("| %zu | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", n, ca, ce, ga, ge, xa, xe, n / ca / 1e3, ga ? n / ga / 1e3 : 0);
    }
    /* vecadd: 1 KiB each way; authenticating, the tag covers header (64), data and session+counter (16) */
    double fa = 4 * time_one(chacha, 1, buf, out, 64 + 1024 + 16), fe = 4 * time_one(chacha, 0, buf, out, 1024);
    printf("\nvecadd's floor, four AEAD operations a call over 1 KiB each way: ChaCha20-Poly1305 %.2f µs authenticated, "
           "%.2f µs encrypted", fa, fe);
    if (have_aes)
        printf("; AES-256-GCM, key expanded once, %.2f µs authenticated, %.2f µs encrypted",
               4 * time_after(aes_after, 1, buf, out, 64 + 1024 + 16, 0), 4 * time_after(aes_after, 0, buf, out, 1024, 80));
    if (aegis) /* a 16-byte nonce (and key: the first 16 of time_nonce's 32) */
        printf("; AEGIS-128L %.2f µs authenticated, %.2f µs encrypted", 4 * time_nonce(aegis, 1, buf, out, 64 + 1024 + 16, 16),
               4 * time_nonce(aegis, 0, buf, out, 1024, 16));
    printf("\n");
    return 0;
}
