/* client.c: a client's life: its configuration's defaults, creation (the transport, the segment size, the keys), shutdown (every call finished, nothing sent after), destruction, stats, and the hooks of an event loop and of fault injection. The calls themselves are calls.c's; client_state.h says which file does what. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "client/client_state.h"
#include "core/aes_keys.h"
#include "core/tunables.h"

void srpc_client_config_init(srpc_client_config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->host = SRPC_DEF_HOST;
    c->port = SRPC_DEF_PORT;
    c->max_reply = SRPC_DEF_MAX_REPLY;
    c->busy_poll = 0;
    c->sock_buf_bytes = SRPC_DEF_SOCK_BUF;
    c->retries = SRPC_DEF_RETRIES;
    c->rto_min_us = SRPC_DEF_RTO_MIN_US;
    c->rto_initial_us = SRPC_DEF_RTO_INITIAL_US;
    c->rto_max_us = SRPC_DEF_RTO_MAX_US;
    c->window = SRPC_DEF_CLIENT_WINDOW;
    c->busy_retry = 1;
    c->busy_backoff_us = SRPC_DEF_BUSY_BACKOFF_US;
    c->version = SRPC_VERSION_2;
    c->rekey_ms = SRPC_V5_CLIENT_REKEY_MS;
    c->v5_suites = SRPC_V5_FLAG_AES | SRPC_V5_FLAG_AEGIS;
}

int srpc_client_create(const srpc_client_config_t *cfg, srpc_client_t **out)
{
    if (!cfg || !out || !cfg->host || cfg->seg_size > SRPC_MAX_SEG_DATA ||
        cfg->version < SRPC_VERSION || cfg->version > SRPC_VERSION_5 ||
        (cfg->retries && (cfg->rto_min_us == 0 || cfg->rto_min_us > cfg->rto_max_us ||
                          cfg->rto_initial_us < cfg->rto_min_us || cfg->rto_initial_us > cfg->rto_max_us)) ||
        (cfg->busy_retry && (cfg->busy_backoff_us == 0 || cfg->rto_max_us == 0)))
        return -EINVAL;
    srpc_auth_sender_t auth = {0};
    if (cfg->version == SRPC_VERSION_4) {
        int r = srpc_auth_sender_init(&auth, cfg->auth_key_id, cfg->auth_secret, SRPC_AUTH_SECRET_LEN);
        if (r < 0)
            return r; /* -EINVAL (no key), -ENOTSUP (no MAC library) */
    }
    srpc_client_t *c = calloc(1, sizeof(*c));
    srpc_cl_v5_t *v5 = cfg->version == SRPC_VERSION_5 ? malloc(sizeof(*v5)) : NULL;
    if (!c || (cfg->version == SRPC_VERSION_5 && !v5)) {
        free(c);
        free(v5);
        srpc_auth_wipe(&auth, sizeof(auth));
        return -ENOMEM;
    }
    if (v5) {
        int r = !cfg->auth_secret ? -EINVAL
                                  : srpc_cl_v5_init(v5, cfg->auth_key_id, cfg->auth_secret, cfg->encrypt, cfg->rekey_ms);
        if (r < 0) { /* -EINVAL (no key, a rekey later than the page allows), -ENOTSUP (no libsodium) */
            free(c);
            free(v5);
            return r;
        }
        srpc_cl_v5_offer(v5, cfg->v5_suites);
    }
    c->cfg = *cfg;
    c->auth = auth;
    c->v5 = v5;
    srpc_auth_wipe(&auth, sizeof(auth));
    c->cfg.auth_secret = NULL; /* the copy in c->auth is the one used */
    snprintf(c->host, sizeof(c->host), "%s", cfg->host);
    c->cfg.host = c->host;
    pthread_mutex_init(&c->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    int r = srpc_rx_init(&c->rx, 16, 65535);
    srpc_transport_spec_t spec = {.host = c->host, .port = cfg->port, .bind = 0, .sock_buf_bytes = cfg->sock_buf_bytes,
                                  .dpdk_dev = cfg->dpdk_dev, .dpdk_mtu = cfg->dpdk_mtu, .dpdk_local_ip = cfg->dpdk_local_ip,
                                  .dpdk_local_port = cfg->dpdk_local_port, .dpdk_peer_mac = cfg->dpdk_server_mac};
    if (!r)
        r = srpc_transport_open(&spec, &c->tp);
    if (r) {
        srpc_client_destroy(c);
        return r;
    }
    if (c->tp->wait_fd < 0)
        c->cfg.busy_poll = 1; /* nothing to sleep on: poll */
    /* Requests are cut at S = seg_size, else by destination: a loopback peer takes whole 64 KiB
     * datagrams; otherwise what the route's MTU carries unfragmented (1450 on a 1500-byte
     * Ethernet MTU, 8950 on a 9000-byte jumbo one, 1430 over IPv6), or 1450 where the kernel
     * does not say; never above what one datagram of the transport carries (DPDK: its MTU). */
    uint32_t seg = cfg->seg_size ? cfg->seg_size
                   : c->tp->max_seg < SRPC_MAX_SEG_DATA ? c->tp->max_seg
                   : c->tp->peer_loopback ? SRPC_DEF_SEG_SIZE_LOOPBACK
                   : c->tp->path_seg ? c->tp->path_seg : SRPC_DEF_SEG_SIZE;
    c->seg = seg < c->tp->max_seg ? seg : c->tp->max_seg;
    uint64_t start;
    if (getrandom(&start, sizeof(start), 0) != sizeof(start))
        start = srpc_now_ns() ^ ((uint64_t)(uintptr_t)c << 16);
    atomic_init(&c->next_id, start);
    atomic_init(&c->sending, 0);
    c->rnd = start | 1;
    c->next_due = UINT64_MAX;
    *out = c;
    return 0;
}

void srpc_client_destroy(srpc_client_t *c)
{
    if (!c)
        return;
    for (int b = 0; b < SRPC_CL_NBUCKETS; b++)
        for (cl_call_t *k = c->buckets[b], *n; k; k = n) {
            n = k->hnext;
            cl_call_free(k);
        }
    srpc_rx_free(&c->rx);
    srpc_transport_close(c->tp);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->lock);
    srpc_auth_wipe(&c->auth, sizeof(c->auth)); /* the key's secret */
    if (c->v5) {
        srpc_cl_v5_wipe(c->v5); /* the psk and every session's keys */
        srpc_aes_keys_wipe();   /* and the AES-256-GCM keys this thread expanded (other threads keep theirs
                                   until replaced or their end: core/aes_keys.h) */
        free(c->v5);
    }
    free(c);
}

int srpc_client_shutdown(srpc_client_t *c)
{
    if (!c)
        return -EINVAL;
    cl_lock(c);
    if (!c->shut) {
        c->shut = 1;
        for (int b = 0; b < SRPC_CL_NBUCKETS; b++)
            for (cl_call_t *k = c->buckets[b]; k; k = k->hnext)
                if (!k->done)
                    cl_finish_local(c, k, SRPC_E_CLOSED, "the client was closed");
        c->next_due = UINT64_MAX; /* nothing is due any more (an event loop's next wake) */
        pthread_cond_broadcast(&c->cv);
    }
    cl_unlock(c);
    /* Sends registered before the shut (their calls finished above) may still be on their way
     * out: wait for them, so that nothing leaves after this returns. They do not block (a full
     * socket queue refuses), so this is microseconds. */
    while (atomic_load(&c->sending))
        sched_yield();
    return 0;
}

int srpc_client_stats(const srpc_client_t *c, srpc_client_stats_t *out)
{
    if (!c || !out)
        return -EINVAL;
    srpc_client_t *m = (srpc_client_t *)c;
    cl_lock(m);
    *out = m->st;
    out->outstanding = m->outstanding;
    out->waiting = 0;
    for (const cl_call_t *k = m->whead; k; k = k->wnext)
        out->waiting++;
    const rtt_est_t *e = cl_rtt_of(m, m->last_func);
    out->srtt_us = e ? e->srtt_ns / 1000 : 0;
    out->rto_us = m->cfg.retries ? cl_rto_ns(m, m->last_func) / 1000 : 0;
    if (m->v5) {
        const srpc_cl_v5_stats_t *v = &m->v5->st;
        out->handshakes = v->handshakes;
        out->rekeys = v->rekeys;
        out->no_sessions = v->no_sessions;
        out->cookies = v->cookies;
        out->handshakes_failed = v->handshakes_failed;
        out->session_resends = v->resent;
        out->no_sessions_deferred = v->no_sessions_deferred;
    }
    cl_unlock(m);
    return 0;
}

int srpc_client_fd(const srpc_client_t *c)
{
    if (!c)
        return -EINVAL;
    return c->tp->wait_fd >= 0 ? c->tp->wait_fd : -ENOTSUP;
}

int srpc_client_next_due(srpc_client_t *c, uint64_t *due_ns)
{
    if (!c || !due_ns)
        return -EINVAL;
    cl_lock(c);
    *due_ns = c->next_due;
    cl_unlock(c);
    return 0;
}

/* ------------------------------------------------------------------ fault injection (testing builds) */

int srpc_client_set_faults(srpc_client_t *c, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx,
                           uint64_t seed)
{
    return c ? srpc_tp_set_faults(c->tp, rx, tx, seed) : -EINVAL;
}

int srpc_client_fault_counts(const srpc_client_t *c, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx)
{
    return c ? srpc_tp_fault_counts(c->tp, rx, tx) : -EINVAL;
}
