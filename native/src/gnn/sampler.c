/* sampler.c: GNN neighbour sampling on the CPU (see splitrpc_gnn.h): Floyd's algorithm over hashed draws per (salt, node, hop), per-seed sample trees, and their sizes for the empirical PSGS. */
#include "splitrpc_gnn.h"

#include "core/mix64.h"

#include <errno.h>
#include <stddef.h>

uint64_t srpc_gnn_draw(uint64_t salt, int64_t node, uint32_t hop, uint32_t j)
{
    uint64_t h = srpc_mix64(salt ^ 0x9e3779b97f4a7c15ull);
    h = srpc_mix64(h ^ (uint64_t)node);
    return srpc_mix64(h ^ ((uint64_t)hop << 32 | j));
}

/* Row v's start and degree, checked against the graph: 0, or -EINVAL. */
static int row(const srpc_csr_t *g, int64_t v, int64_t *start, uint32_t *deg)
{
    if (v < 0 || v >= g->num_nodes)
        return -EINVAL;
    const int64_t a = g->indptr[v], b = g->indptr[v + 1], end = g->indptr[g->num_nodes];
    if (a < 0 || b < a || b > end || b - a > (int64_t)UINT32_MAX)
        return -EINVAL;
    *start = a;
    *deg = (uint32_t)(b - a);
    return 0;
}

int srpc_gnn_sample_node(const srpc_csr_t *g, int64_t v, uint32_t hop, uint32_t fanout, uint64_t salt,
                         int32_t *out)
{
    int64_t start;
    uint32_t d;
    if (!g || !out || hop == 0 || fanout == 0 || fanout > SRPC_GNN_MAX_FANOUT || row(g, v, &start, &d) != 0)
        return -EINVAL;
    const int32_t *nb = g->indices + start;
    if (d <= fanout) {
        for (uint32_t i = 0; i < d; i++) {
            if (nb[i] < 0 || nb[i] >= g->num_nodes)
                return -EINVAL;
            out[i] = nb[i];
        }
        return (int)d;
    }
    /* Floyd: the positions taken so far are out[0 .. i) (as positions, mapped to ids after). */
    for (uint32_t i = 0; i < fanout; i++) {
        const uint32_t j = d - fanout + i;
        uint32_t t = (uint32_t)((srpc_gnn_draw(salt, v, hop, j) >> 2) % ((uint64_t)j + 1));
        for (uint32_t k = 0; k < i; k++)
            if ((uint32_t)out[k] == t) {
                t = j;
                break;
            }
        out[i] = (int32_t)t;
    }
    for (uint32_t i = 0; i < fanout; i++) {
        const int32_t id = nb[(uint32_t)out[i]];
        if (id < 0 || id >= g->num_nodes)
            return -EINVAL;
        out[i] = id;
    }
    return (int)fanout;
}

int srpc_gnn_tree_cap(uint32_t n_seeds, const uint32_t *fanouts, uint32_t hops, uint64_t *cap)
{
    if (!cap || !fanouts || hops == 0 || hops > SRPC_GNN_MAX_HOPS)
        return -EINVAL;
    uint64_t level = n_seeds, total = n_seeds;
    for (uint32_t k = 0; k < hops; k++) {
        if (fanouts[k] == 0 || fanouts[k] > SRPC_GNN_MAX_FANOUT)
            return -EINVAL;
        if (level > UINT64_MAX / fanouts[k])
            return -EOVERFLOW;
        level *= fanouts[k];
        if (total > UINT64_MAX - level)
            return -EOVERFLOW;
        total += level;
    }
    *cap = total;
    return 0;
}

static int check_args(const srpc_csr_t *g, const int64_t *seeds, uint32_t n_seeds, const uint32_t *fanouts,
                      uint32_t hops)
{
    uint64_t cap;
    if (!g || !g->indptr || (!g->indices && g->num_nodes > 0 && g->indptr[g->num_nodes] > 0) || g->num_nodes < 0 ||
        g->num_nodes > INT32_MAX || (!seeds && n_seeds))
        return -EINVAL;
    int rc = srpc_gnn_tree_cap(n_seeds, fanouts, hops, &cap);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < n_seeds; i++)
        if (seeds[i] < 0 || seeds[i] >= g->num_nodes)
            return -EINVAL;
    return 0;
}

int srpc_gnn_sample_trees(const srpc_csr_t *g, const int64_t *seeds, uint32_t n_seeds, const uint32_t *fanouts,
                          uint32_t hops, uint64_t salt, int32_t *nodes, int32_t *parents, uint64_t cap,
                          uint64_t *level_end)
{
    int rc = check_args(g, seeds, n_seeds, fanouts, hops);
    if (rc)
        return rc;
    if (!level_end || (!nodes && cap) || (!parents && cap))
        return -EINVAL;
    if (cap < n_seeds)
        return -ENOBUFS;
    for (uint32_t i = 0; i < n_seeds; i++) {
        nodes[i] = (int32_t)seeds[i];
        parents[i] = -1;
    }
    uint64_t at = n_seeds, begin = 0;
    level_end[0] = n_seeds;
    for (uint32_t k = 1; k <= hops; k++) {
        const uint32_t l = fanouts[k - 1];
        for (uint64_t p = begin; p < level_end[k - 1]; p++) {
            if (cap - at < l) { /* room for the most this instance may take */
                int64_t s;
                uint32_t d;
                if (row(g, nodes[p], &s, &d) != 0)
                    return -EINVAL;
                if (cap - at < (d < l ? d : l))
                    return -ENOBUFS;
                if (d == 0)
                    continue;
                int32_t tmp[SRPC_GNN_MAX_FANOUT];
                int n = srpc_gnn_sample_node(g, nodes[p], k, l, salt, tmp);
                if (n < 0)
                    return n;
                for (int i = 0; i < n; i++) {
                    nodes[at] = tmp[i];
                    parents[at++] = (int32_t)p;
                }
                continue;
            }
            int n = srpc_gnn_sample_node(g, nodes[p], k, l, salt, nodes + at);
            if (n < 0)
                return n;
            for (int i = 0; i < n; i++)
                parents[at++] = (int32_t)p;
        }
        begin = level_end[k - 1];
        level_end[k] = at;
    }
    return 0;
}

/* Instances in the subtree of v entered at hop `hop` (v included), over hops hop+1 .. hops;
 * the last hop is only counted (min(d, l)), not drawn. -EINVAL for a malformed graph. */
static int64_t subtree(const srpc_csr_t *g, int64_t v, uint32_t hop, const uint32_t *fanouts, uint32_t hops,
                       uint64_t salt)
{
    if (hop == hops)
        return 1;
    const uint32_t l = fanouts[hop];
    int64_t s;
    uint32_t d;
    if (row(g, v, &s, &d) != 0)
        return -EINVAL;
    if (hop + 1 == hops)
        return 1 + (d < l ? d : l);
    int32_t nb[SRPC_GNN_MAX_FANOUT];
    int n = srpc_gnn_sample_node(g, v, hop + 1, l, salt, nb);
    if (n < 0)
        return n;
    int64_t total = 1;
    for (int i = 0; i < n; i++) {
        int64_t t = subtree(g, nb[i], hop + 1, fanouts, hops, salt);
        if (t < 0)
            return t;
        total += t;
    }
    return total;
}

int srpc_gnn_tree_sizes(const srpc_csr_t *g, const int64_t *seeds, uint32_t n_seeds, const uint32_t *fanouts,
                        uint32_t hops, uint64_t salt, uint32_t samples, double *mean, double *var)
{
    int rc = check_args(g, seeds, n_seeds, fanouts, hops);
    if (rc)
        return rc;
    if (samples == 0 || (n_seeds && (!mean || !var)))
        return -EINVAL;
    for (uint32_t i = 0; i < n_seeds; i++) {
        double m = 0, m2 = 0; /* Welford */
        for (uint32_t r = 0; r < samples; r++) {
            int64_t t = subtree(g, seeds[i], 0, fanouts, hops, salt + r);
            if (t < 0)
                return (int)t;
            const double x = (double)t, delta = x - m;
            m += delta / (r + 1);
            m2 += delta * (x - m);
        }
        mean[i] = m;
        var[i] = samples > 1 ? m2 / (samples - 1) : 0.0;
    }
    return 0;
}
