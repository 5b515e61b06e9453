"""embed.py (binding layer): the native embedding cache (splitrpc_embed.h) through cffi: batched query, replace, update, dump. cffi releases the GIL around each call, and the cache locks per slabset, so any number of threads may use one cache at once."""
from __future__ import annotations

import threading

import numpy as np

from splitrpc._native import ENOBUFS, check, ffi, lib

SLAB = lib.SRPC_EMB_SLAB
MAX_SLABS_PER_SET = lib.SRPC_EMB_MAX_SLABS_PER_SET
MAX_DIM = lib.SRPC_EMB_MAX_DIM


def _p(a: np.ndarray, t: str):
    return ffi.cast(t, a.ctypes.data)


class EmbeddingCache:
    """A set-associative cache of float32 vectors of `dim` by int64 key, room for at least
    `capacity` keys in slabsets of `slabs_per_set` slabs of SLAB slots, LRU per slabset (see
    splitrpc_embed.h). close() (or the garbage collector) frees it; no call may run meanwhile."""

    def __init__(self, dim: int, capacity: int, slabs_per_set: int = 2):
        for what, v, hi in (("dim", dim, MAX_DIM), ("slabs_per_set", slabs_per_set, MAX_SLABS_PER_SET)):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
                raise ValueError(f"{what} must be an integer from 1 to {hi}, got {v!r}")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive number of keys, got {capacity!r}")
        out = ffi.new("srpc_emb_cache_t **")
        check(lib.srpc_emb_cache_create(dim, capacity, slabs_per_set, out), "srpc_emb_cache_create")
        self._c = ffi.gc(out[0], lib.srpc_emb_cache_destroy)
        self.dim = dim
        self.slots = int(lib.srpc_emb_cache_slots(self._c))
        self.sets = int(lib.srpc_emb_cache_sets(self._c))
        self._close_lock = threading.Lock()

    def _handle(self):
        c = self._c
        if c is None:
            raise ValueError("the embedding cache is closed")
        return c

    def _keys(self, keys) -> np.ndarray:
        k = np.ascontiguousarray(keys, dtype=np.int64)
        if k.ndim != 1:
            raise ValueError("keys must be a 1-D array of int64")
        return k

    def _vectors(self, vectors, n: int) -> np.ndarray:
        v = np.ascontiguousarray(vectors, dtype=np.float32)
        if v.shape != (n, self.dim):
            raise ValueError(f"vectors must be ({n}, {self.dim}) float32, got shape {v.shape}")
        return v

    def __len__(self) -> int:
        return int(lib.srpc_emb_cache_size(self._handle()))

    def set_of(self, key: int) -> int:
        """The slabset key maps to."""
        return int(lib.srpc_emb_cache_set_of(self._handle(), int(key)))

    def query(self, keys, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(vectors (n, dim) float32, hit (n,) bool): the cached keys' vectors (each becomes the most
        recently used); a missing key's row is left as it was in `out` (zeros in a new array)."""
        k = self._keys(keys)
        out = np.zeros((k.size, self.dim), np.float32) if out is None else out
        if out.shape != (k.size, self.dim) or out.dtype != np.float32 or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous ({k.size}, {self.dim}) float32 array")
        hit = np.zeros(k.size, np.uint8)
        check(lib.srpc_emb_cache_query(self._handle(), _p(k, "int64_t *"), k.size, _p(out, "float *"),
                                       _p(hit, "uint8_t *")), "srpc_emb_cache_query")
        return out, hit.astype(bool)

    def replace(self, keys, vectors) -> int:
        """Inserts or overwrites each key's vector (LRU eviction in a full slabset); the number evicted."""
        k = self._keys(keys)
        v = self._vectors(vectors, k.size)
        return check(lib.srpc_emb_cache_replace(self._handle(), _p(k, "int64_t *"), k.size, _p(v, "float *")),
                     "srpc_emb_cache_replace")

    def update(self, keys, vectors) -> int:
        """Overwrites the vectors of keys already cached (recency unchanged); how many were."""
        k = self._keys(keys)
        v = self._vectors(vectors, k.size)
        return check(lib.srpc_emb_cache_update(self._handle(), _p(k, "int64_t *"), k.size, _p(v, "float *")),
                     "srpc_emb_cache_update")

    def dump(self) -> np.ndarray:
        """Every cached key (int64, in slot order)."""
        c = self._handle()
        while True:
            buf = np.empty(max(int(lib.srpc_emb_cache_size(c)) + 64, 64), np.int64)
            n = lib.srpc_emb_cache_dump(c, _p(buf, "int64_t *"), buf.size)
            if n >= 0:
                return buf[:n].copy()
            if n != -ENOBUFS:  # keys were added meanwhile: a larger buffer
                check(n, "srpc_emb_cache_dump")

    def clear(self) -> None:
        lib.srpc_emb_cache_clear(self._handle())

    def close(self) -> None:
        with self._close_lock:
            c, self._c = self._c, None
        if c is not None:
            ffi.release(c)
