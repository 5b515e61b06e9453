"""redis_tier.py: the volatile tier in a Redis server (HPS's L2 as a Redis backend): per table PARTITIONS hashes by XXH64 of the key (field: the key's 8 bytes, value: the vector's bytes), batched through pipelines; a server that stops answering is skipped (reads miss, writes are dropped, both counted) and retried after a pause, so lookups fall through to L3 and never fail for it (after HPS, Wei et al., RecSys 2022).

Start a local server for it the way the tests do: ``redis-server --port 6399 --bind 127.0.0.1
--save '' --appendonly no`` (Debian's redis-server; loopback only). Eviction is Redis's own
(maxmemory and maxmemory-policy in its configuration); this tier sets neither.
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time

import numpy as np

from splitrpc.services.embedding.hashmap import PARTITIONS
from splitrpc.services.embedding.tables import TableSpec, partitions
from splitrpc.services.embedding.tier import check_batch, check_keys, sorted_dump, table_spec


def _fields(k8: np.ndarray) -> list[bytes]:
    """Each int64 key's 8 little-endian bytes (the hash field)."""
    b = k8.tobytes()
    return [b[i:i + 8] for i in range(0, len(b), 8)]


class RedisTier:
    """L2 in the Redis server at host:port. timeout: seconds per command before the server
    counts as down; retry_after: seconds before a down server is tried again. Thread-safe (the
    client's connection pool)."""

    name = "redis"

    def __init__(self, specs: list[TableSpec], host: str = "127.0.0.1", port: int = 6379, *, prefix: str = "splitrpc",
                 timeout: float = 0.5, retry_after: float = 1.0, partitions: int = PARTITIONS):
        import redis

        self.specs = {s.name: s for s in specs}
        self.partitions, self.prefix, self.retry_after = partitions, prefix, retry_after
        self._args = dict(host=host, port=port, prefix=prefix, timeout=timeout, retry_after=retry_after,
                          partitions=partitions)
        self._errors = (redis.ConnectionError, redis.TimeoutError)
        self._r = redis.Redis(host=host, port=port, socket_timeout=timeout, socket_connect_timeout=timeout)
        self._down_until = 0.0
        self._lock = threading.Lock()
        self.errors = 0          # commands that failed (server down or slow)
        self.dropped_writes = 0  # keys not written because the server was down

    def connection(self) -> dict:
        """The keyword arguments that open the same tier again (in another process)."""
        return dict(self._args)

    def _name(self, table: str, p: int) -> str:
        return f"{self.prefix}:{table}:{p}"

    def _up(self) -> bool:
        return time.monotonic() >= self._down_until

    def _failed(self) -> None:
        with self._lock:
            self.errors += 1
            self._down_until = time.monotonic() + self.retry_after

    def get(self, table: str, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dim = table_spec(self.specs, table).dim
        keys = check_keys(keys)
        out = np.zeros((keys.size, dim), np.float32)
        found = np.zeros(keys.size, bool)
        if not keys.size or not self._up():
            return out, found
        k8 = np.ascontiguousarray(keys, "<i8")
        fields = _fields(k8)
        groups = list(partitions(k8, self.partitions))
        try:
            pipe = self._r.pipeline(transaction=False)
            for p, idx in groups:
                pipe.hmget(self._name(table, p), [fields[i] for i in idx])
            replies = pipe.execute()
        except self._errors:
            self._failed()
            return out, found
        row = 4 * dim
        for (_, idx), vals in zip(groups, replies):
            hit = [j for j, v in enumerate(vals) if v is not None and len(v) == row]
            if hit:
                at = idx[hit]
                out[at] = np.frombuffer(b"".join(vals[j] for j in hit), "<f4").reshape(len(hit), dim)
                found[at] = True
        return out, found

    def put(self, table: str, keys: np.ndarray, vectors: np.ndarray) -> None:
        self.put_many({table: (keys, vectors)})

    def put_many(self, by_table: dict) -> None:
        """Writes {table: (keys, vectors)} in one pipeline (one round trip for every table)."""
        by_table = {table: check_batch(self.specs, table, k, v) for table, (k, v) in by_table.items()}
        n = sum(int(np.size(k)) for k, _ in by_table.values())
        if not n:
            return
        if not self._up():
            with self._lock:
                self.dropped_writes += n
            return
        try:
            pipe = self._r.pipeline(transaction=False)
            for table, (keys, vectors) in by_table.items():
                if not keys.size:
                    continue
                k8 = np.ascontiguousarray(keys, "<i8")
                fields = _fields(k8)
                vb = np.ascontiguousarray(vectors, "<f4").tobytes()
                row = len(vb) // keys.size
                for p, idx in partitions(k8, self.partitions):
                    pipe.hset(self._name(table, p), mapping={fields[i]: vb[i * row:(i + 1) * row] for i in idx})
            pipe.execute()
        except self._errors:
            self._failed()
            with self._lock:
                self.dropped_writes += n

    def size(self, table: str) -> int:
        table_spec(self.specs, table)
        try:
            return sum(int(self._r.hlen(self._name(table, p))) for p in range(self.partitions))
        except self._errors:
            self._failed()
            return 0

    def dump(self, table: str) -> tuple[np.ndarray, np.ndarray]:
        """(keys ascending, vectors) of everything the server holds for table (nothing while it is down)."""
        dim = table_spec(self.specs, table).dim
        keys, rows = [], []
        if self._up():
            try:
                for p in range(self.partitions):
                    for field, value in self._r.hgetall(self._name(table, p)).items():
                        if len(field) == 8 and len(value) == 4 * dim:
                            keys.append(int.from_bytes(field, "little", signed=True))
                            rows.append(np.frombuffer(value, "<f4"))
            except self._errors:
                self._failed()
                keys, rows = [], []
        return sorted_dump(keys, rows, dim)

    def stats(self) -> dict:
        return {"name": self.name, "keys": {t: self.size(t) for t in self.specs}, "errors": self.errors,
                "dropped_writes": self.dropped_writes}

    def clear(self) -> None:
        """Deletes this tier's hashes of every table."""
        names = [self._name(t, p) for t in self.specs for p in range(self.partitions)]
        self._r.delete(*names)

    def close(self) -> None:
        self._r.close()


class LocalRedis:
    """A redis-server child process on 127.0.0.1 (no persistence) for tests and benchmarks; stop()
    or the context manager ends it. Raises FileNotFoundError when redis-server is not installed
    (Debian: apt-get install redis-server)."""

    def __init__(self, port: int | None = None):
        exe = shutil.which("redis-server")
        if exe is None:
            raise FileNotFoundError("redis-server is not installed (Debian: apt-get install redis-server)")
        if port is None:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        self.port = port
        self.proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--protected-mode", "yes"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > end:
                    self.stop()
                    raise RuntimeError(f"redis-server did not start on 127.0.0.1:{port}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> "LocalRedis":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
