"""test_gnn_metrics.py: PSGS and FAP (splitrpc.services.gnn.metrics) against exhaustive enumeration of sample trees with exact fractions, on toy graphs, the paper's examples and random graphs."""
import functools
import itertools
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

pytest.importorskip("scipy")

from splitrpc.services.gnn import metrics  # noqa: E402
from splitrpc.services.gnn.graph import from_edges, synthetic  # noqa: E402

TOL = 1e-12


# ---- brute force: exhaustive over the sampler's choices, exact arithmetic -------------------

def neighbour_lists(g) -> list:
    return [tuple(int(u) for u in g.neighbours(v)) for v in range(g.num_nodes)]


def all_trees(nbrs, v, fanouts):
    """Every sample tree rooted at v: (probability, tuple of the node instances in it). v samples
    each min(deg, l) subset of its out-neighbours with probability 1 / C(deg, m); every sampled
    neighbour grows its own tree with the remaining fan-outs, independently."""
    if not fanouts:
        yield Fraction(1), (v,)
        return
    subsets = list(itertools.combinations(nbrs[v], min(len(nbrs[v]), fanouts[0])))  # [()] without out-edges
    for sub in subsets:
        for combo in itertools.product(*(list(all_trees(nbrs, u, fanouts[1:])) for u in sub)):
            p, nodes = Fraction(1, len(subsets)), (v,)
            for cp, cn in combo:
                p *= cp
                nodes += cn
            yield p, nodes


def expected_counts(nbrs, fanouts) -> "callable":
    """E[#instances of each node in the tree of seed v], over every subset choice (exhaustive over
    combinations at each node and depth; subtrees are independent, so expectations add)."""
    @functools.lru_cache(maxsize=None)
    def counts(v, depth):
        out = Counter({v: Fraction(1)})
        if depth == len(fanouts):
            return out
        subsets = list(itertools.combinations(nbrs[v], min(len(nbrs[v]), fanouts[depth])))
        for sub in subsets:
            for u in sub:
                for w, c in counts(u, depth + 1).items():
                    out[w] += c / len(subsets)
        return out

    return lambda v: counts(v, 0)


def brute_psgs(g, fanouts) -> list:
    ec = expected_counts(neighbour_lists(g), tuple(fanouts))
    return [sum(ec(v).values()) for v in range(g.num_nodes)]


def brute_fap(g, fanouts, p0) -> list:
    """FAP[w] = sum over seeds of p0[seed] * E[#instances of w in the seed's tree]; p0 exact."""
    ec = expected_counts(neighbour_lists(g), tuple(fanouts))
    out = [Fraction(0)] * g.num_nodes
    for s in range(g.num_nodes):
        if p0[s]:
            for w, c in ec(s).items():
                out[w] += p0[s] * c
    return out


def brute_tree_psgs(g, fanouts) -> list:
    """The expected tree size from the full distribution of whole trees (tiny graphs only)."""
    nbrs = neighbour_lists(g)
    out = []
    for v in range(g.num_nodes):
        trees = list(all_trees(nbrs, v, tuple(fanouts)))
        assert sum(p for p, _ in trees) == 1
        out.append(sum(p * len(nodes) for p, nodes in trees))
    return out


def exact_p0(g, kind):
    n = g.num_nodes
    if isinstance(kind, str) and kind == "uniform":
        return [Fraction(1, n)] * n
    if isinstance(kind, str) and kind == "degree":
        d = [int(x) for x in g.degree]
        return [Fraction(x, sum(d)) for x in d]
    w = [Fraction(int(x)) for x in kind]
    return [x / sum(w) for x in w]


def assert_close(got, want):
    want = np.array([float(x) for x in want])
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)


# ---- toy graphs --------------------------------------------------------------------------------

def path(n=5, undirected=False):
    return from_edges(np.arange(n - 1), np.arange(1, n), n, undirected=undirected)


def star(leaves=4, back=True):
    """Hub 0 out to leaves 1..leaves; with back, every leaf also points back at the hub."""
    hub = np.zeros(leaves, dtype=np.int64)
    lv = np.arange(1, leaves + 1)
    return from_edges(hub, lv, leaves + 1, undirected=back)


def self_loop_graph():
    return from_edges([0, 0, 1, 1, 2], [0, 1, 0, 2, 2], 3, self_loops=True)


TOYS = {"path": path(), "undirected_path": path(undirected=True), "star": star(),
        "directed_star": star(back=False), "self_loop": self_loop_graph()}
TOY_FANOUTS = [(1,), (1, 1), (2, 2), (1, 2, 3), (3, 1, 2)]


@pytest.mark.parametrize("name", TOYS)
@pytest.mark.parametrize("fanouts", TOY_FANOUTS)
def test_psgs_matches_whole_tree_enumeration_on_toy_graphs(name, fanouts):
    g = TOYS[name]
    want = brute_tree_psgs(g, fanouts)
    assert want == brute_psgs(g, fanouts)  # the two brute forces agree exactly
    assert_close(metrics.psgs(g, fanouts), want)


@pytest.mark.parametrize("name", TOYS)
@pytest.mark.parametrize("fanouts", TOY_FANOUTS)
@pytest.mark.parametrize("p0", ["uniform", "degree"])
def test_fap_matches_enumeration_on_toy_graphs(name, fanouts, p0):
    g = TOYS[name]
    assert_close(metrics.fap(g, fanouts, p0), brute_fap(g, fanouts, exact_p0(g, p0)))


def test_toy_values_by_hand():
    # Directed path 0->1->2->3->4 with fan-out 1 per hop: every tree is the path itself.
    np.testing.assert_array_equal(metrics.psgs(path(), (1, 1)), [3, 3, 3, 2, 1])
    # Directed star: the hub samples 2 of 4 leaves, leaves have no out-edges and sample nothing.
    q = metrics.psgs(star(back=False), (2, 5))
    np.testing.assert_array_equal(q, [3, 1, 1, 1, 1])
    # Each leaf is in the hub's tree with probability 2/4: FAP = 1/5 (as a seed) + 1/5 * 1/2.
    np.testing.assert_allclose(metrics.fap(star(back=False), (2,)), [0.2, 0.3, 0.3, 0.3, 0.3], atol=TOL)
    # Self-loop: node 2's only out-neighbour is itself, so its tree is a chain of 2s.
    assert metrics.psgs(self_loop_graph(), (1, 1, 1))[2] == 4


def test_paper_fig5_psgs_example():
    """Fig. 5 (reconstructed; the figure itself is not available): node 3 has two out-neighbours,
    node 0 (out-degree 1) and node 5 (no out-edges). The text computes q_1[3] = min(2, 1) = 1 and
    q_2[3] = 1/2 * 1, i.e. hop sizes (1, 2) although it names them "2 and 1": Q[3] = 2.5."""
    g = from_edges([3, 3, 0, 1, 2, 4], [0, 5, 1, 2, 3, 3], 6)
    assert list(g.neighbours(3)) == [0, 5] and g.degree[0] == 1 and g.degree[5] == 0
    q = metrics.psgs(g, (1, 2))
    assert q[3] == pytest.approx(2.5, abs=TOL)
    assert brute_psgs(g, (1, 2))[3] == Fraction(5, 2)
    assert brute_tree_psgs(g, (1, 2))[3] == Fraction(5, 2)
    assert metrics.psgs(g, (1,))[3] == 2  # q_0 + q_1 = 1 + 1
    assert_close(q, brute_psgs(g, (1, 2)))


def test_paper_fig7_fap_example():
    """Fig. 7 (reconstructed): the text gives p_0 = 1/6, p_1[3] = 1/6 * 1/2 + 1/6 * 1 and p_2[3] =
    1/6 * 1 * 1/2 via 4 -> 0 -> 3. It names node 3's in-neighbours "0 and 3", but a self-loop on 3
    would add the 2-hop paths 0 -> 3 -> 3 and 3 -> 3 -> 3, contradicting p_2[3] = 1/12; the reading
    the formula reproduces with fan-outs (1, 1) is that the second in-neighbour is another node
    (here 5, out-degree 1, no in-edges). Node 0 has out-degree 2 (to 3 and 1), node 4 only -> 0.
    FAP[3] = 1/6 + 1/4 + 1/12 = 1/2."""
    g = from_edges([0, 0, 4, 5, 3, 1], [3, 1, 0, 3, 2, 2], 6)
    p0 = exact_p0(g, "uniform")
    f1 = metrics.fap(g, (1,))
    assert f1[3] == pytest.approx(Fraction(1, 6) + Fraction(1, 4), abs=TOL)  # p_0 + p_1
    f2 = metrics.fap(g, (1, 1))
    assert f2[3] == pytest.approx(0.5, abs=TOL)
    want = brute_fap(g, (1, 1), p0)
    assert want[3] == Fraction(1, 2)
    assert_close(f2, want)


def random_graph(seed, n=8, p=0.45, self_loops=False):
    rng = np.random.default_rng(seed)
    a = rng.random((n, n)) < p
    src, dst = np.nonzero(a)
    return from_edges(src, dst, n, self_loops=self_loops)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("fanouts", [(2, 1), (1, 3), (3, 2, 1)])
def test_random_graphs_match_enumeration(seed, fanouts):
    g = random_graph(seed, self_loops=seed % 2 == 1)
    assert g.num_edges > 0
    assert_close(metrics.psgs(g, fanouts), brute_psgs(g, fanouts))
    weights = np.random.default_rng(100 + seed).integers(0, 5, g.num_nodes)
    weights[seed % g.num_nodes] += 1  # never all zero
    for p0 in ("uniform", "degree", weights):
        exact = exact_p0(g, p0 if isinstance(p0, str) else weights)
        assert_close(metrics.fap(g, fanouts, p0), brute_fap(g, fanouts, exact))


def test_random_graph_with_sinks_matches_enumeration():
    g = random_graph(7, n=8, p=0.3)
    # Make nodes 6 and 7 sinks (no out-edges): keep edges from 0..5 only.
    src = np.repeat(np.arange(8), g.degree)
    keep = src < 6
    g = from_edges(src[keep], g.indices[keep], 8)
    assert g.degree[6] == g.degree[7] == 0
    for fanouts in [(2, 2), (3, 1, 2)]:
        assert_close(metrics.psgs(g, fanouts), brute_psgs(g, fanouts))
        assert_close(metrics.fap(g, fanouts), brute_fap(g, fanouts, exact_p0(g, "uniform")))


def test_fap_sums_to_mean_psgs_and_unbounded_fanout_is_full_expansion():
    g = synthetic("small")
    q = metrics.psgs(g, (10, 5))
    for p0 in ("uniform", "degree"):
        p = metrics.seed_distribution(g, p0)
        assert metrics.fap(g, (10, 5), p0).sum() == pytest.approx(p @ q, rel=1e-10)
    # A fan-out above every degree samples every neighbour: PSGS = 1 + A(1 + A 1).
    a = g.adjacency()
    big = int(g.degree.max()) + 1
    full = 1 + a @ (1 + a @ np.ones(g.num_nodes))
    np.testing.assert_allclose(metrics.psgs(g, (big, big)), full, rtol=1e-12)
    assert q.shape == (g.num_nodes,) and q.dtype == np.float64 and q.min() >= 1


@pytest.mark.parametrize("fanouts", [(), (0,), (2, -1), (1.5,), ("2",), "12", 3, (True,), None])
def test_bad_fanouts(fanouts):
    with pytest.raises(ValueError, match="fanouts"):
        metrics.psgs(path(), fanouts)
    with pytest.raises(ValueError, match="fanouts"):
        metrics.fap(path(), fanouts)


@pytest.mark.parametrize("p0, msg", [
    ("zipf", "must be one of"),
    ([0.2] * 4, r"shape \(5,\)"),
    ([0.2, 0.2, np.nan, 0.2, 0.2], "finite; node 2"),
    ([0.2, -0.1, 0.3, 0.3, 0.3], ">= 0; node 1"),
    ([0, 0, 0, 0, 0], "sum to > 0"),
    ([[0.2] * 5], "shape"),
    (["a"] * 5, "weights"),
])
def test_bad_p0(p0, msg):
    with pytest.raises(ValueError, match=msg):
        metrics.fap(path(), (1,), p0)


def test_degree_p0_needs_edges():
    empty = from_edges([], [], 4)
    np.testing.assert_array_equal(metrics.psgs(empty, (3,)), [1, 1, 1, 1])
    np.testing.assert_allclose(metrics.fap(empty, (3,)), [0.25] * 4)
    with pytest.raises(ValueError, match="needs a graph with edges"):
        metrics.fap(empty, (3,), "degree")


def test_given_p0_is_normalised():
    g = path()
    f = metrics.fap(g, (1, 1), [0, 0, 2, 0, 0])  # only node 2 is a seed: tree 2 -> 3 -> 4
    np.testing.assert_allclose(f, [0, 0, 1, 1, 1], atol=TOL)
