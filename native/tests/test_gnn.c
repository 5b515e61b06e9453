/* test_gnn.c: the CPU neighbour sampler: counts and distinctness, full neighbourhoods in CSR order, determinism per (salt, node, hop), uniformity, tree layout, sizes against exact expectations, hostile graphs and arguments, and several threads sampling one graph. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "splitrpc.h"

#include "check.h"

/* A random graph: node v has v % 37 out-neighbours (0 for multiples of 37), distinct, sorted. */
#define N 400
static int64_t indptr[N + 1];
static int32_t indices[N * 40];

static void build_graph(void)
{
    uint64_t s = 12345;
    int64_t at = 0;
    for (int v = 0; v < N; v++) {
        indptr[v] = at;
        const int d = v % 37;
        int chosen = 0;
        for (int u = 0; u < N && chosen < d; u++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            if ((int)((s >> 33) % (uint64_t)(N - u)) < d - chosen) { /* selection sampling: sorted, distinct */
                indices[at++] = u;
                chosen++;
            }
        }
    }
    indptr[N] = at;
}

static const srpc_csr_t G = {indptr, indices, N};

static int adjacent(int64_t v, int32_t u)
{
    for (int64_t i = indptr[v]; i < indptr[v + 1]; i++)
        if (indices[i] == u)
            return 1;
    return 0;
}

static void test_sample_node(void)
{
    int32_t out[64], again[64];
    int bad = 0;
    for (int v = 0; v < N; v++) {
        const int d = (int)(indptr[v + 1] - indptr[v]);
        for (uint32_t l = 1; l <= 40; l += 7) {
            int n = srpc_gnn_sample_node(&G, v, 1, l, 7, out);
            int want = d < (int)l ? d : (int)l;
            if (n != want) {
                bad++;
                continue;
            }
            for (int i = 0; i < n; i++) {
                bad += !adjacent(v, out[i]);
                for (int k = 0; k < i; k++)
                    bad += out[k] == out[i];
            }
            if (d <= (int)l) /* all of them, in CSR order */
                bad += memcmp(out, indices + indptr[v], sizeof(int32_t) * (size_t)d) != 0;
            bad += srpc_gnn_sample_node(&G, v, 1, l, 7, again) != n || memcmp(out, again, sizeof(int32_t) * n) != 0;
        }
    }
    CHECK(bad == 0, "%d nodes sampled wrong (count, adjacency, distinctness, order or determinism)", bad);
    /* another salt or hop gives another sample (a node of degree 36 taking 5) */
    int n1 = srpc_gnn_sample_node(&G, 36, 1, 5, 1, out);
    int n2 = srpc_gnn_sample_node(&G, 36, 1, 5, 2, again);
    CHECK(n1 == 5 && n2 == 5 && memcmp(out, again, sizeof(out[0]) * 5) != 0, "salts 1 and 2 draw the same");
    n2 = srpc_gnn_sample_node(&G, 36, 2, 5, 1, again);
    CHECK(n2 == 5 && memcmp(out, again, sizeof(out[0]) * 5) != 0, "hops 1 and 2 draw the same");
    CHECK(srpc_gnn_sample_node(&G, 0, 1, 5, 1, out) == 0, "a node without out-edges takes none");
    CHECK(srpc_gnn_sample_node(&G, -1, 1, 5, 1, out) == -EINVAL, "node -1");
    CHECK(srpc_gnn_sample_node(&G, N, 1, 5, 1, out) == -EINVAL, "node N");
    CHECK(srpc_gnn_sample_node(&G, 3, 0, 5, 1, out) == -EINVAL, "hop 0");
    CHECK(srpc_gnn_sample_node(&G, 3, 1, 0, 1, out) == -EINVAL, "fan-out 0");
    CHECK(srpc_gnn_sample_node(&G, 3, 1, SRPC_GNN_MAX_FANOUT + 1, 1, out) == -EINVAL, "fan-out too large");
}

/* Over many salts each neighbour of a degree-36 node is taken with frequency 5/36. */
static void test_uniform(void)
{
    enum { R = 20000, L = 5 };
    const int64_t v = 36;
    const int d = (int)(indptr[v + 1] - indptr[v]);
    int count[64] = {0};
    int32_t out[L];
    for (uint64_t salt = 0; salt < R; salt++) {
        srpc_gnn_sample_node(&G, v, 1, L, salt, out);
        for (int i = 0; i < L; i++)
            for (int k = 0; k < d; k++)
                count[k] += indices[indptr[v] + k] == out[i];
    }
    const double p = (double)L / d, mu = R * p, sd = sqrt(R * p * (1 - p));
    double chi2 = 0;
    int far = 0;
    for (int k = 0; k < d; k++) {
        chi2 += (count[k] - mu) * (count[k] - mu) / mu;
        far += fabs(count[k] - mu) > 5 * sd;
    }
    /* 35 degrees of freedom: chi2 above 80 has probability < 1e-4 */
    CHECK(far == 0 && chi2 < 80, "frequencies not uniform: chi2 %.1f, %d beyond 5 sd", chi2, far);
}

static void test_trees(void)
{
    const int64_t seeds[4] = {36, 75, 36, 0}; /* a repeat, one of degree 1, one without out-edges */
    const uint32_t fan[2] = {3, 2};
    uint64_t cap, ends[3];
    CHECK(srpc_gnn_tree_cap(4, fan, 2, &cap) == 0 && cap == 4 * (1 + 3 + 6), "cap %llu", (unsigned long long)cap);
    int32_t nodes[40], parents[40];
    CHECK(srpc_gnn_sample_trees(&G, seeds, 4, fan, 2, 9, nodes, parents, cap, ends) == 0, "sample trees");
    CHECK(ends[0] == 4 && ends[1] == 4 + 3 + 1 + 3 && ends[2] <= 11 + 14, "levels end at %llu %llu %llu",
          (unsigned long long)ends[0], (unsigned long long)ends[1], (unsigned long long)ends[2]);
    int bad = 0;
    for (int i = 0; i < 4; i++)
        bad += nodes[i] != seeds[i] || parents[i] != -1;
    for (uint64_t i = ends[0]; i < ends[2]; i++) {
        const int lvl = i < ends[1] ? 1 : 2;
        const int32_t p = parents[i];
        bad += p < (lvl == 1 ? 0 : (int32_t)ends[0]) || p >= (int32_t)ends[lvl - 1] || !adjacent(nodes[p], nodes[i]);
    }
    CHECK(bad == 0, "%d instances with a wrong seed, parent or edge", bad);
    /* both instances of seed 36 sampled the same neighbours (a function of salt, node, hop) */
    int32_t a[3], b[3];
    int na = 0, nb = 0;
    for (uint64_t i = ends[0]; i < ends[1]; i++) {
        if (parents[i] == 0)
            a[na++] = nodes[i];
        if (parents[i] == 2)
            b[nb++] = nodes[i];
    }
    CHECK(na == 3 && nb == 3 && memcmp(a, b, sizeof(a)) == 0, "repeated seed sampled differently");
    /* each level-1 instance's children are exactly srpc_gnn_sample_node at hop 2 */
    for (uint64_t p = ends[0]; p < ends[1]; p++) {
        int32_t want[2];
        int n = srpc_gnn_sample_node(&G, nodes[p], 2, 2, 9, want), k = 0;
        for (uint64_t i = ends[1]; i < ends[2]; i++)
            if (parents[i] == (int32_t)p)
                bad += k >= n || nodes[i] != want[k++];
        bad += k != n;
    }
    CHECK(bad == 0, "children differ from the node's own sample");
    /* errors */
    const int64_t bad_seeds[2] = {5, N};
    CHECK(srpc_gnn_sample_trees(&G, bad_seeds, 2, fan, 2, 9, nodes, parents, cap, ends) == -EINVAL, "seed N");
    const int64_t neg[1] = {-1};
    CHECK(srpc_gnn_sample_trees(&G, neg, 1, fan, 2, 9, nodes, parents, cap, ends) == -EINVAL, "seed -1");
    CHECK(srpc_gnn_sample_trees(&G, seeds, 4, fan, 2, 9, nodes, parents, 10, ends) == -ENOBUFS, "small cap");
    CHECK(srpc_gnn_sample_trees(&G, seeds, 4, fan, 0, 9, nodes, parents, cap, ends) == -EINVAL, "0 hops");
    const uint32_t zero[2] = {3, 0};
    CHECK(srpc_gnn_sample_trees(&G, seeds, 4, zero, 2, 9, nodes, parents, cap, ends) == -EINVAL, "fan-out 0");
    const uint32_t huge[8] = {4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096};
    CHECK(srpc_gnn_tree_cap(UINT32_MAX, huge, 8, &cap) == -EOVERFLOW, "cap overflow");
}

/* A hostile graph: a row pointing past the indices, a neighbour id out of range. */
static void test_hostile_graph(void)
{
    int64_t ip[4] = {0, 2, 1, 3}; /* row 1 goes backwards */
    int32_t ix[3] = {1, 2, 7};     /* node 7 does not exist */
    const srpc_csr_t g = {ip, ix, 3};
    int32_t out[4], nodes[64], parents[64];
    uint64_t ends[3];
    CHECK(srpc_gnn_sample_node(&g, 1, 1, 4, 0, out) == -EINVAL, "backwards row");
    CHECK(srpc_gnn_sample_node(&g, 2, 1, 4, 0, out) == -EINVAL, "neighbour out of range");
    CHECK(srpc_gnn_sample_node(&g, 0, 1, 4, 0, out) == 2, "a good row of a bad graph still samples");
    const int64_t s[1] = {0};
    const uint32_t fan[2] = {4, 4};
    /* node 0 -> 1 (backwards row) */
    CHECK(srpc_gnn_sample_trees(&g, s, 1, fan, 2, 0, nodes, parents, 64, ends) == -EINVAL, "tree into a bad row");
    double m, v;
    CHECK(srpc_gnn_tree_sizes(&g, s, 1, fan, 2, 0, 3, &m, &v) == -EINVAL, "sizes into a bad row");
    int64_t ip2[3] = {0, 1, 2};
    int32_t ix2[2] = {1, -5}; /* a negative neighbour id */
    const srpc_csr_t g2 = {ip2, ix2, 2};
    CHECK(srpc_gnn_sample_node(&g2, 1, 1, 2, 0, out) == -EINVAL, "negative neighbour id");
    int64_t ip3[3] = {0, 1, 9}; /* indptr[n] is the end: a row cannot pass it, but the last row may claim 8 */
    int32_t ix3[9] = {1, 0, 0, 0, 0, 0, 0, 0, 0};
    const srpc_csr_t g3 = {ip3, ix3, 2};
    CHECK(srpc_gnn_sample_node(&g3, 1, 1, 2, 0, out) == 2, "repeated neighbours are the graph's business");
}

/* Tree sizes against their exact expectation on a star with a tail: 0 -> {1..6}, i -> {7} for
 * i = 1..6, 7 -> {8, 9, 10}; fan-outs (2, 2): size(0) = 1 + 2 + 2 * 1 = 5 always; size(i) =
 * 1 + 1 + 2 = 4; and with fan-outs (3, 2, 1): size(0) = 1 + 3 + 3 + 3 * 1 ... exact values. */
static void test_sizes(void)
{
    int64_t ip[12] = {0, 6, 7, 8, 9, 10, 11, 12, 15, 15, 15, 15};
    int32_t ix[15] = {1, 2, 3, 4, 5, 6, 7, 7, 7, 7, 7, 7, 8, 9, 10};
    const srpc_csr_t g = {ip, ix, 11};
    const int64_t s[3] = {0, 3, 8};
    const uint32_t f2[2] = {2, 2}, f3[3] = {3, 2, 1};
    double m[3], v[3];
    CHECK(srpc_gnn_tree_sizes(&g, s, 3, f2, 2, 1, 50, m, v) == 0, "sizes");
    CHECK(m[0] == 5 && v[0] == 0 && m[1] == 4 && v[1] == 0 && m[2] == 1, "sizes (2,2): %g %g %g", m[0], m[1], m[2]);
    /* (3, 2, 1): seed 0 takes 3 of 1..6, each takes 7, each 7 takes 1 of 8..10: 1 + 3 + 3 + 3 = 10 */
    CHECK(srpc_gnn_tree_sizes(&g, s, 3, f3, 3, 1, 20, m, v) == 0 && m[0] == 10 && m[1] == 1 + 1 + 2 + 0,
          "sizes (3,2,1): %g %g", m[0], m[1]);
    /* a random graph: the mean over many salts is near the exact mean computed by enumeration of
     * one level (node 36, fan-outs (5, 3)): E = 1 + sum over neighbours u of 5/36 * (1 + min(d_u, 3)) */
    const int64_t s36[1] = {36};
    const uint32_t f53[2] = {5, 3};
    double exact = 1;
    for (int64_t i = indptr[36]; i < indptr[37]; i++) {
        const int64_t u = indices[i], du = indptr[u + 1] - indptr[u];
        exact += 5.0 / 36 * (1 + (du < 3 ? du : 3));
    }
    CHECK(srpc_gnn_tree_sizes(&G, s36, 1, f53, 2, 100, 4000, m, v) == 0, "sizes of 36");
    const double se = sqrt(v[0] / 4000);
    CHECK(fabs(m[0] - exact) < 5 * se + 1e-9, "mean %.4f, exact %.4f, se %.4f", m[0], exact, se);
    CHECK(srpc_gnn_tree_sizes(&G, s36, 1, f53, 2, 100, 0, m, v) == -EINVAL, "0 samples");
}

/* Several threads sample the one graph (read-only sharing): same answers as alone. */
static int32_t alone[8][4 * 276];
static void *sampler_thread(void *arg)
{
    const int t = (int)(intptr_t)arg;
    const int64_t seeds[4] = {36 + t, 74, 111, 5};
    const uint32_t fan[2] = {25, 10};
    int32_t nodes[4 * 276], parents[4 * 276];
    uint64_t ends[3];
    int bad = 0;
    for (int r = 0; r < 200; r++) {
        if (srpc_gnn_sample_trees(&G, seeds, 4, fan, 2, 3, nodes, parents, 4 * 276, ends) != 0 ||
            memcmp(nodes, alone[t], sizeof(int32_t) * ends[2]) != 0)
            bad++;
    }
    return (void *)(intptr_t)bad;
}

static void test_threads(void)
{
    pthread_t th[8];
    for (int t = 0; t < 8; t++) {
        const int64_t seeds[4] = {36 + t, 74, 111, 5};
        const uint32_t fan[2] = {25, 10};
        int32_t parents[4 * 276];
        uint64_t ends[3];
        srpc_gnn_sample_trees(&G, seeds, 4, fan, 2, 3, alone[t], parents, 4 * 276, ends);
    }
    for (int t = 0; t < 8; t++)
        pthread_create(&th[t], NULL, sampler_thread, (void *)(intptr_t)t);
    int bad = 0;
    for (int t = 0; t < 8; t++) {
        void *r;
        pthread_join(th[t], &r);
        bad += (int)(intptr_t)r;
    }
    CHECK(bad == 0, "%d samples differed under threads", bad);
}

int main(void)
{
    build_graph();
    test_sample_node();
    test_uniform();
    test_trees();
    test_hostile_graph();
    test_sizes();
    test_threads();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
