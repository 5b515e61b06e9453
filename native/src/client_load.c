/* client_load.c: a closed-loop load driver in native code, so that offered load and the
 * timestamps are not limited or distorted by Python. Runs on the calling thread. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "splitrpc.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct slot {
    uint64_t req_id;
    uint64_t t0;
    int live;
} slot_t;

typedef struct loop {
    srpc_client_t *cl;
    uint16_t func_id;
    const void *data;
    uint32_t len;
    uint32_t warmup, n_calls, finished;
    uint64_t *lat_ns, *errors, t_start;
} loop_t;

/* Records the outcome of one finished call; the first `warmup` are not recorded. */
static void record(loop_t *L, uint64_t lat, int ok)
{
    if (L->finished == L->warmup)
        L->t_start = now_ns();
    if (L->finished >= L->warmup) {
        uint32_t i = L->finished - L->warmup;
        L->lat_ns[i] = ok ? lat : 0;
        if (!ok)
            (*L->errors)++;
    }
    L->finished++;
}

static int issue(loop_t *L, slot_t *s)
{
    s->t0 = now_ns();
    int r = srpc_client_send(L->cl, L->func_id, L->data, L->len, 0, &s->req_id);
    s->live = r == 0;
    return r;
}

int srpc_client_closed_loop(srpc_client_t *cl, uint16_t func_id, const void *data, uint32_t len,
                            uint32_t concurrency, uint32_t warmup, uint32_t n_calls,
                            int64_t timeout_us, uint64_t *lat_ns, uint64_t *errors,
                            uint64_t *elapsed_ns)
{
    if (!cl || !lat_ns || !errors || !elapsed_ns || concurrency == 0 || n_calls == 0 || timeout_us <= 0)
        return -EINVAL;
    slot_t *slots = calloc(concurrency, sizeof(*slots));
    if (!slots)
        return -ENOMEM;
    loop_t L = {cl, func_id, data, len, warmup, n_calls, 0, lat_ns, errors, 0};
    *errors = 0;
    const uint32_t total = warmup + n_calls;
    uint32_t issued = 0;
    int rc = 0;
    for (uint32_t i = 0; i < concurrency && issued < total; i++, issued++)
        if ((rc = issue(&L, &slots[i])) != 0)
            goto out;
    uint64_t ids[64];
    const uint64_t tmo_ns = (uint64_t)timeout_us * 1000;
    while (L.finished < total) {
        int n = srpc_client_wait_any(cl, ids, 64, 1000);
        if (n < 0) {
            rc = n;
            goto out;
        }
        uint64_t now = now_ns();
        for (int j = 0; j < n; j++) {
            for (uint32_t i = 0; i < concurrency; i++) {
                slot_t *s = &slots[i];
                if (!s->live || s->req_id != ids[j])
                    continue;
                int code;
                const uint8_t *d;
                uint32_t l;
                srpc_client_result(cl, s->req_id, &code, &d, &l);
                srpc_client_release(cl, s->req_id);
                s->live = 0;
                record(&L, now - s->t0, code == 0);
                if (issued < total) {
                    issued++;
                    if ((rc = issue(&L, s)) != 0)
                        goto out;
                }
                break;
            }
        }
        for (uint32_t i = 0; i < concurrency; i++) { /* per-call timeouts */
            slot_t *s = &slots[i];
            if (!s->live || s->t0 + tmo_ns > now) /* t0 may be after now: just reissued */
                continue;
            srpc_client_release(cl, s->req_id);
            s->live = 0;
            record(&L, 0, 0);
            if (issued < total) {
                issued++;
                if ((rc = issue(&L, s)) != 0)
                    goto out;
            }
        }
    }
out:
    *elapsed_ns = L.finished > warmup ? now_ns() - L.t_start : 0;
    for (uint32_t i = 0; i < concurrency; i++)
        if (slots[i].live)
            srpc_client_release(cl, slots[i].req_id);
    free(slots);
    return rc;
}
