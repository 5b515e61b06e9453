/* keytab.h: the server's key table (see splitrpc_auth.h): looking a datagram's key up, its tag and time, the replay window of its sender, what it may call; handing windows over to a new table. */
#ifndef SRPC_KEYTAB_H
#define SRPC_KEYTAB_H

#include <stdint.h>

#include "core/auth.h"

typedef struct srpc_sender_win srpc_sender_win_t;

typedef struct srpc_key {
    uint32_t id;
    uint8_t removed;             /* kept only for its windows (a reload took it out): unknown to datagrams */
    uint8_t all_funcs;
    uint8_t secret[SRPC_AUTH_SECRET_LEN];
    uint64_t expires_ms;         /* 0: never */
    uint16_t *funcs;             /* sorted; nfuncs of them */
    uint32_t nfuncs;
    srpc_sender_win_t *win;      /* nwin windows, allocated at the key's first datagram */
    uint32_t nwin;               /* places in win: a power of two, doubled (up to the table's max_senders)
                                    while more than half of them hold a sender */
    uint32_t nused;              /* places of win that hold a sender */
    uint64_t last_ms;            /* monotonic ms of the last datagram taken with this key */
    uint64_t floor_ms;           /* the newest time (wall ms) of a datagram taken by a window since given up:
                                    a sender without a window is refused at or below it (finding 8 of issue 52) */
} srpc_key_t;

struct srpc_keytab {
    srpc_key_t *keys; /* sorted by id once sealed */
    uint32_t n, cap;
    uint32_t max_senders, skew_ms;
    uint8_t legacy_v4;  /* 1: version 4's signed datagrams are taken too (srpc_keytab_legacy_v4) */
    uint64_t forget_ms; /* a window silent this long may be reused: twice the largest skew of this
                           table and of every table it took windows from (a datagram taken under a
                           larger skew is checked against it), so it never shrinks at a reload */
};

/* Sorts t by id: -EEXIST when an id is there twice. The thread that built it. */
int srpc_keytab_seal(srpc_keytab_t *t);

/* The key and the time of a version 4 datagram (22 header bytes at hdr, dlen data bytes at data,
 * its trailer at trailer): 0 with *key and *f set when the key is in t (not removed), the tag is
 * right and the time within the skew of now_ms (the server's clock); else the drop reason
 * (SRPC_DROP_AUTH_*). Reads t only: a datagram checked here may still be refused by
 * srpc_keytab_commit. The engine's thread (rx). */
int srpc_keytab_verify(const srpc_keytab_t *t, const uint8_t *hdr, const uint8_t *data, uint32_t dlen,
                       const uint8_t *trailer, uint64_t now_ms, srpc_key_t **key, srpc_auth_fields_t *f);

/* Takes the datagram that srpc_keytab_verify passed (at wall clock wall_ms) into its sender's
 * replay window: 0, or SRPC_DROP_AUTH_REPLAY (taken before, behind the window, or a sender
 * without a window whose time is not after the key's floor_ms) or SRPC_DROP_AUTH_NO_ROOM.
 * Windows age on mono_ms (CLOCK_MONOTONIC, ms): a wall clock stepped either way neither frees
 * a window early nor keeps it; a window given up raises its key's floor_ms to the newest time
 * it took, so its datagrams stay refused even when a clock stepped back makes them fresh. rx. */
int srpc_keytab_commit(srpc_keytab_t *t, srpc_key_t *key, const srpc_auth_fields_t *f, uint64_t wall_ms,
                       uint64_t mono_ms);

/* The key id of t in use (not removed), or NULL. */
srpc_key_t *srpc_keytab_key(const srpc_keytab_t *t, uint32_t key_id);

/* 1 when key may call func_id, else 0. */
int srpc_key_allows(const srpc_key_t *key, uint16_t func_id);

/* Moves the replay windows of old's keys into next (both with the same max_senders:
 * srpc_server_set_keys refuses another), with their floor_ms: to the key of the same id, or for a
 * key that next lacks and that took a datagram within twice the skew (of mono_ms, the monotonic
 * clock in ms), to a removed entry of next (which then no datagram can use). old keeps no windows
 * after. Allocates only for removed entries (none kept where that fails). rx. */
void srpc_keytab_adopt(srpc_keytab_t *next, srpc_keytab_t *old, uint64_t mono_ms);

#endif
