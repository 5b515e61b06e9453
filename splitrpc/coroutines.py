"""coroutines.py: `async def` server functions: the one event loop a server runs them on (a thread of its own, never the worker's nor the engine's), and the callbacks that hand a batch, or each call of it, to that loop and return the concurrent.futures.Future the worker finishes the batch from."""
from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import threading
from typing import Any, Callable, Coroutine

from splitrpc.errors import InternalError, RemoteError, SplitRPCError

log = logging.getLogger("splitrpc.server")

THREAD_NAME = "splitrpc-asyncio"  # the loop's thread: what a callback sees as threading.current_thread().name


def is_coroutine_function(fn: Callable[..., Any]) -> bool:
    """fn is an `async def` function (or a callable object whose __call__ is)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


class ServerLoop:
    """A server's event loop, run on its own thread from the server's start to its stop. The loop
    comes from asyncio's current policy (uvloop's, where the program installed it). submit() from
    any thread; start() and stop() from the thread that starts and stops the server."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        ready = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            try:
                loop = asyncio.new_event_loop()  # the policy's: a broken one fails start(), not hangs it
                asyncio.set_event_loop(loop)
                self.loop = loop
            except BaseException as e:
                failed.append(e)
                return
            finally:
                ready.set()
            try:
                loop.run_forever()
                tasks = asyncio.all_tasks(loop)  # cancelled by stop(); let them see it
                if tasks:
                    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name=THREAD_NAME, daemon=True)
        self._thread.start()
        ready.wait()
        if failed:
            self._thread.join()
            self._thread = None
            raise SplitRPCError(f"cannot make the server's event loop: {type(failed[0]).__name__}: {failed[0]}") \
                from failed[0]

    def on_loop_thread(self) -> bool:
        """The caller is the loop's own thread (an async function's body)."""
        t = self._thread
        return t is not None and t.ident == threading.get_ident()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Runs coro on the loop; its Future. Any thread."""
        loop = self.loop
        if loop is None or loop.is_closed():
            coro.close()
            raise SplitRPCError("the server's event loop is not running")
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def cancel_all(self) -> None:
        """Cancels every task on the loop: a stop that does not wait for them (their batches get
        INTERNAL). Any thread."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(lambda: [t.cancel() for t in asyncio.all_tasks(loop)])

    def stop(self) -> None:
        """Stops the loop (its tasks cancelled) and waits for its thread."""
        t, loop = self._thread, self.loop
        if t is None or loop is None:
            return
        if not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        t.join()
        self._thread = self.loop = None


def batch_callback(coro_fn: Callable[..., Coroutine[Any, Any, Any]],
                   server_loop: ServerLoop) -> Callable[..., concurrent.futures.Future[Any]]:
    """A tensor callback that runs coro_fn(*inputs, *outputs) for the whole batch on the loop; its
    result is a plain callback's (None, or {call index: RemoteError}), its exception fails the batch
    with INTERNAL."""
    def callback(*arrays: Any) -> concurrent.futures.Future[Any]:
        return server_loop.submit(coro_fn(*arrays))

    return callback


def per_call_callback(coro_fn: Callable[..., Coroutine[Any, Any, Any]], server_loop: ServerLoop,
                      name: str) -> Callable[..., concurrent.futures.Future[Any]]:
    """A tensor callback that runs coro_fn once per call of the batch, concurrently on the loop,
    each with that call's arrays (one element: the spec's shape, no batch dimension); the batch is
    finished when all are. A call whose coroutine raises a RemoteError fails alone with it; any
    other exception fails it alone with INTERNAL."""
    async def run_calls(arrays: tuple[Any, ...]) -> dict[int, RemoteError] | None:
        count = arrays[0].shape[0]
        outcomes = await asyncio.gather(*[coro_fn(*(a[i, ...] for a in arrays)) for i in range(count)],
                                        return_exceptions=True)
        failed: dict[int, RemoteError] = {}
        for i, r in enumerate(outcomes):
            if isinstance(r, RemoteError):
                failed[i] = r
            elif isinstance(r, BaseException):
                log.warning("function %s raised %s: %s (call %d of its batch)", name, type(r).__name__, r, i)
                failed[i] = InternalError(f"{type(r).__name__}: {r}")
            elif r is not None:
                failed[i] = InternalError(f"a per-call function returns None (or raises), got {type(r).__name__}")
        return failed or None

    def callback(*arrays: Any) -> concurrent.futures.Future[Any]:
        return server_loop.submit(run_calls(arrays))

    return callback
