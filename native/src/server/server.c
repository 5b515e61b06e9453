/* server.c: a server's life cycle: configuration, creation (the transport, the call table, the reply log), function registration, the engine thread's start and stop, destruction, counters and the fault injectors of testing builds. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/tunables.h"
#include "dpdk/transport_dpdk.h"
#include "server/callring.h"
#include "server/function.h"
#include "server/gpu_rx.h"
#include "server/keytab.h"
#include "server/partial.h"
#include "server/reply.h"
#include "server/rx_owner.h"
#include "server/server_state.h"
#include "server/sessions.h"
#include "splitrpc_tools.h"

void srpc_server_config_init(srpc_server_config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->host = SRPC_DEF_HOST;
    c->port = SRPC_DEF_PORT;
    c->wait_mode = SRPC_WAIT_ADAPTIVE;
    c->spin_us = SRPC_DEF_SPIN_US;
    c->seg_size = SRPC_DEF_SEG_SIZE;
    c->seg_size_loopback = SRPC_DEF_SEG_SIZE_LOOPBACK;
    c->max_message = SRPC_DEF_MAX_MESSAGE;
    c->reasm_timeout_us = SRPC_DEF_REASM_TIMEOUT_US;
    c->reasm_mem_cap = SRPC_DEF_REASM_MEM_CAP;
    c->reasm_mem_cap_client = SRPC_DEF_REASM_MEM_CAP_CLIENT;
    c->reply_cache_us = SRPC_DEF_REPLY_CACHE_US;
    c->reply_cache_bytes = SRPC_DEF_REPLY_CACHE_BYTES;
    c->max_calls = SRPC_DEF_MAX_CALLS;
    c->rx_burst = SRPC_DEF_RX_BURST;
    c->sock_buf_bytes = SRPC_DEF_SOCK_BUF;
    c->rx_takeover_us = SRPC_DEF_RX_TAKEOVER_US;
    c->reply_hold_us = SRPC_DEF_REPLY_HOLD_US;
    c->dpdk_payload_gpu = SRPC_DPDK_PAYLOAD_AUTO;
}

static int check_config(const srpc_server_config_t *c)
{
    if (c->wait_mode < SRPC_WAIT_POLL || c->wait_mode > SRPC_WAIT_ADAPTIVE)
        return -EINVAL;
    if (c->seg_size == 0 || c->seg_size > SRPC_MAX_SEG_DATA || c->seg_size_loopback == 0 ||
        c->seg_size_loopback > SRPC_MAX_SEG_DATA)
        return -EINVAL;
    if (c->rx_burst == 0 || c->rx_burst > SRPC_MAX_RX_BURST || c->max_calls == 0 || c->max_message == 0)
        return -EINVAL;
    if (c->sched < SRPC_SCHED_RR || c->sched >= SRPC_SCHED_MAX || c->reply_hold_us > SRPC_MAX_REPLY_HOLD_US)
        return -EINVAL;
    return 0; /* the transport checks its own settings (srpc_transport_open) */
}

int srpc_server_create(const srpc_server_config_t *cfg, srpc_server_t **out)
{
    if (!cfg || !out)
        return -EINVAL;
    int r = check_config(cfg);
    if (r)
        return r;
    srpc_server_t *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->cfg = *cfg;
    snprintf(s->host, sizeof(s->host), "%s", cfg->host ? cfg->host : "0.0.0.0");
    s->cfg.host = s->host;
    s->cfg.allow = NULL; /* parsed below; the caller's string is not kept */
    s->stopfd = s->wakefd = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->rx.lock, NULL);
    s->by_id = calloc(65536, sizeof(*s->by_id));
    if (!s->by_id) {
        r = -ENOMEM;
        goto fail;
    }
    if ((r = srpc_allowlist_parse(&s->allow, cfg->allow)) != 0) {
        r = -EINVAL;
        goto fail;
    }
    srpc_bufpool_init(&s->pool, SRPC_DEF_REASM_POOL_BYTES);
    if ((r = ct_init(&s->ct, cfg->max_calls)) != 0 || (r = srcmem_init(&s->srcmem, cfg->max_calls)) != 0 ||
        (r = srpc_reply_log_init(&s->log, cfg->reply_cache_bytes)) != 0 || (r = srpc_reply_hold_init(s)) != 0)
        goto fail;
    /* A datagram's data lands in a payload slot big enough for any UDP payload, so a
     * too-long datagram is seen (and counted) rather than silently cut. */
    if ((r = srpc_rx_init(&s->rx.slots, cfg->rx_burst, 65535)) != 0)
        goto fail;
    srpc_transport_spec_t spec = {.host = s->host, .port = cfg->port, .bind = 1, .reuse_port = cfg->reuse_port,
                                  .sock_buf_bytes = cfg->sock_buf_bytes,
                                  .dpdk_dev = cfg->dpdk_dev, .dpdk_mtu = cfg->dpdk_mtu,
                                  .dpdk_payload_gpu = cfg->dpdk_payload_gpu, .dpdk_emulate_split = cfg->dpdk_emulate_split};
    if ((r = srpc_transport_open(&spec, &s->tp)) != 0 || (r = srpc_gpu_rx_init(s)) != 0)
        goto fail;
    s->st.rcvbuf = s->tp->rcvbuf;
    s->st.sndbuf = s->tp->sndbuf;
    s->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); /* readable once stopped: ends poll() */
    s->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->stopfd < 0 || s->wakefd < 0) {
        r = -errno;
        goto fail;
    }
    *out = s;
    return 0;
fail:
    srpc_server_destroy(s);
    return r;
}

int srpc_server_dpdk_stats(const srpc_server_t *srv, srpc_dpdk_stats_t *st)
{
    if (!srv || !st)
        return -EINVAL;
    return srpc_dpdk_transport_stats(srv->tp, st);
}

int srpc_server_port(const srpc_server_t *srv)
{
    return srv->tp->ops->local_port(srv->tp);
}

int srpc_server_add_function(srpc_server_t *srv, const srpc_func_config_t *fc)
{
    if (!srv || !fc || srv->started)
        return -EINVAL;
    if (srv->by_id[fc->func_id])
        return -EEXIST;
    const uint32_t n = fc->aux_classes > 1 ? fc->aux_classes : 1;
    const int by_cost = fc->class_by == SRPC_CLASS_BY_COST;
    if (n > SRPC_MAX_AUX_CLASSES || (fc->class_by != SRPC_CLASS_BY_AUX && !by_cost) ||
        (n > 1 && !by_cost && fc->cost_from == SRPC_COST_AUX))
        return -EINVAL;
    if (by_cost) { /* a cost to classify by, read from host memory; bounds 1 <= b0 < b1 < ... */
        if (n < 2 || fc->cost_from == SRPC_COST_NONE || fc->on_gpu || srv->tp->payload_device >= 0)
            return -EINVAL;
        for (uint32_t k = 0; k + 1 < n; k++)
            if (fc->class_bounds[k] < 1 || (k && fc->class_bounds[k] <= fc->class_bounds[k - 1]))
                return -EINVAL;
    }
    for (uint32_t k = 0; k < SRPC_MAX_CLASS_BOUNDS; k++) /* spill limits: classes by cost, below the last */
        if (fc->class_spill[k] && (!by_cost || k + 1 >= n))
            return -EINVAL;
    if (srv->nfns + n > SRPC_MAX_FUNCS)
        return -ENOSPC;
    const uint32_t first = srv->nfns;
    for (uint32_t k = 0; k < n; k++) { /* one record (queues, ring) per class */
        srpc_fn_t *fn;
        int r = srpc_function_create(&srv->cfg, fc, &fn);
        if (r) {
            while (srv->nfns > first)
                srpc_function_free(srv->fns[--srv->nfns]);
            return r;
        }
        fn->aux_class = (uint16_t)k;
        fn->n_classes = (uint16_t)(n > 1 ? n : 0);
        fn->first_fi = first;
        fn->fi = first + k;
        fn->class_by_cost = (uint8_t)by_cost;
        if (by_cost) {
            memcpy(fn->class_bounds, fc->class_bounds, (n - 1) * sizeof(uint32_t));
            memcpy(fn->class_spill, fc->class_spill, (n - 1) * sizeof(uint32_t));
        }
        fn->priority = k <= UINT32_MAX - fc->priority ? fc->priority + k : UINT32_MAX; /* saturating */
        srv->fns[srv->nfns++] = fn;
    }
    srv->by_id[fc->func_id] = srv->fns[first];
    return 0;
}

int srpc_server_start(srpc_server_t *srv)
{
    if (!srv || srv->started)
        return -EINVAL;
    atomic_store(&srv->stopping, 0);
    atomic_store(&srv->rx.w_state, W_AWAY);
    atomic_store(&srv->rx.w_away_since, srpc_now_ns());
    int r = pthread_create(&srv->thread, NULL, srpc_rx_owner_engine_main, srv);
    if (r)
        return -r;
    srv->started = 1;
    return 0;
}

int srpc_server_set_keys(srpc_server_t *srv, srpc_keytab_t *t)
{
    if (!t)
        return -EINVAL;
    int r = 0;
    if (!srv || (srv->started && !srv->auth_on))
        r = -EINVAL; /* authentication cannot be turned on while serving */
    else if (srv->auth_on && t->max_senders != srv->auth_max_senders)
        r = -EINVAL; /* the windows stay across reloads: their size too */
    else
        r = srpc_keytab_seal(t);
    if (r < 0) {
        srpc_keytab_destroy(t);
        return r;
    }
    if (!srv->auth_on) { /* the first table, before start: in use at once */
        r = srpc_auth_random(&srv->auth_sender, sizeof(srv->auth_sender));
        if (r < 0) {
            srpc_keytab_destroy(t);
            return r;
        }
        srv->auth_sender |= 1; /* nonzero */
        /* Version 5's sessions too, where libsodium has what they need: else version 4 alone. */
        if (srpc_v5_available() == 0) {
            srv->sessions = calloc(1, sizeof(*srv->sessions));
            if (!srv->sessions || (r = srpc_sessions_init(srv->sessions, SRPC_V5_MAX_SESSIONS, 0)) < 0) {
                free(srv->sessions);
                srv->sessions = NULL;
                srpc_keytab_destroy(t);
                return r < 0 ? r : -ENOMEM;
            }
            /* A datagram is taken for at most half the time a finished call is remembered. */
            const uint32_t half = srv->cfg.reply_cache_us / 2000u;
            srv->sessions->stale_ms = half ? half : 1;
            srpc_sessions_note_skew(srv->sessions, t->skew_ms);
        }
        srv->keys = t;
        srv->auth_max_senders = t->max_senders;
        srv->auth_on = 1;
        return 0;
    }
    /* The engine takes it in at its next receive (engine.c keys_reload); a table handed in
     * before and not yet taken is replaced (acquire: another thread's table, released by its
     * exchange, is freed here). */
    srpc_keytab_destroy(atomic_exchange_explicit(&srv->keys_next, t, memory_order_acq_rel));
    return 0;
}

int srpc_server_set_sched_fn(srpc_server_t *srv, srpc_sched_fn fn, void *ctx)
{
    if (!srv)
        return -EINVAL;
    if (srv->started)
        return -EBUSY;
    if (fn && !srv->sched_view) { /* what the policy is shown: SRPC_MAX_FUNCS views, off the worker's stack */
        srv->sched_view = calloc(SRPC_MAX_FUNCS, sizeof(*srv->sched_view));
        srv->sched_fi = calloc(SRPC_MAX_FUNCS, sizeof(*srv->sched_fi));
        if (!srv->sched_view || !srv->sched_fi) {
            free(srv->sched_view);
            free(srv->sched_fi);
            srv->sched_view = NULL;
            srv->sched_fi = NULL;
            return -ENOMEM;
        }
    }
    srv->sched_fn = fn;
    srv->sched_ctx = ctx;
    return 0;
}

int srpc_server_stop(srpc_server_t *srv)
{
    if (!srv)
        return -EINVAL;
    atomic_store(&srv->stopping, 1);
    uint64_t one = 1;
    if (srv->stopfd >= 0 && write(srv->stopfd, &one, sizeof(one)) < 0) {
        /* the counter is already non-zero: poll() sees it readable anyway */
    }
    srpc_ring_notify(srv);
    srpc_futex_wake(&srv->ready_gen);
    srpc_rx_owner_kick(srv);
    if (srv->started) {
        pthread_join(srv->thread, NULL);
        srv->started = 0;
    }
    return 0;
}

int srpc_server_drain(srpc_server_t *srv, int on)
{
    if (!srv)
        return -EINVAL;
    atomic_store(&srv->draining, on != 0);
    return 0;
}

int srpc_server_pending(srpc_server_t *srv, uint64_t *out)
{
    if (!srv || !out)
        return -EINVAL;
    srpc_srv_lock(srv);
    /* Entries in use less those answered (done, cached) or refused: partial and queued ones. */
    *out = srv->ct.e ? srv->ct.used - srv->ct.count[CT_LIST_DONE] - srv->ct.count[CT_LIST_REJECTED] : 0;
    srpc_srv_unlock(srv);
    return 0;
}

int srpc_server_func_stats(const srpc_server_t *srv, uint16_t func_id, srpc_func_stats_t *out)
{
    if (!srv || !out)
        return -EINVAL;
    srpc_server_t *s = (srpc_server_t *)srv;
    const srpc_fn_t *first = s->by_id[func_id];
    if (!first)
        return -ENOENT;
    memset(out, 0, sizeof(*out));
    const uint32_t n = first->n_classes > 1 ? first->n_classes : 1;
    srpc_srv_lock(s);
    for (uint32_t c = 0; c < n; c++) {
        const srpc_fn_t *fn = s->fns[first->first_fi + c];
        const uint64_t *src = (const uint64_t *)&fn->st;
        uint64_t *dst = (uint64_t *)out;
        for (size_t i = 0; i < offsetof(srpc_func_stats_t, queued) / sizeof(uint64_t); i++)
            dst[i] += __atomic_load_n(&src[i], __ATOMIC_RELAXED);
        out->queued += fn->ready_end - fn->taken;
    }
    srpc_srv_unlock(s);
    return 0;
}

void srpc_server_destroy(srpc_server_t *srv)
{
    if (!srv)
        return;
    srpc_server_stop(srv);
    srpc_reply_hold_free(srv); /* replies never sent (the worker gone): their calls are CT_QUEUED, removed below */
    if (srv->ct.e) {
        srpc_srv_lock(srv);
        for (uint32_t i = 0; i < srv->ct.max_entries; i++) {
            const uint8_t st = srv->ct.e[i].state;
            if (st == CT_PARTIAL)
                srpc_partial_drop_locked(srv, i);
            else if (st == CT_DONE || st == CT_REJECTED)
                srpc_reply_forget_locked(srv, i);
            else if (st != CT_FREE)
                ct_remove(&srv->ct, i);
        }
        srpc_srv_unlock(srv);
        ct_destroy(&srv->ct);
    }
    srcmem_destroy(&srv->srcmem);
    srpc_keytab_destroy(srv->keys);
    srpc_keytab_destroy(atomic_exchange(&srv->keys_next, NULL));
    if (srv->sessions) {
        srpc_sessions_destroy(srv->sessions);
        free(srv->sessions);
    }
    srpc_bufpool_destroy(&srv->pool);
    srpc_reply_log_free(&srv->log);
    for (uint32_t i = 0; i < srv->nfns; i++)
        srpc_function_free(srv->fns[i]);
    free(srv->by_id);
    free(srv->sched_view);
    free(srv->sched_fi);
    srpc_rx_free(&srv->rx.slots);
    srpc_gpu_rx_free(srv);
    srpc_transport_close(srv->tp);
    if (srv->stopfd >= 0)
        close(srv->stopfd);
    if (srv->wakefd >= 0)
        close(srv->wakefd);
    pthread_mutex_destroy(&srv->lock);
    pthread_mutex_destroy(&srv->rx.lock);
    free(srv);
}

/* ------------------------------------------------------------------ counters */

const char *srpc_drop_name(int reason)
{
    static const char *const names[SRPC_DROP_MAX] = {
        [SRPC_DROP_SHORT] = "short", [SRPC_DROP_BAD_HEADER] = "bad_header", [SRPC_DROP_BAD_SEGMENT] = "bad_segment",
        [SRPC_DROP_TRUNCATED] = "truncated", [SRPC_DROP_NOT_REQUEST] = "not_request",
        [SRPC_DROP_INCONSISTENT] = "inconsistent", [SRPC_DROP_REASM_TIMEOUT] = "reassembly_timeout",
        [SRPC_DROP_MEM_CAP] = "memory_cap", [SRPC_DROP_TABLE_FULL] = "table_full", [SRPC_DROP_DUPLICATE] = "duplicate",
        [SRPC_DROP_REJECTED] = "rejected", [SRPC_DROP_TX_FAILED] = "tx_failed", [SRPC_DROP_NOT_ALLOWED] = "not_allowed",
        [SRPC_DROP_BAD_CHECK] = "bad_check", [SRPC_DROP_CLIENT_MEM_CAP] = "client_memory_cap",
        [SRPC_DROP_BAD_DATA_CHECK] = "bad_data_check", [SRPC_DROP_AUTH_MISSING] = "auth_missing",
        [SRPC_DROP_AUTH_UNKNOWN_KEY] = "auth_unknown_key", [SRPC_DROP_AUTH_BAD_TAG] = "auth_bad_tag",
        [SRPC_DROP_AUTH_STALE] = "auth_stale", [SRPC_DROP_AUTH_REPLAY] = "auth_replay",
        [SRPC_DROP_AUTH_NO_ROOM] = "auth_no_room", [SRPC_DROP_AUTH_V4_OFF] = "auth_v4_off",
        [SRPC_DROP_AUTH_ADDRESS] = "auth_address",
    };
    return reason >= 0 && reason < SRPC_DROP_MAX ? names[reason] : NULL;
}

_Static_assert(offsetof(srpc_server_stats_t, rcvbuf) % sizeof(uint64_t) == 0,
               "the stats counters before rcvbuf are read as an array of uint64_t");

int srpc_server_stats(const srpc_server_t *srv, srpc_server_stats_t *out)
{
    if (!srv || !out)
        return -EINVAL;
    srpc_server_t *s = (srpc_server_t *)srv;
    srpc_srv_lock(s);
    /* The counters are added to atomically from two threads: read them the same way. */
    const uint64_t *src = (const uint64_t *)&s->st;
    uint64_t *dst = (uint64_t *)out;
    for (size_t i = 0; i < offsetof(srpc_server_stats_t, rcvbuf) / sizeof(uint64_t); i++)
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
    /* Calls, batches and their histograms are counted once, per function (FN_ADD on the receive
     * and batch paths): the server's are their sums. */
    for (uint32_t f = 0; f < s->nfns; f++) {
        const srpc_func_stats_t *fs = &s->fns[f]->st;
        out->calls += __atomic_load_n(&fs->calls, __ATOMIC_RELAXED);
        out->batches += __atomic_load_n(&fs->batches, __ATOMIC_RELAXED);
        for (int i = 0; i < SRPC_BATCH_HIST; i++)
            out->batch_hist[i] += __atomic_load_n(&fs->batch_hist[i], __ATOMIC_RELAXED);
        for (int i = 0; i < SRPC_QDELAY_HIST; i++)
            out->queue_delay_hist[i] += __atomic_load_n(&fs->queue_delay_hist[i], __ATOMIC_RELAXED);
        out->queue_delay_sum_ns += __atomic_load_n(&fs->queue_delay_sum_ns, __ATOMIC_RELAXED);
    }
    out->rcvbuf = s->st.rcvbuf;
    out->sndbuf = s->st.sndbuf;
    out->tx_coalesced = s->tp->tx_coalesced ? __atomic_load_n(s->tp->tx_coalesced, __ATOMIC_RELAXED) : 0;
    out->partial_msgs = s->ct.count[CT_LIST_PARTIAL]; /* kept as entries move: a scrape is O(1) */
    out->reasm_bytes = s->reasm_bytes;
    out->inflight = __atomic_load_n(&srv->inflight, __ATOMIC_RELAXED);
    out->queued = atomic_load(&s->n_ready);
    out->cached_replies = s->ct.count[CT_LIST_DONE];
    out->sessions = s->sessions ? s->sessions->used : 0;
    out->sessions_made = s->sessions ? s->sessions->st.accepted : 0;
    out->sessions_forgotten = s->sessions ? s->sessions->st.expired : 0;
    out->sessions_tombstones = s->sessions ? s->sessions->tombs_used : 0;
    out->sessions_tomb_resumes = s->sessions ? s->sessions->st.tomb_resumes : 0;
    srpc_srv_unlock(s);
    return 0;
}

/* ------------------------------------------------------------------ fault injection (testing builds) */

int srpc_server_set_faults(srpc_server_t *srv, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx,
                           uint64_t seed)
{
    if (!srv)
        return -EINVAL;
    if (srpc_tp_has_faults(srv->tp) && srv->started)
        return -EBUSY;
    return srpc_tp_set_faults(srv->tp, rx, tx, seed);
}

int srpc_server_fault_counts(const srpc_server_t *srv, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx)
{
    return srv ? srpc_tp_fault_counts(srv->tp, rx, tx) : -EINVAL;
}
