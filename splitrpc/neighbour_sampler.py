"""neighbour_sampler.py: the native CPU neighbour sampler (per-seed sample trees, one node's sample, expected tree sizes; splitrpc_gnn.h states the sampling rule) for GNN serving. Calls release the GIL, so lanes on other threads run meanwhile. The public face of splitrpc._native.gnn; ValueError for a bad graph, seed or fan-out."""
from splitrpc._native.gnn import CSR, MAX_FANOUT, MAX_HOPS, draw, sample_node, sample_trees, tree_sizes

__all__ = ["CSR", "MAX_HOPS", "MAX_FANOUT", "sample_trees", "sample_node", "draw", "tree_sizes"]
