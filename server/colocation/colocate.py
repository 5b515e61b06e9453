"""colocate.py: GNN services co-located on one device under a memory budget: each call's PMC estimated when it arrives, calls grouped across services by FIFO / SQTF / BQT (groups.py), a group's calls run at once, groups one after another; a call that can never fit answered TOO_LARGE (after GNNSched, Sun et al., 2024).

A service is a raw splitrpc function (one per model) whose request is a subgraph:
    int64 NN, int64 NE, float32 x[NN][F], int64 edge_index[2][NE]   (little-endian, packed)
F the service's input width; edge ids in 0 .. NN - 1 (row 0 sources, row 1 destinations). The
reply is the float32 logits [NN][C]. A request that is short, long, or has NN or NE < 1 or above
the service's limits, or an edge id out of range, fails that call alone with BAD_REQUEST; an
estimator that raises or returns something other than a positive finite number of bytes fails that
call alone with INTERNAL; a call whose PMC exceeds the budget gets TOO_LARGE naming both.

Threads: the server's worker runs the callbacks, which only parse, estimate and queue (the batch's
replies are deferred through a Future); one dispatcher thread forms groups (under the lock) and
hands a group's calls to a thread pool, one thread per call (on a GPU each would be one stream);
when the group's last call ends its memory is released and the next group forms. The memory is a
budget accountant on the CPU (the CoScheduler's reservation): there is no GPU path yet
(torch.cuda.MemPool per group is not built: no GPU to run it on).

QoS target per service: given, or 2x its standalone time measured at registration on a sample
request. A call is a violation when its time from arrival at the scheduler to its end exceeds it.
"""
from __future__ import annotations

import itertools
import math
import os
import struct
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from splitrpc.errors import BadRequest, InternalError, TooLarge
from splitrpc.services.colocation import groups

HEADER = struct.Struct("<qq")   # NN, NE
LATENCY_WINDOW = 4096           # calls per service kept for the latency percentiles in stats()
QOS_FACTOR = 2.0                # QoS target = this x standalone time (GNNSched, after Abacus)


def pack_request(x: np.ndarray, edge_index: np.ndarray) -> bytes:
    """The request bytes of a subgraph: x (NN, F) float32, edge_index (2, NE) int64."""
    x = np.ascontiguousarray(x, dtype="<f4")
    ei = np.ascontiguousarray(edge_index, dtype="<i8")
    if x.ndim != 2 or ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError("x must be (NN, F) and edge_index (2, NE)")
    return HEADER.pack(x.shape[0], ei.shape[1]) + x.tobytes() + ei.tobytes()


def request_size(nn: int, ne: int, features: int) -> int:
    return HEADER.size + 4 * nn * features + 16 * ne


def parse_request(buf, features: int, max_nodes: int, max_edges: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, edge_index) as numpy views of buf, or BadRequest saying what is wrong."""
    if len(buf) < HEADER.size:
        raise BadRequest(f"a request starts with int64 NN and NE: got {len(buf)} bytes")
    nn, ne = HEADER.unpack_from(buf, 0)
    if not 1 <= nn <= max_nodes:
        raise BadRequest(f"NN = {nn}: must be 1 .. {max_nodes}")
    if not 1 <= ne <= max_edges:
        raise BadRequest(f"NE = {ne}: must be 1 .. {max_edges}")
    want = request_size(nn, ne, features)
    if len(buf) != want:
        raise BadRequest(f"NN = {nn}, NE = {ne}, F = {features} make {want} bytes; the request has {len(buf)}")
    x = np.frombuffer(buf, dtype="<f4", count=nn * features, offset=HEADER.size).reshape(nn, features)
    ei = np.frombuffer(buf, dtype="<i8", count=2 * ne, offset=HEADER.size + 4 * nn * features).reshape(2, ne)
    lo, hi = int(ei.min()), int(ei.max())
    if lo < 0 or hi >= nn:
        raise BadRequest(f"edge ids must lie in 0 .. {nn - 1}: found {lo if lo < 0 else hi}")
    return x, ei


@dataclass
class ServiceStats:
    """A service's counters. Several threads count (the server's worker, the pool's): through count()."""
    calls: int = 0          # calls that reached the service's callback
    ok: int = 0
    violations: int = 0     # ok calls over the QoS target
    too_large: int = 0
    bad_request: int = 0
    failed: int = 0         # estimator or model errors
    latencies: deque = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, what: str, latency: float | None = None, violation: bool = False) -> None:
        with self.lock:
            setattr(self, what, getattr(self, what) + 1)
            if latency is not None:
                self.latencies.append(latency)
                self.violations += violation

    def as_dict(self, qos: float) -> dict:
        with self.lock:
            lat = np.array(self.latencies)
            p50, p99 = (float(np.quantile(lat, 0.5)), float(np.quantile(lat, 0.99))) if lat.size else (math.nan, math.nan)
            return {"calls": self.calls, "ok": self.ok, "violations": self.violations, "too_large": self.too_large,
                    "bad_request": self.bad_request, "failed": self.failed, "qos_s": qos,
                    "p50_s": p50, "p99_s": p99}


@dataclass
class Service:
    name: str
    func_id: int
    model: object
    estimator: object
    features: int
    classes: int
    max_nodes: int
    max_edges: int
    qos: float
    stats: ServiceStats = field(default_factory=ServiceStats)


@dataclass
class _Call:
    service: Service
    x: np.ndarray
    edge_index: np.ndarray
    reply: memoryview
    batch: "_Batch"
    slot: int
    arrived: float


class _Batch:
    """One callback's calls: its Future is done when every call has its result."""

    def __init__(self, n: int):
        self.results: list = [None] * n
        self.pending = n
        self.future: Future = Future()
        self.lock = threading.Lock()

    def finish(self, slot: int, result) -> None:
        with self.lock:
            self.results[slot] = result
            self.pending -= 1
            done = self.pending == 0
        if done:
            self.future.set_result(self.results)


def host_memory() -> int:
    """This machine's physical memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class CoLocation:
    """Co-located GNN services under one memory budget (bytes) and one grouping policy (groups.POLICIES;
    "serial" runs one call at a time: the baseline). device "cpu" only for now. torch_threads: PyTorch's
    intra-op threads, set at start() (None: leave them). Register services with add() before the
    server starts; start() before serving, stop() after the server stops."""

    def __init__(self, budget: int, *, policy: str = "bqt", device: str = "cpu", max_parallel: int = 64,
                 torch_threads: int | None = 1):
        if device != "cpu":
            raise ValueError(f"co-location on {device!r}: only 'cpu' is built (the GPU path, streams and "
                             "torch.cuda.MemPool per group, is not)")
        total = host_memory()
        if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
            raise ValueError(f"the memory budget must be a positive number of bytes, got {budget!r}")
        if budget > total:
            raise ValueError(f"the memory budget {budget} B exceeds the device's memory ({device}: {total} B)")
        self.budget, self.policy, self.device = budget, policy, device
        self._sched = groups.CoScheduler(budget, policy)
        self._services: dict[int, Service] = {}
        self._calls: dict[int, _Call] = {}
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="splitrpc-colocate")
        self._torch_threads = torch_threads
        self.groups_run = 0
        self.grouped_calls = 0  # calls the groups ran (with groups_run, under the same lock)
        self.group_sizes: deque = deque(maxlen=LATENCY_WINDOW)

    # ------------------------------------------------------------------ registration

    def add(self, server, func_id: int, name: str, model, *, features: int, classes: int, max_nodes: int,
            max_edges: int, qos: float | None = None, estimator=None, sample: tuple[int, int] | None = None,
            max_batch: int = 8) -> Service:
        """Registers `model` (a torch module taking (x, edge_index)) as raw function func_id of server.
        qos: seconds, or None to measure: QOS_FACTOR x the median of 3 standalone runs on a random
        request of `sample` (NN, NE) (default: a tenth of the limits). estimator: an object with
        estimate(nn, ne) -> Estimate or bytes (default pmc.Estimator(model))."""
        import torch

        if func_id in self._services:
            raise ValueError(f"func_id {func_id} is already a co-located service")
        if max_nodes < 1 or max_edges < 1 or features < 1 or classes < 1:
            raise ValueError("max_nodes, max_edges, features and classes must be positive")
        if estimator is None:
            from splitrpc.services.colocation import pmc
            estimator = pmc.Estimator(model)
        if qos is None:
            nn, ne = sample or (max(1, max_nodes // 10), max(1, max_edges // 10))
            g = np.random.default_rng(func_id)
            x = torch.from_numpy(g.standard_normal((nn, features), dtype=np.float32))
            ei = torch.from_numpy(g.integers(0, nn, (2, ne), dtype=np.int64))
            times = []
            with torch.inference_mode():
                for _ in range(3):
                    t0 = time.perf_counter()
                    model(x, ei)
                    times.append(time.perf_counter() - t0)
            qos = QOS_FACTOR * float(np.median(times))
        if not (isinstance(qos, (int, float)) and math.isfinite(qos) and qos > 0):
            raise ValueError(f"qos must be a positive number of seconds, got {qos!r}")
        limit = server.max_message
        need = max(request_size(max_nodes, max_edges, features), 4 * max_nodes * classes)
        if need > limit:
            raise ValueError(f"{name}: requests or replies of up to {max_nodes} nodes and {max_edges} edges take "
                             f"{need} bytes, over the server's max_message {limit}: lower the limits or raise "
                             "Server(max_message=...)")
        svc = Service(name, func_id, model, estimator, features, classes, max_nodes, max_edges, float(qos))
        server.add_function(self._callback(svc), func_id, name, raw=True, max_batch=max_batch,
                            max_request=request_size(max_nodes, max_edges, features),
                            max_response=4 * max_nodes * classes)
        if not self._services:  # the first service: the scheduler's counters join the server's stats()
            server.add_stats_source("colocation", self.stats)
        self._services[func_id] = svc
        return svc

    def _callback(self, svc: Service):
        def colocated(requests, responses):
            batch = _Batch(len(requests))
            for slot, (req, resp) in enumerate(zip(requests, responses)):
                svc.stats.count("calls")
                try:
                    x, ei = parse_request(req, svc.features, svc.max_nodes, svc.max_edges)
                except BadRequest as e:
                    svc.stats.count("bad_request")
                    batch.finish(slot, e)
                    continue
                try:
                    est = svc.estimator.estimate(x.shape[0], ei.shape[1])
                    pmc = getattr(est, "pmc", est)
                except Exception as e:  # noqa: BLE001 - the estimator's failure fails this call only
                    svc.stats.count("failed")
                    batch.finish(slot, InternalError(f"PMC estimator failed: {type(e).__name__}: {e}"))
                    continue
                if isinstance(pmc, float) and pmc.is_integer():
                    pmc = int(pmc)
                seq = next(self._seq)
                req_ = groups.Request(seq, pmc, svc.qos, svc.name)
                call = _Call(svc, x, ei, resp, batch, slot, time.monotonic())
                with self._cond:
                    if self._stopping:
                        svc.stats.count("failed")
                        batch.finish(slot, InternalError("the co-location scheduler stopped"))
                        continue
                    try:
                        self._sched.submit(req_)
                    except groups.Refused as e:
                        too_big = isinstance(pmc, int) and pmc > self.budget
                        if too_big:
                            svc.stats.count("too_large")
                            err = TooLarge(f"PMC estimate {pmc} B exceeds the co-location memory budget {self.budget} B")
                        else:
                            svc.stats.count("failed")
                            err = InternalError(f"PMC estimate refused: {e}")
                        batch.finish(slot, err)
                        continue
                    self._calls[seq] = call
                    self._cond.notify()
            return batch.future if batch.pending else batch.results

        colocated.__name__ = svc.name
        return colocated

    # ------------------------------------------------------------------ running

    def start(self) -> "CoLocation":
        if self._torch_threads is not None:
            import torch
            torch.set_num_threads(self._torch_threads)
        self._thread = threading.Thread(target=self._dispatch, name="splitrpc-colocate-dispatch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops forming groups (the running one finishes); calls still queued, and any that arrive
        later, fail with INTERNAL. Stop the server first to have every accepted call answered."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._cond:
            left = [self._calls.pop(r.seq) for r in self._sched.queue if r.seq in self._calls]
            self._sched.queue.clear()
        for c in left:
            c.batch.finish(c.slot, InternalError("the co-location scheduler stopped"))
        self._pool.shutdown(wait=True)

    def _dispatch(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._sched.queue:
                    self._cond.wait()
                if self._stopping:
                    return
                group = self._sched.next_group()
                calls = [(r, self._calls.pop(r.seq)) for r in group]
            futures = [self._pool.submit(self._run, c) for _, c in calls]
            for f in futures:
                f.exception()  # wait; _run reports its own errors
            with self._cond:
                for r, _ in calls:
                    self._sched.done(r)
                self.groups_run += 1
                self.grouped_calls += len(calls)
                self.group_sizes.append(len(calls))

    def _run(self, c: _Call) -> None:
        import torch

        svc = c.service
        try:
            with torch.inference_mode():
                out = svc.model(torch.from_numpy(c.x), torch.from_numpy(c.edge_index))
            y = out.detach().to(torch.float32).contiguous().numpy()
            if y.shape != (c.x.shape[0], svc.classes):
                raise ValueError(f"the model returned shape {tuple(y.shape)}, not ({c.x.shape[0]}, {svc.classes})")
            np.frombuffer(c.reply, dtype=np.uint8, count=y.nbytes)[:] = y.reshape(-1).view(np.uint8)
            took = time.monotonic() - c.arrived
            svc.stats.count("ok", took, took > svc.qos)
            c.batch.finish(c.slot, y.nbytes)
        except Exception as e:  # noqa: BLE001 - this call fails alone
            svc.stats.count("failed")
            c.batch.finish(c.slot, InternalError(f"{svc.name}: {type(e).__name__}: {e}"))

    def stats(self) -> dict:
        """The scheduler's counters: policy, budget, memory reserved now and at most, groups run and
        their mean size, calls queued, and per service its calls, results and latency percentiles."""
        with self._cond:
            return {"policy": self.policy, "budget": self.budget, "reserved": self._sched.reserved,
                    "peak_reserved": self._sched.peak_reserved, "groups": self.groups_run,
                    "grouped_calls": self.grouped_calls,
                    "mean_group_size": float(np.mean(self.group_sizes)) if self.group_sizes else 0.0,
                    "queued": len(self._sched.queue),
                    "services": {s.name: s.stats.as_dict(s.qos) for s in self._services.values()}}
