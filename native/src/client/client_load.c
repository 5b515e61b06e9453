/* client_load.c: the native load generator: closed- and open-loop runs whose due times, send
 * and receive timestamps and reply checks are all taken here, so Python neither limits nor
 * distorts the offered load. Runs on the calling thread. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "core/clock.h"
#include "splitrpc_client.h"
#include "core/tunables.h"

/* Outstanding calls: req_id -> record index, open addressing with backward-shift delete. */
typedef struct pend {
    uint64_t req_id;
    uint32_t idx;
    uint32_t used;
} pend_t;

typedef struct run {
    srpc_client_t *cl;
    srpc_client_cq_t *cq; /* this run's calls, and only them */
    const srpc_load_params_t *p;
    srpc_load_rec_t *rec;
    uint32_t *order;
    srpc_load_progress_t *prog;
    uint64_t *rid;       /* req_id of each record */
    pend_t *tab;
    uint32_t mask;
    uint64_t t0;
    uint32_t cap;        /* calls allowed outstanding */
    uint32_t outstanding, finished, next, oldest;
} run_t;

static uint64_t rel_now(const run_t *R) { return srpc_now_ns() - R->t0; }

static uint32_t slot_of(const run_t *R, uint64_t id)
{
    return (uint32_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & R->mask;
}

static void tab_put(run_t *R, uint64_t id, uint32_t idx)
{
    uint32_t i = slot_of(R, id);
    while (R->tab[i].used)
        i = (i + 1) & R->mask;
    R->tab[i] = (pend_t){id, idx, 1};
}

/* Removes id and returns its record index, or UINT32_MAX when it is not outstanding. */
static uint32_t tab_take(run_t *R, uint64_t id)
{
    uint32_t i = slot_of(R, id);
    while (R->tab[i].used && R->tab[i].req_id != id)
        i = (i + 1) & R->mask;
    if (!R->tab[i].used)
        return UINT32_MAX;
    uint32_t idx = R->tab[i].idx;
    for (uint32_t j = (i + 1) & R->mask; R->tab[j].used; j = (j + 1) & R->mask) {
        uint32_t home = slot_of(R, R->tab[j].req_id);
        /* Entry j may move into the hole at i unless its home lies cyclically in (i, j]. */
        if (((j - home) & R->mask) >= ((j - i) & R->mask)) {
            R->tab[i] = R->tab[j];
            i = j;
        }
    }
    R->tab[i].used = 0;
    return idx;
}

static void finish(run_t *R, uint32_t idx, int code, uint32_t reply_len, uint64_t now)
{
    srpc_load_rec_t *r = &R->rec[idx];
    r->code = code;
    r->reply_len = reply_len;
    r->done_ns = now;
    R->order[R->finished++] = idx;
    __atomic_store_n(&R->prog->finished, R->finished, __ATOMIC_RELEASE);
}

/* The request (of the set) that call i sends. */
static uint32_t req_of(const srpc_load_params_t *p, uint32_t i)
{
    return p->req_index ? p->req_index[i] : i % p->n_reqs;
}

/* Sends the next n calls (all due by now) with one send: each call its own request and function
 * with a request set, else n times the one request. */
static void send_next(run_t *R, uint32_t n, uint64_t now)
{
    const srpc_load_params_t *p = R->p;
    uint64_t ids[SRPC_CLIENT_SEND_MAX];
    int rcs[SRPC_CLIENT_SEND_MAX];
    const uint32_t first = R->next;
    R->next += n;
    __atomic_store_n(&R->prog->sent, R->next, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < n; i++) {
        srpc_load_rec_t *r = &R->rec[first + i];
        r->sched_ns = p->concurrency ? now : p->sched_ns[first + i];
        r->sent_ns = now;
    }
    int sent;
    if (p->n_reqs) {
        uint16_t fids[SRPC_CLIENT_SEND_MAX];
        const void *datas[SRPC_CLIENT_SEND_MAX];
        uint32_t lens[SRPC_CLIENT_SEND_MAX];
        for (uint32_t i = 0; i < n; i++) {
            const uint32_t k = req_of(p, first + i);
            fids[i] = p->req_func ? p->req_func[k] : p->func_id;
            datas[i] = p->reqs ? p->reqs + p->req_off[k] : NULL;
            lens[i] = (uint32_t)(p->req_off[k + 1] - p->req_off[k]);
        }
        sent = srpc_client_send_each_cq(R->cl, R->cq, fids, datas, lens, n, ids, rcs);
    } else {
        sent = srpc_client_send_many_cq(R->cl, R->cq, p->func_id, p->req, p->req_len, n, ids, rcs);
    }
    for (uint32_t i = 0; sent < 0 && i < n; i++)
        rcs[i] = sent;
    for (uint32_t i = 0; i < n; i++) {
        if (rcs[i] != 0) {
            finish(R, first + i, SRPC_E_SEND, 0, rel_now(R));
            continue;
        }
        R->rid[first + i] = ids[i];
        tab_put(R, ids[i], first + i);
        R->outstanding++;
    }
}

/* How many calls are due now: closed loop, as many as may be outstanding; open loop, those
 * whose due time has come (while fewer than the cap are outstanding). At most one send's worth. */
static uint32_t due_now(const run_t *R, uint64_t now)
{
    const srpc_load_params_t *p = R->p;
    uint32_t n = 0;
    while (R->next + n < p->n && R->outstanding + n < R->cap && n < SRPC_CLIENT_SEND_MAX &&
           (p->concurrency || p->sched_ns[R->next + n] <= now))
        n++;
    return n;
}

static void on_reply(run_t *R, uint64_t id, uint64_t now)
{
    uint32_t idx = tab_take(R, id);
    if (idx == UINT32_MAX)
        return; /* defensive: the run's queue holds only its own calls */
    int code = SRPC_E_PENDING;
    const uint8_t *d = NULL;
    uint32_t len = 0;
    srpc_client_result(R->cl, id, &code, &d, &len);
    const srpc_load_params_t *p = R->p;
    const uint8_t *want = p->expect;
    uint64_t want_len = p->expect_len;
    if (p->n_reqs && p->expects) {
        const uint32_t k = req_of(p, idx);
        want = p->expects + p->expect_off[k];
        want_len = p->expect_off[k + 1] - p->expect_off[k];
    }
    if (code == 0 && want && (len != want_len || (len && memcmp(d, want, len) != 0)))
        code = SRPC_E_INVALID;
    srpc_client_release(R->cl, id);
    R->outstanding--;
    finish(R, idx, code, len, now);
}

/* Times out the oldest calls; sends happen in index order, so they are the lowest. */
static void expire(run_t *R, uint64_t now)
{
    const uint64_t tmo = (uint64_t)R->p->timeout_us * 1000;
    for (; R->oldest < R->next; R->oldest++) {
        srpc_load_rec_t *r = &R->rec[R->oldest];
        if (r->code != SRPC_E_PENDING)
            continue;
        if (r->sent_ns + tmo > now)
            break;
        tab_take(R, R->rid[R->oldest]);
        srpc_client_release(R->cl, R->rid[R->oldest]);
        R->outstanding--;
        finish(R, R->oldest, SRPC_E_TIMEOUT, 0, now);
    }
}

/* How long the receive step may sleep: until shortly before the next due send or the oldest
 * call's timeout, at most 1 ms so that a stop request is seen. 0 = one non-blocking pass. */
static int64_t wait_budget_us(const run_t *R, uint64_t now)
{
    const srpc_load_params_t *p = R->p;
    if (p->spin)
        return 0;
    uint64_t until = now + 1000000;
    if (!p->concurrency && R->next < p->n && R->outstanding < R->cap && p->sched_ns[R->next] < until)
        until = p->sched_ns[R->next];
    if (R->oldest < R->next) {
        uint64_t t = R->rec[R->oldest].sent_ns + (uint64_t)p->timeout_us * 1000;
        if (t < until)
            until = t;
    }
    if (until <= now + SRPC_LOAD_WAKE_EARLY_NS)
        return 0;
    return (int64_t)((until - now - SRPC_LOAD_WAKE_EARLY_NS) / 1000);
}

/* Offsets of n pieces back to back in buf: off[0] == 0, non-decreasing, each piece < 2^32 B,
 * the end addressable, and buf given unless every piece is empty. */
static int check_offsets(const uint8_t *buf, const uint64_t *off, uint32_t n)
{
    if (!off || off[0] != 0)
        return -EINVAL;
    for (uint32_t k = 0; k < n; k++)
        if (off[k + 1] < off[k] || off[k + 1] - off[k] > UINT32_MAX)
            return -EINVAL;
    if ((uint64_t)(size_t)off[n] != off[n] || (!buf && off[n]))
        return -EINVAL;
    return 0;
}

/* A request set, or none: see srpc_load_params_t. */
static int check_set(const srpc_load_params_t *p)
{
    if (p->n_reqs == 0)
        return p->reqs || p->req_off || p->req_index || p->expects || p->expect_off || p->req_func ? -EINVAL : 0;
    if (p->req || p->req_len || p->expect || p->expect_len || !p->expects != !p->expect_off)
        return -EINVAL;
    if (check_offsets(p->reqs, p->req_off, p->n_reqs) != 0 ||
        (p->expects && check_offsets(p->expects, p->expect_off, p->n_reqs) != 0))
        return -EINVAL;
    for (uint32_t i = 0; p->req_index && i < p->n; i++)
        if (p->req_index[i] >= p->n_reqs)
            return -EINVAL;
    return 0;
}

static int check_params(srpc_client_t *cl, const srpc_load_params_t *p, const srpc_load_rec_t *rec,
                        const uint32_t *order, const uint64_t *start_ns)
{
    if (!cl || !p || !rec || !order || !start_ns || p->n == 0 || p->timeout_us <= 0 ||
        (!p->req && p->req_len) || check_set(p) != 0)
        return -EINVAL;
    if (p->concurrency == 0) {
        if (!p->sched_ns || p->max_outstanding == 0)
            return -EINVAL;
        for (uint32_t i = 1; i < p->n; i++)
            if (p->sched_ns[i] < p->sched_ns[i - 1])
                return -EINVAL;
    }
    return 0;
}

int srpc_load_run(srpc_client_t *cl, const srpc_load_params_t *p, srpc_load_rec_t *rec,
                  uint32_t *order, srpc_load_progress_t *prog, uint64_t *start_ns)
{
    int rc = check_params(cl, p, rec, order, start_ns);
    if (rc)
        return rc;
    srpc_load_progress_t local = {0, 0, 0};
    run_t R = {.cl = cl, .p = p, .rec = rec, .order = order, .prog = prog ? prog : &local};
    R.cap = p->concurrency ? p->concurrency : p->max_outstanding;
    if (R.cap > p->n)
        R.cap = p->n;
    uint32_t size = 4;
    while (size < 2 * R.cap)
        size <<= 1;
    R.mask = size - 1;
    R.tab = calloc(size, sizeof(*R.tab));
    R.rid = calloc(p->n, sizeof(*R.rid));
    if (!R.tab || !R.rid || srpc_client_cq_create(cl, &R.cq) != 0) {
        free(R.tab);
        free(R.rid);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < p->n; i++)
        rec[i] = (srpc_load_rec_t){0, 0, 0, SRPC_E_PENDING, 0};
    __atomic_store_n(&R.prog->finished, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&R.prog->sent, 0, __ATOMIC_RELAXED);
    /* Sleeps end on time: the default 50 us timer slack would delay due sends. */
    int old_slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0);
    R.t0 = srpc_now_ns();
    *start_ns = R.t0;
    uint64_t ids[64];
    while (R.finished < p->n && !__atomic_load_n(&R.prog->stop, __ATOMIC_ACQUIRE)) {
        uint64_t now = rel_now(&R);
        for (uint32_t n; (n = due_now(&R, now)) > 0; now = rel_now(&R))
            send_next(&R, n, now);
        int k = srpc_client_wait_cq(cl, R.cq, ids, 64, wait_budget_us(&R, now));
        if (k < 0) {
            rc = k;
            break;
        }
        now = rel_now(&R);
        for (int j = 0; j < k; j++)
            on_reply(&R, ids[j], now);
        expire(&R, now);
    }
    for (uint32_t i = 0; i <= R.mask; i++)
        if (R.tab[i].used)
            srpc_client_release(cl, R.tab[i].req_id);
    srpc_client_cq_destroy(cl, R.cq);
    if (old_slack > 0)
        prctl(PR_SET_TIMERSLACK, (unsigned long)old_slack, 0, 0, 0);
    free(R.tab);
    free(R.rid);
    return rc;
}

int srpc_client_closed_loop(srpc_client_t *cl, uint16_t func_id, const void *data, uint32_t len,
                            uint32_t concurrency, uint32_t warmup, uint32_t n_calls,
                            int64_t timeout_us, uint64_t *lat_ns, uint64_t *errors,
                            uint64_t *elapsed_ns)
{
    if (!cl || !lat_ns || !errors || !elapsed_ns || concurrency == 0 || n_calls == 0 || timeout_us <= 0 ||
        warmup > UINT32_MAX - n_calls)
        return -EINVAL;
    const uint32_t total = warmup + n_calls;
    srpc_load_rec_t *rec = malloc((size_t)total * sizeof(*rec));
    uint32_t *order = malloc((size_t)total * sizeof(*order));
    if (!rec || !order) {
        free(rec);
        free(order);
        return -ENOMEM;
    }
    srpc_load_params_t p = {.func_id = func_id, .req = data, .req_len = len, .concurrency = concurrency,
                            .n = total, .timeout_us = timeout_us};
    uint64_t start;
    int rc = srpc_load_run(cl, &p, rec, order, NULL, &start);
    *errors = 0;
    *elapsed_ns = 0;
    if (rc == 0) {
        /* The recorded phase is the calls that finished after the first `warmup` did. */
        uint64_t t_start = warmup ? rec[order[warmup - 1]].done_ns : 0;
        for (uint32_t i = 0; i < n_calls; i++) {
            const srpc_load_rec_t *r = &rec[order[warmup + i]];
            lat_ns[i] = r->code == 0 ? r->done_ns - r->sched_ns : 0;
            *errors += r->code != 0;
        }
        *elapsed_ns = rec[order[total - 1]].done_ns - t_start;
    }
    free(rec);
    free(order);
    return rc;
}
