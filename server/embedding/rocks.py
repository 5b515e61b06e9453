"""rocks.py: the persistent tier (HPS's L3): RocksDB through rocksdict, one column family per table, keys the int64's 8 little-endian bytes, values the float32 vector's bytes; a full copy of every table (after HPS, Wei et al., RecSys 2022)."""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from splitrpc.services.embedding.tables import TableSpec, truth
from splitrpc.services.embedding.tier import check_batch, check_keys, sorted_dump, table_spec


class StoreError(RuntimeError):
    """A tier cannot be opened or used; the message says which and why."""


class RocksTier:
    """L3 at `path` (created if missing). Opening a path that cannot be written fails at once with
    StoreError. Reads and writes are thread-safe (RocksDB's own)."""

    name = "rocksdb"

    def __init__(self, path: str, specs: list[TableSpec]):
        from rocksdict import Options, Rdict

        self.path, self.specs = path, {s.name: s for s in specs}
        try:
            os.makedirs(path, exist_ok=True)
            probe = os.path.join(path, ".splitrpc-write-probe")
            with open(probe, "wb") as f:
                f.write(b"x")
            os.unlink(probe)
        except OSError as e:
            raise StoreError(f"the RocksDB tier's path {path!r} cannot be written: {e.strerror or e}") from None
        self._opt = Options(raw_mode=True)
        self._opt.create_if_missing(True)
        try:
            existing = set(Rdict.list_cf(path, self._opt)) if os.path.exists(os.path.join(path, "CURRENT")) else set()
            self._db = Rdict(path, self._opt, column_families={n: self._opt for n in existing if n != "default"})
            for s in specs:
                if s.name not in existing:
                    self._db.create_column_family(s.name, self._opt)
            self._cf = {s.name: self._db.get_column_family(s.name) for s in specs}
        except Exception as e:  # noqa: BLE001 - RocksDB's reasons are plain exceptions
            raise StoreError(f"cannot open the RocksDB tier at {path!r}: {e}") from None

    @staticmethod
    def _key_bytes(keys: np.ndarray) -> list[bytes]:
        """Each key's 8 little-endian bytes, sliced from one buffer (no numpy scalar per key)."""
        buf = np.ascontiguousarray(keys, "<i8").tobytes()
        return [buf[i:i + 8] for i in range(0, len(buf), 8)]

    def get(self, table: str, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(vectors (n, dim), found (n,) bool); rows not found (or stored with the wrong size) are zeros."""
        dim = table_spec(self.specs, table).dim
        keys = check_keys(keys)
        raw = self._cf[table][self._key_bytes(keys)]
        size = 4 * dim
        if all(v is not None and len(v) == size for v in raw):  # the usual case: one copy for the lot
            return np.frombuffer(b"".join(raw), "<f4").reshape(len(raw), dim).copy(), np.ones(len(raw), bool)
        out = np.zeros((len(raw), dim), np.float32)
        found = np.zeros(len(raw), bool)
        for i, v in enumerate(raw):
            if v is not None and len(v) == size:
                out[i] = np.frombuffer(v, "<f4")
                found[i] = True
        return out, found

    def put(self, table: str, keys: np.ndarray, vectors: np.ndarray) -> None:
        self.put_many({table: (keys, vectors)})

    def put_many(self, by_table: dict) -> None:
        """Writes {table: (keys, vectors)} in one atomic write batch."""
        from rocksdict import WriteBatch

        by_table = {table: check_batch(self.specs, table, k, v) for table, (k, v) in by_table.items()}

        wb = WriteBatch(raw_mode=True)
        for table, (keys, vectors) in by_table.items():
            cf = self._db.get_column_family_handle(table)
            buf = np.ascontiguousarray(vectors, "<f4").tobytes()
            size = len(buf) // max(1, len(keys))
            for i, k in enumerate(self._key_bytes(keys)):
                wb.put(k, buf[i * size:(i + 1) * size], cf)
        self._db.write(wb)

    def dump(self, table: str) -> tuple[np.ndarray, np.ndarray]:
        """(keys ascending, vectors) of the table's column family (reads it all)."""
        dim = table_spec(self.specs, table).dim
        keys, rows = [], []
        for k, v in self._cf[table].items():
            if len(k) == 8 and len(v) == 4 * dim:
                keys.append(int.from_bytes(k, "little", signed=True))
                rows.append(np.frombuffer(v, "<f4"))
        return sorted_dump(keys, rows, dim)

    def stats(self) -> dict:
        """Keys per table, counted exactly: it reads every key (seconds for a full DLRM table)."""
        return {"name": self.name, "keys": {t: sum(1 for _ in cf.keys()) for t, cf in self._cf.items()}}

    def compact(self) -> None:
        """Compacts every table's column family (after a bulk fill, so that no compaction runs later
        under load)."""
        for cf in self._cf.values():
            cf.compact_range(None, None)

    def fill_all(self, *, progress: bool = False) -> None:
        """Every table's ground truth, then a compaction (now, not under the first calls)."""
        for s in self.specs:
            self.fill(s, progress=progress)
        self.compact()

    def fill(self, table: str, *, batch: int = 100_000, progress: bool = False) -> None:
        """Writes the table's ground truth for every key (progress on stderr if asked)."""
        spec = self.specs[table]
        t0 = time.monotonic()
        for a in range(0, spec.rows, batch):
            keys = np.arange(a, min(a + batch, spec.rows), dtype=np.int64)
            self.put(table, keys, truth(spec, keys))
            if progress:
                print(f"\r  {table}: {keys[-1] + 1}/{spec.rows} keys in RocksDB ({time.monotonic() - t0:.0f} s)",
                      end="", file=sys.stderr, flush=True)
        if progress:
            print(file=sys.stderr)

    def close(self) -> None:
        for cf in self._cf.values():
            cf.close()
        self._cf = {}
        self._db.close()
