"""gnn.py (binding layer): the native CPU neighbour sampler (splitrpc_gnn.h) through cffi: per-seed sample trees, one node's sample, tree sizes. cffi releases the GIL around each call, so lanes on other threads run meanwhile."""
from __future__ import annotations

import numpy as np

from splitrpc._native import check, ffi, lib

MAX_HOPS = lib.SRPC_GNN_MAX_HOPS
MAX_FANOUT = lib.SRPC_GNN_MAX_FANOUT


class CSR:
    """A graph's CSR arrays held for C (int64 indptr, int32 indices, contiguous, kept alive)."""

    def __init__(self, indptr, indices):
        self.indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        self.indices = np.ascontiguousarray(indices, dtype=np.int32)
        if self.indptr.ndim != 1 or self.indptr.size < 1:
            raise ValueError("indptr must be a 1-D array of num_nodes + 1 offsets")
        self.num_nodes = self.indptr.size - 1
        self.c = ffi.new("srpc_csr_t *")
        self.c.indptr = ffi.cast("const int64_t *", self.indptr.ctypes.data)
        self.c.indices = ffi.cast("const int32_t *", self.indices.ctypes.data)
        self.c.num_nodes = self.num_nodes


def _fanouts(fanouts) -> tuple[np.ndarray, int]:
    f = np.ascontiguousarray(fanouts, dtype=np.uint32)
    if f.ndim != 1 or not 1 <= f.size <= MAX_HOPS or f.min() < 1 or f.max() > MAX_FANOUT:
        raise ValueError(f"fanouts: 1 to {MAX_HOPS} hops of 1 to {MAX_FANOUT} each, got {list(np.ravel(fanouts))}")
    return f, int(f.size)


def _seeds(csr: CSR, seeds) -> np.ndarray:
    s = np.ascontiguousarray(seeds, dtype=np.int64)
    if s.ndim != 1:
        raise ValueError("seeds must be a 1-D array of node ids")
    bad = np.flatnonzero((s < 0) | (s >= csr.num_nodes))
    if bad.size:
        raise ValueError(f"seed {int(s[bad[0]])} is not a node of this graph (0 .. {csr.num_nodes - 1})")
    if s.size >= 2**32:
        raise ValueError("too many seeds for one call")
    return s


def _p(a: np.ndarray, t: str):
    return ffi.cast(t, a.ctypes.data)


def sample_trees(csr: CSR, seeds, fanouts, salt: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(nodes int32, parents int32, level_end int64 of hops + 1): srpc_gnn_sample_trees."""
    s = _seeds(csr, seeds)
    f, hops = _fanouts(fanouts)
    cap = ffi.new("uint64_t *")
    check(lib.srpc_gnn_tree_cap(s.size, _p(f, "uint32_t *"), hops, cap), "srpc_gnn_tree_cap")
    nodes = np.empty(cap[0], np.int32)
    parents = np.empty(cap[0], np.int32)
    ends = np.zeros(hops + 1, np.uint64)
    check(lib.srpc_gnn_sample_trees(csr.c, _p(s, "int64_t *"), s.size, _p(f, "uint32_t *"), hops,
                                    salt & (2**64 - 1), _p(nodes, "int32_t *"), _p(parents, "int32_t *"), cap[0],
                                    _p(ends, "uint64_t *")), "srpc_gnn_sample_trees")
    n = int(ends[-1])
    return nodes[:n], parents[:n], ends.astype(np.int64)


def sample_node(csr: CSR, v: int, hop: int, fanout: int, salt: int) -> np.ndarray:
    """The neighbours node v samples at hop (1-based) with fanout: srpc_gnn_sample_node."""
    if not 1 <= fanout <= MAX_FANOUT:
        raise ValueError(f"fanout must be 1 .. {MAX_FANOUT}, got {fanout}")
    out = np.empty(fanout, np.int32)
    n = check(lib.srpc_gnn_sample_node(csr.c, int(v), int(hop), int(fanout), salt & (2**64 - 1),
                                       _p(out, "int32_t *")), "srpc_gnn_sample_node")
    return out[:n]


def draw(salt: int, node: int, hop: int, j: int) -> int:
    """srpc_gnn_draw: the 64-bit hash a sampling step draws (for checking other implementations)."""
    return int(lib.srpc_gnn_draw(salt & (2**64 - 1), int(node), int(hop), int(j)))


def tree_sizes(csr: CSR, seeds, fanouts, samples: int, salt: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean, var) float64 per seed of the sizes of `samples` trees (salts salt, salt+1, ...)."""
    s = _seeds(csr, seeds)
    f, hops = _fanouts(fanouts)
    if samples < 1:
        raise ValueError("samples must be >= 1")
    mean = np.empty(s.size, np.float64)
    var = np.empty(s.size, np.float64)
    check(lib.srpc_gnn_tree_sizes(csr.c, _p(s, "int64_t *"), s.size, _p(f, "uint32_t *"), hops,
                                  salt & (2**64 - 1), int(samples), _p(mean, "double *"), _p(var, "double *")),
          "srpc_gnn_tree_sizes")
    return mean, var
