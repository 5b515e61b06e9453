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


def pack(bufs) -> tuple[np.ndarray, np.ndarray]:
    """Byte buffers back to back: (data, offsets), offsets has len(bufs) + 1 uint64 entries and
    data one spare byte at the end, so that its address is valid even when every buffer is empty."""
    views = [memoryview(b).cast("B") for b in bufs]
    off = np.zeros(len(views) + 1, dtype=np.uint64)
    np.cumsum([v.nbytes for v in views], out=off[1:])
    data = np.zeros(int(off[-1]) + 1, dtype=np.uint8)
    for v, a in zip(views, off[:-1].tolist()):
        data[a:a + v.nbytes] = np.frombuffer(v, dtype=np.uint8)
    return data, off


class LoadRun:
    """One srpc_load_run, set up: closed loop (concurrency > 0, n calls) or open loop (sched:
    due times in ns). run() blocks (call it on a helper thread; cffi releases the GIL); `rec`
    (REC_DTYPE) and `order` are the arrays C writes, finished/sent/stop the shared progress.

    Every call sends `req` (checked against `expect` unless None), or, with `reqs` (a list of
    bytes-likes; req must then be None), a request set: call i sends reqs[index[i]] (index:
    n uint32 values < len(reqs); None: i % len(reqs)) and its reply is checked against
    expects[index[i]] (expects: None, or one bytes-like per request; expect must be None), and
    calls funcs[index[i]] (funcs: None, every call calls func_id; or one function id per request)."""

    def __init__(self, cl, func_id: int, req: memoryview | None, expect: memoryview | None, *, concurrency: int,
                 sched: np.ndarray | None, n: int, max_outstanding: int, timeout_us: int, spin: bool,
                 reqs: list | None = None, expects: list | None = None, index: np.ndarray | None = None,
                 funcs: np.ndarray | None = None):
        self.rec = np.zeros(n, dtype=REC_DTYPE)
        self.order = np.zeros(n, dtype=np.uint32)
        p = ffi.new("srpc_load_params_t *")
        p.func_id = func_id
        keep: list = [req, expect, sched]  # what p points at lives as long as this run
        if reqs is None:
            if req is None or expects is not None or index is not None or funcs is not None:
                raise ValueError("give one request (req), or a request set (reqs, expects, index, funcs)")
            p.req = ffi.from_buffer(req)
            p.req_len = len(req)
            if expect is not None:
                p.expect = ffi.from_buffer(expect)
                p.expect_len = len(expect)
        else:
            if req is not None or expect is not None:
                raise ValueError("give one request (req, expect) or a request set (reqs, expects), not both")
            if not 0 < len(reqs) < 2**32:
                raise ValueError("a request set needs 1 .. 2^32 - 1 requests")
            if expects is not None and len(expects) != len(reqs):
                raise ValueError(f"{len(expects)} expected replies for {len(reqs)} requests")
            data, off = pack(reqs)
            p.n_reqs = len(reqs)
            p.reqs = ffi.cast("uint8_t *", data.ctypes.data)
            p.req_off = _u64p(off)
            keep += [data, off]
            if expects is not None:
                edata, eoff = pack(expects)
                p.expects = ffi.cast("uint8_t *", edata.ctypes.data)
                p.expect_off = _u64p(eoff)
                keep += [edata, eoff]
            if index is not None:
                if not (isinstance(index, np.ndarray) and index.dtype == np.uint32 and index.ndim == 1
                        and index.flags.c_contiguous):
                    raise ValueError("index must be a contiguous 1-d uint32 array")
                if len(index) != n:
                    raise ValueError(f"index has {len(index)} entries for {n} calls")
                if n and int(index.max()) >= len(reqs):
                    raise ValueError(f"index holds {int(index.max())}, past the set's {len(reqs)} requests")
                p.req_index = ffi.cast("uint32_t *", index.ctypes.data)
                keep.append(index)
            if funcs is not None:
                f = np.ascontiguousarray(funcs)
                if f.ndim != 1 or len(f) != len(reqs) or f.dtype.kind not in "iu" or \
                        (len(f) and (int(f.min()) < 0 or int(f.max()) > 0xFFFF)):
                    raise ValueError(f"funcs needs one function id (0..65535) per request ({len(reqs)})")
                f = f.astype(np.uint16)
                p.req_func = ffi.cast("uint16_t *", f.ctypes.data)
                keep.append(f)
        p.concurrency = concurrency
        if sched is not None:
            p.sched_ns = _u64p(sched)
        p.n = n
        p.max_outstanding = max_outstanding
        p.timeout_us = timeout_us
        p.spin = int(spin)
        self._keep = keep
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
