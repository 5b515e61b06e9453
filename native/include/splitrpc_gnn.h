/* splitrpc_gnn.h: GNN neighbour sampling on the CPU (splitrpc.services.gnn's CPU lane): per-seed sample trees over a graph in CSR, each node's draw a hash of (salt, node, hop). */
#ifndef SPLITRPC_GNN_H
#define SPLITRPC_GNN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A directed graph in CSR: node v's out-neighbours are indices[indptr[v] .. indptr[v + 1]).
 * The caller owns the arrays; the sampler only reads them, so any number of threads may sample
 * one graph at once. Every index it follows is checked (a malformed graph answers -EINVAL, it is
 * never read out of bounds): indptr has num_nodes + 1 entries, indices indptr[num_nodes]. */
typedef struct srpc_csr {
    const int64_t *indptr;
    const int32_t *indices;
    int64_t num_nodes;
} srpc_csr_t;

#define SRPC_GNN_MAX_HOPS 8
#define SRPC_GNN_MAX_FANOUT 4096

/* Sampling rule (the same in the PyTorch lane, sampling.py, which computes the same draws):
 * at hop k (1-based) with fan-out l, a node v of out-degree d takes all its out-neighbours in
 * CSR order when d <= l, else l distinct ones chosen uniformly by Floyd's algorithm: for
 * i = 0 .. l-1, j = d - l + i, t = draw(salt, v, k, j) mod (j + 1); position t is taken unless
 * already taken, then position j; neighbours in the order taken. draw() is
 * srpc_gnn_draw: a node's sample at a hop is a function of (salt, v, k), so every instance of v
 * at hop k in any tree, batch or lane samples the same neighbours; another salt is another,
 * independent sample. */
uint64_t srpc_gnn_draw(uint64_t salt, int64_t node, uint32_t hop, uint32_t j);

/* The neighbours node v samples at hop `hop` with `fanout`: writes min(d, fanout) node ids to
 * out (room for fanout) and returns their count, or -EINVAL (v outside the graph, fanout 0 or
 * over SRPC_GNN_MAX_FANOUT, hop 0, a malformed row). */
int srpc_gnn_sample_node(const srpc_csr_t *g, int64_t v, uint32_t hop, uint32_t fanout, uint64_t salt,
                         int32_t *out);

/* Room a tree sample of n_seeds seeds may need: n_seeds * (1 + l1 + l1*l2 + ...). 0 with *cap,
 * or -EINVAL (hops 0 or over SRPC_GNN_MAX_HOPS, a fan-out 0 or over SRPC_GNN_MAX_FANOUT) or
 * -EOVERFLOW. */
int srpc_gnn_tree_cap(uint32_t n_seeds, const uint32_t *fanouts, uint32_t hops, uint64_t *cap);

/* Per-seed sample trees, no deduplication: level 0 is the seeds (in order, repeats kept); every
 * instance at level k-1 samples its neighbours at hop k (fanouts[k-1]), each a new instance at
 * level k. nodes[] gets every instance level by level, parents[] the index in nodes[] of each
 * instance's parent (-1 for seeds), level_end[k] (hops + 1 entries) the end of level k. Returns
 * 0; -EINVAL for a seed outside the graph (nothing is written past the seeds checked), a bad
 * fan-out or hop count, or a malformed graph; -ENOBUFS when cap (entries of nodes and parents)
 * is too small (srpc_gnn_tree_cap is always enough). */
int srpc_gnn_sample_trees(const srpc_csr_t *g, const int64_t *seeds, uint32_t n_seeds, const uint32_t *fanouts,
                          uint32_t hops, uint64_t salt, int32_t *nodes, int32_t *parents, uint64_t cap,
                          uint64_t *level_end);

/* The empirical PSGS: for each seed, the size (instances, the seed included) of `samples`
 * trees drawn with salts salt, salt + 1, ..., without building them; mean[i] and var[i] (the
 * sample variance, 0 for one sample) of seed i. Same errors as srpc_gnn_sample_trees (samples 0:
 * -EINVAL). */
int srpc_gnn_tree_sizes(const srpc_csr_t *g, const int64_t *seeds, uint32_t n_seeds, const uint32_t *fanouts,
                        uint32_t hops, uint64_t salt, uint32_t samples, double *mean, double *var);

#ifdef __cplusplus
}
#endif
#endif /* SPLITRPC_GNN_H */
