"""executor.py: where a function's batches run: inline on the server's worker thread (the default, the fastest for tiny callbacks) or on a ThreadPool, so that one function's slow batch does not hold the others'.

A pool's thread takes a batch the worker handed it (deferred: its Tensor Queue elements stay
the function's), runs the callback and finishes the batch from that thread; the worker, which
never waits for it, sends the replies. Replies of one function still leave in the order its
batches were taken. A function on a pool of N threads has at most N batches out at once: while
they run, its calls wait in its queue and grow its next batch, and the worker serves the other
functions.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable

INLINE = "inline"


class ThreadPool:
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
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._users = 0
        self._running: list[threading.Thread] = []

    def __repr__(self) -> str:
        return f"ThreadPool({self.threads}, name={self.name!r})"

    def submit(self, job: Callable[[], None]) -> None:
        """Queues job (no arguments) for the next free thread. The job handles its own errors."""
        self._q.put(job)

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
        while True:
            job = self._q.get()
            if job is None:
                return
            job()


def resolve(executor, device_ordinal: int) -> ThreadPool | None:
    """Server.function's executor argument: "inline" -> None; N -> a pool of its own with N
    threads; a ThreadPool -> itself. Raises ValueError for anything else, and for a pool given to
    a GPU function (its callback only launches work on its stream: it stays inline)."""
    if executor is None or executor == INLINE:
        return None
    if isinstance(executor, ThreadPool):
        pool = executor
    elif isinstance(executor, int) and not isinstance(executor, bool):
        pool = ThreadPool(executor)
    else:
        raise ValueError(f"executor must be 'inline', a number of threads or a splitrpc.ThreadPool, got {executor!r}")
    if device_ordinal >= 0:
        raise ValueError("a GPU function runs inline: its callback only queues work on its CUDA stream")
    return pool
