"""store.py: the embedding store: per table an L1 cache in C (in host memory, or on a GPU) over an optional L2 (host hash map or Redis) over the L3 RocksDB copy; lookups deduplicate a batch's keys, apply HPS's hit-rate threshold, insert missing keys synchronously or on a background thread, and refresh L1 from the tiers below on a timer (after HPS, Wei et al., RecSys 2022).

A lookup of a batch of keys for one table:
1. unknown keys (outside the table) get the table's default vector, or fail the lookup
   (UnknownKey) where the table says so; they never reach a tier;
2. the known keys are deduplicated and queried in L1; hit rate = 1 - missing / unique known keys
   (of this lookup);
3. hit rate >= threshold: the missing keys get the default vector now and are queued for the
   inserter thread, which reads them from L2, then L3, and puts them into L1 (and L2);
   below it: the same reads happen now and the lookup returns the true vectors;
4. a known key that no tier has (an L3 not filled) gets the default vector, counted.
threshold 1.0 makes every lookup with a miss synchronous (exact answers); 0.0 makes every miss
asynchronous.

Refresh (refresh_interval seconds, None: off): a thread dumps each L1's keys, re-reads them from
the tiers below and updates L1 in place. Online updates (apply_updates) reach L1 at once, in one
batch per table (eventually consistent: a miss racing an update can leave the old vector; see
apply_updates). Thread-safe: lookups
may come from any number of threads.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

import numpy as np

from splitrpc.embedding_cache import DeviceEmbeddingCache, EmbeddingCache
from splitrpc.gpu import parse_device
from splitrpc.services.embedding.tables import TableSpec

INSERT_QUEUE = 1024   # batches of missing keys waiting for the inserter at most (more are dropped, counted)


@dataclass
class TableStats:
    lookups: int = 0
    keys: int = 0            # keys asked (with repeats)
    unique: int = 0          # unique known keys asked
    l1_hits: int = 0
    l2_hits: int = 0
    l3_hits: int = 0
    defaults_missing: int = 0   # misses answered with the default vector (asynchronous mode)
    not_found: int = 0          # known keys no tier had
    unknown: int = 0
    inserted: int = 0           # keys put into L1 by lookups or the inserter
    insert_dropped: int = 0     # batches the inserter's full queue turned away
    refreshed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **kw) -> None:
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)

    def as_dict(self) -> dict:
        with self.lock:
            d = {k: v for k, v in vars(self).items() if k != "lock"}
        d["l1_hit_rate"] = d["l1_hits"] / d["unique"] if d["unique"] else None
        return d


class EmbeddingStore:
    """Tables (TableSpecs) over the tiers: l1_capacity keys of L1 per table (an int, or a dict by
    table name, or l1_fraction of each table's rows; 0: no L1, every lookup reads below), l2 (a HashMapTier, a RedisTier or None), l3
    (a RocksTier holding every table). device: where L1 lives, "cpu" (the C cache in host memory,
    the default) or "cuda:N" (the cache in that GPU's memory, its calls run as kernels; raises
    GPUUnavailable where there is no such device or the kernels are not compiled in). close() stops
    its threads; the tiers are the caller's."""

    def __init__(self, specs: list[TableSpec], l3, *, l2=None, l1_capacity=None, l1_fraction: float | None = 0.05,
                 hit_rate_threshold: float = 1.0, refresh_interval: float | None = None, slabs_per_set: int = 2,
                 device: str = "cpu"):
        names = [s.name for s in specs]
        if not specs or len(set(names)) != len(names):
            raise ValueError(f"tables must be given once each, got {names}")
        if not 0.0 <= hit_rate_threshold <= 1.0:
            raise ValueError(f"hit_rate_threshold must be in 0 .. 1, got {hit_rate_threshold}")
        if refresh_interval is not None and not refresh_interval > 0:
            raise ValueError("refresh_interval must be positive seconds or None")
        ordinal = parse_device(device)  # ValueError for anything but cpu, cuda, cuda:N
        self.specs = {s.name: s for s in specs}
        self.l2, self.l3 = l2, l3
        self.threshold = float(hit_rate_threshold)
        self.device = device
        self.l1: dict[str, EmbeddingCache | None] = {}
        for s in specs:
            if isinstance(l1_capacity, dict):
                cap = l1_capacity[s.name]
            elif l1_capacity is not None:
                cap = l1_capacity
            else:
                cap = int(round(s.rows * (l1_fraction or 0.0)))
                cap = max(1, cap) if l1_fraction else 0
            if cap <= 0:
                self.l1[s.name] = None  # no L1
            elif ordinal < 0:
                self.l1[s.name] = EmbeddingCache(s.dim, int(cap), slabs_per_set)
            else:
                try:
                    self.l1[s.name] = DeviceEmbeddingCache(s.dim, int(cap), slabs_per_set, device=ordinal)
                except BaseException:
                    self._close_l1()
                    raise
        self.stats_by_table = {s.name: TableStats() for s in specs}
        self._queue: queue.Queue = queue.Queue(INSERT_QUEUE)
        self._stop = threading.Event()
        self._inserter = threading.Thread(target=self._insert_loop, name="splitrpc-embedding-insert", daemon=True)
        self._inserter.start()
        self._refresher = None
        if refresh_interval:
            self._refresher = threading.Thread(target=self._refresh_loop, args=(refresh_interval,),
                                               name="splitrpc-embedding-refresh", daemon=True)
            self._refresher.start()

    # ------------------------------------------------------------------ lookups

    def _plan(self, table: str, keys) -> tuple[TableSpec, np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        """A lookup's first steps: (spec, keys, known mask, unique known keys, inverse, counts);
        UnknownKey where the table refuses unknown keys."""
        spec = self.specs.get(table)
        if spec is None:
            raise KeyError(f"unknown table {table!r}; tables: {', '.join(self.specs)}")
        k = np.ascontiguousarray(keys, dtype=np.int64).reshape(-1)
        known = spec.known(k)
        n_unknown = int(k.size - known.sum())
        if n_unknown and spec.unknown == "error":
            self.stats_by_table[table].add(lookups=1, keys=int(k.size), unknown=n_unknown)
            spec.refuse_unknown(k, known)
        uniq, inverse = np.unique(k[known], return_inverse=True)
        return spec, k, known, uniq, inverse.reshape(-1), dict(lookups=1, keys=int(k.size), unique=int(uniq.size),
                                                                unknown=n_unknown)

    def _misses(self, table: str, spec: TableSpec, uniq: np.ndarray, hit: np.ndarray,
                counts: dict) -> tuple[np.ndarray, np.ndarray]:
        """The rows of the unique keys L1 missed, by HPS's threshold: (their indices, their vectors:
        read from below now, or the default while the inserter reads them later); counts updated."""
        missing = np.flatnonzero(~hit)
        counts["l1_hits"] = int(uniq.size - missing.size)
        if not missing.size:
            return missing, np.zeros((0, spec.dim), np.float32)
        hit_rate = 1.0 - missing.size / uniq.size
        mk = uniq[missing]
        if hit_rate >= self.threshold:
            counts["defaults_missing"] = int(missing.size)
            try:
                self._queue.put_nowait((table, mk))
            except queue.Full:
                counts["insert_dropped"] = 1
            return missing, np.broadcast_to(spec.default_vector(), (missing.size, spec.dim))
        got, found, tier_counts = self._fetch(table, mk)
        counts.update(tier_counts)
        return missing, np.where(found[:, None], got, spec.default_vector())

    def lookup(self, table: str, keys) -> np.ndarray:
        """The vectors (n, dim) float32 of keys (any int64, repeats allowed) of `table`."""
        spec, k, known, uniq, inverse, counts = self._plan(table, keys)
        cache = self.l1[table]
        if cache is not None:
            vecs, hit = cache.query(uniq)
        else:  # no L1: every key is read from below
            vecs, hit = np.zeros((uniq.size, spec.dim), np.float32), np.zeros(uniq.size, bool)
        missing, rows = self._misses(table, spec, uniq, hit, counts)
        vecs[missing] = rows
        self.stats_by_table[table].add(**counts)
        out = np.empty((k.size, spec.dim), np.float32)
        out[known] = vecs[inverse]
        if counts["unknown"]:
            out[~known] = spec.default_vector()
        return out

    def lookup_device(self, columns: dict, cupy):
        """The vectors of several tables' keys gathered on the L1's device: columns {table: keys
        (B,)}, all of one length B; returns a CuPy array (B, len(columns), dim) in the columns'
        order (one dim for all). An L1 on the device writes its hits there itself
        (DeviceEmbeddingCache.query_device); misses and unknown keys are resolved as lookup()
        does, their rows sent over in one copy; then one gather. The array is complete on return
        (its stream synchronised), so that any thread or stream may use it. UnknownKey as lookup()."""
        plans = [(t, *self._plan(t, keys)) for t, keys in columns.items()]
        dims = {p[1].dim for p in plans}
        b = {p[2].size for p in plans}
        if len(dims) != 1 or len(b) != 1:
            raise ValueError(f"lookup_device needs one dim and one batch length, got dims {dims}, lengths {b}")
        dim, batch = dims.pop(), b.pop()
        ordinal = parse_device(self.device)
        if ordinal >= 0:  # the rows on the L1's device, whatever the caller's current one
            with cupy.cuda.Device(ordinal):
                return self._gather_device(plans, dim, batch, cupy)
        return self._gather_device(plans, dim, batch, cupy)

    def _gather_device(self, plans: list, dim: int, batch: int, cupy):
        base, at = [], 0
        for p in plans:
            base.append(at)
            at += p[4].size
        n_rows = at + len(plans)  # and one default row per table, for its unknown keys
        rows = cupy.empty((n_rows, dim), np.float32)
        # The caches write rows on their own streams: whatever CuPy's stream still does with this
        # memory (a block its pool reused) must be done first. (On the legacy default stream this
        # also waits for other threads' queued work, e.g. the MLPs of the batch before.)
        cupy.cuda.get_current_stream().synchronize()
        fill_idx, fill_rows = [], []
        gather = np.empty((batch, len(plans)), np.int64)
        for j, ((table, spec, k, known, uniq, inverse, counts), off) in enumerate(zip(plans, base)):
            cache = self.l1[table]
            if isinstance(cache, DeviceEmbeddingCache):
                hit = cache.query_device(uniq, rows.data.ptr + off * dim * 4)
            elif cache is not None:  # an L1 in host memory: its hits go over with the misses
                vecs, hit = cache.query(uniq)
                fill_idx.append(off + np.flatnonzero(hit))
                fill_rows.append(vecs[hit])
            else:
                hit = np.zeros(uniq.size, bool)
            missing, got = self._misses(table, spec, uniq, hit, counts)
            fill_idx += [off + missing, np.array([at + j])]
            fill_rows += [got, spec.default_vector()[None, :]]
            self.stats_by_table[table].add(**counts)
            gather[:, j] = at + j
            gather[known, j] = off + inverse
        idx = np.concatenate(fill_idx)
        rows[idx] = cupy.asarray(np.ascontiguousarray(np.concatenate(fill_rows), np.float32))
        out = rows[gather.reshape(-1)].reshape(batch, len(plans), dim)
        # complete on return: another thread (the sparse-dense pipeline's MLP stage) may use it on
        # another stream
        cupy.cuda.get_current_stream().synchronize()
        return out

    def _read_below(self, table: str, keys: np.ndarray, *, fill_l2: bool) -> tuple[np.ndarray, np.ndarray, dict]:
        """Reads keys from L2, then L3 for the rest (and, with fill_l2, puts what L3 had into L2):
        (vectors, found, {"l2_hits", "l3_hits"})."""
        vecs = np.zeros((keys.size, self.specs[table].dim), np.float32)
        found = np.zeros(keys.size, bool)
        counts = {"l2_hits": 0, "l3_hits": 0}
        if self.l2 is not None:
            v2, f2 = self.l2.get(table, keys)
            vecs[f2], found[f2] = v2[f2], True
            counts["l2_hits"] = int(f2.sum())
        rest = np.flatnonzero(~found)
        if rest.size:
            v3, f3 = self.l3.get(table, keys[rest])
            vecs[rest[f3]], found[rest[f3]] = v3[f3], True
            counts["l3_hits"] = int(f3.sum())
            if fill_l2 and self.l2 is not None and f3.any():
                self.l2.put(table, keys[rest[f3]], v3[f3])
        return vecs, found, counts

    def _fetch(self, table: str, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
        """Reads keys from the tiers below L1 and puts what was found into L1 (and what came from
        L3 into L2): (vectors, found, counts)."""
        vecs, found, counts = self._read_below(table, keys, fill_l2=True)
        if found.any():
            if self.l1[table] is not None:
                self.l1[table].replace(keys[found], vecs[found])
        counts["inserted"] = int(found.sum())
        counts["not_found"] = int(keys.size - found.sum())
        return vecs, found, counts

    # ------------------------------------------------------------------ online updates

    def apply_updates(self, by_table: dict, *, l2: bool = True) -> int:
        """Writes decoded updates {table: (keys, vectors)} (each table's in arrival order) to L3 in
        one write batch, to L2 (unless l2=False: a Redis L2 written by the update process itself),
        and to L1 in one batch per table, where only the keys cached are overwritten (their recency
        kept). Returns the number of L1 keys updated. A lookup that read a key from below just
        before the write may still put the old vector into L1 (and L2) after it; the refresh reads
        L2 first, so that stays until the key's next update or eviction."""
        if not by_table:
            return 0
        self.l3.put_many(by_table)
        if l2 and self.l2 is not None:
            self.l2.put_many(by_table)
        n = 0
        for table, (keys, vecs) in by_table.items():
            cache = self.l1.get(table)
            if cache is not None:
                n += cache.update(keys, vecs)
        return n

    # ------------------------------------------------------------------ background work

    def _insert_loop(self) -> None:
        while not self._stop.is_set():
            try:
                table, keys = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            try:
                _, _, counts = self._fetch(table, keys)
                self.stats_by_table[table].add(**counts)
            finally:
                self._queue.task_done()

    def flush(self) -> None:
        """Waits until every queued asynchronous insertion is done."""
        self._queue.join()

    def refresh(self) -> int:
        """One refresh pass: every L1 key re-read from the tiers below and updated in L1 in place.
        Returns the number of keys refreshed."""
        total = 0
        for name, cache in self.l1.items():
            if cache is None:
                continue
            keys = cache.dump()
            if not keys.size:
                continue
            vecs, found, _ = self._read_below(name, keys, fill_l2=False)
            n = cache.update(keys[found], vecs[found])
            self.stats_by_table[name].add(refreshed=n)
            total += n
        return total

    def _refresh_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.refresh()

    def stats(self) -> dict:
        return {name: {**st.as_dict(), "l1_size": len(self.l1[name]) if self.l1[name] is not None else 0,
                       "l1_slots": self.l1[name].slots if self.l1[name] is not None else 0}
                for name, st in self.stats_by_table.items()}

    def close(self) -> None:
        self._stop.set()
        for t in (self._inserter, self._refresher):
            if t is not None:
                t.join()
        self._close_l1()

    def _close_l1(self) -> None:
        for c in self.l1.values():
            if c is not None:
                c.close()

    def __enter__(self) -> "EmbeddingStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class WholeTables:
    """The baseline with no tiers: every table held whole in memory as one array (the ground
    truth), looked up by indexing. Same lookup() and stats() as EmbeddingStore. device "cuda:N":
    the tables also whole in that GPU's memory, one array with a default row per table after
    them, for lookup_device (needs CuPy)."""

    threshold = 1.0
    l2 = None

    def __init__(self, specs: list[TableSpec], device: str = "cpu"):
        from splitrpc.services.embedding.tables import truth

        ordinal = parse_device(device)
        self.specs, self.device = {s.name: s for s in specs}, device
        self.arrays = {s.name: truth(s, np.arange(s.rows, dtype=np.int64)) for s in specs}
        self.l1 = {s.name: None for s in specs}
        self.stats_by_table = {s.name: TableStats() for s in specs}
        self._dev = None
        if ordinal >= 0:
            from splitrpc.gpu import import_cupy

            cupy = import_cupy()
            if len({s.dim for s in specs}) != 1:
                raise ValueError("whole tables on a device need one dim for every table")
            self._base = dict(zip(self.specs, np.cumsum([0] + [s.rows for s in specs[:-1]])))
            self._defaults_at = sum(s.rows for s in specs)
            with cupy.cuda.Device(ordinal):
                self._dev = cupy.asarray(np.concatenate([*self.arrays.values(),
                                                         np.stack([s.default_vector() for s in specs])]))

    def lookup_device(self, columns: dict, cupy):
        """As EmbeddingStore.lookup_device: one gather from the tables in device memory."""
        if self._dev is None:
            raise ValueError("these whole tables are not on a device (device='cuda:N')")
        cols = list(columns.items())
        batch = {np.asarray(k).size for _, k in cols}
        if len(batch) != 1:
            raise ValueError(f"lookup_device needs one batch length, got {batch}")
        gather = np.empty((batch.pop(), len(cols)), np.int64)
        names = list(self.specs)
        for j, (table, keys) in enumerate(cols):
            spec = self.specs[table]
            k = np.ascontiguousarray(keys, dtype=np.int64).reshape(-1)
            known = spec.known(k)
            spec.refuse_unknown(k, known)
            gather[:, j] = np.where(known, self._base[table] + k, self._defaults_at + names.index(table))
            self.stats_by_table[table].add(lookups=1, keys=int(k.size), unknown=int(k.size - known.sum()))
        return self._dev[gather.reshape(-1)].reshape(gather.shape[0], len(cols), self._dev.shape[1])

    def lookup(self, table: str, keys) -> np.ndarray:
        spec = self.specs[table]
        k = np.ascontiguousarray(keys, dtype=np.int64).reshape(-1)
        known = spec.known(k)
        spec.refuse_unknown(k, known)
        out = np.empty((k.size, spec.dim), np.float32)
        out[known] = self.arrays[table][k[known]]
        out[~known] = spec.default_vector()
        self.stats_by_table[table].add(lookups=1, keys=int(k.size), unknown=int(k.size - known.sum()))
        return out

    def stats(self) -> dict:
        return {name: {**st.as_dict(), "l1_size": 0, "l1_slots": 0} for name, st in self.stats_by_table.items()}

    def close(self) -> None:
        self.arrays, self._dev = {}, None
