"""metrics.py: Quiver's workload metrics over a graph: the probabilistic sampled graph size (PSGS) of every seed and every node's feature access probability (FAP) (after Quiver, Tan et al., arXiv 2023).

Sampling model (the one the lanes run): a request's seed samples min(deg, l_1) distinct
out-neighbours uniformly without replacement, each of those samples min(deg, l_2) of its own
out-neighbours, and so on for K hops; nothing is deduplicated across the tree, so a node may
appear in it several times (as several *instances*). A node with no out-edges samples nothing.

With d_v the out-degree of v and A the adjacency matrix (``graph.adjacency()``), hop k's sampling
matrix is S_k = diag(min(d, l_k) / d) · A (rows of zero out-degree stay zero): S_k[i, j] is the
probability that i, at hop k, samples its out-neighbour j. Then

* PSGS = 1 + S_1 (1 + S_2 (... (1 + S_K · 1))), the expected number of node instances in a
  seed's sample tree (Quiver §4.1's Q_{K-hops}; K sparse mat-vec products, innermost first);
* FAP = p_0 + sum_{k=1..K} p_0ᵀ S_1 ... S_k, the expected number of instances of v in the sample
  tree of a seed drawn from p_0 (Quiver §5.1's P_{K-hops}; the paper's δ_k(j, i) is
  (S_1 ... S_k)[j, i]). Summed over v it is the mean tree size, p_0 · PSGS.

Both are O(K · |E|) (scipy.sparse, no matrix powers are formed).
"""
from __future__ import annotations

import numbers

import numpy as np

P0_POLICIES = ("uniform", "degree")


def check_fanouts(fanouts) -> tuple[int, ...]:
    """fanouts as a tuple of ints (l_1, ..., l_K), each >= 1; ValueError otherwise."""
    if isinstance(fanouts, (str, bytes)) or not hasattr(fanouts, "__iter__"):
        raise ValueError(f"fanouts must be a sequence of ints >= 1 (l_1, ..., l_K), got {fanouts!r}")
    out = []
    for k, l in enumerate(fanouts, 1):
        if isinstance(l, bool) or not isinstance(l, numbers.Integral) or l < 1:
            raise ValueError(f"fanouts must be ints >= 1; hop {k} has {l!r}")
        out.append(int(l))
    if not out:
        raise ValueError("fanouts must name at least one hop, got an empty sequence")
    return tuple(out)


def _keep_fraction(degree: np.ndarray, l: int) -> np.ndarray:
    """min(d, l) / d per node: the probability that a node samples a given out-neighbour at a hop
    of fan-out l (0 for nodes without out-edges)."""
    d = degree.astype(np.float64)
    return np.divide(np.minimum(d, float(l)), d, out=np.zeros_like(d), where=d > 0)


def psgs(graph, fanouts) -> np.ndarray:
    """The PSGS of every node as a seed: float64 (num_nodes,), each >= 1."""
    fanouts = check_fanouts(fanouts)
    a = graph.adjacency()
    deg = np.asarray(graph.degree)
    q = np.ones(graph.num_nodes, dtype=np.float64)
    for l in reversed(fanouts):  # innermost (hop K) first: q <- 1 + S_k q
        q = 1.0 + _keep_fraction(deg, l) * (a @ q)
    return q


def seed_distribution(graph, p0="uniform") -> np.ndarray:
    """The seed distribution p_0 as float64 (num_nodes,) summing to 1: "uniform" (1/n each),
    "degree" (in proportion to out-degree) or an array of num_nodes non-negative finite weights
    (normalised). ValueError for anything else."""
    n = graph.num_nodes
    if n == 0:
        raise ValueError("the graph has no nodes; a seed distribution needs at least one")
    if isinstance(p0, str):
        if p0 == "uniform":
            return np.full(n, 1.0 / n)
        if p0 == "degree":
            deg = np.asarray(graph.degree, dtype=np.float64)
            total = deg.sum()
            if total <= 0:
                raise ValueError('p0="degree" needs a graph with edges; this one has none')
            return deg / total
        raise ValueError(f"p0 must be one of {P0_POLICIES} or an array of {n} weights, got {p0!r}")
    try:
        w = np.asarray(p0, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"p0 must be one of {P0_POLICIES} or an array of {n} weights: {e}") from None
    if w.shape != (n,):
        raise ValueError(f"p0 must hold one weight per node, shape ({n},); got shape {w.shape}")
    if not np.all(np.isfinite(w)):
        bad = int(np.flatnonzero(~np.isfinite(w))[0])
        raise ValueError(f"p0 weights must be finite; node {bad} has {w[bad]}")
    if np.any(w < 0):
        bad = int(np.flatnonzero(w < 0)[0])
        raise ValueError(f"p0 weights must be >= 0; node {bad} has {w[bad]}")
    total = w.sum()
    if not total > 0:
        raise ValueError("p0 weights must sum to > 0 (at least one node must be a possible seed)")
    return w / total


def fap(graph, fanouts, p0="uniform") -> np.ndarray:
    """Every node's feature access probability: float64 (num_nodes,), the expected number of
    instances of the node in the sample tree of one seed drawn from p0 (see seed_distribution)."""
    fanouts = check_fanouts(fanouts)
    p = seed_distribution(graph, p0)
    a = graph.adjacency()
    at = a.T.tocsr()
    deg = np.asarray(graph.degree)
    total = p.copy()
    row = p  # p_0ᵀ S_1 ... S_k, left to right
    for l in fanouts:
        row = at @ (row * _keep_fraction(deg, l))
        total += row
    return total
