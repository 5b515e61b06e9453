/* sessions.h: a client's version 5 sessions (docs/PROTOCOL-v5.md): its key, the sessions it holds (the one it sends under and those it moved on from, whose replies may still come), the handshake under way (its INIT, resends, a cookie), and opening reply datagrams. No socket and no call table: call_auth.c sends what these functions make and moves its calls. */
#ifndef SRPC_CLIENT_SESSIONS_H
#define SRPC_CLIENT_SESSIONS_H

#include <stdint.h>

#include "core/replay.h"
#include "core/session.h"

/* Threads: the client's lock is held for every function here (one owner at a time); the
 * transport reads `counter` through the pointer it is given, advancing it atomically. Clocks:
 * now_ns is CLOCK_MONOTONIC (srpc_now_ns); an INIT's time is read from the wall clock here. */

/* Sessions held at once: the current one and up to three it moved on from (a rekey every 120 s
 * or a NO_SESSION each moves on once; a call outstanding under an older one is sent again under
 * a newer one by then). */
#define SRPC_CL_SESSIONS 4

typedef struct srpc_cl_sess {
    srpc_v5_keys_t keys;
    uint64_t born_ns;        /* when its ACCEPT was taken */
    srpc_replay_t win;       /* the server's counters taken under it */
    uint8_t used;
    uint8_t dead;            /* a NO_SESSION named it: nothing is sent under it again */
    uint8_t suspect;         /* a NO_SESSION named it while it was under SRPC_V5_NO_SESSION_MIN_AGE_MS
                                old: it dies at that age (srpc_cl_v5_settle) unless a reply under it
                                is taken first */
} srpc_cl_sess_t;

typedef struct srpc_cl_v5_stats {
    uint64_t handshakes;       /* sessions made (ACCEPTs taken) */
    uint64_t rekeys;           /* handshakes started because the session was old */
    uint64_t no_sessions;      /* NO_SESSIONs acted on (a call of ours outstanding under the session named) */
    uint64_t no_sessions_deferred; /* NO_SESSIONs for such a call naming a session too young to act on
                                      at once (acted on when it is old enough, unless a reply under
                                      it comes first) */
    uint64_t cookies;          /* COOKIEs taken (the server was under load) */
    uint64_t handshakes_failed; /* handshakes that got no answer to any of their INITs */
    uint64_t resent;           /* calls sent again under a new session (after a NO_SESSION, or sent
                                  while there was none) */
    uint64_t lines_ended;      /* handshakes that could name no session to follow though there had been
                                  one (the newest older than SRPC_V5_PREV_MAX_MS): a new line */
} srpc_cl_v5_stats_t;

typedef struct srpc_cl_v5 {
    uint32_t key_id;
    uint8_t psk[SRPC_V5_KEY_LEN];
    uint8_t want_encrypt;
    uint8_t offer_aes;       /* INITs offer AES-256-GCM (SRPC_V5_FLAG_AES): this process can use it */
    uint8_t offer_aegis;     /* INITs offer AEGIS-128L (SRPC_V5_FLAG_AEGIS): this process can use it */
    uint64_t rekey_ns;       /* a session this old is followed by a new one */
    srpc_cl_sess_t s[SRPC_CL_SESSIONS];
    int cur;                 /* index of the session calls are sent under; -1: none */
    uint64_t counter;        /* the client's counter, one for all its sessions (never repeats under a key) */
    /* the handshake under way */
    uint8_t hs_on;
    uint8_t hs_sends;        /* INITs sent of this handshake's current INIT */
    uint8_t hs_cookies;      /* COOKIEs taken in this handshake */
    uint64_t hs_id;
    uint64_t hs_due_ns;      /* its next resend (or its failure after the last) */
    uint8_t e_priv[SRPC_V5_KEY_LEN];
    uint8_t init[SRPC_V5_INIT_LEN];
    srpc_v5_keys_t prev;     /* the session it follows (prev.session 0: none) */
    uint64_t prev_born_ns;   /* when the client took prev's ACCEPT (a COOKIE's new INIT checks its age too) */
    uint8_t line_ended;      /* set by srpc_cl_v5_start when it could not follow the newest session (too
                                old: the server may have forgotten it and its line): the caller fails
                                the calls sent under that line (they may have run; sent again on a new
                                line they could run twice) and clears it */
    uint8_t cookie[SRPC_V5_COOKIE_LEN_RAW];
    uint64_t cookie_ns;      /* when the cookie was taken (0: none) */
    srpc_cl_v5_stats_t st;
} srpc_cl_v5_t;

/* key key_id with its 32-byte psk; encrypt: ask that the data be encrypted; rekey_ms: a session's
 * age at which a new one is made (0: SRPC_V5_CLIENT_REKEY_MS, the most allowed). 0, -EINVAL,
 * -ENOTSUP (libsodium without version 5's primitives). */
int srpc_cl_v5_init(srpc_cl_v5_t *v, uint32_t key_id, const uint8_t *psk, int encrypt, uint32_t rekey_ms);

/* Offers in its INITs only the suites in mask (SRPC_V5_FLAG_AES, SRPC_V5_FLAG_AEGIS) of those this
 * process can use (srpc_cl_v5_init offers all of those). Before the first handshake. */
void srpc_cl_v5_offer(srpc_cl_v5_t *v, unsigned mask);

/* Wipes every key. */
void srpc_cl_v5_wipe(srpc_cl_v5_t *v);

/* What to send under now: the current session, or NULL when there is none that may be used (never
 * made, named by a NO_SESSION, or older than SRPC_V5_CLIENT_STOP_MS). *start is set to 1 when a
 * handshake should start now (none under way, and no session, or one old enough to rekey:
 * SRPC_V5_CLIENT_REKEY_MS); the caller then calls srpc_cl_v5_start. */
const srpc_cl_sess_t *srpc_cl_v5_current(srpc_cl_v5_t *v, uint64_t now_ns, int *start);

/* Starts a handshake that follows the current session (or the last one a NO_SESSION named, when
 * there is no current one; or none, and none older than SRPC_V5_PREV_MAX_MS: then line_ended is
 * set): the INIT to send is written into out. 0, -ENOTSUP. */
int srpc_cl_v5_start(srpc_cl_v5_t *v, uint64_t now_ns, uint8_t out[SRPC_V5_INIT_LEN]);

/* The handshake's resend (the same INIT, 200 ms after the first send then doubling, as the page
 * says): 1 with the INIT in out when one is due now; 0 when nothing is; -ETIMEDOUT when the
 * handshake has failed (no answer to its last INIT): it is over. */
int srpc_cl_v5_due(srpc_cl_v5_t *v, uint64_t now_ns, uint8_t out[SRPC_V5_INIT_LEN]);

/* An ACCEPT of len bytes at d (hostile): 0 when it answers the handshake under way (then the new
 * session is the current one, the handshake is over); -EBADMSG when it does not (dropped);
 * -EPROTO when the server would not encrypt though asked (the handshake is over, no session is
 * made: the caller fails what waited). */
int srpc_cl_v5_on_accept(srpc_cl_v5_t *v, const uint8_t *d, uint32_t len, uint64_t now_ns);

/* A COOKIE of len bytes at d (hostile): 0 with a new INIT (a fresh ephemeral key and time, the
 * cookie's mac) in out to send now; -EBADMSG when it does not answer the handshake under way,
 * or when this handshake has taken too many. The new INIT names prev only while it is young enough
 * (else line_ended is set, as by srpc_cl_v5_start). */
int srpc_cl_v5_on_cookie(srpc_cl_v5_t *v, const uint8_t *d, uint32_t len, uint64_t now_ns,
                         uint8_t out[SRPC_V5_INIT_LEN]);

/* The session of ours with this id (dead or not), or NULL. */
srpc_cl_sess_t *srpc_cl_v5_find(srpc_cl_v5_t *v, uint64_t id);

/* 1 when id is a session calls may still count on (held, not named by a NO_SESSION), else 0. */
int srpc_cl_v5_alive(const srpc_cl_v5_t *v, uint64_t id);

/* A NO_SESSION named session id (the caller checked that a call of ours is outstanding under
 * it): 1 when it is now dead (and the current session no more if it was that one); 0 when it is
 * not ours, or younger than SRPC_V5_NO_SESSION_MIN_AGE_MS: then it is suspect (counted in
 * no_sessions_deferred) and srpc_cl_v5_settle ends it at that age unless a reply under it is
 * taken first (which shows the server has it: the NO_SESSION was forged, or another process's). */
int srpc_cl_v5_kill(srpc_cl_v5_t *v, uint64_t id, uint64_t now_ns);

/* Ends the suspect sessions old enough now (*killed: how many; counted as no_sessions acted on):
 * the caller starts a handshake when it killed one. Returns when the next suspect one will be
 * old enough (UINT64_MAX: none). */
uint64_t srpc_cl_v5_settle(srpc_cl_v5_t *v, uint64_t now_ns, int *killed);

/* A reply datagram of version 5: its header at hb and *dlen bytes after it at data (the trailer
 * last). 0 when it is of a session of ours, its tag right and its counter fresh (then taken):
 * *dlen loses the trailer, an encrypting session's data is decrypted in place; -EBADMSG when not
 * (nothing changed). */
int srpc_cl_v5_open(srpc_cl_v5_t *v, const uint8_t hb[SRPC_HDR_LEN], uint8_t *data, uint32_t *dlen);

#endif
