/* indep_client.c: an independent closed-loop benchmark client of the SplitRPC UDP wire protocol, versions 1, 2 (unkeyed) and 5 -- written from docs/PROTOCOL.md, PROTOCOL-v2.md and PROTOCOL-v5.md (with PROTOCOL-v4.md and security.md for the key file) alone, without reading the server's code or its own load generator. */
/*
 * Build:  cc -O2 -std=gnu11 -Wall -Wextra -o indep_client indep_client.c -ldl
 *         (-ldl is needed only before glibc 2.34; libsodium is loaded at run time, for --v5 only)
 * Run:    ./indep_client --port 9230 [--host ADDR] [--func ID] [--size BYTES]
 *             [--fill vecadd|zero] [--check] [--outstanding N] [--calls N]
 *             [--warmup N] [--mode spin|block] [--seg S] [--timeout-ms MS] [--json]
 *             [--v2 | --v5 KEYFILE[:ID] | --v5-key ID:HEX64] [--encrypt] [--aes] [--aegis]
 *             [--libsodium PATH]
 *         ./indep_client --selftest-v5
 *
 * Version 5 (--v5): one handshake (INIT, resent after 200 ms then twice as long, five resends
 * at most; COOKIE answered by a new INIT with cookie_mac; ACCEPT's confirm checked) before the
 * run, then every REQUEST is a version 5 datagram (version 2 header with version 5, 48-bit
 * req_id, CRC-16; data, encrypted with --encrypt; session | counter | tag of the session's AEAD).
 * The AEAD is ChaCha20-Poly1305 unless --aes: then the INIT offers AES (flags bit 1) and, when
 * the ACCEPT sets AES, the session seals requests and opens replies with AES-256-GCM (the same
 * layout, key, nonce and tag sizes; libsodium's precomputed-key API, one state per session and
 * direction); an ACCEPT without AES makes a ChaCha20-Poly1305 session as without --aes, and an
 * ACCEPT that sets AES when the INIT did not offer it is dropped.  --aes needs AES-NI and
 * PCLMULQDQ (libsodium's crypto_aead_aes256gcm_is_available()).  --aegis offers AEGIS-128L
 * (flags bit 2; with --aes too the INIT offers both and the server picks): when the ACCEPT sets
 * AEGIS the session seals and opens with AEGIS-128L (the page's "The AEGIS-128L suite": key the
 * first 16 bytes of k_c2s / k_s2c, used as they are; nonce 8 zero bytes then the counter; a
 * 32-byte tag T, the datagram header || data || T[0..15] || session || counter || T[16..31], so
 * L = length - 70; requests default to --seg 1402 so that 22 + S + 48 = 1472).  An ACCEPT that
 * sets AEGIS when the INIT did not offer it, or sets both AES and AEGIS, is dropped.  --aegis
 * needs libsodium 1.0.19 or later (crypto_aead_aegis128l_*_detached; PyNaCl 1.6's has them:
 * --libsodium PATH).  The handshake's own AEAD (COOKIE) is ChaCha20-Poly1305 always.
 * Replies are checked (tag under k_s2c, replay window of 1024), decrypted, then taken as in
 * version 1.  A NO_SESSION for an outstanding call makes a new session that follows the old one
 * (prev, resume) and the outstanding calls are sent again under it.
 *
 * Discipline (closed loop): N calls in flight; each call's datagrams leave in ONE
 * sendmmsg(); as soon as a call's reply is complete (or the call ends as an error or
 * lost) the next call is sent from the same slot.  Replies are read with recvmmsg()
 * into a batch of buffers: spin = MSG_DONTWAIT in a tight loop, block = MSG_WAITFORONE
 * (with SO_RCVTIMEO so that retransmission timers still fire when nothing arrives).
 *
 * Accounting (what each number means):
 *   calls       measured calls that ended: ok + errors + lost (== --calls)
 *   errors      measured calls answered by an ERROR datagram (by code), plus replies that
 *               failed --check (key "mismatch" in error_codes)
 *   resends     retransmissions of measured calls
 *   lost        measured calls unanswered after 1 send + 5 resends (then replaced)
 *   calls_per_s measured calls answered by a (checked, if --check) RESPONSE per second of
 *               the measured part; latencies are those calls' latencies, from just before
 *               the call's first datagrams are made (version 5: before they are sealed) to
 *               its complete reply's arrival, read per datagram (version 5: once its last
 *               datagram is opened),
 *               so a session's sealing and opening on this side are in them as a caller
 *               waits for them
 *   elapsed_s   from the first send of the first measured call to the completion of the
 *               last measured call; getrusage() deltas cover the same interval
 *   malformed / stray / dup_segments / dropped_msgs / multiseg_replies count over the
 *               whole run (warm-up included): they cannot be attributed to one phase.
 *   version 5, whole run: bad_auth (replies, ACCEPTs or COOKIEs whose tag or confirm is
 *               wrong: dropped), replayed (a reply counter the window refuses), unknown_session
 *               (a reply of a session the client does not have), no_session (NO_SESSIONs
 *               received), rehandshakes (new sessions made after a NO_SESSION), handshakes (all,
 *               the first included), cookies (COOKIEs answered), handshake_us (the first one),
 *               aead (the current session's: "chacha20-poly1305", "aes-256-gcm" or "aegis-128l";
 *               null for version 1), aes_offered (--aes), aes_unoffered (ACCEPTs with a right
 *               confirm that set AES when the INIT did not offer it: dropped), aegis_offered
 *               (--aegis), aegis_unoffered (the same for AEGIS), suites_both (ACCEPTs with a right
 *               confirm that set both AES and AEGIS: dropped), libsodium (what it was loaded
 *               from; "" for version 1).
 * Percentiles are nearest-rank over the sorted latencies of the ok measured calls.
 * Exit: 0 ran (even with errors), 2 bad usage, 1 could not run (with --v5 also: no handshake,
 *       or ENCRYPT asked and not granted; with --aes: no AES-256-GCM in libsodium or the CPU;
 *       with --aegis: no AEGIS-128L in libsodium);
 *       --selftest-v5: 0 when every byte matches the page, else 1.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define HDR 22                     /* control header bytes */
#define MAGIC 0xA5
#define VERSION 1
#define T_REQUEST 0
#define T_RESPONSE 1
#define T_ERROR 2
#define MAX_OUTSTANDING 1024
#define MAX_SEG 65485              /* 65507 - 22, the page's loopback maximum */
#define MAX_SEG_V5 65453           /* 65507 - 54: version 5's header and trailer */
#define MAX_SEG_V5_AEGIS 65437     /* 65507 - 70: an AEGIS-128L session's (T[0..15] more) */
#define MAX_SEND_SEGS 1024         /* UIO_MAXIOV: what one sendmmsg() may carry */
#define MAX_ERR_DATA 256           /* an ERROR's message is at most 256 bytes */
#define MAX_RESENDS 5
#define MAX_REPLY (64u << 20)      /* a reply announcing more is not reassembled */
#define RX_BATCH 64
#define RX_BUFSZ 65536             /* > the largest UDP payload (65507 / 65527) */
#define NO_REPLY_EXIT_NS (5ull * 1000000000ull)
#define STALL_EXIT_NS (10ull * 1000000000ull)
#define HT_BITS 12                 /* req_id -> slot table, 4096 >= 4 * MAX_OUTSTANDING */
#define HT_SIZE (1u << HT_BITS)
#define HT_MASK (HT_SIZE - 1)
#define MAX_ERR_MSGS 16

/* ---------------------------------------------------------------- options */
static struct {
    const char *host;
    unsigned port;
    unsigned func;
    uint64_t size;
    int fill_vecadd;
    int check;
    unsigned outstanding;
    uint64_t calls;
    uint64_t warmup;
    int spin;
    unsigned seg;
    uint64_t timeout_ms;
    int json;
    int v5;                        /* --v5 / --v5-key: version 5 sessions */
    int v2;                        /* --v2: version 2, unkeyed (the header's CRC-16, 48-bit req_id) */
    int encrypt;                   /* --encrypt: ask for ENCRYPT */
    int aes;                       /* --aes: offer AES (AES-256-GCM) */
    int aegis;                     /* --aegis: offer AEGIS (AEGIS-128L) */
    const char *libsodium;         /* --libsodium: the library to load (NULL: the system's) */
} cfg;

static uint32_t v5_key_id;         /* the key of --v5 */
static uint8_t v5_psk[32];

/* ---------------------------------------------------------------- state */
struct slot {
    int active;
    int measured;
    uint64_t req_id;
    uint64_t t_first;              /* first send of this call, ns */
    uint64_t t_last;               /* latest send, ns */
    unsigned resends;
    unsigned gen_lo, gen_hi;       /* version 5: the sessions (by gen) it was sent under */
    /* reply reassembly */
    int rs_started;
    uint32_t rs_nseg, rs_msglen, rs_S, rs_have;
    uint8_t *buf;
    size_t cap;
    uint8_t *bits;
    size_t bits_cap;
};

static struct slot slots[MAX_OUTSTANDING];
static unsigned active_count;
static int sock = -1;

static uint64_t next_req_id;
static uint64_t issued, total_to_issue, done_measured;
static int finished;

static uint8_t *req_data;          /* the request message (identical for every call) */
static uint32_t req_nseg;
static uint8_t *tx_hdrs;           /* req_nseg headers; only req_id changes per call */
static struct iovec *tx_iov;
static struct mmsghdr *tx_msgs;

static uint64_t *lat_ns;           /* latencies of ok measured calls */
static uint64_t n_lat;

static uint64_t c_ok, c_errors, c_mismatch, c_resends, c_lost;
static uint64_t c_multiseg;          /* replies reassembled from >1 segment (whole run) */
static uint64_t c_malformed, c_stray, c_dup, c_dropped_msgs, c_refused, c_send_splits;
static uint64_t err_by_code[65536];
static struct { unsigned code; unsigned len; char msg[MAX_ERR_DATA + 1]; } err_msgs[MAX_ERR_MSGS];
static unsigned n_err_msgs;

static uint64_t t_start, t_meas_start, t_end, last_rx;
static int any_rx;
static struct rusage ru_start, ru_end;
static uint64_t next_check;

/* ---------------------------------------------------------------- helpers */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v) { put16(p, (uint16_t)(v >> 16)); put16(p + 2, (uint16_t)v); }
static void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static uint32_t get32(const uint8_t *p) { return ((uint32_t)get16(p) << 16) | get16(p + 2); }
static uint64_t get64(const uint8_t *p) { return ((uint64_t)get32(p) << 32) | get32(p + 4); }

static float get_f32le(const uint8_t *p)
{
    uint32_t u;
    float f;
    memcpy(&u, p, 4);
    u = le32toh(u);
    memcpy(&f, &u, 4);
    return f;
}

static void put_f32le(uint8_t *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u = htole32(u);
    memcpy(p, &u, 4);
}

__attribute__((format(printf, 1, 2), noreturn))
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("indep_client: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

__attribute__((format(printf, 1, 2), noreturn))
static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("indep_client: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n(try --help)\n", stderr);
    va_end(ap);
    exit(2);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of memory (%zu bytes)", n);
    return p;
}

static uint64_t parse_u64(const char *s, uint64_t min, uint64_t max, const char *name)
{
    char *end;
    unsigned long long v;
    if (!s || !*s || *s == '-' || *s == '+')
        usage_error("--%s: not a number: '%s'", name, s ? s : "");
    errno = 0;
    v = strtoull(s, &end, 0);
    if (errno || *end)
        usage_error("--%s: not a number: '%s'", name, s);
    if (v < min || v > max)
        usage_error("--%s: %llu is outside %" PRIu64 "..%" PRIu64, name, v, min, max);
    return (uint64_t)v;
}

/* ---------------------------------------------------------------- req_id -> slot */
static uint64_t ht_key[HT_SIZE];
static int16_t ht_val[HT_SIZE];

static unsigned ht_home(uint64_t k) { return (unsigned)((k * 0x9E3779B97F4A7C15ull) >> (64 - HT_BITS)); }

static int ht_find(uint64_t k)
{
    unsigned i = ht_home(k);
    while (ht_val[i] >= 0) {
        if (ht_key[i] == k)
            return ht_val[i];
        i = (i + 1) & HT_MASK;
    }
    return -1;
}

static void ht_insert(uint64_t k, int v)
{
    unsigned i = ht_home(k);
    while (ht_val[i] >= 0)
        i = (i + 1) & HT_MASK;
    ht_key[i] = k;
    ht_val[i] = (int16_t)v;
}

static void ht_delete(uint64_t k)
{
    unsigned i = ht_home(k), j;
    while (ht_val[i] >= 0 && ht_key[i] != k)
        i = (i + 1) & HT_MASK;
    if (ht_val[i] < 0)
        return;
    ht_val[i] = -1;
    j = i;
    for (;;) {                      /* backward-shift deletion (linear probing) */
        unsigned h;
        int move;
        j = (j + 1) & HT_MASK;
        if (ht_val[j] < 0)
            break;
        h = ht_home(ht_key[j]);
        move = (j > i) ? (h <= i || h > j) : (h <= i && h > j);
        if (move) {
            ht_key[i] = ht_key[j];
            ht_val[i] = ht_val[j];
            ht_val[j] = -1;
            i = j;
        }
    }
}

/* ---------------------------------------------------------------- version 5 (docs/PROTOCOL-v5.md)
 * Version 2 inside a session.  libsodium is loaded with dlopen() only when --v5 (or
 * --selftest-v5) is given, so that version 1 runs build and run without it.
 * Rekeying (a new session at 120 s, nothing sent under one older than 170 s) is not done:
 * benchmark runs are short (< 60 s).  A run past 120 s keeps its session, which a server
 * answers with NO_SESSION at 180 s; the client then makes a new session that follows it. */
#define V5_TRAILER 32              /* session | counter | tag */
#define V5_OVERHEAD (HDR + V5_TRAILER)
#define V5_INIT_BODY 104
#define V5_ACCEPT_BODY 64
#define V5_COOKIE_BODY 44
#define V5_NOSESS_BODY 8
#define V5_INIT_LEN (HDR + V5_INIT_BODY)        /* 126 */
#define V5_ACCEPT_LEN (HDR + V5_ACCEPT_BODY)    /* 86 */
#define V5_COOKIE_LEN (HDR + V5_COOKIE_BODY)    /* 66 */
#define V5_NOSESS_LEN (HDR + V5_NOSESS_BODY)    /* 30 */
#define T_INIT 3
#define T_ACCEPT 4
#define T_COOKIE 5
#define T_NO_SESSION 6
#define V5_FLAG_ENCRYPT 1u
#define V5_FLAG_AES 2u             /* INIT: the client can use AES-256-GCM; ACCEPT: the session does */
#define V5_FLAG_AEGIS 4u           /* INIT: the client can use AEGIS-128L; ACCEPT: the session does */
#define V5_AEGIS_MID 16            /* AEGIS-128L: T[0..15] between the data and the trailer */
#define V5_AEGIS_OVERHEAD (V5_OVERHEAD + V5_AEGIS_MID)  /* 70 */
#define V5_WINDOW 1024             /* the highest counter taken and the 1023 below it */
#define V5_HS_FIRST_NS (200ull * 1000000ull)
#define V5_HS_RESENDS 5
#define V5_MAX_COOKIES 5
#define V5_SESSIONS 4              /* sessions kept: the current one and those it followed */
#define REQ_ID48_MASK 0xFFFFFFFFFFFFull

/* libsodium, by dlsym; prototypes as documented by libsodium */
static struct {
    void *lib;
    int (*init)(void);
    int (*generichash)(unsigned char *, size_t, const unsigned char *, unsigned long long,
                       const unsigned char *, size_t);
    int (*scalarmult)(unsigned char *, const unsigned char *, const unsigned char *);
    int (*scalarmult_base)(unsigned char *, const unsigned char *);
    int (*aead_enc)(unsigned char *, unsigned char *, unsigned long long *, const unsigned char *,
                    unsigned long long, const unsigned char *, unsigned long long,
                    const unsigned char *, const unsigned char *, const unsigned char *);
    int (*aead_dec)(unsigned char *, unsigned char *, const unsigned char *, unsigned long long,
                    const unsigned char *, const unsigned char *, unsigned long long,
                    const unsigned char *, const unsigned char *);
    void (*randombytes)(void *, size_t);
    /* AES-256-GCM, precomputed-key API (optional: looked up, not required, for --aes) */
    int aes_ok;                    /* every entry point found and crypto_aead_aes256gcm_is_available() */
    int (*aes_available)(void);
    size_t (*aes_statebytes)(void);
    int (*aes_beforenm)(void *, const unsigned char *);
    int (*aes_enc)(unsigned char *, unsigned char *, unsigned long long *, const unsigned char *,
                   unsigned long long, const unsigned char *, unsigned long long,
                   const unsigned char *, const unsigned char *, const void *);
    int (*aes_dec)(unsigned char *, unsigned char *, const unsigned char *, unsigned long long,
                   const unsigned char *, const unsigned char *, unsigned long long,
                   const unsigned char *, const void *);
    /* AEGIS-128L, detached (optional: libsodium 1.0.19 on; for --aegis).  The same prototypes
     * as ChaCha20-Poly1305's: a 16-byte key, a 16-byte nonce, a 32-byte tag */
    int aegis_ok;                  /* both entry points found */
    int (*aegis_enc)(unsigned char *, unsigned char *, unsigned long long *, const unsigned char *,
                     unsigned long long, const unsigned char *, unsigned long long,
                     const unsigned char *, const unsigned char *, const unsigned char *);
    int (*aegis_dec)(unsigned char *, unsigned char *, const unsigned char *, unsigned long long,
                     const unsigned char *, const unsigned char *, unsigned long long,
                     const unsigned char *, const unsigned char *);
} na;
static char aes_why[160];          /* why na.aes_ok is 0 */
static char aegis_why[160];        /* why na.aegis_ok is 0 */

/* 0 when loaded; otherwise -1 with a reason in why */
static const char *na_name;       /* what libsodium was loaded from (the JSON's "libsodium") */

static int sodium_load(char *why, size_t whylen)
{
    static const char *names[] = { "libsodium.so.23", "libsodium.so.26", "libsodium.so" };
    if (na.lib)
        return 0;
    void *h = NULL;
    if (cfg.libsodium) {           /* that one or none */
        if (!(h = dlopen(cfg.libsodium, RTLD_NOW | RTLD_LOCAL))) {
            snprintf(why, whylen, "cannot load libsodium from %s: %s", cfg.libsodium, dlerror());
            return -1;
        }
        na_name = cfg.libsodium;
    }
    for (unsigned i = 0; i < sizeof names / sizeof names[0] && !h; i++)
        if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)))
            na_name = names[i];
    if (!h) {
        snprintf(why, whylen, "cannot load libsodium (tried libsodium.so.23, .so.26, .so): %s", dlerror());
        return -1;
    }
#define NA_SYM(field, name) \
    do { *(void **)&na.field = dlsym(h, name); \
         if (!na.field) { snprintf(why, whylen, "libsodium lacks %s", name); dlclose(h); return -1; } } while (0)
    NA_SYM(init, "sodium_init");
    NA_SYM(generichash, "crypto_generichash");
    NA_SYM(scalarmult, "crypto_scalarmult");
    NA_SYM(scalarmult_base, "crypto_scalarmult_base");
    NA_SYM(aead_enc, "crypto_aead_chacha20poly1305_ietf_encrypt_detached");
    NA_SYM(aead_dec, "crypto_aead_chacha20poly1305_ietf_decrypt_detached");
    NA_SYM(randombytes, "randombytes_buf");
#undef NA_SYM
    if (na.init() < 0) {
        snprintf(why, whylen, "sodium_init failed");
        dlclose(h);
        return -1;
    }
    na.lib = h;
    /* AEGIS-128L: only --aegis needs it */
    *(void **)&na.aegis_enc = dlsym(h, "crypto_aead_aegis128l_encrypt_detached");
    *(void **)&na.aegis_dec = dlsym(h, "crypto_aead_aegis128l_decrypt_detached");
    if (na.aegis_enc && na.aegis_dec)
        na.aegis_ok = 1;
    else
        snprintf(aegis_why, sizeof aegis_why, "this libsodium (%s) lacks crypto_aead_aegis128l_%s_detached "
                 "(AEGIS-128L came in libsodium 1.0.19)", na_name, na.aegis_enc ? "decrypt" : "encrypt");
    /* AES-256-GCM: only --aes needs it */
    static const char *aes_names[] = {
        "crypto_aead_aes256gcm_is_available", "crypto_aead_aes256gcm_statebytes",
        "crypto_aead_aes256gcm_beforenm", "crypto_aead_aes256gcm_encrypt_detached_afternm",
        "crypto_aead_aes256gcm_decrypt_detached_afternm" };
    void **aes_fields[] = { (void **)&na.aes_available, (void **)&na.aes_statebytes,
                            (void **)&na.aes_beforenm, (void **)&na.aes_enc, (void **)&na.aes_dec };
    for (unsigned i = 0; i < sizeof aes_names / sizeof aes_names[0]; i++)
        if (!(*aes_fields[i] = dlsym(h, aes_names[i]))) {
            snprintf(aes_why, sizeof aes_why, "this libsodium lacks %s", aes_names[i]);
            return 0;
        }
    if (!na.aes_available()) {
        snprintf(aes_why, sizeof aes_why, "crypto_aead_aes256gcm_is_available() is 0: this CPU lacks "
                 "AES-NI or PCLMULQDQ, which libsodium's AES-256-GCM needs");
        return 0;
    }
    na.aes_ok = 1;
    return 0;
}

/* AES-256-GCM states (crypto_aead_aes256gcm_state, statebytes() each, 16-byte aligned: here 64),
 * allocated once: two per kept session (c2s, s2c), made by beforenm when a session is made */
static uint8_t *aes_pool;
static size_t aes_stride;

static void aes_pool_init(unsigned n)
{
    void *p = NULL;
    aes_stride = (na.aes_statebytes() + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, aes_stride * n) != 0)
        die("out of memory (AES-256-GCM states)");
    memset(p, 0, aes_stride * n);
    aes_pool = p;
}

static void *aes_state(unsigned i) { return aes_pool + (size_t)i * aes_stride; }

/* H(k, m, n): BLAKE2b, n-byte digest, keyed with k (klen 0: unkeyed) */
static void H(uint8_t *out, size_t n, const uint8_t *k, size_t klen, const uint8_t *m, size_t mlen)
{
    if (na.generichash(out, n, m, mlen, klen ? k : NULL, klen) != 0)
        die("crypto_generichash failed");
}

/* H(k, label || m, n) */
static void H2(uint8_t *out, size_t n, const uint8_t *k, size_t klen, const char *label,
               const uint8_t *m, size_t mlen)
{
    uint8_t buf[256];
    size_t ll = strlen(label);
    if (ll + mlen > sizeof buf)
        die("internal error: H2 input too long");
    memcpy(buf, label, ll);
    if (mlen)
        memcpy(buf + ll, m, mlen);
    H(out, n, k, klen, buf, ll + mlen);
}

static int ct_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    volatile uint8_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= a[i] ^ b[i];
    return d == 0;
}

static int all_zero(const uint8_t *a, size_t n)
{
    uint8_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= a[i];
    return d == 0;
}

static void wipe(void *p, size_t n)
{
    volatile uint8_t *q = p;
    while (n--)
        *q++ = 0;
}

/* CRC-16/CCITT-FALSE (version 2's header check): poly 0x1021, init 0xFFFF, no reflection, a bit
 * at a time: what the table below is made from and checked against (--selftest-v5). This loop
 * was the client's check until 176 steps a header (about 0.3 us, twice a call) showed in its
 * keyed calls' cost. */
static uint16_t crc16_bitwise(const uint8_t *p, size_t n)
{
    uint16_t c = 0xFFFF;
    for (size_t i = 0; i < n; i++) {
        c ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            c = (c & 0x8000) ? (uint16_t)((c << 1) ^ 0x1021) : (uint16_t)(c << 1);
    }
    return c;
}

/* The same CRC a byte at a time from a 256-entry table made at first use. */
static uint16_t crc16_tab[256];
static int crc16_tab_made;

static uint16_t crc16(const uint8_t *p, size_t n)
{
    if (!crc16_tab_made) {
        for (unsigned v = 0; v < 256; v++) {
            uint16_t c = (uint16_t)(v << 8);
            for (int b = 0; b < 8; b++)
                c = (c & 0x8000) ? (uint16_t)((c << 1) ^ 0x1021) : (uint16_t)(c << 1);
            crc16_tab[v] = c;
        }
        crc16_tab_made = 1;
    }
    uint16_t c = 0xFFFF;
    for (size_t i = 0; i < n; i++)
        c = (uint16_t)((c << 8) ^ crc16_tab[(uint8_t)((c >> 8) ^ p[i])]);
    return c;
}

static uint16_t hdr_crc(const uint8_t *h)
{
    uint8_t t[HDR];
    memcpy(t, h, HDR);
    t[4] = t[5] = 0;
    return crc16(t, HDR);
}

static void put48(uint8_t *p, uint64_t v) { put16(p, (uint16_t)(v >> 32)); put32(p + 2, (uint32_t)v); }
static uint64_t get48(const uint8_t *p) { return ((uint64_t)get16(p) << 32) | get32(p + 2); }

/* a version 2 header (version ver in byte 1's high nibble: 2, or 5), its CRC-16 at offset 4 */
static void hdr_v2(uint8_t *h, unsigned ver, unsigned type, unsigned func, uint64_t req_id, unsigned seq,
                   unsigned nseg, uint32_t msg_len, unsigned aux)
{
    h[0] = MAGIC;
    h[1] = (uint8_t)((ver << 4) | type);
    put16(h + 2, (uint16_t)func);
    put16(h + 4, 0);
    put48(h + 6, req_id);
    put16(h + 12, (uint16_t)seq);
    put16(h + 14, (uint16_t)nseg);
    put32(h + 16, msg_len);
    put16(h + 20, (uint16_t)aux);
    put16(h + 4, crc16(h, HDR));
}

static void v5_hdr(uint8_t *h, unsigned type, unsigned func, uint64_t req_id, unsigned seq,
                   unsigned nseg, uint32_t msg_len, unsigned aux)
{
    hdr_v2(h, 5, type, func, req_id, seq, nseg, msg_len, aux);
}

/* a handshake datagram's header: types 3..6 have seq 0, nseg 1, msg_len = body, aux 0 */
static int v5_hs_hdr_ok(const uint8_t *p, size_t len, unsigned body, int func_zero)
{
    return len == HDR + body && get16(p + 12) == 0 && get16(p + 14) == 1 && get32(p + 16) == body &&
           get16(p + 20) == 0 && (!func_zero || get16(p + 2) == 0);
}

struct v5keys {
    uint8_t c2s[32], s2c[32], confirm[32];
};

/* INIT: 126 bytes from its inputs (prev_c2s: the followed session's k_c2s when prev != 0;
 * cookie: a COOKIE's 16 bytes, or NULL) */
static void v5_build_init(uint8_t *d, uint64_t hid, uint32_t key_id, const uint8_t psk[32],
                          const uint8_t e_c[32], uint64_t time_ms, uint32_t flags, uint64_t prev,
                          const uint8_t *prev_c2s, const uint8_t *cookie)
{
    uint8_t *b = d + HDR, k1[32];
    v5_hdr(d, T_INIT, 0, hid, 0, 1, V5_INIT_BODY, 0);
    put32(b + 0, key_id);
    memcpy(b + 4, e_c, 32);
    put64(b + 36, time_ms);
    put32(b + 44, flags);
    put64(b + 48, prev);
    memset(b + 56, 0, 48);
    if (prev)
        H2(b + 56, 16, prev_c2s, 32, "splitrpc v5 resume", d, 78);      /* datagram bytes 0..77 */
    H2(k1, 32, psk, 32, "splitrpc v5 mac1", NULL, 0);
    H(b + 72, 16, k1, 32, d, 94);                                        /* bytes 0..93 */
    if (cookie)
        H(b + 88, 16, cookie, 16, d, 110);                               /* bytes 0..109 */
}

/* th, prk and the session's keys from an INIT (126 bytes), ACCEPT bytes 0..69 and dh */
static void v5_derive(struct v5keys *k, const uint8_t psk[32], const uint8_t dh[32],
                      const uint8_t *init, const uint8_t *accept)
{
    uint8_t tr[V5_INIT_LEN + 70], th[32], m[64], prk[32];
    memcpy(tr, init, V5_INIT_LEN);
    memcpy(tr + V5_INIT_LEN, accept, 70);
    H(th, 32, NULL, 0, tr, sizeof tr);
    memcpy(m, dh, 32);
    memcpy(m + 32, th, 32);
    H2(prk, 32, psk, 32, "splitrpc v5 prk", m, 64);
    H2(k->c2s, 32, prk, 32, "splitrpc v5 c2s", NULL, 0);
    H2(k->s2c, 32, prk, 32, "splitrpc v5 s2c", NULL, 0);
    H2(k->confirm, 32, prk, 32, "splitrpc v5 confirm", NULL, 0);
    wipe(prk, sizeof prk);
    wipe(m, sizeof m);
    /* confirm = H(k_confirm, th, 16), kept in confirm[0..15] */
    uint8_t c[16];
    H(c, 16, k->confirm, 32, th, 32);
    memcpy(k->confirm, c, 16);
}

/* the server's side of the handshake (used by --selftest-v5 only): ACCEPT for an INIT */
static int v5_build_accept(uint8_t *d, const uint8_t *init, const uint8_t psk[32],
                           const uint8_t e_s_priv[32], uint64_t session, uint32_t flags, struct v5keys *k)
{
    uint8_t e_s[32], dh[32];
    if (na.scalarmult_base(e_s, e_s_priv) != 0)
        return -1;
    if (na.scalarmult(dh, e_s_priv, init + HDR + 4) != 0 || all_zero(dh, 32))
        return -1;
    uint8_t *b = d + HDR;
    v5_hdr(d, T_ACCEPT, 0, get48(init + 6), 0, 1, V5_ACCEPT_BODY, 0);
    memcpy(b, init + HDR, 4);                                           /* key_id: the INIT's */
    put64(b + 4, session);
    memcpy(b + 12, e_s, 32);
    put32(b + 44, flags);
    v5_derive(k, psk, dh, init, d);
    memcpy(b + 48, k->confirm, 16);
    wipe(dh, sizeof dh);
    return 0;
}

/* the client's check of an ACCEPT for its INIT: 0 and the keys when confirm is right */
static int v5_take_accept(const uint8_t *acc, const uint8_t *init, const uint8_t psk[32],
                          const uint8_t e_c_priv[32], struct v5keys *k)
{
    uint8_t dh[32];
    if (na.scalarmult(dh, e_c_priv, acc + HDR + 12) != 0 || all_zero(dh, 32))
        return -1;                  /* a low-order server key: the handshake ends */
    v5_derive(k, psk, dh, init, acc);
    wipe(dh, sizeof dh);
    if (!ct_equal(k->confirm, acc + HDR + 48, 16)) {
        wipe(k, sizeof *k);
        return -1;
    }
    return 0;
}

static void v5_nonce(uint8_t n[12], uint64_t counter)
{
    memset(n, 0, 4);
    put64(n + 4, counter);
}

/* a data datagram: d holds the header (22 bytes, final) and L data bytes in the clear;
 * writes the trailer and, encrypting, replaces the data by its ciphertext.  Returns its length.
 * The AEAD: ChaCha20-Poly1305 with key, or, when aes is not NULL, AES-256-GCM with that
 * precomputed state (made from the same key by crypto_aead_aes256gcm_beforenm). */
static size_t v5_seal(uint8_t *d, size_t L, uint64_t session, uint64_t counter, const uint8_t key[32],
                      const void *aes, int encrypt)
{
    uint8_t nonce[12], *t = d + HDR + L;
    unsigned long long maclen;
    put64(t, session);
    put64(t + 8, counter);
    v5_nonce(nonce, counter);
    if (encrypt) {
        uint8_t ad[HDR + 16];
        memcpy(ad, d, HDR);
        memcpy(ad + HDR, t, 16);
        if (aes)
            na.aes_enc(d + HDR, t + 16, &maclen, d + HDR, L, ad, sizeof ad, NULL, nonce, aes);
        else
            na.aead_enc(d + HDR, t + 16, &maclen, d + HDR, L, ad, sizeof ad, NULL, nonce, key);
    } else if (aes) {
        na.aes_enc(NULL, t + 16, &maclen, NULL, 0, d, HDR + L + 16, NULL, nonce, aes);
    } else {
        na.aead_enc(NULL, t + 16, &maclen, NULL, 0, d, HDR + L + 16, NULL, nonce, key);
    }
    return HDR + L + V5_TRAILER;
}

/* checks a data datagram's tag (and decrypts its data in place): 0 when right (aes as v5_seal's) */
static int v5_open(uint8_t *d, size_t len, const uint8_t key[32], const void *aes, int encrypt)
{
    size_t L = len - V5_OVERHEAD;
    uint8_t nonce[12], *t = d + HDR + L;
    v5_nonce(nonce, get64(t + 8));
    if (encrypt) {
        uint8_t ad[HDR + 16];
        memcpy(ad, d, HDR);
        memcpy(ad + HDR, t, 16);
        if (aes)
            return na.aes_dec(d + HDR, NULL, d + HDR, L, t + 16, ad, sizeof ad, nonce, aes) == 0 ? 0 : -1;
        return na.aead_dec(d + HDR, NULL, d + HDR, L, t + 16, ad, sizeof ad, nonce, key) == 0 ? 0 : -1;
    }
    if (aes)
        return na.aes_dec(NULL, NULL, NULL, 0, t + 16, d, HDR + L + 16, nonce, aes) == 0 ? 0 : -1;
    return na.aead_dec(NULL, NULL, NULL, 0, t + 16, d, HDR + L + 16, nonce, key) == 0 ? 0 : -1;
}

/* ---- the AEGIS-128L suite (the page's "The AEGIS-128L suite"): key the first 16 bytes of
 * k_c2s / k_s2c (used as they are: no expansion), nonce 8 zero bytes then the counter, a 32-byte
 * tag T; the datagram is header || L data bytes || T[0..15] || session || counter || T[16..31]
 * (L + 70 bytes: the trailer is still the last 32).  The associated data is the other suites':
 * header || session || counter (encrypting), header || data || session || counter (not). */
static void v5_aegis_nonce(uint8_t n[16], uint64_t counter)
{
    memset(n, 0, 8);
    put64(n + 8, counter);
}

/* as v5_seal, with AEGIS-128L (key: k_c2s or k_s2c, its first 16 bytes); d has room for L + 70
 * bytes.  Returns the datagram's length, L + 70. */
static size_t v5_aegis_seal(uint8_t *d, size_t L, uint64_t session, uint64_t counter, const uint8_t key[32],
                            int encrypt)
{
    uint8_t nonce[16], T[32], *m = d + HDR + L;   /* m: T[0..15]; m + 16: session, counter, T[16..31] */
    unsigned long long maclen;
    v5_aegis_nonce(nonce, counter);
    if (encrypt) {
        uint8_t ad[HDR + 16];
        memcpy(ad, d, HDR);
        put64(ad + HDR, session);
        put64(ad + HDR + 8, counter);
        na.aegis_enc(d + HDR, T, &maclen, d + HDR, L, ad, sizeof ad, NULL, nonce, key);
        memcpy(m + 16, ad + HDR, 16);
    } else {
        /* header || data || session || counter: contiguous while session and counter stand where
         * T[0..15] goes, then moved to their place */
        put64(m, session);
        put64(m + 8, counter);
        na.aegis_enc(NULL, T, &maclen, NULL, 0, d, HDR + L + 16, NULL, nonce, key);
        memcpy(m + 16, m, 16);
    }
    memcpy(m, T, 16);
    memcpy(m + 32, T + 16, 16);
    return HDR + L + V5_AEGIS_MID + V5_TRAILER;
}

/* as v5_open, with AEGIS-128L (len >= 70); the datagram's bytes are as they came afterwards,
 * but for an encrypting session's data, decrypted in place when the tag is right */
static int v5_aegis_open(uint8_t *d, size_t len, const uint8_t key[32], int encrypt)
{
    size_t L = len - V5_AEGIS_OVERHEAD;
    uint8_t nonce[16], T[32], *m = d + HDR + L;
    int r;
    memcpy(T, m, 16);
    memcpy(T + 16, m + 32, 16);
    v5_aegis_nonce(nonce, get64(m + 24));
    if (encrypt) {
        uint8_t ad[HDR + 16];
        memcpy(ad, d, HDR);
        memcpy(ad + HDR, m + 16, 16);
        return na.aegis_dec(d + HDR, NULL, d + HDR, L, T, ad, sizeof ad, nonce, key) == 0 ? 0 : -1;
    }
    memcpy(m, m + 16, 16);          /* header || data || session || counter, contiguous */
    r = na.aegis_dec(NULL, NULL, NULL, 0, T, d, HDR + L + 16, nonce, key);
    memcpy(m, T, 16);               /* T[0..15] back */
    return r == 0 ? 0 : -1;
}

/* ---- key files: a key table {"keys":[{"id":N,"secret":"<64 hex>",...},...]} or a client
 * file {"id":N,"secret":"<64 hex>"} (docs/security.md).  A tiny JSON reader: every object with a
 * number "id" and a string "secret" is a key. */
struct jr { const char *p, *end; int err; };

static void jr_ws(struct jr *r) { while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) r->p++; }

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int parse_hex32(const char *s, size_t n, uint8_t out[32])
{
    if (n != 64)
        return -1;
    for (size_t i = 0; i < 32; i++) {
        int a = hexval(s[2 * i]), b = hexval(s[2 * i + 1]);
        if (a < 0 || b < 0)
            return -1;
        out[i] = (uint8_t)(a * 16 + b);
    }
    return 0;
}

/* a string: its raw bytes [*s, *s + *n) (escapes are kept as they are: ids and hex need none) */
static int jr_string(struct jr *r, const char **s, size_t *n)
{
    if (r->p >= r->end || *r->p != '"')
        return -1;
    const char *b = ++r->p;
    while (r->p < r->end && *r->p != '"') {
        if (*r->p == '\\')
            r->p++;
        r->p++;
    }
    if (r->p >= r->end)
        return -1;
    *s = b;
    *n = (size_t)(r->p - b);
    r->p++;
    return 0;
}

static uint32_t want_key_id;
static int want_key_any, key_found, key_count;

static int jr_value(struct jr *r, int depth);

static int jr_object(struct jr *r, int depth)
{
    int have_id = 0, have_secret = 0;
    uint64_t id = 0;
    uint8_t secret[32];
    r->p++;                         /* { */
    jr_ws(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        return 0;
    }
    for (;;) {
        const char *k;
        size_t kn;
        jr_ws(r);
        if (jr_string(r, &k, &kn) < 0)
            return -1;
        jr_ws(r);
        if (r->p >= r->end || *r->p != ':')
            return -1;
        r->p++;
        jr_ws(r);
        if (kn == 2 && !memcmp(k, "id", 2) && r->p < r->end && *r->p >= '0' && *r->p <= '9') {
            char *e;
            errno = 0;
            unsigned long long v = strtoull(r->p, &e, 10);
            if (errno || e > r->end)
                return -1;
            r->p = e;
            id = v;
            have_id = 1;
        } else if (kn == 6 && !memcmp(k, "secret", 6) && r->p < r->end && *r->p == '"') {
            const char *s;
            size_t sn;
            if (jr_string(r, &s, &sn) < 0)
                return -1;
            if (parse_hex32(s, sn, secret) < 0)
                return -1;
            have_secret = 1;
        } else if (jr_value(r, depth + 1) < 0) {
            return -1;
        }
        jr_ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == '}') {
            r->p++;
            break;
        }
        return -1;
    }
    if (have_id && have_secret && id >= 1 && id <= UINT32_MAX) {
        key_count++;
        if (!key_found && (want_key_any || id == want_key_id)) {
            key_found = 1;
            v5_key_id = (uint32_t)id;
            memcpy(v5_psk, secret, 32);
        }
    }
    wipe(secret, sizeof secret);
    return 0;
}

static int jr_value(struct jr *r, int depth)
{
    if (depth > 32)
        return -1;
    jr_ws(r);
    if (r->p >= r->end)
        return -1;
    char c = *r->p;
    if (c == '{')
        return jr_object(r, depth);
    if (c == '[') {
        r->p++;
        jr_ws(r);
        if (r->p < r->end && *r->p == ']') {
            r->p++;
            return 0;
        }
        for (;;) {
            if (jr_value(r, depth + 1) < 0)
                return -1;
            jr_ws(r);
            if (r->p < r->end && *r->p == ',') {
                r->p++;
                continue;
            }
            if (r->p < r->end && *r->p == ']') {
                r->p++;
                return 0;
            }
            return -1;
        }
    }
    if (c == '"') {
        const char *s;
        size_t n;
        return jr_string(r, &s, &n);
    }
    /* number, true, false, null */
    const char *b = r->p;
    while (r->p < r->end && *r->p != ',' && *r->p != '}' && *r->p != ']' && *r->p != ' ' &&
           *r->p != '\n' && *r->p != '\r' && *r->p != '\t')
        r->p++;
    return r->p > b ? 0 : -1;
}

/* --v5 FILE[:ID]: the key of that id in FILE (a table or a client file); without :ID the
 * file's only key.  Exits 1 when it cannot. */
static void load_key_file(const char *arg)
{
    char path[4096];
    const char *colon = strrchr(arg, ':');
    want_key_any = 1;
    snprintf(path, sizeof path, "%s", arg);
    if (colon && colon[1]) {
        char *e;
        errno = 0;
        unsigned long long v = strtoull(colon + 1, &e, 0);
        if (!errno && !*e && v >= 1 && v <= UINT32_MAX && colon[1] != '-' && colon[1] != '+') {
            want_key_any = 0;
            want_key_id = (uint32_t)v;
            snprintf(path, sizeof path, "%.*s", (int)(colon - arg), arg);
        }
    }
    FILE *f = fopen(path, "rb");
    if (!f)
        die("--v5: cannot open key file '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
        die("--v5: key file '%s' is open to other users (mode %03o); chmod 600 it", path,
            (unsigned)(st.st_mode & 0777));
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text, f);
    int big = !feof(f);
    fclose(f);
    if (big)
        die("--v5: key file '%s' is larger than 1 MiB", path);
    struct jr r = { text, text + n, 0 };
    if (jr_value(&r, 0) < 0)
        die("--v5: '%s' is not a key file (JSON with \"id\" and 64-hex-digit \"secret\")", path);
    wipe(text, n);
    if (!key_found) {
        if (want_key_any)
            die("--v5: no key in '%s'", path);
        die("--v5: no key of id %u in '%s'", want_key_id, path);
    }
    if (want_key_any && key_count > 1)
        die("--v5: '%s' holds %d keys: name one as %s:ID", path, key_count, path);
}

/* --v5-key ID:HEX64 */
static void parse_v5_key(const char *arg)
{
    const char *colon = strchr(arg, ':');
    if (!colon)
        usage_error("--v5-key: ID:HEX64, not '%s'", arg);
    char idbuf[32];
    snprintf(idbuf, sizeof idbuf, "%.*s", (int)(colon - arg), arg);
    v5_key_id = (uint32_t)parse_u64(idbuf, 1, UINT32_MAX, "v5-key");
    if (parse_hex32(colon + 1, strlen(colon + 1), v5_psk) < 0)
        usage_error("--v5-key: the secret must be 64 hexadecimal digits (32 bytes)");
    key_found = 1;
}

/* ---------------------------------------------------------------- version 5: sessions at run time */
struct v5sess {
    int used;
    unsigned gen;                  /* 1, 2, ...: the order in which sessions were made */
    uint64_t id;
    struct v5keys k;
    int encrypt;
    int aes;                       /* the ACCEPT set AES: AES-256-GCM with the two states below */
    void *aes_c2s, *aes_s2c;       /* crypto_aead_aes256gcm_state of k.c2s, k.s2c (aes only), else NULL */
    int aegis;                     /* the ACCEPT set AEGIS: AEGIS-128L with k.c2s, k.s2c's first 16 bytes */
    uint64_t tx_ctr;               /* the last counter sent */
    uint64_t rx_hi;                /* the highest counter taken */
    uint64_t rx_bits[V5_WINDOW / 64];
};
static struct v5sess v5s[V5_SESSIONS];
static int v5_cur = -1;            /* the current session, or -1 */
static unsigned v5_gen;

static struct {
    int pending;
    uint8_t init[V5_INIT_LEN];
    uint8_t e_priv[32];
    uint64_t hid, prev;
    uint8_t prev_c2s[32];
    unsigned sends, cookies;
    uint64_t interval, next;
} hs;

static uint64_t c_bad_auth, c_replayed, c_unknown_sess, c_no_session, c_rehandshakes, c_cookies, c_handshakes;
static uint64_t c_aes_unoffered;   /* ACCEPTs (confirm right) setting AES that the INIT did not offer */
static uint64_t c_aegis_unoffered; /* the same for AEGIS */
static uint64_t c_suites_both;     /* ACCEPTs (confirm right) setting both AES and AEGIS */
static uint64_t hs_first_ns;       /* the first handshake's time */

static uint64_t rand64(void)
{
    uint64_t v;
    na.randombytes(&v, sizeof v);
    return v;
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

/* a fresh ephemeral key and time; INIT rebuilt (same handshake id, prev and resume) */
static void hs_new_init(const uint8_t *cookie)
{
    uint8_t e_c[32];
    na.randombytes(hs.e_priv, 32);
    if (na.scalarmult_base(e_c, hs.e_priv) != 0)
        die("crypto_scalarmult_base failed");
    v5_build_init(hs.init, hs.hid, v5_key_id, v5_psk, e_c, wall_ms(),
                  (cfg.encrypt ? V5_FLAG_ENCRYPT : 0) | (cfg.aes ? V5_FLAG_AES : 0) |
                  (cfg.aegis ? V5_FLAG_AEGIS : 0), hs.prev,
                  hs.prev ? hs.prev_c2s : NULL, cookie);
}

static void hs_fire(uint64_t now)
{
    ssize_t r = send(sock, hs.init, V5_INIT_LEN, 0);
    if (r < 0 && errno == ECONNREFUSED) {
        c_refused++;
        r = send(sock, hs.init, V5_INIT_LEN, 0);   /* the ICMP was an earlier datagram's */
    }
    if (r < 0 && errno != ECONNREFUSED && errno != ENOBUFS && errno != EAGAIN && errno != EINTR)
        die("send INIT: %s", strerror(errno));
    hs.sends++;
    hs.interval = hs.sends == 1 ? V5_HS_FIRST_NS : hs.interval * 2;
    hs.next = now + hs.interval;
}

/* a new handshake; prev_idx: the session it follows (its outstanding calls go on), or -1 */
static void hs_start(int prev_idx, uint64_t now)
{
    memset(&hs, 0, sizeof hs);
    hs.pending = 1;
    do
        hs.hid = rand64() & REQ_ID48_MASK;
    while (!hs.hid);
    if (prev_idx >= 0) {
        hs.prev = v5s[prev_idx].id;
        memcpy(hs.prev_c2s, v5s[prev_idx].k.c2s, 32);
    }
    hs_new_init(NULL);
    c_handshakes++;
    hs_fire(now);
}

/* INIT resends: 200 ms, then twice as long each time, five resends at most; after the last
 * resend's doubled wait, the handshake has failed */
static void hs_tick(uint64_t now)
{
    if (!hs.pending || now < hs.next)
        return;
    if (hs.sends > V5_HS_RESENDS)
        die("version 5 handshake failed: no ACCEPT from %s port %u after %u INITs%s (a keyed "
            "splitrpc server there, with key id %u?)%s%s%s", cfg.host, cfg.port, hs.sends,
            c_refused ? "; ICMP port unreachable: nothing listens on that port" : "", v5_key_id,
            c_aes_unoffered ? "; its ACCEPTs set AES, which the INIT did not offer: dropped" : "",
            c_aegis_unoffered ? "; its ACCEPTs set AEGIS, which the INIT did not offer: dropped" : "",
            c_suites_both ? "; its ACCEPTs set both AES and AEGIS: dropped" : "");
    hs_fire(now);
}

static void send_call(struct slot *s);

static void on_accept(const uint8_t *p, size_t len, uint64_t now)
{
    const uint8_t *b = p + HDR;
    if (!v5_hs_hdr_ok(p, len, V5_ACCEPT_BODY, 1) ||
        (get32(b + 44) & ~(V5_FLAG_ENCRYPT | V5_FLAG_AES | V5_FLAG_AEGIS))) {
        c_malformed++;
        return;
    }
    if (!hs.pending || get48(p + 6) != hs.hid || get32(b) != v5_key_id || get64(b + 4) == 0) {
        c_stray++;                  /* a resent ACCEPT of a handshake already done, or not ours */
        return;
    }
    struct v5keys k;
    if (v5_take_accept(p, hs.init, v5_psk, hs.e_priv, &k) != 0) {
        c_bad_auth++;
        return;
    }
    int enc = (get32(b + 44) & V5_FLAG_ENCRYPT) != 0;
    int aes = (get32(b + 44) & V5_FLAG_AES) != 0;
    int aegis = (get32(b + 44) & V5_FLAG_AEGIS) != 0;
    uint32_t offered = get32(hs.init + HDR + 44);
    /* AES or AEGIS that the INIT did not offer, or both: dropped (the handshake goes on, and
     * fails if no other ACCEPT comes) */
    if (aes && aegis) {
        c_suites_both++;
        wipe(&k, sizeof k);
        return;
    }
    if (aes && !(offered & V5_FLAG_AES)) {
        c_aes_unoffered++;
        wipe(&k, sizeof k);
        return;
    }
    if (aegis && !(offered & V5_FLAG_AEGIS)) {
        c_aegis_unoffered++;
        wipe(&k, sizeof k);
        return;
    }
    if (cfg.encrypt && !enc)
        die("the server did not grant ENCRYPT (its ACCEPT's flags are %u): nothing is sent under "
            "that session", get32(b + 44));
    wipe(hs.e_priv, sizeof hs.e_priv);
    /* the new session takes the place of the oldest one kept */
    int idx = -1;
    for (int i = 0; i < V5_SESSIONS; i++)
        if (!v5s[i].used) { idx = i; break; }
    if (idx < 0) {
        idx = 0;
        for (int i = 1; i < V5_SESSIONS; i++)
            if (v5s[i].gen < v5s[idx].gen)
                idx = i;
    }
    struct v5sess *ss = &v5s[idx];
    if (ss->aes) {                  /* the replaced session's expanded AES keys */
        wipe(ss->aes_c2s, aes_stride);
        wipe(ss->aes_s2c, aes_stride);
    }
    memset(ss, 0, sizeof *ss);
    ss->used = 1;
    ss->gen = ++v5_gen;
    ss->id = get64(b + 4);
    ss->k = k;
    ss->encrypt = enc;
    ss->aegis = aegis;              /* its keys are k.c2s and k.s2c's first 16 bytes, as they are */
    if (aes) {                      /* one precomputed state per direction, for the session's life */
        ss->aes = 1;
        ss->aes_c2s = aes_state(2u * (unsigned)idx);
        ss->aes_s2c = aes_state(2u * (unsigned)idx + 1);
        na.aes_beforenm(ss->aes_c2s, ss->k.c2s);
        na.aes_beforenm(ss->aes_s2c, ss->k.s2c);
    }
    wipe(&k, sizeof k);
    v5_cur = idx;
    int followed = hs.prev != 0;
    hs.pending = 0;
    any_rx = 1;
    last_rx = now;
    if (followed)                   /* the outstanding calls go on under the new session */
        for (unsigned i = 0; i < cfg.outstanding; i++)
            if (slots[i].active)
                send_call(&slots[i]);
}

static void on_cookie(const uint8_t *p, size_t len, uint64_t now)
{
    const uint8_t *b = p + HDR;
    if (!v5_hs_hdr_ok(p, len, V5_COOKIE_BODY, 1)) {
        c_malformed++;
        return;
    }
    if (!hs.pending || get48(p + 6) != hs.hid) {
        c_stray++;
        return;
    }
    uint8_t ck[32], cookie[16];
    H2(ck, 32, v5_psk, 32, "splitrpc v5 cookie", NULL, 0);
    /* AEAD(ck, nonce, cookie, AD = the INIT's mac1): 16 bytes of ciphertext, then the tag */
    if (na.aead_dec(cookie, NULL, b + 12, 16, b + 28, hs.init + HDR + 72, 16, b, ck) != 0) {
        c_bad_auth++;
        return;
    }
    wipe(ck, sizeof ck);
    if (++hs.cookies > V5_MAX_COOKIES)
        die("version 5 handshake failed: %u COOKIEs in a row", hs.cookies - 1);
    c_cookies++;
    hs_new_init(cookie);           /* a new e_c and time, the same handshake id, with cookie_mac */
    hs.sends = 0;
    hs_fire(now);
}

static void on_no_session(const uint8_t *p, size_t len, uint64_t now)
{
    if (!v5_hs_hdr_ok(p, len, V5_NOSESS_BODY, 0)) {
        c_malformed++;
        return;
    }
    c_no_session++;
    uint64_t sid = get64(p + HDR);
    int idx = ht_find(get48(p + 6));
    /* act only for a call outstanding, with that req_id and func_id, under the session named,
     * when that is the current session and no handshake is under way (one at a time) */
    if (idx < 0 || get16(p + 2) != cfg.func || v5_cur < 0 || v5s[v5_cur].id != sid ||
        slots[idx].gen_hi != v5s[v5_cur].gen || hs.pending)
        return;
    c_rehandshakes++;
    hs_start(v5_cur, now);
}

/* the replay window of a session's replies */
static int win_ok(const struct v5sess *s, uint64_t c)
{
    if (c == 0)
        return 0;
    if (c > s->rx_hi)
        return 1;
    if (s->rx_hi - c >= V5_WINDOW)
        return 0;
    return !(s->rx_bits[(c % V5_WINDOW) / 64] >> (c % 64) & 1);
}

static void win_take(struct v5sess *s, uint64_t c)
{
    if (c > s->rx_hi) {
        uint64_t d = c - s->rx_hi;
        if (d >= V5_WINDOW) {
            memset(s->rx_bits, 0, sizeof s->rx_bits);
        } else {
            for (uint64_t x = s->rx_hi + 1; x < c; x++)
                s->rx_bits[(x % V5_WINDOW) / 64] &= ~(1ull << (x % 64));
        }
        s->rx_hi = c;
    }
    s->rx_bits[(c % V5_WINDOW) / 64] |= 1ull << (c % 64);
}

static void on_segment(unsigned type, unsigned func, uint64_t id, uint32_t seq, uint32_t nseg,
                       uint32_t msg_len, unsigned aux, const uint8_t *data, uint64_t dlen,
                       unsigned gen, uint64_t now);

/* when the latest reply datagram was taken (version 5: opened), read per datagram for every
 * version alike: a call's latency ends there, not at the recvmmsg() that read its batch (`now`,
 * which the loop's timers keep using; with several calls outstanding a batch holds several
 * replies, and the later ones' time would otherwise include the earlier ones' handling) */
static uint64_t seg_taken_ns;

static void on_datagram_v5(uint8_t *p, size_t len, int truncated, uint64_t now)
{
    if (truncated || len < HDR || p[0] != MAGIC || (p[1] >> 4) != 5 || hdr_crc(p) != get16(p + 4)) {
        c_malformed++;
        return;
    }
    unsigned type = p[1] & 0x0F;
    switch (type) {
    case T_ACCEPT: on_accept(p, len, now); return;
    case T_COOKIE: on_cookie(p, len, now); return;
    case T_NO_SESSION: on_no_session(p, len, now); return;
    case T_RESPONSE: case T_ERROR: break;
    default: c_malformed++; return;     /* REQUEST or INIT at a client, or unknown */
    }
    if (len < V5_OVERHEAD) {
        c_malformed++;              /* short */
        return;
    }
    /* the trailer is the last 32 bytes in every suite: the session is read before the suite */
    const uint8_t *t = p + len - V5_TRAILER;
    uint64_t sid = get64(t), ctr = get64(t + 8);
    struct v5sess *ss = NULL;
    for (int i = 0; i < V5_SESSIONS; i++)
        if (v5s[i].used && v5s[i].id == sid) { ss = &v5s[i]; break; }
    if (!ss) {
        c_unknown_sess++;
        return;
    }
    size_t L;
    if (ss->aegis) {                /* AEGIS-128L: T[0..15] before the trailer */
        if (len < V5_AEGIS_OVERHEAD) {
            c_malformed++;          /* short */
            return;
        }
        L = len - V5_AEGIS_OVERHEAD;
    } else {
        L = len - V5_OVERHEAD;
    }
    if (!win_ok(ss, ctr)) {         /* checked first; marked taken only once the tag is right */
        c_replayed++;
        return;
    }
    if ((ss->aegis ? v5_aegis_open(p, len, ss->k.s2c, ss->encrypt)
                   : v5_open(p, len, ss->k.s2c, ss->aes_s2c, ss->encrypt)) != 0) {
        c_bad_auth++;
        return;
    }
    win_take(ss, ctr);
    seg_taken_ns = now_ns(); /* the reply is the caller's once it is opened: its time ends here */
    on_segment(type, get16(p + 2), get48(p + 6), get16(p + 12), get16(p + 14), get32(p + 16),
               get16(p + 20), p + HDR, L, ss->gen, now);
}

/* a call's datagrams under the current session: header, data (sealed) and trailer, each
 * datagram contiguous in tx_v5buf (the counter, so the tag, is new for every send) */
static uint8_t *tx_v5buf;
static size_t tx_v5stride;

static void v5_build_call(struct slot *s)
{
    struct v5sess *ss = &v5s[v5_cur];
    for (uint32_t i = 0; i < req_nseg; i++) {
        uint8_t *d = tx_v5buf + (size_t)i * tx_v5stride;
        uint64_t off = (uint64_t)i * cfg.seg;
        size_t len = (size_t)((req_nseg == 1) ? cfg.size : (i + 1 < req_nseg ? cfg.seg : cfg.size - off));
        v5_hdr(d, T_REQUEST, cfg.func, s->req_id, i, req_nseg, (uint32_t)cfg.size, 0);
        memcpy(d + HDR, req_data + off, len);
        tx_iov[i].iov_base = d;
        tx_iov[i].iov_len = ss->aegis ? v5_aegis_seal(d, len, ss->id, ++ss->tx_ctr, ss->k.c2s, ss->encrypt)
                                      : v5_seal(d, len, ss->id, ++ss->tx_ctr, ss->k.c2s, ss->aes_c2s, ss->encrypt);
        tx_msgs[i].msg_hdr.msg_iov = &tx_iov[i];
        tx_msgs[i].msg_hdr.msg_iovlen = 1;
    }
    if (!s->gen_lo)
        s->gen_lo = ss->gen;
    s->gen_hi = ss->gen;
}

/* ---------------------------------------------------------------- --selftest-v5
 * The worked example of docs/PROTOCOL-v5.md, rebuilt from its stated inputs and compared with
 * the bytes printed in the page. */
static int hexbytes(const char *s, uint8_t *out, size_t max)
{
    size_t n = 0;
    while (*s) {
        if (*s == ' ' || *s == '\n') { s++; continue; }
        int a = hexval(s[0]), b = s[1] ? hexval(s[1]) : -1;
        if (a < 0 || b < 0 || n >= max)
            return -1;
        out[n++] = (uint8_t)(a * 16 + b);
        s += 2;
    }
    return (int)n;
}

static int st_fail;

static void st_cmp(const char *what, const uint8_t *got, size_t n, const char *want_hex)
{
    uint8_t want[256];
    int wn = hexbytes(want_hex, want, sizeof want);
    int ok = wn == (int)n && memcmp(got, want, n) == 0;
    printf("%-52s %s\n", what, ok ? "ok" : "MISMATCH");
    if (!ok) {
        st_fail = 1;
        printf("  page: ");
        for (int i = 0; i < wn; i++) printf("%02x%s", want[i], i + 1 < wn ? " " : "\n");
        printf("  ours: ");
        for (size_t i = 0; i < n; i++) printf("%02x%s", got[i], i + 1 < n ? " " : "\n");
    }
}

static void st_check(const char *what, int ok)
{
    printf("%-52s %s\n", what, ok ? "ok" : "FAILED");
    if (!ok)
        st_fail = 1;
}

/* AES-256-GCM sessions (ACCEPT's AES).  The page gives no AES-256-GCM vector, so these check:
 * libsodium's AES-256-GCM against GCM's published test cases 13 and 14 (256-bit key); an AES
 * session's INIT, ACCEPT, REQUEST and RESPONSE (authenticating and encrypting) against bytes
 * computed from the page's rules with Python's hashlib and cryptography (X25519, AESGCM), not
 * taken from the page; round trips and flipped bits; and the client's ACCEPT handling (AES
 * granted, not granted, and set when the INIT did not offer it). */
static void v5_selftest_aes(const uint8_t psk[32], const uint8_t ec_priv[32], const uint8_t es_priv[32],
                            const uint8_t e_c[32], uint64_t T)
{
    static const char *INIT_AES =       /* flags 2 (AES), handshake id 0x010203040508 */
        "a5 53 00 00 35 e2 01 02 03 04 05 08 00 00 00 01 00 00 00 68 00 00"
        "00 00 00 07"
        "79 a6 31 ee de 1b f9 c9 8f 12 03 2c de ad d0 e7 a0 79 39 8f c7 86 b8 8c c8 46 ec 89 af 85 a5 1a"
        "00 00 01 9a ca 55 9e 00"
        "00 00 00 02"
        "00 00 00 00 00 00 00 00"
        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
        "00 92 4d 5b 81 d6 82 00 3e ac e7 17 da 1e 8a b6"
        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00";
    static const char *ACCEPT_AES =     /* flags 2, session 0x112233445566778a */
        "a5 54 00 00 13 05 01 02 03 04 05 08 00 00 00 01 00 00 00 40 00 00"
        "00 00 00 07"
        "11 22 33 44 55 66 77 8a"
        "67 5d d5 74 ed 77 89 31 0b 3d 2e 76 81 f3 79 0b 46 6c 77 3b 15 21 fe cf 36 57 79 58 37 1e a5 2f"
        "00 00 00 02"
        "78 1d 26 08 62 e9 3b 28 d9 23 ad f1 fd 63 f4 02";
    static const char *REQ_AES =
        "a5 50 00 01 72 59 00 00 00 00 00 01 00 00 00 01 00 00 00 04 00 00"
        "01 02 03 04"
        "11 22 33 44 55 66 77 8a 00 00 00 00 00 00 00 01"
        "d4 2e 27 43 9d 98 6f c4 57 f9 f1 7d 76 04 b8 3d";
    static const char *RESP_AES =
        "a5 51 00 01 a7 af 00 00 00 00 00 01 00 00 00 01 00 00 00 04 00 00 02 03 04 05"
        "11 22 33 44 55 66 77 8a 00 00 00 00 00 00 00 01 bf a7 e3 d1 e9 5f b3 49 00 0a 7e cc 27 11 51 fd";
    static const char *INIT_AES_ENC =   /* flags 3 (ENCRYPT, AES), handshake id 0x01020304050b */
        "a5 53 00 00 4d 18 01 02 03 04 05 0b 00 00 00 01 00 00 00 68 00 00"
        "00 00 00 07"
        "79 a6 31 ee de 1b f9 c9 8f 12 03 2c de ad d0 e7 a0 79 39 8f c7 86 b8 8c c8 46 ec 89 af 85 a5 1a"
        "00 00 01 9a ca 55 9e 00"
        "00 00 00 03"
        "00 00 00 00 00 00 00 00"
        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
        "00 5d 32 19 e2 e9 cd 3a ee bc 7e 32 a2 28 d2 d4"
        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00";
    static const char *ACCEPT_AES_ENC = /* flags 3, session 0x112233445566778b */
        "a5 54 00 00 6b ff 01 02 03 04 05 0b 00 00 00 01 00 00 00 40 00 00"
        "00 00 00 07"
        "11 22 33 44 55 66 77 8b"
        "67 5d d5 74 ed 77 89 31 0b 3d 2e 76 81 f3 79 0b 46 6c 77 3b 15 21 fe cf 36 57 79 58 37 1e a5 2f"
        "00 00 00 03"
        "bf b9 ab b9 3f 8c 4d a2 8f bc 3a c7 f8 fd 59 17";
    static const char *REQ_AES_ENC =
        "a5 50 00 01 72 59 00 00 00 00 00 01 00 00 00 01 00 00 00 04 00 00"
        "98 2c 7b 89"
        "11 22 33 44 55 66 77 8b 00 00 00 00 00 00 00 01"
        "10 97 90 ae 90 c9 71 f9 ad 0b c9 a4 e5 2a a8 ac";
    static const char *RESP_AES_ENC =
        "a5 51 00 01 a7 af 00 00 00 00 00 01 00 00 00 01 00 00 00 04 00 00 86 d6 47 7e"
        "11 22 33 44 55 66 77 8b 00 00 00 00 00 00 00 01 96 62 02 a1 ac d8 68 22 6d 16 95 54 45 20 6f a2";

    printf("AES-256-GCM: GCM's test cases, then the page's AES example (whose bytes this client's\n"
           "  author first computed from the page's rules with Python's cryptography)\n");
    if (!na.aes_ok) {
        printf("%-52s skipped (%s)\n", "AES-256-GCM checks", aes_why);
        return;
    }
    aes_pool_init(2 * V5_SESSIONS + 2);    /* the sessions' states, then two for the checks here */
    void *sa = aes_state(2 * V5_SESSIONS), *sb = aes_state(2 * V5_SESSIONS + 1);
    uint8_t zero[32] = { 0 }, out[32], d[1600], keep[1600];
    unsigned long long ml;

    na.aes_beforenm(sa, zero);
    na.aes_enc(NULL, out, &ml, NULL, 0, NULL, 0, NULL, zero, sa);
    st_cmp("GCM test case 13 (AES-256, empty): tag", out, 16, "53 0f 8a fb c7 45 36 b9 a9 63 b4 f1 c4 cb 73 8b");
    na.aes_enc(out, out + 16, &ml, zero, 16, NULL, 0, NULL, zero, sa);
    st_cmp("GCM test case 14 (16 zero bytes): C, tag", out, 32,
           "ce a7 40 3d 4d 60 6b 6e 07 4e c5 d3 ba f3 9d 18 d0 d1 c8 a7 99 99 6b f0 26 5b 98 b5 d4 8a b9 19");

    /* an authenticating AES session */
    uint8_t init[V5_INIT_LEN], acc[V5_ACCEPT_LEN];
    struct v5keys ks, kc;
    const uint8_t data[4] = { 1, 2, 3, 4 }, rdata[4] = { 2, 3, 4, 5 };
    const uint64_t SA = 0x112233445566778aull, SE = 0x112233445566778bull;
    v5_build_init(init, 0x010203040508ull, 7, psk, e_c, T, V5_FLAG_AES, 0, NULL, NULL);
    st_cmp("AES: INIT (flags AES)", init, sizeof init, INIT_AES);
    st_check("AES: server: ACCEPT built", v5_build_accept(acc, init, psk, es_priv, SA, V5_FLAG_AES, &ks) == 0);
    st_cmp("AES: ACCEPT (flags AES)", acc, sizeof acc, ACCEPT_AES);
    st_check("AES: client: ACCEPT's confirm verified", v5_take_accept(acc, init, psk, ec_priv, &kc) == 0 &&
             !memcmp(&ks, &kc, sizeof ks));
    na.aes_beforenm(sa, kc.c2s);            /* the client's c2s state */
    na.aes_beforenm(sb, ks.c2s);            /* the server's */
    v5_hdr(d, T_REQUEST, 1, 1, 0, 1, 4, 0);
    memcpy(d + HDR, data, 4);
    size_t n = v5_seal(d, 4, SA, 1, kc.c2s, sa, 0);
    st_cmp("AES: REQUEST (58 bytes)", d, n, REQ_AES);
    st_check("AES: server: REQUEST's tag verified", v5_open(d, n, ks.c2s, sb, 0) == 0);
    st_check("AES: the same REQUEST under ChaCha20-Poly1305 refused", v5_open(d, n, ks.c2s, NULL, 0) != 0);
    d[HDR + 1] ^= 0x04;
    st_check("AES: a flipped data bit is refused", v5_open(d, n, ks.c2s, sb, 0) != 0);
    d[HDR + 1] ^= 0x04;
    d[n - 1] ^= 0x01;
    st_check("AES: a flipped tag bit is refused", v5_open(d, n, ks.c2s, sb, 0) != 0);
    d[n - 1] ^= 0x01;
    d[HDR + 4 + 15] ^= 0x01;                /* the counter's last byte: another nonce */
    st_check("AES: a changed counter is refused", v5_open(d, n, ks.c2s, sb, 0) != 0);
    na.aes_beforenm(sb, ks.s2c);
    v5_hdr(d, T_RESPONSE, 1, 1, 0, 1, 4, 0);
    memcpy(d + HDR, rdata, 4);
    n = v5_seal(d, 4, SA, 1, ks.s2c, sb, 0);
    st_cmp("AES: RESPONSE (58 bytes)", d, n, RESP_AES);
    na.aes_beforenm(sb, kc.s2c);
    st_check("AES: client: RESPONSE's tag verified (k_s2c)", v5_open(d, n, kc.s2c, sb, 0) == 0);
    st_check("AES: client: RESPONSE under k_c2s refused", v5_open(d, n, kc.c2s, sa, 0) != 0);

    /* an encrypting AES session */
    uint8_t init2[V5_INIT_LEN], acc2[V5_ACCEPT_LEN];
    struct v5keys ks2, kc2;
    v5_build_init(init2, 0x01020304050bull, 7, psk, e_c, T, V5_FLAG_ENCRYPT | V5_FLAG_AES, 0, NULL, NULL);
    st_cmp("AES+ENCRYPT: INIT (flags 3)", init2, sizeof init2, INIT_AES_ENC);
    st_check("AES+ENCRYPT: server: ACCEPT built",
             v5_build_accept(acc2, init2, psk, es_priv, SE, V5_FLAG_ENCRYPT | V5_FLAG_AES, &ks2) == 0);
    st_cmp("AES+ENCRYPT: ACCEPT (flags 3)", acc2, sizeof acc2, ACCEPT_AES_ENC);
    st_check("AES+ENCRYPT: client: confirm verified", v5_take_accept(acc2, init2, psk, ec_priv, &kc2) == 0);
    na.aes_beforenm(sa, kc2.c2s);
    na.aes_beforenm(sb, ks2.c2s);
    v5_hdr(d, T_REQUEST, 1, 1, 0, 1, 4, 0);
    memcpy(d + HDR, data, 4);
    n = v5_seal(d, 4, SE, 1, kc2.c2s, sa, 1);
    st_cmp("AES+ENCRYPT: REQUEST (58 bytes)", d, n, REQ_AES_ENC);
    memcpy(keep, d, n);
    d[HDR] ^= 0x01;
    st_check("AES+ENCRYPT: a flipped ciphertext bit is refused", v5_open(d, n, ks2.c2s, sb, 1) != 0);
    memcpy(d, keep, n);
    st_check("AES+ENCRYPT: server: REQUEST opened", v5_open(d, n, ks2.c2s, sb, 1) == 0 && !memcmp(d + HDR, data, 4));
    na.aes_beforenm(sb, ks2.s2c);
    v5_hdr(d, T_RESPONSE, 1, 1, 0, 1, 4, 0);
    memcpy(d + HDR, rdata, 4);
    n = v5_seal(d, 4, SE, 1, ks2.s2c, sb, 1);
    st_cmp("AES+ENCRYPT: RESPONSE (58 bytes)", d, n, RESP_AES_ENC);
    na.aes_beforenm(sa, kc2.s2c);
    st_check("AES+ENCRYPT: client: RESPONSE opened", v5_open(d, n, kc2.s2c, sa, 1) == 0 && !memcmp(d + HDR, rdata, 4));

    /* round trips of a full 1418-byte segment (the 128-byte loops too), both kinds */
    for (int enc = 0; enc <= 1; enc++) {
        size_t L = 1418;
        na.aes_beforenm(sa, kc2.c2s);
        v5_hdr(d, T_REQUEST, 1, 2, 0, 1, (uint32_t)L, 0);
        for (size_t i = 0; i < L; i++)
            d[HDR + i] = (uint8_t)(i * 7 + 3);
        memcpy(keep, d, HDR + L);
        n = v5_seal(d, L, SE, 1000, kc2.c2s, sa, enc);
        int ok = n == HDR + L + V5_TRAILER && (enc ? memcmp(d + HDR, keep + HDR, L) != 0 : !memcmp(d, keep, HDR + L));
        uint8_t sealed[1600];
        memcpy(sealed, d, n);
        ok = ok && v5_open(d, n, kc2.c2s, sa, enc) == 0 && !memcmp(d, keep, HDR + L);
        memcpy(d, sealed, n);
        d[HDR + 777] ^= 0x20;
        ok = ok && v5_open(d, n, kc2.c2s, sa, enc) != 0;
        memcpy(d, sealed, n);
        d[2] ^= 0x01;                       /* the header (func_id) is authenticated too */
        ok = ok && v5_open(d, n, kc2.c2s, sa, enc) != 0;
        st_check(enc ? "AES+ENCRYPT: 1418 bytes round trip, flips refused" : "AES: 1418 bytes round trip, flips refused", ok);
    }

    /* the client's ACCEPT handling (on_accept): an ACCEPT setting AES for an INIT without it is
     * dropped; AES granted makes an AES session; AES offered and not granted, a ChaCha one */
    {
        uint8_t init0[V5_INIT_LEN], acc0[V5_ACCEPT_LEN];
        struct v5keys kx;
        v5_key_id = 7;
        memcpy(v5_psk, psk, 32);
        v5_build_init(init0, 0x010203040506ull, 7, psk, e_c, T, 0, 0, NULL, NULL);
        v5_build_accept(acc0, init0, psk, es_priv, 0x1122334455667788ull, V5_FLAG_AES, &kx);
        memset(&hs, 0, sizeof hs);
        hs.pending = 1;
        hs.hid = 0x010203040506ull;
        memcpy(hs.init, init0, sizeof init0);
        memcpy(hs.e_priv, ec_priv, 32);
        on_accept(acc0, sizeof acc0, 1);
        st_check("client: AES not offered, ACCEPT sets it: dropped", v5_cur < 0 && hs.pending && c_aes_unoffered == 1);
        v5_build_accept(acc0, init0, psk, es_priv, 0x1122334455667788ull, 0, &kx);
        on_accept(acc0, sizeof acc0, 2);
        st_check("client: then its ACCEPT without AES: ChaCha20-Poly1305",
                 v5_cur >= 0 && !hs.pending && !v5s[v5_cur].aes && !v5s[v5_cur].aes_c2s && !v5s[v5_cur].aes_s2c);
        memset(&hs, 0, sizeof hs);
        hs.pending = 1;
        hs.hid = 0x010203040508ull;
        memcpy(hs.init, init, sizeof init);
        memcpy(hs.e_priv, ec_priv, 32);
        on_accept(acc, sizeof acc, 3);
        int ok = v5_cur >= 0 && !hs.pending && v5s[v5_cur].aes && v5s[v5_cur].id == SA;
        if (ok) {
            v5_hdr(d, T_REQUEST, 1, 1, 0, 1, 4, 0);
            memcpy(d + HDR, data, 4);
            n = v5_seal(d, 4, SA, 1, v5s[v5_cur].k.c2s, v5s[v5_cur].aes_c2s, 0);
            uint8_t want[64];
            ok = hexbytes(REQ_AES, want, sizeof want) == (int)n && !memcmp(d, want, n);
            v5_hdr(d, T_RESPONSE, 1, 1, 0, 1, 4, 0);
            memcpy(d + HDR, rdata, 4);
            n = v5_seal(d, 4, SA, 1, ks.s2c, NULL, 0);   /* under ChaCha20-Poly1305: refused */
            ok = ok && v5_open(d, n, v5s[v5_cur].k.s2c, v5s[v5_cur].aes_s2c, 0) != 0;
            ok = ok && hexbytes(RESP_AES, d, sizeof d) == (int)n &&
                 v5_open(d, n, v5s[v5_cur].k.s2c, v5s[v5_cur].aes_s2c, 0) == 0;
        }
        st_check("client: AES offered and granted: AES session", ok);
        v5_build_init(init0, 0x01020304050cull, 7, psk, e_c, T, V5_FLAG_AES, 0, NULL, NULL);
        v5_build_accept(acc0, init0, psk, es_priv, 0x112233445566778cull, 0, &kx);
        memset(&hs, 0, sizeof hs);
        hs.pending = 1;
        hs.hid = 0x01020304050cull;
        memcpy(hs.init, init0, sizeof init0);
        memcpy(hs.e_priv, ec_priv, 32);
        on_accept(acc0, sizeof acc0, 4);
        st_check("client: AES offered, not granted: ChaCha20-Poly1305",
                 v5_cur >= 0 && !hs.pending && v5s[v5_cur].id == 0x112233445566778cull && !v5s[v5_cur].aes);
        memset(&hs, 0, sizeof hs);
    }
}

/* AEGIS-128L sessions (ACCEPT's AEGIS; the page's "The AEGIS-128L suite").  These check:
 * libsodium's AEGIS-128L against the test vectors of draft-irtf-cfrg-aegis-aead (AEGIS-128L's
 * 1 to 3, 256-bit tags); the page's AEGIS-128L example ("The AEGIS-128L suite." in its worked
 * example: the flags-4 INIT and ACCEPT, and both sessions' REQUEST and RESPONSE), whose bytes this
 * client's author first computed from the page's rules with a pure-Python AEGIS-128L (checked
 * against libsodium and the draft's vectors), Python's hashlib and cryptography, and found equal to
 * the page's when it printed them; the encrypting session's INIT and ACCEPT (flags 5), which the
 * page does not print, from the same computation; round trips, flipped bits and the 70-byte floor;
 * and the client's ACCEPT handling (AEGIS granted, not granted, set when the INIT did not offer
 * it, AES and AEGIS both set). */
static void v5_selftest_aegis(const uint8_t psk[32], const uint8_t ec_priv[32], const uint8_t es_priv[32],
                              const uint8_t e_c[32], uint64_t T)
{
    static const char *INIT_AEGIS =     /* the page's: flags 4 (AEGIS), handshake id 0x010203040510 */
        "a5 53 00 00 c2 51 01 02 03 04 05 10 00 00 00 01 00 00 00 68 00 00"
        "00 00 00 07"
        "79 a6 31 ee de 1b f9 c9 8f 12 03 2c de ad d0 e7 a0 79 39 8f c7 86 b8 8c c8 46 ec 89 af 85 a5 1a"
        "00 00 01 9a ca 55 9e 00"
        "00 00 00 04"
        "00 00 00 00 00 00 00 00"
        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
        "74 44 3b 82 e2 61 65 79 cd aa c6 89 3f 95 25 1a"
        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00";
    static const char *ACCEPT_AEGIS =   /* the page's: flags 4, session 0x1122334455667790 */
        "a5 54 00 00 e4 b6 01 02 03 04 05 10 00 00 00 01 00 00 00 40 00 00"
        "00 00 00 07"
        "11 22 33 44 55 66 77 90"
        "67 5d d5 74 ed 77 89 31 0b 3d 2e 76 81 f3 79 0b 46 6c 77 3b 15 21 fe cf 36 57 79 58 37 1e a5 2f"
        "00 00 00 04"
        "12 95 ef 58 6d 36 f2 0b 68 fe 43 f9 17 f3 c8 9d";
    static const char *REQ_AEGIS =      /* the page's: header, data, T[0..15], session, counter, T[16..31] */
        "a5 50 00 01 72 59 00 00 00 00 00 01 00 00 00 01 00 00 00 04 00 00"
        "01 02 03 04"
        "04 1f 9c 9c 89 15 36 72 9e 2a 29 f1 ab 46 d3 61"
        "11 22 33 44 55 66 77 90 00 00 00 00 00 00 00 01"
        "65 fb 9b 73 3d 51 c0 1c 32 11 b4 0a 1e 7a e7 51";
    static const char *RESP_AEGIS =     /* the page's */
        "a5 51 00 01 a7 af 00 00 00 00 00 01 00 00 00 01 00 00 00 04 00 00"
        "02 03 04 05"
        "a5 3a b2 c4 4f 0d 8b 27 35 fe 84 a8 d7 47 6a fb"
        "11 22 33 44 55 66 77 90 00 00 00 00 00 00 00 01"
        "d2 19 b9 97 09 a0 96 d9 87 ee 64 7d 16 7b 6a ff";
    static const char *INIT_AEGIS_ENC = /* flags 5 (ENCRYPT, AEGIS), handshake id 0x010203040511 (not printed
                                         * on the page: computed from its rules) */
        "a5 53 00 00 1a 18 01 02 03 04 05 11 00 00 00 01 00 00 00 68 00 00"
        "00 00 00 07"
        "79 a6 31 ee de 1b f9 c9 8f 12 03 2c de ad d0 e7 a0 79 39 8f c7 86 b8 8c c8 46 ec 89 af 85 a5 1a"
        "00 00 01 9a ca 55 9e 00"
        "00 00 00 05"
        "00 00 00 00 00 00 00 00"
        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
        "27 e3 7c 6a 2a 35 e5 3c 38 69 fe c6 aa db 1d 0c"
        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00";
    static const char *ACCEPT_AEGIS_ENC = /* flags 5, session 0x1122334455667791 (not printed on the page) */
        "a5 54 00 00 3c ff 01 02 03 04 05 11 00 00 00 01 00 00 00 40 00 00"
        "00 00 00 07"
        "11 22 33 44 55 66 77 91"
        "67 5d d5 74 ed 77 89 31 0b 3d 2e 76 81 f3 79 0b 46 6c 77 3b 15 21 fe cf 36 57 79 58 37 1e a5 2f"
        "00 00 00 05"
        "89 f3 31 1a e8 bc 4a 62 fa eb 7f e3 57 1c 91 1a";
    static const char *REQ_AEGIS_ENC =  /* the page's */
        "a5 50 00 01 72 59 00 00 00 00 00 01 00 00 00 01 00 00 00 04 00 00"
        "0c 75 16 46"
        "bc 6c d1 d1 1c f9 66 6f 8b 26 f3 70 be a8 ad 0b"
        "11 22 33 44 55 66 77 91 00 00 00 00 00 00 00 01"
        "7b b2 6a 0f c6 62 d6 14 28 4e d9 b4 76 d5 39 57";
    static const char *RESP_AEGIS_ENC = /* the page's */
        "a5 51 00 01 a7 af 00 00 00 00 00 01 00 00 00 01 00 00 00 04 00 00"
        "4f 1a d4 ea"
        "43 cf 31 6d 19 95 50 79 0a a1 3f 77 ee a0 46 09"
        "11 22 33 44 55 66 77 91 00 00 00 00 00 00 00 01"
        "2b 3d 15 e9 c8 80 e6 d7 ea b3 f8 1a 9e 4d 39 75";

    printf("AEGIS-128L: the draft's test vectors, then the page's AEGIS-128L example\n");
    if (!na.aegis_ok) {
        printf("%-52s skipped (%s)\n", "AEGIS-128L checks", aegis_why);
        return;
    }
    uint8_t d[1600], keep[1600], sealed[1600], out[64], msg[32], ad[8];
    unsigned long long ml;
    size_t n;
    {   /* draft-irtf-cfrg-aegis-aead, AEGIS-128L test vectors 1 to 3 (256-bit tags) */
        uint8_t k[16] = { 0x10, 0x01 }, nn[16] = { 0x10, 0x00, 0x02 };
        memset(msg, 0, 16);
        na.aegis_enc(out, out + 16, &ml, msg, 16, NULL, 0, NULL, nn, k);
        st_cmp("AEGIS-128L test vector 1 (16 zero bytes): C, tag", out, 48,
               "c1 c0 e5 8b d9 13 00 6f eb a0 0f 4b 3c c3 59 4e"
               "25 83 5b fb b2 16 32 17 6c f0 38 40 68 7c b9 68 ca ce 46 17 af 1b d0 f7 d0 64 c6 39 a5 c7 9e e4");
        na.aegis_enc(NULL, out, &ml, NULL, 0, NULL, 0, NULL, nn, k);
        st_cmp("AEGIS-128L test vector 2 (empty): tag", out, 32,
               "13 60 dc 9d b8 ae 42 45 5f 6e 5b 6a 9d 48 8e a4 f2 18 4c 4e 12 12 02 49 33 5c 4e e8 4b af e2 5d");
        for (int i = 0; i < 32; i++) msg[i] = (uint8_t)i;
        for (int i = 0; i < 8; i++) ad[i] = (uint8_t)i;
        na.aegis_enc(out, out + 32, &ml, msg, 32, ad, 8, NULL, nn, k);
        st_cmp("AEGIS-128L test vector 3 (32 bytes, 8 of AD): C, tag", out, 64,
               "79 d9 45 93 d8 c2 11 9d 7e 8f d9 b8 fc 77 84 5c 5c 07 7a 05 b2 52 8b 6a c5 4b 56 3a ed 8e fe 84"
               "02 2c b7 96 fe 7e 0a e1 19 75 25 ff 67 e3 09 48 4c fb ab 65 28 dd ef 89 f1 7d 74 ef 8e cd 82 b3");
    }

    /* an authenticating AEGIS-128L session */
    uint8_t init[V5_INIT_LEN], acc[V5_ACCEPT_LEN];
    struct v5keys ks, kc;
    const uint8_t data[4] = { 1, 2, 3, 4 }, rdata[4] = { 2, 3, 4, 5 };
    const uint64_t SA = 0x1122334455667790ull, SE = 0x1122334455667791ull;
    v5_build_init(init, 0x010203040510ull, 7, psk, e_c, T, V5_FLAG_AEGIS, 0, NULL, NULL);
    st_cmp("AEGIS: INIT (flags AEGIS)", init, sizeof init, INIT_AEGIS);
    st_check("AEGIS: server: ACCEPT built", v5_build_accept(acc, init, psk, es_priv, SA, V5_FLAG_AEGIS, &ks) == 0);
    st_cmp("AEGIS: ACCEPT (flags AEGIS)", acc, sizeof acc, ACCEPT_AEGIS);
    st_check("AEGIS: client: ACCEPT's confirm verified", v5_take_accept(acc, init, psk, ec_priv, &kc) == 0 &&
             !memcmp(&ks, &kc, sizeof ks));
    v5_hdr(d, T_REQUEST, 1, 1, 0, 1, 4, 0);
    memcpy(d + HDR, data, 4);
    n = v5_aegis_seal(d, 4, SA, 1, kc.c2s, 0);
    st_cmp("AEGIS: REQUEST (74 bytes)", d, n, REQ_AEGIS);
    st_check("AEGIS: trailer = the last 32 bytes (session, counter)",
             n == 74 && get64(d + n - 32) == SA && get64(d + n - 24) == 1);
    memcpy(keep, d, n);
    st_check("AEGIS: server: REQUEST's tag verified, datagram kept",
             v5_aegis_open(d, n, ks.c2s, 0) == 0 && !memcmp(d, keep, n));
    st_check("AEGIS: the same REQUEST under ChaCha20-Poly1305 refused", v5_open(d, n, ks.c2s, NULL, 0) != 0);
    memcpy(d, keep, n);
    d[HDR + 1] ^= 0x04;
    st_check("AEGIS: a flipped data bit is refused", v5_aegis_open(d, n, ks.c2s, 0) != 0);
    d[HDR + 1] ^= 0x04;
    d[HDR + 4] ^= 0x01;                     /* T[0..15] */
    st_check("AEGIS: a flipped bit of T[0..15] is refused", v5_aegis_open(d, n, ks.c2s, 0) != 0);
    d[HDR + 4] ^= 0x01;
    d[n - 1] ^= 0x01;                       /* T[16..31] */
    st_check("AEGIS: a flipped bit of T[16..31] is refused", v5_aegis_open(d, n, ks.c2s, 0) != 0);
    d[n - 1] ^= 0x01;
    d[n - 17] ^= 0x01;                      /* the counter's last byte: another nonce */
    st_check("AEGIS: a changed counter is refused", v5_aegis_open(d, n, ks.c2s, 0) != 0);
    d[n - 17] ^= 0x01;
    d[n - 25] ^= 0x01;                      /* the session's last byte (associated data) */
    st_check("AEGIS: a changed session is refused", v5_aegis_open(d, n, ks.c2s, 0) != 0);
    d[n - 25] ^= 0x01;
    st_check("AEGIS: the datagram, flips undone, still opens", !memcmp(d, keep, n) &&
             v5_aegis_open(d, n, ks.c2s, 0) == 0);
    {   /* the key is k_c2s's first 16 bytes: its last 16 do not matter, its first do */
        uint8_t k2[32];
        memcpy(k2, ks.c2s, 32);
        k2[31] ^= 0xff;
        int ok = v5_aegis_open(d, n, k2, 0) == 0;
        k2[15] ^= 0x01;
        ok = ok && v5_aegis_open(d, n, k2, 0) != 0;
        st_check("AEGIS: the key is k_c2s's first 16 bytes", ok);
    }
    v5_hdr(d, T_RESPONSE, 1, 1, 0, 1, 4, 0);
    memcpy(d + HDR, rdata, 4);
    n = v5_aegis_seal(d, 4, SA, 1, ks.s2c, 0);
    st_cmp("AEGIS: RESPONSE (74 bytes)", d, n, RESP_AEGIS);
    st_check("AEGIS: client: RESPONSE's tag verified (k_s2c)", v5_aegis_open(d, n, kc.s2c, 0) == 0);
    st_check("AEGIS: client: RESPONSE under k_c2s refused", v5_aegis_open(d, n, kc.c2s, 0) != 0);

    /* an encrypting AEGIS-128L session */
    uint8_t init2[V5_INIT_LEN], acc2[V5_ACCEPT_LEN];
    struct v5keys ks2, kc2;
    v5_build_init(init2, 0x010203040511ull, 7, psk, e_c, T, V5_FLAG_ENCRYPT | V5_FLAG_AEGIS, 0, NULL, NULL);
    st_cmp("AEGIS+ENCRYPT: INIT (flags 5)", init2, sizeof init2, INIT_AEGIS_ENC);
    st_check("AEGIS+ENCRYPT: server: ACCEPT built",
             v5_build_accept(acc2, init2, psk, es_priv, SE, V5_FLAG_ENCRYPT | V5_FLAG_AEGIS, &ks2) == 0);
    st_cmp("AEGIS+ENCRYPT: ACCEPT (flags 5)", acc2, sizeof acc2, ACCEPT_AEGIS_ENC);
    st_check("AEGIS+ENCRYPT: client: confirm verified", v5_take_accept(acc2, init2, psk, ec_priv, &kc2) == 0);
    v5_hdr(d, T_REQUEST, 1, 1, 0, 1, 4, 0);
    memcpy(d + HDR, data, 4);
    n = v5_aegis_seal(d, 4, SE, 1, kc2.c2s, 1);
    st_cmp("AEGIS+ENCRYPT: REQUEST (74 bytes)", d, n, REQ_AEGIS_ENC);
    memcpy(keep, d, n);
    d[HDR] ^= 0x01;
    st_check("AEGIS+ENCRYPT: a flipped ciphertext bit is refused", v5_aegis_open(d, n, ks2.c2s, 1) != 0);
    memcpy(d, keep, n);
    st_check("AEGIS+ENCRYPT: server: REQUEST opened",
             v5_aegis_open(d, n, ks2.c2s, 1) == 0 && !memcmp(d + HDR, data, 4));
    v5_hdr(d, T_RESPONSE, 1, 1, 0, 1, 4, 0);
    memcpy(d + HDR, rdata, 4);
    n = v5_aegis_seal(d, 4, SE, 1, ks2.s2c, 1);
    st_cmp("AEGIS+ENCRYPT: RESPONSE (74 bytes)", d, n, RESP_AEGIS_ENC);
    st_check("AEGIS+ENCRYPT: client: RESPONSE opened",
             v5_aegis_open(d, n, kc2.s2c, 1) == 0 && !memcmp(d + HDR, rdata, 4));

    /* round trips of a full 1402-byte segment (22 + 1402 + 48 = 1472), both kinds, and of lengths
     * around AEGIS-128L's 32-byte blocks */
    for (int enc = 0; enc <= 1; enc++) {
        static const size_t lens[] = { 1402, 0, 1, 31, 32, 33, 63, 64, 65, 1000 };
        int ok = 1;
        for (unsigned li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            size_t L = lens[li];
            v5_hdr(d, T_REQUEST, 1, 2, 0, 1, (uint32_t)L, 0);
            for (size_t i = 0; i < L; i++)
                d[HDR + i] = (uint8_t)(i * 7 + 3);
            memcpy(keep, d, HDR + L);
            n = v5_aegis_seal(d, L, SE, 1000 + li, kc2.c2s, enc);
            ok = ok && n == HDR + L + V5_AEGIS_MID + V5_TRAILER && get64(d + n - 32) == SE &&
                 get64(d + n - 24) == 1000 + li &&
                 (enc && L ? memcmp(d + HDR, keep + HDR, L) != 0 : !memcmp(d, keep, HDR + L));
            memcpy(sealed, d, n);
            ok = ok && v5_aegis_open(d, n, kc2.c2s, enc) == 0 && !memcmp(d, keep, HDR + L);
            if (L > 0) {
                memcpy(d, sealed, n);
                d[HDR + L / 2] ^= 0x20;
                ok = ok && v5_aegis_open(d, n, kc2.c2s, enc) != 0;
            }
            memcpy(d, sealed, n);
            d[2] ^= 0x01;                   /* the header (func_id) is authenticated too */
            ok = ok && v5_aegis_open(d, n, kc2.c2s, enc) != 0;
        }
        st_check(enc ? "AEGIS+ENCRYPT: 1402 bytes (and 0..1000) round trip, flips refused"
                     : "AEGIS: 1402 bytes (and 0..1000) round trip, flips refused", ok);
    }

    /* the client's ACCEPT handling (on_accept) and its reading of replies (on_datagram_v5) */
    {
        uint8_t init0[V5_INIT_LEN], acc0[V5_ACCEPT_LEN];
        struct v5keys kx;
        uint64_t a0 = c_aes_unoffered;
        v5_key_id = 7;
        memcpy(v5_psk, psk, 32);
        for (unsigned i = 0; i < HT_SIZE; i++)   /* no call outstanding: a good reply is stray */
            ht_val[i] = -1;
#define ST_HS(hid_, init_)                                                          \
        do { memset(&hs, 0, sizeof hs); hs.pending = 1; hs.hid = (hid_);            \
             memcpy(hs.init, (init_), V5_INIT_LEN); memcpy(hs.e_priv, ec_priv, 32); } while (0)
        /* AEGIS not offered, the ACCEPT sets it: dropped */
        v5_cur = -1;
        v5_build_init(init0, 0x010203040506ull, 7, psk, e_c, T, 0, 0, NULL, NULL);
        v5_build_accept(acc0, init0, psk, es_priv, 0x1122334455667788ull, V5_FLAG_AEGIS, &kx);
        ST_HS(0x010203040506ull, init0);
        on_accept(acc0, sizeof acc0, 1);
        st_check("client: AEGIS not offered, ACCEPT sets it: dropped",
                 v5_cur < 0 && hs.pending && c_aegis_unoffered == 1);
        /* both offered, the ACCEPT sets both: dropped */
        v5_build_init(init0, 0x010203040512ull, 7, psk, e_c, T, V5_FLAG_AES | V5_FLAG_AEGIS, 0, NULL, NULL);
        v5_build_accept(acc0, init0, psk, es_priv, 0x1122334455667792ull, V5_FLAG_AES | V5_FLAG_AEGIS, &kx);
        ST_HS(0x010203040512ull, init0);
        on_accept(acc0, sizeof acc0, 2);
        st_check("client: AES and AEGIS offered, ACCEPT sets both: dropped",
                 v5_cur < 0 && hs.pending && c_suites_both == 1 && c_aes_unoffered == a0);
        /* ... its ACCEPT granting AEGIS (the server picks): an AEGIS-128L session */
        v5_build_accept(acc0, init0, psk, es_priv, 0x1122334455667792ull, V5_FLAG_AEGIS, &kx);
        on_accept(acc0, sizeof acc0, 3);
        st_check("client: AES and AEGIS offered, AEGIS granted: AEGIS-128L",
                 v5_cur >= 0 && !hs.pending && v5s[v5_cur].aegis && !v5s[v5_cur].aes && !v5s[v5_cur].aes_c2s);
        if (na.aes_ok) {                    /* ... or granting AES: an AES-256-GCM session */
            v5_build_accept(acc0, init0, psk, es_priv, 0x1122334455667793ull, V5_FLAG_AES, &kx);
            ST_HS(0x010203040512ull, init0);
            on_accept(acc0, sizeof acc0, 4);
            st_check("client: AES and AEGIS offered, AES granted: AES-256-GCM",
                     v5_cur >= 0 && !hs.pending && v5s[v5_cur].aes && !v5s[v5_cur].aegis);
        }
        /* the page's AEGIS session: requests sealed as the page's, its RESPONSE taken */
        ST_HS(0x010203040510ull, init);
        on_accept(acc, sizeof acc, 5);
        int ok = v5_cur >= 0 && !hs.pending && v5s[v5_cur].aegis && !v5s[v5_cur].aes && v5s[v5_cur].id == SA;
        if (ok) {
            struct v5sess *ss = &v5s[v5_cur];
            uint8_t want[128];
            v5_hdr(d, T_REQUEST, 1, 1, 0, 1, 4, 0);
            memcpy(d + HDR, data, 4);
            n = v5_aegis_seal(d, 4, SA, ss->tx_ctr + 1, ss->k.c2s, ss->encrypt);
            ok = hexbytes(REQ_AEGIS, want, sizeof want) == (int)n && !memcmp(d, want, n);
            int wn = hexbytes(RESP_AEGIS, want, sizeof want);
            uint64_t m0 = c_malformed, s0 = c_stray, b0 = c_bad_auth, r0 = c_replayed;
            memcpy(d, want, (size_t)wn);    /* 69 bytes: the page's RESPONSE less its data and
                                             * T's first byte; its trailer names the session: short */
            memmove(d + HDR, d + HDR + 5, (size_t)wn - HDR - 5);
            on_datagram_v5(d, (size_t)wn - 5, 0, 6);
            ok = ok && c_malformed == m0 + 1 && c_bad_auth == b0;
            memcpy(d, want, (size_t)wn);
            d[wn - 1] ^= 1;
            on_datagram_v5(d, (size_t)wn, 0, 7);
            ok = ok && c_bad_auth == b0 + 1 && c_stray == s0;
            memcpy(d, want, (size_t)wn);
            on_datagram_v5(d, (size_t)wn, 0, 8);   /* opened, then no call of that req_id: stray */
            ok = ok && c_bad_auth == b0 + 1 && c_stray == s0 + 1 && ss->rx_hi == 1;
            memcpy(d, want, (size_t)wn);
            on_datagram_v5(d, (size_t)wn, 0, 9);   /* again: the window refuses it */
            ok = ok && c_replayed == r0 + 1 && c_stray == s0 + 1;
        }
        st_check("client: AEGIS offered and granted: AEGIS session, page's RESPONSE taken", ok);
        /* AEGIS offered, not granted: ChaCha20-Poly1305 */
        v5_build_init(init0, 0x010203040513ull, 7, psk, e_c, T, V5_FLAG_AEGIS, 0, NULL, NULL);
        v5_build_accept(acc0, init0, psk, es_priv, 0x1122334455667794ull, 0, &kx);
        ST_HS(0x010203040513ull, init0);
        on_accept(acc0, sizeof acc0, 10);
        st_check("client: AEGIS offered, not granted: ChaCha20-Poly1305",
                 v5_cur >= 0 && !hs.pending && v5s[v5_cur].id == 0x1122334455667794ull && !v5s[v5_cur].aegis &&
                 !v5s[v5_cur].aes);
#undef ST_HS
        memset(&hs, 0, sizeof hs);
    }
}

static int v5_selftest(void)
{
    static const char *E_C = "79 a6 31 ee de 1b f9 c9 8f 12 03 2c de ad d0 e7 a0 79 39 8f c7 86 b8 8c c8 46 ec 89 af 85 a5 1a";
    static const char *E_S = "67 5d d5 74 ed 77 89 31 0b 3d 2e 76 81 f3 79 0b 46 6c 77 3b 15 21 fe cf 36 57 79 58 37 1e a5 2f";
    static const char *INIT =
        "a5 53 00 00 66 98 01 02 03 04 05 06 00 00 00 01 00 00 00 68 00 00"
        "00 00 00 07"
        "79 a6 31 ee de 1b f9 c9 8f 12 03 2c de ad d0 e7 a0 79 39 8f c7 86 b8 8c c8 46 ec 89 af 85 a5 1a"
        "00 00 01 9a ca 55 9e 00"
        "00 00 00 00"
        "00 00 00 00 00 00 00 00"
        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
        "b0 fe 18 42 6a 51 a9 c3 25 a4 dc 69 5e 73 39 d9"
        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00";
    static const char *ACCEPT =
        "a5 54 00 00 40 7f 01 02 03 04 05 06 00 00 00 01 00 00 00 40 00 00"
        "00 00 00 07"
        "11 22 33 44 55 66 77 88"
        "67 5d d5 74 ed 77 89 31 0b 3d 2e 76 81 f3 79 0b 46 6c 77 3b 15 21 fe cf 36 57 79 58 37 1e a5 2f"
        "00 00 00 00"
        "e3 ee f9 e0 60 d0 27 ab 66 1a df 61 f9 25 a3 94";
    static const char *KC2S = "d3 45 bd 70 c6 ac 76 79 17 6d c5 eb d8 1a 0f c3 b4 f1 a4 a6 b1 a8 8a 46 32 f5 9b f6 15 c4 6b 18";
    static const char *KS2C = "af 3e 77 76 30 f5 c6 e1 42 8e 95 fe b5 63 18 65 f1 7f 67 32 94 55 63 41 01 4f 13 e1 01 2f f0 e0";
    static const char *REQ =
        "a5 50 00 01 72 59 00 00 00 00 00 01 00 00 00 01 00 00 00 04 00 00"
        "01 02 03 04"
        "11 22 33 44 55 66 77 88 00 00 00 00 00 00 00 01"
        "e5 e4 06 57 e7 eb 2a 8c 84 88 1d 93 68 61 eb c7";
    static const char *RESP =
        "a5 51 00 01 a7 af 00 00 00 00 00 01 00 00 00 01 00 00 00 04 00 00 02 03 04 05"
        "11 22 33 44 55 66 77 88 00 00 00 00 00 00 00 01 77 95 7f f9 6a 33 d1 65 41 a0 64 b9 03 72 30 48";
    static const char *REQ_ENC =
        "a5 50 00 01 72 59 00 00 00 00 00 01 00 00 00 01 00 00 00 04 00 00"
        "8d 64 3a 1b"
        "11 22 33 44 55 66 77 89 00 00 00 00 00 00 00 01"
        "d4 03 d1 4e 33 94 e3 48 01 5f 1e 57 15 b0 69 b4";
    static const char *INIT_RESUME =
        "a5 53 00 00 ed ab 01 02 03 04 05 09 00 00 00 01 00 00 00 68 00 00"
        "00 00 00 07"
        "79 a6 31 ee de 1b f9 c9 8f 12 03 2c de ad d0 e7 a0 79 39 8f c7 86 b8 8c c8 46 ec 89 af 85 a5 1a"
        "00 00 01 9a ca 55 9e 00"
        "00 00 00 00"
        "11 22 33 44 55 66 77 88"
        "d3 b2 46 a9 64 d2 36 4a 82 1a 02 73 1d e1 d3 8b"
        "ea 2d 18 5b 73 6d ab 0a c5 44 d0 91 51 35 c9 6f"
        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00";
    const uint64_t T = 1764331200000ull;
    uint8_t psk[32], ec_priv[32], es_priv[32], e_c[32], e_s[32];
    for (int i = 0; i < 32; i++) {
        psk[i] = (uint8_t)i;
        ec_priv[i] = (uint8_t)(0x40 + i);
        es_priv[i] = (uint8_t)(0x60 + i);
    }
    st_check("time 1764331200000 = 0x0000019ACA559E00", T == 0x0000019ACA559E00ull);
    st_check("crc16(\"123456789\") = 0x29B1", crc16((const uint8_t *)"123456789", 9) == 0x29B1 &&
                                              crc16_bitwise((const uint8_t *)"123456789", 9) == 0x29B1);
    {   /* the table and the bit-at-a-time loop agree on every length and many contents */
        uint8_t b[64];
        uint32_t x = 12345;
        int same = 1;
        for (int t = 0; t < 2000; t++) {
            for (size_t i = 0; i < sizeof b; i++)
                b[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
            const size_t n = (size_t)t % (sizeof b + 1);
            same &= crc16(b, n) == crc16_bitwise(b, n);
        }
        st_check("crc16's table = its bit-at-a-time loop", same);
    }
    {   /* version 2's header example */
        uint8_t h[HDR];
        v5_hdr(h, T_REQUEST, 1, 1, 0, 1, 1024, 0);
        h[1] = 0x20;
        put16(h + 4, hdr_crc(h));
        st_cmp("version 2 page's header example", h, HDR,
               "a5 20 00 01 fc 68 00 00 00 00 00 01 00 00 00 01 00 00 04 00 00 00");
    }
    na.scalarmult_base(e_c, ec_priv);
    na.scalarmult_base(e_s, es_priv);
    st_cmp("e_c", e_c, 32, E_C);
    st_cmp("e_s", e_s, 32, E_S);

    /* the authenticating session */
    uint8_t init[V5_INIT_LEN], acc[V5_ACCEPT_LEN];
    struct v5keys ks, kc;
    v5_build_init(init, 0x010203040506ull, 7, psk, e_c, T, 0, 0, NULL, NULL);
    st_cmp("INIT (126 bytes)", init, sizeof init, INIT);
    st_check("server: ACCEPT built", v5_build_accept(acc, init, psk, es_priv, 0x1122334455667788ull, 0, &ks) == 0);
    st_cmp("ACCEPT (86 bytes, confirm included)", acc, sizeof acc, ACCEPT);
    st_check("client: ACCEPT's confirm verified", v5_take_accept(acc, init, psk, ec_priv, &kc) == 0);
    st_cmp("k_c2s (client)", kc.c2s, 32, KC2S);
    st_cmp("k_s2c (client)", kc.s2c, 32, KS2C);
    st_check("server's keys = client's keys", !memcmp(&ks, &kc, sizeof ks));
    {
        uint8_t bad[V5_ACCEPT_LEN];
        memcpy(bad, acc, sizeof bad);
        bad[HDR + 48] ^= 1;
        struct v5keys kb;
        st_check("client: a wrong confirm is refused", v5_take_accept(bad, init, psk, ec_priv, &kb) != 0);
    }
    uint8_t d[256];
    const uint8_t data[4] = { 1, 2, 3, 4 }, rdata[4] = { 2, 3, 4, 5 };
    v5_hdr(d, T_REQUEST, 1, 1, 0, 1, 4, 0);
    memcpy(d + HDR, data, 4);
    size_t n = v5_seal(d, 4, 0x1122334455667788ull, 1, kc.c2s, NULL, 0);
    st_cmp("REQUEST (58 bytes)", d, n, REQ);
    st_check("server: REQUEST's tag verified", v5_open(d, n, ks.c2s, NULL, 0) == 0);
    v5_hdr(d, T_RESPONSE, 1, 1, 0, 1, 4, 0);
    memcpy(d + HDR, rdata, 4);
    n = v5_seal(d, 4, 0x1122334455667788ull, 1, ks.s2c, NULL, 0);
    st_cmp("RESPONSE (58 bytes)", d, n, RESP);
    st_check("client: RESPONSE's tag verified (k_s2c)", v5_open(d, n, kc.s2c, NULL, 0) == 0);
    st_check("client: RESPONSE under k_c2s refused", v5_open(d, n, kc.c2s, NULL, 0) != 0);
    d[HDR] ^= 0x80;
    st_check("client: a changed data byte is refused", v5_open(d, n, kc.s2c, NULL, 0) != 0);

    /* the resume INIT follows the first session */
    uint8_t init3[V5_INIT_LEN];
    v5_build_init(init3, 0x010203040509ull, 7, psk, e_c, T, 0, 0x1122334455667788ull, kc.c2s, NULL);
    st_cmp("INIT following the session (resume)", init3, sizeof init3, INIT_RESUME);

    /* the encrypting session */
    uint8_t init2[V5_INIT_LEN], acc2[V5_ACCEPT_LEN];
    struct v5keys ks2, kc2;
    v5_build_init(init2, 0x010203040507ull, 7, psk, e_c, T, V5_FLAG_ENCRYPT, 0, NULL, NULL);
    st_check("server: ACCEPT (ENCRYPT) built",
             v5_build_accept(acc2, init2, psk, es_priv, 0x1122334455667789ull, V5_FLAG_ENCRYPT, &ks2) == 0);
    st_check("client: ACCEPT (ENCRYPT)'s confirm verified", v5_take_accept(acc2, init2, psk, ec_priv, &kc2) == 0);
    st_check("ENCRYPT session's keys differ", memcmp(kc2.c2s, kc.c2s, 32) != 0);
    v5_hdr(d, T_REQUEST, 1, 1, 0, 1, 4, 0);
    memcpy(d + HDR, data, 4);
    n = v5_seal(d, 4, 0x1122334455667789ull, 1, kc2.c2s, NULL, 1);
    st_cmp("encrypting REQUEST (58 bytes)", d, n, REQ_ENC);
    st_check("server: encrypting REQUEST opened", v5_open(d, n, ks2.c2s, NULL, 1) == 0 && !memcmp(d + HDR, data, 4));

    /* COOKIE: a server's answer under load, opened by the client's code */
    {
        uint8_t ck[32], cookie[16], nonce[12], c[V5_COOKIE_LEN], got[16];
        unsigned long long ml;
        for (int i = 0; i < 16; i++) cookie[i] = (uint8_t)(0xc0 + i);
        for (int i = 0; i < 12; i++) nonce[i] = (uint8_t)(0xa0 + i);
        H2(ck, 32, psk, 32, "splitrpc v5 cookie", NULL, 0);
        v5_hdr(c, T_COOKIE, 0, 0x010203040506ull, 0, 1, V5_COOKIE_BODY, 0);
        memcpy(c + HDR, nonce, 12);
        na.aead_enc(c + HDR + 12, c + HDR + 28, &ml, cookie, 16, init + HDR + 72, 16, NULL, nonce, ck);
        int ok = na.aead_dec(got, NULL, c + HDR + 12, 16, c + HDR + 28, init + HDR + 72, 16, c + HDR, ck) == 0 &&
                 !memcmp(got, cookie, 16);
        st_check("COOKIE sealed and opened (no page vector)", ok);
        uint8_t init4[V5_INIT_LEN], want[16];
        v5_build_init(init4, 0x010203040506ull, 7, psk, e_c, T, 0, 0, NULL, cookie);
        H(want, 16, cookie, 16, init4, 110);
        st_check("INIT's cookie_mac = H(cookie, bytes 0..109)", !memcmp(init4 + HDR + 88, want, 16) &&
                 !memcmp(init4, init, 110));
    }
    v5_selftest_aes(psk, ec_priv, es_priv, e_c, T);
    v5_selftest_aegis(psk, ec_priv, es_priv, e_c, T);
    printf("selftest-v5: %s\n", st_fail ? "FAILED" : "every byte matches the page");
    return st_fail ? 1 : 0;
}

/* ---------------------------------------------------------------- sending */
static void send_call(struct slot *s)
{
    uint32_t i, off = 0;
    /* A call's time starts before its datagrams are made: a version 5 call's sealing (and, at its
     * reply, the opening) is part of what its caller waits for. */
    uint64_t t = now_ns();
    if (cfg.v5)
        v5_build_call(s);
    else if (cfg.v2) /* version 2: req_id in bytes 6..11, then the check at 4..5 */
        for (i = 0; i < req_nseg; i++)
            hdr_v2(tx_hdrs + (size_t)i * HDR, 2, T_REQUEST, cfg.func, s->req_id, i, req_nseg, (uint32_t)cfg.size, 0);
    else
        for (i = 0; i < req_nseg; i++)
            put64(tx_hdrs + (size_t)i * HDR + 4, s->req_id);
    if (!s->t_first)
        s->t_first = t;
    s->t_last = t;
    int retried_refused = 0;
    while (off < req_nseg) {
        int r = sendmmsg(sock, tx_msgs + off, req_nseg - off, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == ECONNREFUSED && !retried_refused) {
                /* a pending ICMP port-unreachable from an earlier datagram */
                c_refused++;
                retried_refused = 1;
                continue;
            }
            if (errno == ECONNREFUSED || errno == ENOBUFS || errno == EAGAIN) {
                /* not sent now; the retransmission timer sends it again */
                if (errno == ECONNREFUSED)
                    c_refused++;
                break;
            }
            die("sendmmsg: %s", strerror(errno));
        }
        off += (uint32_t)r;
        if (off < req_nseg)
            c_send_splits++;        /* the kernel took only part: the rest follows */
    }
    if (s->t_last + cfg.timeout_ms * 1000000ull < next_check)
        next_check = s->t_last + cfg.timeout_ms * 1000000ull;
}

static void issue_call(int idx)
{
    struct slot *s = &slots[idx];
    uint64_t k = issued++;
    s->active = 1;
    s->measured = (k >= cfg.warmup);
    if (cfg.v5 || cfg.v2) {      /* version 2's 48-bit req_id (0 left out) */
        next_req_id &= REQ_ID48_MASK;
        if (!next_req_id)
            next_req_id = 1;
    }
    s->req_id = next_req_id++;
    s->t_first = 0;
    s->resends = 0;
    s->gen_lo = s->gen_hi = 0;
    s->rs_started = 0;
    ht_insert(s->req_id, idx);
    active_count++;
    if (k == cfg.warmup) {
        getrusage(RUSAGE_SELF, &ru_start);
        t_meas_start = now_ns();
    }
    send_call(s);
}

/* a call has ended (ok, error or lost): free its slot, start the next call */
static void complete_call(int idx, uint64_t now)
{
    struct slot *s = &slots[idx];
    ht_delete(s->req_id);
    s->active = 0;
    s->rs_started = 0;
    active_count--;
    if (s->measured && ++done_measured == cfg.calls) {
        t_end = now;
        getrusage(RUSAGE_SELF, &ru_end);
        finished = 1;
        return;
    }
    if (issued < total_to_issue)
        issue_call(idx);
}

/* ---------------------------------------------------------------- replies */
static int reply_ok(const uint8_t *d, uint32_t len)
{
    if (!cfg.check)
        return 1;
    if (len != cfg.size)
        return 0;
    if (cfg.func == 3)              /* echo: the same bytes */
        return memcmp(d, req_data, len) == 0;
    /* vecadd: float32 request + 1, exactly; trailing bytes (size % 4) are not floats */
    for (uint64_t i = 0; i + 4 <= len; i += 4) {
        float want = get_f32le(req_data + i) + 1.0f;
        float got = get_f32le(d + i);
        if (memcmp(&want, &got, 4) != 0)
            return 0;
    }
    return 1;
}

static void finish_response(int idx, const uint8_t *d, uint32_t len, uint64_t now)
{
    struct slot *s = &slots[idx];
    if (s->measured) {
        if (reply_ok(d, len)) {
            c_ok++;
            lat_ns[n_lat++] = seg_taken_ns - s->t_first;
        } else {
            c_mismatch++;
            c_errors++;
        }
    }
    complete_call(idx, now);
}

static void finish_error(int idx, unsigned code, const uint8_t *d, uint32_t len, uint64_t now)
{
    struct slot *s = &slots[idx];
    if (s->measured) {
        c_errors++;
        err_by_code[code]++;
    }
    /* keep the first message seen for each code, for the report */
    unsigned i;
    for (i = 0; i < n_err_msgs; i++)
        if (err_msgs[i].code == code)
            break;
    if (i == n_err_msgs && n_err_msgs < MAX_ERR_MSGS) {
        err_msgs[i].code = code;
        err_msgs[i].len = len > MAX_ERR_DATA ? MAX_ERR_DATA : len;
        memcpy(err_msgs[i].msg, d, err_msgs[i].len);
        err_msgs[i].msg[err_msgs[i].len] = 0;
        n_err_msgs++;
    }
    complete_call(idx, now);
}

static int ensure_buffers(struct slot *s, uint32_t msg_len, uint32_t nseg)
{
    if (s->cap < msg_len) {
        uint8_t *b = realloc(s->buf, msg_len);
        if (!b)
            return 0;
        s->buf = b;
        s->cap = msg_len;
    }
    size_t nb = ((size_t)nseg + 7) / 8;
    if (s->bits_cap < nb) {
        uint8_t *b = realloc(s->bits, nb);
        if (!b)
            return 0;
        s->bits = b;
        s->bits_cap = nb;
    }
    memset(s->bits, 0, nb);
    return 1;
}

/* check one received datagram against the page; use it if it belongs to a call */
static void on_datagram(uint8_t *p, size_t len, int truncated, uint64_t now)
{
    if (cfg.v5) {
        on_datagram_v5(p, len, truncated, now);
        return;
    }
    if (truncated || len < HDR || p[0] != MAGIC || (p[1] >> 4) != (cfg.v2 ? 2 : VERSION) ||
        (cfg.v2 && hdr_crc(p) != get16(p + 4))) {
        c_malformed++;
        return;
    }
    unsigned type = p[1] & 0x0F;
    if (type != T_RESPONSE && type != T_ERROR) {  /* REQUEST at a client, or unknown */
        c_malformed++;
        return;
    }
    seg_taken_ns = now_ns();
    on_segment(type, get16(p + 2), cfg.v2 ? get48(p + 6) : get64(p + 4), get16(p + 12), get16(p + 14),
               get32(p + 16), get16(p + 20), p + HDR, len - HDR, 0, now);
}

/* one segment of a reply (version 1, or version 5 once its tag is checked and its data opened):
 * the segmentation rules, then the call it belongs to.  gen: the version 5 session's, else 0 */
static void on_segment(unsigned type, unsigned func, uint64_t id, uint32_t seq, uint32_t nseg,
                       uint32_t msg_len, unsigned aux, const uint8_t *data, uint64_t dlen,
                       unsigned gen, uint64_t now)
{
    uint64_t S = 0;

    if (nseg == 0 || seq >= nseg) {
        c_malformed++;
        return;
    }
    if (nseg == 1) {
        if (dlen != msg_len) {
            c_malformed++;
            return;
        }
    } else {
        if (dlen == 0) {            /* no segment of a multi-segment message is empty */
            c_malformed++;
            return;
        }
        if (seq < nseg - 1) {
            S = dlen;
        } else {
            if (dlen > msg_len || (msg_len - dlen) % (nseg - 1) != 0) {
                c_malformed++;
                return;
            }
            S = (msg_len - dlen) / (nseg - 1);
        }
        /* (nseg-1)*S < msg_len <= nseg*S; for the last segment: 1 <= its length <= S */
        if (S == 0 || (uint64_t)(nseg - 1) * S >= msg_len || (uint64_t)nseg * S < msg_len) {
            c_malformed++;
            return;
        }
    }
    if (type == T_ERROR) {
        if (nseg != 1 || msg_len > MAX_ERR_DATA) {
            c_malformed++;
            return;
        }
    } else {
        if (aux != 0 || msg_len > MAX_REPLY) {      /* RESPONSE: aux 0 */
            c_malformed++;
            return;
        }
    }

    /* match by (func_id, req_id) */
    int idx = ht_find(id);
    if (idx < 0 || func != cfg.func) {
        c_stray++;                  /* a late duplicate, or not ours */
        return;
    }
    struct slot *s = &slots[idx];
    if (gen && (gen < s->gen_lo || gen > s->gen_hi)) {
        c_stray++;                  /* version 5: not outstanding in that session */
        return;
    }
    any_rx = 1;
    last_rx = now;

    if (type == T_ERROR) {
        finish_error(idx, aux, data, msg_len, now);
        return;
    }
    if (nseg == 1) {
        if (s->rs_started) {        /* disagrees with the message being reassembled */
            s->rs_started = 0;
            c_dropped_msgs++;
            return;
        }
        finish_response(idx, data, msg_len, now);
        return;
    }
    if (!s->rs_started) {
        if (!ensure_buffers(s, msg_len, nseg)) {
            c_dropped_msgs++;
            return;
        }
        s->rs_started = 1;
        s->rs_nseg = nseg;
        s->rs_msglen = msg_len;
        s->rs_S = (uint32_t)S;
        s->rs_have = 0;
    } else if (s->rs_nseg != nseg || s->rs_msglen != msg_len || s->rs_S != S) {
        s->rs_started = 0;          /* "drops the whole message if a later segment disagrees" */
        c_dropped_msgs++;
        return;
    }
    uint8_t bit = (uint8_t)(1u << (seq & 7));
    if (s->bits[seq >> 3] & bit) {
        c_dup++;
        return;
    }
    s->bits[seq >> 3] |= bit;
    /* seq*S + dlen <= msg_len <= cap, by the checks above */
    memcpy(s->buf + (size_t)seq * S, data, dlen);
    if (++s->rs_have == s->rs_nseg) {
        c_multiseg++;
        finish_response(idx, s->buf, s->rs_msglen, now);
    }
}

/* resend calls unanswered for timeout_ms; after MAX_RESENDS resends, lost and replaced */
static void check_timeouts(uint64_t now)
{
    uint64_t to = cfg.timeout_ms * 1000000ull;
    next_check = UINT64_MAX;
    if (cfg.v5 && hs.pending) {
        /* a new session is being made: the outstanding calls are sent again under it once it
         * is accepted, not resent meanwhile (hs_tick resends the INIT) */
        next_check = hs.next;
        return;
    }
    for (unsigned i = 0; i < cfg.outstanding && !finished; i++) {
        struct slot *s = &slots[i];
        if (!s->active)
            continue;
        /* t_last may be later than now: a call sent after now was read */
        if (now > s->t_last && now - s->t_last >= to) {
            if (s->resends < MAX_RESENDS) {
                s->resends++;
                if (s->measured)
                    c_resends++;
                send_call(s);       /* same req_id, all segments, one sendmmsg */
            } else {
                if (s->measured)
                    c_lost++;
                complete_call((int)i, now);   /* issues the replacement */
                continue;
            }
        }
        if (s->active && s->t_last + to < next_check)
            next_check = s->t_last + to;
    }
}

/* ---------------------------------------------------------------- report */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static double pct_us(double p)
{
    if (n_lat == 0)
        return 0.0;
    double r = p / 100.0 * (double)n_lat;
    uint64_t k = (uint64_t)r;
    if ((double)k < r)
        k++;                        /* nearest rank: ceil(p*n) */
    if (k < 1)
        k = 1;
    if (k > n_lat)
        k = n_lat;
    return (double)lat_ns[k - 1] / 1000.0;
}

static double tv_s(struct timeval a, struct timeval b)
{
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_usec - a.tv_usec) / 1e6;
}

static void json_str(const char *s, unsigned len)
{
    putchar('"');
    for (unsigned i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c >= 0x7F)
            printf("\\u%04x", c < 0x20 ? c : '?');
        else
            putchar(c);
    }
    putchar('"');
}

static void report(void)
{
    qsort(lat_ns, n_lat, sizeof lat_ns[0], cmp_u64);
    double elapsed = (double)(t_end - t_meas_start) / 1e9;
    double cps = elapsed > 0 ? (double)c_ok / elapsed : 0.0;
    double p50 = pct_us(50), p90 = pct_us(90), p99 = pct_us(99), p999 = pct_us(99.9);
    double mx = n_lat ? (double)lat_ns[n_lat - 1] / 1000.0 : 0.0;
    double cu = tv_s(ru_start.ru_utime, ru_end.ru_utime);
    double cs = tv_s(ru_start.ru_stime, ru_end.ru_stime);
    long cv = ru_end.ru_nvcsw - ru_start.ru_nvcsw;
    long ci = ru_end.ru_nivcsw - ru_start.ru_nivcsw;

    if (cfg.json) {
        printf("{\"mode\":\"%s\",\"outstanding\":%u,\"func\":%u,\"size\":%" PRIu64
               ",\"calls\":%" PRIu64 ",\"ok\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"error_codes\":{",
               cfg.spin ? "spin" : "block", cfg.outstanding, cfg.func, cfg.size,
               done_measured, c_ok, c_errors);
        int first = 1;
        for (unsigned c = 0; c < 65536; c++)
            if (err_by_code[c]) {
                printf("%s\"%u\":%" PRIu64, first ? "" : ",", c, err_by_code[c]);
                first = 0;
            }
        if (c_mismatch)
            printf("%s\"mismatch\":%" PRIu64, first ? "" : ",", c_mismatch);
        printf("},\"error_messages\":{");
        for (unsigned i = 0; i < n_err_msgs; i++) {
            printf("%s\"%u\":", i ? "," : "", err_msgs[i].code);
            json_str(err_msgs[i].msg, err_msgs[i].len);
        }
        printf("},\"resends\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"malformed\":%" PRIu64
               ",\"stray\":%" PRIu64 ",\"dup_segments\":%" PRIu64 ",\"dropped_msgs\":%" PRIu64
               ",\"icmp_refused\":%" PRIu64 ",\"send_splits\":%" PRIu64 ",\"multiseg_replies\":%" PRIu64
               ",\"elapsed_s\":%.6f,\"calls_per_s\":%.1f"
               ",\"p50_us\":%.3f,\"p90_us\":%.3f,\"p99_us\":%.3f,\"p999_us\":%.3f,\"max_us\":%.3f"
               ",\"cpu_user_s\":%.6f,\"cpu_sys_s\":%.6f,\"ctx_vol\":%ld,\"ctx_invol\":%ld"
               ",\"seg\":%u,\"req_segments\":%u,\"warmup\":%" PRIu64 ",\"timeout_ms\":%" PRIu64
               ",\"check\":%s,\"protocol\":%d,\"encrypt\":%s,\"key_id\":%u,\"bad_auth\":%" PRIu64
               ",\"replayed\":%" PRIu64 ",\"unknown_session\":%" PRIu64 ",\"no_session\":%" PRIu64
               ",\"rehandshakes\":%" PRIu64 ",\"handshakes\":%" PRIu64 ",\"cookies\":%" PRIu64
               ",\"handshake_us\":%.3f,\"aead\":%s,\"aes_offered\":%s,\"aes_unoffered\":%" PRIu64
               ",\"aegis_offered\":%s,\"aegis_unoffered\":%" PRIu64 ",\"suites_both\":%" PRIu64
               ",\"libsodium\":\"%s\"}\n",
               c_resends, c_lost, c_malformed, c_stray, c_dup, c_dropped_msgs, c_refused,
               c_send_splits, c_multiseg, elapsed, cps, p50, p90, p99, p999, mx, cu, cs, cv, ci,
               cfg.seg, req_nseg, cfg.warmup, cfg.timeout_ms, cfg.check ? "true" : "false",
               cfg.v5 ? 5 : cfg.v2 ? 2 : 1, (cfg.v5 && v5_cur >= 0 && v5s[v5_cur].encrypt) ? "true" : "false",
               cfg.v5 ? v5_key_id : 0, c_bad_auth, c_replayed, c_unknown_sess, c_no_session,
               c_rehandshakes, c_handshakes, c_cookies, (double)hs_first_ns / 1000.0,
               !cfg.v5 ? "null" : (v5_cur >= 0 && v5s[v5_cur].aes) ? "\"aes-256-gcm\""
                 : (v5_cur >= 0 && v5s[v5_cur].aegis) ? "\"aegis-128l\"" : "\"chacha20-poly1305\"",
               cfg.aes ? "true" : "false", c_aes_unoffered, cfg.aegis ? "true" : "false", c_aegis_unoffered,
               c_suites_both, na_name ? na_name : "");
    } else {
        printf("indep_client: mode=%s outstanding=%u func=%u size=%" PRIu64 " (%u segment%s of <=%u)%s\n",
               cfg.spin ? "spin" : "block", cfg.outstanding, cfg.func, cfg.size, req_nseg,
               req_nseg == 1 ? "" : "s", cfg.seg, cfg.check ? " check" : "");
        printf("calls       %" PRIu64 " (ok %" PRIu64 ", errors %" PRIu64 ", lost %" PRIu64 "), resends %" PRIu64 "\n",
               done_measured, c_ok, c_errors, c_lost, c_resends);
        if (c_errors) {
            printf("errors by code:");
            for (unsigned c = 0; c < 65536; c++)
                if (err_by_code[c])
                    printf(" %u:%" PRIu64, c, err_by_code[c]);
            if (c_mismatch)
                printf(" mismatch:%" PRIu64, c_mismatch);
            printf("\n");
            for (unsigned i = 0; i < n_err_msgs; i++) {
                printf("  code %u message: \"", err_msgs[i].code);
                for (unsigned j = 0; j < err_msgs[i].len; j++) {
                    unsigned char c = (unsigned char)err_msgs[i].msg[j];
                    putchar(c >= 0x20 && c < 0x7F ? c : '?');
                }
                printf("\"\n");
            }
        }
        printf("elapsed     %.3f s, %.1f calls/s (ok replies)\n", elapsed, cps);
        printf("latency us  p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n", p50, p90, p99, p999, mx);
        printf("client cpu  user %.3f s  sys %.3f s  ctx switches: voluntary %ld, involuntary %ld\n", cu, cs, cv, ci);
        printf("received    malformed %" PRIu64 ", stray %" PRIu64 ", duplicate segments %" PRIu64
               ", dropped messages %" PRIu64 ", icmp refused %" PRIu64 "; multi-segment replies %" PRIu64 "\n",
               c_malformed, c_stray, c_dup, c_dropped_msgs, c_refused, c_multiseg);
        if (cfg.v5) {
            int is_aes = v5_cur >= 0 && v5s[v5_cur].aes, is_aegis = v5_cur >= 0 && v5s[v5_cur].aegis;
            printf("version 5   key %u, %s, %s%s%s; bad_auth %" PRIu64 ", replayed %" PRIu64 ", unknown session %" PRIu64
                   ", no_session %" PRIu64 ", rehandshakes %" PRIu64 " (handshakes %" PRIu64 ", cookies %" PRIu64
                   "; first handshake %.1f us)\n",
                   v5_key_id, (v5_cur >= 0 && v5s[v5_cur].encrypt) ? "encrypting" : "authenticating",
                   is_aes ? "AES-256-GCM" : is_aegis ? "AEGIS-128L" : "ChaCha20-Poly1305",
                   cfg.aes && !is_aes ? " (AES offered, not granted)" : "",
                   cfg.aegis && !is_aegis ? " (AEGIS-128L offered, not granted)" : "",
                   c_bad_auth, c_replayed, c_unknown_sess, c_no_session, c_rehandshakes, c_handshakes,
                   c_cookies, (double)hs_first_ns / 1000.0);
            if (c_aes_unoffered || c_aegis_unoffered || c_suites_both)
                printf("            ACCEPTs dropped: AES not offered %" PRIu64 ", AEGIS not offered %" PRIu64
                       ", both set %" PRIu64 "\n", c_aes_unoffered, c_aegis_unoffered, c_suites_both);
        }
    }
}

/* ---------------------------------------------------------------- main */
static void usage(FILE *f)
{
    fprintf(f,
        "usage: indep_client --port PORT [options]\n"
        "  --host ADDR          server address, IPv4 or IPv6 literal (default 127.0.0.1)\n"
        "  --port PORT          server UDP port (required)\n"
        "  --func ID            func_id (default 1)\n"
        "  --size BYTES         request data bytes (default 1024)\n"
        "  --fill vecadd|zero   float32 i*0.5, or zero bytes (default vecadd for func 1, else zero)\n"
        "  --check              verify replies: func 1 = request+1, func 3 = same bytes\n"
        "  --outstanding N      calls in flight (default 1, max %d)\n"
        "  --calls N            measured calls (default 20000)\n"
        "  --warmup N           calls before measuring (default 2000)\n"
        "  --mode spin|block    recvmmsg MSG_DONTWAIT loop, or MSG_WAITFORONE (default block)\n"
        "  --seg S              request segment size (default 1450, max %d; with --v5 1418, max %d;\n"
        "                       with --aegis 1402, max %d)\n"
        "  --timeout-ms MS      resend after MS; lost after %d resends (default 200)\n"
        "  --json               one JSON object on stdout\n"
        "  --v2                 version 2 (unkeyed, docs/PROTOCOL-v2.md: the header's CRC-16), not 1\n"
        "  --v5 KEYFILE[:ID]    version 5 (sessions) with key ID of KEYFILE, a key table or a\n"
        "                       client key file of `splitrpc keys new` (JSON; its only key if no ID)\n"
        "  --v5-key ID:HEX64    version 5 with key ID, its 32-byte secret in hexadecimal\n"
        "  --encrypt            version 5: ask for ENCRYPT; exit 1 if the server does not grant it\n"
        "  --aes                version 5: offer AES-256-GCM; used when the server's ACCEPT grants it,\n"
        "                       else ChaCha20-Poly1305 (needs AES-NI and PCLMULQDQ; exit 1 without)\n"
        "  --aegis              version 5: offer AEGIS-128L (with --aes: both, the server picks); used\n"
        "                       when the server's ACCEPT grants it (needs libsodium 1.0.19 or later,\n"
        "                       e.g. PyNaCl 1.6's with --libsodium; exit 1 without)\n"
        "  --libsodium PATH     version 5: load libsodium from PATH (exit 1 if it does not load), not\n"
        "                       the system's libsodium.so.23, .so.26 or .so\n"
        "  --selftest-v5        rebuild docs/PROTOCOL-v5.md's worked example; exit 0 if every byte matches\n",
        MAX_OUTSTANDING, MAX_SEG, MAX_SEG_V5, MAX_SEG_V5_AEGIS, MAX_RESENDS);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"host", required_argument, 0, 'h'},
        {"port", required_argument, 0, 'p'},
        {"func", required_argument, 0, 'f'},
        {"size", required_argument, 0, 's'},
        {"fill", required_argument, 0, 'F'},
        {"check", no_argument, 0, 'c'},
        {"outstanding", required_argument, 0, 'o'},
        {"calls", required_argument, 0, 'n'},
        {"warmup", required_argument, 0, 'w'},
        {"mode", required_argument, 0, 'm'},
        {"seg", required_argument, 0, 'S'},
        {"timeout-ms", required_argument, 0, 't'},
        {"json", no_argument, 0, 'j'},
        {"v2", no_argument, 0, '2'},
        {"v5", required_argument, 0, '5'},
        {"v5-key", required_argument, 0, 'K'},
        {"encrypt", no_argument, 0, 'E'},
        {"aes", no_argument, 0, 'A'},
        {"aegis", no_argument, 0, 'G'},
        {"libsodium", required_argument, 0, 'L'},
        {"selftest-v5", no_argument, 0, 'T'},
        {"help", no_argument, 0, 'H'},
        {0, 0, 0, 0},
    };
    int have_port = 0, fill_set = -1, opt, seg_set = 0, selftest = 0;
    const char *keyfile = NULL, *keyhex = NULL;
    cfg.host = "127.0.0.1";
    cfg.func = 1;
    cfg.size = 1024;
    cfg.outstanding = 1;
    cfg.calls = 20000;
    cfg.warmup = 2000;
    cfg.spin = 0;
    cfg.seg = 1450;
    cfg.timeout_ms = 200;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (opt) {
        case 'h': cfg.host = optarg; break;
        case 'p': cfg.port = (unsigned)parse_u64(optarg, 1, 65535, "port"); have_port = 1; break;
        case 'f': cfg.func = (unsigned)parse_u64(optarg, 0, 65535, "func"); break;
        case 's': cfg.size = parse_u64(optarg, 0, UINT32_MAX, "size"); break;
        case 'F':
            if (!strcmp(optarg, "vecadd")) fill_set = 1;
            else if (!strcmp(optarg, "zero")) fill_set = 0;
            else usage_error("--fill: vecadd or zero, not '%s'", optarg);
            break;
        case 'c': cfg.check = 1; break;
        case 'o': cfg.outstanding = (unsigned)parse_u64(optarg, 1, MAX_OUTSTANDING, "outstanding"); break;
        case 'n': cfg.calls = parse_u64(optarg, 1, 1000000000ull, "calls"); break;
        case 'w': cfg.warmup = parse_u64(optarg, 0, 1000000000ull, "warmup"); break;
        case 'm':
            if (!strcmp(optarg, "spin")) cfg.spin = 1;
            else if (!strcmp(optarg, "block")) cfg.spin = 0;
            else usage_error("--mode: spin or block, not '%s'", optarg);
            break;
        case 'S': cfg.seg = (unsigned)parse_u64(optarg, 1, MAX_SEG, "seg"); seg_set = 1; break;
        case 't': cfg.timeout_ms = parse_u64(optarg, 1, 3600000, "timeout-ms"); break;
        case 'j': cfg.json = 1; break;
        case '2': cfg.v2 = 1; break;
        case '5': keyfile = optarg; cfg.v5 = 1; break;
        case 'K': keyhex = optarg; cfg.v5 = 1; break;
        case 'E': cfg.encrypt = 1; break;
        case 'A': cfg.aes = 1; break;
        case 'G': cfg.aegis = 1; break;
        case 'L': cfg.libsodium = optarg; break;
        case 'T': selftest = 1; break;
        case 'H': usage(stdout); return 0;
        case ':': usage_error("%s needs a value", argv[optind - 1]); break;
        default:  usage_error("unknown option '%s'", argv[optind - 1]); break;
        }
    }
    if (optind < argc)
        usage_error("unexpected argument '%s'", argv[optind]);
    if (selftest) {
        char why[256];
        if (sodium_load(why, sizeof why) < 0)
            die("--selftest-v5: %s", why);
        return v5_selftest();
    }
    if (!have_port)
        usage_error("--port is required");
    if (keyfile && keyhex)
        usage_error("--v5 and --v5-key: give one");
    if (cfg.v2 && cfg.v5)
        usage_error("--v2 and --v5: give one");
    if (cfg.encrypt && !cfg.v5)
        usage_error("--encrypt needs --v5 or --v5-key");
    if (cfg.aes && !cfg.v5)
        usage_error("--aes needs --v5 or --v5-key");
    if (cfg.aegis && !cfg.v5)
        usage_error("--aegis needs --v5 or --v5-key");
    if (cfg.v5) {
        if (!seg_set)               /* 22 + S + 32 = 1472: a 1500-byte MTU's UDP payload; with AEGIS-128L
                                     * offered 22 + S + 48, whichever suite the server picks */
            cfg.seg = cfg.aegis ? 1402 : 1418;
        if (cfg.seg > MAX_SEG_V5)
            usage_error("--seg: %u is over version 5's %d (65507 - 54)", cfg.seg, MAX_SEG_V5);
        if (cfg.aegis && cfg.seg > MAX_SEG_V5_AEGIS)
            usage_error("--seg: %u is over an AEGIS-128L session's %d (65507 - 70)", cfg.seg, MAX_SEG_V5_AEGIS);
        if (keyhex)
            parse_v5_key(keyhex);
        char why[256];
        if (sodium_load(why, sizeof why) < 0)
            die("--v5: %s", why);
        if (cfg.aes) {
            if (!na.aes_ok)
                die("--aes: AES-256-GCM is not available here: %s; run without --aes "
                    "(ChaCha20-Poly1305)", aes_why);
            aes_pool_init(2 * V5_SESSIONS);
        }
        if (cfg.aegis && !na.aegis_ok)
            die("--aegis: AEGIS-128L is not available here: %s; run without --aegis, or give "
                "--libsodium a libsodium that has it", aegis_why);
        if (keyfile)
            load_key_file(keyfile);
    }
    cfg.fill_vecadd = fill_set >= 0 ? fill_set : (cfg.func == 1);
    if (cfg.check && cfg.func != 1 && cfg.func != 3)
        usage_error("--check knows func 1 (vecadd: reply = request + 1) and func 3 (echo) only");
    uint64_t nseg = cfg.size <= cfg.seg ? 1 : (cfg.size + cfg.seg - 1) / cfg.seg;
    if (nseg > MAX_SEND_SEGS)
        usage_error("--size %" PRIu64 " in segments of %u is %" PRIu64
                    " datagrams; one sendmmsg carries at most %d: use a larger --seg",
                    cfg.size, cfg.seg, nseg, MAX_SEND_SEGS);
    req_nseg = (uint32_t)nseg;
    total_to_issue = cfg.warmup + cfg.calls;

    /* ---- request message and its segments */
    req_data = xmalloc((size_t)cfg.size);
    memset(req_data, 0, (size_t)cfg.size);
    if (cfg.fill_vecadd)
        for (uint64_t i = 0; i + 4 <= cfg.size; i += 4)
            put_f32le(req_data + i, (float)(i / 4) * 0.5f);
    tx_hdrs = xmalloc((size_t)req_nseg * HDR);
    tx_iov = xmalloc((size_t)req_nseg * 2 * sizeof *tx_iov);
    tx_msgs = xmalloc((size_t)req_nseg * sizeof *tx_msgs);
    memset(tx_msgs, 0, (size_t)req_nseg * sizeof *tx_msgs);
    if (cfg.v5) {                   /* whole datagrams, sealed at each send (v5_build_call) */
        tx_v5stride = (size_t)HDR + cfg.seg + V5_TRAILER + (cfg.aegis ? V5_AEGIS_MID : 0);
        tx_v5buf = xmalloc((size_t)req_nseg * tx_v5stride);
    }
    for (uint32_t i = 0; i < req_nseg; i++) {
        uint8_t *h = tx_hdrs + (size_t)i * HDR;
        uint64_t off = (uint64_t)i * cfg.seg;
        uint64_t len = (req_nseg == 1) ? cfg.size : (i + 1 < req_nseg ? cfg.seg : cfg.size - off);
        h[0] = MAGIC;
        h[1] = (uint8_t)(((cfg.v2 ? 2 : VERSION) << 4) | T_REQUEST);
        put16(h + 2, (uint16_t)cfg.func);
        put64(h + 4, 0);
        put16(h + 12, (uint16_t)i);
        put16(h + 14, (uint16_t)req_nseg);
        put32(h + 16, (uint32_t)cfg.size);
        put16(h + 20, 0);                           /* aux: no scheduling hint */
        tx_iov[2 * i].iov_base = h;
        tx_iov[2 * i].iov_len = HDR;
        tx_iov[2 * i + 1].iov_base = req_data + off;
        tx_iov[2 * i + 1].iov_len = (size_t)len;
        tx_msgs[i].msg_hdr.msg_iov = &tx_iov[2 * i];
        tx_msgs[i].msg_hdr.msg_iovlen = len ? 2 : 1;
    }

    /* ---- receive batch */
    uint8_t *rx_bufs = xmalloc((size_t)RX_BATCH * RX_BUFSZ);
    struct iovec rx_iov[RX_BATCH];
    struct mmsghdr rx_msgs[RX_BATCH];
    memset(rx_msgs, 0, sizeof rx_msgs);
    for (int i = 0; i < RX_BATCH; i++) {
        rx_iov[i].iov_base = rx_bufs + (size_t)i * RX_BUFSZ;
        rx_iov[i].iov_len = RX_BUFSZ;
        rx_msgs[i].msg_hdr.msg_iov = &rx_iov[i];
        rx_msgs[i].msg_hdr.msg_iovlen = 1;
    }

    lat_ns = xmalloc((size_t)cfg.calls * sizeof *lat_ns);
    for (unsigned i = 0; i < HT_SIZE; i++)
        ht_val[i] = -1;

    /* ---- socket: resolve, connect */
    char hostbuf[256];
    const char *host = cfg.host;
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']' && hl - 2 < sizeof hostbuf) {
        memcpy(hostbuf, host + 1, hl - 2);
        hostbuf[hl - 2] = 0;
        host = hostbuf;
    }
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%u", cfg.port);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    hints.ai_protocol = IPPROTO_UDP;
    hints.ai_flags = AI_NUMERICSERV;
    int gai = getaddrinfo(host, portstr, &hints, &ai);
    if (gai != 0 || !ai)
        die("cannot resolve '%s': %s", cfg.host, gai_strerror(gai));
    sock = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP);
    if (sock < 0)
        die("socket: %s", strerror(errno));
    int bufsz = 8 << 20;
    if (setsockopt(sock, SOL_SOCKET, SO_RCVBUFFORCE, &bufsz, sizeof bufsz) < 0)
        setsockopt(sock, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof bufsz);
    if (setsockopt(sock, SOL_SOCKET, SO_SNDBUFFORCE, &bufsz, sizeof bufsz) < 0)
        setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof bufsz);
    if (connect(sock, ai->ai_addr, ai->ai_addrlen) < 0)
        die("connect to %s port %u: %s", cfg.host, cfg.port, strerror(errno));
    freeaddrinfo(ai);
    if (!cfg.spin) {
        /* MSG_WAITFORONE blocks for the first datagram; wake up anyway to run timers */
        uint64_t ms = cfg.timeout_ms / 10;
        if (ms < 1) ms = 1;
        if (ms > 20) ms = 20;
        struct timeval tv = { .tv_sec = 0, .tv_usec = (suseconds_t)(ms * 1000) };
        if (setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
            die("setsockopt SO_RCVTIMEO: %s", strerror(errno));
    }

    /* ---- req_ids: a 64-bit counter from a random start */
    if (getrandom(&next_req_id, sizeof next_req_id, 0) != (ssize_t)sizeof next_req_id)
        next_req_id = now_ns() ^ ((uint64_t)getpid() << 32);

    int rflags = cfg.spin ? MSG_DONTWAIT : MSG_WAITFORONE;

    /* ---- version 5: the session, before the run */
    if (cfg.v5) {
        uint64_t t0 = now_ns();
        hs_start(-1, t0);
        while (v5_cur < 0) {
            int n = recvmmsg(sock, rx_msgs, RX_BATCH, rflags, NULL);
            uint64_t now = now_ns();
            if (n < 0) {
                if (errno == ECONNREFUSED)
                    c_refused++;
                else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                    die("recvmmsg: %s", strerror(errno));
            }
            for (int i = 0; i < n && v5_cur < 0; i++)
                on_datagram(rx_bufs + (size_t)i * RX_BUFSZ, rx_msgs[i].msg_len,
                            (rx_msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0, now);
            if (v5_cur < 0)
                hs_tick(now);
        }
        hs_first_ns = now_ns() - t0;
        any_rx = 0;
    }

    /* ---- run */
    next_check = UINT64_MAX;
    t_start = now_ns();
    for (unsigned i = 0; i < cfg.outstanding && issued < total_to_issue; i++)
        issue_call((int)i);

    uint64_t stall_ns = STALL_EXIT_NS;
    if ((MAX_RESENDS + 2) * cfg.timeout_ms * 1000000ull > stall_ns)
        stall_ns = (MAX_RESENDS + 2) * cfg.timeout_ms * 1000000ull;
    while (!finished) {
        int n = recvmmsg(sock, rx_msgs, RX_BATCH, rflags, NULL);
        uint64_t now = now_ns();
        if (n < 0) {
            if (errno == ECONNREFUSED)
                c_refused++;        /* ICMP port unreachable: nobody listening (yet) */
            else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                die("recvmmsg: %s", strerror(errno));
        } else {
            for (int i = 0; i < n && !finished; i++)
                on_datagram(rx_bufs + (size_t)i * RX_BUFSZ, rx_msgs[i].msg_len,
                            (rx_msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0, now);
        }
        if (finished)
            break;
        if (cfg.v5 && hs.pending)
            hs_tick(now);
        if (now >= next_check)
            check_timeouts(now);
        if (!any_rx && now - t_start > NO_REPLY_EXIT_NS)
            die("no reply at all from %s port %u within 5 s of the first call%s: is a "
                "protocol-%d server listening there?", cfg.host, cfg.port,
                c_refused ? " (ICMP port unreachable: nothing listens on that port)" : "",
                cfg.v5 ? 5 : 1);
        if (any_rx && now - last_rx > stall_ns)
            die("the server stopped answering: no reply for %.0f s (%" PRIu64 " of %" PRIu64
                " measured calls done)", (double)stall_ns / 1e9, done_measured, cfg.calls);
        if (active_count == 0 && !finished)
            die("internal error: no call in flight");
    }
    report();
    free(rx_bufs);
    return 0;
}
