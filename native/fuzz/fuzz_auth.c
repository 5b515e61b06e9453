/* fuzz_auth.c: libFuzzer harness over the datagram path of a server with keys (docs/PROTOCOL-v4.md, and -v5.md's handshake and unknown sessions through raw records): the trailer's key, tag, time and replay window, FORBIDDEN, reassembly of signed segments, replies, and key reloads, with two client addresses. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/auth.h"
#include "server/engine.h"

/* The input is a sequence of records: [op: 1 byte][len: 2 bytes, big-endian][len bytes].
 * op & 1: which of two client addresses sends it. op & 2: the record is signed here, so that the
 * fuzzer reaches what lies past the tag: its first 4 bytes are [key: 1][sender: 1][counter: 2,
 * big-endian], the rest a header and data, to which the harness appends a trailer signed with
 * key (key & 3) of KEYS (key 4 is not in the server's table; key & 4 puts the time 60 s ahead,
 * past the skew, key & 16 60 s behind; key & 8 flips a bit of the tag) as sender `sender` of this input (each input's
 * senders are new to the server, so that its windows start empty; a short skew lets the
 * server reuse the places of earlier inputs' senders) with that counter (so records of one input
 * can replay one another). Else the bytes go as they are. op & 4: take and complete the
 * ready batches afterwards (op & 8: with an error). op & 16: run the timers as if 20 s had passed.
 * op & 32: hand the server a new key table (key 2 dropped, or back), which the engine takes in
 * before the next datagram. */
enum { F_ECHO = 1, F_NARROW = 2, F_BIG = 5, F_PING = 0xFFFF };

static srpc_server_t *srv;
static int reloaded;
static uint64_t epoch; /* inputs run: the high bits of their senders */

static const struct {
    uint32_t id;
    uint8_t secret[SRPC_AUTH_SECRET_LEN];
} KEYS[4] = {{1, {1}}, {2, {2}}, {3, {3}}, {4, {4}}};

/* Key 1: every function; key 2: F_ECHO only; key 3: expired; key 4: in no table. with2: key 2 is in. */
static srpc_keytab_t *table(int with2)
{
    srpc_keytab_t *t = NULL;
    const uint16_t echo = F_ECHO;
    if (srpc_keytab_create(1024, 20, &t) != 0 || srpc_keytab_add(t, 1, KEYS[0].secret, 32, 0, 1, NULL, 0) != 0 ||
        (with2 && srpc_keytab_add(t, 2, KEYS[1].secret, 32, 0, 0, &echo, 1) != 0) ||
        srpc_keytab_add(t, 3, KEYS[2].secret, 32, 1, 1, NULL, 0) != 0)
        abort();
    return t;
}

static void add(uint16_t id, uint32_t in, uint32_t out, uint32_t cap)
{
    srpc_func_config_t f = {.func_id = id, .raw = 1, .n_in = 1, .n_out = 1, .in_sizes = &in, .out_sizes = &out,
                            .capacity = cap, .max_batch = 4};
    if (srpc_server_add_function(srv, &f) != 0)
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (srpc_auth_available() != 0)
        abort(); /* the harness is about authentication: without libsodium there is nothing to fuzz */
    srpc_server_config_t cfg;
    srpc_server_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.max_calls = 128;
    cfg.reasm_mem_cap = 1 << 20;
    cfg.reply_cache_bytes = 1 << 20;
    cfg.max_message = 100000;
    if (srpc_server_create(&cfg, &srv) != 0)
        abort();
    add(F_ECHO, 4096, 4096, 8);
    add(F_NARROW, 64, 64, 4);
    add(F_BIG, 100000, 64, 2); /* many segments */
    add(F_PING, 64, 64, 4);
    if (srpc_server_set_keys(srv, table(1)) != 0)
        abort();
    return 0;
}

static void drain(int fail)
{
    srpc_batch_t b;
    while (srpc_server_next_batch(srv, &b, 0) == 0) {
        for (uint32_t i = 0; i < b.count; i++)
            b.out_len[i] = b.in_len[i] < 64 ? b.in_len[i] : 64;
        srpc_server_complete(srv, &b, fail ? SRPC_E_INTERNAL : 0, fail ? "fuzz" : NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t buf[65536 + SRPC_AUTH_TRAILER_LEN];
    struct sockaddr_in src[2];
    for (int i = 0; i < 2; i++)
        src[i] = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)(7 + i)),
                                      .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    size_t at = 0;
    epoch++;
    while (at + 3 <= size) {
        const uint8_t op = data[at];
        size_t len = (size_t)data[at + 1] << 8 | data[at + 2];
        at += 3;
        if (len > size - at)
            len = size - at;
        const uint8_t *d = data + at;
        at += len;
        if (op & 32) {
            reloaded = !reloaded;
            if (srpc_server_set_keys(srv, table(!reloaded)) != 0)
                abort();
        }
        size_t n = len;
        const uint8_t *dgram = d;
        if ((op & 2) && len >= 4) {
            const uint8_t k = d[0];
            const uint64_t counter = (uint64_t)d[2] << 8 | d[3];
            n = len - 4;
            memcpy(buf, d + 4, n);
            const struct iovec part = {buf, n};
            const uint32_t t = srpc_auth_now_ms() + ((k & 4) ? 60000u : 0u) - ((k & 16) ? 60000u : 0u);
            srpc_auth_sign_at(KEYS[k & 3].id, KEYS[k & 3].secret, epoch << 8 | d[1], counter, t, &part, 1, buf + n);
            if (k & 8)
                buf[n + SRPC_AUTH_TRAILER_LEN - 1] ^= 1;
            n += SRPC_AUTH_TRAILER_LEN;
            dgram = buf;
        }
        srpc_engine_feed(srv, dgram, n, (struct sockaddr *)&src[op & 1], sizeof(src[0]));
        if (op & 4)
            drain(op & 8);
        if (op & 16)
            srpc_engine_run_timers(srv, srpc_now_ns() + 20000000000ull);
    }
    drain(0);
    srpc_engine_run_timers(srv, srpc_now_ns() + 3600000000000ull);
    return 0;
}
