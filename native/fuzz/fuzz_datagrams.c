/* fuzz_datagrams.c: libFuzzer harness over the server's datagram path: header checks, segmentation, reassembly, the call table and reply cache, batching and completion (the monitor), with four client addresses. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/engine.h"

/* The input is a sequence of records: [op: 1 byte][len: 2 bytes, big-endian][len bytes].
 * op & 3: which of four client addresses sends it; op & 4: take and complete the batches
 * that are ready afterwards; op & 8: complete them with an error; op & 16: run the timers
 * as if 20 s had passed (partial messages and cached replies expire); op & 32: before completing,
 * fail the calls whose request's first byte is odd one by one (srpc_server_fail_call); op & 64:
 * defer each batch and finish it with srpc_server_finish from a copy, as a thread pool does.
 * Admission costs: F_VEC from a table of two int32 keys at byte 0 (bounded batches), F_RAW from
 * the header's aux, F_BIG from one int64 key at byte 8; the server shares work fairly by cost.
 * F_CLS has 3 aux classes: a call's queue is chosen by its header's aux. F_COST has 3 classes
 * by cost (raw, every int32 key to the end; bounds COST_B0, COST_B1; large enough for many
 * segments): a call's queue is chosen by the cost of its whole request; F_SPILL likewise, each class
 * but the last spilling to the next while it holds 1 (class 0) or 2 (class 1) calls not yet
 * answered (a call may run in a higher class than its cost, never a lower). F_PING and F_DESC are
 * registered as the Python server registers ping and describe (docs/PROTOCOL.md, Amendment 1).
 * op & 128: the server starts draining (new calls answered DRAINING), or stops draining. */
enum { F_VEC = 1, F_RAW = 3, F_BIG = 5, F_CLS = 7, F_LIST = 9, F_COST = 11, F_SPILL = 13, F_DESC = 0xFFFE,
       F_PING = 0xFFFF };
#define COST_B0 20
#define COST_B1 60
#define COST_MAX_REQ 20000
#define VEC_MAX_BATCH_COST 60

static srpc_server_t *srv;
static uint32_t table[50];
static int draining;

static void add(uint16_t id, int raw, uint32_t in, uint32_t out, uint32_t cap, int cost_from, uint32_t key_offset,
                uint32_t keys, uint32_t key_size, uint64_t max_cost)
{
    srpc_func_config_t f = {.func_id = id, .raw = raw, .n_in = 1, .n_out = 1, .in_sizes = &in, .out_sizes = &out,
                            .capacity = cap, .max_batch = 4, .cost_from = cost_from, .cost_table = table,
                            .cost_table_len = 50, .cost_key_offset = key_offset, .cost_key_count = keys,
                            .cost_key_size = key_size, .max_batch_cost = max_cost, .weight = id};
    if (srpc_server_add_function(srv, &f) != 0)
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    srpc_server_config_t cfg;
    srpc_server_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.wait_mode = SRPC_WAIT_POLL;
    cfg.max_calls = 256;
    cfg.reasm_mem_cap = 4 << 20;
    cfg.reply_cache_bytes = 1 << 20;
    cfg.max_message = 300000;
    cfg.sched = SRPC_SCHED_FAIR;
    if (srpc_server_create(&cfg, &srv) != 0)
        abort();
    for (uint32_t i = 0; i < 50; i++)
        table[i] = i;
    add(F_VEC, 0, 1024, 1024, 16, SRPC_COST_TABLE, 0, 2, 4, VEC_MAX_BATCH_COST);
    add(F_RAW, 1, 65536, 65536, 8, SRPC_COST_AUX, 0, 0, 0, 0);
    add(F_BIG, 0, 200000, 16, 4, SRPC_COST_TABLE, 8, 1, 8, 0); /* a request of many segments */
    add(F_LIST, 1, 4096, 64, 8, SRPC_COST_TABLE, 0, 0, 4, 0);  /* raw: every int32 key to the end (a GNN seed list) */
    uint32_t s16 = 16;
    srpc_func_config_t cls = {.func_id = F_CLS, .n_in = 1, .n_out = 1, .in_sizes = &s16, .out_sizes = &s16,
                              .capacity = 4, .max_batch = 2, .aux_classes = 3};
    if (srpc_server_add_function(srv, &cls) != 0)
        abort();
    uint32_t creq = COST_MAX_REQ, crsp = 64;
    srpc_func_config_t byc = {.func_id = F_COST, .raw = 1, .n_in = 1, .n_out = 1, .in_sizes = &creq,
                              .out_sizes = &crsp, .capacity = 4, .max_batch = 3, .cost_from = SRPC_COST_TABLE,
                              .cost_table = table, .cost_table_len = 50, .cost_key_size = 4, .aux_classes = 3,
                              .class_by = SRPC_CLASS_BY_COST, .class_bounds = {COST_B0, COST_B1}};
    if (srpc_server_add_function(srv, &byc) != 0)
        abort();
    byc.func_id = F_SPILL;
    byc.class_spill[0] = 1;
    byc.class_spill[1] = 2;
    if (srpc_server_add_function(srv, &byc) != 0)
        abort();
    add(F_DESC, 1, 64, 4096, 4, SRPC_COST_NONE, 0, 0, 0, 0);
    add(F_PING, 1, 64, 1024, 4, SRPC_COST_NONE, 0, 0, 0, 0);
    return 0;
}

/* Takes every ready batch and completes it (zero outputs, or an error), some of its calls
 * failed alone first when per_call. */
static void drain(int fail, int per_call, int deferred)
{
    srpc_batch_t b;
    while (srpc_server_next_batch(srv, &b, 0) == 0) {
        const int costless = b.func_id == F_CLS || b.func_id == F_DESC || b.func_id == F_PING;
        const int by_cost = b.func_id == F_COST || b.func_id == F_SPILL;
        const int classed = b.func_id == F_CLS || by_cost;
        if (!b.cost != costless || (!classed && b.aux_class) || b.aux_class > 2)
            abort(); /* every function here but F_CLS and the server functions has a cost; F_CLS, F_COST have classes */
        for (uint32_t i = 0; by_cost && i < b.count; i++) {
            const uint32_t lo = b.func_id == F_SPILL || b.aux_class == 0 ? 0 : b.aux_class == 1 ? COST_B0 : COST_B1;
            const uint32_t hi = b.aux_class == 0 ? COST_B0 : b.aux_class == 1 ? COST_B1 : UINT32_MAX;
            if (b.cost[i] < lo || (b.cost[i] >= hi && hi != UINT32_MAX) || b.in_len[i] % 4)
                abort(); /* every call of a by-cost class's batch costs what that class holds, whole keys only */
        }
        uint64_t sum = 0;
        for (uint32_t i = 0; b.cost && i < b.count; i++) {
            if (b.func_id == F_LIST && (b.in_len[i] % 4 || b.cost[i] > b.in_len[i] / 4 * 49))
                abort(); /* whole keys only, each row at most 49 */
            if (b.func_id != F_RAW && b.func_id != F_LIST && !by_cost && b.cost[i] > 2 * 49)
                abort(); /* a cost from the table: at most two rows of 49 (a bad key never runs) */
            sum += b.cost[i];
        }
        if (b.func_id == F_VEC && b.count > 1 && sum > VEC_MAX_BATCH_COST)
            abort(); /* max_batch_cost */
        if (b.func_id == F_RAW || b.func_id == F_LIST || by_cost || b.func_id == F_DESC || b.func_id == F_PING)
            for (uint32_t i = 0; i < b.count; i++)
                b.out_len[i] = b.in_len[i] < 64 ? b.in_len[i] : 64;
        for (uint32_t i = 0; per_call && i < b.count; i++) {
            const uint8_t *req = b.in[0] + (size_t)i * (b.func_id == F_RAW   ? 65536
                                                        : b.func_id == F_LIST ? 4096
                                                        : by_cost ? COST_MAX_REQ
                                                        : b.func_id == F_DESC || b.func_id == F_PING ? 64
                                                        : b.func_id == F_BIG ? 200000
                                                        : b.func_id == F_CLS ? 16
                                                                             : 1024);
            if ((!b.in_len || b.in_len[i]) && (req[0] & 1) &&
                srpc_server_fail_call(srv, &b, i, 1 + req[0] % (SRPC_E_MAX - 1), (req[0] & 2) ? NULL : "fuzz call") != 0)
                abort(); /* a valid index and code of an open batch: must be taken */
        }
        if (deferred) {
            srpc_batch_t copy = b;
            uint32_t *word;
            if (srpc_server_defer(srv, &b, &word) != 0 ||
                srpc_server_finish(srv, &copy, fail ? SRPC_E_INTERNAL : 0, fail ? "fuzz" : NULL) != 0 ||
                srpc_server_finish(srv, &copy, 0, NULL) != -EINVAL)
                abort(); /* a batch handed out defers, and finishes once */
            continue;
        }
        srpc_server_complete(srv, &b, fail ? SRPC_E_INTERNAL : 0, fail ? "fuzz" : NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sockaddr_in src[4];
    for (int i = 0; i < 4; i++)
        src[i] = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)(1 + i)),
                                      .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    size_t at = 0;
    while (at + 3 <= size) {
        uint8_t op = data[at];
        size_t len = (size_t)data[at + 1] << 8 | data[at + 2];
        at += 3;
        if (len > size - at)
            len = size - at;
        srpc_engine_feed(srv, data + at, len, (struct sockaddr *)&src[op & 3], sizeof(src[0]));
        at += len;
        if (op & 4)
            drain(op & 8, op & 32, op & 64);
        if (op & 16)
            srpc_engine_run_timers(srv, srpc_now_ns() + 20000000000ull);
        if (op & 128) {
            draining = !draining;
            srpc_server_drain(srv, draining);
        }
    }
    /* Leave nothing behind for the next input: run what is queued, expire everything. */
    draining = 0;
    srpc_server_drain(srv, 0);
    drain(0, 0, 0);
    srpc_engine_run_timers(srv, srpc_now_ns() + 3600000000000ull);
    return 0;
}
