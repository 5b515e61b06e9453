"""sage_gat.py: GraphSAGE and GAT (torch-geometric's SAGEConv and GATConv) over a Sample's levels, and the full-neighbourhood reference over the whole graph (after Quiver, Tan et al., arXiv 2023).

K layers for K hops: layer j (1..K) updates levels 0 .. K-j, level k from level k+1 through hop
k+1's edges (``conv_j((h[k+1], h[k]), edge_index)``), so the last layer leaves the seeds' logits.
Without sampling (every fan-out at least the largest degree) the levels hold every neighbour and
the result equals ``full_graph_logits``, which runs the same convolutions over all edges of the
graph (messages from out-neighbours). Nodes without out-edges aggregate nothing (SAGE: the
neighbour term is 0; GAT: no attention, only the bias) in both. Weights are random from a seed.
"""
from __future__ import annotations

import numpy as np
import torch

MODELS = ("graphsage", "gat")
GAT_HEADS = 4


def build(name: str, in_dim: int, classes: int, *, hidden: int, hops: int, seed: int = 0):
    """The model `name` ("graphsage" or "gat") with `hops` layers, weights from `seed`, in eval mode."""
    from torch_geometric.nn import GATConv, SAGEConv

    if name not in MODELS:
        raise ValueError(f"unknown GNN model {name!r}; known: {', '.join(MODELS)}")
    if hops < 1:
        raise ValueError("a GNN needs at least one layer (hop)")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        convs = []
        if name == "graphsage":
            dims = [in_dim] + [hidden] * (hops - 1) + [classes]
            for a, b in zip(dims, dims[1:]):
                convs.append(SAGEConv((a, a), b, aggr="mean"))
            act = torch.nn.functional.relu
        else:
            d = in_dim
            for _ in range(hops - 1):
                convs.append(GATConv((d, d), hidden, heads=GAT_HEADS, concat=True, add_self_loops=False))
                d = hidden * GAT_HEADS
            convs.append(GATConv((d, d), classes, heads=1, concat=False, add_self_loops=False))
            act = torch.nn.functional.elu
        model = _Levels(torch.nn.ModuleList(convs), act, name)
    return model.eval()


class _Levels(torch.nn.Module):
    def __init__(self, convs, act, name: str):
        super().__init__()
        self.convs, self.act, self.kind = convs, act, name

    def forward(self, sample, features):
        """Logits (seeds, classes) of a Sample; features: a (num_nodes, dim) float32 tensor."""
        dev = features.device
        idx = [torch.as_tensor(n, dtype=torch.int64).to(dev) for n in sample.nodes]
        edges = [torch.stack([torch.as_tensor(s, dtype=torch.int64), torch.as_tensor(d, dtype=torch.int64)]).to(dev)
                 for s, d in sample.edges]
        h = [features.index_select(0, i) for i in idx]
        k_hops = len(edges)
        if len(self.convs) != k_hops:
            raise ValueError(f"the model has {len(self.convs)} layers, the sample {k_hops} hops")
        for j, conv in enumerate(self.convs):
            new = []
            for k in range(k_hops - j):
                out = conv((h[k + 1], h[k]), edges[k])
                new.append(self.act(out) if j < k_hops - 1 else out)
            h = new
        return h[0]

    def full_graph(self, edge_index, features):
        """Every node's logits over the whole graph (edge_index: messages from row 0 to row 1)."""
        h = features
        last = len(self.convs) - 1
        for j, conv in enumerate(self.convs):
            h = conv((h, h), edge_index)
            if j < last:
                h = self.act(h)
        return h


def forward(model, sample, features):
    """model(sample, features) under inference mode: (seeds, classes) float32 logits."""
    with torch.inference_mode():
        return model(sample, features)


def full_graph_logits(model, graph, features, seeds) -> np.ndarray:
    """The full-neighbourhood reference: logits of `seeds` with every neighbour of every hop."""
    with torch.inference_mode():
        ei = torch.from_numpy(graph.edge_index())
        out = model.full_graph(ei, features)
        return out[torch.as_tensor(np.asarray(seeds, np.int64))].numpy()
