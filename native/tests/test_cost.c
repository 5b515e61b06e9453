/* test_cost.c: admission cost over real loopback UDP: costs from a table of keys (4- and 8-byte) and from the header's aux, hostile keys refused alone with BAD_REQUEST, the batch's costs, max_batch_cost, and what registration refuses. */
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

enum { F_T32 = 1, F_T64 = 2, F_AUX = 3, F_RAW = 4, F_LIST = 5 };
#define ROWS 10
#define TMO_US 3000000

static uint32_t table[ROWS];

/* F_T32: 16-byte requests (a tag, then 2 int32 keys at byte 4, then padding), cost = sum of the
 * keys' rows, max_batch_cost 60. F_T64: two tensors of 8 and 16 bytes, one int64 key at byte 8
 * (the second tensor). F_AUX: the header's aux. F_RAW: raw, one int32 key at byte 2. F_LIST: raw,
 * every int64 key from byte 8 to the end of the request (a variable-length list). */
static srpc_server_t *server_up(int *port)
{
    const srpc_server_config_t cfg = loopback_server_config(SRPC_WAIT_BLOCK);
    srpc_server_t *srv = loopback_server(&cfg);
    for (int i = 0; i < ROWS; i++)
        table[i] = (uint32_t)i * 10;
    uint32_t s16 = 16, s8 = 8, raw = 64, two_in[2] = {8, 16};
    srpc_func_config_t t32 = {.func_id = F_T32, .n_in = 1, .n_out = 1, .in_sizes = &s16, .out_sizes = &s16,
                              .capacity = 32, .max_batch = 8, .cost_from = SRPC_COST_TABLE, .cost_table = table,
                              .cost_table_len = ROWS, .cost_key_offset = 4, .cost_key_count = 2,
                              .cost_key_size = 4, .max_batch_cost = 60};
    srpc_func_config_t t64 = {.func_id = F_T64, .n_in = 2, .n_out = 1, .in_sizes = two_in, .out_sizes = &s8,
                              .capacity = 16, .max_batch = 8, .cost_from = SRPC_COST_TABLE, .cost_table = table,
                              .cost_table_len = ROWS, .cost_key_offset = 8, .cost_key_count = 1,
                              .cost_key_size = 8};
    srpc_func_config_t aux = {.func_id = F_AUX, .n_in = 1, .n_out = 1, .in_sizes = &s8, .out_sizes = &s8,
                              .capacity = 16, .max_batch = 8, .cost_from = SRPC_COST_AUX};
    srpc_func_config_t rawf = {.func_id = F_RAW, .raw = 1, .n_in = 1, .n_out = 1, .in_sizes = &raw,
                               .out_sizes = &raw, .capacity = 16, .max_batch = 8, .cost_from = SRPC_COST_TABLE,
                               .cost_table = table, .cost_table_len = ROWS, .cost_key_offset = 2,
                               .cost_key_count = 1, .cost_key_size = 4};
    CHECK(srpc_server_add_function(srv, &t32) == 0, "add F_T32");
    table[0] = 999; /* the server keeps its own copy */
    CHECK(srpc_server_add_function(srv, &t64) == 0, "add F_T64");
    CHECK(srpc_server_add_function(srv, &aux) == 0, "add F_AUX");
    srpc_func_config_t list = rawf;
    list.func_id = F_LIST;
    list.cost_key_offset = 8;
    list.cost_key_count = 0;
    list.cost_key_size = 8;
    CHECK(srpc_server_add_function(srv, &rawf) == 0, "add F_RAW");
    CHECK(srpc_server_add_function(srv, &list) == 0, "add F_LIST");
    table[0] = 0;
    CHECK(srpc_server_start(srv) == 0, "start");
    *port = srpc_server_port(srv);
    return srv;
}

/* Every call once: the server's answers as they are. */
static srpc_client_t *client(int port) { return loopback_client(port, 0); }

static int wait_calls(srpc_server_t *srv, uint64_t n) { return wait_for_calls(srv, n, 0); }

static void put32(uint8_t *p, int32_t v) { memcpy(p, &v, 4); } /* little-endian hosts (x86, arm64) */
static void put64(uint8_t *p, int64_t v) { memcpy(p, &v, 8); }

/* Sends an F_T32 call tagged `tag` with keys k0, k1. */
static uint64_t send_t32(srpc_client_t *c, int32_t tag, int32_t k0, int32_t k1)
{
    uint8_t req[16] = {0};
    put32(req, tag);
    put32(req + 4, k0);
    put32(req + 8, k1);
    uint64_t id = 0;
    CHECK(srpc_client_send(c, F_T32, req, sizeof(req), 0, &id) == 0, "send tag %d", tag);
    return id;
}

/* The outcome of call id: 0 RESPONSE, else its error code, with its text in text (n bytes). */
static int outcome(srpc_client_t *c, uint64_t id, char *text, size_t n)
{
    if (srpc_client_wait(c, id, TMO_US) != 0)
        return -1;
    int code = -1;
    const uint8_t *d = NULL;
    uint32_t l = 0;
    srpc_client_result(c, id, &code, &d, &l);
    if (text) {
        size_t m = l < n - 1 ? l : n - 1;
        memcpy(text, d, m);
        text[m] = 0;
    }
    srpc_client_release(c, id);
    return code;
}

/* Runs every batch queued now: echoes requests, records each batch's size and costs. */
static int run_batches(srpc_server_t *srv, uint32_t *sizes, uint32_t *costs, int max)
{
    int nb = 0, at = 0;
    srpc_batch_t b;
    while (nb < max && srpc_server_next_batch(srv, &b, 50000) == 0) {
        sizes[nb++] = b.count;
        for (uint32_t i = 0; i < b.count; i++) {
            costs[at++] = b.cost ? b.cost[i] : UINT32_MAX;
            if (b.func_id == F_RAW || b.func_id == F_LIST)
                b.out_len[i] = 0;
        }
        if (b.func_id == F_T32)
            memcpy(b.out[0], b.in[0], 16u * b.count);
        CHECK(srpc_server_complete(srv, &b, 0, NULL) == 0, "complete");
    }
    return nb;
}

static void test_table_and_batch_cost(void)
{
    int port;
    srpc_server_t *srv = server_up(&port);
    srpc_client_t *c = client(port);
    /* costs 30, 40 | 30 (bad between) | 50, 10 | 90 alone (over the bound) | 0 */
    uint64_t ids[8];
    ids[0] = send_t32(c, 0, 1, 2);          /* 10 + 20 = 30 */
    ids[1] = send_t32(c, 1, 4, 0);          /* 40 */
    ids[2] = send_t32(c, 2, -1, 3);         /* negative key: refused */
    ids[3] = send_t32(c, 3, 0, 3);          /* 30 */
    ids[4] = send_t32(c, 4, 5, 0);          /* 50 */
    ids[5] = send_t32(c, 5, 1, 0);          /* 10 */
    ids[6] = send_t32(c, 6, 9, 0);          /* 90: more than max_batch_cost alone */
    ids[7] = send_t32(c, 7, 0, 10);         /* one past the table: refused */
    CHECK(wait_calls(srv, 8), "8 calls queued");
    uint32_t sizes[16], costs[16];
    int nb = run_batches(srv, sizes, costs, 16);
    /* [30] (30 + 40 > 60), [40], then refused [bad] answered unrun, [30], [50, 10], [90], refused */
    CHECK(nb == 5, "5 batches run, got %d", nb);
    uint32_t want_sizes[5] = {1, 1, 1, 2, 1}, want_costs[6] = {30, 40, 30, 50, 10, 90};
    for (int i = 0; i < nb && i < 5; i++)
        CHECK(sizes[i] == want_sizes[i], "batch %d: %u calls, want %u", i, sizes[i], want_sizes[i]);
    for (int i = 0; i < 6; i++)
        CHECK(costs[i] == want_costs[i], "call %d of the run ones: cost %u, want %u", i, costs[i], want_costs[i]);
    char text[300];
    for (int i = 0; i < 8; i++) {
        int code = outcome(c, ids[i], text, sizeof(text));
        if (i == 2) {
            CHECK(code == SRPC_E_BAD_REQUEST && strstr(text, "cost key -1 (key 0, at byte 4)"), "call 2: %d %s",
                  code, text);
        } else if (i == 7) {
            CHECK(code == SRPC_E_BAD_REQUEST && strstr(text, "cost key 10 (key 1, at byte 8) is outside the table of 10"),
                  "call 7: %d %s", code, text);
        } else {
            CHECK(code == 0, "call %d answered: %d", i, code);
        }
    }
    srpc_server_stats_t st;
    srpc_server_stats(srv, &st);
    CHECK(st.errors[SRPC_E_BAD_REQUEST] == 2 && st.replies == 6 && st.batches == 5, "stats: %llu %llu %llu",
          (unsigned long long)st.errors[SRPC_E_BAD_REQUEST], (unsigned long long)st.replies,
          (unsigned long long)st.batches);

    /* 8-byte keys in the second input tensor, hostile ones; the aux; a raw request too short. */
    uint8_t req[24];
    int64_t keys[5] = {7, -1, INT64_MIN, INT64_MAX, (int64_t)1 << 40};
    for (int i = 0; i < 5; i++) {
        memset(req, 0, sizeof(req));
        put64(req + 8, keys[i]);
        CHECK(srpc_client_send(c, F_T64, req, sizeof(req), 0, &ids[i]) == 0, "send 64-bit key %d", i);
    }
    uint8_t small[8] = {0};
    CHECK(srpc_client_send(c, F_AUX, small, 8, 777, &ids[5]) == 0, "send with aux");
    uint8_t rawreq[6] = {0, 0, 3, 0, 0, 0};
    CHECK(srpc_client_send(c, F_RAW, rawreq, 6, 0, &ids[6]) == 0, "send raw with its key");
    CHECK(srpc_client_send(c, F_RAW, rawreq, 5, 0, &ids[7]) == 0, "send raw too short for its key");
    CHECK(wait_calls(srv, 16), "8 more queued");
    nb = run_batches(srv, sizes, costs, 16);
    uint32_t run = 0;
    for (int i = 0; i < nb; i++)
        run += sizes[i];
    int found[3] = {0, 0, 0};
    for (uint32_t i = 0; i < run && i < 16; i++) {
        found[0] |= costs[i] == 70;  /* int64 key 7 */
        found[1] |= costs[i] == 777; /* the aux */
        found[2] |= costs[i] == 30;  /* the raw request's key 3 */
    }
    CHECK(run == 3 && found[0] && found[1] && found[2], "3 calls run, costing 70, 777 and 30 (%u run)", run);
    for (int i = 0; i < 8; i++) {
        int code = outcome(c, ids[i], text, sizeof(text));
        int bad = (i >= 1 && i <= 4) || i == 7;
        CHECK(code == (bad ? SRPC_E_BAD_REQUEST : 0), "call %d: code %d (%s)", i, code, bad ? text : "");
        if (i == 2)
            CHECK(strstr(text, "cost key -9223372036854775808") != NULL, "INT64_MIN said: %s", text);
        if (i == 7)
            CHECK(strstr(text, "request of 5 bytes has no room for its 1 cost keys at byte 2") != NULL, "raw: %s",
                  text);
    }

    /* Key lists: 8 header bytes, then any number of int64 keys (none, one, three, a bad one, a
     * request not ending on a whole key, one shorter than the offset). */
    int64_t list[4] = {0, 0, 0, 0};
    uint8_t lreq[8 + 4 * 8] = {0};
    const uint32_t lens[6] = {8, 16, 32, 32, 13, 4};
    const int64_t vals[6][3] = {{0}, {2}, {1, 2, 9}, {1, 10, 2}, {3}, {0}};
    for (int i = 0; i < 6; i++) {
        memset(lreq, 0, sizeof(lreq));
        for (int k = 0; k < 3; k++) {
            list[k] = vals[i][k];
            put64(lreq + 8 + 8 * k, list[k]);
        }
        CHECK(srpc_client_send(c, F_LIST, lreq, lens[i], 0, &ids[i]) == 0, "send list %d", i);
    }
    CHECK(wait_calls(srv, 22), "6 lists queued");
    nb = run_batches(srv, sizes, costs, 16);
    run = 0;
    for (int i = 0; i < nb; i++)
        run += sizes[i];
    /* no keys: 0; [2]: 20; [1, 2, 9]: 10 + 20 + 90 */
    CHECK(run == 3 && costs[0] == 0 && costs[1] == 20 && costs[2] == 120, "lists cost 0, 20, 120: %u run, %u %u %u",
          run, costs[0], costs[1], costs[2]);
    for (int i = 0; i < 6; i++) {
        int code = outcome(c, ids[i], text, sizeof(text));
        CHECK(code == (i < 3 ? 0 : SRPC_E_BAD_REQUEST), "list %d: code %d (%s)", i, code, text);
        if (i == 3)
            CHECK(strstr(text, "cost key 10 (key 1, at byte 16) is outside the table of 10") != NULL, "list 3: %s",
                  text);
        if (i == 4 || i == 5)
            CHECK(strstr(text, "does not hold whole 8-byte cost keys after byte 8") != NULL, "list %d: %s", i, text);
    }
    srpc_client_destroy(c);
    srpc_server_destroy(srv);
}

static void test_registration(void)
{
    const srpc_server_config_t cfg = loopback_server_config(SRPC_WAIT_BLOCK);
    srpc_server_t *srv = NULL;
    CHECK(srpc_server_create(&cfg, &srv) == 0, "server");
    uint32_t s16 = 16, t[2] = {1, 2};
    srpc_func_config_t f = {.func_id = 1, .n_in = 1, .n_out = 1, .in_sizes = &s16, .out_sizes = &s16, .capacity = 4,
                            .max_batch = 2, .cost_from = SRPC_COST_TABLE, .cost_table = t, .cost_table_len = 2,
                            .cost_key_offset = 0, .cost_key_count = 4, .cost_key_size = 4};
    srpc_func_config_t g = f;
    g.cost_key_size = 3;
    CHECK(srpc_server_add_function(srv, &g) == -EINVAL, "key size 3");
    g = f;
    g.cost_key_count = 5;
    CHECK(srpc_server_add_function(srv, &g) == -EINVAL, "keys past the request");
    g = f;
    g.cost_key_offset = UINT32_MAX;
    CHECK(srpc_server_add_function(srv, &g) == -EINVAL, "keys at a huge offset");
    g = f;
    g.cost_key_count = 0;
    CHECK(srpc_server_add_function(srv, &g) == -EINVAL, "no keys (a key list is for raw functions)");
    g = f;
    g.cost_table = NULL;
    CHECK(srpc_server_add_function(srv, &g) == -EINVAL, "no table");
    g = f;
    g.cost_table_len = 0;
    CHECK(srpc_server_add_function(srv, &g) == -EINVAL, "an empty table");
    g = f;
    g.cost_from = 7;
    CHECK(srpc_server_add_function(srv, &g) == -EINVAL, "an unknown cost source");
    g = f;
    g.on_gpu = 1;
    CHECK(srpc_server_add_function(srv, &g) == -EINVAL, "a table on a GPU function");
    uint32_t two[2] = {8, 8};
    g = f;
    g.n_in = 2;
    g.in_sizes = two;
    g.cost_key_offset = 4;
    g.cost_key_count = 2; /* bytes 4..12: across the two tensors */
    CHECK(srpc_server_add_function(srv, &g) == -EINVAL, "keys across two tensors");
    CHECK(srpc_server_add_function(srv, &f) == 0, "a good one");
    srpc_server_destroy(srv);
}

int main(void)
{
    test_table_and_batch_cost();
    test_registration();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
