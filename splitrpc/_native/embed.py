"""embed.py (binding layer): the native embedding caches (splitrpc_embed.h) through cffi, in host memory and on a GPU: batched query, replace, update, dump. cffi releases the GIL around each call; the host cache locks per slabset and the device cache per cache, so any number of threads may use one cache at once."""
from __future__ import annotations

import errno
import threading

import numpy as np

from splitrpc._native import ENOBUFS, ENODEV, check, ffi, lib, text
from splitrpc.errors import GPUError, GPUUnavailable

SLAB = lib.SRPC_EMB_SLAB
MAX_SLABS_PER_SET = lib.SRPC_EMB_MAX_SLABS_PER_SET
MAX_DIM = lib.SRPC_EMB_MAX_DIM
DEVICE_BATCH = lib.SRPC_EMB_DEVICE_BATCH
DEVICE_MAX_BATCH = lib.SRPC_EMB_DEVICE_MAX_BATCH


def _p(a: np.ndarray, t: str):
    return ffi.cast(t, a.ctypes.data)


class EmbeddingCache:
    """A set-associative cache of float32 vectors of `dim` by int64 key, room for at least
    `capacity` keys in slabsets of `slabs_per_set` slabs of SLAB slots, LRU per slabset (see
    splitrpc_embed.h). close() (or the garbage collector) frees it; no call may run meanwhile."""

    def __init__(self, dim: int, capacity: int, slabs_per_set: int = 2):
        self._check_shape(dim, capacity, slabs_per_set)
        out = ffi.new("srpc_emb_cache_t **")
        check(lib.srpc_emb_cache_create(dim, capacity, slabs_per_set, out), "srpc_emb_cache_create")
        self._c = ffi.gc(out[0], lib.srpc_emb_cache_destroy)
        self.dim = dim
        self.slots = int(lib.srpc_emb_cache_slots(self._c))
        self.sets = int(lib.srpc_emb_cache_sets(self._c))
        self._close_lock = threading.Lock()

    @staticmethod
    def _check_shape(dim: int, capacity: int, slabs_per_set: int) -> None:
        """ValueError unless the arguments describe a cache (either kind)."""
        for what, v, hi in (("dim", dim, MAX_DIM), ("slabs_per_set", slabs_per_set, MAX_SLABS_PER_SET)):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
                raise ValueError(f"{what} must be an integer from 1 to {hi}, got {v!r}")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive number of keys, got {capacity!r}")

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

    _size_fn, _dump_fn = "srpc_emb_cache_size", "srpc_emb_cache_dump"

    def _check(self, rc: int, what: str) -> int:
        return check(rc, what)

    def dump(self) -> np.ndarray:
        """Every cached key (int64, in slot order; DeviceEmbeddingCache: in no particular order)."""
        c = self._handle()
        size, dump = getattr(lib, self._size_fn), getattr(lib, self._dump_fn)
        while True:
            buf = np.empty(max(int(size(c)) + 64, 64), np.int64)
            n = dump(c, _p(buf, "int64_t *"), buf.size)
            if n >= 0:
                return buf[:n].copy()
            if n != -ENOBUFS:  # -ENOBUFS: keys were added meanwhile, a larger buffer
                self._check(n, "embedding cache dump")

    def clear(self) -> None:
        lib.srpc_emb_cache_clear(self._handle())

    def close(self) -> None:
        with self._close_lock:
            c, self._c = self._c, None
        if c is not None:
            ffi.release(c)


def _last_keep_order(keys: np.ndarray, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each key once, with its last vector (in the order of those last occurrences)."""
    if keys.size < 2:
        return keys, vectors
    _, first_from_end = np.unique(keys[::-1], return_index=True)
    if first_from_end.size == keys.size:
        return keys, vectors
    keep = np.sort(keys.size - 1 - first_from_end)
    return keys[keep], vectors[keep]


class DeviceEmbeddingCache(EmbeddingCache):
    """The same cache in the memory of CUDA device `device` (an ordinal), its calls run as the
    kernels of native/cuda/embed_cache.cuh on a stream of its own (splitrpc_embed.h's
    srpc_emb_dcache_*): the same layout, slabset choice and LRU rule, the same keys cached and
    vectors given as EmbeddingCache for the same calls; dump() in no particular order. Batches of
    more than max_batch keys run in several launches. Raises GPUUnavailable (no driver, no such
    device, or no kernels compiled in) or GPUError (a driver call failed; after a failed copy or
    kernel every call raises until clear() succeeds). close() frees its device memory."""

    def __init__(self, dim: int, capacity: int, slabs_per_set: int = 2, *, device: int = 0, max_batch: int = 0):
        self._check_shape(dim, capacity, slabs_per_set)
        if isinstance(device, bool) or not isinstance(device, int) or device < 0:
            raise ValueError(f"device must be a CUDA device ordinal (0, 1, ...), got {device!r}")
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or not 0 <= max_batch <= DEVICE_MAX_BATCH:
            raise ValueError(f"max_batch must be 0 (default {DEVICE_BATCH}) to {DEVICE_MAX_BATCH} keys, got {max_batch!r}")
        out = ffi.new("srpc_emb_dcache_t **")
        self._gpu_check(lib.srpc_emb_dcache_create(device, dim, capacity, slabs_per_set, max_batch, out),
                        f"creating an embedding cache on cuda:{device}")
        self._c = ffi.gc(out[0], lib.srpc_emb_dcache_destroy)
        self.dim, self.device = dim, device
        self.slots = int(lib.srpc_emb_dcache_slots(self._c))
        self.sets = int(lib.srpc_emb_dcache_sets(self._c))
        self._close_lock = threading.Lock()

    _size_fn, _dump_fn = "srpc_emb_dcache_size", "srpc_emb_dcache_dump"

    def _check(self, rc: int, what: str) -> int:
        return self._gpu_check(rc, what)

    @staticmethod
    def _gpu_check(rc: int, what: str) -> int:
        if rc >= 0:
            return rc
        why = text(lib.srpc_gpu_last_error(), "replace") or errno.errorcode.get(-rc, str(rc))
        if rc in (-ENODEV, -errno.ENOTSUP):
            raise GPUUnavailable(f"{what}: {why}")
        if rc in (-errno.EINVAL, -errno.EOVERFLOW):
            raise ValueError(f"{what}: {why}")
        raise GPUError(f"{what}: {why}")

    def __len__(self) -> int:
        return int(lib.srpc_emb_dcache_size(self._handle()))

    def set_of(self, key: int) -> int:
        return int(lib.srpc_emb_dcache_set_of(self._handle(), int(key)))

    def query(self, keys, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        k = self._keys(keys)
        out = np.zeros((k.size, self.dim), np.float32) if out is None else out
        if out.shape != (k.size, self.dim) or out.dtype != np.float32 or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous ({k.size}, {self.dim}) float32 array")
        hit = np.zeros(k.size, np.uint8)
        self._gpu_check(lib.srpc_emb_dcache_query(self._handle(), _p(k, "int64_t *"), k.size, _p(out, "float *"),
                                                  _p(hit, "uint8_t *")), "embedding cache query")
        return out, hit.astype(bool)

    def query_device(self, keys, out_ptr: int) -> np.ndarray:
        """Queries keys with the hits' vectors written by the kernel straight to device memory at
        out_ptr (len(keys) x dim float32, e.g. a CuPy array's data.ptr; misses' rows left alone);
        only the hit flags come back: returns hit (n,) bool. The kernel runs on the cache's own
        stream: work still queued on that memory (on CuPy's stream) must be done before the call;
        the writes are done on return."""
        k = self._keys(keys)
        hit = np.zeros(k.size, np.uint8)
        self._gpu_check(lib.srpc_emb_dcache_query_device(self._handle(), _p(k, "int64_t *"), k.size, int(out_ptr),
                                                         _p(hit, "uint8_t *")), "embedding cache query")
        return hit.astype(bool)

    def replace(self, keys, vectors) -> int:
        k = self._keys(keys)
        v = self._vectors(vectors, k.size)
        return self._gpu_check(lib.srpc_emb_dcache_replace(self._handle(), _p(k, "int64_t *"), k.size,
                                                           _p(v, "float *")), "embedding cache replace")

    def update(self, keys, vectors) -> int:
        """As EmbeddingCache.update; a key repeated in the batch gets its last vector (the batch
        is passed to the kernel with each key once, as it must be), and the count is of distinct
        keys cached (EmbeddingCache counts each repeat)."""
        k, v = _last_keep_order(self._keys(keys), self._vectors(vectors, np.asarray(keys).size))
        return self._gpu_check(lib.srpc_emb_dcache_update(self._handle(), _p(k, "int64_t *"), k.size,
                                                          _p(v, "float *")), "embedding cache update")

    def clear(self) -> None:
        self._gpu_check(lib.srpc_emb_dcache_clear(self._handle()), "embedding cache clear")
