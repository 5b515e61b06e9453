"""executor.py: where a function's batches run: inline on the server's worker thread (the default, the fastest for tiny callbacks), on a ThreadPool, on a LanePool (named lanes, each batch routed to one by its arguments), or through a StagePipeline (two stages of threads, pipelined), so that one function's slow batch does not hold the others'. Executor is the interface every one implements.

A pool's thread takes a batch the worker handed it (deferred: its Tensor Queue elements stay
the function's), runs the callback and finishes the batch from that thread; the worker, which
never waits for it, sends the replies. Replies of one function still leave in the order its
batches were taken. A function on a pool of N threads has at most N batches out at once: while
they run, its calls wait in its queue and grow its next batch, and the worker serves the other
functions.
"""
from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from typing import Any, Callable, Iterable

INLINE = "inline"
log = logging.getLogger("splitrpc.executor")
_here = threading.local()  # the lane of the batch this thread runs (LanePool)


class BatchJob(functools.partial[None]):
    """One deferred batch handed to an executor: calling it runs the function's callback and
    finishes the batch (its errors included; it never raises). An executor may read name (the
    function's), count, call_args and call_kwargs (e.g. costs=) to decide where it runs, and
    must not change them. Made by the server's worker as BatchJob(run, name, count, call_args,
    call_kwargs, *rest), which calls run(name, count, call_args, call_kwargs, *rest): a partial,
    built in C (the pool path makes one per batch); run once, on any thread."""

    __slots__ = ()
    name = property(lambda self: self.args[0])
    count = property(lambda self: self.args[1])
    call_args = property(lambda self: self.args[2])
    call_kwargs = property(lambda self: self.args[3])
    # which of its function's class queues the batch came from (aux_classes or cost_classes; 0
    # without classes): the run's fifth argument is the worker's record of that queue
    aux_class = property(lambda self: self.args[5].aux_class)


class Executor:
    """The interface of an executor (``Server.function(..., executor=E)``): `threads` batches of
    a function at most run at once (the engine holds the others back, so they batch up);
    submit(job) queues a BatchJob and returns at once, and the job finishes its batch from
    whatever thread runs it; acquire()/release() bracket each server that uses it (threads run
    while one does); load() reports what it holds and did. submit runs on the server's worker;
    load on any thread."""

    threads = 1
    name = "executor"
    # batches of one queue (a function, or one class of a function with classes) out at once at
    # most; None: `threads`. LanePool.by_class sets it to its lanes' threads: each class has a lane.
    queue_threads: int | None = None

    def submit(self, job: BatchJob) -> None:
        raise NotImplementedError

    def acquire(self) -> None:
        """A server that uses it starts (nothing by default)."""

    def release(self) -> None:
        """A server that used it stopped, its jobs done (nothing by default)."""

    def load(self) -> dict[str, Any]:
        """What it holds and did (Server.stats()["executors"]); by default its kind and threads."""
        return {"kind": type(self).__name__, "threads": self.threads}


class _Meter:
    """started / finished / busy seconds of the jobs of one pool, without a lock on the batch
    path: each of its threads keeps its own tally, which only it writes; read() sums them (any
    thread; a batch that starts meanwhile may be seen as queued or as running)."""

    def __init__(self) -> None:
        self._tallies: list[list[float]] = []  # one [started, finished, busy_s] per thread

    def tally(self) -> list[float]:
        """A new thread's tally (the thread keeps it in a local variable)."""
        tally: list[float] = [0, 0, 0.0]
        self._tallies.append(tally)  # list.append is atomic under the GIL
        return tally

    def read(self) -> tuple[float, float, float]:
        """(started, finished, busy_s): each thread's tally copied at once (a tuple of a list is one
        step under the GIL, and a thread counts a batch started before finished), so running =
        started - finished stays between 0 and the threads."""
        snap = [tuple(t) for t in list(self._tallies)]
        return sum(t[0] for t in snap), sum(t[1] for t in snap), sum(t[2] for t in snap)


class ThreadPool(Executor):
    """N threads that run the batches of the functions given it (``Server.function(...,
    executor=pool)``), several at once: callbacks that release the GIL (numpy, PyTorch,
    ``time.sleep``, I/O) overlap each other and the worker. One pool may serve several functions,
    of one server or of several; its threads run while a server that uses it runs.
    """

    def __init__(self, threads: int, name: str = "splitrpc-pool"):
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"a thread pool needs at least 1 thread, got {threads!r}")
        self.threads = threads
        self.name = name
        self._q: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._users = 0
        self._running: list[threading.Thread] = []
        self._meter = _Meter()

    def __repr__(self) -> str:
        return f"ThreadPool({self.threads}, name={self.name!r})"

    def submit(self, job: Callable[[], None]) -> None:
        """Queues job (no arguments) for the next free thread. The job handles its own errors."""
        self._q.put(job)

    def load(self) -> dict[str, Any]:
        """{"kind": "pool", "threads", "queued", "running", "batches", "busy_s"}."""
        started, finished, busy = self._meter.read()
        queued = self._q.qsize() if self._users else 0  # not the stop markers of release()
        return {"kind": "pool", "threads": self.threads, "queued": queued, "running": started - finished,
                "batches": finished, "busy_s": round(busy, 6)}

    def acquire(self) -> None:
        """A server that uses the pool starts: the threads start with its first user."""
        with self._lock:
            self._users += 1
            if self._users == 1:
                self._running = [threading.Thread(target=self._loop, name=f"{self.name}-{i}", daemon=True)
                                 for i in range(self.threads)]
                for t in self._running:
                    t.start()

    def release(self) -> None:
        """A server that used the pool stopped (its jobs are done): the threads end with its last user."""
        with self._lock:
            if self._users == 0:
                return
            self._users -= 1
            if self._users:
                return
            threads, self._running = self._running, []
            for _ in threads:
                self._q.put(None)
        for t in threads:
            if t is not threading.current_thread():
                t.join()

    def _loop(self) -> None:
        tally, clock = self._meter.tally(), time.perf_counter
        while True:
            job = self._q.get()
            if job is None:
                return
            tally[0] += 1
            t0 = clock()
            try:
                job()
            finally:
                tally[2] += clock() - t0
                tally[1] += 1


def current_lane() -> str | None:
    """The lane of the batch this thread runs for a LanePool (None on any other thread): a
    callback reads where its executor routed it."""
    return getattr(_here, "lane", None)


class LanePool(Executor):
    """Named lanes of threads (e.g. {"cpu": 1, "gpu": 1}: one batch at a time on each) and a
    route(job) -> lane name that picks the lane of each batch from its BatchJob (its
    call_kwargs' costs=, its call_args): batches of one lane queue behind each other and never behind another
    lane's. A route that raises or names no lane sends the batch to the first lane (logged), so
    no batch is lost. The callback reads its lane with current_lane(). Thread-safe as Executor
    says; one LanePool may serve several functions whose jobs its route understands."""

    def __init__(self, lanes: dict[str, int], route: Callable[[BatchJob], str | None], name: str = "splitrpc-lanes"):
        if not lanes or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in lanes.values()):
            raise ValueError(f"lanes must name at least one lane, each with 1 or more threads, got {lanes!r}")
        if not callable(route):
            raise ValueError(f"route must be callable, got {route!r}")
        self.lanes, self.route, self.name = dict(lanes), route, name
        self.threads = sum(self.lanes.values())
        self._pools = {lane: ThreadPool(n, name=f"{name}-{lane}") for lane, n in self.lanes.items()}
        self._first = next(iter(self.lanes))
        self.misrouted = 0
        self._misrouted_lock = threading.Lock()  # several servers' workers may submit

    def __repr__(self) -> str:
        return f"LanePool({self.lanes}, name={self.name!r})"

    @classmethod
    def by_class(cls, lanes: dict[str, int], classes: Iterable[str], name: str = "splitrpc-lanes") -> "LanePool":
        """A LanePool that runs each batch on the lane of its queue's class: classes[k] names the
        lane of class k (a function with cost_classes or aux_classes; a batch of a class past the
        list goes to the first lane, counted in misrouted). Each class's queue has at most its
        lane's threads of batches out, so each lane's batches form from its own class's calls
        (queue_threads)."""
        classes = list(classes)
        unknown = [c for c in classes if c not in lanes]
        if not classes or unknown:
            raise ValueError(f"classes must name lanes of {sorted(lanes)}, got {classes!r}")
        pool = cls(lanes, lambda job: classes[job.aux_class] if job.aux_class < len(classes) else None, name=name)
        pool.queue_threads = max(pool.lanes[c] for c in classes)
        return pool

    def submit(self, job: BatchJob) -> None:
        try:
            lane = self.route(job)
        except Exception as e:  # noqa: BLE001 - a route's bug must not lose the batch
            log.warning("%s: route raised %s: %s; the batch goes to lane %s", self.name, type(e).__name__, e,
                        self._first)
            lane = None
        if lane not in self._pools:
            if lane is not None:
                log.warning("%s: route named no lane (%r); the batch goes to lane %s", self.name, lane, self._first)
            with self._misrouted_lock:
                self.misrouted += 1
            lane = self._first

        def in_lane(job: BatchJob = job, lane: str = lane) -> None:
            _here.lane = lane
            try:
                job()
            finally:
                _here.lane = None

        self._pools[lane].submit(in_lane)

    def acquire(self) -> None:
        for p in self._pools.values():
            p.acquire()

    def release(self) -> None:
        for p in self._pools.values():
            p.release()

    def load(self) -> dict[str, Any]:
        """{"kind": "lanes", "threads", "misrouted", "lanes": {lane: ThreadPool.load()}}."""
        return {"kind": "lanes", "threads": self.threads, "misrouted": self.misrouted,
                "lanes": {lane: p.load() for lane, p in self._pools.items()}}


_NO_STAGE = object()  # stage_result() outside a StagePipeline's second stage


def stage_result() -> Any:
    """What the first stage of a StagePipeline returned for the batch this thread now runs (its
    exception is raised here); None on any other thread. A callback that may run either way
    computes the first stage itself when it gets None."""
    got = getattr(_here, "stage", _NO_STAGE)
    if got is _NO_STAGE:
        return None
    if isinstance(got, _StageFailed):
        raise got.error
    return got


class _StageFailed:
    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


class StagePipeline(Executor):
    """A function's batches through two stages of threads, pipelined: `first(job)` on one of
    `first_threads` threads (e.g. a recommendation model's embedding lookups, its SparseNet), then
    the job itself (the callback, which reads first's result with stage_result()) on one of
    `threads` threads (e.g. its MLPs, its DenseNet); a queue between them. While one batch is in
    the second stage the next is in the first, so each stage can be given the threads its share
    of the work needs (Hercules's sparse-dense pipeline scheduling, Ke et al., HPCA 2022).

    first runs on the batch before the job does, while the batch's elements stay the function's
    (deferred), so it may read job.call_args; it must not write the outputs. If first raises, the
    job still runs and stage_result() raises that error in its callback, so the batch fails with
    it (no batch is lost). `threads` (as the engine reads it: batches out at once) is both stages'
    threads together. Thread-safe as Executor says."""

    def __init__(self, first: Callable[[BatchJob], Any], first_threads: int, threads: int,
                 name: str = "splitrpc-stages"):
        for what, n in (("first_threads", first_threads), ("threads", threads)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"a stage pipeline needs {what} >= 1, got {n!r}")
        if not callable(first):
            raise ValueError(f"first must be callable, got {first!r}")
        self.first, self.name = first, name
        self.stage_threads = (first_threads, threads)
        self.threads = first_threads + threads
        self._first = ThreadPool(first_threads, name=f"{name}-first")
        self._second = ThreadPool(threads, name=f"{name}-second")
        self.first_failed = 0
        self._failed_lock = threading.Lock()

    def __repr__(self) -> str:
        first, second = self.stage_threads
        return f"StagePipeline(first_threads={first}, threads={second}, name={self.name!r})"

    def submit(self, job: BatchJob) -> None:
        self._first.submit(functools.partial(self._run_first, job))

    def _run_first(self, job: BatchJob) -> None:
        try:
            got = self.first(job)
        except Exception as e:  # noqa: BLE001 - the batch fails with it in the second stage
            with self._failed_lock:
                self.first_failed += 1
            got = _StageFailed(e)
        self._second.submit(functools.partial(self._run_second, job, got))

    @staticmethod
    def _run_second(job: BatchJob, got: object) -> None:
        _here.stage = got
        try:
            job()
        finally:
            _here.stage = _NO_STAGE

    def acquire(self) -> None:
        self._second.acquire()  # the second first: a first-stage thread hands to it at once
        self._first.acquire()

    def release(self) -> None:
        """Jobs done: the server stops a pool only when its batches are finished, so neither
        queue holds one."""
        self._first.release()
        self._second.release()

    def load(self) -> dict[str, Any]:
        """{"kind": "stages", "threads", "first_failed", "stages": [ThreadPool.load() of each]}."""
        return {"kind": "stages", "threads": self.threads, "first_failed": self.first_failed,
                "stages": [self._first.load(), self._second.load()]}


def resolve(executor: str | int | Executor | None, device_ordinal: int) -> Executor | None:
    """Server.function's executor argument: "inline" -> None; N -> a pool of its own with N
    threads; an Executor (ThreadPool, LanePool, or another) -> itself. Raises ValueError for
    anything else, and for an executor given to a GPU function (its callback only launches work
    on its stream: it stays inline)."""
    if executor is None or executor == INLINE:
        return None
    if isinstance(executor, Executor):
        pool = executor
    elif isinstance(executor, int) and not isinstance(executor, bool):
        pool = ThreadPool(executor)
    else:
        raise ValueError(f"executor must be 'inline', a number of threads or a splitrpc.ThreadPool (an executor), "
                         f"got {executor!r}")
    if device_ordinal >= 0:
        raise ValueError("a GPU function runs inline: its callback only queues work on its CUDA stream")
    return pool
