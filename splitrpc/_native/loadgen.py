"""loadgen.py (binding layer): the native load generator through cffi: arrival schedules, one load run (srpc_load_run) with its shared progress, and its records as numpy arrays."""
from __future__ import annotations

import numpy as np

from splitrpc._native import ENOBUFS, check, ffi, lib, strerror

# srpc_load_rec_t as a numpy record, so that a run's records are one array written by C.
REC_DTYPE = np.dtype([("sched_ns", "<u8"), ("sent_ns", "<u8"), ("done_ns", "<u8"),
                      ("code", "<i4"), ("reply_len", "<u4")])
assert REC_DTYPE.itemsize == ffi.sizeof("srpc_load_rec_t"), "srpc_load_rec_t layout changed"

# A call's outcome (srpc_load_rec_t.code): 0, a wire error code, or one of the local ones.
OK, TIMEOUT, PENDING, INVALID, SEND_FAILED = 0, lib.SRPC_E_TIMEOUT, lib.SRPC_E_PENDING, lib.SRPC_E_INVALID, lib.SRPC_E_SEND

# Inter-arrival distributions of an open-loop schedule (enum srpc_arrival).
ARRIVALS = {"constant": lib.SRPC_ARRIVAL_CONSTANT, "poisson": lib.SRPC_ARRIVAL_POISSON,
            "hyperexp": lib.SRPC_ARRIVAL_HYPEREXP}


def code_name(code: int) -> str:
    """The C core's name of an outcome code ("TIMEOUT", "BUSY", ...)."""
    return strerror(code)


def _u64p(a: np.ndarray):
    return ffi.cast("uint64_t *", a.ctypes.data)


def schedule_fill(kind: int, rate: float, cv: float, seed: int, n: int) -> np.ndarray:
    """srpc_schedule_fill: n due times (ns, uint64) at a mean of `rate` calls/s."""
    at = np.empty(n, dtype=np.uint64)
    check(lib.srpc_schedule_fill(kind, float(rate), float(cv), seed & (2**64 - 1), _u64p(at), n),
          "srpc_schedule_fill")
    return at


def schedule_trace(kind: int, cv: float, t: np.ndarray, r: np.ndarray, end_s: float, seed: int,
                   cap: int) -> np.ndarray | None:
    """srpc_schedule_trace into room for cap due times: the due times (ns), or None when more
    than cap would be needed. t and r are contiguous float64 arrays of equal length."""
    at = np.empty(cap, dtype=np.uint64)
    n = lib.srpc_schedule_trace(kind, float(cv), ffi.cast("double *", t.ctypes.data),
                                ffi.cast("double *", r.ctypes.data), len(t), float(end_s), seed & (2**64 - 1),
                                _u64p(at), cap)
    if n == -ENOBUFS:
        return None
    check(n, "srpc_schedule_trace")
    return at[:n]


class LoadRun:
    """One srpc_load_run, set up: closed loop (concurrency > 0, n calls) or open loop (sched:
    due times in ns). run() blocks (call it on a helper thread; cffi releases the GIL); `rec`
    (REC_DTYPE) and `order` are the arrays C writes, finished/sent/stop the shared progress."""

    def __init__(self, cl, func_id: int, req: memoryview, expect: memoryview | None, *, concurrency: int,
                 sched: np.ndarray | None, n: int, max_outstanding: int, timeout_us: int, spin: bool):
        self.rec = np.zeros(n, dtype=REC_DTYPE)
        self.order = np.zeros(n, dtype=np.uint32)
        p = ffi.new("srpc_load_params_t *")
        p.func_id = func_id
        p.req = ffi.from_buffer(req)
        p.req_len = len(req)
        if expect is not None:
            p.expect = ffi.from_buffer(expect)
            p.expect_len = len(expect)
        p.concurrency = concurrency
        if sched is not None:
            p.sched_ns = _u64p(sched)
        p.n = n
        p.max_outstanding = max_outstanding
        p.timeout_us = timeout_us
        p.spin = int(spin)
        self._keep = (req, expect, sched)  # what p points at lives as long as this run
        self._cl, self._p = cl, p
        self._prog = ffi.new("srpc_load_progress_t *")
        self._start = ffi.new("uint64_t *")
        self.rc: int | None = None

    def run(self) -> int:
        """Runs the load on this thread; returns (and keeps in .rc) srpc_load_run's code."""
        self.rc = lib.srpc_load_run(self._cl, self._p, ffi.cast("srpc_load_rec_t *", self.rec.ctypes.data),
                                    ffi.cast("uint32_t *", self.order.ctypes.data), self._prog, self._start)
        return self.rc

    def check(self) -> None:
        """Raises NativeError when the run failed (or never ran)."""
        check(self.rc if self.rc is not None else -1, "srpc_load_run")

    @property
    def finished(self) -> int:
        """Calls finished so far: order[:finished] lists them (acquire-published by the runner)."""
        return self._prog.finished

    @property
    def sent(self) -> int:
        return self._prog.sent

    def stop(self) -> None:
        """Ends the run early; outstanding calls get PENDING."""
        self._prog.stop = 1

    @property
    def start_ns(self) -> int:
        """CLOCK_MONOTONIC time of the run's start."""
        return int(self._start[0])
