"""pool.py: splitrpc.Pool, a client over several replicas of one service: each call goes to the better of two replicas drawn at random (power of two choices) by the wait it can expect there (the pool's own calls outstanding, other clients' queued at the last ping, a recent BUSY, times the replica's moving-average latency); a call refused with BUSY or DRAINING is sent to another replica (it never ran), one whose replica fell silent only when marked idempotent.

Replicas come as a static list of addresses, a DNS name resolving to several, or a function
returning the current addresses (a fleet's directory), called again every `refresh_interval`
seconds: a replica that leaves gets no new call (those it has finish), one that joins is chosen
at once. Each replica
has a Client of its own, so retransmissions of a call stay on its replica (whose reply cache
runs a call at most once). A prober thread pings every replica every `probe_interval` seconds
(docs/PROTOCOL.md, Amendment 1): the reply's `pending` is the replica's queue. A DRAINING answer,
a call with no reply, or PING_FAILURES pings in a row with no reply within `probe_timeout` (a
ping waits behind the replica's running batch, so one late ping is not death) take the replica
out of the choice until a ping finds it ready again. A replica without ping (a server older than
the amendment) is not probed: its calls alone tell. Thread-safe.

Failover bound: a call to a replica that dies (SIGKILL) is sent elsewhere after at most
`attempt_timeout` seconds (idempotent calls; others end with CallTimeout at their deadline), and
every call after that first silent one avoids the replica. A replica whose port is closed (its
process gone, its host up) answers through the kernel at once: the call fails with Unavailable
(splitrpc.Client), the replica is out until a ping answers, and an idempotent call goes to
another replica at once; a call not marked idempotent raises Unavailable (it may have run there
before the replica went away). A ping that finds the port closed takes the replica out at once.
"""
from __future__ import annotations

import random
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterable, cast

from splitrpc import auth as auth_
from splitrpc import describe as describe_
from splitrpc import typed
from splitrpc._native.client import CLIENT_DEFAULTS
from splitrpc.client import Client, split_address
from splitrpc.errors import Busy, CallTimeout, Draining, SplitRPCError, Unavailable, UnknownFunction
from splitrpc.describe import NotDescribed

if TYPE_CHECKING:
    from typing import TypeAlias

    # what resolve() takes: "host:port", (host, port), or several of them
    Addresses: TypeAlias = str | tuple[str, int] | Iterable[str | tuple[str, int]]
    # what _attempts() is sent for an attempt: (reply, None) or (None, exception)
    Outcome: TypeAlias = tuple[bytes | None, BaseException | None]

CHOICES = ("p2c", "random")
PING_FAILURES = 2    # pings in a row without a reply that take a replica out
SILENT_FOR = 1.0     # seconds a silent replica stays out where no ping can tell when it is back
LATENCY_ALPHA = 0.1  # weight of a new call in a replica's moving-average latency


class NoReplica(SplitRPCError):
    """Every replica of the pool is out (draining, silent) or was tried for this call."""


def resolve(spec: Addresses) -> list[tuple[str, int]]:
    """Addresses of spec: a list of "host:port" strings or (host, port) tuples, or one
    "name:port" whose DNS name resolves to several addresses (each one a replica; IPv4 and
    IPv6, in resolver order, duplicates dropped)."""
    items = [spec] if isinstance(spec, (str, tuple)) else list(spec)
    out: list[tuple[str, int]] = []
    for it in items:
        host, port = it if isinstance(it, tuple) else split_address(it)
        host = host or CLIENT_DEFAULTS["host"]
        port = CLIENT_DEFAULTS["port"] if port is None else port
        for fam, _, _, _, sa in socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM):
            if fam in (socket.AF_INET, socket.AF_INET6) and (sa[0], sa[1]) not in out:
                out.append(cast("tuple[str, int]", (sa[0], sa[1])))  # AF_INET, AF_INET6: (host, port, ...)
    if not out:
        raise ValueError(f"no replica address in {spec!r}")
    return out


@dataclass
class Replica:
    """One replica as the pool sees it; counters are the pool's own."""
    address: tuple[str, int]
    client: Client
    prober: Client
    outstanding: int = 0       # the pool's calls sent there and not finished
    queue: int = 0             # its calls pending at the last ping
    others: int = 0            # of those, the ones not the pool's (the queue less our outstanding then)
    latency: float = 0.0       # moving average of its calls' latency, seconds (0: none yet)
    out_until: float = 0.0     # not chosen before this (monotonic): silent, and no prober to say when it is back
    busy_until: float = 0.0    # answered BUSY recently: counted busy_weight calls more before this
    draining: bool = False
    silent: bool = False       # a call or pings went unanswered: out until a ping answers
    failed_pings: int = 0      # in a row
    probed: bool = True        # False: the replica has no ping (older than Amendment 1): calls alone tell
    counts: dict[str, int] = field(default_factory=lambda: {"calls": 0, "ok": 0, "busy": 0, "draining": 0, "silent": 0,
                                                            "unavailable": 0, "errors": 0})

    def available(self, now: float) -> bool:
        return not self.draining and not self.silent and now >= self.out_until

    def load(self, now: float, busy_weight: float, latency: float) -> float:
        """The wait a new call can expect there: the calls ahead of it (the pool's outstanding
        calls, exact and current; other clients' calls queued at the last ping, sampled, the
        pool's own not counted twice so that a stale sample cannot send a whole probe interval's
        calls to one replica; busy_weight more while it answered BUSY recently), plus itself,
        times its moving-average latency (`latency` where it has none yet): a replica twice as
        slow takes half as many calls at the same wait."""
        ahead = self.outstanding + self.others + (busy_weight if now < self.busy_until else 0)
        return (ahead + 1) * (self.latency or latency)


class Pool:
    """Calls spread over the replicas of `replicas` (see resolve()). choice: "p2c" (power of two
    choices, the default) or "random" (uniform, for comparison). timeout: a call's default
    deadline in seconds; attempt_timeout: how long one attempt of an idempotent call waits for
    its replica before trying another (default: a quarter of timeout, at least 50 ms);
    max_attempts: attempts per call at most (when every replica has answered BUSY, they are tried
    again after busy_penalty seconds: a BUSY call never ran). busy_penalty: seconds during which a replica
    that answered BUSY counts busy_weight calls more. probe_interval None: no pings (a replica
    taken out by a DRAINING answer stays out). replicas may be a function returning addresses (see
    resolve()), called again every refresh_interval seconds (an empty answer is allowed: calls then
    raise NoReplica; a failing one keeps the replicas as they were). Other keywords go to each
    replica's Client (busy_retry is off: a BUSY goes to another replica instead); key= (authenticated
    calls, docs/security.md) to its pings as well."""

    def __init__(self, replicas: Addresses | Callable[[], Addresses | None], *, choice: str = "p2c",
                 timeout: float = 1.0, attempt_timeout: float | None = None,
                 max_attempts: int = 4, probe_interval: float | None = 0.05, probe_timeout: float = 0.25,
                 busy_penalty: float = 0.005, busy_weight: float = 16, seed: int | None = None,
                 refresh_interval: float = 1.0, **client_kw: Any) -> None:
        if choice not in CHOICES:
            raise ValueError(f"choice must be one of {CHOICES}, got {choice!r}")
        if not timeout > 0 or max_attempts < 1 or (attempt_timeout is not None and not attempt_timeout > 0):
            raise ValueError("timeout and attempt_timeout must be positive seconds, max_attempts at least 1")
        self.choice, self.timeout, self.max_attempts = choice, timeout, max_attempts
        self.attempt_timeout = attempt_timeout or max(0.05, timeout / 4)
        self.busy_penalty, self.busy_weight, self.probe_timeout = busy_penalty, busy_weight, probe_timeout
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        if client_kw.get("key") is not None:  # authenticated calls: read once, for every replica's clients
            client_kw["key"] = auth_.load_key(client_kw["key"])
        self._client_kw = client_kw
        # replaced whole (under _lock) when the replicas change, never changed in place: a thread
        # iterating an older list sees a consistent one
        self.replicas: list[Replica] = []
        self._retired: list[Replica] = []  # left the source with calls outstanding: closed when idle
        self._source: Callable[[], Addresses | None] | None = replicas if callable(replicas) else None
        if not refresh_interval > 0:
            raise ValueError("refresh_interval must be positive seconds")
        try:
            if self._source is not None:
                self._refresh()
            else:
                self.replicas = [self._replica(a) for a in resolve(cast("Addresses", replicas))]  # not callable
        except BaseException:
            self._close_clients()
            raise
        self.failovers = 0
        # every replica's, past ones too
        self.totals = {"ok": 0, "busy": 0, "draining": 0, "silent": 0, "unavailable": 0, "errors": 0}
        self.probing = bool(probe_interval)
        self._closed = False
        self._inflight = 0  # call()s running: close() waits for them before it frees the clients
        self._idle = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread = None  # probes and refreshes, on one thread: a replica's clients are closed where probed
        if probe_interval or self._source is not None:
            self._thread = threading.Thread(target=self._background, args=(probe_interval, refresh_interval),
                                            name="splitrpc-pool-probe", daemon=True)
            self._thread.start()
        self._executor: ThreadPoolExecutor | None = None

    def _replica(self, address: tuple[str, int]) -> Replica:
        host, port = address
        return Replica((host, port), Client(host, port, self.timeout, busy_retry=False, **self._client_kw),
                       Client(host, port, self.probe_timeout, retries=0, key=self._client_kw.get("key")))

    def _refresh(self) -> None:
        """Reads the source: replicas that left stop being chosen, new ones are added."""
        assert self._source is not None  # called only for a pool with a source
        got = self._source()
        want = resolve(got) if got else []
        with self._lock:
            have = {r.address: r for r in self.replicas}
            new = [a for a in want if a not in have]
        made = {a: self._replica(a) for a in new}
        with self._lock:
            keep = [r for r in self.replicas if r.address in want]
            gone = [r for r in self.replicas if r.address not in want]
            self.replicas = keep + [made[a] for a in new]
            self._retired.extend(gone)
            idle = [r for r in self._retired if r.outstanding == 0]
            self._retired = [r for r in self._retired if r.outstanding]
        for r in idle:  # no call of ours uses them: close them (their sockets go with the objects)
            r.client.close()
            r.prober.close()

    def _background(self, probe_interval: float | None, refresh_interval: float) -> None:
        """The pool's thread: pings every probe_interval, re-reads the source every refresh_interval."""
        step = min(x for x in (probe_interval, refresh_interval if self._source else None) if x)
        next_refresh = time.monotonic() + refresh_interval
        while not self._stop.wait(step):
            if self._source is not None and time.monotonic() >= next_refresh:
                next_refresh = time.monotonic() + refresh_interval
                try:
                    self._refresh()
                except Exception:  # noqa: BLE001 - the source failing (a directory out of reach) keeps the replicas
                    pass
            if probe_interval:
                self._probe_all()

    # ------------------------------------------------------------------ choosing

    def _choose(self, tried: set[int]) -> Replica | None:
        """A replica not yet tried for this call: among those available (else any untried), the
        less loaded of two drawn at random (p2c), or one at random."""
        now = time.monotonic()
        with self._lock:
            cands = [r for r in self.replicas if id(r) not in tried and r.available(now)]
            if not cands:
                cands = [r for r in self.replicas if id(r) not in tried and not r.draining]
            if not cands:
                return None
            if self.choice == "random" or len(cands) == 1:
                r = self._rng.choice(cands)
            else:
                a, b = self._rng.sample(cands, 2)
                known = [x.latency for x in self.replicas if x.latency] or [1e-3]
                lat = min(known)  # an untried replica is taken for as fast as the fastest: it gets tried
                r = a if a.load(now, self.busy_weight, lat) <= b.load(now, self.busy_weight, lat) else b
            r.outstanding += 1
            r.counts["calls"] += 1
            return r

    # ------------------------------------------------------------------ calls

    def describe(self, timeout: float | None = None) -> "describe_.Description":
        """What the service serves, as one of its replicas describes it (splitrpc.Client.describe)."""
        return describe_.decode_description(self.call(describe_.DESCRIBE_ID, describe_.DESCRIBE_REQUEST, timeout,
                                                      idempotent=True))

    def function(self, name: str) -> "typed.Function | typed.RawFunction":
        """The service's function `name` as a typed callable (splitrpc.Client.function); its calls
        take idempotent=True as Pool.call does."""
        return typed.directory_of(self).function(name, self)

    @property
    def fn(self) -> "typed.Functions":
        """The service's functions as attributes: pool.fn.lenet(x)."""
        return typed.Functions(self.function)

    def call(self, func_id: int, data: Any = b"", timeout: float | None = None, *, idempotent: bool = False,
             aux: int = 0) -> bytes:
        """The reply of one call, from whichever replica answered it. A BUSY or DRAINING answer
        sends the call to another replica (it never ran on the first); an attempt with no reply
        within attempt_timeout does so only for an idempotent call (else the call waits out its
        deadline there and raises CallTimeout). Raises the last replica's error when max_attempts
        replicas have refused, NoReplica when none is left to try."""
        with self._lock:
            if self._closed:
                raise SplitRPCError("pool is closed")
            self._inflight += 1
        try:
            return self._call(func_id, data, timeout, idempotent, aux)
        finally:
            with self._lock:
                self._inflight -= 1
                if not self._inflight:
                    self._idle.notify_all()

    def _call(self, func_id: int, data: Any, timeout: float | None, idempotent: bool, aux: int) -> bytes:
        """call()'s attempts (_attempts) made with each replica's blocking Client."""
        attempts = self._attempts(func_id, timeout, idempotent)
        step = next(attempts)
        while True:
            r, wait = step
            if r is None:
                time.sleep(wait)
                step = attempts.send(None)
                continue
            try:
                outcome: Outcome = (r.client.call(func_id, data, wait, aux=aux), None)
            except BaseException as e:  # noqa: BLE001 - the policy decides what each one means
                outcome = (None, e)
            try:
                step = attempts.send(outcome)
            except StopIteration as done:
                return cast(bytes, done.value)  # what _attempts returns: the reply

    def _attempts(self, func_id: int, timeout: float | None,
                  idempotent: bool) -> Generator[tuple[Replica | None, float], Outcome | None, bytes]:
        """One call's policy, for a blocking or an asyncio caller alike: a generator that yields
        (replica, seconds) for each attempt (send it (reply, None) or (None, exception)) and
        (None, seconds) for a pause (send it None), and returns the reply (StopIteration.value) or
        raises the call's error. A BUSY or DRAINING answer moves the call to another replica (it
        never ran on the first); an attempt with no reply within attempt_timeout does so only for
        an idempotent call (else it waits out its deadline there and raises CallTimeout)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        tried: set[int] = set()
        last: BaseException | None = None
        for _ in range(self.max_attempts):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            r = self._choose(tried)  # counts the call outstanding there: _count() below, exactly once
            if r is None and isinstance(last, Busy):
                # every replica left answered BUSY (the call ran nowhere): try them again after a pause
                yield None, min(self.busy_penalty, max(0.0, deadline - time.monotonic()))
                tried.clear()
                r = self._choose(tried)
            if r is None:
                break
            tried.add(id(r))
            if last is not None:
                with self._lock:
                    self.failovers += 1
            t0 = time.monotonic()
            reply, e = cast("Outcome", (yield r, min(left, self.attempt_timeout) if idempotent else left))
            if e is None:
                self._count(r, "ok", latency=time.monotonic() - t0)
                return cast(bytes, reply)  # e is None: the attempt's reply
            if isinstance(e, Busy):
                self._count(r, "busy", busy=True)
            elif isinstance(e, Draining):
                self._count(r, "draining", out=True)
            elif isinstance(e, (CallTimeout, Unavailable)):  # Unavailable: its port is closed (ICMP), known at once
                self._count(r, "silent" if isinstance(e, CallTimeout) else "unavailable", out=True)
                if not idempotent:  # it may have run there before the replica went away
                    raise e
            else:
                self._count(r, "errors")
                raise e
            last = e
        if last is not None:
            raise last
        raise NoReplica(f"no replica left to try for function {func_id} (of {len(self.replicas)})")

    def _count(self, r: Replica, what: str, *, busy: bool = False, out: bool = False,
               latency: float | None = None) -> None:
        now = time.monotonic()
        with self._lock:
            r.outstanding -= 1
            r.counts[what] += 1
            self.totals[what] += 1
            if latency is not None:
                r.latency = latency if not r.latency else r.latency + LATENCY_ALPHA * (latency - r.latency)
            if busy:
                r.busy_until = now + self.busy_penalty
            if what == "draining":
                r.draining = True  # the prober brings it back when a ping finds it ready
            elif out:
                if self.probing and r.probed:
                    r.silent = True  # until a ping answers
                else:
                    r.out_until = now + SILENT_FOR

    def call_async(self, func_id: int, data: Any = b"", timeout: float | None = None, *, idempotent: bool = False,
                   aux: int = 0) -> Future[bytes]:
        """call() on a thread of the pool's executor (64 threads per replica, at least 256)."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=64 * max(4, len(self.replicas)),
                                                    thread_name_prefix="splitrpc-pool")
        return self._executor.submit(self.call, func_id, data, timeout, idempotent=idempotent, aux=aux)

    # ------------------------------------------------------------------ probing

    def _probe_all(self) -> None:
        for r in self.replicas:
            if self._stop.is_set():
                return
            if not r.probed:
                continue
            try:
                self._probe(r)
            except Exception:  # noqa: BLE001 - one odd reply must not end the probing of every replica
                with self._lock:
                    r.failed_pings += 1

    def _probe(self, r: Replica) -> None:
        try:
            p = r.prober.ping(self.probe_timeout)
            queue, ready = int(p.get("pending", 0)), bool(p.get("ready", True))
        except Draining:
            with self._lock:
                r.draining, r.failed_pings = True, 0
            return
        except (UnknownFunction, NotDescribed, ValueError, TypeError):
            with self._lock:  # a server older than Amendment 1 (no ping): only its calls tell
                r.probed = False
                r.silent = False
            return
        except Unavailable:  # nothing listens on its port: out now, not after PING_FAILURES pings
            with self._lock:
                r.failed_pings += 1
                r.silent = True
            return
        except (CallTimeout, SplitRPCError):
            with self._lock:
                r.failed_pings += 1
                if r.failed_pings >= PING_FAILURES:
                    r.silent = True
            return
        with self._lock:
            r.queue = queue
            r.others = max(0, queue - r.outstanding)
            r.draining = not ready
            r.silent, r.failed_pings, r.out_until = False, 0, 0.0

    # ------------------------------------------------------------------ counters, life cycle

    def stats(self) -> dict[str, Any]:
        """Per replica ("host:port"): the pool's calls sent there and their outcomes (ok, busy,
        draining, silent, errors: counts), outstanding, last queue, whether it is chosen now
        (available) and why not (draining_now, silent_now); the outcomes summed over every
        replica the pool has had (totals); and the calls sent to a second replica (failovers)."""
        now = time.monotonic()
        with self._lock:
            return {"failovers": self.failovers, "totals": dict(self.totals),
                    "replicas": {f"{h}:{p}": {**r.counts, "outstanding": r.outstanding, "queue": r.queue,
                                              "available": r.available(now), "draining_now": r.draining,
                                              "silent_now": r.silent, "probed": r.probed}
                                 for r in self.replicas for h, p in [r.address]}}

    def _close_clients(self) -> None:
        for r in self.replicas + self._retired:
            r.client.close()
            r.prober.close()

    def close(self, timeout: float | None = None) -> None:
        """Refuses new calls, waits for those running (up to timeout seconds, default the pool's
        call timeout), then frees the clients."""
        with self._lock:
            self._closed = True
            self._idle.wait_for(lambda: not self._inflight, self.timeout if timeout is None else timeout)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self._close_clients()

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
