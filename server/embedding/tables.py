"""tables.py: embedding tables described (name, rows, dimension, what an unknown key gets), their deterministic ground-truth vectors, XXH64 of int64 keys vectorised, and Zipf-distributed keys (after HPS, Wei et al., RecSys 2022).

A table's key k (0 <= k < rows) has the vector truth(spec, k): dimension floats in [-1, 1), each
a hash of (seed, table name, k, d), so any tier can be filled and any reply checked without
holding the table. Keys outside 0 .. rows - 1 are unknown: they get the table's default vector, or
make the lookup fail (unknown="error").
"""
from __future__ import annotations

from zlib import crc32
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

UNKNOWN = ("default", "error")
P1, P2, P3 = np.uint64(0x9E3779B185EBCA87), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)
P4, P5 = np.uint64(0x85EBCA77C2B2AE63), np.uint64(0x27D4EB2F165667C5)


class UnknownKey(KeyError):
    """A key outside a table whose unknown keys are errors."""


@dataclass(frozen=True)
class TableSpec:
    name: str
    rows: int
    dim: int
    unknown: str = "default"     # what an unknown key gets: "default" (the default vector) or "error"
    default: float = 0.0         # every element of the default vector
    seed: int = 0

    def __post_init__(self):
        if not self.name or not self.name.isidentifier():
            raise ValueError(f"a table name must be an identifier, got {self.name!r}")
        if self.rows < 1 or not 1 <= self.dim <= 65536:
            raise ValueError(f"table {self.name}: rows must be positive and dim 1 .. 65536")
        if self.unknown not in UNKNOWN:
            raise ValueError(f"table {self.name}: unknown must be one of {UNKNOWN}, got {self.unknown!r}")
        if not np.isfinite(self.default):
            raise ValueError(f"table {self.name}: the default value must be finite")

    def default_vector(self) -> np.ndarray:
        return np.full(self.dim, self.default, np.float32)

    def known(self, keys: np.ndarray) -> np.ndarray:
        return (keys >= 0) & (keys < self.rows)

    def refuse_unknown(self, keys: np.ndarray, known: np.ndarray) -> None:
        """Raises UnknownKey naming the first unknown key when this table's unknown keys are errors."""
        if self.unknown == "error" and not known.all():
            raise UnknownKey(f"table {self.name}: key {int(keys[~known][0])} is not in 0 .. {self.rows - 1}")


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def xxh64(keys, seed: int = 0) -> np.ndarray:
    """XXH64 of each int64 key's 8 little-endian bytes (the xxhash package's xxh64_intdigest of
    key.tobytes()), vectorised."""
    k = np.ascontiguousarray(keys, dtype="<i8").view(np.uint64)
    with np.errstate(over="ignore"):
        h = np.full(k.shape, np.uint64(seed) + P5 + np.uint64(8), np.uint64)
        k1 = _rotl(k * P2, 31) * P1
        h ^= k1
        h = _rotl(h, 27) * P1 + P4
        h ^= h >> np.uint64(33)
        h *= P2
        h ^= h >> np.uint64(29)
        h *= P3
        h ^= h >> np.uint64(32)
    return h


def partitions(keys: np.ndarray, n: int):
    """(partition, indices of keys in it) for each non-empty partition of XXH64(key) mod n, in
    partition order, indices in key order (the L2 tiers' partitioning)."""
    part = (xxh64(keys) % np.uint64(n)).astype(np.int64)
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(n + 1))
    for p in range(n):
        if bounds[p] < bounds[p + 1]:
            yield p, order[bounds[p]:bounds[p + 1]]


def truth(spec: TableSpec, keys) -> np.ndarray:
    """The ground-truth vectors (n, dim) float32 of known keys."""
    k = np.ascontiguousarray(keys, dtype=np.int64)
    salt = np.uint64((crc32(spec.name.encode()) << 32) ^ (spec.seed & 0xFFFFFFFF))
    with np.errstate(over="ignore"):
        base = (k.view(np.uint64) * np.uint64(spec.dim))[:, None] + np.arange(spec.dim, dtype=np.uint64)[None, :]
        h = xxh64((base ^ salt).reshape(-1).view(np.int64)).reshape(k.size, spec.dim)
    return ((h >> np.uint64(40)).astype(np.float32) / np.float32(1 << 23) - np.float32(1.0)).astype(np.float32)


@lru_cache(maxsize=16)
def _zipf_cdf(rows: int, alpha: float) -> np.ndarray:
    cdf = np.cumsum(np.arange(1, rows + 1, dtype=np.float64) ** -alpha)
    cdf /= cdf[-1]
    cdf.setflags(write=False)
    return cdf


@lru_cache(maxsize=64)
def _permutation(rows: int, hot_seed: int) -> np.ndarray:
    p = np.random.default_rng([hot_seed, rows, 1]).permutation(rows)
    p.setflags(write=False)
    return p


def zipf_keys(rows: int, n: int, *, alpha: float = 1.2, seed: int = 0, hot_seed: int = 0) -> np.ndarray:
    """n keys in 0 .. rows - 1 with P(rank r) proportional to r^-alpha, drawn with `seed`; ranks are
    spread over the keys by a permutation fixed by (rows, hot_seed), so which keys are hot is a
    property of the table, not of the draw (and not the small ids)."""
    if rows < 1 or n < 0 or not alpha > 0:
        raise ValueError("rows must be positive, n non-negative and alpha positive")
    rng = np.random.default_rng([seed, rows])
    cdf = _zipf_cdf(rows, float(alpha))
    ranks = np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), rows - 1)
    perm = _permutation(rows, hot_seed)
    return perm[ranks].astype(np.int64)
