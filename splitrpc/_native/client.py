"""client.py (binding layer): the native client through cffi: its configuration and C defaults, blocking calls, sends and the completion primitives of futures, closed-loop load and counters."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from splitrpc._native import ENOBUFS, ESHUTDOWN, ETIMEDOUT, check, ffi, lib, text
from splitrpc.errors import CallTimeout, SplitRPCError, Unavailable, remote_error

E_TIMEOUT = lib.SRPC_E_TIMEOUT  # a local outcome: the deadline passed in the client (never on the wire)
E_UNAVAILABLE = lib.SRPC_E_UNAVAILABLE  # a local outcome: the kernel said the server is unreachable
E_CLOSED = lib.SRPC_E_CLOSED  # a local outcome: the client was closed (shutdown()) before the call finished
CLOSED = "client is closed"  # the text of SplitRPCError for a call on, or cut short by, a closed client
# the least buffer a call's reply is read into: any error's whole text fits (a server's ERROR
# text, SRPC_ERRMSG_MAX; the client's own, under SRPC_CLIENT_MSG_MAX; longer ones are cut)
INTO_MIN = max(lib.SRPC_ERRMSG_MAX, lib.SRPC_CLIENT_MSG_MAX)


def _check(rc: int, what: str) -> None:
    """check() for the client's calls: -ESHUTDOWN (the client was closed) is SplitRPCError(CLOSED)."""
    if rc == -ESHUTDOWN:
        raise SplitRPCError(CLOSED)
    check(rc, what)


def call_error(code: int, reply: bytes) -> SplitRPCError:
    """The exception for a finished call's non-zero code: CallTimeout for the client's own
    timeout, else the RemoteError of the ERROR datagram's code."""
    if code == E_TIMEOUT:
        return CallTimeout(reply.decode("utf-8", errors="replace") or "no reply within the call's timeout")
    if code == E_UNAVAILABLE:
        return Unavailable(reply.decode("utf-8", errors="replace"))
    if code == E_CLOSED:
        return SplitRPCError(CLOSED)
    if code >= lib.SRPC_E_MAX:
        return SplitRPCError(f"{text(lib.srpc_strerror(code))}: {reply.decode('utf-8', errors='replace')}")
    return remote_error(code, reply)

# Client keyword -> (srpc_client_config_t field, how many of the C unit make one of ours).
_CONFIG_FIELDS = {
    "port": ("port", 1),
    "segment_size": ("seg_size", 1),
    "max_reply": ("max_reply", 1),
    "socket_buffer": ("sock_buf_bytes", 1),
    "retries": ("retries", 1),
    "rto_min": ("rto_min_us", 1_000_000),      # seconds
    "rto_initial": ("rto_initial_us", 1_000_000),
    "rto_max": ("rto_max_us", 1_000_000),
    "window": ("window", 1),
    "busy_retry": ("busy_retry", 1),
    "busy_backoff": ("busy_backoff_us", 1_000_000),  # seconds
    "protocol": ("version", 1),
    "wait_for_ready": ("wait_for_ready", 1),
    "rekey": ("rekey_ms", 1000),                # seconds (version 5)
}


def _config():
    cfg = ffi.new("srpc_client_config_t *")
    lib.srpc_client_config_init(cfg)
    return cfg


def _read_defaults() -> dict:
    cfg = _config()
    out = {"host": text(cfg.host)}
    for name, (c_field, scale) in _CONFIG_FIELDS.items():
        v = getattr(cfg, c_field)
        out[name] = v / scale if scale != 1 else int(v)
    return out


CLIENT_DEFAULTS = _read_defaults()  # srpc_client_config_init's values as Client keywords (native/src/core/tunables.h)


@dataclass
class NativeClient:
    """A created srpc_client_t and what its configuration says."""
    handle: object
    host: str
    port: int
    max_reply: int
    keep: list = field(default_factory=list, repr=False)


def create_client(host: str | None = None, *, busy_poll: bool = False, dpdk_dev: str | None = None,
                  dpdk_local_ip: str | None = None, dpdk_local_port: int = 0, dpdk_server_mac: str | None = None,
                  dpdk_mtu: int | None = None, auth_key: tuple[int, bytes] | None = None, encrypt: bool = False,
                  suites: int | None = None, **settings) -> NativeClient:
    """srpc_client_create with srpc_client_config_init's defaults, each replaced by the keyword
    given (not None); settings are Client keywords of _CONFIG_FIELDS; auth_key: (key id, secret) for
    protocols 4 and 5; encrypt: version 5's sessions encrypt the data; suites: the mask of the
    suites version 5 offers beyond ChaCha20-Poly1305 (auth.suite_mask; None: all). Raises NativeError."""
    cfg = _config()
    keep = []

    def c_string(s: str):
        p = ffi.new("char[]", s.encode())
        keep.append(p)
        return p

    if host is not None:
        cfg.host = c_string(host)
    for name, value in settings.items():
        if value is not None:
            c_field, scale = _CONFIG_FIELDS[name]
            setattr(cfg, c_field, int(value * scale) if scale != 1 else int(value))
    cfg.busy_poll = int(busy_poll)
    if dpdk_dev is not None:
        cfg.dpdk_dev, cfg.dpdk_local_ip = c_string(dpdk_dev), c_string(dpdk_local_ip)
        cfg.dpdk_server_mac = c_string(dpdk_server_mac) if dpdk_server_mac else ffi.NULL
        cfg.dpdk_local_port = int(dpdk_local_port)
        if dpdk_mtu is not None:
            cfg.dpdk_mtu = int(dpdk_mtu)
    if auth_key is not None:  # versions 4 and 5: copied by the C client at create
        cfg.auth_key_id = auth_key[0]
        cfg.auth_secret = secret = ffi.new("uint8_t[]", auth_key[1])
        keep.append(secret)
    cfg.encrypt = int(bool(encrypt))
    if suites is not None:
        cfg.v5_suites = suites
    out = ffi.new("srpc_client_t **")
    check(lib.srpc_client_create(cfg, out), f"cannot create a client for {text(cfg.host)}:{cfg.port}")
    return NativeClient(out[0], text(cfg.host), int(cfg.port), int(cfg.max_reply), keep)


def destroy(cl) -> None:
    """Frees the client: only once no thread can be in its functions (a Client's __del__)."""
    lib.srpc_client_destroy(cl)


def shutdown(cl) -> None:
    """Closes the client for calls while other threads may still be in them: their calls end
    with SplitRPCError(CLOSED), new ones are refused (srpc_client_shutdown); destroy() later."""
    lib.srpc_client_shutdown(cl)


class CallBuffers:
    """One thread's reply buffer (max_reply bytes, at least INTO_MIN for an error's text) and out-parameters."""
    __slots__ = ("out", "size", "out_len", "code")

    def __init__(self, max_reply: int):
        self.out = ffi.new("uint8_t[]", max(max_reply, INTO_MIN))
        self.size = len(self.out)
        self.out_len = ffi.new("uint32_t *")
        self.code = ffi.new("int *")


def call(cl, bufs: CallBuffers, func_id: int, mv, tmo: float, nbytes: int | None = None) -> bytes:
    """One call start to end (srpc_client_call): the reply's bytes; raises CallTimeout, a
    RemoteError subclass for an ERROR reply, or SplitRPCError for a reply too large. mv: a byte
    memoryview, or any C-contiguous buffer (a numpy array) with its size in nbytes."""
    out_len, code = bufs.out_len, bufs.code
    rc = lib.srpc_client_call(cl, func_id, ffi.from_buffer(mv), len(mv) if nbytes is None else nbytes, bufs.out,
                              bufs.size, out_len, code, int(tmo * 1e6))
    if rc == -ETIMEDOUT:
        raise CallTimeout(f"no reply to function {func_id} within {tmo:.3g} s")
    if rc == -ENOBUFS:
        raise SplitRPCError(f"reply of {out_len[0]} bytes is larger than max_reply")
    _check(rc, "srpc_client_call")
    reply = ffi.buffer(bufs.out, out_len[0])[:]
    if code[0]:
        raise call_error(code[0], reply)
    return reply


def call_into(cl, bufs: CallBuffers, func_id: int, a, nbytes: int, out, cap: int, tmo: float) -> int:
    """call() of a C-contiguous buffer a (nbytes) whose reply is read straight into out, a
    writable C-contiguous buffer of cap bytes, cap >= INTO_MIN (an ERROR's text lands there
    too): no bytes object between the reply and its array. Returns the reply's length:
    cap or not, the caller's check (a reply longer than cap is not read: its length alone).
    Raises as call() does."""
    out_len, code = bufs.out_len, bufs.code
    p = ffi.from_buffer(out)
    rc = lib.srpc_client_call(cl, func_id, ffi.from_buffer(a), nbytes, p, cap, out_len, code, int(tmo * 1e6))
    if rc == 0 and not code[0]:
        return out_len[0]
    if rc == -ETIMEDOUT:
        raise CallTimeout(f"no reply to function {func_id} within {tmo:.3g} s")
    if rc == -ENOBUFS:  # a reply (code 0) longer than cap: an error's text is cut to cap, never this
        return out_len[0]
    _check(rc, "srpc_client_call")
    raise call_error(code[0], ffi.buffer(p, out_len[0])[:])


def send(cl, func_id: int, mv: memoryview, timeout: float, aux: int = 0, wait_for_ready: bool | None = None) -> int:
    """Sends a request (header aux: aux) on the client's own completion queue with its deadline
    `timeout` seconds from now (srpc_client_send_opts: the window may hold it back); returns its
    req_id. wait_for_ready: True / False for this call, None: the client's."""
    rid = ffi.new("uint64_t *")
    flags = 0 if wait_for_ready is None else lib.SRPC_SEND_WAIT_FOR_READY if wait_for_ready else lib.SRPC_SEND_FAIL_FAST
    rc = lib.srpc_client_send_opts(cl, ffi.NULL, func_id, ffi.from_buffer(mv), len(mv), aux, int(timeout * 1e6),
                                   flags, rid)
    _check(rc, "srpc_client_send_opts")
    return rid[0]


class Completions:
    """Reports the calls made with send() as they finish (srpc_client_wait_any), each with its
    outcome, and releases them: the primitive of the client's futures poller."""

    def __init__(self, cl, batch: int = 64):
        self._cl = cl
        self._n = self.batch = batch  # the most one wait() reports
        self._ids = ffi.new("uint64_t[]", batch)
        self._code = ffi.new("int *")
        self._data = ffi.new("uint8_t **")
        self._len = ffi.new("uint32_t *")

    def wait(self, timeout_us: int) -> list | None:
        """Up to `batch` finished calls as (req_id, code, reply bytes), after waiting up to
        timeout_us for one; [] when none finished in time, None when the client failed."""
        cl, ids, code, data, length = self._cl, self._ids, self._code, self._data, self._len
        n = lib.srpc_client_wait_any(cl, ids, self._n, timeout_us)
        if n < 0:
            return None
        done = []
        for i in range(n):
            rid = ids[i]
            lib.srpc_client_result(cl, rid, code, data, length)
            reply = ffi.buffer(data[0], length[0])[:] if length[0] else b""
            lib.srpc_client_release(cl, rid)
            done.append((rid, code[0], reply))
        return done


def fd(cl) -> int:
    """The descriptor an event loop watches for the client's replies (srpc_client_fd); raises
    NativeError (ENOTSUP) for a polled transport."""
    r = lib.srpc_client_fd(cl)
    check(r, "srpc_client_fd")
    return r


def next_due_ns(cl) -> int:
    """When the client next has a retransmission or a BUSY retry to send, time.monotonic_ns()'s
    clock (UINT64_MAX: none)."""
    due = ffi.new("uint64_t *")
    check(lib.srpc_client_next_due(cl, due), "srpc_client_next_due")
    return due[0]


def release(cl, rid: int) -> None:
    """Forgets a call; a late reply for it is dropped."""
    lib.srpc_client_release(cl, rid)


def closed_loop(cl, func_id: int, mv: memoryview, concurrency: int, warmup: int, calls: int,
                timeout_us: int) -> tuple[np.ndarray, int, int]:
    """srpc_client_closed_loop: (latency of each recorded call in ns, 0 where it failed, errors, elapsed ns)."""
    lat = np.zeros(calls, dtype=np.uint64)
    errors = ffi.new("uint64_t *")
    elapsed = ffi.new("uint64_t *")
    rc = lib.srpc_client_closed_loop(cl, func_id, ffi.from_buffer(mv), len(mv), concurrency, warmup, calls,
                                     timeout_us, ffi.cast("uint64_t *", lat.ctypes.data), errors, elapsed)
    _check(rc, "srpc_client_closed_loop")
    return lat, int(errors[0]), int(elapsed[0])


_STATS = ("sent_calls", "replies", "errors", "timeouts", "late_or_unknown", "dropped", "retransmits", "busy_retries",
          "window_waits", "outstanding", "waiting", "srtt_us", "rto_us", "unreachable", "unavailable",
          "draining_unsent", "bad_data_check", "send_full", "bad_auth", "handshakes", "rekeys", "no_sessions",
          "cookies", "handshakes_failed", "session_resends", "no_sessions_deferred")


def read_stats(cl) -> dict:
    st = ffi.new("srpc_client_stats_t *")
    check(lib.srpc_client_stats(cl, st), "srpc_client_stats")
    return {k: getattr(st, k) for k in _STATS}
