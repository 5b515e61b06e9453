/* sessions.c: a client's version 5 sessions and its handshake (docs/PROTOCOL-v5.md); see client/sessions.h. */
#include "client/sessions.h"

#include <errno.h>
#include <string.h>

#include "core/auth.h"
#include "core/sodium.h"
#include "core/tunables.h"

#define MS 1000000ull

int srpc_cl_v5_init(srpc_cl_v5_t *v, uint32_t key_id, const uint8_t *psk, int encrypt, uint32_t rekey_ms)
{
    if (!v || !psk || key_id == 0 || rekey_ms > SRPC_V5_CLIENT_REKEY_MS)
        return -EINVAL;
    if (srpc_v5_available() < 0)
        return -ENOTSUP;
    memset(v, 0, sizeof(*v));
    v->key_id = key_id;
    memcpy(v->psk, psk, SRPC_V5_KEY_LEN);
    v->want_encrypt = encrypt ? 1 : 0;
    v->offer_aes = (uint8_t)srpc_v5_aes_available(); /* AES-256-GCM where this CPU has AES-NI (faster) */
    v->offer_aegis = (uint8_t)srpc_v5_aegis_available(); /* AEGIS-128L where libsodium has it (faster still) */
    v->cur = -1;
    v->rekey_ns = (uint64_t)(rekey_ms ? rekey_ms : SRPC_V5_CLIENT_REKEY_MS) * MS;
    return 0;
}

void srpc_cl_v5_offer(srpc_cl_v5_t *v, unsigned mask)
{
    v->offer_aes &= (uint8_t)!!(mask & SRPC_V5_FLAG_AES);
    v->offer_aegis &= (uint8_t)!!(mask & SRPC_V5_FLAG_AEGIS);
}

void srpc_cl_v5_wipe(srpc_cl_v5_t *v)
{
    if (v)
        srpc_auth_wipe(v, sizeof(*v));
}

const srpc_cl_sess_t *srpc_cl_v5_current(srpc_cl_v5_t *v, uint64_t now_ns, int *start)
{
    *start = 0;
    if (v->cur < 0) {
        *start = !v->hs_on;
        return NULL;
    }
    const srpc_cl_sess_t *s = &v->s[v->cur];
    const uint64_t age = now_ns > s->born_ns ? now_ns - s->born_ns : 0; /* (clamped, as the server's ages) */
    if (age >= (uint64_t)SRPC_V5_CLIENT_STOP_MS * MS) { /* too old to send under: a new one first */
        *start = !v->hs_on;
        return NULL;
    }
    if (age >= v->rekey_ns && !v->hs_on) {
        *start = 1;
        v->st.rekeys++;
    }
    return s;
}

/* A new INIT of the handshake under way (a fresh ephemeral key and time; the cookie if one is
 * fresh) into v->init and out. */
static int make_init(srpc_cl_v5_t *v, uint64_t now_ns, uint8_t out[SRPC_V5_INIT_LEN])
{
    uint8_t e_pub[SRPC_V5_KEY_LEN];
    int r = srpc_v5_keypair(v->e_priv, e_pub);
    if (r < 0)
        return r;
    const int cookie = v->cookie_ns && now_ns - v->cookie_ns < (uint64_t)SRPC_V5_COOKIE_ROTATE_MS * MS;
    r = srpc_v5_init_make(v->init, v->psk, v->key_id, v->hs_id, v->e_priv, srpc_auth_now_ms64(),
                          (v->want_encrypt ? SRPC_V5_FLAG_ENCRYPT : 0) | (v->offer_aes ? SRPC_V5_FLAG_AES : 0) |
                              (v->offer_aegis ? SRPC_V5_FLAG_AEGIS : 0),
                          v->prev.session ? &v->prev : NULL,
                          cookie ? v->cookie : NULL);
    if (r < 0)
        return r;
    v->hs_sends = 1;
    v->hs_due_ns = now_ns + (uint64_t)SRPC_V5_INIT_RESEND_MS * MS;
    memcpy(out, v->init, SRPC_V5_INIT_LEN);
    return 0;
}

/* Whether a session whose ACCEPT the client took at born_ns is too old at now_ns to be named as
 * prev (SRPC_V5_PREV_MAX_MS, tunables.h): an INIT naming it might reach the server after it forgot
 * the session and its line. A now before born_ns (never, under the client's lock) is age 0. */
static int too_old_to_follow(uint64_t born_ns, uint64_t now_ns)
{
    return now_ns > born_ns && now_ns - born_ns >= (uint64_t)SRPC_V5_PREV_MAX_MS * MS;
}

int srpc_cl_v5_start(srpc_cl_v5_t *v, uint64_t now_ns, uint8_t out[SRPC_V5_INIT_LEN])
{
    /* It follows the current session; else the newest one a NO_SESSION named (its calls go on). */
    const srpc_cl_sess_t *p = v->cur >= 0 ? &v->s[v->cur] : NULL;
    for (int i = 0; v->cur < 0 && i < SRPC_CL_SESSIONS; i++)
        if (v->s[i].used && v->s[i].dead && (!p || v->s[i].born_ns > p->born_ns))
            p = &v->s[i];
    if (p && too_old_to_follow(p->born_ns, now_ns)) { /* the server may have forgotten it and its line */
        p = NULL;
        v->line_ended = 1;
        v->st.lines_ended++;
    }
    if (p) {
        v->prev = p->keys;
        v->prev_born_ns = p->born_ns;
    } else {
        memset(&v->prev, 0, sizeof(v->prev));
    }
    srpc_sodium()->random(&v->hs_id, sizeof(v->hs_id));
    v->hs_id &= SRPC_REQ_ID_V2_MASK;
    if (!v->hs_id)
        v->hs_id = 1;
    v->hs_cookies = 0;
    int r = make_init(v, now_ns, out);
    v->hs_on = r == 0;
    return r;
}

int srpc_cl_v5_due(srpc_cl_v5_t *v, uint64_t now_ns, uint8_t out[SRPC_V5_INIT_LEN])
{
    if (!v->hs_on || now_ns < v->hs_due_ns)
        return 0;
    if (v->hs_sends >= SRPC_V5_INIT_SENDS) { /* the last one's wait is over, unanswered */
        v->hs_on = 0;
        srpc_auth_wipe(v->e_priv, sizeof(v->e_priv));
        v->st.handshakes_failed++;
        return -ETIMEDOUT;
    }
    v->hs_due_ns = now_ns + ((uint64_t)SRPC_V5_INIT_RESEND_MS * MS << v->hs_sends);
    v->hs_sends++;
    memcpy(out, v->init, SRPC_V5_INIT_LEN); /* the same bytes: the server answers it with the same ACCEPT */
    return 1;
}

/* The place of a new session: a free one, else the oldest dead one, else the oldest that is not
 * the current one. */
static int place(const srpc_cl_v5_t *v)
{
    int best = -1;
    for (int i = 0; i < SRPC_CL_SESSIONS; i++) {
        if (!v->s[i].used)
            return i;
        if (i == v->cur)
            continue;
        if (best < 0 || (v->s[i].dead && !v->s[best].dead) ||
            (v->s[i].dead == v->s[best].dead && v->s[i].born_ns < v->s[best].born_ns))
            best = i;
    }
    return best;
}

int srpc_cl_v5_on_accept(srpc_cl_v5_t *v, const uint8_t *d, uint32_t len, uint64_t now_ns)
{
    if (!v->hs_on)
        return -EBADMSG;
    srpc_v5_keys_t k;
    if (srpc_v5_accept_open(&k, v->init, v->e_priv, v->psk, d, len) < 0)
        return -EBADMSG; /* not the answer to our INIT (another's, changed, forged, late) */
    v->hs_on = 0;
    srpc_auth_wipe(v->e_priv, sizeof(v->e_priv));
    if (v->want_encrypt && !(k.encrypt & SRPC_V5_FLAG_ENCRYPT)) {
        srpc_auth_wipe(&k, sizeof(k));
        return -EPROTO;
    }
    const int i = place(v);
    srpc_auth_wipe(&v->s[i], sizeof(v->s[i]));
    v->s[i].keys = k;
    v->s[i].born_ns = now_ns;
    v->s[i].used = 1;
    v->cur = i;
    srpc_auth_wipe(&k, sizeof(k));
    v->st.handshakes++;
    return 0;
}

int srpc_cl_v5_on_cookie(srpc_cl_v5_t *v, const uint8_t *d, uint32_t len, uint64_t now_ns,
                         uint8_t out[SRPC_V5_INIT_LEN])
{
    if (!v->hs_on || v->hs_cookies >= SRPC_V5_CLIENT_COOKIES)
        return -EBADMSG;
    uint8_t c[SRPC_V5_COOKIE_LEN_RAW];
    if (srpc_v5_cookie_open(c, v->init, v->psk, d, len) < 0)
        return -EBADMSG;
    memcpy(v->cookie, c, sizeof(c));
    v->cookie_ns = now_ns ? now_ns : 1;
    v->hs_cookies++;
    v->st.cookies++;
    if (v->prev.session && too_old_to_follow(v->prev_born_ns, now_ns)) { /* a new INIT, a new time: the same
                                                                           limit as srpc_cl_v5_start's (a
                                                                           reviewer's finding) */
        memset(&v->prev, 0, sizeof(v->prev));
        v->line_ended = 1;
        v->st.lines_ended++;
    }
    return make_init(v, now_ns, out); /* the same handshake id, a new e_c and time, with the cookie */
}

srpc_cl_sess_t *srpc_cl_v5_find(srpc_cl_v5_t *v, uint64_t id)
{
    if (id == 0)
        return NULL;
    for (int i = 0; i < SRPC_CL_SESSIONS; i++)
        if (v->s[i].used && v->s[i].keys.session == id)
            return &v->s[i];
    return NULL;
}

int srpc_cl_v5_alive(const srpc_cl_v5_t *v, uint64_t id)
{
    const srpc_cl_sess_t *s = srpc_cl_v5_find((srpc_cl_v5_t *)v, id);
    return s && !s->dead;
}

int srpc_cl_v5_kill(srpc_cl_v5_t *v, uint64_t id, uint64_t now_ns)
{
    srpc_cl_sess_t *s = srpc_cl_v5_find(v, id);
    if (!s)
        return 0;
    if (now_ns - s->born_ns < (uint64_t)SRPC_V5_NO_SESSION_MIN_AGE_MS * MS) {
        v->st.no_sessions_deferred++;
        s->suspect = 1;
        return 0;
    }
    v->st.no_sessions++;
    s->dead = 1;
    s->suspect = 0;
    if (v->cur >= 0 && &v->s[v->cur] == s)
        v->cur = -1;
    return 1;
}

uint64_t srpc_cl_v5_settle(srpc_cl_v5_t *v, uint64_t now_ns, int *killed)
{
    uint64_t next = UINT64_MAX;
    *killed = 0;
    for (int i = 0; i < SRPC_CL_SESSIONS; i++) {
        srpc_cl_sess_t *s = &v->s[i];
        if (!s->used || !s->suspect || s->dead)
            continue;
        const uint64_t due = s->born_ns + (uint64_t)SRPC_V5_NO_SESSION_MIN_AGE_MS * MS;
        if (now_ns >= due)
            *killed += srpc_cl_v5_kill(v, s->keys.session, now_ns);
        else if (due < next)
            next = due;
    }
    return next;
}

int srpc_cl_v5_open(srpc_cl_v5_t *v, const uint8_t hb[SRPC_HDR_LEN], uint8_t *data, uint32_t *dlen)
{
    if (*dlen < SRPC_V5_TRAILER_LEN)
        return -EBADMSG;
    const uint8_t *tr = data + *dlen - SRPC_V5_TRAILER_LEN; /* the last 32 bytes, whatever the suite */
    srpc_cl_sess_t *s = srpc_cl_v5_find(v, srpc_v5_trailer_session(tr));
    const uint64_t c = srpc_v5_trailer_counter(tr);
    const uint32_t tail = s ? srpc_v5_tail_len(s->keys.encrypt) : SRPC_V5_TRAILER_LEN; /* AEGIS-128L: 48 */
    if (!s || *dlen < tail || !srpc_replay_fresh(&s->win, c))
        return -EBADMSG; /* (the window first: a replay costs no AEAD) */
    const uint32_t n = *dlen - tail;
    if (srpc_v5_open(&s->keys, 0, hb, data, n, data + n) < 0)
        return -EBADMSG;
    srpc_replay_take(&s->win, c);
    s->suspect = 0; /* an authenticated reply: the server has this session */
    *dlen = n;
    return 0;
}
