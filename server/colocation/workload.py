"""workload.py: graph-shaped requests for the co-location scheduler: synthetic graphs with the shapes of pubmed and artist (made with torch-geometric), random subgraphs of them as requests, and 100-request queues of GCN, SAGE, GIN or a mix with Poisson arrivals (after GNNSched, Sun et al., 2024).

A graph is a Barabási–Albert graph (torch_geometric.utils.barabasi_albert_graph, undirected, so
each edge is listed both ways) with the dataset's node count and about its edge count (the
attachment count m = round(E / 2N)); a request is what an inference request for a batch of target
nodes reads: the 2-hop neighbourhood of a random batch of seed nodes (1 .. 64, log-uniform), with
every edge among those nodes (torch_geometric.utils.k_hop_subgraph, relabelled), and random float32
features of the dataset's width. GNNSched's evaluation draws 25 random subgraphs per dataset, runs 100-request
queues per model and a MIX queue sampled from them, and lets a Poisson number of requests (mean 1:
low load, 2: high load) arrive together. It does not say how often. Here a batch of arrivals comes
every `slot` seconds, the mean standalone time of the queue's requests (the simulator sets the
slot), and the load is the utilisation of one-at-a-time (serial) service: a Poisson number of mean
u arrives per slot, so u = 1 is what serial service can just carry. The paper's regime, where its
low load leaves co-located policies no queueing at all, lies well below that: the sweep is
UTILISATIONS, and the paper's loads are mapped onto it (LOADS: low 0.3, medium 0.5, high 0.7,
keeping about its 1 : 2 ratio of low to high; the mapping is ours, the paper gives no slot). An
earlier version used means of 1 and 2 per slot, i.e. utilisation 1 and 2, where every policy
queues.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

# name: (nodes, edges, features, classes), GNNSched's Table 4
DATASETS = {"pubmed": (19_717, 88_676, 500, 3), "artist": (50_515, 1_638_396, 100, 12)}
QUEUES = ("gcn", "sage", "gin", "mix")
UTILISATIONS = (0.3, 0.5, 0.7, 0.9)  # the load sweep: utilisation of serial service (mean arrivals per slot)
LOADS = {"low": 0.3, "medium": 0.5, "high": 0.7}  # the paper's named loads on that sweep (see above)
SUBGRAPHS = 25                      # per dataset
QUEUE_LENGTH = 100
HOPS = 2
SEEDS = (1, 64)                     # a request's seed batch: log-uniform in this range


@dataclass(frozen=True)
class Subgraph:
    dataset: str
    nodes: int        # NN
    edges: int        # NE (directed: each undirected edge twice)
    features: int     # F
    index: int        # which of the dataset's subgraphs


@dataclass(frozen=True)
class Item:
    """One request of a queue: a model over a subgraph, arriving with batch `slot` (0, 1, ...)."""
    seq: int
    model: str
    graph: Subgraph
    slot: int


@lru_cache(maxsize=4)
def graph(dataset: str, *, scale: float = 1.0, seed: int = 0):
    """The synthetic graph of `dataset` at `scale` (a fraction of its nodes, same average degree):
    an int64 edge_index (2, E) over num_nodes nodes, as (edge_index, num_nodes)."""
    import torch
    from torch_geometric.utils import barabasi_albert_graph

    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    if not 0 < scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {scale}")
    n, e, _, _ = DATASETS[dataset]
    nodes = max(int(round(n * scale)), 4)
    m = max(1, int(round(e / (2 * n))))
    np_state = np.random.get_state()  # it draws from numpy's global generator too: seeded, then put back
    try:
        np.random.seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            ei = barabasi_albert_graph(nodes, min(m, nodes - 1))
    finally:
        np.random.set_state(np_state)
    return ei, nodes


def subgraph_edges(dataset: str, index: int, *, scale: float = 1.0, seed: int = 0):
    """Subgraph `index` of `dataset`: (edge_index (2, NE) int64 relabelled to 0 .. NN-1, NN)."""
    import torch
    from torch_geometric.utils import k_hop_subgraph

    ei, nodes = graph(dataset, scale=scale, seed=seed)
    rng = np.random.default_rng([seed, index, len(dataset)])
    batch = int(round(np.exp(rng.uniform(np.log(SEEDS[0]), np.log(SEEDS[1])))))
    seeds = torch.from_numpy(rng.choice(nodes, size=min(batch, nodes), replace=False))
    subset, sub, _, _ = k_hop_subgraph(seeds, HOPS, ei, relabel_nodes=True, num_nodes=nodes)
    return sub, int(subset.numel())


@lru_cache(maxsize=8)
def subgraphs(*, scale: float = 1.0, seed: int = 0, per_dataset: int = SUBGRAPHS) -> tuple[Subgraph, ...]:
    """The requests' subgraph shapes: `per_dataset` of each dataset (nodes, edges, features).
    A subgraph left without edges gets one self-edge count (NE >= 1: a request needs edges)."""
    out = []
    for ds, (_, _, feats, _) in DATASETS.items():
        for i in range(per_dataset):
            ei, nn = subgraph_edges(ds, i, scale=scale, seed=seed)
            out.append(Subgraph(ds, nn, max(int(ei.shape[1]), 1), feats, i))
    return tuple(out)


def utilisation(load) -> float:
    """A load as the utilisation of serial service: a name of LOADS or a positive number (at most
    4). ValueError otherwise."""
    if isinstance(load, str):
        if load in LOADS:
            return LOADS[load]
        try:
            load = float(load)
        except ValueError:
            raise ValueError(f"unknown load {load!r}: a utilisation (e.g. {UTILISATIONS}) or one of "
                             f"{', '.join(LOADS)}") from None
    if isinstance(load, bool) or not isinstance(load, (int, float)) or not 0 < load <= 4:
        raise ValueError(f"a load is a utilisation of serial service in (0, 4], got {load!r}")
    return float(load)


def make_queue(kind: str, *, load="high", length: int = QUEUE_LENGTH,
               shapes: tuple[Subgraph, ...] | None = None, seed: int = 0) -> list[Item]:
    """A queue of `length` requests: model `kind` (gcn, sage, gin) or "mix" (each request's model
    drawn uniformly), subgraphs drawn uniformly from `shapes` (default: subgraphs(seed=seed)), arrivals
    in batches of Poisson(u) requests, one batch per slot (slots 0, 1, ...; many are empty), u the
    load's utilisation (utilisation())."""
    if kind not in QUEUES:
        raise ValueError(f"unknown queue {kind!r}; known: {', '.join(QUEUES)}")
    u = utilisation(load)
    shapes = shapes if shapes is not None else subgraphs(seed=seed)
    rng = np.random.default_rng([seed, QUEUES.index(kind), int(round(u * 100))])
    items, slot = [], 0
    while len(items) < length:
        for _ in range(min(int(rng.poisson(u)), length - len(items))):
            model = kind if kind != "mix" else ("gcn", "sage", "gin")[int(rng.integers(3))]
            items.append(Item(len(items), model, shapes[int(rng.integers(len(shapes)))], slot))
        slot += 1
    return items
