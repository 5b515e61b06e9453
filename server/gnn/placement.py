"""placement.py: feature placement (Quiver §5.2) as pure functions: node orders by policy (FAP, degree, id hash), placement over one server's storage tiers, and Quiver's replicate-the-hottest / partition-the-rest placement over a described multi-GPU, multi-server topology (after Quiver, Tan et al., arXiv 2023).

Orders
------
``order_by(score)`` sorts node ids by score, highest first, ties by id ascending. ``scores`` gives
the score of a policy: "fap" (metrics.fap), "degree" (out-degree) or "hash" (a fixed pseudo-random
permutation: splitmix64 of the id xor HASH_SEED, the "place by id hash" baseline).

Tiers of one server
-------------------
``place_tiers(order, {"device": Nd, "host": Nh, "disk": None})``: features taken in ``order`` fill
the tiers in the given order, each up to its capacity (None = unbounded).

Topology placement: the rule implemented
----------------------------------------
Inputs: a ``Topology`` (S servers; G GPUs and C NUMA nodes per server, G/C GPUs per NUMA node;
N_g features per GPU, N_m in a server's host memory, N_d on its disk, None = unbounded; NVLink
between the GPUs of a NUMA node or not; InfiniBand between servers or not), an order (normally
``order_by(fap)``) and the FAP of every node.

1. Per-NUMA GPU capacity N_gpu, the distinct features the GPUs of one NUMA node hold: with NVLink
   (G/C)·N_g (paper step ii), partitioned over the node's GPUs; without NVLink N_g, the same
   features on every GPU of the node (Fig. 8(a): no peer reads, locality only). Every NUMA node of
   a server holds the same GPU features (step v: replicated across NUMA nodes).
2. Per-server capacity N_s (step iii), exposed as ``Topology.server_capacity``: N_gpu + N_m with
   InfiniBand, N_gpu + N_m + N_d without. A server's total capacity is T = N_gpu + N_m + N_d.
   All features fit iff S·T >= n, else ValueError saying how many do not.
3. The replicated range: the first R features of ``order`` are on every server, where R is
   capped by R_max, the most that can be replicated while the rest still fits partitioned:
   R_max = min(n, floor((S·T - n) / (S - 1))) (R_max = n for one server or unbounded disks).
   * With InfiniBand (a remote read beats a local disk read; Fig. 8(d)): R = min(N_gpu, R_max),
     the GPU-resident hottest range, so that every GPU read of the hottest features is local and
     host memories across servers hold distinct features.
   * Without InfiniBand (remote reads are the slowest path; Fig. 8(c)): R = R_max, as much as fits
     (every feature on every server when a server can hold all of them).
   * One server: R = n (everything it holds is trivially on every server; ``owner`` is all -1).
4. The partitioned range, order[R:], each feature on exactly one server (its ``owner``), filled
   tier by tier: after the replicated range, every server has the same room left in its GPUs,
   host memory and disk; the next S·room features go to the GPU tier, the next to host memory, the
   rest to disk. Within a tier the rule is greedy: each feature, in order, goes to the server whose
   summed partitioned FAP (over all its tiers so far) is least among the servers that still have
   room in this tier; ties go to the lowest server index. With FAP order this keeps the spread of
   the parts' summed FAP (max - min) within the largest FAP in the partitioned range (the tests
   check this bound).
5. Within a server (step v): its GPU-tier features (replicated ones first, then its own, in
   order) are, with NVLink, partitioned over the G/C GPUs of a NUMA node by the same greedy rule
   (least summed FAP among GPUs with room N_g; ties to the lowest GPU index), and GPU j of every
   NUMA node holds what GPU j of NUMA node 0 holds; without NVLink every GPU holds them all. Then
   host memory, then disk, each in order.

Where this departs from the paper's text: step (iv) says to replicate the features in [0 : S·N_s]
on every server, which cannot fit (a server holds N_s of them), and the paper only considers
NVLink-connected GPUs. We replicate the range of point 3 instead (the GPU-resident range with
InfiniBand, everything that fits without), make NVLink-less GPUs replicate (Fig. 8(a)), balance
by the greedy rule of point 4 (the paper says only "similar aggregated FAP"), treat a server's host
memory as one pool (the NUMA placement of host memory is not modelled) and partition the
non-replicated range over host memory *and* GPUs when replication had to shrink below N_gpu.
"""
from __future__ import annotations

import heapq
import numbers
from dataclasses import dataclass

import numpy as np

from splitrpc.services.gnn.metrics import fap

POLICIES = ("fap", "degree", "hash")
HASH_SEED = 0x9E3779B97F4A7C15  # the "hash" policy's fixed seed


def _scores_array(score) -> np.ndarray:
    s = np.asarray(score)
    if s.ndim != 1:
        raise ValueError(f"score must be a 1-D array (one value per node), got shape {s.shape}")
    if s.dtype.kind not in "biuf":
        raise ValueError(f"score must be numeric, got dtype {s.dtype}")
    s = s.astype(np.float64)
    if not np.all(np.isfinite(s)):
        raise ValueError(f"score must be finite; node {int(np.flatnonzero(~np.isfinite(s))[0])} is not")
    return s


def order_by(score) -> np.ndarray:
    """Node ids (int64) by score, highest first; equal scores by id ascending."""
    s = _scores_array(score)
    return np.lexsort((np.arange(s.size, dtype=np.int64), -s)).astype(np.int64)


def id_hash(ids) -> np.ndarray:
    """splitmix64(id xor HASH_SEED) as uint64: a fixed pseudo-random value per id."""
    z = np.asarray(ids, dtype=np.uint64) ^ np.uint64(HASH_SEED)
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def scores(graph, policy: str, fanouts=None, p0="uniform") -> np.ndarray:
    """float64 (num_nodes,) scores of a placement policy: "fap" (metrics.fap(graph, fanouts, p0)),
    "degree" (out-degree) or "hash" (id_hash scaled to [0, 1), a fixed random order)."""
    if policy == "fap":
        if fanouts is None:
            raise ValueError('policy "fap" needs the fanouts (l_1, ..., l_K)')
        return fap(graph, fanouts, p0)
    if policy == "degree":
        return np.asarray(graph.degree, dtype=np.float64)
    if policy == "hash":
        return (id_hash(np.arange(graph.num_nodes)) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    raise ValueError(f"unknown placement policy {policy!r}; known: {', '.join(POLICIES)}")


def _check_order(order) -> np.ndarray:
    o = np.asarray(order)
    if o.ndim != 1 or (o.size and o.dtype.kind not in "iu"):
        raise ValueError(f"order must be a 1-D integer array of node ids, got shape {o.shape}, dtype {o.dtype}")
    o = o.astype(np.int64)
    n = o.size
    if n and (o.min() < 0 or o.max() >= n or np.any(np.bincount(o, minlength=n) != 1)):
        raise ValueError(f"order must be a permutation of 0 .. {n - 1} (every node exactly once)")
    return o


def _check_capacity(what: str, c, *, allow_none: bool):
    if c is None and allow_none:
        return None
    if isinstance(c, bool) or not isinstance(c, numbers.Integral) or c < 0:
        raise ValueError(f"{what} must be an int >= 0{' or None (unbounded)' if allow_none else ''}, got {c!r}")
    return int(c)


@dataclass(frozen=True)
class TierPlacement:
    """Where each node's feature lives on one server: ``tier[v]`` indexes ``tiers``, ``slot[v]`` is
    its row within that tier (tiers fill in order, so slot order is placement order)."""

    tier: np.ndarray       # int8 (n,)
    slot: np.ndarray       # int64 (n,)
    tiers: tuple           # tier names, in fill order
    counts: tuple          # features per tier
    capacities: tuple      # capacity per tier, None = unbounded

    @property
    def num_nodes(self) -> int:
        return int(self.tier.size)

    def index(self, name: str) -> int:
        if name not in self.tiers:
            raise ValueError(f"no tier {name!r}; tiers: {', '.join(self.tiers)}")
        return self.tiers.index(name)

    def ids(self, name: str) -> np.ndarray:
        """The node ids of a tier, by slot (int64)."""
        t = self.index(name)
        ids = np.flatnonzero(self.tier == t)
        return ids[np.argsort(self.slot[ids], kind="stable")].astype(np.int64)


def place_tiers(order, capacities: dict) -> TierPlacement:
    """Features taken in ``order`` fill the tiers of ``capacities`` (name -> int or None for
    unbounded), in the dict's order, each up to its capacity. ValueError when they cannot hold all."""
    o = _check_order(order)
    n = o.size
    if not isinstance(capacities, dict) or not capacities:
        raise ValueError('capacities must be a non-empty dict such as {"device": 1000, "host": 5000, "disk": None}')
    if len(capacities) > 127:
        raise ValueError(f"at most 127 tiers, got {len(capacities)}")
    names, caps = [], []
    for name, c in capacities.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"tier names must be non-empty strings, got {name!r}")
        names.append(name)
        caps.append(_check_capacity(f"capacity of tier {name!r}", c, allow_none=True))
    if None not in caps and sum(caps) < n:
        raise ValueError(f"the tiers hold {sum(caps)} features but there are {n}: {n - sum(caps)} do not fit; "
                         "make the last tier unbounded (None) or add capacity")
    tier = np.empty(n, dtype=np.int8)
    slot = np.empty(n, dtype=np.int64)
    counts = []
    pos = 0
    for t, c in enumerate(caps):
        take = n - pos if c is None else min(c, n - pos)
        ids = o[pos:pos + take]
        tier[ids] = t
        slot[ids] = np.arange(take, dtype=np.int64)
        counts.append(int(take))
        pos += take
    return TierPlacement(tier, slot, tuple(names), tuple(counts), tuple(caps))


@dataclass(frozen=True)
class Topology:
    """A cluster of feature stores: ``servers`` servers, each with ``gpus_per_server`` GPUs over
    ``numa_per_server`` NUMA nodes, ``gpu_capacity`` features per GPU, ``host_capacity`` in host
    memory and ``disk_capacity`` on disk (None = unbounded); ``nvlink`` between the GPUs of a NUMA
    node, ``infiniband`` between servers."""

    servers: int
    gpus_per_server: int
    numa_per_server: int
    gpu_capacity: int
    host_capacity: int
    disk_capacity: int | None
    nvlink: bool
    infiniband: bool

    def __post_init__(self):
        for what in ("servers", "numa_per_server"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"{what} must be an int >= 1, got {v!r}")
        _check_capacity("gpus_per_server", self.gpus_per_server, allow_none=False)
        if self.gpus_per_server % self.numa_per_server:
            raise ValueError(f"gpus_per_server ({self.gpus_per_server}) must be a multiple of numa_per_server "
                             f"({self.numa_per_server}): every NUMA node has the same GPUs")
        _check_capacity("gpu_capacity", self.gpu_capacity, allow_none=False)
        _check_capacity("host_capacity", self.host_capacity, allow_none=False)
        _check_capacity("disk_capacity", self.disk_capacity, allow_none=True)
        for what in ("nvlink", "infiniband"):
            if not isinstance(getattr(self, what), bool):
                raise ValueError(f"{what} must be a bool, got {getattr(self, what)!r}")

    @property
    def gpus_per_numa(self) -> int:
        return self.gpus_per_server // self.numa_per_server

    @property
    def numa_gpu_capacity(self) -> int:
        """Distinct features on the GPUs of one NUMA node: (G/C)·N_g with NVLink, N_g without."""
        if self.gpus_per_numa == 0:
            return 0
        return self.gpus_per_numa * self.gpu_capacity if self.nvlink else self.gpu_capacity

    @property
    def server_capacity(self) -> int | None:
        """The paper's N_s: N_gpu + N_m with InfiniBand, N_gpu + N_m + N_d without (None = unbounded)."""
        if self.infiniband:
            return self.numa_gpu_capacity + self.host_capacity
        return self.total_capacity

    @property
    def total_capacity(self) -> int | None:
        """Distinct features one server holds, N_gpu + N_m + N_d (None = unbounded)."""
        if self.disk_capacity is None:
            return None
        return self.numa_gpu_capacity + self.host_capacity + self.disk_capacity

    def locations(self) -> tuple:
        """A server's locations: "gpu0" .. "gpu{G-1}", "host", "disk"."""
        return tuple(f"gpu{i}" for i in range(self.gpus_per_server)) + ("host", "disk")


@dataclass(frozen=True)
class TopologyPlacement:
    """``servers[s][location]``: the node ids (int64, in placement order) at each location of
    server s ("gpu0" .. , "host", "disk"). ``replicated``: the ids on every server; ``owner[v]``:
    the server holding v, -1 for replicated ones; ``part_fap[s]``: the summed FAP of server s's
    partitioned features."""

    topology: Topology
    servers: tuple
    replicated: np.ndarray
    owner: np.ndarray
    part_fap: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.owner.size)

    def held(self, server: int) -> np.ndarray:
        """The distinct node ids on a server (sorted)."""
        return np.unique(np.concatenate([a for a in self.servers[server].values()] + [np.empty(0, np.int64)]))

    def locations_of(self, v: int) -> list:
        """[(server, location), ...] holding node v."""
        return [(s, loc) for s, locs in enumerate(self.servers) for loc, ids in locs.items() if np.any(ids == v)]

    def check(self):
        """ValueError unless every capacity is respected, every replicated feature is on every
        server, every other feature on exactly its owner, and every feature somewhere."""
        top = self.topology
        n = self.num_nodes
        caps = {f"gpu{i}": top.gpu_capacity for i in range(top.gpus_per_server)}
        caps.update(host=top.host_capacity, disk=top.disk_capacity)
        is_rep = np.zeros(n, dtype=bool)
        is_rep[self.replicated] = True
        if np.any(is_rep != (self.owner < 0)):
            raise ValueError("owner must be -1 exactly for the replicated features")
        seen = np.zeros(n, dtype=np.int64)
        m = top.gpus_per_numa
        for s, locs in enumerate(self.servers):
            if set(locs) != set(caps):
                raise ValueError(f"server {s} has locations {sorted(locs)}, expected {sorted(caps)}")
            for loc, ids in locs.items():
                if caps[loc] is not None and ids.size > caps[loc]:
                    raise ValueError(f"server {s} {loc} holds {ids.size} features, capacity {caps[loc]}")
                if np.unique(ids).size != ids.size:
                    raise ValueError(f"server {s} {loc} holds a feature twice")
            # One copy per server: NUMA node 0's GPUs, host and disk (other NUMA nodes mirror node 0).
            numa0 = [locs[f"gpu{i}"] for i in range(m)] if top.nvlink else [locs["gpu0"]] if m else []
            for c in range(top.numa_per_server):
                for j in range(m):
                    want = locs[f"gpu{j}"] if top.nvlink else locs["gpu0"]
                    if not np.array_equal(locs[f"gpu{c * m + j}"], want):
                        raise ValueError(f"server {s} gpu{c * m + j} does not mirror "
                                         f"{'gpu' + str(j) if top.nvlink else 'gpu0'}")
            copy = np.concatenate(numa0 + [locs["host"], locs["disk"], np.empty(0, np.int64)])
            if np.unique(copy).size != copy.size:
                raise ValueError(f"server {s} holds a feature in two of its tiers")
            np.add.at(seen, copy, 1)
            if not np.all(np.isin(self.replicated, copy)):
                raise ValueError(f"server {s} lacks replicated features")
            mine = np.flatnonzero(self.owner == s)
            if not np.all(np.isin(mine, copy)):
                raise ValueError(f"server {s} lacks features it owns")
        expect = np.where(is_rep, len(self.servers), 1)
        if np.any(seen != expect):
            v = int(np.flatnonzero(seen != expect)[0])
            raise ValueError(f"feature {v} is held by {seen[v]} servers, expected {expect[v]}")


def _greedy(ids: np.ndarray, fap_values: np.ndarray, loads: np.ndarray, room: float) -> list:
    """Assign ids, in order, each to the bin with the least load among those with fewer than
    ``room`` ids (ties: lowest index); updates loads in place; returns the per-bin id lists."""
    bins = [[] for _ in range(loads.size)]
    heap = [(float(loads[b]), b) for b in range(loads.size)] if room > 0 else []
    heapq.heapify(heap)
    for v in ids.tolist():
        load, b = heapq.heappop(heap)  # callers never pass more ids than the bins have room for
        bins[b].append(v)
        loads[b] = load + fap_values[v]
        if len(bins[b]) < room:
            heapq.heappush(heap, (float(loads[b]), b))
    return bins


def place_topology(order, fap_values, topology: Topology) -> TopologyPlacement:
    """Quiver's §5.2 placement over ``topology`` (the rule: this module's docstring)."""
    if not isinstance(topology, Topology):
        raise ValueError(f"topology must be a Topology, got {type(topology).__name__}")
    o = _check_order(order)
    n = o.size
    f = _scores_array(fap_values)
    if f.size != n:
        raise ValueError(f"fap_values must hold one value per node ({n}), got {f.size}")
    if np.any(f < 0):
        raise ValueError(f"fap_values must be >= 0; node {int(np.flatnonzero(f < 0)[0])} has {f[f < 0][0]}")
    top = topology
    S = top.servers
    n_gpu, n_m, n_d = top.numa_gpu_capacity, top.host_capacity, top.disk_capacity
    total = top.total_capacity
    if total is not None and S * total < n:
        raise ValueError(f"{S} servers hold {S * total} distinct features ({total} each: {n_gpu} on the GPUs of a "
                         f"NUMA node, {n_m} in host memory, {n_d} on disk) but there are {n}: "
                         f"{n - S * total} do not fit")
    if S == 1 or total is None:
        r_max = n
    else:
        r_max = min(n, (S * total - n) // (S - 1))
    r = min(n_gpu, r_max) if top.infiniband and S > 1 else r_max  # one server: everything is on every server
    rep = o[:r]

    # Every server's tiers (one NUMA node's GPU range, host, disk): the replicated range first.
    tier_caps = [n_gpu, n_m, np.inf if n_d is None else n_d]
    rep_parts, pos = [], 0
    for c in tier_caps:
        take = int(min(c, r - pos))
        rep_parts.append(rep[pos:pos + take])
        pos += take
    own = [[[] for _ in range(3)] for _ in range(S)]
    loads = np.zeros(S, dtype=np.float64)
    pos = r
    for t, c in enumerate(tier_caps):
        room = c - rep_parts[t].size
        take = int(min(n - pos, S * room))
        for s, ids in enumerate(_greedy(o[pos:pos + take], f, loads, room)):
            own[s][t] = ids
        pos += take
    assert pos == n  # the capacity check above guarantees it

    owner = np.full(n, -1, dtype=np.int64)
    servers = []
    m = top.gpus_per_numa
    for s in range(S):
        owned = [np.asarray(own[s][t], dtype=np.int64) for t in range(3)]
        for t in range(3):
            owner[owned[t]] = s
        gpu_ids = np.concatenate([rep_parts[0], owned[0]])
        locs = {}
        if m:
            if top.nvlink:
                per_gpu = [np.asarray(b, dtype=np.int64)
                           for b in _greedy(gpu_ids, f, np.zeros(m), top.gpu_capacity)]
            else:
                per_gpu = [gpu_ids] * m
            for c in range(top.numa_per_server):
                for j in range(m):
                    locs[f"gpu{c * m + j}"] = per_gpu[j].copy()
        locs["host"] = np.concatenate([rep_parts[1], owned[1]])
        locs["disk"] = np.concatenate([rep_parts[2], owned[2]])
        servers.append(locs)
    part_fap = np.array([f[owner == s].sum() for s in range(S)], dtype=np.float64)
    placement = TopologyPlacement(top, tuple(servers), rep.copy(), owner, part_fap)
    placement.check()
    return placement
