/* test_defer.c: asynchronous completion over real loopback UDP: deferred batches, done words written out of order and from other threads, batches finished from any thread (srpc_server_finish), replies in order, the max_inflight limit. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "splitrpc.h"
#include "splitrpc_gpu.h"

#include "check.h"
#include "loopback.h"

enum { F_ADD = 1, F_RAW = 2, F_TINY = 3 };
#define NF 256     /* floats per vector */
#define TMO_US 3000000

/* A started server whose worker is the test itself (no worker thread). */
static srpc_server_t *server_up(int wait_mode, int *port)
{
    const srpc_server_config_t cfg = loopback_server_config(wait_mode);
    srpc_server_t *srv = loopback_server(&cfg);
    uint32_t vec = NF * 4, raw = 4096;
    srpc_func_config_t add = {.func_id = F_ADD, .n_in = 1, .n_out = 1, .in_sizes = &vec, .out_sizes = &vec,
                              .capacity = 16, .max_batch = 2};
    srpc_func_config_t rawf = {.func_id = F_RAW, .raw = 1, .n_in = 1, .n_out = 1, .in_sizes = &raw,
                               .out_sizes = &raw, .capacity = 4, .max_batch = 2};
    srpc_func_config_t tiny = add;
    tiny.func_id = F_TINY;
    tiny.capacity = 2;
    CHECK(srpc_server_add_function(srv, &add) == 0, "add F_ADD");
    CHECK(srpc_server_add_function(srv, &rawf) == 0, "add F_RAW");
    CHECK(srpc_server_add_function(srv, &tiny) == 0, "add F_TINY");
    CHECK(srpc_server_start(srv) == 0, "start");
    *port = srpc_server_port(srv);
    return srv;
}

/* The old client's 3 retransmissions. */
static srpc_client_t *client(int port) { return loopback_client(port, 3); }

static srpc_server_stats_t stats(srpc_server_t *srv) { return server_stats(srv); }

static int wait_calls(srpc_server_t *srv, uint64_t n) { return wait_for_calls(srv, n, 0); }

/* Sends n vecadd calls whose vectors are all `base + i`. */
static void send_vecs(srpc_client_t *c, uint16_t f, int n, float base, uint64_t *ids)
{
    for (int i = 0; i < n; i++) {
        float v[NF];
        for (int j = 0; j < NF; j++)
            v[j] = base + (float)i;
        CHECK(srpc_client_send(c, f, v, sizeof(v), 0, &ids[i]) == 0, "send %d", i);
    }
}

/* The worker's part of a batch: y = x + 1 into the output elements. */
static void compute(const srpc_batch_t *b)
{
    const float *x = (const float *)b->in[0];
    float *y = (float *)b->out[0];
    for (uint32_t i = 0; i < b->count * NF; i++)
        y[i] = x[i] + 1.0f;
}

/* Outcome of call id: 1 when it is a RESPONSE of vectors base + 1, -code for an ERROR, 0 when
 * it has none (yet). */
static int outcome(srpc_client_t *c, uint64_t id, float base, int64_t wait_us)
{
    if (srpc_client_wait(c, id, wait_us) != 0)
        return 0;
    int code = -1;
    const uint8_t *d = NULL;
    uint32_t l = 0;
    srpc_client_result(c, id, &code, &d, &l);
    int r = code ? -code : 1;
    for (int j = 0; r == 1 && j < NF; j++) {
        float v;
        memcpy(&v, d + 4 * j, 4);
        if (l != NF * 4 || v != base + 1.0f)
            r = 0;
    }
    srpc_client_release(c, id);
    return r;
}

/* Done words written out of order: replies still go out in order, each with its status. */
static void test_out_of_order(int mode)
{
    int port;
    srpc_server_t *srv = server_up(mode, &port);
    srpc_client_t *c = client(port);
    uint64_t ids[6];
    send_vecs(c, F_ADD, 6, 100.0f, ids);
    CHECK(wait_calls(srv, 6), "6 calls queued");
    srpc_batch_t b;
    uint32_t *done[3];
    for (int k = 0; k < 3; k++) {
        CHECK(srpc_server_next_batch(srv, &b, 1000000) == 0, "batch %d", k);
        CHECK(b.count == 2 && b.first_seq == (uint64_t)(2 * k) && b.gpu_device == -1, "batch %d: %u calls from %llu",
              k, b.count, (unsigned long long)b.first_seq);
        compute(&b);
        srpc_batch_t copy = b;
        CHECK(srpc_server_defer(srv, &b, &done[k]) == 0 && done[k] && *done[k] == 0, "defer %d", k);
        CHECK(srpc_server_defer(srv, &copy, &done[k]) == -EINVAL, "defer %d twice", k);
        CHECK(srpc_server_complete(srv, &copy, 0, NULL) == -EINVAL, "complete %d after defer", k);
    }
    CHECK(stats(srv).inflight == 3, "3 in flight, got %llu", (unsigned long long)stats(srv).inflight);
    CHECK(srpc_server_next_batch(srv, &b, 2000) == -ETIMEDOUT, "nothing more queued");
    CHECK(outcome(c, ids[0], 100.0f, 20000) == 0, "no reply before its done word");

    __atomic_store_n(done[2], SRPC_DONE, __ATOMIC_RELEASE);
    __atomic_store_n(done[1], SRPC_DONE | SRPC_E_DEADLINE, __ATOMIC_RELEASE);
    CHECK(srpc_server_poll(srv) == 0, "later batches wait for the first");
    CHECK(outcome(c, ids[4], 104.0f, 20000) == 0, "no reply of the third batch yet");
    __atomic_store_n(done[0], SRPC_DONE, __ATOMIC_RELEASE);
    CHECK(srpc_server_poll(srv) == 3, "all three finish in order");
    CHECK(stats(srv).inflight == 0, "none in flight");
    int want[6] = {1, 1, -SRPC_E_DEADLINE, -SRPC_E_DEADLINE, 1, 1};
    for (int i = 0; i < 6; i++) {
        int o = outcome(c, ids[i], 100.0f + (float)i, TMO_US);
        CHECK(o == want[i], "call %d: outcome %d, want %d", i, o, want[i]);
    }
    srpc_server_stats_t st = stats(srv);
    CHECK(st.replies == 4 && st.errors[SRPC_E_DEADLINE] == 2, "replies %llu, DEADLINE %llu",
          (unsigned long long)st.replies, (unsigned long long)st.errors[SRPC_E_DEADLINE]);
    srpc_client_destroy(c);
    srpc_server_destroy(srv);
}

typedef struct {
    uint32_t *word;
    long delay_us;
} writer_t;

static void *late_writer(void *p)
{
    writer_t *w = p;
    sleep_us(w->delay_us);
    __atomic_store_n(w->word, SRPC_DONE, __ATOMIC_RELEASE);
    return NULL;
}

/* A batch completed synchronously waits behind a deferred one, and next_batch finishes both
 * once another thread writes the done word, in block mode too. */
static void test_complete_behind(int mode)
{
    int port;
    srpc_server_t *srv = server_up(mode, &port);
    srpc_client_t *c = client(port);
    uint64_t ids[4];
    send_vecs(c, F_ADD, 4, 7.0f, ids);
    CHECK(wait_calls(srv, 4), "4 calls queued");
    srpc_batch_t b;
    uint32_t *done = NULL;
    CHECK(srpc_server_next_batch(srv, &b, 1000000) == 0 && b.count == 2, "first batch");
    compute(&b);
    CHECK(srpc_server_defer(srv, &b, &done) == 0, "defer");
    CHECK(srpc_server_next_batch(srv, &b, 1000000) == 0 && b.count == 2, "second batch");
    compute(&b);
    CHECK(srpc_server_complete(srv, &b, 0, NULL) == 0, "complete the second");
    CHECK(outcome(c, ids[2], 9.0f, 20000) == 0, "its replies wait for the first batch");
    writer_t w = {done, 30000};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, late_writer, &w) == 0, "writer thread");
    CHECK(srpc_server_next_batch(srv, &b, 500000) == -ETIMEDOUT, "next_batch waits");
    pthread_join(th, NULL);
    for (int i = 0; i < 4; i++)
        CHECK(outcome(c, ids[i], 7.0f + (float)i, TMO_US) == 1, "call %d answered", i);
    CHECK(stats(srv).inflight == 0, "none in flight");
    srpc_client_destroy(c);
    srpc_server_destroy(srv);
}

/* Elements of a deferred batch stay taken: a full queue answers BUSY until it finishes. */
static void test_backpressure(void)
{
    int port;
    srpc_server_t *srv = server_up(SRPC_WAIT_BLOCK, &port);
    srpc_client_t *c = client(port);
    uint64_t ids[3];
    send_vecs(c, F_TINY, 2, 1.0f, ids);
    CHECK(wait_calls(srv, 2), "2 calls queued");
    srpc_batch_t b;
    uint32_t *done = NULL;
    CHECK(srpc_server_next_batch(srv, &b, 1000000) == 0 && b.count == 2, "batch of 2");
    compute(&b);
    CHECK(srpc_server_defer(srv, &b, &done) == 0, "defer");
    send_vecs(c, F_TINY, 1, 50.0f, &ids[2]);
    CHECK(outcome(c, ids[2], 50.0f, TMO_US) == -SRPC_E_BUSY, "the queue is full while in flight");
    __atomic_store_n(done, SRPC_DONE, __ATOMIC_RELEASE);
    CHECK(srpc_server_poll(srv) == 1, "finished");
    CHECK(outcome(c, ids[0], 1.0f, TMO_US) == 1 && outcome(c, ids[1], 2.0f, TMO_US) == 1, "answered");
    send_vecs(c, F_TINY, 1, 60.0f, &ids[2]);
    CHECK(srpc_server_next_batch(srv, &b, 1000000) == 0 && b.count == 1, "room again");
    compute(&b);
    CHECK(srpc_server_complete(srv, &b, 0, NULL) == 0, "complete");
    CHECK(outcome(c, ids[2], 60.0f, TMO_US) == 1, "answered after recycling");
    srpc_client_destroy(c);
    srpc_server_destroy(srv);
}

/* What cannot be deferred or staged, and a server destroyed with batches in flight. */
static void test_api(void)
{
    int port;
    srpc_server_t *srv = server_up(SRPC_WAIT_BLOCK, &port);
    srpc_client_t *c = client(port);
    uint8_t req[100] = {1};
    uint64_t id;
    CHECK(srpc_client_send(c, F_RAW, req, sizeof(req), 0, &id) == 0, "send raw");
    CHECK(wait_calls(srv, 1), "raw call queued");
    srpc_batch_t b;
    uint32_t *done = NULL;
    CHECK(srpc_server_next_batch(srv, &b, 1000000) == 0 && b.func_id == F_RAW, "raw batch");
    CHECK(srpc_server_defer(srv, &b, NULL) == -EINVAL, "defer without a word pointer");
    CHECK(srpc_server_stage_in(srv, &b, 0) == -EINVAL, "stage_in on a host function");
    CHECK(srpc_server_submit(srv, &b, 0) == -EINVAL, "submit on a host function");
    CHECK(srpc_server_submit_o2(srv, &b, NULL, 0) == -EINVAL, "submit_o2 on a host function");
    CHECK(srpc_server_submit_o2(NULL, &b, NULL, 0) == -EINVAL, "submit_o2 NULL server");
    memcpy(b.out[0], req, sizeof(req));
    b.out_len[0] = sizeof(req);
    CHECK(srpc_server_complete(srv, &b, 0, NULL) == 0, "raw complete");
    CHECK(srpc_client_wait(c, id, TMO_US) == 0, "raw answered");
    CHECK(srpc_server_poll(NULL) == -EINVAL, "poll NULL");
    CHECK(srpc_server_poll(srv) == 0, "nothing to poll");

    uint32_t vec = NF * 4;
    srpc_func_config_t g = {.func_id = 9, .n_in = 1, .n_out = 1, .in_sizes = &vec, .out_sizes = &vec,
                            .capacity = 4, .max_batch = 2, .on_gpu = 1, .gpu_device = -1};
    srpc_server_config_t cfg;
    srpc_server_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    srpc_server_t *s2 = NULL;
    CHECK(srpc_server_create(&cfg, &s2) == 0, "second server");
    CHECK(srpc_server_add_function(s2, &g) == -EINVAL, "GPU function on device -1");
    g.gpu_device = 0;
    g.raw = 1;
    CHECK(srpc_server_add_function(s2, &g) == -EINVAL, "raw GPU function");
    g.raw = 0;
    int r = srpc_server_add_function(s2, &g);
    if (srpc_gpu_init(0) != 0)
        CHECK(r == -ENODEV, "GPU function without a GPU: %d", r);
    else
        CHECK(r == 0, "GPU function: %d", r);
    srpc_server_destroy(s2);

    /* in flight at destroy: dropped, nothing leaks */
    uint64_t ids[2];
    send_vecs(c, F_ADD, 2, 3.0f, ids);
    CHECK(wait_calls(srv, 3), "2 more queued");
    CHECK(srpc_server_next_batch(srv, &b, 1000000) == 0 && b.func_id == F_ADD, "batch");
    CHECK(srpc_server_complete(srv, &b, SRPC_E_INTERNAL, "some text") == 0, "complete with an error");
    for (int i = 0; i < 2; i++)
        CHECK(outcome(c, ids[i], 3.0f + (float)i, TMO_US) == -SRPC_E_INTERNAL, "call %d: INTERNAL", i);
    send_vecs(c, F_ADD, 1, 5.0f, ids);
    CHECK(wait_calls(srv, 4), "1 more queued");
    CHECK(srpc_server_next_batch(srv, &b, 1000000) == 0, "batch");
    CHECK(srpc_server_defer(srv, &b, &done) == 0, "defer, never written");
    srpc_client_destroy(c);
    srpc_server_destroy(srv);
}

typedef struct {
    srpc_server_t *srv;
    srpc_batch_t b;       /* the copy taken before the defer */
    uint32_t lens[8];
    long delay_us;
    int fail_i;           /* -1: none; else that call fails alone with BAD_REQUEST */
    int status;
    int fail_rc;
    int rc;
} finisher_t;

/* Another thread's part: compute (tensor) or echo with a length (raw), fail one call alone,
 * then srpc_server_finish. */
static void *finisher(void *p)
{
    finisher_t *f = p;
    sleep_us(f->delay_us);
    if (f->b.in_len) { /* raw: reply = the request's first 10 bytes, length 10 */
        for (uint32_t i = 0; i < f->b.count; i++)
            f->lens[i] = 10;
        f->b.out_len = f->lens;
        memcpy(f->b.out[0], f->b.in[0], 10); /* the first call's; enough to check */
    } else {
        compute(&f->b);
    }
    if (f->fail_i >= 0) /* checked by the main thread (CHECK's counters are not atomic) */
        f->fail_rc = srpc_server_fail_call(f->srv, &f->b, (uint32_t)f->fail_i, SRPC_E_BAD_REQUEST, "bad key 9");
    f->rc = srpc_server_finish(f->srv, &f->b, f->status, f->status ? "from the pool" : NULL);
    return NULL;
}

/* Batches finished from other threads with srpc_server_finish while the worker waits in
 * next_batch (block mode: the finish wakes it): outputs, a call failed alone, an error with its
 * text, a raw function's lengths; what it refuses. */
static void test_finish_any_thread(int mode)
{
    int port;
    srpc_server_t *srv = server_up(mode, &port);
    /* No retransmission: the worker below waits longer than a first timeout, and a call answered
     * with an error other than INTERNAL is not cached (it would run again). */
    srpc_client_t *c = loopback_client(port, 0);
    uint64_t ids[4];
    send_vecs(c, F_ADD, 4, 20.0f, ids);
    CHECK(wait_calls(srv, 4), "4 calls queued");
    srpc_batch_t b;
    uint32_t *done[2];
    finisher_t f[2];
    pthread_t th[2];
    for (int k = 0; k < 2; k++) {
        CHECK(srpc_server_next_batch(srv, &b, 1000000) == 0 && b.count == 2, "batch %d", k);
        f[k] = (finisher_t){.srv = srv, .b = b, .delay_us = k ? 5000 : 30000, .fail_i = k ? 1 : -1,
                            .status = k ? 0 : 0};
        CHECK(srpc_server_finish(srv, &b, 0, NULL) == -EINVAL, "finish on an open batch");
        CHECK(srpc_server_defer(srv, &b, &done[k]) == 0, "defer %d", k);
        CHECK(pthread_create(&th[k], NULL, finisher, &f[k]) == 0, "finisher %d", k);
    }
    /* The second batch finishes first; its replies wait for the first, then all go out while
     * the worker is asleep in next_batch. */
    CHECK(srpc_server_next_batch(srv, &b, 200000) == -ETIMEDOUT, "nothing more to take");
    for (int k = 0; k < 2; k++) {
        pthread_join(th[k], NULL);
        CHECK(f[k].rc == 0 && f[k].fail_rc == 0, "finish %d: %d (fail_call %d)", k, f[k].rc, f[k].fail_rc);
        CHECK(srpc_server_finish(srv, &f[k].b, 0, NULL) == -EINVAL, "finish %d twice", k);
        CHECK(srpc_server_fail_call(srv, &f[k].b, 0, SRPC_E_BAD_REQUEST, NULL) == -EINVAL,
              "fail_call after finish %d", k);
    }
    int want[4] = {1, 1, 1, -SRPC_E_BAD_REQUEST};
    for (int i = 0; i < 4; i++) {
        int o = outcome(c, ids[i], 20.0f + (float)i, TMO_US);
        CHECK(o == want[i], "call %d: outcome %d, want %d", i, o, want[i]);
    }
    CHECK(stats(srv).inflight == 0, "none in flight");

    /* An error from the finishing thread reaches every call with its text. */
    send_vecs(c, F_ADD, 2, 1.0f, ids);
    CHECK(wait_calls(srv, 6), "2 more queued");
    CHECK(srpc_server_next_batch(srv, &b, 1000000) == 0 && b.count == 2, "batch");
    f[0] = (finisher_t){.srv = srv, .b = b, .delay_us = 1000, .fail_i = 0, .status = SRPC_E_INTERNAL};
    CHECK(srpc_server_defer(srv, &b, &done[0]) == 0, "defer");
    CHECK(pthread_create(&th[0], NULL, finisher, &f[0]) == 0, "finisher");
    pthread_join(th[0], NULL);
    CHECK(f[0].rc == 0 && f[0].fail_rc == 0, "finish with INTERNAL");
    CHECK(srpc_server_next_batch(srv, &b, 50000) == -ETIMEDOUT, "finishes the batch");
    for (int i = 0; i < 2; i++) {
        CHECK(srpc_client_wait(c, ids[i], TMO_US) == 0, "call %d answered", i);
        int code = 0;
        const uint8_t *d = NULL;
        uint32_t l = 0;
        srpc_client_result(c, ids[i], &code, &d, &l);
        CHECK(code == SRPC_E_INTERNAL && l == 13 && memcmp(d, "from the pool", 13) == 0,
              "call %d: the batch's error and text (code %d, %u bytes)", i, code, l);
        srpc_client_release(c, ids[i]);
    }

    /* Raw: deferred, its lengths given by the finishing thread; one finished by a bare word
     * write has none: INTERNAL, said so. */
    uint8_t req[64];
    for (int i = 0; i < 64; i++)
        req[i] = (uint8_t)(i + 1);
    CHECK(srpc_client_send(c, F_RAW, req, sizeof(req), 0, &ids[0]) == 0, "send raw");
    CHECK(wait_calls(srv, 7), "raw call queued");
    CHECK(srpc_server_next_batch(srv, &b, 1000000) == 0 && b.func_id == F_RAW && b.count == 1, "raw batch");
    f[0] = (finisher_t){.srv = srv, .b = b, .delay_us = 1000, .fail_i = -1};
    CHECK(srpc_server_defer(srv, &b, &done[0]) == 0, "defer a raw batch");
    CHECK(pthread_create(&th[0], NULL, finisher, &f[0]) == 0, "raw finisher");
    pthread_join(th[0], NULL);
    CHECK(f[0].rc == 0, "raw finish");
    CHECK(srpc_server_next_batch(srv, &b, 50000) == -ETIMEDOUT, "finishes the raw batch");
    CHECK(srpc_client_wait(c, ids[0], TMO_US) == 0, "raw answered");
    {
        int code = -1;
        const uint8_t *d = NULL;
        uint32_t l = 0;
        srpc_client_result(c, ids[0], &code, &d, &l);
        CHECK(code == 0 && l == 10 && memcmp(d, req, 10) == 0, "raw reply: code %d, %u bytes", code, l);
        srpc_client_release(c, ids[0]);
    }
    CHECK(srpc_client_send(c, F_RAW, req, sizeof(req), 0, &ids[0]) == 0, "send raw again");
    CHECK(wait_calls(srv, 8), "raw call queued");
    CHECK(srpc_server_next_batch(srv, &b, 1000000) == 0 && b.func_id == F_RAW, "raw batch");
    srpc_batch_t copy = b;
    CHECK(srpc_server_defer(srv, &b, &done[0]) == 0, "defer");
    copy.out_len = NULL;
    CHECK(srpc_server_finish(srv, &copy, 0, NULL) == -EINVAL, "a raw batch finished without lengths");
    __atomic_store_n(done[0], SRPC_DONE, __ATOMIC_RELEASE);
    CHECK(srpc_server_poll(srv) == 1, "finished by the bare word");
    CHECK(outcome(c, ids[0], 0.0f, TMO_US) == -SRPC_E_INTERNAL, "no length: INTERNAL");
    CHECK(srpc_server_finish(NULL, &copy, 0, NULL) == -EINVAL && srpc_server_finish(srv, NULL, 0, NULL) == -EINVAL,
          "NULLs");
    srpc_client_destroy(c);
    srpc_server_destroy(srv);
}

/* max_inflight: a function with that many batches out is skipped; its calls wait and fill its
 * next batch while another function's batches are taken. */
static void test_max_inflight(void)
{
    const srpc_server_config_t cfg = loopback_server_config(SRPC_WAIT_BLOCK);
    srpc_server_t *srv = NULL;
    CHECK(srpc_server_create(&cfg, &srv) == 0, "server");
    uint32_t vec = NF * 4;
    srpc_func_config_t slow = {.func_id = F_ADD, .n_in = 1, .n_out = 1, .in_sizes = &vec, .out_sizes = &vec,
                               .capacity = 16, .max_batch = 4, .max_inflight = 1};
    srpc_func_config_t fast = slow;
    fast.func_id = F_TINY;
    fast.max_inflight = 0;
    CHECK(srpc_server_add_function(srv, &slow) == 0 && srpc_server_add_function(srv, &fast) == 0, "functions");
    CHECK(srpc_server_start(srv) == 0, "start");
    srpc_client_t *c = client(srpc_server_port(srv));
    uint64_t ids[8], fids[2];
    send_vecs(c, F_ADD, 1, 0.0f, ids);
    CHECK(wait_calls(srv, 1), "1 queued");
    srpc_batch_t b;
    uint32_t *done = NULL;
    CHECK(srpc_server_next_batch(srv, &b, 1000000) == 0 && b.func_id == F_ADD && b.count == 1, "first batch");
    compute(&b);
    finisher_t f = {.srv = srv, .b = b, .delay_us = 0, .fail_i = -1};
    CHECK(srpc_server_defer(srv, &b, &done) == 0, "defer");
    send_vecs(c, F_ADD, 4, 1.0f, &ids[1]);
    send_vecs(c, F_TINY, 2, 50.0f, fids);
    CHECK(wait_calls(srv, 7), "6 more queued");
    CHECK(srpc_server_next_batch(srv, &b, 1000000) == 0 && b.func_id == F_TINY, "the other function's batch");
    compute(&b);
    CHECK(srpc_server_complete(srv, &b, 0, NULL) == 0, "complete it");
    CHECK(srpc_server_next_batch(srv, &b, 30000) == -ETIMEDOUT, "the busy function is skipped");
    CHECK(stats(srv).queued == 4, "its 4 calls wait");
    CHECK(srpc_server_finish(srv, &f.b, 0, NULL) == 0, "finish the first");
    CHECK(srpc_server_next_batch(srv, &b, 1000000) == 0 && b.func_id == F_ADD && b.count == 4,
          "then one batch of the 4 (got %u)", b.count);
    compute(&b);
    CHECK(srpc_server_complete(srv, &b, 0, NULL) == 0, "complete");
    for (int i = 0; i < 5; i++)
        CHECK(outcome(c, ids[i], (float)i, TMO_US) == 1, "call %d answered", i);
    for (int i = 0; i < 2; i++)
        CHECK(outcome(c, fids[i], 50.0f + (float)i, TMO_US) == 1, "other call %d answered", i);
    srpc_client_destroy(c);
    srpc_server_destroy(srv);
}

int main(void)
{
    test_out_of_order(SRPC_WAIT_BLOCK);
    test_out_of_order(SRPC_WAIT_POLL);
    test_complete_behind(SRPC_WAIT_BLOCK);
    test_complete_behind(SRPC_WAIT_POLL);
    test_backpressure();
    test_api();
    test_finish_any_thread(SRPC_WAIT_BLOCK);
    test_finish_any_thread(SRPC_WAIT_POLL);
    test_max_inflight();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
