"""splitrpc.services.embedding: embedding lookups at serving speed (HugeCTR HPS): a cache in C over a host-memory tier and a persistent RocksDB tier, the hit-rate threshold, asynchronous insertion and periodic refresh (after HPS, Wei et al., RecSys 2022).

Needs the `embedding` extra (rocksdict, xxhash; redis for the Redis tier). Each module imports what it uses.
"""
