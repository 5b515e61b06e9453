/* splitrpc_auth.h: authenticated calls (docs/PROTOCOL-v4.md): a sender's key and counter, the version 4 trailer, and the server's key table; every int function returns 0 (or a count) or -errno. */
#ifndef SPLITRPC_AUTH_H
#define SPLITRPC_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include "splitrpc_core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SRPC_AUTH_SECRET_LEN 32 /* bytes of a key's secret */
#define SRPC_AUTH_TAG_LEN 16    /* bytes of the tag: BLAKE2b-128 keyed with the secret (RFC 7693) */
#define SRPC_AUTH_MAX_KEYS 65536 /* keys of one table */

/* 0 when the MAC's library (libsodium, loaded at first use: $SPLITRPC_LIBSODIUM where it names one,
 * else libsodium.so.26, .so.23 or .so) is there, else -ENOTSUP. Any thread. Every function below
 * fails with -ENOTSUP without it. */
int srpc_auth_available(void);

/* The name or path libsodium was loaded from (loading it now if it was not), or NULL without one.
 * Any thread; the string lives as long as the process. */
const char *srpc_auth_library(void);

/* The AEAD suites of version 5 (docs/PROTOCOL-v5.md) that this process can use beyond
 * ChaCha20-Poly1305: a mask of SRPC_AUTH_SUITE_AES (AES-256-GCM: libsodium's, and AES-NI with
 * PCLMULQDQ) and SRPC_AUTH_SUITE_AEGIS (AEGIS-128L: libsodium 1.0.19 on, and AES-NI); 0 without
 * libsodium. A client offers these, a server grants the first of AEGIS-128L, AES-256-GCM that
 * both can. Any thread. */
#define SRPC_AUTH_SUITE_AES 2   /* the INIT and ACCEPT flags' bits */
#define SRPC_AUTH_SUITE_AEGIS 4
int srpc_auth_v5_suites(void);

/* The environment variable that names a libsodium (a path or soname) to load before the system's:
 * "SPLITRPC_LIBSODIUM". Read once, at libsodium's first use. */
const char *srpc_auth_library_env(void);

/* Who signs datagrams: a key (its id and secret), a random sender number of this sender, and the
 * counter of its last datagram. Any number of threads may sign with one sender at once (the
 * counter advances atomically); its owner keeps it alive while they do. */
typedef struct srpc_auth_sender {
    uint32_t key_id;
    uint8_t secret[SRPC_AUTH_SECRET_LEN];
    uint64_t sender;  /* nonzero; drawn by srpc_auth_sender_init */
    uint64_t counter; /* the last counter used (0: none yet) */
} srpc_auth_sender_t;

/* Fills s for key key_id (nonzero) with its secret (SRPC_AUTH_SECRET_LEN bytes) and a fresh random
 * sender number. -EINVAL (key id 0, len not 32, NULL), -ENOTSUP. */
int srpc_auth_sender_init(srpc_auth_sender_t *s, uint32_t key_id, const uint8_t *secret, size_t len);

/* Appends the version 4 trailer to the datagram of len bytes at buf (its header and data; cap
 * bytes of room): key id, sender, the next counter, the time (now, ms since the epoch, mod 2^32)
 * and the tag. Returns the datagram's new length, -ENOBUFS (cap < len + 40), -EINVAL, -ENOTSUP.
 * For tests, tools and foreign transports: splitrpc's own senders sign in place. */
int srpc_auth_seal(srpc_auth_sender_t *s, uint8_t *buf, size_t len, size_t cap);

/* 1 when the tag of the version 4 datagram of len bytes at dgram (trailer included) is right for
 * secret, else 0 (also for a datagram too short to have a trailer); -ENOTSUP. Checks nothing else. */
int srpc_auth_tag_ok(const uint8_t *secret, const uint8_t *dgram, size_t len);

/* ------------------------------------------------------------------ the server's key table */

/* The keys a server accepts (key id -> secret, the functions that key may call, an expiry), and
 * per key the replay windows of its senders. Built by one thread, then handed to a server
 * (srpc_server_set_keys), which owns it from then on. */
typedef struct srpc_keytab srpc_keytab_t;

/* max_senders: senders one key may have at once (a power of two up to 2^20; 0: the default,
 * SRPC_DEF_AUTH_SENDERS); skew_ms: how far a datagram's time may be from the server's clock
 * (1..86400000; 0: the default, SRPC_DEF_AUTH_SKEW_MS). -EINVAL, -ENOMEM, -ENOTSUP. */
int srpc_keytab_create(uint32_t max_senders, uint32_t skew_ms, srpc_keytab_t **out);
void srpc_keytab_destroy(srpc_keytab_t *t);
/* Adds key key_id (nonzero; an id added twice fails srpc_server_set_keys with -EEXIST) with its secret (32 bytes), its expiry (ms since the
 * epoch; 0: none) and the functions it may call: all_funcs != 0 every function, else the nfuncs
 * ids at funcs (the server's own functions, ids 0xFF00 and up, every key may call). -EINVAL
 * (bad argument), -ENOSPC (SRPC_AUTH_MAX_KEYS reached), -ENOMEM. */
int srpc_keytab_add(srpc_keytab_t *t, uint32_t key_id, const uint8_t *secret, size_t len, uint64_t expires_ms,
                    int all_funcs, const uint16_t *funcs, uint32_t nfuncs);
uint32_t srpc_keytab_count(const srpc_keytab_t *t);
/* Whether a server with table t also takes version 4's signed datagrams (docs/PROTOCOL-v4.md), a
 * legacy mode with version 4's limits (a captured call runs again after a restart and on another
 * replica or process): 0 (the default) takes only version 5's sessions and drops version 4
 * (auth_v4_off); 1 takes both. Set before t is handed to a server; a reload's table says it anew.
 * 0, or -EINVAL (NULL). */
int srpc_keytab_legacy_v4(srpc_keytab_t *t, int on);

/* Gives the server the key table t (it owns t from then on, also on failure). Before
 * srpc_server_start: the server takes only requests of version 5's sessions made with a key of t
 * (and signed version 4 ones where t allows them: srpc_keytab_legacy_v4); others are dropped,
 * counted by reason, and each call is answered in its own version. While serving (a server started with a
 * table): t replaces the table at the engine's next receive, keeping the replay windows of the key
 * ids in both (and, for twice the skew, of those removed), so no call in flight is dropped; calls
 * already taken in are answered with the key they came with. Any thread, but not at once with
 * srpc_server_start. -EINVAL (NULL; a server started without keys: authentication cannot be turned
 * on while serving; a table whose max_senders differs from the first one's: the windows stay),
 * -EEXIST (an id twice in t), -ENOTSUP (no MAC library). */
struct srpc_server;
int srpc_server_set_keys(struct srpc_server *srv, srpc_keytab_t *t);

#ifdef __cplusplus
}
#endif
#endif /* SPLITRPC_AUTH_H */
