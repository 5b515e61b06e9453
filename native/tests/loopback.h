/* loopback.h: what the native test programs that serve over real loopback UDP share: sleeping, a server configuration and a client on 127.0.0.1, and waiting for the server's counters. */
#ifndef SRPC_TEST_LOOPBACK_H
#define SRPC_TEST_LOOPBACK_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "splitrpc.h"

static inline void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The defaults, on 127.0.0.1, a free port, in wait_mode. */
static inline srpc_server_config_t loopback_server_config(int wait_mode)
{
    srpc_server_config_t cfg;
    srpc_server_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.wait_mode = wait_mode;
    return cfg;
}

/* A created server (a test cannot go on without one: exits 2 if it cannot be made). */
static inline srpc_server_t *loopback_server(const srpc_server_config_t *cfg)
{
    srpc_server_t *srv = NULL;
    if (srpc_server_create(cfg, &srv) != 0) {
        fprintf(stderr, "cannot create a server, giving up\n");
        exit(2);
    }
    return srv;
}

/* A client of 127.0.0.1:port that shows the server's answers as sent (BUSY included: no window,
 * no BUSY retry) and retransmits a request `retries` times. Exits 2 if it cannot be made. */
static inline srpc_client_t *loopback_client(int port, uint32_t retries)
{
    srpc_client_config_t cfg;
    srpc_client_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = (uint16_t)port;
    cfg.retries = retries;
    cfg.window = 0;
    cfg.busy_retry = 0;
    srpc_client_t *c = NULL;
    if (srpc_client_create(&cfg, &c) != 0) {
        fprintf(stderr, "cannot create a client, giving up\n");
        exit(2);
    }
    return c;
}

static inline srpc_server_stats_t server_stats(srpc_server_t *srv)
{
    srpc_server_stats_t st;
    memset(&st, 0, sizeof(st));
    srpc_server_stats(srv, &st);
    return st;
}

/* Waits up to 3 s until the server has received n calls (queued_now = 0) or holds n calls queued
 * now (1); returns whether it did. */
static inline int wait_for_calls(srpc_server_t *srv, uint64_t n, int queued_now)
{
    for (int i = 0; i < 3000; i++) {
        srpc_server_stats_t st = server_stats(srv);
        if ((queued_now ? st.queued : st.calls) >= n)
            return 1;
        sleep_us(1000);
    }
    return 0;
}

#endif /* SRPC_TEST_LOOPBACK_H */
