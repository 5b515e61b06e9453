"""graph.py: the graph store: directed graphs in CSR (out-neighbours), built from edge lists or generated (seeded Chung-Lu power-law graphs, the named presets), and their node features (after Quiver, Tan et al., arXiv 2023).

A node v's out-neighbours are ``indices[indptr[v]:indptr[v+1]]``, sorted and distinct; a GNN
request's seed v aggregates from them (and they from theirs, hop by hop). Node ids are
0 .. num_nodes - 1; int32 neighbour ids bound a graph to 2**31 - 1 nodes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MAX_NODES = 2**31 - 1  # neighbour ids are int32


@dataclass(frozen=True)
class Graph:
    """A directed graph in CSR. Build it with from_edges / chung_lu / synthetic, which check it;
    the constructor checks the arrays' shapes and ranges too (O(E))."""

    indptr: np.ndarray   # int64 (num_nodes + 1,), indptr[0] == 0, non-decreasing
    indices: np.ndarray  # int32 (num_edges,), each in 0 .. num_nodes - 1, sorted and distinct per row
    name: str = ""
    _degree: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        indptr = np.ascontiguousarray(self.indptr, dtype=np.int64)
        indices = np.ascontiguousarray(self.indices, dtype=np.int32)
        if indptr.ndim != 1 or indptr.size < 1 or indptr[0] != 0:
            raise ValueError("indptr must be a 1-D array starting at 0")
        n = indptr.size - 1
        if n > MAX_NODES:
            raise ValueError(f"at most {MAX_NODES} nodes, got {n}")
        deg = np.diff(indptr)
        if deg.size and deg.min() < 0:
            raise ValueError("indptr must be non-decreasing")
        if indices.ndim != 1 or indices.size != indptr[-1]:
            raise ValueError(f"indices must hold indptr[-1] = {int(indptr[-1])} entries, got {indices.size}")
        if indices.size and (indices.min() < 0 or indices.max() >= n):
            raise ValueError(f"neighbour ids must lie in 0 .. {n - 1}")
        indptr.setflags(write=False)
        indices.setflags(write=False)
        deg.setflags(write=False)
        object.__setattr__(self, "indptr", indptr)
        object.__setattr__(self, "indices", indices)
        object.__setattr__(self, "_degree", deg)

    @property
    def num_nodes(self) -> int:
        return self.indptr.size - 1

    @property
    def num_edges(self) -> int:
        return int(self.indices.size)

    @property
    def degree(self) -> np.ndarray:
        """Out-degree of every node (int64, read-only)."""
        return self._degree

    def neighbours(self, v: int) -> np.ndarray:
        return self.indices[self.indptr[v]:self.indptr[v + 1]]

    def adjacency(self):
        """The adjacency matrix A (A[i, j] = 1 for an edge i -> j) as a scipy.sparse CSR matrix of float64."""
        import scipy.sparse as sp

        n = self.num_nodes
        return sp.csr_matrix((np.ones(self.num_edges), self.indices, self.indptr), shape=(n, n))

    def edge_index(self) -> np.ndarray:
        """(2, E) int64 [source, target] of the messages a GNN passes: from each out-neighbour j to
        i for every edge i -> j (PyG's convention: messages flow from row 0 to row 1)."""
        src = np.repeat(np.arange(self.num_nodes, dtype=np.int64), self.degree)
        return np.stack([self.indices.astype(np.int64), src])


def from_edges(src, dst, num_nodes: int, *, undirected: bool = False, self_loops: bool = False,
               name: str = "") -> Graph:
    """The graph with edges src[i] -> dst[i] (duplicates merged; self-loops dropped unless
    self_loops; undirected adds every reverse edge). ValueError for ids outside 0 .. num_nodes - 1."""
    src = np.asarray(src, dtype=np.int64).ravel()
    dst = np.asarray(dst, dtype=np.int64).ravel()
    if src.shape != dst.shape:
        raise ValueError(f"src and dst differ in length ({src.size} vs {dst.size})")
    if not 0 <= num_nodes <= MAX_NODES:
        raise ValueError(f"num_nodes must be 0 .. {MAX_NODES}, got {num_nodes}")
    for what, a in (("src", src), ("dst", dst)):
        if a.size and (a.min() < 0 or a.max() >= num_nodes):
            raise ValueError(f"{what} holds ids outside 0 .. {num_nodes - 1}")
    if undirected:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    if not self_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    key = np.unique(src * num_nodes + dst)  # sorted by (src, dst), duplicates merged
    src, dst = key // max(num_nodes, 1), key % max(num_nodes, 1)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=num_nodes), out=indptr[1:])
    return Graph(indptr, dst.astype(np.int32), name=name)


def chung_lu(num_nodes: int, avg_degree: float, *, exponent: float = 2.5, seed: int = 0, undirected: bool = True,
             name: str = "") -> Graph:
    """A Chung-Lu random graph: node weights follow a power law of the given exponent (degree
    distribution P(d) ~ d^-exponent), num_nodes * avg_degree / (2 if undirected else 1) edge draws
    with both ends drawn in proportion to weight (expected degrees clipped at sqrt(num_nodes *
    avg_degree)); duplicates and self-loops are dropped, so the
    realised mean degree is somewhat below avg_degree (hubs lose the most). Node ids are shuffled
    (an id says nothing about its degree). Deterministic for a seed."""
    if num_nodes < 2 or avg_degree <= 0 or exponent <= 2:
        raise ValueError("chung_lu needs num_nodes >= 2, avg_degree > 0 and exponent > 2")
    rng = np.random.default_rng(seed)
    w = (np.arange(1, num_nodes + 1, dtype=np.float64)) ** (-1.0 / (exponent - 1.0))
    # Expected degrees, the largest clipped at sqrt(total) (Chung-Lu's condition for edge
    # probabilities <= 1), so that no hub touches most of the graph.
    w *= num_nodes * avg_degree / w.sum()
    np.minimum(w, np.sqrt(num_nodes * avg_degree), out=w)
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    draws = int(round(num_nodes * avg_degree / (2 if undirected else 1)))
    src = np.minimum(np.searchsorted(cdf, rng.random(draws)), num_nodes - 1)
    dst = np.minimum(np.searchsorted(cdf, rng.random(draws)), num_nodes - 1)
    perm = rng.permutation(num_nodes)
    return from_edges(perm[src], perm[dst], num_nodes, undirected=undirected, name=name)


# Named synthetic graphs: (num_nodes, avg_degree, exponent, feature dim, classes). "reddit-like"
# is Reddit's shape scaled to this machine (Reddit: 232k nodes, mean degree ~490, 602 features,
# 41 classes); "small" is for tests and CI.
PRESETS = {
    "reddit-like": dict(num_nodes=50_000, avg_degree=100.0, exponent=2.2, dim=128, classes=41),
    "small": dict(num_nodes=2_000, avg_degree=20.0, exponent=2.2, dim=32, classes=8),
}


def synthetic(name: str = "reddit-like", *, seed: int = 0) -> Graph:
    """The named preset graph (PRESETS), undirected, deterministic for a seed."""
    if name not in PRESETS:
        raise ValueError(f"unknown graph {name!r}; known: {', '.join(PRESETS)}")
    p = PRESETS[name]
    return chung_lu(p["num_nodes"], p["avg_degree"], exponent=p["exponent"], seed=seed, name=name)


def node_features(num_nodes: int, dim: int, *, seed: int = 0) -> np.ndarray:
    """Node features: float32 (num_nodes, dim), standard normal, deterministic for a seed."""
    return np.random.default_rng(seed).standard_normal((num_nodes, dim), dtype=np.float32)
