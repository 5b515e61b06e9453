"""test_gnn_placement.py: node orders, tier placement and Quiver's topology placement (splitrpc.services.gnn.placement): capacities, coverage, replication, FAP balance, the paper's Fig. 8 scenarios and FAP vs hash/degree hit rates measured on sampled accesses."""
import numpy as np
import pytest

pytest.importorskip("scipy")

from splitrpc.services.gnn import metrics, sampling  # noqa: E402
from splitrpc.services.gnn.graph import from_edges, synthetic  # noqa: E402
from splitrpc.services.gnn.placement import (Topology, TopologyPlacement, order_by, place_tiers,  # noqa: E402
                                              place_topology, scores)

FANOUTS = (10, 5)


@pytest.fixture(scope="module")
def small():
    g = synthetic("small")
    return g, metrics.fap(g, FANOUTS)


# ---- orders -------------------------------------------------------------------------------------

def test_order_by_descending_ties_by_id():
    np.testing.assert_array_equal(order_by([1.0, 3.0, 3.0, 2.0, 3.0]), [1, 2, 4, 3, 0])
    np.testing.assert_array_equal(order_by(np.array([5, 5, 5])), [0, 1, 2])
    assert order_by([2.0, 1.0]).dtype == np.int64
    assert order_by([]).size == 0


@pytest.mark.parametrize("bad", [[1.0, np.nan], [[1.0, 2.0]], ["a", "b"], [np.inf, 1.0]])
def test_order_by_rejects_bad_scores(bad):
    with pytest.raises(ValueError, match="score"):
        order_by(bad)


def test_policy_scores(small):
    g, f = small
    np.testing.assert_array_equal(scores(g, "degree"), g.degree)
    np.testing.assert_array_equal(scores(g, "fap", FANOUTS), f)
    h = scores(g, "hash")
    np.testing.assert_array_equal(h, scores(g, "hash"))  # fixed, not reseeded per call
    assert np.unique(h).size == g.num_nodes and h.min() >= 0 and h.max() < 1
    o = order_by(h)
    assert not np.array_equal(o, np.arange(g.num_nodes))
    # A pseudo-random order: unrelated to degree (rank correlation near 0).
    rank = np.empty(g.num_nodes)
    rank[o] = np.arange(g.num_nodes)
    assert abs(np.corrcoef(rank, g.degree)[0, 1]) < 0.1
    with pytest.raises(ValueError, match="needs the fanouts"):
        scores(g, "fap")
    with pytest.raises(ValueError, match="unknown placement policy 'lru'"):
        scores(g, "lru")


# ---- tiers of one server --------------------------------------------------------------------------

def test_place_tiers_fills_in_order_and_covers_every_node_once():
    rng = np.random.default_rng(0)
    order = rng.permutation(100)
    tp = place_tiers(order, {"device": 20, "host": 30, "disk": None})
    assert tp.tiers == ("device", "host", "disk") and tp.counts == (20, 30, 50)
    np.testing.assert_array_equal(tp.ids("device"), order[:20])
    np.testing.assert_array_equal(tp.ids("host"), order[20:50])
    np.testing.assert_array_equal(tp.ids("disk"), order[50:])
    assert tp.tier.dtype == np.int8 and tp.slot.dtype == np.int64
    all_ids = np.concatenate([tp.ids(t) for t in tp.tiers])
    np.testing.assert_array_equal(np.sort(all_ids), np.arange(100))
    for t, name in enumerate(tp.tiers):
        np.testing.assert_array_equal(np.sort(tp.slot[tp.tier == t]), np.arange(tp.counts[t]))


def test_place_tiers_capacity_cases():
    order = np.arange(10)[::-1].copy()
    tp = place_tiers(order, {"device": 4, "host": 6, "disk": 0})  # bounded but exactly enough
    assert tp.counts == (4, 6, 0)
    tp = place_tiers(order, {"device": 50, "host": None, "disk": None})
    assert tp.counts == (10, 0, 0)
    tp = place_tiers(order, {"device": 3, "host": None, "disk": 5})  # an unbounded middle tier takes the rest
    assert tp.counts == (3, 7, 0)
    with pytest.raises(ValueError, match="3 do not fit"):
        place_tiers(order, {"device": 3, "host": 4})
    with pytest.raises(ValueError, match="permutation"):
        place_tiers([0, 1, 1], {"device": None})
    with pytest.raises(ValueError, match="permutation"):
        place_tiers([0, 1, 3], {"device": None})
    with pytest.raises(ValueError, match="capacity of tier 'host'"):
        place_tiers(order, {"device": 3, "host": -1, "disk": None})
    with pytest.raises(ValueError, match="non-empty dict"):
        place_tiers(order, {})
    with pytest.raises(ValueError, match="no tier 'gpu'"):
        tp.ids("gpu")


# ---- topology placement -----------------------------------------------------------------------

def power_law_fap(n, seed=0):
    """Heavy-tailed FAP-like values, in no particular id order."""
    values = np.random.default_rng(seed).pareto(1.2, n) + 0.01
    return values[np.random.default_rng(seed + 1).permutation(n)]


def verify(tpl: TopologyPlacement, order, f):
    """Every invariant, checked here independently of TopologyPlacement.check."""
    top = tpl.topology
    n = order.size
    m = top.gpus_per_numa
    held_count = np.zeros(n, dtype=int)
    for s, locs in enumerate(tpl.servers):
        assert set(locs) == set(top.locations())
        for i in range(top.gpus_per_server):
            assert locs[f"gpu{i}"].size <= top.gpu_capacity
        assert locs["host"].size <= top.host_capacity
        if top.disk_capacity is not None:
            assert locs["disk"].size <= top.disk_capacity
        # One NUMA node's GPUs + host + disk: a server's single copy of what it holds.
        gpus = [locs[f"gpu{j}"] for j in range(m)] if top.nvlink else [locs["gpu0"]] if m else []
        copy = np.concatenate(gpus + [locs["host"], locs["disk"]])
        assert np.unique(copy).size == copy.size, "a feature twice on one server"
        assert sum(g.size for g in gpus) <= top.numa_gpu_capacity
        held_count[copy] += 1
        for c in range(1, top.numa_per_server):  # replicated across NUMA nodes
            for j in range(m):
                np.testing.assert_array_equal(locs[f"gpu{c * m + j}"], locs[f"gpu{j}"])
        if not top.nvlink:
            for i in range(top.gpus_per_server):
                np.testing.assert_array_equal(locs[f"gpu{i}"], locs["gpu0"])
        assert np.isin(tpl.replicated, copy).all(), "replicated range missing on a server"
        np.testing.assert_array_equal(np.sort(np.flatnonzero(tpl.owner == s)),
                                      np.sort(np.setdiff1d(copy, tpl.replicated)))
    rep = np.zeros(n, dtype=bool)
    rep[tpl.replicated] = True
    # The hottest range is the replicated one; every other feature on exactly one server.
    np.testing.assert_array_equal(tpl.replicated, order[:tpl.replicated.size])
    assert (held_count[rep] == top.servers).all()
    assert (held_count[~rep] == 1).all()
    assert ((tpl.owner >= 0) == ~rep).all()
    # FAP balance: the parts' summed FAP differ by at most the largest partitioned FAP.
    parts = np.array([f[tpl.owner == s].sum() for s in range(top.servers)])
    np.testing.assert_allclose(tpl.part_fap, parts, rtol=1e-9, atol=1e-12)
    if (~rep).any():
        assert parts.max() - parts.min() <= f[~rep].max() + 1e-9
    # Within a server, with NVLink: the GPUs of a NUMA node hold about equal summed FAP.
    if top.nvlink and m > 1:
        for locs in tpl.servers:
            sums = [f[locs[f"gpu{j}"]].sum() for j in range(m)]
            on_gpu = np.concatenate([locs[f"gpu{j}"] for j in range(m)])
            if on_gpu.size:
                assert max(sums) - min(sums) <= f[on_gpu].max() + 1e-9
    # Hotter features sit in faster tiers on each server: every GPU feature is at least as hot as
    # any host feature, every host feature as any disk feature (FAP order placement).
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    for locs in tpl.servers:
        g = np.concatenate([locs[f"gpu{j}"] for j in range(max(m, 0))] + [np.empty(0, np.int64)])
        for hot, cold in ((g, locs["host"]), (locs["host"], locs["disk"])):
            if hot.size and cold.size:
                assert rank[hot].max() < rank[cold].min()


TOPOLOGIES = {
    "ib_nvlink": Topology(3, 4, 2, 40, 150, None, nvlink=True, infiniband=True),
    "ib_no_nvlink": Topology(2, 4, 2, 40, 150, None, nvlink=False, infiniband=True),
    "no_ib_unbounded": Topology(2, 2, 1, 50, 100, None, nvlink=True, infiniband=False),
    "no_ib_bounded": Topology(3, 2, 1, 50, 200, 150, nvlink=True, infiniband=False),
    "ib_bounded_tight": Topology(4, 2, 2, 30, 100, 130, nvlink=True, infiniband=True),
    "one_server": Topology(1, 8, 2, 20, 300, None, nvlink=True, infiniband=True),
    "no_gpus": Topology(2, 0, 1, 0, 200, None, nvlink=False, infiniband=True),
}


@pytest.mark.parametrize("name", TOPOLOGIES)
def test_topology_placement_invariants(name):
    n = 1000
    f = power_law_fap(n, seed=3)
    order = order_by(f)
    top = TOPOLOGIES[name]
    tpl = place_topology(order, f, top)
    verify(tpl, order, f)
    tpl.check()
    r = tpl.replicated.size
    if top.infiniband and top.servers > 1:
        assert r <= top.numa_gpu_capacity
    if name == "no_ib_unbounded" or name == "one_server":
        assert r == n  # every server holds every feature
    if name == "ib_nvlink":
        assert r == top.numa_gpu_capacity == 80  # (G/C) N_g = 2 * 40
        for locs in tpl.servers:  # the replicated range fills each NUMA node's GPUs exactly
            np.testing.assert_array_equal(np.sort(np.concatenate([locs["gpu0"], locs["gpu1"]])), np.sort(order[:80]))
            assert locs["host"].size == 150
    if name == "no_ib_bounded":
        # T = 100 + 200 + 150 = 450 per server, 3 servers, 1000 features: R = (1350 - 1000) // 2.
        assert r == 175
    if name == "ib_bounded_tight":
        # T = 30 + 100 + 130 = 260, 4 servers: (1040 - 1000) // 3 = 13 < N_gpu = 30: the GPUs also
        # hold partitioned features.
        assert r == 13
        assert all(np.setdiff1d(locs["gpu0"], tpl.replicated).size == 17 for locs in tpl.servers)
    assert tpl.locations_of(int(order[0]))  # the hottest feature is somewhere
    coldest = tpl.locations_of(int(order[-1]))
    assert len({s for s, _ in coldest}) == (top.servers if r == n else 1)


def test_topology_fap_balance_on_random_instances():
    """The greedy keeps the parts' summed FAP within the largest partitioned FAP, over many shapes."""
    rng = np.random.default_rng(11)
    for trial in range(60):
        n = int(rng.integers(5, 120))
        f = rng.pareto(1.0, n) + rng.random(n) * 0.1
        order = order_by(f)
        c = int(rng.choice([1, 2]))
        top = Topology(int(rng.integers(1, 5)), c * int(rng.integers(0, 3)), c, int(rng.integers(0, 8)),
                       int(rng.integers(0, 20)), None if rng.random() < 0.5 else int(rng.integers(0, 60)),
                       nvlink=bool(rng.random() < 0.5), infiniband=bool(rng.random() < 0.5))
        total = top.total_capacity
        if total is not None and top.servers * total < n:
            with pytest.raises(ValueError, match=f"{n - top.servers * total} do not fit"):
                place_topology(order, f, top)
            continue
        verify(place_topology(order, f, top), order, f)


def test_paper_fig8_scenarios():
    """Fig. 8's examples, features 0..4 hottest first (the paper numbers them from 1)."""
    f = np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    order = order_by(f)
    # (a) no NVLink, 2 NUMA nodes x 2 GPUs, one feature per GPU: the hottest on every GPU.
    a = place_topology(order, f, Topology(1, 4, 2, 1, 4, None, nvlink=False, infiniband=False))
    for i in range(4):
        np.testing.assert_array_equal(a.servers[0][f"gpu{i}"], [0])
    np.testing.assert_array_equal(a.servers[0]["host"], [1, 2, 3, 4])
    # (b) NVLink: features 0 and 1 partitioned over a NUMA node's two GPUs, mirrored on the other.
    b = place_topology(order, f, Topology(1, 4, 2, 1, 4, None, nvlink=True, infiniband=False))
    assert [b.servers[0][f"gpu{i}"].tolist() for i in range(4)] == [[0], [1], [0], [1]]
    np.testing.assert_array_equal(b.servers[0]["host"], [2, 3, 4])
    # (c) no InfiniBand: both servers hold everything, the hottest in memory, the rest on disk.
    c = place_topology(order, f, Topology(2, 0, 1, 0, 2, None, nvlink=False, infiniband=False))
    assert c.replicated.tolist() == [0, 1, 2, 3, 4]
    for locs in c.servers:
        assert locs["host"].tolist() == [0, 1] and locs["disk"].tolist() == [2, 3, 4]
    # (d) InfiniBand: the popular features are partitioned over the servers' memory instead (FAP
    # balanced: {0, 3} and {1, 2}, where the paper's figure splits by id range).
    d = place_topology(order, f, Topology(2, 0, 1, 0, 2, None, nvlink=False, infiniband=True))
    assert d.replicated.size == 0
    hosts = [locs["host"].tolist() for locs in d.servers]
    assert hosts == [[0, 3], [1, 2]]
    assert sorted(d.servers[0]["disk"].tolist() + d.servers[1]["disk"].tolist()) == [4]
    assert d.part_fap.tolist() == [8.0, 7.0]  # the disk feature goes to the lighter server 0


def test_topology_errors():
    f = np.ones(100)
    order = order_by(f)
    with pytest.raises(ValueError, match="30 do not fit"):
        place_topology(order, f, Topology(2, 2, 1, 5, 10, 15, nvlink=True, infiniband=True))  # 2 * (10 + 10 + 15) = 70
    with pytest.raises(ValueError, match="multiple of numa_per_server"):
        Topology(1, 3, 2, 5, 10, None, nvlink=True, infiniband=True)
    with pytest.raises(ValueError, match="servers must be an int >= 1"):
        Topology(0, 2, 1, 5, 10, None, nvlink=True, infiniband=True)
    with pytest.raises(ValueError, match="host_capacity"):
        Topology(1, 2, 1, 5, -1, None, nvlink=True, infiniband=True)
    with pytest.raises(ValueError, match="nvlink must be a bool"):
        Topology(1, 2, 1, 5, 1, None, nvlink=1, infiniband=True)
    top = Topology(1, 2, 1, 5, 10, None, nvlink=True, infiniband=True)
    with pytest.raises(ValueError, match="one value per node"):
        place_topology(order, np.ones(99), top)
    with pytest.raises(ValueError, match=">= 0"):
        place_topology(order, -f, top)
    with pytest.raises(ValueError, match="permutation"):
        place_topology(np.zeros(100, dtype=np.int64), f, top)


def test_check_catches_a_broken_placement():
    f = power_law_fap(200)
    order = order_by(f)
    tpl = place_topology(order, f, TOPOLOGIES["ib_nvlink"])
    servers = [dict(s) for s in tpl.servers]
    v = int(servers[1]["host"][0])
    servers[0] = dict(servers[0], disk=np.append(servers[0]["disk"], v))  # a partitioned feature on two servers
    broken = TopologyPlacement(tpl.topology, tuple(servers), tpl.replicated, tpl.owner, tpl.part_fap)
    with pytest.raises(ValueError):
        broken.check()


def test_server_capacity_rule():
    assert Topology(2, 8, 2, 100, 1000, 5000, nvlink=True, infiniband=True).server_capacity == 4 * 100 + 1000
    assert Topology(2, 8, 2, 100, 1000, 5000, nvlink=True, infiniband=False).server_capacity == 400 + 1000 + 5000
    assert Topology(2, 8, 2, 100, 1000, None, nvlink=True, infiniband=False).server_capacity is None
    assert Topology(2, 8, 2, 100, 1000, 5000, nvlink=False, infiniband=True).server_capacity == 100 + 1000


# ---- FAP placement vs the baselines -----------------------------------------------------------

def in_out_apart(n=2000, edges=30_000, seed=3):
    """A directed graph whose out-degree (what "degree" placement ranks by) and in-degree (what
    makes a node's features read: FAP) are unrelated: each edge's source is drawn by one power
    law and its destination by another, over independently shuffled ids."""
    rng = np.random.default_rng(seed)
    w = np.arange(1, n + 1, dtype=np.float64) ** -0.8
    cdf = np.cumsum(w) / w.sum()
    src = rng.permutation(n)[np.minimum(np.searchsorted(cdf, rng.random(edges)), n - 1)]
    dst = rng.permutation(n)[np.minimum(np.searchsorted(cdf, rng.random(edges)), n - 1)]
    return from_edges(src, dst, n, name="in-out-apart")


def sampled_hits(g, score, requests=400, seed=11):
    """Device-tier hits per request, measured: a fifth of the nodes placed on the device tier by
    `score`, then `requests` one-seed requests, seeds drawn uniformly (FAP's p0) by their own
    generator, sampled by the CPU lane's sampler; each request's hits are the node instances of
    its sample tree found on the device tier. Returns (hits, instances) per request."""
    tp = place_tiers(order_by(score), {"device": g.num_nodes // 5, "host": None, "disk": 0})
    seeds = np.random.default_rng(seed).integers(0, g.num_nodes, requests)
    hits, sizes = np.empty(requests), np.empty(requests)
    for i, s in enumerate(seeds):
        ids = np.concatenate(sampling.cpu_sample(g, [int(s)], FANOUTS, salt=seed + i).nodes)
        hits[i], sizes[i] = np.count_nonzero(tp.tier[ids] == 0), ids.size
    return hits, sizes


def beats(a, b, factor=1.0, seed=0) -> bool:
    """Placement a's measured hit rate exceeds factor x b's with 95% confidence: the bootstrap
    interval (requests resampled, paired: both placements saw the same requests) of
    rate(a) - factor x rate(b) lies above 0."""
    (ha, n), (hb, _) = a, b
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n.size, (2000, n.size))
    diff = (ha[idx].sum(1) - factor * hb[idx].sum(1)) / n[idx].sum(1)
    return bool(np.quantile(diff, 0.025) > 0)


def fap_placement_wins(g, fap_score):
    """The claim under test: FAP placement's hit rate, measured on sampled accesses, beats degree
    order's and doubles a random (hash) placement's."""
    fap_hits = sampled_hits(g, fap_score)
    return (beats(fap_hits, sampled_hits(g, scores(g, "degree"))) and
            beats(fap_hits, sampled_hits(g, scores(g, "hash")), factor=2.0))


def test_fap_placement_beats_degree_and_hash_on_sampled_accesses():
    """Hit rates measured on sampled traces (seeds drawn apart from FAP, which is computed from the
    graph alone), on a graph where FAP and degree order differ."""
    g = in_out_apart()
    f = metrics.fap(g, FANOUTS)
    top = g.num_nodes // 5
    overlap = np.intersect1d(order_by(f)[:top], order_by(g.degree)[:top]).size / top
    assert overlap < 0.5  # the two orders really differ here
    assert fap_placement_wins(g, f)


def test_the_fap_test_fails_when_placement_is_degree_order():
    """The same check, given degree order in place of FAP: it must fail (it can)."""
    g = in_out_apart()
    assert not fap_placement_wins(g, scores(g, "degree"))


def test_fap_placement_on_a_power_law_graph_doubles_hash(small):
    """On the undirected preset FAP and degree order nearly coincide; FAP still doubles a random
    placement's measured hit rate and is not beaten by degree order."""
    g, f = small
    fap_hits, deg_hits = sampled_hits(g, f), sampled_hits(g, scores(g, "degree"))
    assert beats(fap_hits, sampled_hits(g, scores(g, "hash")), factor=2.0)
    assert not beats(deg_hits, fap_hits)
