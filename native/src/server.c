/* server.c: server life cycle: configuration, function registration (Tensor Queues and the
 * Inference Monitor), the engine thread's start and stop, counters. */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "gpu_driver.h"
#include "server_internal.h"
#include "tunables.h"

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
    if (c->dpdk_dev && (c->port == 0 || (c->dpdk_mtu && c->dpdk_mtu < 576) ||
                        c->dpdk_payload_gpu < SRPC_DPDK_PAYLOAD_AUTO || c->dpdk_payload_gpu >= SRPC_GPU_MAX_DEVICES))
        return -EINVAL;
    return 0;
}

/* The DPDK port of a server: host must be an IPv4 literal, our address on that port. */
static int open_dpdk(srpc_server_t *s)
{
    struct in_addr a;
    if (inet_pton(AF_INET, s->host, &a) != 1)
        return -EINVAL;
    int gpu = s->cfg.dpdk_payload_gpu;
    if (gpu == SRPC_DPDK_PAYLOAD_AUTO) /* quietly host memory on a machine without a GPU */
        gpu = srpc_gpu_device_count() > 0 ? 0 : -1;
    srpc_dpdk_port_config_t pc = {.dev = s->cfg.dpdk_dev, .ip = ntohl(a.s_addr), .udp_port = s->cfg.port,
                                  .mtu = s->cfg.dpdk_mtu, .payload_on_gpu = gpu >= 0, .gpu_device = gpu,
                                  .emulate_split = s->cfg.dpdk_emulate_split};
    uint16_t mtu = pc.mtu ? pc.mtu : 1500;
    s->dpdk_seg = mtu - SRPC_IP4_HLEN - SRPC_UDP_HLEN - SRPC_HDR_LEN;
    int r = srpc_dpdk_port_open(&pc, &s->dpdk);
    int dev = r ? -1 : srpc_dpdk_payload_device(s->dpdk);
    if (dev < 0)
        return r;
    if (!(s->rx_dev_calls = calloc(s->cfg.rx_burst, sizeof(*s->rx_dev_calls))))
        return -ENOMEM;
    return srpc_gpu_stream_create(dev, &s->rx_stream); /* the engine's copies */
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
    s->udp.fd = s->stopfd = s->wakefd = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->rx_lock, NULL);
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
    if ((r = ct_init(&s->ct, cfg->max_calls)) != 0 || (r = srcmem_init(&s->srcmem, cfg->max_calls)) != 0)
        goto fail;
    /* A datagram's data lands in a payload slot big enough for any UDP payload, so a
     * too-long datagram is seen (and counted) rather than silently cut. */
    if ((r = srpc_rx_init(&s->rx, cfg->rx_burst, 65535)) != 0)
        goto fail;
    if ((r = cfg->dpdk_dev ? open_dpdk(s) : srpc_udp_open(&s->udp, s->host, cfg->port, 1, cfg->sock_buf_bytes)) != 0)
        goto fail;
    s->st.rcvbuf = s->udp.rcvbuf;
    s->st.sndbuf = s->udp.sndbuf;
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
    if (!srv || !st || !srv->dpdk)
        return -EINVAL;
    srpc_dpdk_port_stats(srv->dpdk, st);
    return 0;
}

const char *srpc_dpdk_drop_name(int r)
{
    return r > 0 && r < SRPC_FRAME_DROP_MAX ? srpc_frame_drop_name(r) : NULL;
}

const char *srpc_dpdk_payload_pool_name(int kind)
{
    static const char *const names[] = {"none", "dpdk", "host", "gpu"};
    return kind >= 0 && kind < (int)(sizeof(names) / sizeof(names[0])) ? names[kind] : NULL;
}

int srpc_server_port(const srpc_server_t *srv)
{
    return srv->dpdk ? srv->cfg.port : srpc_udp_local_port(&srv->udp);
}

/* Frees a staging TQ of a GPU function (page-locked when pinned) or a host TQ. */
static void staging_free(srpc_tq_t *tq, int pinned)
{
    if (tq && pinned)
        srpc_gpu_host_unregister(srpc_tq_base(tq));
    srpc_tq_destroy(tq);
}

static void fn_free(srpc_fn_t *fn)
{
    if (!fn)
        return;
    for (uint32_t k = 0; k < SRPC_MAX_TENSORS; k++) {
        staging_free(fn->in_tq[k], fn->staging_pinned);
        staging_free(fn->out_tq[k], fn->staging_pinned);
        srpc_dtq_destroy(fn->in_dtq[k]);
        srpc_dtq_destroy(fn->out_dtq[k]);
    }
    if (fn->gpu_device >= 0)
        srpc_gpu_host_free(fn->done_words);
    else
        free(fn->done_words);
    if (fn->calls)
        for (uint32_t i = 0; i < fn->capacity; i++) {
            free(fn->calls[i].reply);
            free(fn->calls[i].batch_msg);
        }
    free(fn->calls);
    free(fn->batch_in_len);
    free(fn->batch_out_len);
    free(fn);
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Element seq of a TQ sits at (seq * elem) mod ring, which repeats every ring / gcd(elem, ring)
 * elements; the function's period is the lcm over its TQs (0 when above 2^24: not worth it). */
static uint64_t address_period(const srpc_fn_t *fn)
{
    uint64_t period = 1;
    for (uint32_t k = 0; k < fn->n_in + fn->n_out; k++) {
        const srpc_tq_t *tq = k < fn->n_in ? fn->in_tq[k] : fn->out_tq[k - fn->n_in];
        uint64_t ring = srpc_tq_ring_bytes(tq), p = ring / gcd64(srpc_tq_elem_size(tq), ring);
        period = period / gcd64(period, p) * p;
        if (period > (1u << 24))
            return 0;
    }
    return period;
}

/* One Tensor Queue of a GPU function: the device TQ and its host staging TQ, laid out slot
 * for slot (same ring size, so element seq sits at the same offset in both). */
static int gpu_queue(int dev, uint32_t size, uint32_t capacity, size_t gran, srpc_dtq_t **dq, srpc_tq_t **hq)
{
    int r = srpc_dtq_create(dev, size ? size : 1, capacity, dq);
    if (!r)
        r = srpc_tq_create_aligned(size ? size : 1, capacity, gran, hq);
    if (!r && srpc_tq_ring_bytes(*hq) != srpc_dtq_ring_bytes(*dq))
        r = -EIO; /* cannot happen when both round to the same granularity */
    return r;
}

/* The queues of a GPU function: device TQs, pinned host staging and done words in pinned,
 * device-mapped memory (the GPU writes them with srpc_gpu_signal). A staging TQ that cannot be
 * page-locked still works, with synchronous copies. */
static int gpu_queues(srpc_fn_t *fn, int dev)
{
    size_t gran;
    int r = srpc_gpu_init(dev);
    if (!r)
        r = srpc_gpu_granularity(dev, &gran);
    fn->gpu_device = dev; /* from here on fn_free releases GPU resources */
    for (uint32_t k = 0; !r && k < fn->n_in; k++)
        r = gpu_queue(dev, fn->in_size[k], fn->capacity, gran, &fn->in_dtq[k], &fn->in_tq[k]);
    for (uint32_t k = 0; !r && k < fn->n_out; k++)
        r = gpu_queue(dev, fn->out_size[k], fn->capacity, gran, &fn->out_dtq[k], &fn->out_tq[k]);
    if (!r) {
        void *words;
        r = srpc_gpu_host_alloc(fn->capacity * sizeof(uint32_t), &words, &fn->done_dev);
        fn->done_words = r ? NULL : words;
    }
    if (r)
        return r;
    int pinned = 1;
    for (uint32_t k = 0; pinned && k < fn->n_in + fn->n_out; k++) {
        srpc_tq_t *tq = k < fn->n_in ? fn->in_tq[k] : fn->out_tq[k - fn->n_in];
        uint64_t dev_addr = 0;
        if (srpc_gpu_host_register(srpc_tq_base(tq), srpc_tq_ring_bytes(tq), &dev_addr) != 0) {
            for (uint32_t j = 0; j < k; j++) /* all or none, so that fn_free knows */
                srpc_gpu_host_unregister(srpc_tq_base(j < fn->n_in ? fn->in_tq[j] : fn->out_tq[j - fn->n_in]));
            pinned = 0;
        } else if (k >= fn->n_in) {
            fn->out_stage_dev[k - fn->n_in] = dev_addr;
        }
    }
    fn->staging_pinned = pinned;
    return 0;
}

void srpc_func_config_init(srpc_func_config_t *fc)
{
    memset(fc, 0, sizeof(*fc));
    fc->n_in = fc->n_out = 1;
    fc->capacity = SRPC_DEF_TQ_CAPACITY;
    fc->max_batch = SRPC_DEF_MAX_BATCH;
}

const char *srpc_drop_name(int reason)
{
    static const char *const names[SRPC_DROP_MAX] = {
        [SRPC_DROP_SHORT] = "short", [SRPC_DROP_BAD_HEADER] = "bad_header", [SRPC_DROP_BAD_SEGMENT] = "bad_segment",
        [SRPC_DROP_TRUNCATED] = "truncated", [SRPC_DROP_NOT_REQUEST] = "not_request",
        [SRPC_DROP_INCONSISTENT] = "inconsistent", [SRPC_DROP_REASM_TIMEOUT] = "reassembly_timeout",
        [SRPC_DROP_MEM_CAP] = "memory_cap", [SRPC_DROP_TABLE_FULL] = "table_full", [SRPC_DROP_DUPLICATE] = "duplicate",
        [SRPC_DROP_REJECTED] = "rejected", [SRPC_DROP_TX_FAILED] = "tx_failed", [SRPC_DROP_NOT_ALLOWED] = "not_allowed",
        [SRPC_DROP_BAD_CHECK] = "bad_check", [SRPC_DROP_CLIENT_MEM_CAP] = "client_memory_cap",
    };
    return reason >= 0 && reason < SRPC_DROP_MAX ? names[reason] : NULL;
}

int srpc_server_add_function(srpc_server_t *srv, const srpc_func_config_t *fc)
{
    if (!srv || !fc || srv->started)
        return -EINVAL;
    if (srv->by_id[fc->func_id])
        return -EEXIST;
    if (srv->nfns == SRPC_MAX_FUNCS)
        return -ENOSPC;
    if (fc->n_in == 0 || fc->n_out == 0 || fc->n_in > SRPC_MAX_TENSORS || fc->n_out > SRPC_MAX_TENSORS ||
        (fc->raw && (fc->n_in != 1 || fc->n_out != 1)) || fc->max_batch == 0 || !fc->in_sizes || !fc->out_sizes)
        return -EINVAL;
    srpc_fn_t *fn = calloc(1, sizeof(*fn));
    if (!fn)
        return -ENOMEM;
    fn->gpu_device = -1; /* a host function until its GPU queues exist */
    fn->func_id = fc->func_id;
    fn->raw = fc->raw;
    fn->n_in = fc->n_in;
    fn->n_out = fc->n_out;
    fn->capacity = fc->capacity ? fc->capacity : SRPC_DEF_TQ_CAPACITY;
    fn->max_batch = fc->max_batch < fn->capacity ? fc->max_batch : fn->capacity;
    fn->max_delay_us = fc->max_delay_us;
    fn->deadline_ns = (uint64_t)fc->deadline_us * 1000;
    uint64_t req = 0, resp = 0;
    int r = 0;
    for (uint32_t k = 0; k < fc->n_in; k++) {
        fn->in_size[k] = fc->in_sizes[k];
        req += fc->in_sizes[k];
        if (fc->in_sizes[k] == 0 && !fc->raw)
            r = -EINVAL;
    }
    for (uint32_t k = 0; k < fc->n_out; k++) {
        fn->out_size[k] = fc->out_sizes[k];
        resp += fc->out_sizes[k];
    }
    /* The smallest reply segment must still number a reply in 16 bits. */
    uint32_t min_seg = srv->cfg.seg_size < srv->cfg.seg_size_loopback ? srv->cfg.seg_size : srv->cfg.seg_size_loopback;
    if (req > srv->cfg.max_message || resp > UINT32_MAX || srpc_seg_count((uint32_t)resp, min_seg) > UINT16_MAX)
        r = -EMSGSIZE;
    fn->req_bytes = (uint32_t)req;
    fn->resp_bytes = (uint32_t)resp;
    if (!r && fc->on_gpu && (fc->raw || fc->gpu_device < 0))
        r = -EINVAL;
    if (!r && fc->on_gpu)
        r = gpu_queues(fn, fc->gpu_device);
    for (uint32_t k = 0; !r && !fc->on_gpu && k < fc->n_in; k++)
        r = srpc_tq_create(fn->in_size[k] ? fn->in_size[k] : 1, fn->capacity, &fn->in_tq[k]);
    for (uint32_t k = 0; !r && !fc->on_gpu && k < fc->n_out; k++)
        r = srpc_tq_create(fn->out_size[k] ? fn->out_size[k] : 1, fn->capacity, &fn->out_tq[k]);
    if (!r)
        fn->period = address_period(fn);
    if (!r) {
        fn->calls = calloc(fn->capacity, sizeof(*fn->calls));
        fn->batch_in_len = calloc(fn->max_batch, sizeof(uint32_t));
        fn->batch_out_len = calloc(fn->max_batch, sizeof(uint32_t));
        if (!fc->on_gpu)
            fn->done_words = calloc(fn->capacity, sizeof(uint32_t));
        if (!fn->calls || !fn->batch_in_len || !fn->batch_out_len || !fn->done_words)
            r = -ENOMEM;
    }
    if (r) {
        fn_free(fn);
        return r;
    }
    srv->fns[srv->nfns++] = fn;
    srv->by_id[fn->func_id] = fn;
    return 0;
}

int srpc_server_start(srpc_server_t *srv)
{
    if (!srv || srv->started)
        return -EINVAL;
    atomic_store(&srv->stopping, 0);
    atomic_store(&srv->w_state, W_AWAY);
    atomic_store(&srv->w_away_since, srpc_now_ns());
    int r = pthread_create(&srv->thread, NULL, srpc_engine_main, srv);
    if (r)
        return -r;
    srv->started = 1;
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
    atomic_fetch_add(&srv->ready_gen, 1);
    srpc_futex_wake(&srv->ready_gen);
    srpc_engine_kick(srv);
    if (srv->started) {
        pthread_join(srv->thread, NULL);
        srv->started = 0;
    }
    return 0;
}

void srpc_server_destroy(srpc_server_t *srv)
{
    if (!srv)
        return;
    srpc_server_stop(srv);
    if (srv->ct.e) {
        for (uint32_t i = 0; i < srv->ct.max_entries; i++)
            if (srv->ct.e[i].state != CT_FREE)
                srpc_server_drop_entry(srv, i);
        ct_destroy(&srv->ct);
    }
    srcmem_destroy(&srv->srcmem);
    srpc_bufpool_destroy(&srv->pool);
    for (uint32_t i = 0; i < srv->nfns; i++)
        fn_free(srv->fns[i]);
    free(srv->by_id);
    srpc_rx_free(&srv->rx);
    srpc_udp_close(&srv->udp);
    srpc_gpu_stream_destroy(srv->rx_stream);
    free(srv->rx_dev_calls);
    srpc_dpdk_port_close(srv->dpdk);
    if (srv->stopfd >= 0)
        close(srv->stopfd);
    if (srv->wakefd >= 0)
        close(srv->wakefd);
    pthread_mutex_destroy(&srv->lock);
    pthread_mutex_destroy(&srv->rx_lock);
    free(srv);
}

_Static_assert(offsetof(srpc_server_stats_t, rcvbuf) % sizeof(uint64_t) == 0,
               "the stats counters before rcvbuf are read as an array of uint64_t");

int srpc_server_stats(const srpc_server_t *srv, srpc_server_stats_t *out)
{
    if (!srv || !out)
        return -EINVAL;
    srpc_server_t *s = (srpc_server_t *)srv;
    pthread_mutex_lock(&s->lock);
    /* The counters are added to atomically from two threads: read them the same way. */
    const uint64_t *src = (const uint64_t *)&s->st;
    uint64_t *dst = (uint64_t *)out;
    for (size_t i = 0; i < offsetof(srpc_server_stats_t, rcvbuf) / sizeof(uint64_t); i++)
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
    out->rcvbuf = s->st.rcvbuf;
    out->sndbuf = s->st.sndbuf;
    out->partial_msgs = s->ct.count[CT_LIST_PARTIAL]; /* kept as entries move: a scrape is O(1) */
    out->reasm_bytes = s->reasm_bytes;
    out->inflight = __atomic_load_n(&srv->inflight, __ATOMIC_RELAXED);
    out->queued = atomic_load(&s->n_ready);
    out->cached_replies = s->ct.count[CT_LIST_DONE];
    pthread_mutex_unlock(&s->lock);
    return 0;
}
