"""sampling.py: the two sampling lanes behind a GNN function (Quiver's hybrid sampling) and the common Sample they produce: the CPU lane (per-seed trees in C) and the bulk lane (the whole frontier at once in PyTorch; on a GPU the device lane, without one a CPU stand-in for it); plus the empirical PSGS (after Quiver, Tan et al., arXiv 2023).

Both lanes draw the same neighbours for a node at a hop: a function of (salt, node, hop)
(splitrpc_gnn.h states the rule: Floyd's algorithm over splitmix64 draws; the bulk lane computes
the identical hashes with int64 tensor arithmetic). What differs is the work:

* ``cpu_sample``: one tree per seed, no deduplication (a node reached twice is sampled twice):
  work in proportion to the seeds' summed PSGS, no fixed cost. The GIL is released in C.
* ``bulk_sample``: hop by hop over the frontier, every distinct node once (torch.unique), Floyd's
  l steps vectorised over the whole frontier: a high fixed cost (tens of tensor operations per
  hop) and a low cost per node, and fewer nodes on power-law graphs where seeds share
  neighbours. ``device="cuda"`` runs it on the GPU (the graph is moved there once).

A Sample for K hops: ``nodes[k]`` (k = 0..K) the node ids of level k (level 0: the seeds in
request order, repeats kept), ``edges[k-1] = (src, dst)`` for hop k: src indexes level k, dst
level k-1 (a message from a sampled neighbour to the instance that sampled it). The model
(sage_gat.py) runs over the levels; both lanes' Samples give the same logits.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from splitrpc import neighbour_sampler

LANE_LABELS = {"cpu": "CPU sampler (C, per seed)",
               "bulk": "bulk sampler (PyTorch on the CPU; stand-in for the GPU lane)",
               "gpu": "GPU sampler (PyTorch on CUDA)",
               "emulated": "EMULATED GPU lane (answers from the CPU code, time from a cost model; no GPU)"}

_GOLDEN = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_U64 = 2**64 - 1


def _signed(x: int) -> int:
    x &= _U64
    return x - 2**64 if x >= 2**63 else x


def _mix_int(z: int) -> int:
    """splitmix64's finaliser on a Python int (as sampler.c's mix64)."""
    z &= _U64
    z ^= z >> 30
    z = (z * _M1) & _U64
    z ^= z >> 27
    z = (z * _M2) & _U64
    return z ^ (z >> 31)


@dataclass
class Sample:
    """One batch's sample: levels of node ids and the edges between consecutive levels (numpy
    int64 arrays from the CPU lane, torch int64 tensors from the bulk lane)."""

    nodes: list
    edges: list

    @property
    def hops(self) -> int:
        return len(self.edges)

    def size(self) -> int:
        """Node instances in all levels."""
        return int(sum(len(n) for n in self.nodes))


_cache_lock = threading.Lock()


def _cached(graph, key: str, make):
    """A per-graph cache kept on the graph object itself (freed with it)."""
    with _cache_lock:
        d = graph.__dict__
        if key not in d:
            d[key] = make()
        return d[key]


def _csr(graph) -> neighbour_sampler.CSR:
    """The graph's arrays held for C."""
    return _cached(graph, "_c_csr", lambda: neighbour_sampler.CSR(graph.indptr, graph.indices))


def _torch_csr(graph, device: str):
    """The graph's (indptr, indices) as int64 tensors on `device` (moved once per graph)."""
    import torch

    return _cached(graph, f"_torch_csr_{device}",
                   lambda: (torch.from_numpy(np.array(graph.indptr, dtype=np.int64)).to(device),
                            torch.as_tensor(graph.indices.astype(np.int64)).to(device)))


def cpu_sample(graph, seeds, fanouts, salt: int = 0) -> Sample:
    """The CPU lane: per-seed trees in C (ValueError for a seed outside the graph)."""
    nodes, parents, ends = neighbour_sampler.sample_trees(_csr(graph), seeds, fanouts, salt)
    levels = [nodes[ends[k - 1] if k else 0:ends[k]].astype(np.int64) for k in range(len(ends))]
    edges = []
    for k in range(1, len(ends)):
        lo, hi = int(ends[k - 1]), int(ends[k])
        start_prev = int(ends[k - 2]) if k >= 2 else 0
        edges.append((np.arange(hi - lo, dtype=np.int64), parents[lo:hi].astype(np.int64) - start_prev))
    return Sample(levels, edges)


# ------------------------------------------------------------------ the bulk lane (PyTorch)


def _lsr(z, s: int):
    """Logical shift right of int64 tensors (as uint64)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def _mix(z):
    z = z ^ _lsr(z, 30)
    z = z * _signed(_M1)
    z = z ^ _lsr(z, 27)
    z = z * _signed(_M2)
    return z ^ _lsr(z, 31)


def draws(salt: int, nodes, hop: int, j):
    """srpc_gnn_draw for int64 tensors of nodes and j (broadcast): the same 64-bit values, as int64."""
    h0 = _signed(_mix_int(salt ^ _GOLDEN))
    return _mix(_mix(nodes ^ h0) ^ ((hop << 32) | j))


def _sample_frontier(indptr, indices, frontier, hop: int, l: int, salt: int):
    """(f, nbr): for each frontier element f its sampled neighbours nbr, grouped by f in order,
    each group in the order sampler.c takes them."""
    import torch

    dev = frontier.device
    start = indptr[frontier]
    deg = indptr[frontier + 1] - start
    full = deg <= l
    fr = torch.nonzero(full).squeeze(1)
    cnt = deg[fr]
    f_full = torch.repeat_interleave(fr, cnt)
    first = torch.cumsum(cnt, 0) - cnt
    pos_full = start[f_full] + (torch.arange(f_full.numel(), device=dev) - torch.repeat_interleave(first, cnt))
    pr = torch.nonzero(~full).squeeze(1)
    m = pr.numel()
    if m:
        h1 = _mix(frontier[pr] ^ _signed(_mix_int(salt ^ _GOLDEN)))
        j = deg[pr][:, None] - l + torch.arange(l, device=dev)[None, :]  # (m, l): Floyd's j of each step
        t = _lsr(_mix(h1[:, None] ^ ((hop << 32) | j)), 2) % (j + 1)     # every step's draw at once
        chosen = t.clone()
        for i in range(1, l):  # Floyd's rule, step by step, vectorised over the frontier
            taken = (chosen[:, :i] == t[:, i:i + 1]).any(1)
            chosen[:, i] = torch.where(taken, j[:, i], t[:, i])
        pos_part = (start[pr][:, None] + chosen).reshape(-1)
        f_part = torch.repeat_interleave(pr, l)
        f_all = torch.cat([f_full, f_part])
        pos_all = torch.cat([pos_full, pos_part])
        order = torch.argsort(f_all, stable=True)
        f_all, pos_all = f_all[order], pos_all[order]
    else:
        f_all, pos_all = f_full, pos_full
    return f_all, indices[pos_all]


def bulk_sample(graph, seeds, fanouts, salt: int = 0, device: str = "cpu") -> Sample:
    """The bulk lane: every hop over the whole frontier at once, each distinct node sampled once
    (level 0 keeps the seeds as given). ValueError for a seed outside the graph."""
    import torch

    s = np.ascontiguousarray(seeds, dtype=np.int64)
    bad = np.flatnonzero((s < 0) | (s >= graph.num_nodes))
    if bad.size:
        raise ValueError(f"seed {int(s[bad[0]])} is not a node of this graph (0 .. {graph.num_nodes - 1})")
    indptr, indices = _torch_csr(graph, device)
    frontier = torch.from_numpy(s).to(device)
    nodes, edges = [frontier], []
    for k, l in enumerate(fanouts, 1):
        f, nbr = _sample_frontier(indptr, indices, frontier, k, int(l), salt)
        level, inv = torch.unique(nbr, return_inverse=True)
        edges.append((inv, f))
        nodes.append(level)
        frontier = level
    return Sample(nodes, edges)


def empirical_psgs(graph, fanouts, samples: int = 32, salt: int = 0, nodes=None) -> tuple[np.ndarray, np.ndarray]:
    """The mean sampled tree size of each node (or of `nodes`) over `samples` salts, and the
    standard error of that mean (as torch-quiver estimates PSGS by sampling)."""
    ids = np.arange(graph.num_nodes, dtype=np.int64) if nodes is None else np.asarray(nodes, np.int64)
    mean, var = neighbour_sampler.tree_sizes(_csr(graph), ids, fanouts, samples, salt)
    return mean, np.sqrt(var / samples)
