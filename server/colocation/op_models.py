"""op_models.py: GCN, GraphSAGE and GIN built only from the operators of GNNSched's Table 2 (Propagate, Matmul, Linear), so every tensor a forward pass allocates is one the PMC rules name (after GNNSched, Sun et al., 2024).

A request is a subgraph: node features x (NN, F) float32 and edge_index (2, NE) int64, row 0 each
edge's source and row 1 its destination, ids in 0 .. NN - 1. Every layer aggregates by a sum over
in-edges: GCN is (A + I) H W (self-loops, no degree normalisation), SAGE is W_l (A H) + W_r H + b,
GIN is MLP(H + A H) (eps = 0). Sum aggregation keeps a layer to Table 2's tensors (a mean or a
symmetric normalisation adds an NN- or NE-sized vector per request). Weights are random from a
seed: these models are workloads for the co-location scheduler, not trained predictors. The
layers drop each intermediate at its last use (the estimator's liveness rule), except that a
layer's input stays referenced by the caller until the layer returns.
"""
from __future__ import annotations

import torch

MODELS = ("gcn", "sage", "gin")
HIDDEN = 256   # the paper's layer width
LAYERS = 8     # ... and depth


def propagate(h: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """Table 2's Propagate: each node's sum over its in-edges of the source rows. Allocates the
    gathered messages (NE, F), freed when this returns, and the output (NN, F)."""
    msg = h.index_select(0, edge_index[0])
    out = torch.zeros_like(h)
    out.index_add_(0, edge_index[1], msg)
    return out


class GCNLayer(torch.nn.Module):
    """(A + I) H W: Propagate, the self-loop added in place, then Matmul (weights Fin x Fout, no bias)."""

    def __init__(self, fin: int, fout: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(fin, fout))
        torch.nn.init.xavier_uniform_(self.weight)

    def forward(self, h, edge_index):
        a = propagate(h, edge_index)
        a.add_(h)
        return a @ self.weight


class SAGELayer(torch.nn.Module):
    """W_l (A H) + b + W_r H: Propagate, then two Linears (the root one without bias), summed in place."""

    def __init__(self, fin: int, fout: int):
        super().__init__()
        self.lin_l = torch.nn.Linear(fin, fout)
        self.lin_r = torch.nn.Linear(fin, fout, bias=False)

    def forward(self, h, edge_index):
        out = self.lin_l(propagate(h, edge_index))
        out.add_(self.lin_r(h))
        return out


class GINLayer(torch.nn.Module):
    """MLP(H + A H): Propagate, the node itself added in place, then Linear, ReLU (in place), Linear."""

    def __init__(self, fin: int, fout: int):
        super().__init__()
        self.lin1 = torch.nn.Linear(fin, fout)
        self.lin2 = torch.nn.Linear(fout, fout)

    def forward(self, h, edge_index):
        a = propagate(h, edge_index)
        a.add_(h)
        z = self.lin1(a)
        del a
        z.relu_()
        return self.lin2(z)


_LAYERS = {"gcn": GCNLayer, "sage": SAGELayer, "gin": GINLayer}


class GNN(torch.nn.Module):
    """`layers` layers of one kind, widths in_dim -> hidden ... -> classes, ReLU (in place) between them."""

    def __init__(self, kind: str, dims: list[int]):
        super().__init__()
        self.kind, self.dims = kind, list(dims)
        self.layers = torch.nn.ModuleList(_LAYERS[kind](a, b) for a, b in zip(dims, dims[1:]))

    def forward(self, x, edge_index):
        h = x
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            h = layer(h, edge_index)
            if i < last:
                h.relu_()
        return h


def build(kind: str, in_dim: int, *, hidden: int = HIDDEN, layers: int = LAYERS, classes: int | None = None,
          seed: int = 0) -> GNN:
    """The model `kind` (one of MODELS) with `layers` layers, in eval mode, weights from `seed`;
    classes None: the last layer is `hidden` wide too."""
    if kind not in MODELS:
        raise ValueError(f"unknown model {kind!r}; known: {', '.join(MODELS)}")
    if layers < 1 or in_dim < 1 or hidden < 1 or (classes is not None and classes < 1):
        raise ValueError("a model needs at least one layer and positive widths")
    dims = [in_dim] + [hidden] * (layers - 1) + [hidden if classes is None else classes]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GNN(kind, dims)
    return model.eval()


def random_request(nn: int, ne: int, features: int, *, seed: int = 0, device="cpu"):
    """A random subgraph request: (x (nn, features) float32, edge_index (2, ne) int64)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(nn, features, generator=g)
    ei = torch.randint(0, nn, (2, ne), generator=g, dtype=torch.int64)
    return x.to(device), ei.to(device)
