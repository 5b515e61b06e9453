/* keytab.c: the server's key table (keytab.h): keys by id, their tags and times, one replay window per sender of a key, the functions a key may call, and windows handed over across reloads. */
#include "server/keytab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/mix64.h"
#include "core/replay.h"
#include "core/tunables.h"
#include "splitrpc_server.h"

/* One sender's window (core/replay.h) and when it was last heard. */
struct srpc_sender_win {
    uint64_t sender; /* 0: a free place */
    uint64_t seen_ms; /* monotonic ms of its last datagram taken */
    uint64_t time_hi; /* the newest time (wall ms, whole) of a datagram it took */
    srpc_replay_t win;
};

int srpc_keytab_create(uint32_t max_senders, uint32_t skew_ms, srpc_keytab_t **out)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    if (max_senders == 0)
        max_senders = SRPC_DEF_AUTH_SENDERS;
    if (skew_ms == 0)
        skew_ms = SRPC_DEF_AUTH_SKEW_MS;
    if (max_senders > SRPC_MAX_AUTH_SENDERS || (max_senders & (max_senders - 1)) || skew_ms > SRPC_MAX_AUTH_SKEW_MS)
        return -EINVAL;
    if (srpc_auth_available() < 0)
        return -ENOTSUP;
    srpc_keytab_t *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->max_senders = max_senders;
    t->skew_ms = skew_ms;
    t->forget_ms = 2ull * skew_ms;
    *out = t;
    return 0;
}

static void key_free(srpc_key_t *k)
{
    free(k->funcs);
    free(k->win);
    srpc_auth_wipe(k->secret, sizeof(k->secret)); /* not left in freed memory */
}

void srpc_keytab_destroy(srpc_keytab_t *t)
{
    if (!t)
        return;
    for (uint32_t i = 0; i < t->n; i++)
        key_free(&t->keys[i]);
    free(t->keys);
    free(t);
}

static int cmp_u16(const void *a, const void *b)
{
    return (int)*(const uint16_t *)a - (int)*(const uint16_t *)b;
}

/* Room for one more key. */
static int grow(srpc_keytab_t *t)
{
    if (t->n < t->cap)
        return 0;
    uint32_t cap = t->cap ? t->cap * 2 : 16;
    srpc_key_t *k = realloc(t->keys, (size_t)cap * sizeof(*k));
    if (!k)
        return -ENOMEM;
    t->keys = k;
    t->cap = cap;
    return 0;
}

int srpc_keytab_add(srpc_keytab_t *t, uint32_t key_id, const uint8_t *secret, size_t len, uint64_t expires_ms,
                    int all_funcs, const uint16_t *funcs, uint32_t nfuncs)
{
    if (!t || key_id == 0 || !secret || len != SRPC_AUTH_SECRET_LEN || (!all_funcs && nfuncs && !funcs) ||
        nfuncs > 65536)
        return -EINVAL;
    if (t->n >= SRPC_AUTH_MAX_KEYS)
        return -ENOSPC;
    if (grow(t) < 0)
        return -ENOMEM;
    srpc_key_t k = {.id = key_id, .all_funcs = all_funcs != 0, .expires_ms = expires_ms};
    memcpy(k.secret, secret, len);
    if (!all_funcs && nfuncs) {
        k.funcs = malloc((size_t)nfuncs * sizeof(uint16_t));
        if (!k.funcs)
            return -ENOMEM;
        memcpy(k.funcs, funcs, (size_t)nfuncs * sizeof(uint16_t));
        qsort(k.funcs, nfuncs, sizeof(uint16_t), cmp_u16);
        k.nfuncs = nfuncs;
    }
    t->keys[t->n++] = k;
    srpc_auth_wipe(k.secret, sizeof(k.secret));
    return 0;
}

int srpc_keytab_legacy_v4(srpc_keytab_t *t, int on)
{
    if (!t)
        return -EINVAL;
    t->legacy_v4 = on ? 1 : 0;
    return 0;
}

uint32_t srpc_keytab_count(const srpc_keytab_t *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; t && i < t->n; i++)
        n += !t->keys[i].removed;
    return n;
}

static int cmp_key(const void *a, const void *b)
{
    const uint32_t x = ((const srpc_key_t *)a)->id, y = ((const srpc_key_t *)b)->id;
    return x < y ? -1 : x > y;
}

int srpc_keytab_seal(srpc_keytab_t *t)
{
    if (t->n)
        qsort(t->keys, t->n, sizeof(*t->keys), cmp_key);
    for (uint32_t i = 1; i < t->n; i++)
        if (t->keys[i].id == t->keys[i - 1].id)
            return -EEXIST;
    return 0;
}

/* Key id among the first n keys of t (sorted). */
static srpc_key_t *find(const srpc_keytab_t *t, uint32_t n, uint32_t id)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (t->keys[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && t->keys[lo].id == id ? &t->keys[lo] : NULL;
}

srpc_key_t *srpc_keytab_key(const srpc_keytab_t *t, uint32_t key_id)
{
    srpc_key_t *k = t ? find(t, t->n, key_id) : NULL;
    return k && !k->removed ? k : NULL;
}

int srpc_keytab_verify(const srpc_keytab_t *t, const uint8_t *hdr, const uint8_t *data, uint32_t dlen,
                       const uint8_t *trailer, uint64_t now_ms, srpc_key_t **key, srpc_auth_fields_t *f)
{
    srpc_auth_fields(trailer, f);
    srpc_key_t *k = find(t, t->n, f->key_id);
    if (!k || k->removed)
        return SRPC_DROP_AUTH_UNKNOWN_KEY;
    if (!srpc_auth_check(k->secret, hdr, data, dlen, trailer))
        return SRPC_DROP_AUTH_BAD_TAG; /* before anything else of it is believed */
    const int32_t off = (int32_t)(f->time_ms - (uint32_t)now_ms); /* the clock mod 2^32 */
    if (off > (int32_t)t->skew_ms || off < -(int32_t)t->skew_ms)
        return SRPC_DROP_AUTH_STALE;
    if (f->sender == 0 || f->counter == 0)
        return SRPC_DROP_AUTH_REPLAY; /* never sent by a sender of this protocol */
    *key = k;
    return 0;
}

/* The place of sender in k's windows, or NULL; *room: the first place a new sender may take
 * (free, or silent past forget on the monotonic clock), or NULL. Double hashing (a step of its
 * own per sender), so that runs of taken places do not merge as with linear probing. Places are
 * never emptied, so nothing of a sender lies past a free one. */
static srpc_sender_win_t *probe(const srpc_key_t *k, uint64_t sender, uint64_t mono_ms, uint64_t forget,
                                srpc_sender_win_t **room)
{
    const uint32_t mask = k->nwin - 1;
    const uint64_t h = srpc_mix64(sender);
    const uint32_t home = (uint32_t)h & mask, step = (uint32_t)(h >> 32) | 1u; /* odd: visits every place */
    *room = NULL;
    for (uint32_t i = 0; i < SRPC_AUTH_PROBE && i <= mask; i++) {
        srpc_sender_win_t *w = &k->win[(home + i * step) & mask];
        if (w->sender == sender)
            return w;
        if (w->sender == 0) {
            if (!*room)
                *room = w;
            return NULL;
        }
        if (!*room && mono_ms - w->seen_ms > forget) /* monotonic: never negative */
            *room = w;
    }
    return NULL;
}

/* Doubles k's windows (up to max): every sender moved to its place in the larger table (none
 * lost: a sender that would find no place keeps the old table). 0, or -ENOMEM / -ENOSPC. */
static int grow_windows(srpc_key_t *k, uint32_t max)
{
    if (k->nwin >= max)
        return -ENOSPC;
    const uint32_t n = k->nwin * 2, mask = n - 1;
    srpc_sender_win_t *w = calloc(n, sizeof(*w));
    if (!w)
        return -ENOMEM;
    for (uint32_t i = 0; i < k->nwin; i++) {
        const srpc_sender_win_t *o = &k->win[i];
        if (!o->sender)
            continue;
        const uint64_t h = srpc_mix64(o->sender);
        const uint32_t step = (uint32_t)(h >> 32) | 1u; /* probe's sequence */
        uint32_t at = (uint32_t)h & mask, j = 0;
        while (w[at].sender && ++j < SRPC_AUTH_PROBE)
            at = (at + step) & mask;
        if (w[at].sender) { /* (a run this long in a table under half full: keep the old one) */
            free(w);
            return -ENOSPC;
        }
        w[at] = *o;
    }
    free(k->win);
    k->win = w;
    k->nwin = n;
    return 0;
}

int srpc_keytab_commit(srpc_keytab_t *t, srpc_key_t *key, const srpc_auth_fields_t *f, uint64_t wall_ms,
                       uint64_t mono_ms)
{
    if (!key->win) {
        const uint32_t n = t->max_senders < SRPC_AUTH_SENDERS_FIRST ? t->max_senders : SRPC_AUTH_SENDERS_FIRST;
        if (!(key->win = calloc(n, sizeof(*key->win))))
            return SRPC_DROP_AUTH_NO_ROOM;
        key->nwin = n;
        key->nused = 0;
    }
    /* The datagram's time whole: verify took it within the skew of wall_ms, mod 2^32. */
    const uint64_t time = wall_ms + (uint64_t)(int64_t)(int32_t)(f->time_ms - (uint32_t)wall_ms);
    srpc_sender_win_t *room;
    srpc_sender_win_t *w = probe(key, f->sender, mono_ms, t->forget_ms, &room);
    if (w) {
        int r = srpc_replay_take(&w->win, f->counter) == 0 ? 0 : SRPC_DROP_AUTH_REPLAY;
        if (r == 0) {
            w->seen_ms = mono_ms;
            if (time > w->time_hi)
                w->time_hi = time;
            key->last_ms = mono_ms;
        }
        return r;
    }
    /* A sender without a window: new, or forgotten. Any datagram a forgotten window took is at
     * or below the key's floor (and, while the wall clock is right, fails the time check too). */
    if (time <= key->floor_ms)
        return SRPC_DROP_AUTH_REPLAY;
    /* More than half the places taken, or none found: a larger table first (the places of
     * silent senders are reused only once it is as large as it may be). */
    if ((!room || room->sender || 2u * (key->nused + 1) > key->nwin) &&
        grow_windows(key, t->max_senders) == 0)
        probe(key, f->sender, mono_ms, t->forget_ms, &room);
    if (!room)
        return SRPC_DROP_AUTH_NO_ROOM;
    if (room->sender) {
        if (room->time_hi > key->floor_ms)
            key->floor_ms = room->time_hi; /* given up: its datagrams are refused by the floor from now */
    } else {
        key->nused++;
    }
    memset(room, 0, sizeof(*room));
    room->sender = f->sender;
    srpc_replay_take(&room->win, f->counter); /* the first of an empty window */
    room->seen_ms = mono_ms;
    room->time_hi = time;
    key->last_ms = mono_ms;
    return 0;
}

int srpc_key_allows(const srpc_key_t *key, uint16_t func_id)
{
    if (key->all_funcs || func_id >= 0xFF00)
        return 1;
    return key->nfuncs && bsearch(&func_id, key->funcs, key->nfuncs, sizeof(uint16_t), cmp_u16) != NULL;
}

void srpc_keytab_adopt(srpc_keytab_t *next, srpc_keytab_t *old, uint64_t mono_ms)
{
    if (old->forget_ms > next->forget_ms)
        next->forget_ms = old->forget_ms;
    const uint64_t keep = next->forget_ms;
    const uint32_t n0 = next->n;
    int added = 0;
    for (uint32_t i = 0; i < old->n; i++) {
        srpc_key_t *o = &old->keys[i];
        if (!o->win)
            continue;
        srpc_key_t *k = find(next, n0, o->id); /* among next's own keys: removed ones are put after n0 */
        if (k && next->max_senders == old->max_senders) {
            k->win = o->win;
            k->nwin = o->nwin;
            k->nused = o->nused;
            k->last_ms = o->last_ms;
            k->floor_ms = o->floor_ms;
            o->win = NULL;
            continue;
        }
        if (k || mono_ms - o->last_ms > keep || next->max_senders != old->max_senders || grow(next) < 0)
            continue; /* nothing to keep, or no memory to keep it: its windows go with old */
        srpc_key_t *r = &next->keys[next->n++];
        *r = (srpc_key_t){.id = o->id, .removed = 1, .win = o->win, .nwin = o->nwin, .nused = o->nused,
                          .last_ms = o->last_ms, .floor_ms = o->floor_ms};
        o->win = NULL;
        added = 1;
    }
    if (added)
        qsort(next->keys, next->n, sizeof(*next->keys), cmp_key);
}
