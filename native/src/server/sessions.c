/* sessions.c: the server's version 5 sessions (sessions.h): a table by id and by their INIT's mac1, handshakes answered or asked for a cookie, NO_SESSION's rate. */
#include "server/sessions.h"

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

static uint32_t id_bucket(const srpc_sessions_t *t, uint64_t id)
{
    return (uint32_t)srpc_mix64(id) & t->mask;
}

static uint32_t mac_bucket(const srpc_sessions_t *t, const uint8_t mac1[16])
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
static uint64_t age(uint64_t now, uint64_t then)
{
    return now > then ? now - then : 0;
}

static int past_time(const srpc_session_t *s, uint64_t mono_ms)
{
    return age(mono_ms, s->born_ms) > SRPC_V5_REJECT_AFTER_MS || age(mono_ms, s->seen_ms) > SRPC_V5_REJECT_AFTER_MS;
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
static uint32_t line_new(srpc_sessions_t *t)
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
static int tomb_free_place(const srpc_sessions_t *t)
{
    return t->tomb_free != SRPC_SESS_NONE || t->tomb_hw < t->tomb_cap;
}

static srpc_tomb_t *tomb_by_id(const srpc_sessions_t *t, uint64_t id)
{
    for (uint32_t i = t->tomb_by_id[tomb_bucket(t, id)]; i != SRPC_SESS_NONE; i = t->tombs[i].next)
        if (t->tombs[i].id == id)
            return &t->tombs[i];
    return NULL;
}

static srpc_tomb_t *tomb_by_mac1(const srpc_sessions_t *t, const uint8_t mac1[16])
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
static int needs_tomb(const srpc_sessions_t *t, const srpc_session_t *s, uint64_t mono_ms)
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
    if (tomb_free_place(t))
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
static void forget(srpc_sessions_t *t, uint32_t i, uint64_t mono_ms)
{
    srpc_session_t *s = &t->s[i];
    unlink_at(t, &t->by_id[id_bucket(t, s->keys.session)], i, 0);
    unlink_at(t, &t->by_mac[mac_bucket(t, s->mac1)], i, 1);
    const int tomb = needs_tomb(t, s, mono_ms);
    assert(!tomb || tomb_free_place(t));
    if (tomb && tomb_free_place(t)) {
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
static uint64_t floor_at(const srpc_sessions_t *t, const srpc_session_t *s, uint64_t mono_ms)
{
    const uint64_t half = t->stale_ms / 2, a = age(mono_ms, s->rot_ms);
    return a < half ? s->floor : a < 2 * half ? s->pending : s->win.top;
}

/* The rotations due, run (by the sweep, and before a datagram is taken: the top then is the one
 * they saw). */
static void rotate_floor(const srpc_sessions_t *t, srpc_session_t *s, uint64_t mono_ms)
{
    if (age(mono_ms, s->rot_ms) >= t->stale_ms / 2) {
        s->floor = floor_at(t, s, mono_ms);
        s->pending = s->win.top;
        s->rot_ms = mono_ms;
    }
}

/* Its client seen under a session that follows it for stale_ms: nothing of it is taken any more. */
static int superseded(const srpc_sessions_t *t, const srpc_session_t *s, uint64_t mono_ms)
{
    return s->moved_on_ms && age(mono_ms, s->moved_on_ms) >= t->stale_ms;
}

/* The sessions' half of srpc_sessions_expire (an INIT in a full table runs it: not the scan of
 * the tombstones, which is the sweep's, once a second). */
static void expire_sessions(srpc_sessions_t *t, uint64_t mono_ms)
{
    int room = -1; /* tomb_room's answer: asked when needed, again once a place is taken */
    for (uint32_t i = 0; i < t->cap && t->used; i++) {
        srpc_session_t *s = &t->s[i];
        if (!s->used)
            continue;
        if (superseded(t, s, mono_ms) || (s->calls != SRPC_LINE_RUNNING && past_time(s, mono_ms))) {
            if (!needs_tomb(t, s, mono_ms)) {
                forget(t, i, mono_ms);
                continue;
            }
            if (room < 0)
                room = tomb_room(t);
            if (room && key_may_bury(t, s)) { /* else kept (refused all the same) until a place is free */
                forget(t, i, mono_ms);
                room = -1;
                continue;
            }
        }
        rotate_floor(t, s, mono_ms);
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
    expire_sessions(t, mono_ms);
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
    if (!needs_tomb(t, s, mono_ms))
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

static int forget_superseded(srpc_sessions_t *t, uint32_t key_id, int any_key, uint32_t keep, uint64_t mono_ms)
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
    forget(t, old, mono_ms);
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

static srpc_session_t *by_id(const srpc_sessions_t *t, uint64_t id)
{
    for (uint32_t i = t->by_id[id_bucket(t, id)]; i != SRPC_SESS_NONE; i = t->s[i].next_id)
        if (t->s[i].keys.session == id)
            return &t->s[i];
    return NULL;
}

static srpc_session_t *by_mac1(const srpc_sessions_t *t, const uint8_t mac1[16])
{
    for (uint32_t i = t->by_mac[mac_bucket(t, mac1)]; i != SRPC_SESS_NONE; i = t->s[i].next_mac)
        if (memcmp(t->s[i].mac1, mac1, 16) == 0)
            return &t->s[i];
    return NULL;
}

/* Whether key_id holds its quota of places: if so, its longest-silent session without calls
 * (silent SRPC_V5_QUOTA_IDLE_MS at least) is forgotten to make room, and 0 returned; 1 when it
 * has none such (the INIT is then unanswered). O(places): only once the table is half full. */
static int quota_reached(srpc_sessions_t *t, uint32_t key_id, uint64_t mono_ms, uint32_t keep)
{
    uint32_t mine = 0, plain = SRPC_SESS_NONE, tombed = SRPC_SESS_NONE;
    for (uint32_t i = 0; i < t->cap; i++) {
        const srpc_session_t *s = &t->s[i];
        if (!s->used || s->key_id != key_id)
            continue;
        mine++;
        if (i != keep && s->calls != SRPC_LINE_RUNNING && age(mono_ms, s->seen_ms) >= SRPC_V5_QUOTA_IDLE_MS)
            candidate(t, i, mono_ms, &plain, &tombed, seen_at);
    }
    if (mine < t->key_quota)
        return 0;
    if (forget_superseded(t, key_id, 0, keep, mono_ms)) { /* one its client has moved on from, first */
        t->st.key_quota++;
        return 0;
    }
    const uint32_t idle = choose(t, plain, tombed,
                                 tombed != SRPC_SESS_NONE && plain != SRPC_SESS_NONE &&
                                     t->s[tombed].seen_ms < t->s[plain].seen_ms);
    if (idle == SRPC_SESS_NONE)
        return 1;
    forget(t, idle, mono_ms);
    t->st.key_quota++;
    return 0;
}

/* Forgets the longest-silent session without calls, of any key, silent SRPC_V5_QUOTA_IDLE_MS at
 * least (a table full of short-lived clients' sessions makes room for new ones): 1, or 0 when
 * there is none. O(places): only when the table is full. */
static int forget_idle(srpc_sessions_t *t, uint64_t mono_ms, uint32_t keep)
{
    uint32_t plain = SRPC_SESS_NONE, tombed = SRPC_SESS_NONE;
    for (uint32_t i = 0; i < t->cap; i++) {
        const srpc_session_t *s = &t->s[i];
        if (s->used && i != keep && s->calls != SRPC_LINE_RUNNING && age(mono_ms, s->seen_ms) >= SRPC_V5_QUOTA_IDLE_MS)
            candidate(t, i, mono_ms, &plain, &tombed, seen_at);
    }
    const uint32_t idle = choose(t, plain, tombed,
                                 tombed != SRPC_SESS_NONE && plain != SRPC_SESS_NONE &&
                                     t->s[tombed].seen_ms < t->s[plain].seen_ms);
    if (idle == SRPC_SESS_NONE)
        return 0;
    forget(t, idle, mono_ms);
    return 1;
}

/* The cookie secrets, the current one replaced every SRPC_V5_COOKIE_ROTATE_MS. */
static void rotate_cookies(srpc_sessions_t *t, uint64_t mono_ms)
{
    if (t->cookie_ms && age(mono_ms, t->cookie_ms) < SRPC_V5_COOKIE_ROTATE_MS)
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
    srpc_session_t *prev = by_id(t, s->follows);
    srpc_tomb_t *b = prev ? NULL : tomb_by_id(t, s->follows);
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
    const srpc_session_t *seen = by_mac1(t, mac1);
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
    const srpc_tomb_t *buried = seen ? NULL : tomb_by_mac1(t, mac1);
    if (buried && buried->key_id == f.key_id)
        return SRPC_DROP_AUTH_STALE; /* an INIT seen before whose session is forgotten (a tombstone's): a
                                        replay of it made a session its replayer cannot use, on the
                                        line of the session it resumed (an outside attacker, stop 65) */
    if (age(mono_ms, t->hs_window_ms) >= 1000) {
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
    const srpc_session_t *named = f.prev_session ? by_id(t, f.prev_session) : NULL;
    const uint32_t keep = named ? (uint32_t)(named - t->s) : SRPC_SESS_NONE;
    if (t->free_head == SRPC_SESS_NONE)
        expire_sessions(t, mono_ms);
    if (2u * t->used >= t->cap && quota_reached(t, f.key_id, mono_ms, keep)) {
        t->st.key_quota++;
        return SRPC_DROP_TABLE_FULL; /* this key's own sessions are all busy or recent */
    }
    if (t->free_head == SRPC_SESS_NONE && !forget_superseded(t, 0, 1, keep, mono_ms)) /* one a client has moved on from */
        forget_idle(t, mono_ms, keep); /* else the longest silent without calls: short-lived clients' */
    if (t->free_head == SRPC_SESS_NONE) { /* no session with calls, or still young, is dropped for room */
        t->st.full++;
        return SRPC_DROP_TABLE_FULL;
    }
    uint64_t id;
    do
        srpc_auth_random(&id, sizeof(id));
    while (id == 0 || by_id(t, id) || tomb_by_id(t, id));
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
        srpc_session_t *prev = by_id(t, f.prev_session);
        const srpc_tomb_t *b = prev ? NULL : tomb_by_id(t, f.prev_session);
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
        s->line = line_new(t);
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
    uint32_t *hi = &t->by_id[id_bucket(t, id)], *hm = &t->by_mac[mac_bucket(t, mac1)];
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
    srpc_session_t *s = id ? by_id(t, id) : NULL;
    if (!s)
        return NULL;
    if (srpc_keytab_key(keys, s->key_id) && !past_time(s, mono_ms))
        return s;
    if (s->calls != SRPC_LINE_RUNNING && (!needs_tomb(t, s, mono_ms) || tomb_free_place(t)))
        /* (running calls are still answered: it goes after; no scan for a tombstone place per datagram) */
        forget(t, (uint32_t)(s - t->s), mono_ms);
    return NULL;
}

int srpc_sessions_fresh(const srpc_sessions_t *t, const srpc_session_t *s, uint64_t c, uint64_t mono_ms)
{
    if (!srpc_replay_fresh(&s->win, c))
        return SRPC_DROP_AUTH_REPLAY;
    return c <= floor_at(t, s, mono_ms) || superseded(t, s, mono_ms) ? SRPC_DROP_AUTH_STALE : 0;
}

int srpc_sessions_take(srpc_sessions_t *t, srpc_session_t *s, uint64_t c, uint64_t mono_ms)
{
    rotate_floor(t, s, mono_ms); /* the rotations due before this datagram moves the top (due either way) */
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
    if (age(mono_ms, t->ns_window_ms) >= 1000) {
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
