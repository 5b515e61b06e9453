"""splitrpc.services.colocation: co-locating GNN services on one device safely (GNNSched): per-request peak-memory (PMC) estimates, group scheduling by FIFO / SQTF / BQT under a memory budget, and a discrete-event device simulator driven by the same scheduler (after GNNSched, Sun et al., 2024).

Needs PyTorch for the models and the estimator (the `gnn` extra); the grouping policies and the
simulator need only numpy. Each module imports what it uses.
"""
