/* session_table.h: the server's table of version 5 sessions (sessions.h's srpc_sessions_t), private to server/: its lookups by id and by INIT mac1, lines, tombs of sessions that may be resumed, expiry and eviction under quotas; what sessions.c's handshakes and checks use of it. The caller holds what srpc_sessions_t's users hold (the server's lock: sessions.h). */
#ifndef SRPC_SESSION_TABLE_H
#define SRPC_SESSION_TABLE_H

#include "server/sessions.h"

/* How long ago then was, at now; 0 when then is later (a time read before another that stamped
 * then: an age never wraps into a huge one). */
uint64_t srpc_st_age(uint64_t now, uint64_t then);
srpc_session_t *srpc_st_by_id(const srpc_sessions_t *t, uint64_t id);
srpc_session_t *srpc_st_by_mac1(const srpc_sessions_t *t, const uint8_t mac1[16]);
/* The sessions' half of srpc_sessions_expire (an INIT in a full table runs it: not the scan of
 * the tombstones, which is the sweep's, once a second). */
void srpc_st_expire_sessions(srpc_sessions_t *t, uint64_t mono_ms);
/* The floor as it is at mono_ms: rotated every stale_ms / 2 (floor <- pending <- the window's
 * top), the rotations due since rot_ms counted by the time, not by who ran them: none is run
 * between datagrams taken but by the sweep, once a second, which is later than stale_ms / 2 when
 * the reply cache is short. A rotation is run when a datagram is taken once half a period has
 * passed, so no take moved the top since the first rotation due: two due, the floor is the top. */
uint64_t srpc_st_floor_at(const srpc_sessions_t *t, const srpc_session_t *s, uint64_t mono_ms);
/* Forgets session i at mono_ms, leaving a tombstone where needs_tomb says (the callers made sure
 * of a place: tomb_room). */
void srpc_st_forget(srpc_sessions_t *t, uint32_t i, uint64_t mono_ms);
/* Forgets the longest-silent session without calls, of any key, silent SRPC_V5_QUOTA_IDLE_MS at
 * least (a table full of short-lived clients' sessions makes room for new ones): 1, or 0 when
 * there is none. O(places): only when the table is full. */
int srpc_st_forget_idle(srpc_sessions_t *t, uint64_t mono_ms, uint32_t keep);
int srpc_st_forget_superseded(srpc_sessions_t *t, uint32_t key_id, int any_key, uint32_t keep, uint64_t mono_ms);
uint32_t srpc_st_id_bucket(const srpc_sessions_t *t, uint64_t id);
/* A new line (one reference, nothing ran): there always is one, as lines in use <= sessions +
 * tombstones < cap + tomb_cap (a session place is free when one is taken). */
uint32_t srpc_st_line_new(srpc_sessions_t *t);
uint32_t srpc_st_mac_bucket(const srpc_sessions_t *t, const uint8_t mac1[16]);
/* Whether forgetting session s at mono_ms leaves a tombstone: its line has calls in the call
 * table, or ran calls and a resume naming s may still come, which must follow the line, whose
 * window knows what ran (an outside attacker, stop 65, had a call's reply pushed out of the cache,
 * and with it the tombstone, and the call's resend ran again on a new line). */
int srpc_st_needs_tomb(const srpc_sessions_t *t, const srpc_session_t *s, uint64_t mono_ms);
int srpc_st_past_time(const srpc_session_t *s, uint64_t mono_ms);
/* Whether key_id holds its quota of places: if so, its longest-silent session without calls
 * (silent SRPC_V5_QUOTA_IDLE_MS at least) is forgotten to make room, and 0 returned; 1 when it
 * has none such (the INIT is then unanswered). O(places): only once the table is half full. */
int srpc_st_quota_reached(srpc_sessions_t *t, uint32_t key_id, uint64_t mono_ms, uint32_t keep);
/* The rotations due, run (by the sweep, and before a datagram is taken: the top then is the one
 * they saw). */
void srpc_st_rotate_floor(const srpc_sessions_t *t, srpc_session_t *s, uint64_t mono_ms);
/* Its client seen under a session that follows it for stale_ms: nothing of it is taken any more. */
int srpc_st_superseded(const srpc_sessions_t *t, const srpc_session_t *s, uint64_t mono_ms);
srpc_tomb_t *srpc_st_tomb_by_id(const srpc_sessions_t *t, uint64_t id);
srpc_tomb_t *srpc_st_tomb_by_mac1(const srpc_sessions_t *t, const uint8_t mac1[16]);
/* Whether a tombstone place is free now (without freeing one). */
int srpc_st_tomb_free_place(const srpc_sessions_t *t);

#endif
