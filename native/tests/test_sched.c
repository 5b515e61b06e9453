/* test_sched.c: the scheduler seam over real loopback UDP: which function's due batch the worker takes next under round robin, strict priority, weighted fair share (by calls and by admission cost) and earliest deadline first, queues by aux class and by cost class, and the configurations refused. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "splitrpc.h"

#include "check.h"
#include "loopback.h"

#define TMO_US 3000000

typedef struct {
    uint16_t id;
    uint32_t priority, weight, deadline_us;
    int cost_aux;
} fdef_t;

static srpc_server_t *server_up(int sched, const fdef_t *f, int nf, uint32_t max_batch, int *port)
{
    srpc_server_config_t cfg = loopback_server_config(SRPC_WAIT_BLOCK);
    cfg.sched = sched;
    srpc_server_t *srv = loopback_server(&cfg);
    static uint32_t s8 = 8;
    for (int i = 0; i < nf; i++) {
        srpc_func_config_t fc;
        srpc_func_config_init(&fc);
        fc.func_id = f[i].id;
        fc.in_sizes = fc.out_sizes = &s8;
        fc.capacity = 64;
        fc.max_batch = max_batch;
        fc.priority = f[i].priority;
        fc.weight = f[i].weight;
        fc.deadline_us = f[i].deadline_us;
        fc.cost_from = f[i].cost_aux ? SRPC_COST_AUX : SRPC_COST_NONE;
        CHECK(srpc_server_add_function(srv, &fc) == 0, "add %u", f[i].id);
    }
    CHECK(srpc_server_start(srv) == 0, "start");
    *port = srpc_server_port(srv);
    return srv;
}

static srpc_client_t *client(int port) { return loopback_client(port, 0); }

static int wait_queued(srpc_server_t *srv, uint64_t n) { return wait_for_calls(srv, n, 1); }

static void send_n(srpc_client_t *c, uint16_t f, int n, uint16_t aux)
{
    uint8_t req[8] = {0};
    for (int i = 0; i < n; i++) {
        uint64_t id;
        CHECK(srpc_client_send(c, f, req, sizeof(req), aux, &id) == 0, "send to %u", f);
    }
}

/* Takes up to max batches; writes their function ids (one letter per call) into order. */
static void run(srpc_server_t *srv, char *order, int max)
{
    srpc_batch_t b;
    int at = 0;
    while (at < max && srpc_server_next_batch(srv, &b, 50000) == 0) {
        for (uint32_t i = 0; i < b.count && at < max; i++)
            order[at++] = (char)('A' + b.func_id - 1);
        CHECK(srpc_server_complete(srv, &b, 0, NULL) == 0, "complete");
    }
    order[at] = 0;
}

static void expect_order(int sched, const fdef_t *f, int nf, const int *counts, const uint16_t *aux,
                         uint32_t max_batch, const char *want, const char *what)
{
    int port;
    srpc_server_t *srv = server_up(sched, f, nf, max_batch, &port);
    srpc_client_t *c = client(port);
    int total = 0;
    for (int i = 0; i < nf; i++) {
        send_n(c, f[i].id, counts[i], aux ? aux[i] : 0);
        total += counts[i];
        sleep_us(2000); /* a known order of arrival (EDF ranks by it) */
    }
    CHECK(wait_queued(srv, (uint64_t)total), "%s: %d queued", what, total);
    char order[256];
    run(srv, order, (int)strlen(want));
    CHECK(strcmp(order, want) == 0, "%s: took %s, want %s", what, order, want);
    srpc_client_destroy(c);
    srpc_server_destroy(srv);
}

/* The caller's policy: mode 0 picks the function with the most calls queued, cut to 2 calls;
 * mode 1 answers -1 (no preference); mode 2 answers out of range (an error). Records what it saw. */
typedef struct {
    int mode, asked;
    uint32_t last_n;
    srpc_sched_view_t seen[4];
} policy_t;

static int policy(void *ctx, const srpc_sched_view_t *due, uint32_t n, uint32_t *max_calls)
{
    policy_t *p = ctx;
    p->asked++;
    p->last_n = n;
    memcpy(p->seen, due, (n < 4 ? n : 4) * sizeof(*due));
    if (p->mode == 1)
        return -1;
    if (p->mode == 2)
        return (int)n + 5;
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (due[i].queued > due[best].queued)
            best = i;
    *max_calls = 2;
    return (int)best;
}

static void test_external_policy(void)
{
    for (int mode = 0; mode < 3; mode++) {
        fdef_t f[2] = {{.id = 1, .priority = 9}, {.id = 2, .priority = 1}};
        srpc_server_config_t cfg = loopback_server_config(SRPC_WAIT_BLOCK);
        cfg.sched = SRPC_SCHED_PRIORITY; /* the built-in fallback */
        srpc_server_t *srv = NULL;
        CHECK(srpc_server_create(&cfg, &srv) == 0, "server");
        static uint32_t s8 = 8;
        for (int i = 0; i < 2; i++) {
            srpc_func_config_t fc;
            srpc_func_config_init(&fc);
            fc.func_id = f[i].id;
            fc.in_sizes = fc.out_sizes = &s8;
            fc.capacity = 64;
            fc.max_batch = 8;
            fc.priority = f[i].priority;
            CHECK(srpc_server_add_function(srv, &fc) == 0, "add");
        }
        policy_t p = {.mode = mode};
        CHECK(srpc_server_set_sched_fn(srv, policy, &p) == 0, "set the policy");
        CHECK(srpc_server_start(srv) == 0, "start");
        CHECK(srpc_server_set_sched_fn(srv, NULL, NULL) == -EBUSY, "not once started");
        srpc_client_t *c = client(srpc_server_port(srv));
        send_n(c, 1, 2, 0);
        send_n(c, 2, 5, 0);
        CHECK(wait_queued(srv, 7), "7 queued");
        char order[64];
        run(srv, order, 7);
        srpc_server_stats_t st;
        srpc_server_stats(srv, &st);
        if (mode == 0) { /* 2 vs 5 queued: function 2, cut to 2 calls; 2 vs 3: 2 again; 2 vs 1: function 1;
                            then function 2 alone: nothing to decide */
            CHECK(strcmp(order, "BBBBAAB") == 0, "the policy's order: %s", order);
            CHECK(p.asked == 3 && p.last_n == 2 && p.seen[0].func_id == 1 && p.seen[0].queued == 2 &&
                  p.seen[1].func_id == 2 && p.seen[1].queued == 1 && p.seen[1].priority == 1,
                  "what it saw last: asked %d, %u with %u queued, %u with %u", p.asked, p.seen[0].func_id,
                  p.seen[0].queued, p.seen[1].func_id, p.seen[1].queued);
            CHECK(st.sched_errors == 0 && st.sched_asked == 3, "asked %llu", (unsigned long long)st.sched_asked);
        } else { /* the built-in priority policy decides: function 1 (priority 9) first */
            CHECK(strcmp(order, "AABBBBB") == 0, "mode %d: fallback order %s", mode, order);
            CHECK(st.sched_asked == 1 && st.sched_errors == (mode == 2 ? 1u : 0u), "mode %d: asked %llu, errors %llu",
                  mode, (unsigned long long)st.sched_asked, (unsigned long long)st.sched_errors);
        }
        srpc_client_destroy(c);
        srpc_server_destroy(srv);
    }
}

/* A function with 3 aux classes under the priority policy: a call's class is min(aux, 2), the
 * higher class runs first (class k ranks as priority + k), batches hold one class. */
static void test_aux_classes(void)
{
    srpc_server_config_t cfg = loopback_server_config(SRPC_WAIT_BLOCK);
    cfg.sched = SRPC_SCHED_PRIORITY;
    srpc_server_t *srv = NULL;
    CHECK(srpc_server_create(&cfg, &srv) == 0, "server");
    static uint32_t s8 = 8;
    srpc_func_config_t fc;
    srpc_func_config_init(&fc);
    fc.func_id = 1;
    fc.in_sizes = fc.out_sizes = &s8;
    fc.capacity = 16;
    fc.max_batch = 8;
    fc.aux_classes = 3;
    fc.priority = 10; /* classes 0, 1, 2 rank 10, 11, 12 */
    srpc_func_config_t bad = fc;
    bad.aux_classes = SRPC_MAX_AUX_CLASSES + 1;
    CHECK(srpc_server_add_function(srv, &bad) == -EINVAL, "too many classes");
    bad = fc;
    bad.cost_from = SRPC_COST_AUX;
    CHECK(srpc_server_add_function(srv, &bad) == -EINVAL, "classes and an aux cost");
    CHECK(srpc_server_add_function(srv, &fc) == 0, "add 3 classes");
    CHECK(srpc_server_add_function(srv, &fc) == -EEXIST, "the same id again");
    fc.func_id = 2;
    fc.aux_classes = 0;
    fc.priority = 5; /* below every class of function 1 */
    CHECK(srpc_server_add_function(srv, &fc) == 0, "a plain function");
    CHECK(srpc_server_start(srv) == 0, "start");
    srpc_client_t *c = client(srpc_server_port(srv));
    send_n(c, 1, 2, 0);
    send_n(c, 1, 1, 1);
    send_n(c, 2, 2, 0);
    send_n(c, 1, 1, 2);
    send_n(c, 1, 2, 65535); /* hostile aux: the last class */
    CHECK(wait_queued(srv, 8), "8 queued");
    srpc_batch_t b;
    const struct { uint16_t f, cls; uint32_t n; } want[4] = {{1, 2, 3}, {1, 1, 1}, {1, 0, 2}, {2, 0, 2}};
    for (int i = 0; i < 4; i++) {
        CHECK(srpc_server_next_batch(srv, &b, 100000) == 0, "batch %d", i);
        CHECK(b.func_id == want[i].f && b.aux_class == want[i].cls && b.count == want[i].n,
              "batch %d: function %u class %u, %u calls; want %u, %u, %u", i, b.func_id, b.aux_class, b.count,
              want[i].f, want[i].cls, want[i].n);
        if (i == 0) { /* a batch names its class: a wrong class is not this batch */
            srpc_batch_t wrong = b;
            wrong.aux_class = 0;
            CHECK(srpc_server_complete(srv, &wrong, 0, NULL) == -EINVAL, "the batch of another class");
        }
        CHECK(srpc_server_complete(srv, &b, 0, NULL) == 0, "complete %d", i);
    }
    srpc_server_stats_t st;
    srpc_server_stats(srv, &st);
    CHECK(st.replies == 8, "8 replies, got %llu", (unsigned long long)st.replies);
    srpc_client_destroy(c);
    srpc_server_destroy(srv);
}

/* A function `id` of `classes` classes by cost (bounds left to the caller), 16 elements, batches
 * of 8, whose calls cost the sum of their int32 keys' rows in a table of 200 where row k costs k
 * (the keys run to the end of a raw request; set cost_key_count for a fixed one). */
static srpc_func_config_t by_cost(uint16_t id, const uint32_t *in, const uint32_t *out, uint32_t classes)
{
    static uint32_t table[200];
    for (uint32_t i = 0; i < 200; i++)
        table[i] = i;
    srpc_func_config_t fc;
    srpc_func_config_init(&fc);
    fc.func_id = id;
    fc.in_sizes = in;
    fc.out_sizes = out;
    fc.capacity = 16;
    fc.max_batch = 8;
    fc.cost_from = SRPC_COST_TABLE;
    fc.cost_table = table;
    fc.cost_table_len = 200;
    fc.cost_key_size = 4;
    fc.aux_classes = classes;
    fc.class_by = SRPC_CLASS_BY_COST;
    return fc;
}

/* Classes by admission cost: a raw function whose calls cost the sum of their int32 keys' rows
 * (row k costs k), 3 classes with bounds 10 and 100: each call's queue is the class its whole
 * request's cost falls in (a multi-segment request too), batches hold one class, a bad key is
 * BAD_REQUEST alone; and the settings refused. */
static void test_cost_classes(void)
{
    srpc_server_config_t cfg = loopback_server_config(SRPC_WAIT_BLOCK);
    cfg.sched = SRPC_SCHED_RR;
    srpc_server_t *srv = NULL;
    CHECK(srpc_server_create(&cfg, &srv) == 0, "server");
    static uint32_t in = 200000, out = 64;
    srpc_func_config_t fc = by_cost(3, &in, &out, 3);
    fc.raw = 1;
    fc.class_bounds[0] = 10;
    fc.class_bounds[1] = 100;
    srpc_func_config_t bad = fc;
    bad.class_bounds[1] = 10;
    CHECK(srpc_server_add_function(srv, &bad) == -EINVAL, "bounds not strictly ascending");
    bad = fc;
    bad.class_bounds[0] = 0;
    CHECK(srpc_server_add_function(srv, &bad) == -EINVAL, "a bound of 0");
    bad = fc;
    bad.cost_from = SRPC_COST_NONE;
    CHECK(srpc_server_add_function(srv, &bad) == -EINVAL, "classes by cost without a cost");
    bad = fc;
    bad.aux_classes = 1;
    CHECK(srpc_server_add_function(srv, &bad) == -EINVAL, "classes by cost with one class");
    bad = fc;
    bad.class_by = 7;
    CHECK(srpc_server_add_function(srv, &bad) == -EINVAL, "an unknown class_by");
    bad = fc;
    bad.cost_from = SRPC_COST_AUX;
    bad.cost_table = NULL;
    bad.func_id = 4; /* by cost, the cost from aux: aux means one thing */
    CHECK(srpc_server_add_function(srv, &bad) == 0, "classes by an aux cost");
    CHECK(srpc_server_add_function(srv, &fc) == 0, "add 3 classes by cost");
    CHECK(srpc_server_start(srv) == 0, "start");
    srpc_client_t *c = client(srpc_server_port(srv));
    /* costs: 3 (class 0), 150 (2), 9 (0), 10 (1), bad key, 99 (1), and 30000 keys of row 1, in
     * two segments of at most 65000 bytes: 30000 (2) */
    static int32_t big[30000];
    for (int i = 0; i < 30000; i++)
        big[i] = 1;
    const int32_t calls[6][2] = {{1, 2}, {50, 100}, {4, 5}, {10, 0}, {3, 200}, {49, 50}};
    uint64_t id;
    for (int i = 0; i < 6; i++)
        CHECK(srpc_client_send(c, 3, calls[i], sizeof(calls[i]), 0, &id) == 0, "send %d", i);
    CHECK(srpc_client_send(c, 3, big, sizeof(big), 0, &id) == 0, "send the multi-segment request");
    int32_t one = 150; /* function 4: cost = aux */
    CHECK(srpc_client_send(c, 4, &one, sizeof(one), 150, &id) == 0, "send to the aux-cost function");
    CHECK(wait_for_calls(srv, 7, 1), "7 queued");
    uint32_t got[3] = {0}, aux_cost_class = 99;
    srpc_batch_t b;
    for (int i = 0; i < 8 && srpc_server_next_batch(srv, &b, 200000) == 0; i++) {
        const uint32_t lo = b.aux_class == 0 ? 0 : b.aux_class == 1 ? 10 : 100;
        const uint32_t hi = b.aux_class == 0 ? 10 : b.aux_class == 1 ? 100 : UINT32_MAX;
        for (uint32_t j = 0; j < b.count; j++) {
            CHECK(b.cost[j] >= lo && (b.cost[j] < hi || hi == UINT32_MAX), "function %u class %u holds a call of cost %u",
                  b.func_id, b.aux_class, b.cost[j]);
            b.out_len[j] = 0;
        }
        if (b.func_id == 4)
            aux_cost_class = b.aux_class;
        else
            got[b.aux_class] += b.count;
        CHECK(srpc_server_complete(srv, &b, 0, NULL) == 0, "complete");
    }
    CHECK(got[0] == 2 && got[1] == 2 && got[2] == 2, "calls per class %u %u %u, want 2 2 2", got[0], got[1], got[2]);
    CHECK(aux_cost_class == 2, "the aux-cost call (150) in class %u, want 2", aux_cost_class);
    srpc_server_stats_t st;
    srpc_server_stats(srv, &st);
    CHECK(st.errors[SRPC_E_BAD_REQUEST] == 1, "one BAD_REQUEST (the bad key), got %llu",
          (unsigned long long)st.errors[SRPC_E_BAD_REQUEST]);
    CHECK(st.rx_datagrams >= 9, "the large request came in several segments: %llu datagrams",
          (unsigned long long)st.rx_datagrams);
    srpc_client_destroy(c);
    srpc_server_destroy(srv);
}

/* Spill: classes by cost (bound 10) where class 0 holds at most 2 calls not yet answered: cheap
 * calls past that go to class 1 (never the other way); spill limits are refused where they cannot
 * apply. */
static void test_cost_class_spill(void)
{
    srpc_server_config_t cfg = loopback_server_config(SRPC_WAIT_BLOCK);
    srpc_server_t *srv = NULL;
    CHECK(srpc_server_create(&cfg, &srv) == 0, "server");
    static uint32_t s4 = 4;
    srpc_func_config_t fc = by_cost(6, &s4, &s4, 2);
    fc.cost_key_count = 1;
    fc.class_bounds[0] = 10;
    fc.class_spill[0] = 2;
    srpc_func_config_t bad = fc;
    bad.class_spill[1] = 3; /* class 1 is the last: nowhere to spill to */
    CHECK(srpc_server_add_function(srv, &bad) == -EINVAL, "a spill limit on the last class");
    bad = fc;
    bad.class_by = SRPC_CLASS_BY_AUX;
    bad.cost_from = SRPC_COST_NONE;
    CHECK(srpc_server_add_function(srv, &bad) == -EINVAL, "a spill limit on classes by aux");
    CHECK(srpc_server_add_function(srv, &fc) == 0, "add");
    CHECK(srpc_server_start(srv) == 0, "start");
    srpc_client_t *c = client(srpc_server_port(srv));
    const int32_t keys[6] = {1, 2, 3, 50, 4, 5}; /* cheap, cheap, cheap (spills), dear, cheap, cheap (spill) */
    uint64_t id;
    for (int i = 0; i < 6; i++) {
        CHECK(srpc_client_send(c, 6, &keys[i], 4, 0, &id) == 0, "send %d", i);
        CHECK(wait_for_calls(srv, (uint64_t)i + 1, 1), "%d queued", i + 1); /* in this order */
    }
    uint32_t n[2] = {0}, cost_sum[2] = {0};
    srpc_batch_t b;
    for (int i = 0; i < 2 && srpc_server_next_batch(srv, &b, 200000) == 0; i++) {
        n[b.aux_class] += b.count;
        for (uint32_t j = 0; j < b.count; j++)
            cost_sum[b.aux_class] += b.cost[j];
        CHECK(srpc_server_complete(srv, &b, 0, NULL) == 0, "complete");
    }
    CHECK(n[0] == 2 && cost_sum[0] == 3, "class 0: %u calls costing %u, want the first two (1 + 2)", n[0], cost_sum[0]);
    CHECK(n[1] == 4 && cost_sum[1] == 62, "class 1: %u calls costing %u, want 3, 50, 4, 5", n[1], cost_sum[1]);
    /* answered: class 0 has room again */
    CHECK(srpc_client_send(c, 6, &keys[0], 4, 0, &id) == 0, "send again");
    CHECK(srpc_server_next_batch(srv, &b, 2000000) == 0 && b.aux_class == 0 && b.count == 1, "class 0 again");
    CHECK(srpc_server_complete(srv, &b, 0, NULL) == 0, "complete");
    srpc_client_destroy(c);
    srpc_server_destroy(srv);
}

int main(void)
{
    test_aux_classes();
    test_cost_classes();
    test_cost_class_spill();
    test_external_policy();
    fdef_t two[2] = {{.id = 1}, {.id = 2}};
    int four_each[2] = {4, 4};
    expect_order(SRPC_SCHED_RR, two, 2, four_each, NULL, 2, "AABBAABB", "round robin");

    fdef_t prio[3] = {{.id = 1, .priority = 0}, {.id = 2, .priority = 5}, {.id = 3, .priority = 5}};
    int three[3] = {4, 4, 4};
    expect_order(SRPC_SCHED_PRIORITY, prio, 3, three, NULL, 2, "BBCCBBCCAAAA", "priority, equals in turn");

    fdef_t fair[2] = {{.id = 1, .weight = 1}, {.id = 2, .weight = 3}};
    int many[2] = {16, 16};
    expect_order(SRPC_SCHED_FAIR, fair, 2, many, NULL, 1, "ABBBABBBABBB", "fair share 1:3 by calls");

    /* By admission cost: A's calls cost 3, B's 1, equal weights: B gets three calls per A's one. */
    fdef_t fair_cost[2] = {{.id = 1, .weight = 1, .cost_aux = 1}, {.id = 2, .weight = 1, .cost_aux = 1}};
    uint16_t costs[2] = {3, 1};
    expect_order(SRPC_SCHED_FAIR, fair_cost, 2, many, costs, 1, "ABBBABBBABBB", "fair share by cost");

    /* EDF: A's calls came first but may wait 800 ms; B's came 2 ms later and may wait 400 ms;
     * C's have none (ranked as 1 s). */
    fdef_t edf[3] = {{.id = 1, .deadline_us = 800000}, {.id = 2, .deadline_us = 400000}, {.id = 3}};
    int edf_counts[3] = {2, 2, 2};
    expect_order(SRPC_SCHED_EDF, edf, 3, edf_counts, NULL, 1, "BBAACC", "earliest deadline first");

    srpc_server_config_t cfg = loopback_server_config(SRPC_WAIT_BLOCK);
    srpc_server_t *srv = NULL;
    cfg.sched = 4;
    CHECK(srpc_server_create(&cfg, &srv) == -EINVAL, "an unknown policy");
    cfg.sched = -1;
    CHECK(srpc_server_create(&cfg, &srv) == -EINVAL, "a negative policy");
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
