/* test_reply.c: the server's reply path on one thread: a batch's replies (more than one send's worth), the reply log that answers retransmissions (oldest replies leave first, one larger than the log is not kept, zero-length ones are, expiry), and the error replies of one receive burst, calls of a batch failed one by one, replies held across batches. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/wire.h"
#include "server/completion.h"
#include "server/engine.h"

#include "check.h"

enum { F_RAW = 1, F_BIG = 2, F_WIDE = 3, F_ONE = 4, F_SMALL = 5 };
#define LOG_BYTES 10000u
#define MAX_REPLY 4000u

static srpc_server_t *srv;
static int cl;                /* the client's socket: replies arrive here */
static struct sockaddr_in me; /* its address, the source of every request fed */
static int srv_port;

/* The reply the test's function gives to request req_id: len bytes derived from it. */
static uint32_t reply_len(uint64_t id) { return id % 17 == 5 ? 0 : 1000 + (uint32_t)(id * 700 % 3001); }
static uint8_t reply_byte(uint64_t id, uint32_t k) { return (uint8_t)(id * 31 + k * 7); }

static void add(uint16_t id, uint32_t out, uint32_t max_batch, uint32_t cap)
{
    uint32_t in = 64;
    srpc_func_config_t f;
    srpc_func_config_init(&f);
    f.func_id = id;
    f.raw = 1;
    f.in_sizes = &in;
    f.out_sizes = &out;
    f.max_batch = max_batch;
    f.capacity = cap;
    CHECK(srpc_server_add_function(srv, &f) == 0, "add function %u", id);
}

/* One request of function fn, as if it came from the client socket. */
static void feed(uint16_t fn, uint64_t id)
{
    uint8_t d[SRPC_HDR_LEN + 8];
    srpc_hdr_t h = {.type = SRPC_REQUEST, .version = SRPC_VERSION_2, .func_id = fn, .req_id = id, .nseg = 1,
                    .msg_len = 8};
    srpc_hdr_encode(&h, d);
    memcpy(d + SRPC_HDR_LEN, &id, 8);
    srpc_engine_feed(srv, d, sizeof(d), (struct sockaddr *)&me, sizeof(me));
}

/* Runs every ready batch (the function's replies; F_BIG's larger than the log); returns the
 * number of batches and, in *calls, of calls. */
static int drain(int *calls)
{
    srpc_batch_t b;
    int batches = 0;
    while (srpc_server_next_batch(srv, &b, 0) == 0) {
        batches++;
        for (uint32_t i = 0; i < b.count; i++) {
            uint64_t id;
            memcpy(&id, b.in[0] + (size_t)i * 64, 8);
            uint32_t len = b.func_id == F_BIG ? LOG_BYTES + 1 : reply_len(id);
            uint8_t *out = b.out[0] + (size_t)i * (b.func_id == F_BIG ? LOG_BYTES + 1 : MAX_REPLY);
            for (uint32_t k = 0; k < len; k++)
                out[k] = reply_byte(id, k);
            b.out_len[i] = len;
        }
        if (calls)
            *calls += (int)b.count;
        CHECK(srpc_server_complete(srv, &b, 0, NULL) == 0, "complete");
    }
    return batches;
}

/* Receives one reply message (any number of segments) for call id; 1 when its bytes are the
 * function's reply (code 0) or its error is `code`. */
static int got_reply(uint64_t id, int code, uint32_t want_len, uint16_t fn)
{
    static uint8_t msg[LOG_BYTES + 64];
    uint8_t buf[65536];
    uint32_t have = 0, nseg = 0, seen = 0;
    for (;;) {
        struct pollfd p = {.fd = cl, .events = POLLIN};
        if (poll(&p, 1, 1000) <= 0)
            return 0;
        ssize_t n = recv(cl, buf, sizeof(buf), 0);
        srpc_hdr_t h;
        uint32_t seg;
        if (n < SRPC_HDR_LEN || srpc_hdr_decode(buf, SRPC_HDR_LEN, &h) != 0 ||
            srpc_seg_check(&h, (size_t)n - SRPC_HDR_LEN, &seg) != 0 || h.req_id != id || h.func_id != fn)
            return 0;
        if (code)
            return h.type == SRPC_ERROR && h.aux == code;
        if (h.type != SRPC_RESPONSE || h.msg_len != want_len || h.msg_len > sizeof(msg))
            return 0;
        memcpy(msg + (size_t)h.seq * seg, buf + SRPC_HDR_LEN, (size_t)n - SRPC_HDR_LEN);
        nseg = h.nseg;
        have += (uint32_t)n - SRPC_HDR_LEN;
        if (++seen == nseg)
            break;
    }
    for (uint32_t k = 0; k < want_len; k++)
        if (msg[k] != reply_byte(id, k))
            return 0;
    return have == want_len;
}

static srpc_server_stats_t stats(void)
{
    srpc_server_stats_t st;
    srpc_server_stats(srv, &st);
    return st;
}

/* 40 calls in one batch: more replies than one send takes, each right. */
static void test_wide_batch(void)
{
    for (uint64_t id = 9000; id < 9040; id++)
        feed(F_WIDE, id);
    int calls = 0;
    CHECK(drain(&calls) == 1 && calls == 40, "one batch of 40 (%d calls)", calls);
    int ok = 0;
    for (uint64_t id = 9000; id < 9040; id++)
        ok += got_reply(id, 0, reply_len(id), F_WIDE);
    CHECK(ok == 40, "%d of 40 replies right", ok);
}

/* The log keeps the newest replies that fit, oldest first out; retransmissions of those are
 * answered from it, byte for byte, and run nothing. */
static void test_log(void)
{
    enum { N = 60 };
    for (uint64_t id = 1; id <= N; id++) {
        feed(F_RAW, id);
        drain(NULL);
        CHECK(got_reply(id, 0, reply_len(id), F_RAW), "reply %llu", (unsigned long long)id);
    }
    /* Newest to oldest: hits until the first miss; a miss runs the call again. */
    srpc_server_stats_t st0 = stats();
    uint32_t m = 0, bytes = 0;
    for (uint64_t id = N; id >= 1; id--) {
        feed(F_RAW, id);
        int calls = 0;
        drain(&calls);
        CHECK(got_reply(id, 0, reply_len(id), F_RAW), "retransmission of %llu answered right", (unsigned long long)id);
        if (calls)
            break;
        m++;
        bytes += reply_len(id);
    }
    srpc_server_stats_t st1 = stats();
    const uint32_t next = reply_len(N - m);
    CHECK(st1.cache_hits - st0.cache_hits == m && m >= 2, "%u hits", m);
    CHECK(bytes <= LOG_BYTES, "the %u replies answered from the log hold %u bytes, over %u", m, bytes, LOG_BYTES);
    /* Oldest first out: the next older one did not fit beside them (at most one reply's worth
     * is lost where the ring wraps). */
    CHECK(bytes + next > LOG_BYTES - MAX_REPLY, "%u + %u bytes: it would have fitted", bytes, next);
    CHECK(st1.cached_replies <= m + 1, "cached %llu", (unsigned long long)st1.cached_replies);
}

/* A reply larger than the whole log is sent, not kept; a zero-length one is kept. */
static void test_sizes(void)
{
    feed(F_BIG, 500);
    drain(NULL);
    CHECK(got_reply(500, 0, LOG_BYTES + 1, F_BIG), "big reply");
    srpc_server_stats_t st0 = stats();
    feed(F_BIG, 500);
    int calls = 0;
    drain(&calls);
    CHECK(calls == 1 && stats().cache_hits == st0.cache_hits, "a reply over the log is not cached: it runs again");
    CHECK(got_reply(500, 0, LOG_BYTES + 1, F_BIG), "big reply again");
    const uint64_t zero = 17 * 100 + 5; /* reply_len 0 */
    feed(F_RAW, zero);
    drain(NULL);
    CHECK(got_reply(zero, 0, 0, F_RAW), "empty reply");
    st0 = stats();
    feed(F_RAW, zero);
    calls = 0;
    drain(&calls);
    CHECK(calls == 0 && stats().cache_hits == st0.cache_hits + 1, "an empty reply is cached");
    CHECK(got_reply(zero, 0, 0, F_RAW), "empty reply from the log");
}

/* Cached replies expire: then a retransmission runs the call again. */
static void test_expiry(void)
{
    feed(F_RAW, 7000);
    drain(NULL);
    CHECK(got_reply(7000, 0, reply_len(7000), F_RAW), "reply");
    CHECK(stats().cached_replies > 0, "cached");
    srpc_engine_run_timers(srv, srpc_now_ns() + 20000000000ull);
    CHECK(stats().cached_replies == 0, "all expired");
    feed(F_RAW, 7000);
    int calls = 0;
    drain(&calls);
    CHECK(calls == 1 && got_reply(7000, 0, reply_len(7000), F_RAW), "runs again after expiry");
}

/* 100 requests for an unknown function in the socket at once: the engine answers each in
 * the bursts that receive them (more errors than one burst's queue holds). */
static void test_burst_errors(void)
{
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)srv_port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (uint64_t id = 0; id < 100; id++) {
        uint8_t d[SRPC_HDR_LEN];
        srpc_hdr_t h = {.type = SRPC_REQUEST, .version = SRPC_VERSION_2, .func_id = 999, .req_id = 20000 + id,
                        .nseg = 1, .msg_len = 0};
        srpc_hdr_encode(&h, d);
        CHECK(sendto(cl, d, sizeof(d), 0, (struct sockaddr *)&to, sizeof(to)) == SRPC_HDR_LEN, "send");
    }
    srpc_server_stats_t st0 = stats();
    srpc_batch_t b;
    for (int i = 0; i < 50 && stats().rx_datagrams - st0.rx_datagrams < 100; i++)
        CHECK(srpc_server_next_batch(srv, &b, 1000) == -ETIMEDOUT, "no batch"); /* receives inline */
    int ok = 0;
    for (uint64_t id = 0; id < 100; id++)
        ok += got_reply(20000 + id, SRPC_E_UNKNOWN_FUNCTION, 0, 999);
    CHECK(ok == 100, "%d of 100 UNKNOWN_FUNCTION errors", ok);
    CHECK(stats().errors[SRPC_E_UNKNOWN_FUNCTION] - st0.errors[SRPC_E_UNKNOWN_FUNCTION] == 100, "counted");
}

/* ERROR `code` with text `text` (NULL: none) for call id. */
static int got_error(uint64_t id, int code, const char *text, uint16_t fn)
{
    uint8_t buf[2048];
    struct pollfd p = {.fd = cl, .events = POLLIN};
    if (poll(&p, 1, 1000) <= 0)
        return 0;
    ssize_t n = recv(cl, buf, sizeof(buf), 0);
    srpc_hdr_t h;
    size_t tl = text ? strlen(text) : 0;
    return n >= SRPC_HDR_LEN && srpc_hdr_decode(buf, SRPC_HDR_LEN, &h) == 0 && h.req_id == id && h.func_id == fn &&
           h.type == SRPC_ERROR && h.aux == code && (size_t)n - SRPC_HDR_LEN == tl && h.msg_len == tl &&
           memcmp(buf + SRPC_HDR_LEN, text ? text : "", tl) == 0;
}

/* Fills the outputs of an open batch as drain() does. */
static void fill(srpc_batch_t *b)
{
    for (uint32_t i = 0; i < b->count; i++) {
        uint64_t id;
        memcpy(&id, b->in[0] + (size_t)i * 64, 8);
        for (uint32_t k = 0; k < reply_len(id); k++)
            b->out[0][(size_t)i * MAX_REPLY + k] = reply_byte(id, k);
        b->out_len[i] = reply_len(id);
    }
}

/* srpc_server_fail_call: three calls of a batch of 40 get their own errors (one replaced by a
 * second failure, one with no text), the 37 others their replies; bad arguments are refused; a
 * batch completed with an error sends it to every call, failed ones included; a failure left on
 * a batch never completed is freed with the server (ASan). */
static void test_per_call_errors(void)
{
    srpc_server_stats_t st0 = stats();
    for (uint64_t id = 30000; id < 30040; id++)
        feed(F_WIDE, id);
    srpc_batch_t b;
    CHECK(srpc_server_next_batch(srv, &b, 0) == 0 && b.count == 40, "a batch of 40");
    fill(&b);
    CHECK(srpc_server_fail_call(srv, &b, 3, SRPC_E_BAD_REQUEST, "key 7 out of range") == 0, "fail 3");
    CHECK(srpc_server_fail_call(srv, &b, 10, SRPC_E_INTERNAL, "first") == 0, "fail 10");
    CHECK(srpc_server_fail_call(srv, &b, 10, SRPC_E_BAD_REQUEST, "second") == 0, "fail 10 again");
    CHECK(srpc_server_fail_call(srv, &b, 39, SRPC_E_DEADLINE, NULL) == 0, "fail 39, no text");
    CHECK(srpc_server_fail_call(srv, &b, 40, SRPC_E_BAD_REQUEST, "x") == -EINVAL, "index past the batch");
    CHECK(srpc_server_fail_call(srv, &b, 0, 0, "x") == -EINVAL, "code 0");
    CHECK(srpc_server_fail_call(srv, &b, 0, SRPC_E_MAX, "x") == -EINVAL, "code past the last");
    CHECK(srpc_server_fail_call(srv, &b, 0, SRPC_E_TIMEOUT, "x") == -EINVAL, "a local code");
    CHECK(srpc_server_complete(srv, &b, 0, NULL) == 0, "complete");
    CHECK(srpc_server_fail_call(srv, &b, 0, SRPC_E_BAD_REQUEST, "x") == -EINVAL, "after completion");
    int ok = 0;
    for (uint64_t id = 30000; id < 30040; id++) {
        uint32_t i = (uint32_t)(id - 30000);
        if (i == 3)
            ok += got_error(id, SRPC_E_BAD_REQUEST, "key 7 out of range", F_WIDE);
        else if (i == 10)
            ok += got_error(id, SRPC_E_BAD_REQUEST, "second", F_WIDE);
        else if (i == 39)
            ok += got_error(id, SRPC_E_DEADLINE, NULL, F_WIDE);
        else
            ok += got_reply(id, 0, reply_len(id), F_WIDE);
    }
    CHECK(ok == 40, "%d of 40 outcomes right", ok);
    srpc_server_stats_t st = stats();
    CHECK(st.errors[SRPC_E_BAD_REQUEST] - st0.errors[SRPC_E_BAD_REQUEST] == 2 &&
              st.errors[SRPC_E_DEADLINE] - st0.errors[SRPC_E_DEADLINE] == 1 && st.replies - st0.replies == 37,
          "counted by code");
    /* the batch's error wins over a call's own */
    for (uint64_t id = 30100; id < 30104; id++)
        feed(F_WIDE, id);
    CHECK(srpc_server_next_batch(srv, &b, 0) == 0 && b.count == 4, "a batch of 4");
    CHECK(srpc_server_fail_call(srv, &b, 1, SRPC_E_BAD_REQUEST, "mine") == 0, "fail 1");
    CHECK(srpc_server_complete(srv, &b, SRPC_E_INTERNAL, "all of them") == 0, "complete with an error");
    ok = 0;
    for (uint64_t id = 30100; id < 30104; id++)
        ok += got_error(id, SRPC_E_INTERNAL, "all of them", F_WIDE);
    CHECK(ok == 4, "%d of 4 INTERNAL", ok);
    /* the element that carried a failure is used again: its next call is answered normally */
    for (uint64_t id = 30200; id < 30204; id++)
        feed(F_WIDE, id);
    int calls = 0;
    CHECK(drain(&calls) == 1 && calls == 4, "a clean batch");
    ok = 0;
    for (uint64_t id = 30200; id < 30204; id++)
        ok += got_reply(id, 0, reply_len(id), F_WIDE);
    CHECK(ok == 4, "%d of 4 clean replies", ok);
    /* left open with a failure: the server frees it */
    feed(F_WIDE, 30300);
    CHECK(srpc_server_next_batch(srv, &b, 0) == 0, "one more");
    CHECK(srpc_server_fail_call(srv, &b, 0, SRPC_E_BAD_REQUEST, "never sent") == 0, "fail, never complete");
}

/* The worker loop's srpc_server_complete_next, over every ready batch (one call each): how many
 * batches it ran (calls: as drain()'s, unused). */
static int run_held(int *calls)
{
    (void)calls;
    srpc_batch_t b;
    int batches = 0;
    int rc = srpc_server_next_batch(srv, &b, 0);
    while (rc == 0) {
        batches++;
        fill(&b);
        rc = srpc_server_complete_next(srv, &b, 0, NULL, 0);
    }
    CHECK(rc == -ETIMEDOUT, "the loop ends with no batch ready (%d)", rc);
    return batches;
}

/* Feeds calls from..to-1 of F_ONE, runs them as `run` does and checks they took `sends`
 * sends, and their replies. */
static void held_round(uint64_t from, uint64_t to, int (*run)(int *), uint64_t sends, const char *what)
{
    srpc_server_stats_t st0 = stats();
    for (uint64_t id = from; id < to; id++)
        feed(F_ONE, id);
    CHECK(run(NULL) == (int)(to - from), "%s: one batch per call", what);
    srpc_server_stats_t st = stats();
    CHECK(st.tx_sends - st0.tx_sends == sends, "%s: %llu sends, want %llu", what,
          (unsigned long long)(st.tx_sends - st0.tx_sends), (unsigned long long)sends);
    CHECK(st.replies - st0.replies == to - from, "%s: replies counted", what);
    int ok = 0;
    for (uint64_t id = from; id < to; id++)
        ok += got_reply(id, 0, reply_len(id), F_ONE);
    CHECK(ok == (int)(to - from), "%s: %d of %d replies right", what, ok, (int)(to - from));
}

/* Replies held across batches (reply.h): batches of one call each go out 8 to a send (the rest
 * with the last), all of them right; srpc_server_complete on its own sends at once. */
static void test_hold(void)
{
    held_round(40000, 40006, run_held, 1, "6 held");
    held_round(40100, 40120, run_held, 3, "20 held (8, 8, 4)");
    held_round(40200, 40203, drain, 3, "3 completed one by one");
    srv->cfg.reply_hold_us = 0; /* as srpc_server_config_t.reply_hold_us = 0 would */
    held_round(40300, 40304, run_held, 4, "reply_hold_us 0: none held");
    srv->cfg.reply_hold_us = 1000000;
}

/* A held reply is sent from its output element, already recycled: a batch that reuses the
 * element (a ring of 2 gone round; an empty ring's next call) is not handed out before the
 * reply has gone. */
static void test_hold_reuse(void)
{
    srpc_batch_t b;
    feed(F_SMALL, 41000); /* a first batch: the function is known to be quick */
    CHECK(run_held(NULL) == 1 && got_reply(41000, 0, reply_len(41000), F_SMALL), "a first call");
    feed(F_SMALL, 41001);
    feed(F_SMALL, 41002); /* the ring is full */
    CHECK(srpc_server_next_batch(srv, &b, 0) == 0 && b.count == 1, "the first call");
    fill(&b);
    CHECK(srpc_completion_complete_w(srv, &b, 0, NULL) == 0, "completed, its reply held");
    feed(F_SMALL, 41003); /* into the element of the first, recycled */
    CHECK(srpc_server_next_batch(srv, &b, 0) == 0 && b.count == 1, "the second call");
    fill(&b);
    CHECK(srpc_completion_complete_w(srv, &b, 0, NULL) == 0, "completed, held too");
    srpc_server_stats_t st0 = stats();
    CHECK(srpc_server_next_batch(srv, &b, 0) == 0 && b.count == 1, "the third, in the first's element");
    CHECK(stats().tx_sends - st0.tx_sends == 1, "the held replies sent before it was handed out");
    fill(&b); /* overwrites the element the first reply was sent from */
    CHECK(srpc_server_complete(srv, &b, 0, NULL) == 0, "complete");
    int ok = 0;
    for (uint64_t id = 41001; id < 41004; id++)
        ok += got_reply(id, 0, reply_len(id), F_SMALL);
    CHECK(ok == 3, "%d of 3 replies right", ok);
    /* A ring left empty starts its next call in the element used last (callring.c): a reply
     * still held from it goes before that call is handed out. */
    feed(F_ONE, 41100);
    CHECK(srpc_server_next_batch(srv, &b, 0) == 0 && b.count == 1, "a call");
    const uint64_t first = b.first_seq;
    uint8_t *const in0 = b.in[0], *const out0 = b.out[0];
    fill(&b);
    CHECK(srpc_completion_complete_w(srv, &b, 0, NULL) == 0, "completed, its reply held, the ring empty");
    feed(F_ONE, 41101);
    srpc_server_stats_t st1 = stats();
    CHECK(srpc_server_next_batch(srv, &b, 0) == 0 && b.count == 1, "the next call");
    /* F_ONE's output elements (4000 B) do not divide its ring's pages: the same bytes come back
     * after the address period, not after the capacity */
    CHECK(b.first_seq != first && b.in[0] == in0 && b.out[0] == out0, "in the same elements (seq %llu, then %llu)",
          (unsigned long long)first, (unsigned long long)b.first_seq);
    CHECK(stats().tx_sends - st1.tx_sends == 1, "the held reply sent before it was handed out");
    fill(&b);
    CHECK(srpc_server_complete(srv, &b, 0, NULL) == 0, "complete");
    CHECK(got_reply(41100, 0, reply_len(41100), F_ONE) && got_reply(41101, 0, reply_len(41101), F_ONE),
          "both replies right");
}

/* Error texts of held replies: a call's own (srpc_server_fail_call) is held with its reply and
 * freed after the send (ASan); the caller's text for a whole batch is sent before
 * complete_next returns, since the caller may free it then. */
static void test_hold_errors(void)
{
    srpc_batch_t b;
    for (uint64_t id = 42000; id < 42003; id++)
        feed(F_ONE, id);
    CHECK(srpc_server_next_batch(srv, &b, 0) == 0, "first");
    fill(&b);
    CHECK(srpc_server_fail_call(srv, &b, 0, SRPC_E_BAD_REQUEST, "key 9 out of range") == 0, "fail it");
    int rc = srpc_server_complete_next(srv, &b, 0, NULL, 0);
    CHECK(rc == 0, "second");
    char text[32];
    snprintf(text, sizeof(text), "%s", "the whole batch");
    srpc_server_stats_t st0 = stats();
    rc = srpc_server_complete_next(srv, &b, SRPC_E_INTERNAL, text, 0); /* fails 42001 with the caller's text */
    CHECK(stats().tx_sends - st0.tx_sends == 1, "sent before complete_next returned");
    memset(text, 'x', sizeof(text) - 1);
    CHECK(rc == 0, "third");
    fill(&b);
    CHECK(srpc_server_complete_next(srv, &b, 0, NULL, 0) == -ETIMEDOUT, "no more");
    CHECK(got_error(42000, SRPC_E_BAD_REQUEST, "key 9 out of range", F_ONE), "the call's own error, held");
    CHECK(got_error(42001, SRPC_E_INTERNAL, "the whole batch", F_ONE), "the batch's error text intact");
    CHECK(got_reply(42002, 0, reply_len(42002), F_ONE), "the third's reply");
}

int main(void)
{
    srpc_server_config_t cfg;
    srpc_server_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.wait_mode = SRPC_WAIT_POLL;
    cfg.reply_cache_bytes = LOG_BYTES;
    cfg.seg_size_loopback = 1400; /* replies of several segments */
    /* Held replies go by count and safety, never by time, and no batch counts as slow (the
     * sanitizer builds are slow): */
    cfg.reply_hold_us = 1000000;
    cfg.rx_takeover_us = 100000000;
    if (srpc_server_create(&cfg, &srv) != 0) {
        fprintf(stderr, "cannot create a server\n");
        return 2;
    }
    srv_port = srpc_server_port(srv);
    add(F_RAW, MAX_REPLY, 1, 16);
    add(F_BIG, LOG_BYTES + 1, 1, 4);
    add(F_WIDE, MAX_REPLY, 64, 128);
    add(F_ONE, MAX_REPLY, 1, 64);
    add(F_SMALL, MAX_REPLY, 1, 2);
    cl = socket(AF_INET, SOCK_DGRAM, 0);
    me = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t ml = sizeof(me);
    int big = 8 << 20;
    setsockopt(cl, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    if (bind(cl, (struct sockaddr *)&me, sizeof(me)) != 0 || getsockname(cl, (struct sockaddr *)&me, &ml) != 0) {
        fprintf(stderr, "cannot bind the client socket\n");
        return 2;
    }
    test_wide_batch();
    test_log();
    test_sizes();
    test_expiry();
    test_burst_errors();
    test_per_call_errors();
    test_hold();
    test_hold_reuse();
    test_hold_errors();
    srpc_server_destroy(srv);
    close(cl);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
