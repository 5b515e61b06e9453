/* session.h: protocol version 5 (docs/PROTOCOL-v5.md): the handshake's datagrams (INIT, ACCEPT, COOKIE, NO_SESSION), a session's keys, and sealing and opening data datagrams, over libsodium (core/sodium.h). Functions of their arguments alone: no clock, no table, no socket (the server and the client keep their sessions). Any thread. */
#ifndef SRPC_SESSION_H
#define SRPC_SESSION_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "core/wire.h"

/* Types of version 5 beyond REQUEST, RESPONSE and ERROR. */
#define SRPC_V5_INIT 3
#define SRPC_V5_ACCEPT 4
#define SRPC_V5_COOKIE 5
#define SRPC_V5_NO_SESSION 6
/* Their bodies (after the 22-byte header) and whole lengths. */
#define SRPC_V5_INIT_BODY 104
#define SRPC_V5_ACCEPT_BODY 64
#define SRPC_V5_COOKIE_BODY 44
#define SRPC_V5_NO_SESSION_BODY 8
#define SRPC_V5_INIT_LEN (SRPC_HDR_LEN + SRPC_V5_INIT_BODY)
#define SRPC_V5_INIT_MAC1 (SRPC_HDR_LEN + 72) /* where an INIT's mac1 is (a server keeps it: INITs seen before) */
#define SRPC_V5_ACCEPT_LEN (SRPC_HDR_LEN + SRPC_V5_ACCEPT_BODY)
#define SRPC_V5_COOKIE_LEN (SRPC_HDR_LEN + SRPC_V5_COOKIE_BODY)
#define SRPC_V5_NO_SESSION_LEN (SRPC_HDR_LEN + SRPC_V5_NO_SESSION_BODY)
#define SRPC_V5_FLAG_ENCRYPT 1u
#define SRPC_V5_FLAG_AES 2u     /* INIT: the client can use AES-256-GCM; ACCEPT: the session does */
#define SRPC_V5_FLAG_AEGIS 4u   /* INIT: the client can use AEGIS-128L; ACCEPT: the session does (never with AES) */
#define SRPC_V5_FLAGS_KNOWN (SRPC_V5_FLAG_ENCRYPT | SRPC_V5_FLAG_AES | SRPC_V5_FLAG_AEGIS)
/* An AEGIS-128L session's datagrams: its 32-byte tag's first half comes between the data and the
 * trailer (whose last 16 bytes are the tag's second half), so the trailer stays the last 32 bytes. */
#define SRPC_V5_AEGIS_TAG_HEAD 16
#define SRPC_V5_TAIL_MAX (SRPC_V5_AEGIS_TAG_HEAD + SRPC_V5_TRAILER_LEN)
_Static_assert(SRPC_V5_TAIL_MAX >= SRPC_AUTH_TRAILER_LEN && SRPC_V5_TAIL_MAX >= SRPC_DATA_CHECK_LEN,
               "the longest tail a datagram of any version carries");
#define SRPC_V5_MAX_PIECES 16   /* srpc_v5_seal_key: at most this many data pieces less 2 */
#define SRPC_V5_KEY_LEN 32   /* psk, session keys, X25519 keys */
#define SRPC_V5_COOKIE_LEN_RAW 16
/* No counter at or above this is sent or taken (the page: below 2^62). */
#define SRPC_V5_MAX_COUNTER (1ull << 62)
_Static_assert(SRPC_V5_ACCEPT_LEN <= SRPC_V5_INIT_LEN && SRPC_V5_COOKIE_LEN <= SRPC_V5_INIT_LEN,
               "no answer to an INIT is larger than the INIT (no amplification)");
_Static_assert(SRPC_V5_NO_SESSION_LEN < SRPC_HDR_LEN + SRPC_V5_TRAILER_LEN,
               "NO_SESSION is smaller than any data datagram it answers");

/* The bytes after a data datagram's data in a session with these ACCEPT flags: the trailer, and
 * in an AEGIS-128L session the tag's first half before it (the "tail" that srpc_v5_seal writes). */
static inline uint32_t srpc_v5_tail_len(unsigned flags)
{
    return SRPC_V5_TRAILER_LEN + (flags & SRPC_V5_FLAG_AEGIS ? SRPC_V5_AEGIS_TAG_HEAD : 0);
}

/* A session's keys, as either side holds them. */
typedef struct srpc_v5_keys {
    uint64_t session;               /* its id, never 0 */
    uint8_t c2s[SRPC_V5_KEY_LEN];   /* requests */
    uint8_t s2c[SRPC_V5_KEY_LEN];   /* replies */
    uint8_t encrypt;                /* the ACCEPT's flags: SRPC_V5_FLAG_ENCRYPT (the data is encrypted, else
                                       authenticated only) and SRPC_V5_FLAG_AES or SRPC_V5_FLAG_AEGIS (the
                                       AEAD is AES-256-GCM or AEGIS-128L, else ChaCha20-Poly1305) */
} srpc_v5_keys_t;

/* An INIT's fields (what a server reads before it knows the psk). */
typedef struct srpc_v5_init {
    uint64_t hs_id;                 /* the handshake id (the header's req_id) */
    uint32_t key_id;
    uint8_t e[SRPC_V5_KEY_LEN];     /* e_c */
    uint64_t time_ms;
    uint32_t flags;
    uint64_t prev_session;          /* the session it follows (0: none) */
} srpc_v5_init_t;

/* 0 when libsodium has what version 5 needs, else -ENOTSUP. */
int srpc_v5_available(void);

/* 1 when this process can use the AES-256-GCM suite (libsodium has it and the CPU has AES-NI). */
int srpc_v5_aes_available(void);

/* 1 when this process can use the AEGIS-128L suite (libsodium 1.0.19 on, and the CPU has AES-NI). */
int srpc_v5_aegis_available(void);

/* The suite flags a server grants for an INIT's flags: ENCRYPT as asked, and AEGIS-128L where the
 * client offers it and this process can use it, else AES-256-GCM likewise, else neither. */
uint32_t srpc_v5_suite_pick(uint32_t init_flags);

/* A fresh X25519 key pair (an ephemeral key of one handshake). 0 or -ENOTSUP. */
int srpc_v5_keypair(uint8_t priv[SRPC_V5_KEY_LEN], uint8_t pub[SRPC_V5_KEY_LEN]);

/* The client's INIT into out: handshake id hs_id (48 bits, not 0), key key_id with secret psk,
 * its ephemeral private key e_priv, time_ms, flags, prev (the client's keys of the session this
 * one follows, whose calls go on under it: resume is made with its k_c2s) or NULL, and cookie (16
 * bytes of a COOKIE answer) or NULL. 0, -EINVAL or -ENOTSUP. */
int srpc_v5_init_make(uint8_t out[SRPC_V5_INIT_LEN], const uint8_t psk[SRPC_V5_KEY_LEN], uint32_t key_id,
                      uint64_t hs_id, const uint8_t e_priv[SRPC_V5_KEY_LEN], uint64_t time_ms, uint32_t flags,
                      const srpc_v5_keys_t *prev, const uint8_t *cookie);

/* 1 when the parsed INIT's resume is right for k_c2s of the session it names, else 0. */
int srpc_v5_init_resume_ok(const uint8_t init[SRPC_V5_INIT_LEN], const uint8_t prev_c2s[SRPC_V5_KEY_LEN]);

/* The fields of an INIT of len bytes at d (header, length, type and fields checked): 0, or
 * -EBADMSG for anything else. Reads only d: hostile input. */
int srpc_v5_init_parse(const uint8_t *d, size_t len, srpc_v5_init_t *f);

/* 1 when the parsed INIT's mac1 is right for psk, else 0 (constant time). */
int srpc_v5_init_mac1_ok(const uint8_t init[SRPC_V5_INIT_LEN], const uint8_t psk[SRPC_V5_KEY_LEN]);

/* 1 when the parsed INIT's cookie_mac is right for cookie, else 0 (constant time). */
int srpc_v5_init_cookie_ok(const uint8_t init[SRPC_V5_INIT_LEN], const uint8_t cookie[SRPC_V5_COOKIE_LEN_RAW]);

/* The server's ACCEPT of a checked INIT into out, and the session's keys into *k: its ephemeral
 * private key e_priv, the session id (not 0), flags (SRPC_V5_FLAG_ENCRYPT). 0; -EPROTO when
 * the INIT's e_c gives an all-zero secret (the INIT is dropped); -EINVAL, -ENOTSUP. dh and the
 * key schedule's middle values are wiped. */
int srpc_v5_accept_make(uint8_t out[SRPC_V5_ACCEPT_LEN], srpc_v5_keys_t *k, const uint8_t init[SRPC_V5_INIT_LEN],
                        const uint8_t psk[SRPC_V5_KEY_LEN], const uint8_t e_priv[SRPC_V5_KEY_LEN], uint64_t session,
                        uint32_t flags);

/* The client's session from an ACCEPT of len bytes at d answering its INIT init (made with
 * e_priv and psk): 0 with *k set; -EBADMSG when d is not that answer (header, length, handshake
 * id, key_id, session 0, confirm, an all-zero secret). Reads d as hostile input. */
int srpc_v5_accept_open(srpc_v5_keys_t *k, const uint8_t init[SRPC_V5_INIT_LEN], const uint8_t e_priv[SRPC_V5_KEY_LEN],
                        const uint8_t psk[SRPC_V5_KEY_LEN], const uint8_t *d, size_t len);

/* An address as version 5 writes it (address then port, network order: 4 + 2 bytes for IPv4, 16 + 2
 * for IPv6, then its scope id, 4 bytes in host order) into out: its length, 0 for another family. What a cookie is made of, and what a
 * server keeps of the address a session was made from. */
#define SRPC_V5_ADDR_MAX 22
size_t srpc_v5_addr_bytes(const struct sockaddr *src, uint8_t out[SRPC_V5_ADDR_MAX]);

/* The cookie of source address src for the server's cookie secret: H(secret, address || port, 16). */
void srpc_v5_cookie_value(uint8_t cookie[SRPC_V5_COOKIE_LEN_RAW], const uint8_t secret[SRPC_V5_KEY_LEN],
                          const struct sockaddr *src);

/* The server's COOKIE answering init (key psk) with cookie into out. 0, -ENOTSUP. */
int srpc_v5_cookie_make(uint8_t out[SRPC_V5_COOKIE_LEN], const uint8_t init[SRPC_V5_INIT_LEN],
                        const uint8_t psk[SRPC_V5_KEY_LEN], const uint8_t cookie[SRPC_V5_COOKIE_LEN_RAW]);

/* The client's cookie from a COOKIE of len bytes at d answering its INIT init: 0, or -EBADMSG. */
int srpc_v5_cookie_open(uint8_t cookie[SRPC_V5_COOKIE_LEN_RAW], const uint8_t init[SRPC_V5_INIT_LEN],
                        const uint8_t psk[SRPC_V5_KEY_LEN], const uint8_t *d, size_t len);

/* The NO_SESSION answering a data datagram whose header is h and whose trailer names session. */
void srpc_v5_no_session_make(uint8_t out[SRPC_V5_NO_SESSION_LEN], const srpc_hdr_t *h, uint64_t session);

/* A NO_SESSION's fields: 0, or -EBADMSG. */
int srpc_v5_no_session_parse(const uint8_t *d, size_t len, uint64_t *session, uint16_t *func_id, uint64_t *req_id);

/* Seals a data datagram of session k: its 22-byte header hdr (a REQUEST when to_server, else a
 * RESPONSE or ERROR) and its len data bytes at data, which an encrypting session encrypts in
 * place; writes the tail, srpc_v5_tail_len(k->encrypt) bytes (the trailer: session, counter,
 * tag; AEGIS-128L: the tag's first half, then the trailer). 0, -EINVAL (counter 0 or too large),
 * -ENOTSUP. */
int srpc_v5_seal(const srpc_v5_keys_t *k, int to_server, uint64_t counter, const uint8_t hdr[SRPC_HDR_LEN],
                 uint8_t *data, uint32_t len, uint8_t *tail);

/* The same as srpc_v5_seal with the key itself (k_c2s or k_s2c), the session's id and its flags
 * (encrypt: SRPC_V5_FLAG_ENCRYPT, SRPC_V5_FLAG_AES, SRPC_V5_FLAG_AEGIS; the tail is
 * srpc_v5_tail_len(encrypt) bytes), and the data as n pieces, left as they are: an encrypting session writes the
 * ciphertext to enc (the pieces' bytes, contiguous; enc may be the one piece itself: encrypted
 * in place), an authenticating one needs no enc (NULL).
 * What a transport calls as it cuts a message into datagrams. 0, -EINVAL or -ENOTSUP. */
int srpc_v5_seal_key(const uint8_t key[SRPC_V5_KEY_LEN], uint64_t session, int encrypt, uint64_t counter,
                     const uint8_t hdr[SRPC_HDR_LEN], const struct iovec *data, int n, uint8_t *enc,
                     uint8_t *tail);

/* Opens a data datagram of session k (the trailer's session must be k's: the caller found k by
 * it): its len data bytes at data, then its tail of srpc_v5_tail_len(k->encrypt) bytes at tail
 * (the datagram's last bytes: the caller takes them off its length). 0 when its tag is right, the
 * data then decrypted in place in an encrypting session; -EBADMSG when not (the data left as it
 * came, or zeroed by an AES-256-GCM or AEGIS-128L session's decryption). Does not look at the
 * counter's freshness (the caller's window, core/replay.h, after this). Constant time in the
 * tag's comparison. */
int srpc_v5_open(const srpc_v5_keys_t *k, int to_server, const uint8_t hdr[SRPC_HDR_LEN], uint8_t *data,
                 uint32_t len, const uint8_t *tail);

/* The trailer's session and counter (the trailer: a data datagram's last 32 bytes, whatever its suite). */
uint64_t srpc_v5_trailer_session(const uint8_t trailer[SRPC_V5_TRAILER_LEN]);
uint64_t srpc_v5_trailer_counter(const uint8_t trailer[SRPC_V5_TRAILER_LEN]);

#endif
