"""client.py: the Python client API: blocking call(), call_async() futures, closed-loop load."""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future
from typing import Any, Sequence

import numpy as np

from splitrpc import auth as auth_
from splitrpc import describe as describe_
from splitrpc import dpdk, typed
from splitrpc._native import auth as _auth
from splitrpc._native import client as _client
from splitrpc._native.wire import PROTOCOLS
from splitrpc.errors import CallTimeout, SplitRPCError

# A Client's defaults as the C core sets them (srpc_client_config_init; the numbers live in
# native/src/core/tunables.h): Client keywords -> values. Read-only: change a default there.
CLIENT_DEFAULTS = _client.CLIENT_DEFAULTS


def as_buffer(data: Any) -> memoryview:
    """A C-contiguous byte view of bytes-like data or a numpy array (no copy when possible)."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data)
    mv = memoryview(data)
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv



def split_address(text: str) -> tuple[str | None, int | None]:
    """"HOST:PORT", "[V6]:PORT", "HOST" or ":PORT" -> (host or None, port or None): None where
    the text leaves it out (the caller's default then)."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else None
    if text.count(":") == 1:
        host, port = text.split(":")
        return host or None, int(port)
    return text or None, None

class Client:
    """A splitrpc client for one server (host, port).

    ``timeout`` is the default per-call timeout in seconds. ``busy_poll`` spins while waiting
    for replies (lowest latency, one core busy). Thread-safe.

    ``transport="dpdk"`` calls from a DPDK port instead of a socket: the EAL is initialised with
    dpdk_args (once per process), dpdk_port names the port, local_ip is this client's IPv4
    address on it (host must be the server's IPv4 address), local_port its UDP port (0: one at
    random). The server's MAC is asked by ARP, or given as server_mac. The client polls.

    Retransmission: a request is sent again (same req_id) when its reply has not come within
    the retransmission timeout: adaptive (smoothed round-trip time + 4 deviations, RFC 6298),
    between rto_min and rto_max seconds (rto_initial before the first reply), doubling at each
    try up to rto_max, until the reply comes or the call's timeout or deadline passes.
    ``retries`` caps the count (default None: no cap, the deadline ends it; 0: never). The
    server never runs a call twice (its reply cache answers a retransmission).

    Flow control: at most ``window`` calls (default None: the C default, half a default server
    queue; 0: no limit) are outstanding at the server; further calls wait in the client, in
    the order they were made, each still bound by its own timeout, and are sent as earlier ones
    finish. A ``Busy`` answer is retried after a backoff (``busy_backoff`` seconds, doubling
    per Busy of the call, capped at rto_max, with jitter) while the call's deadline leaves room
    for it; the caller sees ``Busy`` only when it does not (or with ``busy_retry=False``).
    ``stats()`` counts both (``busy_retries``, ``window_waits``). The load generator's calls
    (``closed_loop``, ``splitrpc.loadgen``) are never held back or retried after Busy.

    A server that cannot be reached fails calls at once with ``Unavailable``, as gRPC does: the
    kernel reports ICMP "port / host unreachable" on the client's socket (nothing listens on the
    port, on loopback within microseconds), and every unfinished call then fails, sent or waiting
    in the window. ``wait_for_ready=True`` (per client, or per call) keeps such calls
    retransmitted until their timeout instead, for a server that is about to start. The DPDK
    transport sees no ICMP: its calls wait for their timeout either way.

    ``protocol`` is the wire protocol version of the requests: 2 (the default) protects each
    header with a CRC-16 so that a header damaged in transit is dropped, never taken for another
    call's reply (docs/PROTOCOL-v2.md); 3 adds a CRC-32C of every datagram's data, so that data
    damaged past UDP's checksum (a faulty NIC, proxy or memory) is dropped and sent again, never
    delivered (docs/PROTOCOL-v3.md; the server must list 3 in ``describe()``'s protocols); 1 is
    PROTOCOL.md's version 1, for servers that speak only that.

    ``key`` (a splitrpc.Key, an ``(id, secret)`` pair, or a key file, ``FILE:ID`` for one key of a
    table) makes the calls authenticated, for servers made with ``keys=``: protocol 5
    (docs/PROTOCOL-v5.md), sessions. Before its first call the client makes a session with the
    server (one round trip: a handshake authenticated by the key, with fresh X25519 keys), and
    every datagram then carries the session, a counter and an AEAD tag; replies of
    no session of this client, or whose tag is wrong, are dropped (``stats()["bad_auth"]``). A
    captured call never runs again: not on the same server, nor after it restarts, nor on another
    replica. ``encrypt=True`` also makes the data private. ``suites`` names the AEADs its handshakes
    offer (default: all this process can use, ``splitrpc._native.auth.suites()``; the server picks
    AEGIS-128L, else AES-256-GCM, else ChaCha20-Poly1305): leave out "aegis-128l" to reach a server
    built before it (docs/PROTOCOL-v5.md). A new session follows the old one every
    ``rekey`` seconds (default and most 120) without a pause in calls; a restarted server answers
    NO_SESSION and the client makes a new session and sends its calls again (``stats()``:
    ``handshakes``, ``rekeys``, ``no_sessions``). A handshake unanswered for 12.6 s (a wrong key, a
    server without it) fails the waiting calls with ``Unavailable``. ``protocol=4`` is the legacy
    signed-datagram mode (docs/PROTOCOL-v4.md: a captured call runs again after a restart and on
    other replicas), for servers started with ``legacy_v4``. A function the key may not call
    raises ``Forbidden``.
    """

    def __init__(self, host: str | None = None, port: int | None = None, timeout: float = 1.0, *,
                 segment_size: int | None = None, max_reply: int | None = None, busy_poll: bool = False,
                 socket_buffer: int | None = None, transport: str = "udp", dpdk_args: Sequence[str] = (),
                 dpdk_port: str | None = None, local_ip: str | None = None, local_port: int = 0,
                 server_mac: str | None = None, dpdk_mtu: int | None = None, retries: int | None = None,
                 rto_min: float | None = None, rto_initial: float | None = None, rto_max: float | None = None,
                 window: int | None = None, busy_retry: bool | None = None, busy_backoff: float | None = None,
                 protocol: int | None = None, wait_for_ready: bool | None = None,
                 key: "auth_.Key | tuple[int, bytes] | str | os.PathLike[str] | None" = None,
                 encrypt: bool = False, rekey: float | None = None, suites: Sequence[str] | None = None) -> None:
        # A setting left None takes the C core's default (srpc_client_config_init, native/src/core/tunables.h;
        # splitrpc._native.client.CLIENT_DEFAULTS; segment_size: by destination; dpdk_mtu: 1500).
        # timeout has no C counterpart: it is Python's own, defined here once.
        if transport not in ("udp", "dpdk"):
            raise ValueError(f"transport must be 'udp' or 'dpdk', got {transport!r}")
        if transport == "dpdk":
            if not dpdk_port or not local_ip:
                raise ValueError("transport='dpdk' needs dpdk_port (the DPDK port's name) and local_ip "
                                 "(this client's IPv4 address on it)")
            dpdk.init(dpdk_args)
        d = _client.CLIENT_DEFAULTS
        rto = [d[k] if v is None else v for k, v in (("rto_min", rto_min), ("rto_initial", rto_initial),
                                                      ("rto_max", rto_max))]
        if (retries is not None and retries < 0) or not 0 < rto[0] <= rto[1] <= rto[2]:
            raise ValueError("retries must be >= 0 and 0 < rto_min <= rto_initial <= rto_max")
        if (window is not None and window < 0) or (busy_backoff is not None and not busy_backoff > 0):
            raise ValueError("window must be >= 0 and busy_backoff > 0 seconds")
        auth_key = None
        keyed = (_auth.SESSIONS, _auth.VERSION)
        if key is not None:  # authenticated calls: version 5 (sessions), or version 4 when asked
            if protocol not in (None,) + keyed:
                raise ValueError(f"key: authenticated calls are protocol {_auth.SESSIONS} (sessions) or "
                                 f"{_auth.VERSION} (legacy), got protocol={protocol!r}")
            _auth.require()
            k = auth_.load_key(key)
            auth_key, protocol = (k.id, k.secret), protocol or _auth.SESSIONS
        elif protocol in keyed:
            raise ValueError(f"protocol {protocol} (authenticated calls) needs key=")
        elif protocol is not None and protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS + keyed}, got {protocol!r}")
        if encrypt and protocol != _auth.SESSIONS:
            raise ValueError(f"encrypt=True needs sessions: key= (protocol {_auth.SESSIONS})")
        if protocol == _auth.SESSIONS and rto[2] > d["rto_max"]:
            # docs/PROTOCOL-v5.md ("Calls a line ran"): a client with a call outstanding sends under its
            # session at least this often (the default rto_max): a server may forget a session silent
            # for 2 s whose calls are all answered, and a call resent after that would be a new call
            raise ValueError(f"with sessions (key=), rto_max must be at most {d['rto_max']:g} s, got {rto_max!r}")
        if rekey is not None and not 0 < rekey <= d["rekey"]:
            raise ValueError(f"rekey must be > 0 and at most {d['rekey']:g} seconds, got {rekey!r}")
        suite_mask = None
        if suites is not None:
            if protocol != _auth.SESSIONS:
                raise ValueError(f"suites needs sessions: key= (protocol {_auth.SESSIONS})")
            suite_mask = _auth.suite_mask([suites] if isinstance(suites, str) else suites)
        dpdk_kw: dict[str, Any] = {} if transport != "dpdk" else {
            "dpdk_dev": dpdk_port, "dpdk_local_ip": local_ip, "dpdk_local_port": local_port,
            "dpdk_server_mac": server_mac, "dpdk_mtu": dpdk_mtu}
        self._native = _client.create_client(
            host, port=port, segment_size=segment_size, max_reply=max_reply, busy_poll=busy_poll,
            socket_buffer=socket_buffer, retries=retries, rto_min=rto_min, rto_initial=rto_initial, rto_max=rto_max,
            window=window, busy_retry=None if busy_retry is None else int(bool(busy_retry)),
            busy_backoff=busy_backoff, protocol=protocol,
            wait_for_ready=None if wait_for_ready is None else int(bool(wait_for_ready)), auth_key=auth_key,
            encrypt=encrypt, rekey=rekey, suites=suite_mask, **dpdk_kw)
        self._cl = self._native.handle  # None once closed: no new call starts
        self._handle = self._cl  # freed by __del__ alone: a thread may still be in a call when close() runs
        self.host, self.port, self.timeout = self._native.host, self._native.port, timeout
        self.max_reply = self._native.max_reply
        self._tls = threading.local()
        self._pending: dict[int, tuple[Future[bytes], float]] = {}
        self._plock = threading.Lock()
        self._poller: threading.Thread | None = None
        self._closing = False

    def _buffers(self) -> _client.CallBuffers:
        """This thread's reply buffer for call()."""
        bufs = getattr(self._tls, "bufs", None)
        if bufs is None:
            bufs = self._tls.bufs = _client.CallBuffers(self.max_reply)
        return bufs

    def _budget(self, func_id: int, timeout: float | None, deadline: float | None) -> float:
        """Seconds the call may take: its timeout (the client's by default), cut to what is left
        before deadline (a time.monotonic() instant). CallTimeout when nothing is left."""
        tmo = self.timeout if timeout is None else timeout
        if deadline is not None:
            tmo = min(tmo, deadline - time.monotonic())
            if tmo <= 0:
                raise CallTimeout(f"the deadline of the call to function {func_id} has passed; nothing was sent")
        return tmo

    def call(self, func_id: int, data: Any = b"", timeout: float | None = None, *, deadline: float | None = None,
             aux: int = 0, wait_for_ready: bool | None = None) -> bytes:
        """Calls func_id with data (bytes-like or numpy array); returns the reply's bytes.

        The call ends after timeout seconds (the client's default timeout if None) or at
        deadline, a time.monotonic() instant, whichever comes first: give one deadline to the
        several calls that serve one request of yours. aux (0..65535) goes in the request
        header: a cost estimate or a priority class, as the function was registered (0: none).
        Raises a RemoteError subclass for an ERROR reply, CallTimeout when no reply came in
        time (or the deadline had passed), and Unavailable when the server cannot be reached
        (wait_for_ready: True waits for it until the timeout, False does not; None: the client's
        setting).
        """
        if aux or wait_for_ready is not None:
            return self.call_async(func_id, data, timeout, deadline=deadline, aux=aux,
                                   wait_for_ready=wait_for_ready).result()
        cl = self._check_open()
        tmo = self._budget(func_id, timeout, deadline)
        return _client.call(cl, self._buffers(), func_id, as_buffer(data), tmo)

    def _call_array(self, func_id: int, a: "np.ndarray[Any, Any]") -> bytes:
        """call(func_id, a) for a C-contiguous numpy array, handed to the native call as it is (the
        typed layer's fast path: it has checked the array; as_buffer's view and cast are not needed)."""
        cl = self._check_open()
        return _client.call(cl, self._buffers(), func_id, a, self.timeout, a.nbytes)

    _into_min = _client.INTO_MIN

    def _call_into(self, func_id: int, a: "np.ndarray[Any, Any]", out: "np.ndarray[Any, Any]") -> int:
        """_call_array whose reply is read straight into out, a fresh C-contiguous array of at
        least _into_min bytes (the typed layer's fast path for one output): the reply's
        length, out.nbytes or not (the caller's check; a longer reply is not read)."""
        cl = self._cl
        if cl is None:  # _check_open, inline: this is the typed layer's fast path
            raise SplitRPCError(_client.CLOSED)
        bufs = getattr(self._tls, "bufs", None) or self._buffers()
        return _client.call_into(cl, bufs, func_id, a, a.nbytes, out, out.nbytes, self.timeout)

    def call_async(self, func_id: int, data: Any = b"", timeout: float | None = None, *,
                   deadline: float | None = None, aux: int = 0, wait_for_ready: bool | None = None) -> Future[bytes]:
        """Sends the call and returns a Future of its reply bytes (or its exception); timeout,
        deadline, aux and wait_for_ready as for call()."""
        if isinstance(aux, bool) or not isinstance(aux, int) or not 0 <= aux <= 0xFFFF:
            raise ValueError(f"aux must be an integer from 0 to 65535, got {aux!r}")
        self._check_open()
        tmo = self._budget(func_id, timeout, deadline)
        mv = as_buffer(data)
        fut: Future[bytes] = Future()
        with self._plock:  # registered before a reply can be reported, and not after close() failed the pending
            rid = _client.send(self._check_open(), func_id, mv, tmo, aux, wait_for_ready)
            self._pending[rid] = (fut, time.monotonic() + tmo)
            if self._poller is None:
                self._poller = threading.Thread(target=self._poll_loop, name="splitrpc-client", daemon=True)
                self._poller.start()
        return fut

    def _poll_loop(self) -> None:
        cl = self._cl  # close() joins this thread before it closes the client
        if cl is None:
            return
        completions = _client.Completions(cl)
        while not self._closing:
            done = completions.wait(20_000)
            if done is None:
                break
            n = len(done)
            now = time.monotonic()
            with self._plock:
                finished = [(self._pending.pop(rid, (None, 0))[0], c, r) for rid, c, r in done]
                expired = [rid for rid, (_, dl) in self._pending.items() if dl <= now]
                timed_out = [self._pending.pop(rid)[0] for rid in expired]
                idle = not self._pending and not n
                if idle:  # the next call_async starts a new poller
                    self._poller = None
            for rid in expired:
                _client.release(cl, rid)
            for fut, c, r in finished:
                if fut is not None and not fut.done():
                    fut.set_exception(_client.call_error(c, r)) if c else fut.set_result(r)
            for fut in timed_out:
                if not fut.done():
                    fut.set_exception(CallTimeout("no reply within the call's timeout"))
            if idle:
                return

    def describe(self, timeout: float | None = None) -> "describe_.Description":
        """What the server serves: every function's id, name, version, tensor specs (or raw
        limits), max_batch, executor, priority and device (docs/PROTOCOL.md, Amendment 1).
        Raises UnknownFunction from a server older than the amendment, Draining from one that is
        stopping, splitrpc.describe.NotDescribed for a reply of another kind."""
        return describe_.decode_description(self.call(describe_.DESCRIBE_ID, describe_.DESCRIBE_REQUEST, timeout))

    def ping(self, timeout: float | None = None) -> dict[str, Any]:
        """The server's readiness over the wire: {"ready", "state", "functions", "uptime_s",
        "pending", "digest"}; a draining server answers Draining instead."""
        return describe_.decode_ping(self.call(describe_.PING_ID, describe_.PING_REQUEST, timeout))

    def function(self, name: str) -> "typed.Function | typed.RawFunction":
        """The server's function `name` as a typed callable (docs/client.md): fn(*inputs,
        **inputs) -> a named tuple of numpy arrays, inputs checked against its specs before
        anything is sent; a raw function takes and returns bytes. The description is read once
        per client (describe) and again when a call finds it out of date. Raises NoSuchFunction
        for a name the server does not have."""
        return typed.directory_of(self).function(name, self)

    @property
    def fn(self) -> "typed.Functions":
        """The server's functions as attributes: client.fn.lenet(x) is client.function("lenet")(x)."""
        return typed.Functions(self.function)

    def closed_loop(self, func_id: int, data: Any, *, concurrency: int = 1, calls: int = 1000,
                    warmup: int = 100, timeout: float | None = None) -> dict[str, Any]:
        """Closed-loop load in native code: `concurrency` calls outstanding until `calls`
        recorded ones finished. Returns latencies (ns, numpy), errors and elapsed seconds."""
        cl = self._check_open()
        tmo = self.timeout if timeout is None else timeout
        lat, errors, elapsed_ns = _client.closed_loop(cl, func_id, as_buffer(data), concurrency, warmup, calls,
                                                      int(tmo * 1e6))
        return {"latency_ns": lat, "errors": errors, "elapsed_s": elapsed_ns / 1e9}

    def stats(self) -> dict[str, int]:
        return _client.read_stats(self._cl)

    def _check_open(self) -> Any:
        """The native handle; SplitRPCError once closed (read once: close() may run meanwhile)."""
        cl = self._cl
        if cl is None:
            raise SplitRPCError(_client.CLOSED)
        return cl

    def close(self) -> None:
        """Closes the client, from any thread: calls still in flight on other threads end at once
        with SplitRPCError("client is closed"), as do pending futures and every later call. A call
        ended this way may have been sent and run (no reply will be read, as after a timeout);
        nothing is sent once close() has returned. Its memory and socket are freed when the
        Client is dropped (a thread may still be inside a call as close() runs). Idempotent."""
        self._closing = True
        t = self._poller
        if t is not None and t is not threading.current_thread():
            t.join()
        with self._plock:
            cl, self._cl = self._cl, None
            pending = list(self._pending.values())
            self._pending.clear()
        for fut, _ in pending:
            if not fut.done():
                fut.set_exception(SplitRPCError(_client.CLOSED))
        if cl is not None:  # calls still in flight on other threads end with "client is closed"
            _client.shutdown(cl)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
        h = self.__dict__.pop("_handle", None)
        if h is not None:  # nothing refers to this client now: no thread can be in its calls
            try:
                _client.destroy(h)
            except Exception:  # (at interpreter exit the binding may be gone already)
                pass
