/* datagram.c: one received datagram checked as hostile input (see datagram.h): allow-list, truncation, header, version 4's tag and key, version 5's session (its handshake answered, NO_SESSION sent, replays refused), version 3's data check, the segment; a key's permission for a new call; then its call (admit.c). */
#include <errno.h>
#include <string.h>

#include "core/tunables.h"
#include "core/wire.h"
#include "server/admit.h"
#include "server/datagram.h"
#include "server/keytab.h"
#include "server/sessions.h"

/* Whether the first segment seen of a new call keyed k may go on: its key has not expired and may
 * call the function; else it is answered FORBIDDEN (docs/PROTOCOL-v4.md) and counted. Checked
 * before the function is looked up, so a key learns nothing of functions it may not call. rx. */
static int authorised(srpc_server_t *srv, const srpc_key_t *key, const srpc_call_key_t *k, const srpc_hdr_t *h,
                      uint64_t now)
{
    if (unlikely(key->expires_ms && srpc_auth_now_ms64() >= key->expires_ms)) {
        ST_ADD(srv, auth_expired, 1);
        reject(srv, k, h, now, SRPC_E_FORBIDDEN, "key %u has expired", key->id);
        return 0;
    }
    if (unlikely(!srpc_key_allows(key, h->func_id))) {
        ST_ADD(srv, auth_forbidden, 1);
        reject(srv, k, h, now, SRPC_E_FORBIDDEN, "key %u may not call function %u", key->id, h->func_id);
        return 0;
    }
    return 1;
}

/* A large segment seq of the message keyed k came: the rest of it is expected next, in place. rx. */
void srpc_dgram_expect_after_rx(srpc_server_t *srv, const srpc_call_key_t *k, uint16_t seq)
{
    srv->rx.direct_hint = 1;
    srv->rx.pred_key = *k;
    srv->rx.pred_seq = (uint16_t)(seq + 1);
    srv->rx.pred_on = 1;
}

/* Sends the len bytes at d to dst as one datagram (version 5's answers before a session, and
 * NO_SESSION: never larger than what came). rx and lock held. */
static void send_raw(srpc_server_t *srv, const struct sockaddr *dst, const uint8_t *d, size_t len)
{
    const struct iovec iv = {(void *)d, len};
    srpc_tx_msg_t m = {.dst = dst,
                       .dstlen = dst->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
                       .hdr = {.type = SRPC_TX_RAW}, .pieces = &iv, .npieces = 1, .len = (uint32_t)len};
    if (srpc_tp_send(srv->tp, &m, 1) < 1)
        ST_ADD(srv, drops[SRPC_DROP_TX_FAILED], 1);
}

/* A version 5 datagram of a handshake type (docs/PROTOCOL-v5.md): an INIT is answered (ACCEPT,
 * or COOKIE under load) or dropped; the others never go to a server. rx and lock held. */
static void v5_handshake(srpc_server_t *srv, const uint8_t *hb, const uint8_t *data, uint32_t total, uint64_t dev,
                         const struct sockaddr *src, uint64_t now)
{
    if ((hb[SRPC_OFF_VER_TYPE] & 0x0f) != SRPC_V5_INIT) {
        ST_ADD(srv, drops[SRPC_DROP_NOT_REQUEST], 1);
        return;
    }
    if (total != SRPC_V5_INIT_LEN || dev || !data) {
        ST_ADD(srv, drops[SRPC_DROP_BAD_HEADER], 1);
        return;
    }
    uint8_t init[SRPC_V5_INIT_LEN], out[SRPC_V5_INIT_LEN];
    memcpy(init, hb, SRPC_HDR_LEN);
    memcpy(init + SRPC_HDR_LEN, data, SRPC_V5_INIT_BODY);
    size_t n = 0;
    const int r = srpc_sessions_on_init(srv->sessions, srv->keys, init, sizeof(init), src, srpc_auth_now_ms64(),
                                        now / 1000000u, out, &n);
    if (r) {
        ST_ADD(srv, drops[r], 1);
        return;
    }
    if (n && n <= total)
        send_raw(srv, src, out, n);
}

#define V5_SHORT (-1) /* v5_open: too short for its session's suite (SRPC_DROP_SHORT is 0) */

/* Version 5: once call k of session s's line is queued (it will run), its line notes it, so that no
 * datagram of it starts it again after it has left the reply cache (sessions.h). rx and lock held. */
static void note_ran(srpc_server_t *srv, const srpc_session_t *s, const srpc_call_key_t *k)
{
    const uint32_t j = ct_find(&srv->ct, k);
    if (j != CT_NONE && (srv->ct.e[j].state == CT_QUEUED || srv->ct.e[j].state == CT_DONE))
        srpc_sessions_call_ran(srv->sessions, s, k->req_id);
}

/* A version 5 data datagram's session, tag and counter (its *dlen bytes at data before the
 * trailer; *dlen then loses an AEGIS-128L session's tag half; decrypted in place in an encrypting
 * session): 0 with *key its key and *sess its session; else the drop reason (V5_SHORT: short). A
 * datagram of a session not here, or not from the address the session was made from, is answered
 * NO_SESSION (at the rate sessions.c allows) and never run. rx and lock held. */
static int v5_open(srpc_server_t *srv, const srpc_hdr_t *h, const uint8_t *hb, uint8_t *data, uint32_t *dlen,
                   const struct sockaddr *src, uint64_t now, srpc_key_t **key, const srpc_session_t **sess)
{
    const uint8_t *tr = data + *dlen; /* the trailer: the datagram's last 32 bytes, whatever the suite */
    const uint64_t id = srpc_v5_trailer_session(tr), counter = srpc_v5_trailer_counter(tr), mono = now / 1000000u;
    srpc_session_t *s = srpc_sessions_find(srv->sessions, srv->keys, id, mono);
    const int moved = s && !srpc_sessions_from(s, src); /* not from where its INIT came: no such session there */
    if (!s || moved) {
        if (h->type == SRPC_REQUEST && srpc_sessions_may_refuse(srv->sessions, src, mono)) {
            uint8_t ns[SRPC_V5_NO_SESSION_LEN];
            srpc_v5_no_session_make(ns, h, id);
            send_raw(srv, src, ns, sizeof(ns));
        }
        return moved ? SRPC_DROP_AUTH_ADDRESS   /* the session is another address's */
                     : SRPC_DROP_AUTH_UNKNOWN_KEY; /* no such session: counted with unknown keys */
    }
    const int r = srpc_sessions_fresh(srv->sessions, s, counter, mono); /* before the tag: a replay costs no AEAD */
    if (r)
        return r;
    const uint32_t head = srpc_v5_tail_len(s->keys.encrypt) - SRPC_V5_TRAILER_LEN; /* AEGIS-128L: its tag's first half */
    if (*dlen < head)
        return V5_SHORT;
    *dlen -= head;
    if (srpc_v5_open(&s->keys, 1, hb, data, *dlen, data + *dlen) < 0)
        return SRPC_DROP_AUTH_BAD_TAG;
    if (srpc_sessions_take(srv->sessions, s, counter, mono) != 0)
        return SRPC_DROP_AUTH_REPLAY;
    *key = srpc_keytab_key(srv->keys, s->key_id); /* there: srpc_sessions_find checked */
    *sess = s;
    return *key ? 0 : SRPC_DROP_AUTH_UNKNOWN_KEY;
}

/* One datagram from src, hostile until checked: total bytes, its header at hb, the rest at
 * data, or at the device address dev (data unused); trunc: longer than what is here. rx and
 * lock held. */
void srpc_dgram_process_rx(srpc_server_t *srv, const uint8_t *hb, const uint8_t *data_in, uint32_t total,
                             int trunc, const struct sockaddr *src, uint64_t dev, uint64_t now)
{
    ST_ADD(srv, rx_datagrams, 1);
    ST_ADD(srv, rx_bytes, total);
    if (unlikely(srv->allow.n && !srpc_allowlist_match(&srv->allow, src))) {
        ST_ADD(srv, drops[SRPC_DROP_NOT_ALLOWED], 1);
        return;
    }
    if (unlikely(trunc)) {
        ST_ADD(srv, drops[SRPC_DROP_TRUNCATED], 1);
        return;
    }
    if (unlikely(srv->sessions && total >= SRPC_HDR_LEN && hb[SRPC_OFF_VER_TYPE] >> 4 == SRPC_VERSION_5 &&
                 (hb[SRPC_OFF_VER_TYPE] & 0x0f) > SRPC_ERROR)) {
        v5_handshake(srv, hb, data_in, total, dev, src, now);
        return;
    }
    srpc_hdr_t h;
    int r = srpc_hdr_decode(hb, total < SRPC_HDR_LEN ? total : SRPC_HDR_LEN, &h);
    if (unlikely(r < 0)) {
        ST_ADD(srv, drops[r == -EMSGSIZE ? SRPC_DROP_SHORT : r == -EPROTO ? SRPC_DROP_BAD_SEGMENT
                          : r == -EILSEQ ? SRPC_DROP_BAD_CHECK : SRPC_DROP_BAD_HEADER], 1);
        return;
    }
    if (unlikely(h.type != SRPC_REQUEST)) {
        ST_ADD(srv, drops[SRPC_DROP_NOT_REQUEST], 1);
        return;
    }
    /* A one-segment request whose data stayed in GPU memory: dev is its address and the data
     * slot is unused. A known call never reads it: a duplicate reads no data, and a partial
     * message disagrees with it (nseg) before any copy. */
    const uint8_t *data = dev ? NULL : data_in;
    uint32_t dlen = total - SRPC_HDR_LEN;
    srpc_key_t *akey = NULL;
    const srpc_session_t *sess = NULL; /* version 5 */
    const int keyed = h.version >= SRPC_VERSION_4; /* a server with keys takes versions 4 and 5 alone */
    if (srv->auth_on != keyed || (h.version == SRPC_VERSION_5 && !srv->sessions)) {
        ST_ADD(srv, drops[srv->auth_on && !keyed ? SRPC_DROP_AUTH_MISSING : SRPC_DROP_BAD_HEADER], 1);
        return;
    }
    if (srv->auth_on) { /* key, tag, time, replay window: before any other field or data byte is believed */
        const uint32_t tail = srpc_tail_len(h.version);
        if (!data || dlen < tail) { /* (device data: never versions 4 and 5) */
            ST_ADD(srv, drops[SRPC_DROP_SHORT], 1);
            return;
        }
        dlen -= tail;
        if (h.version == SRPC_VERSION_5) { /* the session's (docs/PROTOCOL-v5.md); the data decrypted in place */
            r = v5_open(srv, &h, hb, (uint8_t *)data, &dlen, src, now, &akey, &sess);
        } else if (!srv->keys->legacy_v4) { /* version 4 only where the table takes its legacy mode */
            r = SRPC_DROP_AUTH_V4_OFF;
        } else {
            srpc_auth_fields_t f;
            const uint64_t wall_ms = srpc_auth_now_ms64(); /* the datagrams' clock; windows age on now (monotonic) */
            r = srpc_keytab_verify(srv->keys, hb, data, dlen, data + dlen, wall_ms, &akey, &f);
            if (r == 0)
                r = srpc_keytab_commit(srv->keys, akey, &f, wall_ms, now / 1000000u);
        }
        if (unlikely(r)) {
            ST_ADD(srv, drops[r == V5_SHORT ? SRPC_DROP_SHORT : r], 1);
            return;
        }
        ST_ADD(srv, auth_ok, 1);
    }
    if (h.version == SRPC_VERSION_3) { /* the data check, before any data byte is believed */
        r = data ? srpc_data_check(&h, hb, data, &dlen) : -EMSGSIZE; /* (device data: never v3) */
        if (unlikely(r < 0)) {
            ST_ADD(srv, drops[r == -EILSEQ ? SRPC_DROP_BAD_DATA_CHECK : SRPC_DROP_SHORT], 1);
            return;
        }
    }
    uint32_t seg;
    if (unlikely(srpc_seg_check(&h, dlen, &seg) < 0)) {
        ST_ADD(srv, drops[SRPC_DROP_BAD_SEGMENT], 1);
        return;
    }
    if (unlikely(src->sa_family != AF_INET && src->sa_family != AF_INET6))
        return;
    srpc_call_key_t k;
    ct_key_from_sockaddr(&k, src, &h);
    if (akey) {
        k.key_id = akey->id;
        if (sess) { /* version 5: a call is its session's line's; its replies are sealed with k_s2c */
            k.session = sess->lineage;
            k.seal_session = sess->keys.session;
            k.encrypt = sess->keys.encrypt;
            srv->rx.auth_secret = sess->keys.s2c;
        } else {
            srv->rx.auth_secret = akey->secret; /* its replies are signed with it */
        }
    }
    uint32_t idx = ct_find(&srv->ct, &k);
    /* In place: not for version 4 (its tag is checked on the burst path only, for now). */
    if (h.nseg > 1 && dlen >= SRPC_DIRECT_MIN && !srv->rx.direct_off && !srv->auth_on &&
        srpc_tp_can_recv_into(srv->tp))
        srpc_dgram_expect_after_rx(srv, &k, h.seq);
    if (idx != CT_NONE) {
        if (akey && srv->ct.e[idx].state != CT_QUEUED) { /* the key's secret as of now (a reload may change
                                                            it); version 5: the latest session of its line */
            memcpy(srv->ct.e[idx].secret, srv->rx.auth_secret, SRPC_AUTH_SECRET_LEN);
            srv->ct.e[idx].key.seal_session = k.seal_session;
            srv->ct.e[idx].key.encrypt = k.encrypt;
        }
        if (sess && (srv->ct.e[idx].state == CT_DONE || srv->ct.e[idx].state == CT_REJECTED))
            srv->ct.e[idx].key.addr = k.addr; /* version 5: answered where this datagram came from (a call
                                                 still arriving keeps its first address: its memory is
                                                 counted there; a running one: the worker reads it) */
        const int arriving = sess && srv->ct.e[idx].state == CT_PARTIAL;
        srpc_admit_known_rx(srv, idx, &h, seg, data, dlen, now);
        if (arriving)
            note_ran(srv, sess, &k);
    } else if (sess && !srpc_sessions_call_fresh(srv->sessions, sess, h.req_id)) {
        ST_ADD(srv, drops[SRPC_DROP_AUTH_STALE], 1); /* its line ran it, and it has left the reply cache: a
                                                        datagram held back on the way, never run again */
    } else if (akey && !authorised(srv, akey, &k, &h, now)) {
        /* refused FORBIDDEN */
    } else {
        const uint32_t queued = srpc_admit_new_rx(srv, &k, &h, seg, data, dlen, dev, now);
        if (sess && queued != CT_NONE)
            srpc_sessions_call_ran(srv->sessions, sess, h.req_id); /* it will run: never again (sessions.h) */
    }
    srv->rx.auth_secret = NULL;
}

/* An entry of n datagrams came: a coalesced run puts the receiver in run mode (the expected
 * segments are received as one run, rx_run) for the next SRPC_RUN_MODE_HOLD entries of one
 * datagram (a run's odd datagram alone does not end it; a sender that stops coalescing does). rx. */
void srpc_dgram_note_run_rx(srpc_server_t *srv, unsigned n)
{
    if (n > 1)
        srv->rx.run_mode = SRPC_RUN_MODE_HOLD;
    else if (srv->rx.run_mode)
        srv->rx.run_mode--;
}

/* Entry i of the burst: its datagram, or each of those coalesced into it, in order. rx and lock held. */
void srpc_dgram_entry_rx(srpc_server_t *srv, unsigned i, uint64_t now)
{
    const srpc_rx_t *rx = &srv->rx.slots;
    const struct sockaddr *src = (const struct sockaddr *)&rx->src[i];
    const unsigned n = srpc_rx_dgrams(rx, i);
    srpc_dgram_note_run_rx(srv, n);
    if (n > 1)
        ST_ADD(srv, rx_coalesced, n);
    for (unsigned j = 0; j < n; j++) {
        const srpc_rx_dg_t d = srpc_rx_dgram(rx, i, j);
        srpc_dgram_process_rx(srv, d.hdr, d.data, d.len, rx->trunc[i], src, rx->dev[i], now);
    }
}
