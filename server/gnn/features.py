"""features.py: the tiered node-feature store: device tier (a CUDA tensor, or an emulated device tier in host memory where no GPU is present), host tier (a numpy array) and disk tier (an LMDB database), gathered by node id (after Quiver, Tan et al., arXiv 2023).

The tiers follow a ``placement.TierPlacement`` with tiers ("device", "host", "disk"): node v's row
is row ``placement.slot[v]`` of tier ``placement.tier[v]``. The disk tier is an LMDB environment
(a directory holding data.mdb) with one record per disk-tier node: key the node id as 8 bytes
big-endian, value its float32 row, raw; ``build`` writes it in placement order (FAP order when
the placement came from ``order_by(fap)``) and the store opens it read-only, without locking or
readahead, one read transaction per ``gather`` call, so concurrent gathers from threads are safe.

Without CUDA (``torch.cuda.is_available()`` false, or torch absent, or ``device="cpu"``) the
device tier is a numpy array in host memory and ``device_emulated`` is True: its reads cost what
host-tier reads cost, so hit rates and not timings are what it tells. ``repr`` says which.
"""
from __future__ import annotations

import os
import threading

import numpy as np

TIERS = ("device", "host", "disk")
KEY_BYTES = 8  # a node id, big-endian


def _key(v: int) -> bytes:
    return int(v).to_bytes(KEY_BYTES, "big")


def _check_placement(placement, n: int | None = None):
    from splitrpc.services.gnn.placement import TierPlacement

    if not isinstance(placement, TierPlacement):
        raise ValueError(f"placement must be a TierPlacement, got {type(placement).__name__}")
    if tuple(placement.tiers) != TIERS:
        raise ValueError(f"placement must have the tiers {TIERS}, in that order; it has {tuple(placement.tiers)}")
    if n is not None and placement.num_nodes != n:
        raise ValueError(f"placement covers {placement.num_nodes} nodes but the features have {n} rows")


def _check_features(features) -> np.ndarray:
    a = np.asarray(features)
    if a.ndim != 2 or a.dtype != np.float32:
        raise ValueError(f"features must be a float32 (num_nodes, dim) array, got {a.dtype} of shape {a.shape}")
    if a.shape[1] < 1:
        raise ValueError("features must have at least one column")
    return a


def _check_device(device):
    if device not in (None, "cuda", "cpu"):
        raise ValueError(f'device must be None (CUDA when available), "cuda" or "cpu", got {device!r}')


def _map_size(rows: int, row_bytes: int, page: int = 4096) -> int:
    """An LMDB map size that holds ``rows`` records of ``row_bytes`` bytes with room to spare:
    inline records (16-byte node header + key + value, pages half full after inserts in key-random
    order) or, for values over about half a page, overflow pages; plus branch pages and a margin."""
    rec = 16 + KEY_BYTES + row_bytes
    if rec > page // 2 - 64:
        pages = rows * (-(-rec // page) + 1)
    else:
        pages = -(-rows * rec * 2 // page)
    return (pages + pages // 8 + 256) * page


# LMDB allows one open environment per file and process: stores serving the same disk tier share
# it (opened read-only, no locking, no readahead), closed when the last of them closes.
_ENVS_LOCK = threading.Lock()
_ENVS: dict = {}  # realpath -> [environment, number of stores using it]


def _acquire_env(path: str):
    import lmdb

    key = os.path.realpath(path)
    with _ENVS_LOCK:
        entry = _ENVS.get(key)
        if entry is None:
            entry = _ENVS[key] = [lmdb.open(path, readonly=True, lock=False, readahead=False, subdir=True), 0]
        entry[1] += 1
        return entry[0]


def _release_env(path: str):
    key = os.path.realpath(path)
    with _ENVS_LOCK:
        entry = _ENVS.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del _ENVS[key]
            entry[0].close()


class FeatureStoreError(RuntimeError):
    """The disk tier does not match the placement (a missing record, a wrong row size)."""


class TieredFeatureStore:
    """Node features over three tiers; ``gather(ids)`` returns their rows in request order."""

    def __init__(self, features, placement, path, *, device: str | None = None):
        """Serve ``features``' device- and host-tier rows from memory (copied) and the disk-tier
        rows from the LMDB at ``path`` (written by ``build``). device: None (CUDA when available,
        else emulated), "cuda" (ValueError without it) or "cpu" (emulated)."""
        feats = _check_features(features)
        _check_placement(placement, feats.shape[0])
        self.placement = placement
        self.num_nodes, self.dim = feats.shape
        self.path = os.fspath(path)
        self._tier = placement.tier
        self._slot = placement.slot
        dev_ids, host_ids = placement.ids("device"), placement.ids("host")
        self._disk_count = int(placement.counts[2])
        self._torch = None
        _check_device(device)
        use_cuda = False
        if device != "cpu":
            try:
                import torch

                use_cuda = bool(torch.cuda.is_available())
            except ImportError:
                use_cuda = False
            if device == "cuda" and not use_cuda:
                raise ValueError('device="cuda" but CUDA is not available (torch.cuda.is_available() is false)')
        if use_cuda:
            import torch

            self._torch = torch
            self._device = torch.from_numpy(np.ascontiguousarray(feats[dev_ids])).to("cuda")
            self.device_emulated = False
        else:
            self._device = np.ascontiguousarray(feats[dev_ids])
            self.device_emulated = True
        self._host = np.ascontiguousarray(feats[host_ids])
        self._env = None
        self._closed = False
        if self._disk_count:
            self._env = self._open_disk()
        self._lock = threading.Lock()
        self._counts = np.zeros(len(TIERS), dtype=np.int64)
        self._gathered = 0
        self._calls = 0

    def _open_disk(self):
        if not os.path.isfile(os.path.join(self.path, "data.mdb")):
            raise ValueError(f"no disk tier at {self.path!r} (data.mdb missing); "
                             "write it with TieredFeatureStore.build")
        env = _acquire_env(self.path)
        entries = env.stat()["entries"]
        if entries != self._disk_count:
            _release_env(self.path)
            raise FeatureStoreError(f"the disk tier at {self.path!r} holds {entries} records but the placement puts "
                                    f"{self._disk_count} features on disk; rebuild it")
        return env

    @classmethod
    def build(cls, features, placement, path, *, device: str | None = None) -> "TieredFeatureStore":
        """Write the disk tier of ``placement`` at directory ``path`` (created; a previous
        data.mdb/lock.mdb there is replaced) and return the store serving it."""
        import lmdb

        feats = _check_features(features)
        _check_placement(placement, feats.shape[0])
        _check_device(device)
        path = os.fspath(path)
        with _ENVS_LOCK:
            if os.path.realpath(path) in _ENVS:
                raise ValueError(f"the disk tier at {path!r} is open in this process; close its stores before "
                                 "rebuilding it")
        os.makedirs(path, exist_ok=True)
        for name in ("data.mdb", "lock.mdb"):
            p = os.path.join(path, name)
            if os.path.exists(p):
                os.remove(p)
        disk_ids = placement.ids("disk")
        row_bytes = feats.shape[1] * 4
        env = lmdb.open(path, map_size=_map_size(max(disk_ids.size, 1), row_bytes), subdir=True,
                        readahead=False, meminit=False)
        try:
            batch = max(1, (64 << 20) // (row_bytes + 64))  # ~64 MiB of rows per write transaction
            for start in range(0, disk_ids.size, batch):
                chunk = disk_ids[start:start + batch]
                while True:
                    try:
                        with env.begin(write=True) as txn:
                            for v in chunk.tolist():
                                txn.put(_key(v), feats[v].tobytes())
                        break
                    except lmdb.MapFullError:  # the estimate was short: grow the map, redo this batch
                        env.set_mapsize(env.info()["map_size"] * 2)
            env.sync(True)
        finally:
            env.close()
        return cls(feats, placement, path, device=device)

    def gather(self, ids) -> np.ndarray:
        """float32 (len(ids), dim): the rows of ``ids`` in request order. IndexError for an id
        outside 0 .. num_nodes - 1."""
        ids = np.asarray(ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise ValueError(f"ids must be a 1-D integer array, got shape {ids.shape}, dtype {ids.dtype}")
        ids = ids.astype(np.int64, copy=False)
        bad = (ids < 0) | (ids >= self.num_nodes)
        if np.any(bad):
            raise IndexError(f"node id {int(ids[np.flatnonzero(bad)[0]])} out of range 0 .. {self.num_nodes - 1}")
        env = self._env
        if self._closed:
            raise ValueError("the store is closed")
        out = np.empty((ids.size, self.dim), dtype=np.float32)
        tier = self._tier[ids]
        slot = self._slot[ids]
        counts = np.bincount(tier, minlength=len(TIERS))
        if counts[0]:
            sel = np.flatnonzero(tier == 0)
            if self._torch is not None:
                rows = self._device[self._torch.from_numpy(slot[sel]).to(self._device.device)]
                out[sel] = rows.cpu().numpy()
            else:
                out[sel] = self._device[slot[sel]]
        if counts[1]:
            sel = np.flatnonzero(tier == 1)
            out[sel] = self._host[slot[sel]]
        if counts[2]:
            sel = np.flatnonzero(tier == 2)
            uniq, inv = np.unique(ids[sel], return_inverse=True)
            rows = np.empty((uniq.size, self.dim), dtype=np.float32)
            if env is None:
                raise ValueError("the store is closed")
            with env.begin(buffers=True) as txn:
                for i, v in enumerate(uniq.tolist()):
                    buf = txn.get(_key(v))
                    if buf is None or len(buf) != self.dim * 4:
                        raise FeatureStoreError(f"the disk tier at {self.path!r} has "
                                                f"{'no record' if buf is None else 'a wrong-sized record'} "
                                                f"for node {v}")
                    rows[i] = np.frombuffer(buf, dtype=np.float32)
            out[sel] = rows[inv.reshape(-1)]
        with self._lock:
            self._counts += counts
            self._gathered += int(ids.size)
            self._calls += 1
        return out

    def stats(self) -> dict:
        """{"gathered": ids gathered, "calls": gather calls, "hits": {tier: ids served from it}}."""
        with self._lock:
            return {"gathered": self._gathered, "calls": self._calls,
                    "hits": {t: int(c) for t, c in zip(TIERS, self._counts)}}

    def reset_stats(self):
        with self._lock:
            self._counts[:] = 0
            self._gathered = 0
            self._calls = 0

    def close(self):
        self._closed = True
        env, self._env = self._env, None
        if env is not None:
            _release_env(self.path)

    def __del__(self):
        try:
            self.close()
        except Exception:  # a half-built store or interpreter shutdown: nothing to release
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        c = self.placement.counts
        dev = "emulated in host memory" if self.device_emulated else "cuda"
        return (f"TieredFeatureStore({self.num_nodes} x {self.dim} float32; device tier {c[0]} rows ({dev}), "
                f"host {c[1]}, disk {c[2]} at {self.path!r}; device_emulated={self.device_emulated})")


def hit_rate(ids, placement, tier: str = "device") -> float:
    """The fraction of ``ids`` (with multiplicity) whose feature is in ``tier`` of ``placement``."""
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.size == 0 or ids.dtype.kind not in "iu":
        raise ValueError("ids must be a non-empty 1-D integer array")
    t = placement.index(tier)
    ids = ids.astype(np.int64, copy=False)
    if ids.min() < 0 or ids.max() >= placement.num_nodes:
        bad = ids[(ids < 0) | (ids >= placement.num_nodes)][0]
        raise IndexError(f"node id {int(bad)} out of range 0 .. {placement.num_nodes - 1}")
    return float(np.count_nonzero(placement.tier[ids] == t)) / ids.size
