"""splitrpc.loadgen.planning: offline planning under a latency SLA, after Hercules (Ke et al., "Hercules: Heterogeneity-Aware Inference Serving for At-Scale Personalized Recommendation", HPCA 2022): the configuration search, its measuring side (`splitrpc plan tune`), the capacity measurement (latency-bounded QPS), and cluster provisioning over a day of load (`splitrpc plan provision`).

Each module imports what it uses: the search needs numpy only; provisioning's integer program
needs scipy (the `fleet` extra); tuning serves the model zoo (the `models` extra).
"""
