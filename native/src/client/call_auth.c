/* call_auth.c: a client's authentication as its calls see it: a request signed (version 4) or sealed under a session (version 5) and sent, version 5's handshake (INITs, ACCEPT, COOKIE, NO_SESSION) moving the calls that wait for a session, and a version 4 reply's tag checked. The sessions themselves are sessions.c's. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "client/client_state.h"

/* Sends one whole datagram of a handshake (an INIT) to the server. */
static void send_raw(srpc_client_t *c, const uint8_t *d, uint32_t len)
{
    const struct iovec iv = {(void *)d, len};
    srpc_tx_msg_t m = {.hdr = {.type = SRPC_TX_RAW}, .pieces = &iv, .npieces = 1, .len = len};
    srpc_tp_send(c->tp, &m, 1); /* a lost INIT is sent again when due */
}

/* The client's line ended (no session left young enough to follow: srpc_cl_v5_start): every
 * unfinished call sent under it fails with SRPC_E_TIMEOUT (its outcome unknown: it may have run,
 * and sent again under a new line it would be a new call, which could run it twice). Calls never
 * sent go on under the new line. Lock held. */
static void v5_fail_sent(srpc_client_t *c)
{
    for (unsigned b = 0; b < SRPC_CL_NBUCKETS; b++)
        for (cl_call_t *k = c->buckets[b], *next; k; k = next) {
            next = k->hnext;
            if (!k->done && (k->sess || k->sent_v5)) /* (a retransmission finding no session zeroes sess) */
                cl_finish_local(c, k, SRPC_E_TIMEOUT, "no session could follow the one this call was sent under "
                                                      "before the server may have forgotten it (175 s): the call may "
                                                      "have run, and is not sent again");
        }
}

void cl_v5_start(srpc_client_t *c, uint64_t now)
{
    SRPC_CL_ASSERT_LOCKED(c);
    uint8_t init[SRPC_V5_INIT_LEN];
    const int r = srpc_cl_v5_start(c->v5, now, init);
    if (c->v5->line_ended) { /* no session to follow: the calls sent under the old line may have run */
        c->v5->line_ended = 0;
        v5_fail_sent(c);
    }
    if (r == 0) {
        send_raw(c, init, sizeof(init));
        cl_note_due(c, c->v5->hs_due_ns);
    }
}

void cl_auth_take(srpc_client_t *c, cl_auth_use_t *u)
{
    SRPC_CL_ASSERT_LOCKED(c);
    int start;
    const uint64_t now = srpc_now_ns();
    const srpc_cl_sess_t *s = srpc_cl_v5_current(c->v5, now, &start);
    if (start)
        cl_v5_start(c, now);
    u->ok = s != NULL;
    if (s) {
        u->session = s->keys.session;
        memcpy(u->key, s->keys.c2s, SRPC_V5_KEY_LEN);
        u->encrypt = s->keys.encrypt;
    }
}

void cl_auth_wipe(cl_auth_use_t *u)
{
    srpc_auth_wipe(u->key, sizeof(u->key));
}

void cl_auth_sign(srpc_client_t *c, srpc_tx_msg_t *m, const cl_auth_use_t *u)
{
    if (c->v5) {
        m->auth.secret = u->key;
        m->auth.sender = u->session;
        m->auth.counter = &c->v5->counter;
        m->auth.encrypt = u->encrypt;
        return;
    }
    m->auth.key_id = c->auth.key_id;
    m->auth.secret = c->auth.secret;
    m->auth.sender = c->auth.sender;
    m->auth.counter = &c->auth.counter;
}

int cl_send_request(srpc_client_t *c, cl_call_t *k)
{
    SRPC_CL_ASSERT_LOCKED(c);
    cl_auth_use_t u = {0};
    if (c->v5) {
        cl_auth_take(c, &u);
        k->sess = u.ok ? u.session : 0;
        if (!u.ok)
            return 0;
        k->sent_v5 = 1;
    }
    struct iovec iv = {(void *)k->req, k->req_len};
    srpc_tx_msg_t m = {.hdr = {.type = SRPC_REQUEST, .version = c->cfg.version, .func_id = k->func_id,
                               .req_id = k->req_id, .aux = k->aux},
                       .pieces = &iv, .npieces = k->req_len ? 1 : 0, .len = k->req_len, .seg_size = c->seg};
    cl_auth_sign(c, &m, &u);
    srpc_tp_send(c->tp, &m, 1);
    cl_auth_wipe(&u);
    return m.result;
}

/* Version 5: whether call k waits for a session: unfinished, sent or to be sent (not waiting for
 * the window), and its session none or one it can no longer count on. */
static int v5_needs_session(const srpc_client_t *c, const cl_call_t *k)
{
    return !k->done && !k->waiting && (k->sess == 0 || !srpc_cl_v5_alive(c->v5, k->sess));
}

/* A session was made: every call waiting for one is sent under it now (after a NO_SESSION they
 * are the same calls there when the server still has the old session: resume). Lock held. */
static void v5_send_waiting_calls(srpc_client_t *c)
{
    const uint64_t now = srpc_now_ns();
    for (unsigned b = 0; b < SRPC_CL_NBUCKETS; b++)
        for (cl_call_t *k = c->buckets[b]; k; k = k->hnext) {
            if (!v5_needs_session(c, k) || !k->req || k->busy_wait) /* (after BUSY: sent when its try is due) */
                continue;
            if (k->sess)
                k->attempts++; /* sent before: Karn's rule, no sample */
            else
                k->sent_ns = now;
            c->v5->st.resent++;
            cl_send_request(c, k);
            if (c->cfg.retries && k->deadline_ns > now) {
                k->due_ns = now + cl_rto_ns(c, k->func_id);
                cl_note_due(c, k->due_ns);
            }
        }
}

/* No session could be made (why): every caller's call waiting for one fails with
 * SRPC_E_UNAVAILABLE (a load run's calls keep their deadlines); with again 1 (the server may yet
 * answer) a call that waits for ready is left waiting and a new handshake starts for it; with
 * again 0 (the server answered, and will answer the same: it would not encrypt) those fail too.
 * Lock held. */
static void v5_fail_waiting(srpc_client_t *c, const char *why, int again)
{
    char msg[SRPC_CLIENT_MSG_MAX];
    snprintf(msg, sizeof(msg), "no version 5 session with %s port %u (key %u): %s", c->host, (unsigned)c->cfg.port,
             (unsigned)c->v5->key_id, why);
    int left = 0;
    for (unsigned b = 0; b < SRPC_CL_NBUCKETS; b++)
        for (cl_call_t *k = c->buckets[b]; k; k = k->hnext) {
            if (!v5_needs_session(c, k))
                continue;
            if (k->flow && (!k->wait_ready || !again)) {
                cl_finish_local(c, k, SRPC_E_UNAVAILABLE, msg);
                c->st.unavailable++;
            } else {
                left++;
            }
        }
    if (left && again)
        cl_v5_start(c, srpc_now_ns());
}

void cl_v5_tick(srpc_client_t *c, uint64_t now)
{
    SRPC_CL_ASSERT_LOCKED(c);
    uint8_t init[SRPC_V5_INIT_LEN];
    const int r = srpc_cl_v5_due(c->v5, now, init);
    if (r == 1)
        send_raw(c, init, sizeof(init));
    else if (r == -ETIMEDOUT)
        v5_fail_waiting(c, "the server answered none of the handshake's INITs in 12.6 s: it may not hold this key, "
                           "or hold another secret for it, or its clock may differ from ours by more than its skew, "
                           "or it may not speak version 5 (its describe() lists 5 in protocols), or be older than "
                           "AEGIS-128L (Client(suites=) without it), or the answers were lost or kept from us on "
                           "the way (an attacker on the path racing our INITs from another address)", 1);
}

void cl_v5_handshake_in(srpc_client_t *c, const uint8_t *d, uint32_t total)
{
    SRPC_CL_ASSERT_LOCKED(c);
    if (c->shut) /* a handshake answer received as the client was shut down: no INIT goes out */
        return;
    srpc_cl_v5_t *v = c->v5;
    const uint64_t now = srpc_now_ns();
    const unsigned type = d[SRPC_OFF_VER_TYPE] & 0x0f;
    if (type == SRPC_V5_ACCEPT) {
        const int r = srpc_cl_v5_on_accept(v, d, total, now);
        if (r == 0)
            v5_send_waiting_calls(c);
        else if (r == -EPROTO)
            v5_fail_waiting(c, "the server would not encrypt the data though the client asked it to", 0);
        else
            c->st.dropped++;
        return;
    }
    if (type == SRPC_V5_COOKIE) {
        uint8_t init[SRPC_V5_INIT_LEN];
        const int r = srpc_cl_v5_on_cookie(v, d, total, now, init);
        if (v->line_ended) { /* its new INIT could no longer name the old session */
            v->line_ended = 0;
            v5_fail_sent(c);
        }
        if (r == 0) {
            send_raw(c, init, sizeof(init));
            cl_note_due(c, v->hs_due_ns);
        } else {
            c->st.dropped++;
        }
        return;
    }
    uint64_t sid, rid;
    uint16_t fid;
    if (type != SRPC_V5_NO_SESSION || srpc_v5_no_session_parse(d, total, &sid, &fid, &rid) < 0) {
        c->st.dropped++;
        return;
    }
    /* Not authenticated: acted on only for a call of ours outstanding under the session named. */
    const cl_call_t *k = cl_find(c, rid);
    if (!k || k->done || k->func_id != fid || k->sess != sid || !srpc_cl_v5_alive(v, sid)) {
        c->st.late_or_unknown++;
        return;
    }
    if (!srpc_cl_v5_kill(v, sid, now)) { /* too young: ended at 100 ms of age unless a reply comes first */
        int killed;
        cl_note_due(c, srpc_cl_v5_settle(v, now, &killed));
        return;
    }
    if (!v->hs_on)
        cl_v5_start(c, now); /* (one under way follows it or a later one: its ACCEPT sends the calls) */
}

int cl_v4_signed_by_us(const srpc_client_t *c, const uint8_t *hb, const uint8_t *data, uint32_t *dlen)
{
    if (*dlen < SRPC_AUTH_TRAILER_LEN)
        return 0;
    const uint32_t n = *dlen - SRPC_AUTH_TRAILER_LEN;
    srpc_auth_fields_t f;
    srpc_auth_fields(data + n, &f);
    if (f.key_id != c->auth.key_id || !srpc_auth_check(c->auth.secret, hb, data, n, data + n))
        return 0;
    *dlen = n;
    return 1;
}
