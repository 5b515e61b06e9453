/* session_table.c: the server's table of version 5 sessions (session_table.h): buckets by id and by INIT mac1, lines and their references, tombs of sessions that may be resumed (per-key lists, room made), expiry (past their time, superseded), eviction under the per-key quota and of idle ones, init and destroy. The handshakes that fill it are sessions.c's. */
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

uint32_t srpc_st_id_bucket(const srpc_sessions_t *t, uint64_t id)
{
    return (uint32_t)srpc_mix64(id) & t->mask;
}

uint32_t srpc_st_mac_bucket(const srpc_sessions_t *t, const uint8_t mac1[16])
{
    return (uint32_t)srpc_mix64(srpc_get64(mac1)) & t->mask;
}

static uint32_t tomb_bucket(const srpc_sessions_t *t, uint64_t v)
{
    return (uint32_t)srpc_mix64(v) & t->tmask;
}

int srpc_sessions_init(srpc_sessions_t *t, uint32_t max_sessions, uint32_t handshakes_per_s)
{
    return srpc_sessions_init_tombs(t, max_sessions, max_sessions * SRPC_V5_TOMBS_PER_PLACE, handshakes_per_s);
}

int srpc_sessions_init_tombs(srpc_sessions_t *t, uint32_t max_sessions, uint32_t max_tombs, uint32_t handshakes_per_s)
{
    if (!t || max_sessions == 0 || max_sessions > (1u << 24) || max_tombs == 0 || max_tombs > (1u << 28))
        return -EINVAL;
    memset(t, 0, sizeof(*t));
    if (srpc_v5_available() < 0)
        return -ENOTSUP;
    uint32_t nb = 1;
    while (nb < 2 * max_sessions)
        nb <<= 1;
    t->s = calloc(max_sessions, sizeof(*t->s));
    t->by_id = malloc(nb * sizeof(uint32_t));
    t->by_mac = malloc(nb * sizeof(uint32_t));
    t->ns_last = calloc(SRPC_V5_NS_BUCKETS, sizeof(uint64_t));
    uint32_t tb = 1;
    while (tb < 2 * max_tombs)
        tb <<= 1;
    const uint32_t nlines = max_sessions + max_tombs; /* a session or tombstone holds one at most */
    /* (calloc'd, and handed out below a high-water mark before any freed one is taken again: pages
     * never reached cost nothing; a reviewer measured 46 MB resident when a free list was threaded
     * through every place here) */
    t->lines = calloc(nlines, sizeof(*t->lines));
    t->tombs = calloc(max_tombs, sizeof(*t->tombs));
    t->tomb_by_id = malloc(tb * sizeof(uint32_t));
    t->tomb_by_mac = malloc(tb * sizeof(uint32_t));
    if (!t->s || !t->by_id || !t->by_mac || !t->ns_last || !t->lines || !t->tombs || !t->tomb_by_id ||
        !t->tomb_by_mac) {
        srpc_sessions_destroy(t);
        return -ENOMEM;
    }
    memset(t->by_id, 0xff, nb * sizeof(uint32_t));
    memset(t->by_mac, 0xff, nb * sizeof(uint32_t));
    memset(t->tomb_by_id, 0xff, tb * sizeof(uint32_t));
    memset(t->tomb_by_mac, 0xff, tb * sizeof(uint32_t));
    t->mask = nb - 1;
    t->tmask = tb - 1;
    t->cap = max_sessions;
    t->tomb_cap = max_tombs;
    for (uint32_t i = 0; i < max_sessions; i++)
        t->s[i].next_id = i + 1 < max_sessions ? i + 1 : SRPC_SESS_NONE;
    t->nlines = nlines;
    t->free_head = 0;
    t->tomb_free = SRPC_SESS_NONE; /* (then tomb_hw, line_hw: never used yet) */
    t->line_free = SRPC_SESS_NONE;
    t->handshakes_per_s = handshakes_per_s ? handshakes_per_s : SRPC_V5_HANDSHAKES_PER_S;
    t->stale_ms = SRPC_DEF_REPLY_CACHE_US / 2000;
    t->key_quota = max_sessions / 4 > 2 ? max_sessions / 4 : 2;
    t->skew_ms = SRPC_DEF_AUTH_SKEW_MS;
    t->tomb_key_quota = max_tombs / 4 > 1 ? max_tombs / 4 : 1;
    return 0;
}

void srpc_sessions_destroy(srpc_sessions_t *t)
{
    if (!t)
        return;
    if (t->s)
        srpc_auth_wipe(t->s, (size_t)t->cap * sizeof(*t->s));
    if (t->tombs)
        srpc_auth_wipe(t->tombs, (size_t)t->tomb_hw * sizeof(*t->tombs));
    srpc_auth_wipe(t->cookie_cur, sizeof(t->cookie_cur));
    srpc_auth_wipe(t->cookie_prev, sizeof(t->cookie_prev));
    free(t->s);
    free(t->by_id);
    free(t->by_mac);
    free(t->ns_last);
    free(t->lines);
    free(t->tombs);
    free(t->tomb_by_id);
    free(t->tomb_by_mac);
    memset(t, 0, sizeof(*t));
}

/* Takes place i out of the chain at *head linked by the field at offset off. */
static void unlink_at(srpc_sessions_t *t, uint32_t *head, uint32_t i, int by_mac)
{
    for (uint32_t *p = head; *p != SRPC_SESS_NONE; p = by_mac ? &t->s[*p].next_mac : &t->s[*p].next_id)
        if (*p == i) {
            *p = by_mac ? t->s[i].next_mac : t->s[i].next_id;
            return;
        }
}

/* How long ago then was, at now; 0 when then is later (a time read before another that stamped
 * then: an age never wraps into a huge one). */
uint64_t srpc_st_age(uint64_t now, uint64_t then)
{
    return now > then ? now - then : 0;
}

int srpc_st_past_time(const srpc_session_t *s, uint64_t mono_ms)
{
    return srpc_st_age(mono_ms, s->born_ms) > SRPC_V5_REJECT_AFTER_MS || srpc_st_age(mono_ms, s->seen_ms) > SRPC_V5_REJECT_AFTER_MS;
}

/* One reference to line i dropped: with the last (no session or tombstone holds it) its calls'
 * window goes. */
static void line_unref(srpc_sessions_t *t, uint32_t i)
{
    srpc_line_t *l = &t->lines[i];
    if (--l->refs == 0) {
        l->refs = t->line_free;
        t->line_free = i;
    }
}

/* A new line (one reference, nothing ran): there always is one, as lines in use <= sessions +
 * tombstones < cap + tomb_cap (a session place is free when one is taken). */
uint32_t srpc_st_line_new(srpc_sessions_t *t)
{
    uint32_t i = t->line_free;
    if (i != SRPC_SESS_NONE)
        t->line_free = t->lines[i].refs;
    else
        i = t->line_hw++;
    assert(i < t->nlines);
    memset(&t->lines[i], 0, sizeof(t->lines[i]));
    t->lines[i].refs = 1;
    return i;
}

/* Whether a tombstone place is free now (without freeing one). */
int srpc_st_tomb_free_place(const srpc_sessions_t *t)
{
    return t->tomb_free != SRPC_SESS_NONE || t->tomb_hw < t->tomb_cap;
}

srpc_tomb_t *srpc_st_tomb_by_id(const srpc_sessions_t *t, uint64_t id)
{
    for (uint32_t i = t->tomb_by_id[tomb_bucket(t, id)]; i != SRPC_SESS_NONE; i = t->tombs[i].next)
        if (t->tombs[i].id == id)
            return &t->tombs[i];
    return NULL;
}

srpc_tomb_t *srpc_st_tomb_by_mac1(const srpc_sessions_t *t, const uint8_t mac1[16])
{
    for (uint32_t i = t->tomb_by_mac[tomb_bucket(t, srpc_get64(mac1))]; i != SRPC_SESS_NONE; i = t->tombs[i].next_mac)
        if (memcmp(t->tombs[i].mac1, mac1, 16) == 0)
            return &t->tombs[i];
    return NULL;
}

/* Until when a resume naming a session born (its ACCEPT) at born_ms may still come (tunables.h):
 * with the largest skew seen so far, so a key table reloaded with a larger one extends it. */
static uint64_t resume_until(const srpc_sessions_t *t, uint64_t born_ms)
{
    return born_ms + SRPC_V5_PREV_MAX_MS + SRPC_V5_HANDSHAKE_MAX_MS + 2 * (uint64_t)t->skew_ms;
}

/* Key key_id's place in the tombstones-per-key counts (open addressing; a full map, with more keys
 * holding tombstones than SRPC_TOMB_KEYS, has none for a new key, whose count then reads 0). */
static uint32_t *key_tombs(srpc_sessions_t *t, uint32_t key_id, int add)
{
    for (uint32_t n = 0, i = (uint32_t)srpc_mix64(key_id) % SRPC_TOMB_KEYS; n < SRPC_TOMB_KEYS;
         n++, i = (i + 1) % SRPC_TOMB_KEYS) {
        if (t->tomb_keys[i].key_id == key_id && t->tomb_keys[i].used)
            return &t->tomb_keys[i].n;
        if (!t->tomb_keys[i].used) {
            if (!add)
                return NULL;
            t->tomb_keys[i].used = 1; /* (kept once used: the probe sequences stay whole) */
            t->tomb_keys[i].key_id = key_id;
            t->tomb_keys[i].n = 0;
            return &t->tomb_keys[i].n;
        }
    }
    return NULL;
}

/* Whether session s, needing a tombstone, may have one by its key's quota: a quarter of the
 * places once half are taken. */
static int key_may_bury(srpc_sessions_t *t, const srpc_session_t *s)
{
    if (2u * t->tombs_used < t->tomb_cap)
        return 1;
    const uint32_t *n = key_tombs(t, s->key_id, 0);
    return !n || *n < t->tomb_key_quota;
}

/* Whether forgetting session s at mono_ms leaves a tombstone: its line has calls in the call
 * table, or ran calls and a resume naming s may still come, which must follow the line, whose
 * window knows what ran (an outside attacker, stop 65, had a call's reply pushed out of the cache,
 * and with it the tombstone, and the call's resend ran again on a new line). */
int srpc_st_needs_tomb(const srpc_sessions_t *t, const srpc_session_t *s, uint64_t mono_ms)
{
    return s->calls != SRPC_LINE_IDLE || (t->lines[s->line].any && mono_ms <= resume_until(t, s->born_ms));
}

static void unbury(srpc_sessions_t *t, uint32_t i);

/* 1 when a tombstone place is free, if need be by freeing the oldest tombstone of a session moved
 * on from (its client was seen holding a later session of its line, which it names when it
 * resumes: only a client that resumes from an older session than its current one, against the
 * page, loses it); 0 when there is none such. Not merely a line another session also holds: that
 * one may be a session its client never had (an INIT raced from a spoofed address, or a replayed
 * resume). O(places) only when they are all taken. */
static int tomb_room(srpc_sessions_t *t)
{
    if (srpc_st_tomb_free_place(t))
        return 1;
    if (t->tombs_movable == 0) /* (O(1) then: no scan per INIT while none may go) */
        return 0;
    uint32_t old = SRPC_SESS_NONE;
    for (uint32_t i = 0; i < t->tomb_hw; i++) {
        const srpc_tomb_t *b = &t->tombs[i];
        if (b->used && b->moved_on && (old == SRPC_SESS_NONE || b->seq < t->tombs[old].seq))
            old = i;
    }
    if (old == SRPC_SESS_NONE)
        return 0;
    unbury(t, old);
    t->st.tombs_freed_for_room++;
    return 1;
}

/* Session s, forgotten as needs_tomb says, leaves a tombstone with its line reference (a place is
 * free: the callers' tomb_room). */
static void bury(srpc_sessions_t *t, const srpc_session_t *s)
{
    uint32_t i = t->tomb_free;
    if (i != SRPC_SESS_NONE)
        t->tomb_free = t->tombs[i].next;
    else
        i = t->tomb_hw++;
    srpc_tomb_t *b = &t->tombs[i];
    b->id = s->keys.session;
    b->lineage = s->lineage;
    memcpy(b->c2s, s->keys.c2s, sizeof(b->c2s));
    b->key_id = s->key_id;
    b->line = s->line;
    b->calls = (uint8_t)s->calls;
    b->seq = ++t->tomb_seq;
    b->born_ms = s->born_ms;
    b->moved_on = s->moved_on_ms != 0;
    t->tombs_movable += b->moved_on;
    uint32_t *kn = key_tombs(t, b->key_id, 1);
    if (kn)
        ++*kn;
    memcpy(b->mac1, s->mac1, sizeof(b->mac1));
    b->used = 1;
    uint32_t *h = &t->tomb_by_id[tomb_bucket(t, b->id)], *hm = &t->tomb_by_mac[tomb_bucket(t, srpc_get64(b->mac1))];
    b->next = *h;
    *h = i;
    b->next_mac = *hm;
    *hm = i;
    t->tombs_used++;
    t->st.tombs++;
}

/* Frees tombstone i. */
static void unbury(srpc_sessions_t *t, uint32_t i)
{
    srpc_tomb_t *b = &t->tombs[i];
    for (uint32_t *p = &t->tomb_by_id[tomb_bucket(t, b->id)]; *p != SRPC_SESS_NONE; p = &t->tombs[*p].next)
        if (*p == i) {
            *p = b->next;
            break;
        }
    for (uint32_t *p = &t->tomb_by_mac[tomb_bucket(t, srpc_get64(b->mac1))]; *p != SRPC_SESS_NONE;
         p = &t->tombs[*p].next_mac)
        if (*p == i) {
            *p = b->next_mac;
            break;
        }
    line_unref(t, b->line);
    t->tombs_movable -= b->moved_on;
    uint32_t *kn = key_tombs(t, b->key_id, 0);
    if (kn && *kn)
        --*kn;
    srpc_auth_wipe(b, sizeof(*b));
    b->next = t->tomb_free;
    t->tomb_free = i;
    t->tombs_used--;
}

/* Forgets session i at mono_ms, leaving a tombstone where needs_tomb says (the callers made sure
 * of a place: tomb_room). */
void srpc_st_forget(srpc_sessions_t *t, uint32_t i, uint64_t mono_ms)
{
    srpc_session_t *s = &t->s[i];
    unlink_at(t, &t->by_id[srpc_st_id_bucket(t, s->keys.session)], i, 0);
    unlink_at(t, &t->by_mac[srpc_st_mac_bucket(t, s->mac1)], i, 1);
    const int tomb = srpc_st_needs_tomb(t, s, mono_ms);
    assert(!tomb || srpc_st_tomb_free_place(t));
    if (tomb && srpc_st_tomb_free_place(t)) {
        bury(t, s); /* the line's reference goes to the tombstone */
    } else {
        line_unref(t, s->line);
    }
    srpc_auth_wipe(s, sizeof(*s));
    s->next_id = t->free_head;
    t->free_head = i;
    t->used--;
    t->st.expired++;
}


/* The floor as it is at mono_ms: rotated every stale_ms / 2 (floor <- pending <- the window's
 * top), the rotations due since rot_ms counted by the time, not by who ran them: none is run
 * between datagrams taken but by the sweep, once a second, which is later than stale_ms / 2 when
 * the reply cache is short. A rotation is run when a datagram is taken once half a period has
 * passed, so no take moved the top since the first rotation due: two due, the floor is the top. */
uint64_t srpc_st_floor_at(const srpc_sessions_t *t, const srpc_session_t *s, uint64_t mono_ms)
{
    const uint64_t half = t->stale_ms / 2, a = srpc_st_age(mono_ms, s->rot_ms);
    return a < half ? s->floor : a < 2 * half ? s->pending : s->win.top;
}

/* The rotations due, run (by the sweep, and before a datagram is taken: the top then is the one
 * they saw). */
void srpc_st_rotate_floor(const srpc_sessions_t *t, srpc_session_t *s, uint64_t mono_ms)
{
    if (srpc_st_age(mono_ms, s->rot_ms) >= t->stale_ms / 2) {
        s->floor = srpc_st_floor_at(t, s, mono_ms);
        s->pending = s->win.top;
        s->rot_ms = mono_ms;
    }
}

/* Its client seen under a session that follows it for stale_ms: nothing of it is taken any more. */
int srpc_st_superseded(const srpc_sessions_t *t, const srpc_session_t *s, uint64_t mono_ms)
{
    return s->moved_on_ms && srpc_st_age(mono_ms, s->moved_on_ms) >= t->stale_ms;
}

/* The sessions' half of srpc_sessions_expire (an INIT in a full table runs it: not the scan of
 * the tombstones, which is the sweep's, once a second). */
void srpc_st_expire_sessions(srpc_sessions_t *t, uint64_t mono_ms)
{
    int room = -1; /* tomb_room's answer: asked when needed, again once a place is taken */
    for (uint32_t i = 0; i < t->cap && t->used; i++) {
        srpc_session_t *s = &t->s[i];
        if (!s->used)
            continue;
        if (srpc_st_superseded(t, s, mono_ms) || (s->calls != SRPC_LINE_RUNNING && srpc_st_past_time(s, mono_ms))) {
            if (!srpc_st_needs_tomb(t, s, mono_ms)) {
                srpc_st_forget(t, i, mono_ms);
                continue;
            }
            if (room < 0)
                room = tomb_room(t);
            if (room && key_may_bury(t, s)) { /* else kept (refused all the same) until a place is free */
                srpc_st_forget(t, i, mono_ms);
                room = -1;
                continue;
            }
        }
        srpc_st_rotate_floor(t, s, mono_ms);
    }
}

void srpc_sessions_expire(srpc_sessions_t *t, uint64_t mono_ms)
{
    for (uint32_t i = 0, seen = 0; i < t->tomb_hw && seen < t->tombs_used; i++) { /* first: their places may be
                                                                                     needed below */
        const srpc_tomb_t *b = &t->tombs[i];
        if (!b->used)
            continue;
        if (b->calls == SRPC_LINE_IDLE && (mono_ms > resume_until(t, b->born_ms) || !t->lines[b->line].any))
            unbury(t, i); /* no call of its line left, and no resume naming it can come, or none ever ran */
        else
            seen++;
    }
    srpc_st_expire_sessions(t, mono_ms);
}

/* Forgets the session followed by another longest ago (its line's calls go on under that one):
 * 1, or 0 when there is none. */
/* Of two candidates to forget, plain (needs no tombstone) and tombed (needs one), either may be
 * SRPC_SESS_NONE: tombed when tombed_first (it is the better) or there is no plain, and a
 * tombstone place is there (tomb_room, asked only then: a scan when the places are all taken);
 * else plain. */
static uint32_t choose(srpc_sessions_t *t, uint32_t plain, uint32_t tombed, int tombed_first)
{
    if (tombed != SRPC_SESS_NONE && (plain == SRPC_SESS_NONE || tombed_first) && tomb_room(t))
        return tombed;
    return plain;
}

/* Candidate i better than the best so far (*best) by an earlier stamp (stamp of each). */
static void better(const srpc_sessions_t *t, uint32_t *best, uint32_t i, uint64_t (*stamp)(const srpc_session_t *))
{
    if (*best == SRPC_SESS_NONE || stamp(&t->s[i]) < stamp(&t->s[*best]))
        *best = i;
}

/* Session i as a candidate to forget: into *plain when it needs no tombstone, into *tombed when it
 * needs one and its key may have it (key_may_bury), by the earlier stamp. */
static void candidate(srpc_sessions_t *t, uint32_t i, uint64_t mono_ms, uint32_t *plain, uint32_t *tombed,
                      uint64_t (*stamp)(const srpc_session_t *))
{
    const srpc_session_t *s = &t->s[i];
    if (!srpc_st_needs_tomb(t, s, mono_ms))
        better(t, plain, i, stamp);
    else if (key_may_bury(t, s))
        better(t, tombed, i, stamp);
}

static uint64_t superseded_at(const srpc_session_t *s)
{
    return s->superseded_ms;
}

static uint64_t seen_at(const srpc_session_t *s)
{
    return s->seen_ms;
}

int srpc_st_forget_superseded(srpc_sessions_t *t, uint32_t key_id, int any_key, uint32_t keep, uint64_t mono_ms)
{
    uint32_t plain = SRPC_SESS_NONE, tombed = SRPC_SESS_NONE;
    for (uint32_t i = 0; i < t->cap; i++) {
        const srpc_session_t *s = &t->s[i];
        if (s->used && i != keep && s->superseded_ms && (any_key || s->key_id == key_id))
            candidate(t, i, mono_ms, &plain, &tombed, superseded_at);
    }
    const uint32_t old = choose(t, plain, tombed,
                                tombed != SRPC_SESS_NONE && plain != SRPC_SESS_NONE &&
                                    t->s[tombed].superseded_ms < t->s[plain].superseded_ms);
    if (old == SRPC_SESS_NONE)
        return 0;
    srpc_st_forget(t, old, mono_ms);
    return 1;
}

void srpc_sessions_mark(srpc_sessions_t *t, int (*busy)(void *ctx, uint64_t line), void *ctx)
{
    for (uint32_t i = 0; i < t->cap; i++)
        if (t->s[i].used)
            t->s[i].calls = (uint32_t)busy(ctx, t->s[i].lineage);
    for (uint32_t i = 0, seen = 0; i < t->tomb_hw && seen < t->tombs_used; i++)
        if (t->tombs[i].used) {
            t->tombs[i].calls = (uint8_t)busy(ctx, t->tombs[i].lineage);
            seen++;
        }
}

srpc_session_t *srpc_st_by_id(const srpc_sessions_t *t, uint64_t id)
{
    for (uint32_t i = t->by_id[srpc_st_id_bucket(t, id)]; i != SRPC_SESS_NONE; i = t->s[i].next_id)
        if (t->s[i].keys.session == id)
            return &t->s[i];
    return NULL;
}

srpc_session_t *srpc_st_by_mac1(const srpc_sessions_t *t, const uint8_t mac1[16])
{
    for (uint32_t i = t->by_mac[srpc_st_mac_bucket(t, mac1)]; i != SRPC_SESS_NONE; i = t->s[i].next_mac)
        if (memcmp(t->s[i].mac1, mac1, 16) == 0)
            return &t->s[i];
    return NULL;
}

/* Whether key_id holds its quota of places: if so, its longest-silent session without calls
 * (silent SRPC_V5_QUOTA_IDLE_MS at least) is forgotten to make room, and 0 returned; 1 when it
 * has none such (the INIT is then unanswered). O(places): only once the table is half full. */
int srpc_st_quota_reached(srpc_sessions_t *t, uint32_t key_id, uint64_t mono_ms, uint32_t keep)
{
    uint32_t mine = 0, plain = SRPC_SESS_NONE, tombed = SRPC_SESS_NONE;
    for (uint32_t i = 0; i < t->cap; i++) {
        const srpc_session_t *s = &t->s[i];
        if (!s->used || s->key_id != key_id)
            continue;
        mine++;
        if (i != keep && s->calls != SRPC_LINE_RUNNING && srpc_st_age(mono_ms, s->seen_ms) >= SRPC_V5_QUOTA_IDLE_MS)
            candidate(t, i, mono_ms, &plain, &tombed, seen_at);
    }
    if (mine < t->key_quota)
        return 0;
    if (srpc_st_forget_superseded(t, key_id, 0, keep, mono_ms)) { /* one its client has moved on from, first */
        t->st.key_quota++;
        return 0;
    }
    const uint32_t idle = choose(t, plain, tombed,
                                 tombed != SRPC_SESS_NONE && plain != SRPC_SESS_NONE &&
                                     t->s[tombed].seen_ms < t->s[plain].seen_ms);
    if (idle == SRPC_SESS_NONE)
        return 1;
    srpc_st_forget(t, idle, mono_ms);
    t->st.key_quota++;
    return 0;
}

/* Forgets the longest-silent session without calls, of any key, silent SRPC_V5_QUOTA_IDLE_MS at
 * least (a table full of short-lived clients' sessions makes room for new ones): 1, or 0 when
 * there is none. O(places): only when the table is full. */
int srpc_st_forget_idle(srpc_sessions_t *t, uint64_t mono_ms, uint32_t keep)
{
    uint32_t plain = SRPC_SESS_NONE, tombed = SRPC_SESS_NONE;
    for (uint32_t i = 0; i < t->cap; i++) {
        const srpc_session_t *s = &t->s[i];
        if (s->used && i != keep && s->calls != SRPC_LINE_RUNNING && srpc_st_age(mono_ms, s->seen_ms) >= SRPC_V5_QUOTA_IDLE_MS)
            candidate(t, i, mono_ms, &plain, &tombed, seen_at);
    }
    const uint32_t idle = choose(t, plain, tombed,
                                 tombed != SRPC_SESS_NONE && plain != SRPC_SESS_NONE &&
                                     t->s[tombed].seen_ms < t->s[plain].seen_ms);
    if (idle == SRPC_SESS_NONE)
        return 0;
    srpc_st_forget(t, idle, mono_ms);
    return 1;
}

/* The cookie secrets, the current one replaced every SRPC_V5_COOKIE_ROTATE_MS. */
