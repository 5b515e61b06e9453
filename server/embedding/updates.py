"""updates.py: online updates: training publishes (table, key, vector) records to a stream (Redis Streams, or Kafka); an Updater consumes them at a rate limit into the store's L3, L2 and the keys L1 holds (eventually consistent), on a thread, or in a process of its own (update_process.py); malformed records are counted by reason and dropped (after HPS, Wei et al., RecSys 2022).

A record is bytes: uint16 name length, the table name (UTF-8), int64 key, dim float32 (all
little-endian). A record is malformed when it is short or long for its table's dimension
("wrong_dim"; "short" when it does not even hold a name and a key), names no table
("unknown_table"), has a key outside the table ("unknown_key") or a NaN or infinite value
("not_finite").
"""
from __future__ import annotations

import struct
import threading
import time
from collections import Counter

import numpy as np

from splitrpc.services.embedding.tables import TableSpec

_LEN = struct.Struct("<H")
_KEY = struct.Struct("<q")
MALFORMED = ("short", "unknown_table", "wrong_dim", "unknown_key", "not_finite")
POLLS_PER_S = 10   # under a rate limit the Updater polls at most this often (a poll per token would spin)


class Malformed(ValueError):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def encode(table: str, key: int, vector) -> bytes:
    name = table.encode()
    return _LEN.pack(len(name)) + name + _KEY.pack(int(key)) + np.ascontiguousarray(vector, "<f4").tobytes()


def decode(blob: bytes, specs: dict[str, TableSpec]) -> tuple[str, int, np.ndarray]:
    """(table, key, vector) of a record, or Malformed(reason)."""
    if len(blob) < _LEN.size:
        raise Malformed("short")
    (n,) = _LEN.unpack_from(blob)
    if len(blob) < _LEN.size + n + _KEY.size:
        raise Malformed("short")
    try:
        table = blob[_LEN.size:_LEN.size + n].decode()
    except UnicodeDecodeError:
        raise Malformed("unknown_table") from None
    spec = specs.get(table)
    if spec is None:
        raise Malformed("unknown_table")
    at = _LEN.size + n
    (key,) = _KEY.unpack_from(blob, at)
    body = blob[at + _KEY.size:]
    if len(body) != 4 * spec.dim:
        raise Malformed("wrong_dim")
    if not 0 <= key < spec.rows:
        raise Malformed("unknown_key")
    vec = np.frombuffer(body, "<f4")
    if not np.isfinite(vec).all():
        raise Malformed("not_finite")
    return table, key, vec


def decode_many(blobs: list[bytes], specs: dict[str, TableSpec]) -> tuple[dict, Counter]:
    """Records decoded in bulk: ({table: (keys int64, vectors (n, dim) float32)} in arrival order
    per table, Counter of malformed records by reason). The same verdicts as decode() per record,
    with numpy doing the per-record work for records of one length (one table) at a time, so the
    Python work (and GIL time) per record is a length and a slice."""
    out: dict[str, tuple[list, list]] = {}
    bad: Counter = Counter()
    by_len: dict[int, list[int]] = {}
    for i, b in enumerate(blobs):
        by_len.setdefault(len(b), []).append(i)
    order: dict[str, list] = {}
    for length, idx in by_len.items():
        if length < _LEN.size + _KEY.size:
            bad["short"] += len(idx)
            continue
        rows = np.frombuffer(b"".join(blobs[i] for i in idx), np.uint8).reshape(len(idx), length)
        name_len = rows[:, 0].astype(np.int64) | (rows[:, 1].astype(np.int64) << 8)
        for n in np.unique(name_len):
            sel = np.flatnonzero(name_len == n)
            body = length - _LEN.size - int(n) - _KEY.size
            if body < 0:
                bad["short"] += sel.size
                continue
            names = rows[sel, _LEN.size:_LEN.size + int(n)]
            uniq, inv = np.unique(names, axis=0, return_inverse=True)
            for u, raw_name in enumerate(uniq):
                pick = sel[inv.reshape(-1) == u]
                try:
                    spec = specs.get(raw_name.tobytes().decode())
                except UnicodeDecodeError:
                    spec = None
                if spec is None:
                    bad["unknown_table"] += pick.size
                    continue
                if body != 4 * spec.dim:
                    bad["wrong_dim"] += pick.size
                    continue
                at = _LEN.size + int(n)
                keys = rows[pick, at:at + _KEY.size].copy().view("<i8").reshape(-1)
                vecs = rows[pick, at + _KEY.size:].copy().view("<f4").reshape(pick.size, spec.dim)
                ok_key = (keys >= 0) & (keys < spec.rows)
                finite = np.isfinite(vecs).all(axis=1)
                bad["unknown_key"] += int((~ok_key).sum())
                bad["not_finite"] += int((ok_key & ~finite).sum())
                good = ok_key & finite
                order.setdefault(spec.name, []).append((np.asarray(idx)[pick[good]], keys[good], vecs[good]))
    for table, parts in order.items():
        pos = np.concatenate([p[0] for p in parts])
        o = np.argsort(pos, kind="stable")  # arrival order: a later update of a key wins
        out[table] = (np.concatenate([p[1] for p in parts])[o], np.concatenate([p[2] for p in parts])[o])
    return out, +bad


class RedisStreamSource:
    """Records from a Redis stream (XREAD from the start, or from `last_id`), one field "u" per
    entry. publish() is the producer's side (tests, benchmarks, a trainer)."""

    FIELD = b"u"

    def __init__(self, host: str = "127.0.0.1", port: int = 6379, stream: str = "splitrpc:updates", *,
                 last_id: str = "0-0", block_ms: int = 100):
        import redis

        self._r = redis.Redis(host=host, port=port)
        self.stream, self.last_id, self.block_ms = stream, last_id, block_ms

    def publish(self, records: list[bytes]) -> None:
        pipe = self._r.pipeline(transaction=False)
        for rec in records:
            pipe.xadd(self.stream, {self.FIELD: rec})
        pipe.execute()

    def poll(self, max_records: int) -> list[bytes]:
        got = self._r.xread({self.stream: self.last_id}, count=max_records, block=self.block_ms)
        out = []
        for _, entries in got or ():
            for entry_id, fields in entries:
                self.last_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                out.append(fields.get(self.FIELD, b""))
        return out

    def close(self) -> None:
        self._r.close()


class KafkaSource:
    """Records from a Kafka topic (confluent-kafka): `consumer` a confluent_kafka.Consumer (or
    anything with subscribe, consume and close), or `config` to make one. Messages with an error
    are counted as "short" and dropped."""

    def __init__(self, topic: str, *, consumer=None, config: dict | None = None, timeout: float = 0.1):
        if consumer is None:
            from confluent_kafka import Consumer

            consumer = Consumer({"group.id": "splitrpc-embedding", "auto.offset.reset": "earliest", **(config or {})})
        self._c, self.timeout = consumer, timeout
        self._c.subscribe([topic])

    def poll(self, max_records: int) -> list[bytes]:
        out = []
        for m in self._c.consume(num_messages=max_records, timeout=self.timeout) or ():
            out.append(b"" if m.error() else (m.value() or b""))
        return out

    def close(self) -> None:
        self._c.close()


class Updater:
    """Consumes `source` into the store (store.apply_updates: L3, L2 if any, and the keys L1
    holds) at most `rate` records per second (None: no limit), in batches of up to `batch`.
    start() runs it on a thread until stop(); run_once() consumes one batch on the caller's
    thread. Counters: applied, malformed by reason. With `apply` (and `specs`, the tables by name)
    instead of a store, each decoded chunk {table: (keys, vectors)} goes to apply(chunk) (the
    update process forwards it so)."""

    def __init__(self, store, source, *, rate: float | None = None, batch: int = 1000,
                 specs: dict[str, TableSpec] | None = None, apply=None):
        if rate is not None and not rate > 0:
            raise ValueError("rate must be positive records per second, or None")
        if (store is None) == (apply is None) or (apply is not None and specs is None):
            raise ValueError("give a store, or specs and apply")
        self.store, self.source, self.rate, self.batch = store, source, rate, batch
        self.specs = specs if specs is not None else store.specs
        self._apply = apply if apply is not None else store.apply_updates
        self.applied = 0
        self.malformed: Counter = Counter()
        self._tokens, self._t = 0.0, time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _allowance(self) -> int:
        """Records this batch may take: a token bucket of `batch` tokens filled at `rate` per
        second (so at most rate on average, bursts up to a batch), waiting until it holds a
        poll's worth (rate / POLLS_PER_S, at least 1, at most batch): one source read and one
        tier write per chunk of records, never one per record."""
        if self.rate is None:
            return self.batch
        want = min(float(self.batch), max(1.0, self.rate / POLLS_PER_S))
        while True:
            now = time.monotonic()
            self._tokens = min(float(self.batch), self._tokens + (now - self._t) * self.rate)
            self._t = now
            if self._tokens >= want:
                return int(self._tokens)
            if self._stop.wait((want - self._tokens) / self.rate):
                return 0

    def run_once(self) -> int:
        """Consumes up to one batch; the number of records read (malformed included)."""
        n = self._allowance()
        raw = self.source.poll(n) if n else []
        self._tokens -= len(raw)
        if not raw:
            return 0
        by_table, bad = decode_many(raw, self.specs)
        self.malformed.update(bad)
        if by_table:  # one write per tier for every table of the chunk
            self._apply(by_table)
            self.applied += sum(int(k.size) for k, _ in by_table.values())
        return len(raw)

    def start(self) -> "Updater":
        self._thread = threading.Thread(target=self._loop, name="splitrpc-embedding-updates", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_once()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
