"""aio.py: the asyncio face of the client and of the pool: awaitable calls with the blocking ones' semantics, whose replies the event loop itself receives from each client's socket (loop.add_reader), with no thread and no hand-off per reply."""
from __future__ import annotations

import asyncio
import heapq
import threading
import time
from typing import Any, cast

from splitrpc import describe as describe_
from splitrpc import pool as _pool
from splitrpc import typed
from splitrpc._native import client as _client
from splitrpc.client import Client as _BlockingClient
from splitrpc.client import as_buffer
from splitrpc.errors import CallTimeout, SplitRPCError

_NONE = (1 << 64) - 1  # srpc_client_next_due: nothing due


class Client:
    """An asyncio splitrpc client for one server: ``await client.call(func_id, data)``.

    Takes the keywords of ``splitrpc.Client`` (timeout, retries, rto_*, window, busy_retry,
    busy_backoff, protocol, wait_for_ready, segment_size, max_reply, socket_buffer) and keeps its
    semantics: deadlines, retransmission, the flow-control window (calls beyond it wait in the
    client, each bound by its own timeout), ``Busy`` retried after a backoff, ``Draining``,
    ``Unavailable`` and per-call errors. Not ``busy_poll`` and not the DPDK transport: the loop
    sleeps on the client's socket.

    The client belongs to the event loop of its first call and is used from that loop's thread
    only. Its socket is watched with ``loop.add_reader``: when replies come, the loop receives
    them (one non-blocking pass of the native client, several replies at a time) and completes
    their futures; a timer wakes it when a retransmission, a retry after Busy or a call's timeout
    is due. A cancelled call is abandoned: forgotten by the native client, its late reply dropped
    and counted (``stats()["late_or_unknown"]``; ``abandoned`` counts the cancellations).
    """

    def __init__(self, host: str | None = None, port: int | None = None, timeout: float = 1.0, **settings: Any):
        if settings.get("busy_poll"):
            raise ValueError("splitrpc.aio.Client sleeps on its socket in the event loop: busy_poll is not for it")
        if settings.get("transport", "udp") != "udp":
            raise ValueError("splitrpc.aio.Client needs a socket to watch: the DPDK transport is polled, use "
                             "splitrpc.Client there")
        self._sync = _BlockingClient(host, port, timeout, **settings)  # validates and creates the native client
        self._cl = self._sync._cl
        self.host, self.port, self.timeout, self.max_reply = (self._sync.host, self._sync.port, self._sync.timeout,
                                                              self._sync.max_reply)
        self._fd = _client.fd(self._cl)
        self._done = _client.Completions(self._cl)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0  # the loop's thread (threading.get_ident), once attached
        self._pending: dict[int, tuple[asyncio.Future[bytes], float]] = {}  # req_id -> (future, deadline: monotonic s)
        self._deadlines: list[tuple[float, int]] = []  # heap of (deadline, req_id); finished ones left lazily
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self.abandoned = 0  # calls cancelled before their reply came

    # ------------------------------------------------------------------ calls

    async def call(self, func_id: int, data: Any = b"", timeout: float | None = None, *,
                   deadline: float | None = None, aux: int = 0, wait_for_ready: bool | None = None) -> bytes:
        """Calls func_id with data (bytes-like or numpy array) and returns the reply's bytes; as
        splitrpc.Client.call: timeout in seconds (the client's by default), deadline a
        time.monotonic() instant, aux the header's cost or class, wait_for_ready. Raises a
        RemoteError subclass for an ERROR reply, CallTimeout, Unavailable; cancelling the task
        abandons the call."""
        if isinstance(aux, bool) or not isinstance(aux, int) or not 0 <= aux <= 0xFFFF:
            raise ValueError(f"aux must be an integer from 0 to 65535, got {aux!r}")
        self._check_open()
        loop = self._attach()
        tmo = self._sync._budget(func_id, timeout, deadline)
        rid = _client.send(self._cl, func_id, as_buffer(data), tmo, aux, wait_for_ready)
        fut: asyncio.Future[bytes] = loop.create_future()
        dl = time.monotonic() + tmo
        self._pending[rid] = (fut, dl)
        heapq.heappush(self._deadlines, (dl, rid))
        self._arm()
        try:
            return await fut
        except asyncio.CancelledError:
            if self._pending.pop(rid, None) is not None and self._cl is not None:
                _client.release(self._cl, rid)  # its late reply is dropped (late_or_unknown)
                self.abandoned += 1
                # the release may have sent calls the window held (and finished one whose send
                # failed): a pass soon reaps those, and the timer is armed for their retransmission
                loop.call_soon(self._progress)
            raise

    async def describe(self, timeout: float | None = None) -> "describe_.Description":
        """What the server serves (splitrpc.Client.describe)."""
        return describe_.decode_description(await self.call(describe_.DESCRIBE_ID, describe_.DESCRIBE_REQUEST,
                                                            timeout))

    async def ping(self, timeout: float | None = None) -> dict[str, Any]:
        """The server's readiness over the wire (splitrpc.Client.ping)."""
        return describe_.decode_ping(await self.call(describe_.PING_ID, describe_.PING_REQUEST, timeout))

    async def function(self, name: str) -> "typed.AsyncFunction | typed.AsyncRawFunction":
        """The server's function `name` as a typed callable: ``await fn(*inputs, **inputs)``
        (splitrpc.Client.function)."""
        return await typed.async_directory_of(self).function(name, self)

    @property
    def fn(self) -> "typed.AsyncFunctions":
        """The server's functions as attributes: ``await client.fn.lenet(x)``."""
        return typed.AsyncFunctions(typed.async_directory_of(self), self)

    def stats(self) -> dict[str, int]:
        """The native client's counters (splitrpc.Client.stats), and ``abandoned``."""
        st = self._sync.stats()
        st["abandoned"] = self.abandoned
        return st

    def pending(self) -> int:
        """Calls made and not yet finished."""
        return len(self._pending)

    # ------------------------------------------------------------------ the loop's side

    def _attach(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop, self._loop_thread = loop, threading.get_ident()
            loop.add_reader(self._fd, self._progress)
        elif self._loop is not loop:
            raise RuntimeError("this splitrpc.aio.Client belongs to another event loop (one client per loop)")
        return loop

    def _progress(self) -> None:
        """Receives what has come (one non-blocking pass at a time), completes the futures of the
        calls that finished, times out those past their deadline and arms the timer. Loop thread."""
        if self._cl is None:
            return
        while True:
            done = self._done.wait(0)
            if done is None:  # the native client failed: nothing more will finish
                self._fail_all(SplitRPCError("the client's receive failed"))
                return
            for rid, code, reply in done:
                ent = self._pending.pop(rid, None)
                if ent is not None and not ent[0].done():
                    fut = ent[0]
                    fut.set_exception(_client.call_error(code, reply)) if code else fut.set_result(reply)
            if len(done) < self._done.batch:
                break
        self._expire()
        self._arm()

    def _expire(self) -> None:
        now = time.monotonic()
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            _, rid = heapq.heappop(heap)
            ent = self._pending.pop(rid, None)
            if ent is None:
                continue
            _client.release(self._cl, rid)
            if not ent[0].done():
                ent[0].set_exception(CallTimeout("no reply within the call's timeout"))

    def _arm(self) -> None:
        """The timer at the earlier of the native client's next due work and the first deadline."""
        heap = self._deadlines
        while heap and heap[0][1] not in self._pending:  # finished calls' entries
            heapq.heappop(heap)
        at = heap[0][0] if heap else float("inf")
        due = _client.next_due_ns(self._cl)
        if due != _NONE:
            at = min(at, time.monotonic() + (due - time.monotonic_ns()) / 1e9)
        if at >= self._timer_at or at == float("inf"):
            return
        if self._timer is not None:
            self._timer.cancel()
        assert self._loop is not None
        self._timer_at = at
        self._timer = self._loop.call_later(max(at - time.monotonic(), 0.0), self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        self._progress()

    def _fail_all(self, exc: BaseException) -> None:
        pending = list(self._pending.values())
        self._pending.clear()
        self._deadlines.clear()
        for fut, _ in pending:
            if not fut.done():
                fut.set_exception(exc)

    # ------------------------------------------------------------------ life

    def _check_open(self) -> None:
        if self._cl is None:
            raise SplitRPCError(_client.CLOSED)

    def close(self) -> None:
        """Fails the calls still pending (SplitRPCError "client is closed") and closes the client (its
        socket is freed when this object is dropped: splitrpc.Client.close). Any
        thread: from another one while the loop runs, it is done on the loop's thread, soon."""
        if self._cl is None:
            return
        loop = self._loop
        if loop is not None and loop.is_running() and threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(self.close)
            return
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._fd)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._fail_all(SplitRPCError(_client.CLOSED))
        self._sync.close()
        self._cl = None

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class Pool(_pool.Pool):
    """splitrpc.Pool for asyncio: ``await pool.call(func_id, data)`` over several replicas, with the
    blocking Pool's keywords and policy (power of two choices by expected wait, BUSY and DRAINING
    moved to another replica, an idempotent call moved after attempt_timeout, replicas from a
    list, a DNS name or a function re-read every refresh_interval, pings every probe_interval on
    the pool's thread). Each replica's calls go through a splitrpc.aio.Client, so the replies
    reach the event loop as the client's do. One event loop; close with ``await pool.aclose()``
    or ``async with``."""

    def _replica(self, address: tuple[str, int]) -> _pool.Replica:
        host, port = address
        # Replica.client is typed as the blocking Client; here it is this module's (same calls, awaited)
        return _pool.Replica((host, port),
                             Client(host, port, self.timeout, busy_retry=False,  # type: ignore[arg-type]
                                    **self._client_kw),
                             _BlockingClient(host, port, self.probe_timeout, retries=0, key=self._client_kw.get("key")))

    async def call(self, func_id: int, data: Any = b"", timeout: float | None = None, *,  # type: ignore[override]
                   idempotent: bool = False, aux: int = 0) -> bytes:
        """The reply of one call, from whichever replica answered it (splitrpc.Pool.call)."""
        with self._lock:
            if self._closed:
                raise SplitRPCError("pool is closed")
            self._inflight += 1
        try:
            attempts = self._attempts(func_id, timeout, idempotent)
            step = next(attempts)
            outcome: tuple[bytes | None, BaseException | None]
            while True:
                r, wait = step
                if r is None:
                    await asyncio.sleep(wait)
                    step = attempts.send(None)
                    continue
                try:
                    # every replica of this pool is made by _replica above, with a splitrpc.aio.Client
                    outcome = (await cast(Client, r.client).call(func_id, data, wait, aux=aux), None)
                except asyncio.CancelledError:
                    attempts.close()
                    self._count(r, "errors")
                    raise
                except BaseException as e:  # noqa: BLE001 - the policy decides what each one means
                    outcome = (None, e)
                try:
                    step = attempts.send(outcome)
                except StopIteration as done:
                    return cast(bytes, done.value)  # what _attempts returns: the reply
        finally:
            with self._lock:
                self._inflight -= 1
                if not self._inflight:
                    self._idle.notify_all()

    def call_async(self, *args: Any, **kw: Any) -> Any:
        raise TypeError("splitrpc.aio.Pool's calls are awaited: await pool.call(...)")

    async def describe(self, timeout: float | None = None) -> "describe_.Description":  # type: ignore[override]
        """What the service serves, as one of its replicas describes it."""
        return describe_.decode_description(await self.call(describe_.DESCRIBE_ID, describe_.DESCRIBE_REQUEST,
                                                            timeout, idempotent=True))

    async def function(self, name: str) -> "typed.AsyncFunction | typed.AsyncRawFunction":  # type: ignore[override]
        """The service's function `name` as a typed callable: ``await fn(*inputs, **inputs)``."""
        return await typed.async_directory_of(self).function(name, self)

    @property
    def fn(self) -> "typed.AsyncFunctions":  # type: ignore[override]
        """The service's functions as attributes: ``await pool.fn.lenet(x)``."""
        return typed.AsyncFunctions(typed.async_directory_of(self), self)

    async def aclose(self, timeout: float | None = None) -> None:
        """Refuses new calls, waits (without blocking the loop) up to timeout seconds (default the
        pool's call timeout) for those running, then stops the pool's thread and frees the clients."""
        with self._lock:
            self._closed = True
        end = time.monotonic() + (self.timeout if timeout is None else timeout)
        while time.monotonic() < end:
            with self._lock:
                if not self._inflight:
                    break
            await asyncio.sleep(0.005)
        self._stop.set()
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        self._close_clients()

    def close(self, timeout: float | None = None) -> None:
        """Outside the loop (after it ended): stops the pool's thread and frees the clients."""
        with self._lock:
            self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._close_clients()

    async def __aenter__(self) -> "Pool":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
