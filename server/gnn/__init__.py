"""splitrpc.services.gnn: GNN serving with workload awareness (Quiver): graph store, PSGS/FAP metrics, feature placement and tiers, two sampling lanes routed by PSGS, GraphSAGE/GAT (after Quiver, Tan et al., arXiv 2023).

Needs the `gnn` extra (scipy, PyTorch, torch-geometric, lmdb): ``pip install 'splitrpc[gnn]'``.
Importing this package itself needs only numpy; each module imports what it uses.
"""
