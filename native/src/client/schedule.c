/* schedule.c: open-loop arrival schedules (constant, Poisson, hyperexponential; fixed or
 * following a rate trace) as arrays of due times, deterministic for a seed. */
#include <errno.h>
#include <math.h>

#include "splitrpc_client.h"

/* splitmix64: small, fast, and good enough for inter-arrival times. */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1]: never 0, so -log(u) is finite. */
static double uniform01(uint64_t *s)
{
    return ((double)(next_u64(s) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

typedef struct gapgen {
    int kind;
    double mean_s;      /* 1 / rate */
    double p1, l1, l2;  /* hyperexponential: phase 1 with probability p1, rates l1 and l2 */
    uint64_t *rng;
} gapgen_t;

static int gapgen_init(gapgen_t *g, int kind, double rate, double cv, uint64_t *rng)
{
    if (!(rate > 0) || !isfinite(rate))
        return -EINVAL;
    g->kind = kind;
    g->mean_s = 1.0 / rate;
    g->rng = rng;
    switch (kind) {
    case SRPC_ARRIVAL_CONSTANT:
    case SRPC_ARRIVAL_POISSON:
        return 0;
    case SRPC_ARRIVAL_HYPEREXP: {
        if (!(cv > 1.0) || !isfinite(cv))
            return -EINVAL;
        /* Balanced means (p1/l1 == p2/l2): mean 1/rate, squared CV cv^2. */
        double c2 = cv * cv;
        g->p1 = 0.5 * (1.0 + sqrt((c2 - 1.0) / (c2 + 1.0)));
        g->l1 = 2.0 * g->p1 * rate;
        g->l2 = 2.0 * (1.0 - g->p1) * rate;
        return 0;
    }
    default:
        return -EINVAL;
    }
}

static double gap_s(gapgen_t *g)
{
    switch (g->kind) {
    case SRPC_ARRIVAL_CONSTANT:
        return g->mean_s;
    case SRPC_ARRIVAL_POISSON:
        return -log(uniform01(g->rng)) * g->mean_s;
    default: {
        double l = uniform01(g->rng) <= g->p1 ? g->l1 : g->l2;
        return -log(uniform01(g->rng)) / l;
    }
    }
}

int srpc_schedule_fill(int arrival, double rate, double cv, uint64_t seed, uint64_t *at, uint32_t n)
{
    if (!at && n)
        return -EINVAL;
    uint64_t rng = seed;
    gapgen_t g = {0};
    int r = gapgen_init(&g, arrival, rate, cv, &rng);
    if (r)
        return r;
    double t = 0;
    for (uint32_t i = 0; i < n; i++) {
        t += gap_s(&g);
        at[i] = (uint64_t)llround(t * 1e9);
    }
    return 0;
}

int srpc_schedule_trace(int arrival, double cv, const double *t_s, const double *rate, uint32_t npts,
                        double end_s, uint64_t seed, uint64_t *at, uint32_t cap)
{
    if (!t_s || !rate || npts == 0 || (!at && cap) || cap > INT32_MAX || !(t_s[0] >= 0) || !isfinite(end_s) || end_s > 1e7)
        return -EINVAL;
    for (uint32_t i = 0; i < npts; i++)
        if ((i && !(t_s[i] > t_s[i - 1])) || !(rate[i] >= 0) || !isfinite(rate[i]))
            return -EINVAL;
    uint64_t rng = seed;
    uint32_t n = 0;
    for (uint32_t i = 0; i < npts; i++) {
        double lo = t_s[i], hi = i + 1 < npts ? t_s[i + 1] : end_s;
        if (hi > end_s)
            hi = end_s;
        if (rate[i] == 0 || !(hi > lo))
            continue;
        gapgen_t g = {0};
        int r = gapgen_init(&g, arrival, rate[i], cv, &rng);
        if (r)
            return r;
        for (double t = lo + gap_s(&g); t < hi; t += gap_s(&g)) {
            if (n == cap)
                return -ENOBUFS;
            at[n++] = (uint64_t)llround(t * 1e9);
        }
    }
    return (int)n;
}
