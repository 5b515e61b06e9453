/* test_client_sessions.c: a client's version 5 sessions (client/sessions.c) against a server's table of sessions (server/sessions.c), in memory: the handshake, its resends and its failure, a COOKIE under load, replies opened and replays and forgeries refused, a rekey that resumes the line, a NO_SESSION's session no longer used, a refused encryption, the places of old sessions, a session too old to send under, and both AEAD suites (ChaCha20-Poly1305, AES-256-GCM). Clocks are the test's. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "client/sessions.h"
#include "core/auth.h"
#include "core/session.h"
#include "core/tunables.h"
#include "server/sessions.h"
#include "splitrpc_server.h"

#define MS 1000000ull
static uint8_t PSK[32];
static const uint64_t WALL = 1764331200000ull;
static srpc_keytab_t *keys;
static struct sockaddr_in src;

/* The server's answer to the client's INIT (an ACCEPT or a COOKIE): its length (0: none). */
static size_t serve_init(srpc_sessions_t *t, const uint8_t init[SRPC_V5_INIT_LEN], uint64_t mono_ms, uint8_t *out)
{
    size_t n = 0;
    (void)WALL;
    int r = srpc_sessions_on_init(t, keys, init, SRPC_V5_INIT_LEN, (struct sockaddr *)&src, srpc_auth_now_ms64(),
                                  mono_ms, out, &n);
    return r ? 0 : n;
}

/* A handshake from start to ACCEPT at time now: 0 when the client holds the new session. */
static int handshake(srpc_cl_v5_t *v, srpc_sessions_t *t, uint64_t now)
{
    uint8_t init[SRPC_V5_INIT_LEN], out[SRPC_V5_INIT_LEN];
    if (srpc_cl_v5_start(v, now, init) != 0)
        return -1;
    size_t n = serve_init(t, init, now / MS, out);
    return n == SRPC_V5_ACCEPT_LEN ? srpc_cl_v5_on_accept(v, out, (uint32_t)n, now) : -2;
}

/* A reply datagram of session k (RESPONSE to req_id, data d of len bytes, counter c) into buf:
 * its whole length. */
static uint32_t reply(const srpc_v5_keys_t *k, uint64_t req_id, const char *d, uint32_t len, uint64_t c, uint8_t *buf)
{
    srpc_hdr_t h = {.type = SRPC_RESPONSE, .version = SRPC_VERSION_5, .func_id = 1, .req_id = req_id, .seq = 0,
                    .nseg = 1, .msg_len = len};
    srpc_hdr_encode(&h, buf);
    memcpy(buf + SRPC_HDR_LEN, d, len);
    CHECK(srpc_v5_seal(k, 0, c, buf, buf + SRPC_HDR_LEN, len, buf + SRPC_HDR_LEN + len) == 0, "sealed");
    return SRPC_HDR_LEN + len + srpc_v5_tail_len(k->encrypt);
}

/* Opens the reply of total bytes at buf as the client does: 0 or -EBADMSG. */
static int open_reply(srpc_cl_v5_t *v, uint8_t *buf, uint32_t total)
{
    uint32_t dlen = total - SRPC_HDR_LEN;
    return srpc_cl_v5_open(v, buf, buf + SRPC_HDR_LEN, &dlen);
}

static void test_handshake_and_replies(void)
{
    srpc_sessions_t t;
    srpc_cl_v5_t v;
    CHECK(srpc_sessions_init(&t, 64, 0) == 0 && srpc_cl_v5_init(&v, 7, PSK, 0, 0) == 0, "made");
    int start = 0;
    CHECK(srpc_cl_v5_current(&v, 1 * MS, &start) == NULL && start == 1, "no session yet: start one");
    CHECK(handshake(&v, &t, 1 * MS) == 0 && v.st.handshakes == 1, "a handshake makes a session");
    const srpc_cl_sess_t *s = srpc_cl_v5_current(&v, 2 * MS, &start);
    CHECK(s && !start && !v.hs_on, "the session to send under, none to start");
    srpc_session_t *ss = srpc_sessions_find(&t, keys, s->keys.session, 2);
    CHECK(ss && !memcmp(ss->keys.c2s, s->keys.c2s, 32) && !memcmp(ss->keys.s2c, s->keys.s2c, 32) &&
              ss->keys.encrypt == s->keys.encrypt,
          "both sides hold the same keys");
    CHECK(srpc_v5_aegis_available() ? (s->keys.encrypt & (SRPC_V5_FLAG_AES | SRPC_V5_FLAG_AEGIS)) == SRPC_V5_FLAG_AEGIS
                                    : !!(s->keys.encrypt & SRPC_V5_FLAG_AES) == srpc_v5_aes_available(),
          "AEGIS-128L where libsodium has it, else AES-256-GCM where this CPU has AES-NI (offered and granted), "
          "else ChaCha20-Poly1305");

    uint8_t buf[256];
    uint32_t n = reply(&ss->keys, 5, "abcd", 4, 10, buf);
    CHECK(open_reply(&v, buf, n) == 0 && !memcmp(buf + SRPC_HDR_LEN, "abcd", 4), "a reply of the session opens");
    n = reply(&ss->keys, 5, "abcd", 4, 10, buf);
    CHECK(open_reply(&v, buf, n) == -EBADMSG, "the same counter again: a replay, refused");
    n = reply(&ss->keys, 5, "abcd", 4, 9, buf);
    CHECK(open_reply(&v, buf, n) == 0, "a lower counter not taken yet (reordered) opens");
    n = reply(&ss->keys, 5, "abcd", 4, 10 + SRPC_AUTH_WINDOW + 5, buf);
    CHECK(open_reply(&v, buf, n) == 0, "far ahead opens");
    n = reply(&ss->keys, 5, "abcd", 4, 11, buf);
    CHECK(open_reply(&v, buf, n) == -EBADMSG, "behind the window: refused");
    n = reply(&ss->keys, 5, "abcd", 4, 3000, buf);
    buf[SRPC_HDR_LEN] ^= 1;
    CHECK(open_reply(&v, buf, n) == -EBADMSG, "a changed byte: refused");
    srpc_v5_keys_t other = ss->keys;
    other.s2c[0] ^= 1;
    n = reply(&other, 5, "abcd", 4, 3001, buf);
    CHECK(open_reply(&v, buf, n) == -EBADMSG, "another key under the session's id: refused");
    other = ss->keys;
    other.session ^= 1;
    n = reply(&other, 5, "abcd", 4, 3002, buf);
    CHECK(open_reply(&v, buf, n) == -EBADMSG, "a session not ours: refused");
    uint32_t short_len = SRPC_V5_TRAILER_LEN - 1;
    CHECK(srpc_cl_v5_open(&v, buf, buf + SRPC_HDR_LEN, &short_len) == -EBADMSG, "too short for a trailer");
    if (ss->keys.encrypt & SRPC_V5_FLAG_AEGIS) { /* a trailer of the session, but no room for the tag's first half */
        n = reply(&ss->keys, 5, "", 0, 3003, buf);
        uint32_t dlen = n - SRPC_HDR_LEN - 1;
        memmove(buf + SRPC_HDR_LEN, buf + SRPC_HDR_LEN + 1, dlen);
        CHECK(srpc_cl_v5_open(&v, buf, buf + SRPC_HDR_LEN, &dlen) == -EBADMSG,
              "an AEGIS-128L session's datagram shorter than its tail: refused");
    }
    srpc_cl_v5_wipe(&v);
    srpc_sessions_destroy(&t);
}

static void test_resends_and_failure(void)
{
    srpc_cl_v5_t v;
    CHECK(srpc_cl_v5_init(&v, 7, PSK, 0, 0) == 0, "made");
    uint8_t init[SRPC_V5_INIT_LEN], again[SRPC_V5_INIT_LEN];
    CHECK(srpc_cl_v5_start(&v, 0, init) == 0 && v.hs_on, "started");
    CHECK(srpc_cl_v5_due(&v, 199 * MS, again) == 0, "nothing due before 200 ms");
    uint64_t at[] = {200, 600, 1400, 3000, 6200}, sends = 0;
    for (int i = 0; i < 5; i++) {
        CHECK(srpc_cl_v5_due(&v, at[i] * MS - 1, again) == 0, "not yet at %llu ms", (unsigned long long)at[i]);
        sends += srpc_cl_v5_due(&v, at[i] * MS, again) == 1 && !memcmp(init, again, sizeof(init));
    }
    CHECK(sends == 5, "the same INIT again at 200, 600, 1400, 3000 and 6200 ms (%llu)", (unsigned long long)sends);
    CHECK(srpc_cl_v5_due(&v, 12600 * MS - 1, again) == 0 && v.hs_on, "still waiting for the last one's answer");
    CHECK(srpc_cl_v5_due(&v, 12600 * MS, again) == -ETIMEDOUT && !v.hs_on && v.st.handshakes_failed == 1,
          "failed at 12.6 s");
    int start = 0;
    CHECK(srpc_cl_v5_current(&v, 12601 * MS, &start) == NULL && start == 1, "then a new one may start");
    srpc_cl_v5_wipe(&v);
}

static void test_forged_accepts(void)
{
    srpc_sessions_t t;
    srpc_cl_v5_t v, w;
    CHECK(srpc_sessions_init(&t, 64, 0) == 0 && srpc_cl_v5_init(&v, 7, PSK, 0, 0) == 0 &&
              srpc_cl_v5_init(&w, 7, PSK, 0, 0) == 0, "made");
    uint8_t init[SRPC_V5_INIT_LEN], out[SRPC_V5_INIT_LEN], winit[SRPC_V5_INIT_LEN], wout[SRPC_V5_INIT_LEN];
    uint8_t acc[SRPC_V5_ACCEPT_LEN];
    CHECK(srpc_cl_v5_on_accept(&v, out, SRPC_V5_ACCEPT_LEN, 0) == -EBADMSG, "no handshake under way: dropped");
    CHECK(srpc_cl_v5_start(&v, 0, init) == 0 && srpc_cl_v5_start(&w, 0, winit) == 0, "two clients of one key");
    size_t wn = serve_init(&t, winit, 1, wout);
    CHECK(wn == SRPC_V5_ACCEPT_LEN && srpc_cl_v5_on_accept(&v, wout, (uint32_t)wn, 0) == -EBADMSG && v.hs_on,
          "another client's ACCEPT: not ours");
    uint8_t bad[32];
    memset(bad, 9, sizeof(bad));
    srpc_v5_keys_t k;
    uint8_t e[32], pub[32];
    srpc_v5_keypair(e, pub);
    CHECK(srpc_v5_accept_make(acc, &k, init, bad, e, 77, 0) == 0 &&
              srpc_cl_v5_on_accept(&v, acc, sizeof(acc), 0) == -EBADMSG && v.hs_on,
          "an ACCEPT made without the psk: refused");
    size_t n = serve_init(&t, init, 1, out);
    CHECK(n == SRPC_V5_ACCEPT_LEN && srpc_cl_v5_on_accept(&v, out, (uint32_t)n - 1, 0) == -EBADMSG, "short: refused");
    out[40] ^= 1;
    CHECK(srpc_cl_v5_on_accept(&v, out, (uint32_t)n, 0) == -EBADMSG && v.hs_on, "changed: refused");
    out[40] ^= 1;
    CHECK(srpc_cl_v5_on_accept(&v, out, (uint32_t)n, 0) == 0 && !v.hs_on, "the real one: taken");
    CHECK(srpc_cl_v5_on_accept(&v, out, (uint32_t)n, 0) == -EBADMSG, "again: no handshake under way");
    srpc_cl_v5_wipe(&v);
    srpc_cl_v5_wipe(&w);
    srpc_sessions_destroy(&t);
}

static void test_cookie(void)
{
    srpc_sessions_t t;
    srpc_cl_v5_t a, b;
    CHECK(srpc_sessions_init(&t, 64, 1) == 0 && srpc_cl_v5_init(&a, 7, PSK, 0, 0) == 0 &&
              srpc_cl_v5_init(&b, 7, PSK, 0, 0) == 0, "a server paying for one handshake a second");
    CHECK(handshake(&a, &t, 10 * MS) == 0, "the first is answered");
    uint8_t init[SRPC_V5_INIT_LEN], out[SRPC_V5_INIT_LEN], init2[SRPC_V5_INIT_LEN];
    CHECK(srpc_cl_v5_start(&b, 11 * MS, init) == 0, "a second in the same second");
    size_t n = serve_init(&t, init, 11, out);
    CHECK(n == SRPC_V5_COOKIE_LEN, "answered with a COOKIE (%zu bytes)", n);
    CHECK(srpc_cl_v5_on_cookie(&a, out, (uint32_t)n, 11 * MS, init2) == -EBADMSG, "not for a client without a handshake");
    CHECK(srpc_cl_v5_on_cookie(&b, out, (uint32_t)n, 11 * MS, init2) == 0 && b.st.cookies == 1 &&
              memcmp(init, init2, 22) == 0 && memcmp(init + 26, init2 + 26, 32) != 0,
          "taken: a new INIT of the same handshake id with a new ephemeral key");
    n = serve_init(&t, init2, 12, out);
    CHECK(n == SRPC_V5_ACCEPT_LEN && srpc_cl_v5_on_accept(&b, out, (uint32_t)n, 12 * MS) == 0,
          "the INIT with the cookie's mac is answered with an ACCEPT");
    srpc_cl_v5_wipe(&a);
    srpc_cl_v5_wipe(&b);
    srpc_sessions_destroy(&t);
}

static void test_rekey_resumes_the_line(void)
{
    srpc_sessions_t t;
    srpc_cl_v5_t v;
    CHECK(srpc_sessions_init(&t, 64, 0) == 0 && srpc_cl_v5_init(&v, 7, PSK, 0, 500) == 0, "rekey at 500 ms");
    CHECK(handshake(&v, &t, 1 * MS) == 0, "a session");
    int start = 0;
    const srpc_cl_sess_t *s = srpc_cl_v5_current(&v, 400 * MS, &start);
    CHECK(s && !start, "young: no rekey");
    const uint64_t first = s->keys.session;
    s = srpc_cl_v5_current(&v, 501 * MS, &start);
    CHECK(s && s->keys.session == first && start == 1 && v.st.rekeys == 1, "old enough: rekey, still sent under it");
    CHECK(handshake(&v, &t, 502 * MS) == 0, "the new session");
    s = srpc_cl_v5_current(&v, 503 * MS, &start);
    CHECK(s && s->keys.session != first && !start, "now sent under the new one");
    srpc_session_t *a = srpc_sessions_find(&t, keys, first, 503), *b = srpc_sessions_find(&t, keys, s->keys.session, 503);
    CHECK(a && b && b->lineage == a->lineage, "the server made it follow the first: one line of calls");
    CHECK(srpc_cl_v5_find(&v, first) != NULL && srpc_cl_v5_alive(&v, first), "the first is kept for its replies");
    srpc_cl_v5_wipe(&v);
    srpc_sessions_destroy(&t);
}

static void test_no_session_and_places(void)
{
    srpc_sessions_t t, restarted;
    srpc_cl_v5_t v;
    CHECK(srpc_sessions_init(&t, 64, 0) == 0 && srpc_sessions_init(&restarted, 64, 0) == 0 &&
              srpc_cl_v5_init(&v, 7, PSK, 0, 0) == 0, "made");
    CHECK(handshake(&v, &t, 1 * MS) == 0, "a session");
    int start = 0;
    const uint64_t first = srpc_cl_v5_current(&v, 2 * MS, &start)->keys.session;
    const uint64_t young = (1 + SRPC_V5_NO_SESSION_MIN_AGE_MS) * MS - 1, old = young + 1; /* born at 1 ms */
    int acted = 0, killed = -1;
    for (int i = 0; i < 1000; i++) /* a forger's flood at once after the handshake */
        acted += srpc_cl_v5_kill(&v, first, young);
    CHECK(acted == 0 && srpc_cl_v5_alive(&v, first) && v.st.no_sessions_deferred == 1000 && v.st.no_sessions == 0 &&
              srpc_cl_v5_current(&v, young, &start) != NULL && start == 0,
          "1,000 of them under 100 ms: deferred, the session still sent under, no handshake");
    CHECK(srpc_cl_v5_settle(&v, young, &killed) == old && killed == 0, "its end is due at 100 ms of age");
    CHECK(srpc_cl_v5_kill(&v, first + 1, old) == 0 && v.st.no_sessions == 0, "a session not ours: nothing");
    CHECK(srpc_cl_v5_settle(&v, old, &killed) == UINT64_MAX && killed == 1 && v.st.no_sessions == 1,
          "at 100 ms with no reply under it since: it ends (a server restarted right after the handshake)");
    CHECK(!srpc_cl_v5_alive(&v, first) && srpc_cl_v5_find(&v, first) && srpc_cl_v5_current(&v, old, &start) == NULL &&
              start == 1,
          "a NO_SESSION's session is not sent under again: a handshake starts");
    uint8_t init[SRPC_V5_INIT_LEN], out[SRPC_V5_INIT_LEN];
    CHECK(srpc_cl_v5_start(&v, 3 * MS, init) == 0 && v.prev.session == first, "it follows the session named");
    srpc_v5_init_t f;
    CHECK(srpc_v5_init_parse(init, sizeof(init), &f) == 0 && f.prev_session == first &&
              srpc_v5_init_resume_ok(init, srpc_cl_v5_find(&v, first)->keys.c2s),
          "its INIT names it, with a right resume");
    size_t n = serve_init(&restarted, init, 3, out);
    CHECK(n == SRPC_V5_ACCEPT_LEN && srpc_cl_v5_on_accept(&v, out, (uint32_t)n, 3 * MS) == 0,
          "a restarted server (without the old session) makes a new one all the same");
    CHECK(restarted.st.not_resumed == 1, "a new line there");
    /* Four places: the current one is never the one given up. */
    uint64_t cur = 0;
    for (int i = 0; i < 2 * SRPC_CL_SESSIONS; i++) {
        CHECK(handshake(&v, &restarted, (10 + (uint64_t)i) * MS) == 0, "session %d", i);
        cur = srpc_cl_v5_current(&v, (10 + (uint64_t)i) * MS, &start)->keys.session;
    }
    int held = 0;
    for (int i = 0; i < SRPC_CL_SESSIONS; i++)
        held += v.s[i].used;
    CHECK(held == SRPC_CL_SESSIONS && srpc_cl_v5_alive(&v, cur) && !srpc_cl_v5_find(&v, first),
          "the oldest are given up, the current kept");
    srpc_cl_v5_wipe(&v);
    srpc_sessions_destroy(&t);
    srpc_sessions_destroy(&restarted);
}

/* A forged NO_SESSION for a young session, then a real reply under it: the session lives on. */
static void test_no_session_then_a_reply(void)
{
    srpc_cl_v5_t v;
    CHECK(srpc_cl_v5_init(&v, 7, PSK, 0, 0) == 0, "made");
    srpc_v5_keys_t k;
    memset(&k, 0, sizeof(k));
    k.session = 0x77;
    memset(k.s2c, 0x42, 32);
    v.s[0].keys = k;
    v.s[0].used = 1;
    v.s[0].born_ns = 1 * MS;
    v.cur = 0;
    int killed = -1;
    uint8_t buf[200];
    CHECK(srpc_cl_v5_kill(&v, 0x77, 50 * MS) == 0 && v.s[0].suspect, "50 ms old: suspect");
    CHECK(open_reply(&v, buf, reply(&k, 9, "ok", 2, 1, buf)) == 0 && !v.s[0].suspect, "a reply under it: not suspect");
    CHECK(srpc_cl_v5_settle(&v, 200 * MS, &killed) == UINT64_MAX && killed == 0 && srpc_cl_v5_alive(&v, 0x77) &&
              v.st.no_sessions == 0 && v.st.no_sessions_deferred == 1,
          "at 100 ms it lives on: the NO_SESSION was not the server's");
    uint8_t forged[200];
    uint32_t n = reply(&k, 9, "ok", 2, 2, forged);
    forged[n - 1] ^= 1;
    CHECK(srpc_cl_v5_kill(&v, 0x77, 60 * MS) == 0 && open_reply(&v, forged, n) == -EBADMSG && v.s[0].suspect &&
              srpc_cl_v5_settle(&v, 101 * MS, &killed) == UINT64_MAX && killed == 1 && !srpc_cl_v5_alive(&v, 0x77),
          "a forged reply does not save it");
    srpc_cl_v5_wipe(&v);
}

/* Replies of both suites and both kinds open, and a changed one does not. */
static void test_suites(void)
{
    for (unsigned f = 0; f < 4; f++) {
        if ((f & SRPC_V5_FLAG_AES) && !srpc_v5_aes_available())
            continue;
        srpc_cl_v5_t v;
        CHECK(srpc_cl_v5_init(&v, 7, PSK, 0, 0) == 0, "made");
        srpc_v5_keys_t k;
        memset(&k, 0, sizeof(k));
        k.session = 0x55 + f;
        k.encrypt = (uint8_t)f;
        memset(k.s2c, 0x31, 32);
        v.s[0].keys = k;
        v.s[0].used = 1;
        v.cur = 0;
        uint8_t buf[3000];
        char data[2900];
        memset(data, 'd', sizeof(data));
        uint32_t n = reply(&k, 9, data, sizeof(data), 1, buf);
        CHECK(((f & SRPC_V5_FLAG_ENCRYPT) != 0) == (memcmp(buf + SRPC_HDR_LEN, data, 64) != 0),
              "flags %u: the data is encrypted exactly when asked", f);
        CHECK(open_reply(&v, buf, n) == 0 && !memcmp(buf + SRPC_HDR_LEN, data, sizeof(data)), "flags %u: opens", f);
        n = reply(&k, 9, data, sizeof(data), 2, buf);
        buf[SRPC_HDR_LEN + 2000] ^= 4;
        CHECK(open_reply(&v, buf, n) == -EBADMSG, "flags %u: a changed byte (past the stack's gather) refused", f);
        n = reply(&k, 9, data, sizeof(data), 3, buf);
        buf[3] ^= 1; /* the header's func_id */
        CHECK(open_reply(&v, buf, n) == -EBADMSG, "flags %u: a changed header refused", f);
        srpc_cl_v5_wipe(&v);
    }
    /* An ACCEPT granting AES-256-GCM to an INIT that did not offer it: refused. */
    uint8_t init[SRPC_V5_INIT_LEN], acc[SRPC_V5_ACCEPT_LEN], e[32], pub[32], c[32], cpub[32];
    srpc_v5_keys_t k, got;
    srpc_v5_keypair(c, cpub);
    srpc_v5_keypair(e, pub);
    CHECK(srpc_v5_init_make(init, PSK, 7, 99, c, srpc_auth_now_ms64(), 0, NULL, NULL) == 0 &&
              srpc_v5_accept_make(acc, &k, init, PSK, e, 5, SRPC_V5_FLAG_AES) == 0 &&
              srpc_v5_accept_open(&got, init, c, PSK, acc, sizeof(acc)) == -EBADMSG,
          "AES-256-GCM only where offered");
}

static void test_encryption_refused_and_age(void)
{
    srpc_sessions_t t;
    srpc_cl_v5_t v;
    CHECK(srpc_sessions_init(&t, 64, 0) == 0 && srpc_cl_v5_init(&v, 7, PSK, 1, 0) == 0, "asks for encryption");
    uint8_t init[SRPC_V5_INIT_LEN], acc[SRPC_V5_ACCEPT_LEN], e[32], pub[32];
    CHECK(srpc_cl_v5_start(&v, 0, init) == 0, "started");
    srpc_v5_keys_t k;
    srpc_v5_keypair(e, pub);
    CHECK(srpc_v5_accept_make(acc, &k, init, PSK, e, 99, 0) == 0 &&
              srpc_cl_v5_on_accept(&v, acc, sizeof(acc), 0) == -EPROTO && !v.hs_on && v.cur < 0,
          "an ACCEPT without ENCRYPT: no session, an error");
    CHECK(handshake(&v, &t, 1 * MS) == 0 && v.s[v.cur].keys.encrypt, "the server's own ACCEPT encrypts");
    int start = 0;
    CHECK(srpc_cl_v5_current(&v, (SRPC_V5_CLIENT_STOP_MS - 1) * MS, &start) != NULL, "169.99 s: still sent under");
    CHECK(srpc_cl_v5_current(&v, (SRPC_V5_CLIENT_STOP_MS + 1) * MS, &start) == NULL, "past 170 s: never");
    CHECK(srpc_cl_v5_init(&v, 7, PSK, 0, SRPC_V5_CLIENT_REKEY_MS + 1) == -EINVAL && srpc_cl_v5_init(&v, 0, PSK, 0, 0) == -EINVAL,
          "a rekey later than the page allows, or key 0: refused");
    srpc_cl_v5_wipe(&v);
    srpc_sessions_destroy(&t);
}

/* A client names as prev only a session younger than SRPC_V5_PREV_MAX_MS; past that its line has
 * ended (the caller fails the calls sent under it: they may have run). A server keeps what a resume
 * naming a forgotten session whose line ran calls needs until SRPC_V5_PREV_MAX_MS + 2 skews after
 * its ACCEPT, so an INIT made just before the client's limit and delivered late still follows the
 * line, though the session itself is past its 180 s. */
static void test_a_line_too_old_to_follow_ends(void)
{
    srpc_sessions_t t;
    srpc_cl_v5_t v;
    CHECK(srpc_sessions_init(&t, 64, 0) == 0 && srpc_cl_v5_init(&v, 7, PSK, 0, 0) == 0, "a client");
    CHECK(handshake(&v, &t, 1 * MS) == 0, "a session");
    const uint64_t first = v.s[v.cur].keys.session;
    srpc_session_t *a = srpc_sessions_find(&t, keys, first, 1);
    const uint64_t line = a->lineage;
    srpc_sessions_call_ran(&t, a, 5); /* a call of its line ran */
    srpc_sessions_expire(&t, SRPC_V5_REJECT_AFTER_MS + 2); /* the server: past its time, forgotten */
    CHECK(srpc_sessions_find(&t, keys, first, SRPC_V5_REJECT_AFTER_MS + 2) == NULL && t.tombs_used == 1,
          "past its 180 s the server has forgotten it, leaving a tombstone (its line ran a call)");
    uint8_t init[SRPC_V5_INIT_LEN], out[SRPC_V5_INIT_LEN];
    CHECK(srpc_cl_v5_start(&v, SRPC_V5_PREV_MAX_MS * MS, init) == 0 && v.prev.session == first && !v.line_ended,
          "at 174.999 s of its age by the client's clock: still named");
    const uint64_t late = 1 + SRPC_V5_PREV_MAX_MS + SRPC_V5_HANDSHAKE_MAX_MS + 2 * SRPC_DEF_AUTH_SKEW_MS - 1; /* the server's ms */
    srpc_sessions_expire(&t, late); /* a sweep just before it comes: the tombstone must still be there */
    CHECK(t.tombs_used == 1, "the sweep two skews later keeps the tombstone");
    size_t n = serve_init(&t, init, late, out);
    CHECK(n == SRPC_V5_ACCEPT_LEN && srpc_cl_v5_on_accept(&v, out, (uint32_t)n, late * MS) == 0 &&
              srpc_sessions_find(&t, keys, v.s[v.cur].keys.session, late)->lineage == line && t.st.tomb_resumes == 1,
          "that INIT, delivered two skews later: its session follows the line (a resend is refused as one that ran)");
    srpc_cl_v5_wipe(&v);
    CHECK(srpc_cl_v5_init(&v, 7, PSK, 0, 0) == 0 && handshake(&v, &t, 1 * MS) == 0, "another client, a session");
    CHECK(srpc_cl_v5_start(&v, (1 + SRPC_V5_PREV_MAX_MS) * MS, init) == 0 && v.prev.session == 0 && v.line_ended == 1 &&
              v.st.lines_ended == 1,
          "at 175 s: not named; the line has ended (its sent calls fail, not sent again as new calls)");
    srpc_cl_v5_wipe(&v);
    srpc_sessions_destroy(&t);
}

int main(void)
{
    if (srpc_v5_available() < 0) {
        printf("SKIP: libsodium with X25519 not found\n");
        return 0;
    }
    for (int i = 0; i < 32; i++)
        PSK[i] = (uint8_t)(i * 3 + 1);
    src = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(40000)};
    src.sin_addr.s_addr = htonl(0x7f000001);
    CHECK(srpc_keytab_create(0, 0, &keys) == 0 && srpc_keytab_add(keys, 7, PSK, 32, 0, 1, NULL, 0) == 0 &&
              srpc_keytab_seal(keys) == 0,
          "a key table");
    test_handshake_and_replies();
    test_resends_and_failure();
    test_forged_accepts();
    test_cookie();
    test_rekey_resumes_the_line();
    test_no_session_and_places();
    test_no_session_then_a_reply();
    test_encryption_refused_and_age();
    test_suites();
    test_a_line_too_old_to_follow_ends();
    srpc_keytab_destroy(keys);
    printf("test_client_sessions: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
