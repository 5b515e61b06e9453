/* c_client.c: a C program calling a splitrpc server through the installed C client library:
 * vecadd (func 1) with a blocking call, then echo (func 3) of 1 MiB and 8 more vecadd calls at
 * once through a completion queue, every reply checked. Exit status 0 when all were right.
 *
 *   splitrpc serve --port 9230 &
 *   cc examples/c_client.c $(splitrpc --cflags --libs) -o c_client
 *   ./c_client 127.0.0.1 9230
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <splitrpc_client.h>

#define VECADD 1
#define ECHO 3
#define N 256
#define ECHO_BYTES (1u << 20)
#define TIMEOUT_US 5000000

/* rc: 0, -errno (a local failure) or a protocol error code (the server's answer). */
static int fail(const char *what, int rc)
{
    fprintf(stderr, "c_client: %s: %d (%s)\n", what, rc, rc < 0 ? strerror(-rc) : srpc_strerror(rc));
    return 1;
}

static int vecadd_ok(const float *in, const uint8_t *reply, uint32_t len)
{
    if (len != N * sizeof(float))
        return 0;
    float out[N];
    memcpy(out, reply, sizeof(out));
    for (int i = 0; i < N; i++)
        if (out[i] != in[i] + 1.0f)
            return 0;
    return 1;
}

int main(int argc, char **argv)
{
    srpc_client_config_t cfg;
    srpc_client_config_init(&cfg);
    cfg.host = argc > 1 ? argv[1] : "127.0.0.1";
    cfg.port = (uint16_t)(argc > 2 ? atoi(argv[2]) : 9230);
    cfg.max_reply = ECHO_BYTES;
    srpc_client_t *cl;
    int rc = srpc_client_create(&cfg, &cl);
    if (rc != 0)
        return fail("srpc_client_create", rc);
    printf("splitrpc %s client -> %s:%u\n", srpc_version(), cfg.host, cfg.port);

    /* 1. a blocking call */
    float in[N];
    for (int i = 0; i < N; i++)
        in[i] = (float)i * 0.5f;
    static uint8_t reply[ECHO_BYTES];
    uint32_t len = 0;
    int code = -1;
    rc = srpc_client_call(cl, VECADD, in, sizeof(in), reply, sizeof(reply), &len, &code, TIMEOUT_US);
    if (rc != 0 || code != 0)
        return fail("vecadd call", rc ? rc : code);
    if (!vecadd_ok(in, reply, len))
        return fail("vecadd reply differs from input + 1", 0);
    printf("vecadd: %u B reply, input + 1: ok\n", len);

    /* 2. echo of 1 MiB and 8 vecadds at once, through a completion queue */
    srpc_client_cq_t *cq;
    if ((rc = srpc_client_cq_create(cl, &cq)) != 0)
        return fail("srpc_client_cq_create", rc);
    uint8_t *blob = malloc(ECHO_BYTES);
    if (!blob)
        return fail("malloc", 0);
    for (uint32_t i = 0; i < ECHO_BYTES; i++)
        blob[i] = (uint8_t)(i * 131u + 7u);
    uint64_t echo_id, ids[9];
    if ((rc = srpc_client_send_timed(cl, cq, ECHO, blob, ECHO_BYTES, 0, TIMEOUT_US, &echo_id)) != 0)
        return fail("send echo", rc);
    uint64_t vec_ids[8];
    for (int k = 0; k < 8; k++)
        if ((rc = srpc_client_send_timed(cl, cq, VECADD, in, sizeof(in), 0, TIMEOUT_US, &vec_ids[k])) != 0)
            return fail("send vecadd", rc);
    int done = 0, bad = 0;
    while (done < 9) {
        int n = srpc_client_wait_cq(cl, cq, ids, 9, TIMEOUT_US);
        if (n <= 0)
            return fail("srpc_client_wait_cq: no completion", n);
        for (int j = 0; j < n; j++) {
            const uint8_t *d;
            srpc_client_result(cl, ids[j], &code, &d, &len);
            if (code != 0) {
                fprintf(stderr, "c_client: call %llu: %s: %.*s\n", (unsigned long long)ids[j], srpc_strerror(code),
                        (int)len, (const char *)d);
                bad++;
            } else if (ids[j] == echo_id) {
                if (len != ECHO_BYTES || memcmp(d, blob, ECHO_BYTES) != 0)
                    bad++;
                else
                    printf("echo: 1 MiB back, byte for byte: ok\n");
            } else if (!vecadd_ok(in, d, len)) {
                bad++;
            }
            srpc_client_release(cl, ids[j]);
            done++;
        }
    }
    printf("async: %d calls, %d wrong\n", done, bad);
    free(blob);
    srpc_client_cq_destroy(cl, cq);
    srpc_client_destroy(cl);
    return bad ? 1 : 0;
}
