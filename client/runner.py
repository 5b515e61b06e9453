"""runner.py: runs one native load run (closed or open loop) on a helper thread and reports
progress while it runs; every timestamp is taken in native code."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .._native import check, ffi, lib
from ..client import Client, as_buffer

REC_DTYPE = np.dtype([("sched_ns", "<u8"), ("sent_ns", "<u8"), ("done_ns", "<u8"),
                      ("code", "<i4"), ("reply_len", "<u4")])
assert REC_DTYPE.itemsize == ffi.sizeof("srpc_load_rec_t"), "srpc_load_rec_t layout changed"

OK, TIMEOUT, PENDING, INVALID, SEND_FAILED = 0, lib.SRPC_E_TIMEOUT, lib.SRPC_E_PENDING, lib.SRPC_E_INVALID, lib.SRPC_E_SEND


def code_name(code: int) -> str:
    return ffi.string(lib.srpc_strerror(int(code))).decode()


@dataclass
class Records:
    """The outcome of every call of one run. `rec` is indexed by call (in send order); `order`
    lists the finished calls in the order they finished. Times are ns from `start_ns`."""
    rec: np.ndarray
    order: np.ndarray
    start_ns: int
    mode: str                      # "closed" or "open"
    concurrency: int = 0
    interrupted: bool = False
    meta: dict = field(default_factory=dict)

    @property
    def finished(self) -> np.ndarray:
        return self.rec[self.order]

    def latency_ns(self) -> np.ndarray:
        """Latency of each successful call, from when it was due (no coordinated omission)."""
        r = self.rec[self.rec["code"] == OK]
        return (r["done_ns"] - r["sched_ns"]).astype(np.int64)


@dataclass
class Snapshot:
    """What a progress callback sees, about every `interval_s`."""
    elapsed_s: float
    sent: int
    finished: int
    total: int
    rate_rps: float       # calls finished per second over the last interval
    p99_us: float         # of the calls finished over the last interval (nan if none)
    errors: int           # calls that did not end in a valid reply, so far


def run_load(client: Client, func_id: int, request, *, expect=None, concurrency: int = 0,
             schedule: np.ndarray | None = None, n: int | None = None, timeout_s: float = 1.0,
             spin: bool = False, max_outstanding: int = 4096,
             on_progress: Callable[[Snapshot], None] | None = None, interval_s: float = 0.5,
             stop: threading.Event | None = None) -> Records:
    """Closed loop (`concurrency` > 0, `n` calls) or open loop (`schedule`: due times in ns).
    `expect`: the reply every call must get (others count as INVALID). Ctrl-C or `stop` end
    the run early; the calls made so far are kept and `interrupted` is set."""
    if concurrency > 0:
        if not n or n <= 0:
            raise ValueError("a closed-loop run needs n > 0 calls")
        mode, sched = "closed", None
    else:
        if schedule is None or len(schedule) == 0:
            raise ValueError("an open-loop run needs a non-empty schedule (or concurrency > 0)")
        sched = np.ascontiguousarray(schedule, dtype=np.uint64)
        n, mode = len(sched), "open"
    if n >= 2**32:
        raise ValueError("too many calls for one run")
    if not timeout_s > 0:
        raise ValueError("timeout_s must be > 0")
    client._check_open()
    req = as_buffer(request)
    exp = as_buffer(expect) if expect is not None else None
    rec = np.zeros(n, dtype=REC_DTYPE)
    order = np.zeros(n, dtype=np.uint32)
    p = ffi.new("srpc_load_params_t *")
    p.func_id = func_id
    p.req = ffi.from_buffer(req)
    p.req_len = len(req)
    if exp is not None:
        p.expect = ffi.from_buffer(exp)
        p.expect_len = len(exp)
    p.concurrency = concurrency
    if sched is not None:
        p.sched_ns = ffi.cast("uint64_t *", sched.ctypes.data)
    p.n = n
    p.max_outstanding = max_outstanding
    p.timeout_us = max(1, int(timeout_s * 1e6))
    p.spin = int(spin)
    prog = ffi.new("srpc_load_progress_t *")
    start = ffi.new("uint64_t *")
    result: list[int] = []

    def body() -> None:
        result.append(lib.srpc_load_run(client._cl, p, ffi.cast("srpc_load_rec_t *", rec.ctypes.data),
                                        ffi.cast("uint32_t *", order.ctypes.data), prog, start))

    th = threading.Thread(target=body, name="splitrpc-load", daemon=True)
    interrupted = False
    t0 = time.monotonic()
    th.start()
    seen = errs = 0
    last_t = t0
    try:
        while th.is_alive():
            th.join(interval_s)
            if stop is not None and stop.is_set():
                prog.stop = 1
                interrupted = True
            if on_progress is not None and th.is_alive():
                now = time.monotonic()
                fin = prog.finished
                recent = rec[order[seen:fin]]
                ok = recent[recent["code"] == OK]
                lat = (ok["done_ns"] - ok["sched_ns"]) / 1e3
                errs += int(np.count_nonzero(recent["code"] != OK))  # only the new ones: O(interval)
                on_progress(Snapshot(now - t0, int(prog.sent), fin, n, (fin - seen) / max(now - last_t, 1e-9),
                                     float(np.percentile(lat, 99)) if len(lat) else float("nan"), errs))
                seen, last_t = fin, now
    except KeyboardInterrupt:
        prog.stop = 1
        interrupted = True
        th.join()
    check(result[0] if result else -1, "srpc_load_run")
    out = Records(rec, order[:prog.finished].copy(), int(start[0]), mode, concurrency, interrupted)
    out.meta = {"func_id": func_id, "request_bytes": len(req), "timeout_s": timeout_s, "spin": bool(spin)}
    return out
