"""update_process.py: online updates consumed in a process of their own, off the serving process's GIL: the child reads the stream at the rate limit, decodes the records (updates.decode_many), writes a Redis L2 itself (once a second) and sends each chunk, decoded, through a pipe; the serving process's applier thread writes the chunk to L3 in one write batch, to an in-process L2, and to the keys L1 holds, one batch per table (store.apply_updates). CPU per update is counted on both sides.

What a chunk costs the serving process: receiving it (one message per chunk, the arrays as bytes)
and store.apply_updates, of which RocksDB's write batch still takes one Python call per key
(rocksdict has no bulk put). Everything else (the stream client, decoding, Redis writes) runs in
the child.
"""
from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from dataclasses import asdict

import numpy as np

from splitrpc.services.embedding.tables import TableSpec

STOP_WAIT_S = 5.0      # how long stop() waits for the child before terminating it
SOURCE_RETRY_S = 1.0   # the pause after the stream (or a Redis L2) failed, before the next try
# A Redis L2 is written at most every L2_FLUSH_S (or every L2_FLUSH_RECORDS records): one pipeline
# of the tables' partitions per second, not per chunk (a chunk of 500 records touched ~400 hashes).
L2_FLUSH_S = 1.0
L2_FLUSH_RECORDS = 20_000


def _child(conn, stop, specs_raw: list[dict], source: dict, rate, batch: int, l2_redis: dict | None) -> None:
    """The update process: an Updater whose apply writes the Redis L2 (if any) and forwards the
    chunk as ({table: (keys bytes, vectors bytes)}, counters). stop: the read end of a pipe that
    becomes readable (closed by the parent, or the parent gone) when it is time to end; a pipe,
    not a multiprocessing.Event, whose lock a killed child would leave held."""
    from splitrpc.services.embedding.updates import KafkaSource, RedisStreamSource, Updater

    specs = {s["name"]: TableSpec(**s) for s in specs_raw}
    src = l2 = None
    try:
        if source["kind"] == "redis":
            src = RedisStreamSource(source.get("host", "127.0.0.1"), source["port"], source["stream"],
                                    last_id=source.get("last_id", "0-0"))
        else:
            src = KafkaSource(source["topic"], config=source.get("config"))
        if l2_redis is not None:
            from splitrpc.services.embedding.redis_tier import RedisTier
            l2 = RedisTier(list(specs.values()), **l2_redis)
    except BaseException as e:  # noqa: BLE001 - said, then the process ends
        conn.send(("end", f"cannot start: {type(e).__name__}: {e}"))
        if src is not None:
            src.close()
        raise
    l2_dropped = [0]  # Redis L2 writes dropped (server down) already reported

    pending: dict[str, list] = {}   # Redis L2 writes not yet sent, by table, in arrival order
    flushed = [time.monotonic(), 0]  # when L2 was last written, records pending

    def flush_l2(force: bool = False) -> None:
        if l2 is None or not pending or not (force or flushed[1] >= L2_FLUSH_RECORDS or
                                             time.monotonic() - flushed[0] >= L2_FLUSH_S):
            return
        l2.put_many({t: (np.concatenate([k for k, _ in parts]), np.concatenate([v for _, v in parts]))
                     for t, parts in pending.items()})
        pending.clear()
        flushed[:] = [time.monotonic(), 0]

    def forward(by_table: dict) -> None:
        chunk = {t: (np.ascontiguousarray(k, "<i8").tobytes(), np.ascontiguousarray(v, "<f4").tobytes())
                 for t, (k, v) in by_table.items()}
        conn.send((chunk, {"_cpu_s": time.process_time()}))
        if l2 is not None:
            for t, kv in by_table.items():
                pending.setdefault(t, []).append(kv)
                flushed[1] += kv[0].size
            flush_l2()

    u = Updater(None, src, rate=rate, batch=batch, specs=specs, apply=forward)
    # the stop pipe also ends the Updater's own waits (its rate limit), so that stop() is prompt
    threading.Thread(target=lambda: (stop.poll(None), u._stop.set()), daemon=True).start()
    sent: Counter = Counter()
    last = 0.0
    why = None
    try:
        while not stop.poll():
            try:
                u.run_once()
                flush_l2()
            except Exception as e:  # noqa: BLE001 - the source or L2 failed (a server down): said, then retried
                conn.send(({}, {"_cpu_s": time.process_time(), "_source_error": f"{type(e).__name__}: {e}"}))
                stop.poll(SOURCE_RETRY_S)
                continue
            bad, now = u.malformed - sent, time.monotonic()
            dropped = (l2.dropped_writes - l2_dropped[0]) if l2 is not None else 0
            if bad or dropped or now - last >= 1.0:  # malformed counts, dropped L2 writes, the CPU time while idle
                conn.send(({}, {**bad, "_cpu_s": time.process_time(), "_l2_dropped": dropped}))
                sent.update(bad)
                l2_dropped[0] += dropped
                last = now
    except BaseException as e:  # noqa: BLE001 - anything else ends the process: said first
        why = f"{type(e).__name__}: {e}"
        raise
    finally:
        try:
            if why is None:
                flush_l2(force=True)
            conn.send(("end", why))
            conn.close()
        finally:
            src.close()
            if l2 is not None:
                l2.close()


class UpdateProcess:
    """Consumes a stream into `store` from a child process (see the module). source: {"kind":
    "redis", "port", "stream", optional "host", "last_id"} or {"kind": "kafka", "topic", "config"}.
    A Redis L2 (store.l2 a RedisTier) is written by the child; an in-process one and L3 and L1 by
    this process's applier thread. A stream that fails is counted (source_errors,
    last_source_error) and retried after SOURCE_RETRY_S; Redis L2 writes the child drops (server
    down) are counted (l2_dropped); a chunk this process's tiers refuse is lost and counted
    (apply_errors, last_apply_error); a child that ends by itself sets error.
    Counters as Updater's (applied, malformed) and cpu_s: the child's CPU seconds and the applier
    thread's. stop() ends both."""

    def __init__(self, store, source: dict, *, rate: float | None = None, batch: int = 1000):
        from splitrpc.services.embedding.redis_tier import RedisTier

        if rate is not None and not rate > 0:
            raise ValueError("rate must be positive records per second, or None")
        if source.get("kind") not in ("redis", "kafka"):
            raise ValueError(f"source must say kind redis or kafka, got {source!r}")
        self.store = store
        self.applied, self.l1_updated = 0, 0
        self.malformed: Counter = Counter()
        self.child_cpu_s = self.apply_cpu_s = 0.0
        self.error: str | None = None           # why the update process ended, when it did by itself
        self.source_errors = 0                  # failed reads of the stream (or writes of a Redis L2), retried
        self.last_source_error: str | None = None
        self.apply_errors = 0                   # chunks a tier of this process failed to take (lost)
        self.last_apply_error: str | None = None
        self.l2_dropped = 0                     # Redis L2 writes the child dropped (server down)
        self._l2_in_child = isinstance(store.l2, RedisTier)
        l2_redis = store.l2.connection() if self._l2_in_child else None
        ctx = multiprocessing.get_context("spawn")  # nothing of the serving process (threads, sockets) is copied
        self._conn, child_conn = ctx.Pipe(duplex=False)
        stop_r, self._stop_w = ctx.Pipe(duplex=False)
        self._stopping = threading.Event()
        specs = [asdict(s) for s in store.specs.values()]
        self._proc = ctx.Process(target=_child, args=(child_conn, stop_r, specs, source, rate, batch, l2_redis),
                                 name="splitrpc-embedding-updates", daemon=True)
        self._proc.start()
        child_conn.close()
        stop_r.close()
        self._thread = threading.Thread(target=self._apply_loop, name="splitrpc-embedding-apply", daemon=True)
        self._thread.start()

    def _apply_loop(self) -> None:
        while True:
            try:
                msg = self._conn.recv()
            except (EOFError, OSError):
                if not self._stopping.is_set():
                    self._proc.join(1.0)  # reaped: its exit code is known
                    self.error = f"the update process ended (exit code {self._proc.exitcode})"
                return
            if msg[0] == "end":
                if msg[1] is not None:
                    self.error = f"the update process ended: {msg[1]}"
                return
            chunk, counts = msg
            if counts:
                self.child_cpu_s = counts.pop("_cpu_s", self.child_cpu_s)
                self.l2_dropped += counts.pop("_l2_dropped", 0)
                why = counts.pop("_source_error", None)
                if why is not None:
                    self.source_errors += 1
                    self.last_source_error = why
                self.malformed.update(counts)
            if chunk and not self._stopping.is_set():  # after stop(), the store may be closing
                t0 = time.thread_time()
                by_table = {}
                for table, (kb, vb) in chunk.items():
                    keys = np.frombuffer(kb, "<i8")
                    by_table[table] = (keys, np.frombuffer(vb, "<f4").reshape(keys.size, self.store.specs[table].dim))
                try:
                    self.l1_updated += self.store.apply_updates(by_table, l2=not self._l2_in_child)
                    self.applied += sum(k.size for k, _ in by_table.values())
                except Exception as e:  # noqa: BLE001 - a tier failed: the chunk is lost, said and counted
                    self.apply_errors += 1
                    self.last_apply_error = f"{type(e).__name__}: {e}"
                self.apply_cpu_s += time.thread_time() - t0

    @property
    def cpu_s(self) -> float:
        return self.child_cpu_s + self.apply_cpu_s

    def stats(self) -> dict:
        n = self.applied
        return {"applied": n, "l1_updated": self.l1_updated, "malformed": dict(self.malformed),
                "child_cpu_s": self.child_cpu_s, "apply_cpu_s": self.apply_cpu_s,
                "us_per_update": 1e6 * self.cpu_s / n if n else None,
                "serving_process_us_per_update": 1e6 * self.apply_cpu_s / n if n else None, "error": self.error,
                "source_errors": self.source_errors, "last_source_error": self.last_source_error,
                "apply_errors": self.apply_errors, "last_apply_error": self.last_apply_error,
                "l2_dropped": self.l2_dropped}

    def stop(self) -> None:
        self._stopping.set()
        self._stop_w.close()  # the child's stop pipe becomes readable
        self._proc.join(STOP_WAIT_S)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join()
        self._thread.join()  # the child is gone: the pipe ends, and no apply runs after this returns
        self._conn.close()
