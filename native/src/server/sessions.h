/* sessions.h: the server's version 5 sessions (docs/PROTOCOL-v5.md): the table of sessions by id, the INITs it answered (one seen again gets the same ACCEPT and makes nothing), lines of sessions (resume), how many handshakes it pays for before it asks for cookies, the cookie secrets, and how often it answers NO_SESSION to an address. */
#ifndef SRPC_SESSIONS_H
#define SRPC_SESSIONS_H

#include <stdint.h>
#include <sys/socket.h>

#include "core/replay.h"
#include "core/session.h"
#include "server/keytab.h"

/* Threads: one owner (the engine's receiving thread, under the server's lock where the engine
 * holds it) calls every function here; replies never read a session (the call table holds what
 * they are sealed with). Clocks are the caller's: mono_ms is CLOCK_MONOTONIC in ms (ages, rates),
 * wall_ms the epoch in ms (an INIT's time). */

/* A line of sessions' calls that ran (docs/PROTOCOL-v5.md, "Calls a line ran"): its client gives
 * new calls increasing req_ids (48 bits, modulo 2^48), and the line keeps the highest req_id of a
 * call that ran and a bit for each of the SRPC_V5_CALL_WINDOW - 1 below it, so that a datagram of
 * a call that ran and has since left the reply cache (held back on the way, however late) is
 * refused, never run again. Shared by the line's sessions here (refs), freed with the last. */
#define SRPC_V5_CALL_WINDOW 4096 /* a power of two: 2^48 is a multiple of it */
_Static_assert((SRPC_V5_CALL_WINDOW & (SRPC_V5_CALL_WINDOW - 1)) == 0, "a power of two");
typedef struct srpc_line {
    uint64_t top;                         /* the highest req_id that ran (valid once any) */
    uint64_t bits[SRPC_V5_CALL_WINDOW / 64]; /* a ring: req_id r's bit is r mod SRPC_V5_CALL_WINDOW (those
                                             within the window behind top: ran) */
    uint32_t refs;                        /* sessions of the line here; on the free list: the next free */
    uint8_t any;
} srpc_line_t;

typedef struct srpc_session {
    srpc_v5_keys_t keys;
    uint64_t lineage;                     /* its calls' identity: its own id, or (resumed) that of the
                                             session it follows (docs/PROTOCOL-v5.md: resume) */
    uint32_t key_id;
    uint32_t calls;                       /* what the call table holds of its line (enum srpc_line_calls, set by
                                             the owner's sweep, srpc_sessions_mark): RUNNING, never dropped then
                                             unless moved on from; ANSWERED, dropped only leaving a tombstone */
    uint64_t born_ms, seen_ms;            /* monotonic: its ACCEPT, its last datagram taken */
    srpc_replay_t win;                    /* the client's counters taken */
    uint64_t floor, pending, rot_ms;      /* counters at or below floor are refused as stale: floor is the
                                             window's top as it was between one and two rotations ago
                                             (rotated every stale_ms / 2, reckoned by the time: floor_at) */
    uint64_t superseded_ms;               /* when a session that follows it was made (0: none): it is
                                             the first forgotten when a place is needed */
    uint64_t moved_on_ms;                 /* when its client was first seen holding a session that follows
                                             it: a datagram of that one taken, or an INIT resuming that one
                                             (0: not yet): from stale_ms after that its datagrams are
                                             refused and it is forgotten. Not from the follower's own INIT:
                                             its client may never have had the ACCEPT (every one lost), and
                                             goes on under this one */
    uint64_t follows;                     /* the id of the session this one follows, until its client is
                                             seen holding this one (0: none, or seen) */
    uint8_t addr[SRPC_V5_ADDR_MAX];       /* the address its INIT came from (srpc_v5_addr_bytes): its datagrams
                                             are taken from there alone (no migration: a client that moves
                                             makes a new session, docs/PROTOCOL-v5.md) */
    uint8_t addr_len;
    uint8_t mac1[16];                     /* its INIT's: that INIT again is answered with accept */
    uint8_t accept[SRPC_V5_ACCEPT_LEN];
    uint32_t next_id, next_mac;           /* hash chains (by id, by mac1); SRPC_SESS_NONE ends one */
    uint32_t line;                        /* its line's calls (t->lines), shared with the sessions it follows */
    uint8_t used;
} srpc_session_t;

#define SRPC_SESS_NONE UINT32_MAX
#define SRPC_TOMB_KEYS 1024 /* keys counted for the tombstones' quota (more: the rest read 0) */

/* What the call table holds of a line's calls (srpc_sessions_mark's busy answers it). */
enum srpc_line_calls {
    SRPC_LINE_IDLE = 0,     /* none */
    SRPC_LINE_ANSWERED = 1, /* some, all answered (replies or rejections kept for resends) */
    SRPC_LINE_RUNNING = 2,  /* some arriving or running */
};

/* A tombstone: what is kept of a session forgotten before its time was up (for room, or moved on
 * from) while its line had run calls, or of any session forgotten while the call table held calls
 * of its line. A resume naming it, proved with its k_c2s, follows its line, so that a call's resend
 * finds its call, or is refused as one that ran (the line's window), never run again. Two outside
 * attacks made these needed: a session silent 2 s with its call's reply cached was forgotten for
 * room and its client's resume then made a new line where the resend ran again (stop 64); and a
 * tombstone kept only while the line had calls in the call table went when the call's reply was
 * pushed out of the cache, with the same end (stop 65). Its INIT's mac1 too: that INIT again is
 * dropped (a replay of it made a session its replayer could not use, on the victim's line). Freed
 * by the sweep once the call table holds none of the line's calls and a resume naming it can no
 * longer come (SRPC_V5_PREV_MAX_MS + 2 x skew_ms after its ACCEPT: tunables.h) or its line never
 * ran a call; or, all places taken,
 * the oldest of a session moved on from (tomb_room). While none is free so, no session that
 * needs one is forgotten: availability is given up, never a call run twice. */
typedef struct srpc_tomb {
    uint64_t id;                          /* the forgotten session's */
    uint64_t lineage;                     /* its line's calls' identity (srpc_session_t's) */
    uint8_t c2s[SRPC_V5_KEY_LEN];         /* its k_c2s: a resume naming it must prove it (wiped when freed) */
    uint32_t key_id;
    uint32_t line;                        /* its line (t->lines): a reference held */
    uint32_t next;                        /* the chain of its id's bucket; free: the free list's next */
    uint32_t next_mac;                    /* the chain of its mac1's bucket */
    uint8_t mac1[16];                     /* its INIT's */
    uint64_t born_ms;                     /* its session's ACCEPT (monotonic): no resume naming it comes
                                             after SRPC_V5_PREV_MAX_MS + 2 x skew_ms from then */
    uint64_t seq;                         /* the order it was made in (tomb_seq's) */
    uint8_t calls;                        /* enum srpc_line_calls at the last sweep */
    uint8_t moved_on;                     /* its client was seen holding a later session of its line (at
                                             burial, or since: srpc_sessions_take's held) */
    uint8_t used;
} srpc_tomb_t;

typedef struct srpc_sessions_stats {
    uint64_t accepted;       /* sessions made */
    uint64_t not_resumed;    /* INITs naming a session to follow that is not here, or without its keys: a new line */
    uint64_t accept_again;   /* INITs seen before, answered with their ACCEPT again */
    uint64_t cookies;        /* COOKIEs sent (under load) */
    uint64_t full;           /* INITs unanswered: the table full of sessions with calls or still young */
    uint64_t refused;        /* NO_SESSIONs sent */
    uint64_t refusals_held;  /* NO_SESSIONs not sent: the address's or the server's rate */
    uint64_t expired;        /* sessions forgotten: past their time, silent, or their key gone */
    uint64_t key_quota;      /* a key's own idle sessions forgotten (or its INIT unanswered): its quota */
    uint64_t tombs;          /* sessions forgotten leaving a tombstone (their line had calls in the call table) */
    uint64_t tomb_resumes;   /* sessions made by a resume naming a forgotten session: its line followed */
    uint64_t tombs_freed_for_room; /* tombstones of sessions moved on from freed for a place */
} srpc_sessions_stats_t;

typedef struct srpc_sessions {
    srpc_session_t *s;
    srpc_line_t *lines;                   /* cap + tomb_cap of them: a session or tombstone has one, a line
                                             at most one per session or tombstone */
    uint32_t line_free;
    uint32_t cap, used, free_head;
    srpc_tomb_t *tombs;                   /* tomb_cap of them; those below tomb_hw have been used */
    uint32_t tomb_cap, tomb_hw, tmask;
    uint32_t tombs_movable;               /* tombstones moved on from (tomb_room may free them) */
    uint32_t nlines, line_hw;             /* lines: cap + tomb_cap; those below line_hw have been used */
    uint32_t *tomb_by_id, *tomb_by_mac;   /* bucket heads (tmask's) */
    uint32_t tombs_used, tomb_free;
    uint32_t skew_ms;                     /* the largest key table skew in use so far (srpc_sessions_note_skew) */
    struct {
        uint32_t key_id, n;               /* tombstones of the key */
        uint8_t used;
    } tomb_keys[SRPC_TOMB_KEYS];          /* by key (open addressing): a key's quota of tombstones */
    uint64_t tomb_seq;
    uint32_t key_quota;                   /* sessions one key may hold while the table is half full */
    uint32_t tomb_key_quota;              /* tombstones one key may hold while half of them are taken */
    uint32_t *by_id, *by_mac, mask;       /* bucket heads */
    uint32_t handshakes_per_s;            /* more than this in a second: cookies asked for */
    uint32_t stale_ms;                    /* how long after a later counter of its session (or a session
                                             following it) a datagram is still taken: at most half the time
                                             a finished call is remembered (the reply cache's), so a datagram
                                             held back by an attacker and delivered later either finds its
                                             call remembered or is refused; the owner sets it (default
                                             SRPC_DEF_REPLY_CACHE_US / 2) */
    uint64_t hs_window_ms, hs_count;
    uint8_t cookie_cur[SRPC_V5_KEY_LEN], cookie_prev[SRPC_V5_KEY_LEN];
    uint64_t cookie_ms;                   /* when cookie_cur was drawn (0: never) */
    uint64_t *ns_last;                    /* SRPC_V5_NS_BUCKETS: the last NO_SESSION's time per address bucket */
    uint64_t ns_window_ms, ns_count;
    srpc_sessions_stats_t st;
} srpc_sessions_t;

/* max_sessions places (a power of two is not needed); handshakes_per_s: 0 for the default
 * (SRPC_V5_HANDSHAKES_PER_S). 0, -EINVAL, -ENOMEM or -ENOTSUP (no libsodium with X25519). */
int srpc_sessions_init(srpc_sessions_t *t, uint32_t max_sessions, uint32_t handshakes_per_s);

/* The same with max_tombs tombstone places (srpc_sessions_init: SRPC_V5_TOMBS_PER_PLACE per session
 * place). */
int srpc_sessions_init_tombs(srpc_sessions_t *t, uint32_t max_sessions, uint32_t max_tombs, uint32_t handshakes_per_s);

/* Frees the table, every session's keys wiped. */
void srpc_sessions_destroy(srpc_sessions_t *t);

/* An INIT of len bytes at d from src (hostile): 0 with *out_len bytes to send back at out (an
 * ACCEPT, or a COOKIE under load), never more than len; or a drop reason (SRPC_DROP_*: nothing
 * is sent) in the page's order: BAD_HEADER, AUTH_UNKNOWN_KEY, AUTH_BAD_TAG, AUTH_STALE, then
 * AUTH_ADDRESS (an INIT seen before, from another address than it first came from), AUTH_STALE
 * again (an INIT seen before whose session is forgotten: a tombstone's), TABLE_FULL
 * (no place), BAD_HEADER (a low-order e_c). keys: the table in use. */
int srpc_sessions_on_init(srpc_sessions_t *t, const srpc_keytab_t *keys, const uint8_t *d, size_t len,
                          const struct sockaddr *src, uint64_t wall_ms, uint64_t mono_ms,
                          uint8_t out[SRPC_V5_INIT_LEN], size_t *out_len);

/* The session id, or NULL when there is none here: never made, forgotten, past its time (older
 * than SRPC_V5_REJECT_AFTER_MS, or silent that long), or its key no longer in keys (removed; an
 * expired key's calls are answered FORBIDDEN instead, as version 4's). A session found so
 * without calls is forgotten then. */
srpc_session_t *srpc_sessions_find(srpc_sessions_t *t, const srpc_keytab_t *keys, uint64_t id, uint64_t mono_ms);

/* Whether a new call (none of its datagrams in the call table) with req_id may start under session
 * s: 1, or 0 when its line ran that req_id before (the call has left the reply cache: a datagram
 * held back and delivered late) or the req_id is SRPC_V5_CALL_WINDOW or more behind the highest
 * that ran (too old to tell). */
int srpc_sessions_call_fresh(const srpc_sessions_t *t, const srpc_session_t *s, uint64_t req_id);

/* The call req_id of session s's line runs (it is queued): noted, so that it never starts again. */
void srpc_sessions_call_ran(srpc_sessions_t *t, const srpc_session_t *s, uint64_t req_id);

/* 1 when src is the address session s was made from (its INIT's source), else 0: a datagram of s
 * from anywhere else is not taken (answered at most by a NO_SESSION). */
int srpc_sessions_from(const srpc_session_t *s, const struct sockaddr *src);

/* Whether counter c of session s may be taken now, before its tag is checked: 0; SRPC_DROP_AUTH_REPLAY
 * (taken before, behind the window); SRPC_DROP_AUTH_STALE (at or below the session's floor, or its
 * client seen under a session that follows it for stale_ms: a datagram held back and delivered
 * late). */
int srpc_sessions_fresh(const srpc_sessions_t *t, const srpc_session_t *s, uint64_t c, uint64_t mono_ms);

/* Takes counter c of a datagram whose tag srpc_v5_open found right under s: 0, or
 * SRPC_DROP_AUTH_REPLAY. Rotates its floor when due (and so does the sweep). The first taken
 * under a session that follows another marks that one moved on from (moved_on_ms). */
int srpc_sessions_take(srpc_sessions_t *t, srpc_session_t *s, uint64_t c, uint64_t mono_ms);

/* 1 when a NO_SESSION may go to src now (and counts it), else 0: at most one per address every
 * SRPC_V5_NO_SESSION_GAP_MS (by a fixed table of address buckets: spoofed sources cannot grow
 * it), and SRPC_V5_NO_SESSIONS_PER_S in all. */
int srpc_sessions_may_refuse(srpc_sessions_t *t, const struct sockaddr *src, uint64_t mono_ms);

/* Forgets every session past its time that has no calls running, and every session moved on from
 * for stale_ms (its line's calls go on under the one that follows it), each leaving a tombstone
 * where one is needed (kept while none is free); frees the tombstones no longer needed (see
 * srpc_tomb_t); rotates the floors. */
void srpc_sessions_expire(srpc_sessions_t *t, uint64_t mono_ms);

/* A key table with skew skew_ms is in use (at start and at each reload): tombstones are reckoned
 * with the largest so far, so a reload with a larger skew makes them last longer. */
void srpc_sessions_note_skew(srpc_sessions_t *t, uint32_t skew_ms);

/* Marks what the call table holds of each session's and tombstone's line: busy(ctx, line) answers
 * it (an enum srpc_line_calls) (the owner's sweep, before srpc_sessions_expire). */
void srpc_sessions_mark(srpc_sessions_t *t, int (*busy)(void *ctx, uint64_t line), void *ctx);

#endif
