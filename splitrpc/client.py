"""client.py: the Python client API: blocking call(), call_async() futures, closed-loop load."""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Sequence

import numpy as np

from . import dpdk
from ._native import ENOBUFS, ETIMEDOUT, check, ffi, lib
from .errors import CallTimeout, SplitRPCError, remote_error


def as_buffer(data) -> memoryview:
    """A C-contiguous byte view of bytes-like data or a numpy array (no copy when possible)."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data)
    mv = memoryview(data)
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


class Client:
    """A splitrpc client for one server (host, port).

    ``timeout`` is the default per-call timeout in seconds. ``busy_poll`` spins while waiting
    for replies (lowest latency, one core busy). Thread-safe.

    ``transport="dpdk"`` calls from a DPDK port instead of a socket: the EAL is initialised with
    dpdk_args (once per process), dpdk_port names the port, local_ip is this client's IPv4
    address on it (host must be the server's IPv4 address), local_port its UDP port (0: one at
    random). The server's MAC is asked by ARP, or given as server_mac. The client polls.

    ``retries`` (default 3) sends a request again (same req_id) when its reply has not come
    within the retransmission timeout: adaptive (smoothed round-trip time + 4 deviations,
    RFC 6298), between rto_min and rto_max seconds (rto_initial before the first reply), doubling
    at each retry, at most ``retries`` times; the call's own timeout still ends it. The server
    never runs a call twice (its reply cache answers a retransmission). Requests are copied to
    be sent again; ``retries=0`` sends once and copies nothing. Over a lossy network raise it
    (e.g. 10).

    ``protocol`` is the wire protocol version of the requests: 2 (the default) protects each
    header with a CRC-16 so that a header damaged in transit is dropped, never taken for another
    call's reply (docs/PROTOCOL-v2.md); 1 is PROTOCOL.md's version 1, for servers that speak
    only that.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 9230, timeout: float = 1.0, *,
                 segment_size: int = 0, max_reply: int = 1 << 20, busy_poll: bool = False,
                 socket_buffer: int = 32 << 20, transport: str = "udp", dpdk_args: Sequence[str] = (),
                 dpdk_port: str | None = None, local_ip: str | None = None, local_port: int = 0,
                 server_mac: str | None = None, dpdk_mtu: int = 1500, retries: int = 3, rto_min: float = 0.005,
                 rto_initial: float = 0.2, rto_max: float = 1.0, protocol: int = 2):
        if transport not in ("udp", "dpdk"):
            raise ValueError(f"transport must be 'udp' or 'dpdk', got {transport!r}")
        if transport == "dpdk":
            if not dpdk_port or not local_ip:
                raise ValueError("transport='dpdk' needs dpdk_port (the DPDK port's name) and local_ip "
                                 "(this client's IPv4 address on it)")
            dpdk.init(dpdk_args)
        cfg = ffi.new("srpc_client_config_t *")
        lib.srpc_client_config_init(cfg)
        self._host = ffi.new("char[]", host.encode())
        cfg.host = self._host
        cfg.port = int(port)
        cfg.seg_size = int(segment_size)
        cfg.max_reply = int(max_reply)
        cfg.busy_poll = int(busy_poll)
        cfg.sock_buf_bytes = int(socket_buffer)
        if retries < 0 or not 0 < rto_min <= rto_initial <= rto_max:
            raise ValueError("retries must be >= 0 and 0 < rto_min <= rto_initial <= rto_max")
        cfg.retries = int(retries)
        if protocol not in (1, 2):
            raise ValueError(f"protocol must be 1 or 2, got {protocol!r}")
        cfg.version = protocol
        cfg.rto_min_us, cfg.rto_initial_us, cfg.rto_max_us = (int(v * 1e6) for v in (rto_min, rto_initial, rto_max))
        if transport == "dpdk":
            self._dpdk_strs = [ffi.new("char[]", s.encode()) for s in (dpdk_port, local_ip, server_mac or "")]
            cfg.dpdk_dev, cfg.dpdk_local_ip = self._dpdk_strs[0], self._dpdk_strs[1]
            cfg.dpdk_server_mac = self._dpdk_strs[2] if server_mac else ffi.NULL
            cfg.dpdk_local_port = int(local_port)
            cfg.dpdk_mtu = int(dpdk_mtu)
        out = ffi.new("srpc_client_t **")
        check(lib.srpc_client_create(cfg, out), f"cannot create a client for {host}:{port}")
        self._cl = out[0]
        self.host, self.port, self.timeout = host, port, timeout
        self.max_reply = int(max_reply)
        self._tls = threading.local()
        self._pending: dict[int, tuple[Future, float]] = {}
        self._plock = threading.Lock()
        self._poller: threading.Thread | None = None
        self._closing = False

    def _out_buffer(self):
        buf = getattr(self._tls, "buf", None)
        if buf is None:
            buf = self._tls.buf = ffi.new("uint8_t[]", max(self.max_reply, 512))
        return buf

    def _budget(self, func_id: int, timeout: float | None, deadline: float | None) -> float:
        """Seconds the call may take: its timeout (the client's by default), cut to what is left
        before deadline (a time.monotonic() instant). CallTimeout when nothing is left."""
        tmo = self.timeout if timeout is None else timeout
        if deadline is not None:
            tmo = min(tmo, deadline - time.monotonic())
            if tmo <= 0:
                raise CallTimeout(f"the deadline of the call to function {func_id} has passed; nothing was sent")
        return tmo

    def call(self, func_id: int, data=b"", timeout: float | None = None, *, deadline: float | None = None) -> bytes:
        """Calls func_id with data (bytes-like or numpy array); returns the reply's bytes.

        The call ends after timeout seconds (the client's default timeout if None) or at
        deadline, a time.monotonic() instant, whichever comes first: give one deadline to the
        several calls that serve one request of yours. Raises a RemoteError subclass for an
        ERROR reply and CallTimeout when no reply came in time (or the deadline had passed).
        """
        self._check_open()
        tmo = self._budget(func_id, timeout, deadline)
        mv = as_buffer(data)
        src = ffi.from_buffer(mv)
        out = self._out_buffer()
        out_len = ffi.new("uint32_t *")
        code = ffi.new("int *")
        rc = lib.srpc_client_call(self._cl, func_id, src, len(mv), out, len(out), out_len, code, int(tmo * 1e6))
        if rc == -ETIMEDOUT:
            raise CallTimeout(f"no reply to function {func_id} within {tmo:.3g} s")
        if rc == -ENOBUFS:
            raise SplitRPCError(f"reply of {out_len[0]} bytes is larger than max_reply")
        check(rc, "srpc_client_call")
        reply = ffi.buffer(out, out_len[0])[:]
        if code[0]:
            raise remote_error(code[0], reply)
        return reply

    def call_async(self, func_id: int, data=b"", timeout: float | None = None, *,
                   deadline: float | None = None) -> Future:
        """Sends the call and returns a Future of its reply bytes (or its exception); timeout
        and deadline as for call()."""
        self._check_open()
        tmo = self._budget(func_id, timeout, deadline)
        mv = as_buffer(data)
        rid = ffi.new("uint64_t *")
        fut: Future = Future()
        with self._plock:  # registered before a reply can be reported
            check(lib.srpc_client_send(self._cl, func_id, ffi.from_buffer(mv), len(mv), 0, rid), "srpc_client_send")
            self._pending[rid[0]] = (fut, time.monotonic() + tmo)
            if self._poller is None:
                self._poller = threading.Thread(target=self._poll_loop, name="splitrpc-client", daemon=True)
                self._poller.start()
        return fut

    def _poll_loop(self) -> None:
        ids = ffi.new("uint64_t[64]")
        code = ffi.new("int *")
        data = ffi.new("uint8_t **")
        length = ffi.new("uint32_t *")
        while not self._closing:
            n = lib.srpc_client_wait_any(self._cl, ids, 64, 20_000)
            if n < 0:
                break
            done = []
            for i in range(n):
                rid = ids[i]
                lib.srpc_client_result(self._cl, rid, code, data, length)
                reply = ffi.buffer(data[0], length[0])[:] if length[0] else b""
                lib.srpc_client_release(self._cl, rid)
                done.append((rid, code[0], reply))
            now = time.monotonic()
            with self._plock:
                finished = [(self._pending.pop(rid, (None, 0))[0], c, r) for rid, c, r in done]
                expired = [rid for rid, (_, dl) in self._pending.items() if dl <= now]
                timed_out = [self._pending.pop(rid)[0] for rid in expired]
                idle = not self._pending and not n
                if idle:  # the next call_async starts a new poller
                    self._poller = None
            for rid in expired:
                lib.srpc_client_release(self._cl, rid)
            for fut, c, r in finished:
                if fut is not None and not fut.done():
                    fut.set_exception(remote_error(c, r)) if c else fut.set_result(r)
            for fut in timed_out:
                if not fut.done():
                    fut.set_exception(CallTimeout("no reply within the call's timeout"))
            if idle:
                return

    def closed_loop(self, func_id: int, data, *, concurrency: int = 1, calls: int = 1000,
                    warmup: int = 100, timeout: float | None = None) -> dict:
        """Closed-loop load in native code: `concurrency` calls outstanding until `calls`
        recorded ones finished. Returns latencies (ns, numpy), errors and elapsed seconds."""
        self._check_open()
        mv = as_buffer(data)
        lat = np.zeros(calls, dtype=np.uint64)
        errors = ffi.new("uint64_t *")
        elapsed = ffi.new("uint64_t *")
        tmo = self.timeout if timeout is None else timeout
        check(lib.srpc_client_closed_loop(self._cl, func_id, ffi.from_buffer(mv), len(mv), concurrency, warmup,
                                          calls, int(tmo * 1e6), ffi.cast("uint64_t *", lat.ctypes.data),
                                          errors, elapsed), "srpc_client_closed_loop")
        return {"latency_ns": lat, "errors": int(errors[0]), "elapsed_s": elapsed[0] / 1e9}

    def stats(self) -> dict:
        st = ffi.new("srpc_client_stats_t *")
        check(lib.srpc_client_stats(self._cl, st), "srpc_client_stats")
        return {k: getattr(st, k) for k in ("sent_calls", "replies", "errors", "timeouts", "late_or_unknown", "dropped",
                                            "retransmits", "srtt_us", "rto_us")}

    def _check_open(self) -> None:
        if self._cl is None:
            raise SplitRPCError("client is closed")

    def close(self) -> None:
        self._closing = True
        t = self._poller
        if t is not None and t is not threading.current_thread():
            t.join()
        with self._plock:
            pending = list(self._pending.values())
            self._pending.clear()
        for fut, _ in pending:
            if not fut.done():
                fut.set_exception(SplitRPCError("client closed"))
        if self._cl is not None:
            lib.srpc_client_destroy(self._cl)
            self._cl = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
