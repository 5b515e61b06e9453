"""tier.py: the interface every tier below the L1 cache implements (the L2 hash map and Redis, the L3 RocksDB), as HPS declares its database backend: lookup, insert or update, dump, stats, close, and what each may raise; plus the one check of a batch that they share (after HPS, Wei et al., RecSys 2022).

Contract (tests/test_embedding_tiers.py runs the same suite against each tier):
- get(table, keys) -> (vectors (n, dim) float32, found (n,) bool): rows not found are zeros.
  A volatile tier whose backend is down answers "not found" (counted in stats), never raises for it.
- put(table, keys, vectors): insert or update; the last write of a key wins. put_many({table:
  (keys, vectors)}) does several tables at once (RocksDB: one atomic batch). A volatile tier may
  drop writes while its backend is down (counted in stats as dropped_writes); the L2 hash map
  may evict past its capacity (counted as evicted).
- dump(table) -> (keys int64 ascending, vectors (n, dim) float32): everything the tier holds now.
- stats() -> {"name": the tier's name, "keys": {table: keys held}, ...its own counters}.
- close(): frees the tier; no call may run meanwhile or after.
- Every call raises KeyError for a table the tier was not made with, and ValueError (before
  anything is written) for keys that are not 1-D integers or vectors that are not (len(keys), dim).

Threads: each tier is safe to call from any number of threads at once (see each class).
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from splitrpc.services.embedding.tables import TableSpec


@runtime_checkable
class Tier(Protocol):
    name: str
    specs: dict

    def get(self, table: str, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def put(self, table: str, keys: np.ndarray, vectors: np.ndarray) -> None: ...

    def put_many(self, by_table: dict) -> None: ...

    def dump(self, table: str) -> tuple[np.ndarray, np.ndarray]: ...

    def stats(self) -> dict: ...

    def close(self) -> None: ...


def table_spec(specs: dict, table: str) -> TableSpec:
    """The spec of table; KeyError naming the tables there are."""
    try:
        return specs[table]
    except KeyError:
        raise KeyError(f"no table {table!r} in this tier (tables: {', '.join(specs)})") from None


def check_keys(keys) -> np.ndarray:
    """keys as a 1-D int64 array; ValueError for anything else."""
    k = np.asarray(keys)
    if k.ndim != 1 or (k.size and not np.issubdtype(k.dtype, np.integer)):
        raise ValueError(f"keys must be a 1-D array of integers, got {k.dtype}{list(k.shape)}")
    return k.astype(np.int64, copy=False)


def check_batch(specs: dict, table: str, keys, vectors) -> tuple[np.ndarray, np.ndarray]:
    """(keys int64 (n,), vectors float32 (n, dim)) of a write; KeyError, ValueError as the contract says."""
    spec = table_spec(specs, table)
    k = check_keys(keys)
    v = np.asarray(vectors)
    if v.shape != (k.size, spec.dim) or (v.size and not np.issubdtype(v.dtype, np.number)):
        raise ValueError(f"table {table!r}: vectors must be ({k.size}, {spec.dim}) numbers, got {v.dtype}{list(v.shape)}")
    return k, np.ascontiguousarray(v, np.float32)


def sorted_dump(keys: list, rows: list, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """dump()'s answer from keys and their vectors in any order."""
    if not keys:
        return np.zeros(0, np.int64), np.zeros((0, dim), np.float32)
    k = np.asarray(keys, np.int64)
    order = np.argsort(k, kind="stable")
    return k[order], np.asarray(rows, np.float32).reshape(len(keys), dim)[order]
