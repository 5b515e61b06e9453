"""hashmap.py: the volatile tier in host memory (HPS's L2 hash map): per table, PARTITIONS partitions chosen by XXH64 of the key, each an LRU (or random-eviction) map of key to vector with a lock, an overflow margin past its capacity before it evicts back down (after HPS, Wei et al., RecSys 2022)."""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from splitrpc.services.embedding.tables import TableSpec, partitions
from splitrpc.services.embedding.tier import check_batch, check_keys, sorted_dump, table_spec

PARTITIONS = 16
EVICTIONS = ("lru", "random")


class _Partition:
    def __init__(self):
        self.map: OrderedDict[int, np.ndarray] = OrderedDict()
        self.lock = threading.Lock()


class HashMapTier:
    """L2 for several tables: capacity keys per table (spread over the partitions); a partition
    past its share times (1 + overflow_margin) evicts ("lru": least recently read or written;
    "random") back to its share. Thread-safe (a lock per partition)."""

    name = "hashmap"

    def __init__(self, specs: list[TableSpec], capacity: int, *, partitions: int = PARTITIONS,
                 overflow_margin: float = 0.1, eviction: str = "lru", seed: int = 0):
        if capacity < 1 or partitions < 1 or not 0 <= overflow_margin <= 10:
            raise ValueError("capacity and partitions must be positive, overflow_margin in 0 .. 10")
        if eviction not in EVICTIONS:
            raise ValueError(f"eviction must be one of {EVICTIONS}, got {eviction!r}")
        self.specs = {s.name: s for s in specs}
        self.partitions, self.eviction = partitions, eviction
        self.share = max(1, -(-capacity // partitions))
        self.limit = int(self.share * (1 + overflow_margin))
        self._parts = {s.name: [_Partition() for _ in range(partitions)] for s in specs}
        self._rng = np.random.default_rng(seed)
        self.evicted = 0

    def get(self, table: str, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(vectors (n, dim), found (n,) bool) of keys; rows not found are zeros."""
        spec = table_spec(self.specs, table)
        keys = check_keys(keys)
        out = np.zeros((keys.size, spec.dim), np.float32)
        found = np.zeros(keys.size, bool)
        parts = self._parts[table]
        for p, idx in partitions(keys, self.partitions):
            part = parts[p]
            with part.lock:
                for i in idx:
                    v = part.map.get(int(keys[i]))
                    if v is not None:
                        out[i] = v
                        found[i] = True
                        if self.eviction == "lru":
                            part.map.move_to_end(int(keys[i]))
        return out, found

    def put(self, table: str, keys: np.ndarray, vectors: np.ndarray) -> None:
        keys, vectors = check_batch(self.specs, table, keys, vectors)
        parts = self._parts[table]
        for p, idx in partitions(keys, self.partitions):
            part = parts[p]
            with part.lock:
                for i in idx:
                    k = int(keys[i])
                    part.map[k] = np.array(vectors[i], np.float32)
                    part.map.move_to_end(k)
                if len(part.map) > self.limit:
                    self._evict(part)

    def put_many(self, by_table: dict) -> None:
        """put() for each of {table: (keys, vectors)}, all checked before any is written."""
        checked = {table: check_batch(self.specs, table, k, v) for table, (k, v) in by_table.items()}
        for table, (keys, vectors) in checked.items():
            self.put(table, keys, vectors)

    def _evict(self, part: _Partition) -> None:
        excess = len(part.map) - self.share
        if self.eviction == "lru":
            for _ in range(excess):
                part.map.popitem(last=False)
        else:
            keys = list(part.map)
            for j in self._rng.choice(len(keys), excess, replace=False):
                del part.map[keys[j]]
        self.evicted += excess

    def size(self, table: str) -> int:
        table_spec(self.specs, table)
        return sum(len(p.map) for p in self._parts[table])

    def dump(self, table: str) -> tuple[np.ndarray, np.ndarray]:
        """(keys ascending, vectors) of everything held for table."""
        spec = table_spec(self.specs, table)
        keys, rows = [], []
        for part in self._parts[table]:
            with part.lock:
                keys += list(part.map)
                rows += list(part.map.values())
        return sorted_dump(keys, rows, spec.dim)

    def stats(self) -> dict:
        return {"name": self.name, "keys": {t: self.size(t) for t in self.specs}, "evicted": self.evicted}

    def close(self) -> None:
        for parts in self._parts.values():
            for p in parts:
                with p.lock:
                    p.map.clear()
