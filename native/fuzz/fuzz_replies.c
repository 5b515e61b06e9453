/* fuzz_replies.c: libFuzzer harness over the client's reply path: header checks, version 3's data check, reply reassembly, ERROR handling with BUSY retries, the window and its queue, release; the replies come from a loopback peer socket. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "splitrpc.h"

/* The input is a sequence of records: [op: 1 byte][len: 2 bytes, big-endian][len bytes].
 * op & 1: the bytes are sent as they are (a datagram from anyone); else they describe a reply
 * to call (op >> 1) & 7 with a valid header: type, seq, nseg, msg_len and aux from the first 12
 * bytes, the rest its data. op & 16: release that call afterwards (a caller giving up). op & 32:
 * to the version 3 client instead of the version 2 one (a reply built for it ends with its data
 * check; op & 64 damages that check). Each client makes six calls per input through a window of
 * 4, so two wait in it. */
#define CALLS 6

static srpc_client_t *clients[2]; /* version 2, version 3 */
static int peer = -1;
static struct sockaddr_in client_addr[2]; /* where each sends from (learned from its requests) */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    peer = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (peer < 0 || bind(peer, (struct sockaddr *)&a, sizeof(a)) || getsockname(peer, (struct sockaddr *)&a, &al))
        abort();
    srpc_client_config_t cfg;
    srpc_client_config_init(&cfg);
    cfg.port = ntohs(a.sin_port);
    cfg.window = 4;
    cfg.retries = 2;
    cfg.rto_min_us = cfg.rto_initial_us = 1000;
    cfg.rto_max_us = 2000;
    cfg.busy_backoff_us = 1;
    cfg.max_reply = 1 << 16;
    for (int v = 0; v < 2; v++) {
        cfg.version = v ? SRPC_VERSION_3 : SRPC_VERSION_2;
        if (srpc_client_create(&cfg, &clients[v]) != 0)
            abort();
    }
    return 0;
}

static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

/* Reads what the clients sent (requests, retransmissions); remembers where each sends from. */
static void drain_peer(void)
{
    uint8_t buf[65536];
    struct pollfd pf = {.fd = peer, .events = POLLIN};
    while (poll(&pf, 1, 0) > 0) {
        struct sockaddr_in from;
        socklen_t al = sizeof(from);
        ssize_t n = recvfrom(peer, buf, sizeof(buf), 0, (struct sockaddr *)&from, &al);
        if (n < 0)
            break;
        if (n >= SRPC_HDR_LEN)
            client_addr[(buf[1] >> 4) == SRPC_VERSION_3] = from;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t ids[2][CALLS];
    int live[2][CALLS];
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < CALLS; i++)
            live[v][i] = srpc_client_send_timed(clients[v], NULL, (uint16_t)(1 + i % 3), "abcd", 4, 0, 1000000,
                                                &ids[v][i]) == 0;
    drain_peer();
    uint8_t dg[SRPC_HDR_LEN + 65536 + SRPC_DATA_CHECK_LEN];
    uint64_t done[16];
    size_t off = 0;
    while (off + 3 <= size) {
        uint8_t op = data[off];
        size_t len = be16(data + off + 1);
        off += 3;
        if (len > size - off)
            len = size - off;
        const uint8_t *rec = data + off;
        off += len;
        int k = (op >> 1) & 7;
        if (k >= CALLS)
            k %= CALLS;
        const int v = (op & 32) != 0;
        srpc_client_t *cl = clients[v];
        size_t n;
        if (op & 1) {
            n = len;
            memcpy(dg, rec, len);
        } else {
            uint8_t f[12] = {0};
            memcpy(f, rec, len < 12 ? len : 12);
            size_t dlen = len > 12 ? len - 12 : 0;
            srpc_hdr_t h = {.type = (uint8_t)(f[0] % 3), .version = v ? SRPC_VERSION_3 : SRPC_VERSION_2,
                            .func_id = (uint16_t)(1 + k % 3), .req_id = ids[v][k], .seq = be16(f + 1), .nseg = be16(f + 3),
                            .msg_len = (uint32_t)f[5] << 24 | (uint32_t)f[6] << 16 | (uint32_t)f[7] << 8 | f[8],
                            .aux = (uint16_t)(f[9] % 8)};
            if (srpc_hdr_encode(&h, dg) != 0)
                continue;
            memcpy(dg + SRPC_HDR_LEN, rec + 12, dlen);
            n = SRPC_HDR_LEN + dlen;
            if (v) { /* the data check (CRC-32C of header and data, big-endian), damaged with op & 64 */
                uint32_t c = srpc_crc32c(0, dg, n) ^ (op & 64 ? 1u : 0u);
                dg[n] = (uint8_t)(c >> 24), dg[n + 1] = (uint8_t)(c >> 16), dg[n + 2] = (uint8_t)(c >> 8);
                dg[n + 3] = (uint8_t)c;
                n += SRPC_DATA_CHECK_LEN;
            }
        }
        if (client_addr[v].sin_port)
            sendto(peer, dg, n, 0, (struct sockaddr *)&client_addr[v], sizeof(client_addr[v]));
        srpc_client_wait_any(cl, done, 16, 0); /* one receive pass: the datagram is processed */
        if ((op & 16) && live[v][k]) {
            srpc_client_release(cl, ids[v][k]);
            live[v][k] = 0;
        }
        drain_peer();
    }
    for (int v = 0; v < 2; v++) {
        srpc_client_t *cl = clients[v];
        while (srpc_client_wait_any(cl, done, 16, 0) > 0)
            ;
        for (int i = 0; i < CALLS; i++)
            if (live[v][i]) {
                int code;
                const uint8_t *d;
                uint32_t l;
                if (srpc_client_result(cl, ids[v][i], &code, &d, &l) == 0 && code != SRPC_E_PENDING && l && d)
                    (void)d[l - 1]; /* a finished call's reply is readable to its last byte */
                srpc_client_release(cl, ids[v][i]);
            }
        srpc_client_stats_t st;
        if (srpc_client_stats(cl, &st) != 0 || st.outstanding != 0 || st.waiting != 0)
            abort(); /* every call released: nothing may be left counted in the window */
    }
    return 0;
}
