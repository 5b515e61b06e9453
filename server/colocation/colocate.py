"""colocate.py: GNN services co-located on one device under a memory budget: each call's PMC estimated when it arrives, calls grouped across services by FIFO / SQTF / BQT (groups.py), a group's calls run at once, groups one after another; a call that can never fit answered TOO_LARGE (after GNNSched, Sun et al., 2024).

A service is a raw splitrpc function (one per model) whose request is a subgraph:
    int64 NN, int64 NE, float32 x[NN][F], int64 edge_index[2][NE]   (little-endian, packed)
F the service's input width; edge ids in 0 .. NN - 1 (row 0 sources, row 1 destinations). The
reply is the float32 logits [NN][C]. A request that is short, long, or has NN or NE < 1 or above
the service's limits, or an edge id out of range, fails that call alone with BAD_REQUEST; an
estimator that raises or returns something other than a positive finite number of bytes fails that
call alone with INTERNAL; a call whose PMC exceeds the budget gets TOO_LARGE naming both.

Threads: a CoLocation is its services' executor (splitrpc.Executor), and each batch it gets is
one call. Its submit, on the server's worker, parses the call, estimates its PMC and queues it in
the scheduler (or answers it at once with its error); one dispatcher thread forms groups (under the
lock) and runs a group's calls at once, the call in slot k of its group on slot k's own thread
(on a GPU with slot k's own stream: a thread and a stream per slot keep the libraries' per-thread,
per-stream workspaces to one per slot); when the group's last call ends its memory is released and the next group forms. The
server's start and stop start and stop it (Executor.acquire / release), and Server.stats()
["executors"] reports its load. Where the calls run is its place (device.py): on the CPU the
memory is a budget accountant (the CoScheduler's reservation); on a CUDA device each call of a
group runs on its own stream, the group's memory comes from one MemPool, and the allocator is
capped at the models' memory plus the budget, so the device refuses what the estimates missed
(that call fails alone, INTERNAL). The CUDA place has not run in CI (no GPU): `splitrpc check`'s
device-colocate section runs it.

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from splitrpc.errors import BadRequest, InternalError, TooLarge
from splitrpc.executor import Executor
from splitrpc.services.colocation import groups
from splitrpc.services.colocation.device import DeviceBudgetExceeded, place_for

HEADER = struct.Struct("<qq")   # NN, NE
LATENCY_WINDOW = 4096           # calls per service kept for the latency percentiles in stats()
QOS_FACTOR = 2.0                # QoS target = this x standalone time (GNNSched, after Abacus)
_here = threading.local()       # the call (or its error) of the job this thread runs


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
    """One call queued in the scheduler: its service, parsed subgraph, BatchJob and arrival."""
    service: Service
    x: np.ndarray
    edge_index: np.ndarray
    job: object
    arrived: float
    group: object = None  # the place's Group it runs in, and its slot there (set by the dispatcher)
    slot: int = 0


def host_memory() -> int:
    """This machine's physical memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class CoLocation(Executor):
    """Co-located GNN services under one memory budget (bytes) and one grouping policy (groups.POLICIES;
    "serial" runs one call at a time: the baseline), as the executor of their functions: each batch
    (one call) it is handed waits in the scheduler for its group. device: "cpu" (the budget is the
    scheduler's reservation) or "cuda:N" (device.CudaPlace: a stream per call of a group, a memory
    pool per group, the allocator capped at the models' memory plus the budget; never run on a GPU
    in CI: `splitrpc check`'s device-colocate section runs it).
    max_parallel: calls of a group run at once, at most (one thread each), and calls of one service
    handed to it, at most (the engine holds the others back). torch_threads: PyTorch's intra-op
    threads, set when it starts (None: leave them). Register services with add() before the server
    starts; the server's start and stop start and stop it (start() and stop() do so by hand; after
    stop() it refuses every call)."""

    name = "colocation"

    def __init__(self, budget: int, *, policy: str = "bqt", device: str = "cpu", max_parallel: int = 64,
                 torch_threads: int | None = 1):
        if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
            raise ValueError(f"the memory budget must be a positive number of bytes, got {budget!r}")
        if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
            raise ValueError(f"max_parallel must be a positive integer, got {max_parallel!r}")
        self.place = place_for(device, budget, max_parallel, host_memory())
        total = self.place.total
        if budget > total:
            raise ValueError(f"the memory budget {budget} B exceeds the device's memory ({device}: {total} B)")
        self.budget, self.policy, self.device = budget, policy, device
        self.threads = max_parallel
        self._sched = groups.CoScheduler(budget, policy)
        self._services: dict[str, Service] = {}  # by function name (BatchJob.name)
        self._calls: dict[int, _Call] = {}
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False  # stop(): every call from now on is refused
        self._users = 0        # servers running with it (acquire / release)
        self._thread: threading.Thread | None = None
        self._slots: list[ThreadPoolExecutor] = []  # slot k's one thread (its threads start when first used)
        self._torch_threads = torch_threads
        self.groups_run = 0
        self.grouped_calls = 0  # calls the groups ran (with groups_run, under the same lock)
        self.running = 0        # calls of the group running now
        self.busy_s = 0.0       # seconds a group was running
        self.group_sizes: deque = deque(maxlen=LATENCY_WINDOW)

    def __repr__(self) -> str:
        return f"CoLocation({self.budget}, policy={self.policy!r}, max_parallel={self.threads})"

    # ------------------------------------------------------------------ registration

    def add(self, server, func_id: int, name: str, model, *, features: int, classes: int, max_nodes: int,
            max_edges: int, qos: float | None = None, estimator=None, sample: tuple[int, int] | None = None) -> Service:
        """Registers `model` (a torch module taking (x, edge_index)) as raw function func_id of server,
        run by this executor, one call per batch (a call is what the scheduler groups).
        qos: seconds, or None to measure: QOS_FACTOR x the median of 3 standalone runs on a random
        request of `sample` (NN, NE) (default: a tenth of the limits). estimator: an object with
        estimate(nn, ne) -> Estimate or bytes (default pmc.Estimator(model), traced on the host
        before the model moves to the device)."""
        if name in self._services:  # its key: a BatchJob names its function (func ids are per server)
            raise ValueError(f"{name!r} is already a co-located service")
        if max_nodes < 1 or max_edges < 1 or features < 1 or classes < 1:
            raise ValueError("max_nodes, max_edges, features and classes must be positive")
        if estimator is None:
            from splitrpc.services.colocation import pmc
            estimator = pmc.Estimator(model)
        model = self.place.prepare(model)
        if qos is None:  # standalone on the place, outside any group (one more run first: a GPU's warm-up)
            nn, ne = sample or (max(1, max_nodes // 10), max(1, max_edges // 10))
            g = np.random.default_rng(func_id)
            x = g.standard_normal((nn, features), dtype=np.float32)
            ei = g.integers(0, nn, (2, ne), dtype=np.int64)
            times = []
            for _ in range(4 if self.place.kind == "cuda" else 3):
                t0 = time.perf_counter()
                self.place.forward(model, x, ei, None, 0)
                times.append(time.perf_counter() - t0)
            qos = QOS_FACTOR * float(np.median(times[-3:]))
        if not (isinstance(qos, (int, float)) and math.isfinite(qos) and qos > 0):
            raise ValueError(f"qos must be a positive number of seconds, got {qos!r}")
        limit = server.max_message
        need = max(request_size(max_nodes, max_edges, features), 4 * max_nodes * classes)
        if need > limit:
            raise ValueError(f"{name}: requests or replies of up to {max_nodes} nodes and {max_edges} edges take "
                             f"{need} bytes, over the server's max_message {limit}: lower the limits or raise "
                             "Server(max_message=...)")
        svc = Service(name, func_id, model, estimator, features, classes, max_nodes, max_edges, float(qos))
        server.add_function(self._callback(svc, self.place), func_id, name, raw=True, max_batch=1, executor=self,
                            max_request=request_size(max_nodes, max_edges, features),
                            max_response=4 * max_nodes * classes)
        if not self._services:  # the first service: the scheduler's counters join the server's stats() and /metrics
            from splitrpc.services.colocation import metrics

            server.add_stats_source("colocation", self.stats, metrics=metrics.families)
        self._services[name] = svc
        return svc

    @staticmethod
    def _callback(svc: Service, place):
        """The service's callback, which this executor runs with the call's parsed subgraph, or the
        error that answers it, in _here.call: it runs the model on the place (in the call's group
        and slot) and writes the reply."""
        def colocated(requests, responses):
            call = getattr(_here, "call", None)
            if call is None:  # run by something other than its CoLocation: a setup error, said so
                raise InternalError(f"{svc.name}: a co-located service runs on its CoLocation executor only")
            if isinstance(call, Exception):
                return [call]
            try:
                y = place.forward(svc.model, call.x, call.edge_index, call.group, call.slot)
                if y.shape != (call.x.shape[0], svc.classes):
                    raise ValueError(f"the model returned shape {tuple(y.shape)}, not ({call.x.shape[0]}, {svc.classes})")
                np.frombuffer(responses[0], dtype=np.uint8, count=y.nbytes)[:] = y.reshape(-1).view(np.uint8)
            except DeviceBudgetExceeded as e:  # the device enforced the budget on this call alone
                svc.stats.count("failed")
                return [InternalError(f"{svc.name}: {e}")]
            except Exception as e:  # noqa: BLE001 - this call fails alone
                svc.stats.count("failed")
                return [InternalError(f"{svc.name}: {type(e).__name__}: {e}")]
            took = time.monotonic() - call.arrived
            svc.stats.count("ok", took, took > svc.qos)
            return [y.nbytes]

        colocated.__name__ = svc.name
        return colocated

    # ------------------------------------------------------------------ the executor

    def submit(self, job) -> None:
        """On the server's worker: parses the call's subgraph and estimates its PMC, then queues it
        for its group. A call that fails here (bad subgraph, estimator, over the budget, stopped)
        is answered at once: its job runs on this thread with the error."""
        svc = self._services[job.name]
        svc.stats.count("calls")
        try:
            x, ei = parse_request(job.call_args[0][0], svc.features, svc.max_nodes, svc.max_edges)
        except BadRequest as e:
            svc.stats.count("bad_request")
            return _run(job, e)
        try:
            est = svc.estimator.estimate(x.shape[0], ei.shape[1])
            pmc = getattr(est, "pmc", est)
        except Exception as e:  # noqa: BLE001 - the estimator's failure fails this call only
            svc.stats.count("failed")
            return _run(job, InternalError(f"PMC estimator failed: {type(e).__name__}: {e}"))
        if isinstance(pmc, float) and pmc.is_integer():
            pmc = int(pmc)
        seq = next(self._seq)
        with self._cond:
            if self._stopped:
                err = InternalError("the co-location scheduler stopped")
            else:
                try:
                    self._sched.submit(groups.Request(seq, pmc, svc.qos, svc.name))
                    self._calls[seq] = _Call(svc, x, ei, job, time.monotonic())
                    self._cond.notify()
                    return
                except groups.Refused as e:
                    if isinstance(pmc, int) and pmc > self.budget:
                        svc.stats.count("too_large")
                        err = TooLarge(f"PMC estimate {pmc} B exceeds the co-location memory budget {self.budget} B")
                    else:
                        err = InternalError(f"PMC estimate refused: {e}")
        if not isinstance(err, TooLarge):
            svc.stats.count("failed")
        _run(job, err)

    def acquire(self) -> None:
        """A server that uses it starts: so does the dispatcher, with the first."""
        with self._cond:
            self._users += 1
        self.start()

    def release(self) -> None:
        """A server that used it stopped (its calls done): the dispatcher stops with the last."""
        with self._cond:
            if self._users == 0:
                return
            self._users -= 1
            if self._users:
                return
        self._halt()

    def load(self) -> dict:
        """{"kind": "colocation", "threads", "queued", "running", "batches", "busy_s", "groups",
        "policy", "budget", "reserved"}: calls queued for a group, running in one, and run."""
        with self._cond:
            return {"kind": "colocation", "threads": self.threads, "queued": len(self._sched.queue),
                    "running": self.running, "batches": self.grouped_calls, "busy_s": round(self.busy_s, 6),
                    "groups": self.groups_run, "policy": self.policy, "budget": self.budget,
                    "reserved": self._sched.reserved}

    # ------------------------------------------------------------------ running

    def start(self) -> "CoLocation":
        """Starts the dispatcher (the server's start does it; again is a no-op)."""
        with self._cond:
            if self._thread is not None or self._stopped:
                return self
            if self._torch_threads is not None:
                _torch().set_num_threads(self._torch_threads)
            self.place.start()
            self._slots = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"splitrpc-colocate-{k}")
                           for k in range(self.threads)]
            self._thread = threading.Thread(target=self._dispatch, name="splitrpc-colocate-dispatch", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stops forming groups for good (the running one finishes); calls still queued, and any that
        arrive later, fail with INTERNAL. Stop the server first to have every accepted call answered."""
        with self._cond:
            self._stopped = True
        self._halt()

    def _halt(self) -> None:
        """Stops the dispatcher (the running group finishes) and answers the calls still queued with
        INTERNAL; a later start() starts it again unless stop() was called."""
        with self._cond:
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._cond:
            left = [self._calls.pop(r.seq) for r in self._sched.queue if r.seq in self._calls]
            self._sched.queue.clear()
            slots, self._slots = self._slots, []
        for c in left:
            c.service.stats.count("failed")
            _run(c.job, InternalError("the co-location scheduler stopped"))
        for ex in slots:
            ex.shutdown(wait=True)

    def _dispatch(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cond:
                while self._thread is me and not self._sched.queue:
                    self._cond.wait()
                if self._thread is not me:
                    return
                group = self._sched.next_group()
                calls = [(r, self._calls.pop(r.seq)) for r in group]
                self.running = len(calls)
                slots = self._slots
            t0 = time.perf_counter()
            with self.place.group(sum(r.pmc for r, _ in calls), len(calls)) as g:
                for slot, (_, c) in enumerate(calls):
                    c.group, c.slot = g, slot
                # slot k on thread k mod threads, with stream k mod streams (the place's choice):
                # a group larger than the threads queues its later calls behind its first ones
                for f in [slots[slot % len(slots)].submit(_run, c.job, c) for slot, (_, c) in enumerate(calls)]:
                    f.exception()  # wait; a job answers its own errors
            with self._cond:
                for r, _ in calls:
                    self._sched.done(r)
                self.running = 0
                self.busy_s += time.perf_counter() - t0
                self.groups_run += 1
                self.grouped_calls += len(calls)
                self.group_sizes.append(len(calls))

    def stats(self) -> dict:
        """The scheduler's counters: policy, budget, memory reserved now and at most, groups run and
        their mean size, calls queued, and per service its calls, results and latency percentiles."""
        with self._cond:
            return {"policy": self.policy, "budget": self.budget, "place": self.place.report(),
                    "reserved": self._sched.reserved,
                    "peak_reserved": self._sched.peak_reserved, "groups": self.groups_run,
                    "grouped_calls": self.grouped_calls,
                    "mean_group_size": float(np.mean(self.group_sizes)) if self.group_sizes else 0.0,
                    "queued": len(self._sched.queue),
                    "services": {s.name: s.stats.as_dict(s.qos) for s in self._services.values()}}


def _run(job, call) -> None:
    """Runs a co-located service's BatchJob on this thread with `call` (its _Call, or the error that
    answers it) where the service's callback reads it."""
    _here.call = call
    try:
        job()
    finally:
        _here.call = None


def _torch():
    import torch
    return torch
