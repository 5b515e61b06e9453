/* sessions.c: the server's version 5 sessions (sessions.h): handshakes answered or asked for a cookie (cookies rotated), a datagram's session found and its counter checked, a line's calls noted as run, the source address held to, NO_SESSION's rate. The table itself is session_table.c's. */
#include "server/session_table.h"

#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "core/auth.h"
#include "core/be.h"
#include "core/mix64.h"
#include "core/tunables.h"
#include "splitrpc_server.h"

static void rotate_cookies(srpc_sessions_t *t, uint64_t mono_ms)
{
    if (t->cookie_ms && srpc_st_age(mono_ms, t->cookie_ms) < SRPC_V5_COOKIE_ROTATE_MS)
        return;
    memcpy(t->cookie_prev, t->cookie_cur, sizeof(t->cookie_prev));
    srpc_auth_random(t->cookie_cur, sizeof(t->cookie_cur));
    t->cookie_ms = mono_ms ? mono_ms : 1;
}

/* 1 when the INIT d carries a cookie_mac for src under the current or the previous secret. */
static int has_cookie(const srpc_sessions_t *t, const uint8_t *d, const struct sockaddr *src)
{
    uint8_t c[SRPC_V5_COOKIE_LEN_RAW];
    srpc_v5_cookie_value(c, t->cookie_cur, src);
    int ok = srpc_v5_init_cookie_ok(d, c);
    if (!ok) {
        srpc_v5_cookie_value(c, t->cookie_prev, src);
        ok = srpc_v5_init_cookie_ok(d, c);
    }
    return ok;
}

/* s's client is seen holding s (a datagram taken under it, or an INIT resuming it): the session s
 * follows, if it is still here, is moved on from now (refused from stale_ms later). Once per s. */
static void held(srpc_sessions_t *t, srpc_session_t *s, uint64_t mono_ms)
{
    if (!s->follows)
        return;
    srpc_session_t *prev = srpc_st_by_id(t, s->follows);
    srpc_tomb_t *b = prev ? NULL : srpc_st_tomb_by_id(t, s->follows);
    if (prev && !prev->moved_on_ms)
        prev->moved_on_ms = mono_ms ? mono_ms : 1;
    if (b && !b->moved_on) { /* forgotten meanwhile (or resumed from a tombstone): its tombstone may go for
                                room now (a reviewer's finding: the flag was fixed at burial) */
        b->moved_on = 1;
        t->tombs_movable++;
    }
    s->follows = 0;
}

int srpc_sessions_on_init(srpc_sessions_t *t, const srpc_keytab_t *keys, const uint8_t *d, size_t len,
                          const struct sockaddr *src, uint64_t wall_ms, uint64_t mono_ms,
                          uint8_t out[SRPC_V5_INIT_LEN], size_t *out_len)
{
    *out_len = 0;
    srpc_v5_init_t f;
    if (srpc_v5_init_parse(d, len, &f) < 0)
        return SRPC_DROP_BAD_HEADER;
    const srpc_key_t *key = srpc_keytab_key(keys, f.key_id);
    if (!key)
        return SRPC_DROP_AUTH_UNKNOWN_KEY;
    if (!srpc_v5_init_mac1_ok(d, key->secret))
        return SRPC_DROP_AUTH_BAD_TAG;
    const uint64_t off = f.time_ms > wall_ms ? f.time_ms - wall_ms : wall_ms - f.time_ms;
    if (off > keys->skew_ms)
        return SRPC_DROP_AUTH_STALE;
    const uint8_t *mac1 = d + SRPC_V5_INIT_MAC1;
    const srpc_session_t *seen = srpc_st_by_mac1(t, mac1);
    if (seen && seen->key_id == f.key_id) { /* the client's own resend, or a replay: the same ACCEPT */
        if (!srpc_sessions_from(seen, src))
            return SRPC_DROP_AUTH_ADDRESS; /* not from where the INIT first came: else a copy that won the
                                              race from a spoofed source would bind the session there and
                                              the client's own copy still get its keys (an outside review) */
        memcpy(out, seen->accept, SRPC_V5_ACCEPT_LEN);
        *out_len = SRPC_V5_ACCEPT_LEN;
        t->st.accept_again++;
        return 0;
    }
    const srpc_tomb_t *buried = seen ? NULL : srpc_st_tomb_by_mac1(t, mac1);
    if (buried && buried->key_id == f.key_id)
        return SRPC_DROP_AUTH_STALE; /* an INIT seen before whose session is forgotten (a tombstone's): a
                                        replay of it made a session its replayer cannot use, on the
                                        line of the session it resumed (an outside attacker, stop 65) */
    if (srpc_st_age(mono_ms, t->hs_window_ms) >= 1000) {
        t->hs_window_ms = mono_ms;
        t->hs_count = 0;
    }
    rotate_cookies(t, mono_ms);
    if (t->hs_count >= t->handshakes_per_s && !has_cookie(t, d, src)) { /* under load: prove your address */
        uint8_t c[SRPC_V5_COOKIE_LEN_RAW];
        srpc_v5_cookie_value(c, t->cookie_cur, src);
        if (srpc_v5_cookie_make(out, d, key->secret, c) < 0)
            return SRPC_DROP_BAD_HEADER;
        *out_len = SRPC_V5_COOKIE_LEN;
        t->st.cookies++;
        return 0;
    }
    /* The session this INIT follows (if it is here) is never the one forgotten to make room: its
     * line's calls go on under the new one (resume). */
    const srpc_session_t *named = f.prev_session ? srpc_st_by_id(t, f.prev_session) : NULL;
    const uint32_t keep = named ? (uint32_t)(named - t->s) : SRPC_SESS_NONE;
    if (t->free_head == SRPC_SESS_NONE)
        srpc_st_expire_sessions(t, mono_ms);
    if (2u * t->used >= t->cap && srpc_st_quota_reached(t, f.key_id, mono_ms, keep)) {
        t->st.key_quota++;
        return SRPC_DROP_TABLE_FULL; /* this key's own sessions are all busy or recent */
    }
    if (t->free_head == SRPC_SESS_NONE && !srpc_st_forget_superseded(t, 0, 1, keep, mono_ms)) /* one a client has moved on from */
        srpc_st_forget_idle(t, mono_ms, keep); /* else the longest silent without calls: short-lived clients' */
    if (t->free_head == SRPC_SESS_NONE) { /* no session with calls, or still young, is dropped for room */
        t->st.full++;
        return SRPC_DROP_TABLE_FULL;
    }
    uint64_t id;
    do
        srpc_auth_random(&id, sizeof(id));
    while (id == 0 || srpc_st_by_id(t, id) || srpc_st_tomb_by_id(t, id));
    const uint32_t i = t->free_head;
    srpc_session_t *s = &t->s[i];
    uint8_t e_priv[SRPC_V5_KEY_LEN], e_pub[SRPC_V5_KEY_LEN];
    int r = srpc_v5_keypair(e_priv, e_pub);
    if (r == 0)
        r = srpc_v5_accept_make(out, &s->keys, d, key->secret, e_priv, id, srpc_v5_suite_pick(f.flags));
    srpc_auth_wipe(e_priv, sizeof(e_priv));
    if (r < 0) {
        srpc_auth_wipe(&s->keys, sizeof(s->keys));
        return SRPC_DROP_BAD_HEADER; /* a low-order e_c (the only failure of a checked INIT) */
    }
    uint64_t lineage = id; /* a new line of calls, unless it follows a session here whose keys its client holds */
    uint64_t follows = 0;
    uint32_t line = SRPC_SESS_NONE; /* the line followed */
    if (f.prev_session) {
        srpc_session_t *prev = srpc_st_by_id(t, f.prev_session);
        const srpc_tomb_t *b = prev ? NULL : srpc_st_tomb_by_id(t, f.prev_session);
        if (b && b->key_id == f.key_id && srpc_v5_init_resume_ok(d, b->c2s)) { /* forgotten, its calls not */
            lineage = b->lineage;
            line = b->line;
            follows = f.prev_session; /* its client seen under this one: the tombstone is moved on from */
            t->st.tomb_resumes++;
        } else if (prev && prev->key_id == f.key_id && srpc_v5_init_resume_ok(d, prev->keys.c2s)) {
            lineage = prev->lineage;
            follows = f.prev_session; /* refused from stale_ms after the client is seen under this one */
            held(t, prev, mono_ms); /* resuming prev proves its client had prev's ACCEPT (else a line S1,
                                       S2, S3 with nothing taken under S2 left S1 open to late datagrams
                                       until its 180 s) */
            if (!prev->superseded_ms) /* its client moves on: the first forgotten for room */
                prev->superseded_ms = mono_ms ? mono_ms : 1;
            line = prev->line;
        } else {
            t->st.not_resumed++;
        }
    }
    t->free_head = s->next_id;
    if (line != SRPC_SESS_NONE) { /* the line's calls go on: its window too */
        s->line = line;
        t->lines[s->line].refs++;
    } else {
        s->line = srpc_st_line_new(t);
    }
    s->used = 1;
    s->lineage = lineage;
    s->key_id = f.key_id;
    s->calls = 0;
    s->born_ms = s->seen_ms = s->rot_ms = mono_ms;
    memset(&s->win, 0, sizeof(s->win));
    s->floor = s->pending = s->superseded_ms = s->moved_on_ms = 0;
    s->follows = follows;
    s->addr_len = (uint8_t)srpc_v5_addr_bytes(src, s->addr);
    memcpy(s->mac1, mac1, sizeof(s->mac1));
    memcpy(s->accept, out, SRPC_V5_ACCEPT_LEN);
    uint32_t *hi = &t->by_id[srpc_st_id_bucket(t, id)], *hm = &t->by_mac[srpc_st_mac_bucket(t, mac1)];
    s->next_id = *hi;
    *hi = i;
    s->next_mac = *hm;
    *hm = i;
    t->used++;
    t->hs_count++;
    t->st.accepted++;
    *out_len = SRPC_V5_ACCEPT_LEN;
    return 0;
}

void srpc_sessions_note_skew(srpc_sessions_t *t, uint32_t skew_ms)
{
    if (skew_ms > t->skew_ms)
        t->skew_ms = skew_ms;
}

srpc_session_t *srpc_sessions_find(srpc_sessions_t *t, const srpc_keytab_t *keys, uint64_t id, uint64_t mono_ms)
{
    srpc_session_t *s = id ? srpc_st_by_id(t, id) : NULL;
    if (!s)
        return NULL;
    if (srpc_keytab_key(keys, s->key_id) && !srpc_st_past_time(s, mono_ms))
        return s;
    if (s->calls != SRPC_LINE_RUNNING && (!srpc_st_needs_tomb(t, s, mono_ms) || srpc_st_tomb_free_place(t)))
        /* (running calls are still answered: it goes after; no scan for a tombstone place per datagram) */
        srpc_st_forget(t, (uint32_t)(s - t->s), mono_ms);
    return NULL;
}

int srpc_sessions_fresh(const srpc_sessions_t *t, const srpc_session_t *s, uint64_t c, uint64_t mono_ms)
{
    if (!srpc_replay_fresh(&s->win, c))
        return SRPC_DROP_AUTH_REPLAY;
    return c <= srpc_st_floor_at(t, s, mono_ms) || srpc_st_superseded(t, s, mono_ms) ? SRPC_DROP_AUTH_STALE : 0;
}

int srpc_sessions_take(srpc_sessions_t *t, srpc_session_t *s, uint64_t c, uint64_t mono_ms)
{
    srpc_st_rotate_floor(t, s, mono_ms); /* the rotations due before this datagram moves the top (due either way) */
    if (srpc_replay_take(&s->win, c) < 0)
        return SRPC_DROP_AUTH_REPLAY;
    held(t, s, mono_ms); /* a datagram taken under s: its client has s's ACCEPT */
    s->seen_ms = mono_ms;
    return 0;
}


#define REQ_MASK ((1ull << 48) - 1) /* req_ids are 48 bits (version 2's header): they wrap */

/* A line's window is a ring (core/replay.h's): req_id r's bit is r mod SRPC_V5_CALL_WINDOW (2^48 is a
 * multiple of it, so the place holds across the wrap); moving the top up clears the places it passes. */
int srpc_sessions_call_fresh(const srpc_sessions_t *t, const srpc_session_t *s, uint64_t req_id)
{
    const srpc_line_t *l = &t->lines[s->line];
    req_id &= REQ_MASK;
    if (!l->any)
        return 1;
    const uint64_t behind = (l->top - req_id) & REQ_MASK;
    if (behind > (1ull << 47)) /* ahead of the highest that ran (the page: after when (r - top) mod 2^48 < 2^47) */
        return 1;
    return behind < SRPC_V5_CALL_WINDOW && !srpc_ring_bit(l->bits, SRPC_V5_CALL_WINDOW, req_id);
}

void srpc_sessions_call_ran(srpc_sessions_t *t, const srpc_session_t *s, uint64_t req_id)
{
    srpc_line_t *l = &t->lines[s->line];
    req_id &= REQ_MASK;
    const uint64_t behind = (l->top - req_id) & REQ_MASK;
    if (!l->any || behind > (1ull << 47)) { /* a new highest: the places it passes are cleared */
        const uint64_t up = l->any ? (req_id - l->top) & REQ_MASK : SRPC_V5_CALL_WINDOW;
        srpc_ring_clear(l->bits, SRPC_V5_CALL_WINDOW, l->top + 1, up);
        l->top = req_id;
        l->any = 1;
    } else if (behind >= SRPC_V5_CALL_WINDOW) {
        return; /* too old to note (call_fresh refuses it: it cannot have started since) */
    }
    srpc_ring_set(l->bits, SRPC_V5_CALL_WINDOW, req_id);
}

int srpc_sessions_from(const srpc_session_t *s, const struct sockaddr *src)
{
    uint8_t a[SRPC_V5_ADDR_MAX];
    const size_t n = srpc_v5_addr_bytes(src, a);
    return n && n == s->addr_len && memcmp(a, s->addr, n) == 0;
}

int srpc_sessions_may_refuse(srpc_sessions_t *t, const struct sockaddr *src, uint64_t mono_ms)
{
    uint64_t h = 0;
    if (src->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)src;
        h = srpc_mix64(srpc_get64(s6->sin6_addr.s6_addr) ^ srpc_mix64(srpc_get64(s6->sin6_addr.s6_addr + 8)) ^
                       s6->sin6_port);
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)src;
        h = srpc_mix64((uint64_t)s4->sin_addr.s_addr << 16 ^ s4->sin_port);
    }
    uint64_t *last = &t->ns_last[h % SRPC_V5_NS_BUCKETS];
    const uint64_t now = mono_ms + 1; /* 0 in a bucket: never */
    if (srpc_st_age(mono_ms, t->ns_window_ms) >= 1000) {
        t->ns_window_ms = mono_ms;
        t->ns_count = 0;
    }
    if ((*last && now - *last < SRPC_V5_NO_SESSION_GAP_MS) || t->ns_count >= SRPC_V5_NO_SESSIONS_PER_S) {
        t->st.refusals_held++;
        return 0;
    }
    *last = now;
    t->ns_count++;
    t->st.refused++;
    return 1;
}
