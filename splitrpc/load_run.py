"""load_run.py: runs one native load run (closed or open loop) on a helper thread and reports
progress while it runs; every timestamp is taken in native code."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, cast

import numpy as np
import numpy.typing as npt

from splitrpc.client import Client
from splitrpc._native import loadgen as _loadgen
from splitrpc._native.loadgen import INVALID, OK, PENDING, REC_DTYPE, SEND_FAILED, TIMEOUT  # noqa: F401 - public here
from splitrpc.client import as_buffer
from splitrpc.latency_histogram import percentiles


def code_name(code: int) -> str:
    """The name of a call's outcome code ("TIMEOUT", "BUSY", ...), from the C core."""
    return _loadgen.code_name(code)


@dataclass
class Records:
    """The outcome of every call of one run. `rec` is indexed by call (in send order); `order`
    lists the finished calls in the order they finished. Times are ns from `start_ns`."""
    rec: npt.NDArray[np.void]
    order: npt.NDArray[np.uint32]
    start_ns: int
    mode: str                      # "closed" or "open"
    concurrency: int = 0
    interrupted: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    # The request each call sent (uint32, aligned with rec): an index into the run's request
    # set, all 0 for a run with one request. None only for Records made by hand.
    req_index: npt.NDArray[np.uint32] | None = None

    @property
    def finished(self) -> npt.NDArray[np.void]:
        return self.rec[self.order]

    def latency_ns(self) -> npt.NDArray[np.int64]:
        """Latency of each successful call, from when it was due (no coordinated omission)."""
        r = self.rec[self.rec["code"] == OK]
        # numpy types a structured array's field as Any: this is the int64 array astype makes
        return cast(npt.NDArray[np.int64], (r["done_ns"] - r["sched_ns"]).astype(np.int64))


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


def _is_set(request: Any) -> bool:
    """A request set is a list or tuple of bytes-likes; anything else is one request."""
    return isinstance(request, (list, tuple))


def run_load(client: Client, func_id: int, request: Any, *, expect: Any = None, concurrency: int = 0,
             schedule: npt.NDArray[Any] | None = None, n: int | None = None, timeout_s: float = 1.0,
             spin: bool = False, max_outstanding: int = 4096,
             on_progress: Callable[[Snapshot], None] | None = None, interval_s: float = 0.5,
             stop: threading.Event | None = None, index: npt.NDArray[Any] | None = None) -> Records:
    """Closed loop (`concurrency` > 0, `n` calls) or open loop (`schedule`: due times in ns).
    `request`: the bytes every call sends, and `expect` the reply every call must get (others
    count as INVALID); or a request set: `request` a list of bytes-likes, `expect` None or a
    list of as many expected replies, and call i sends request[index[i]] (`index`: one integer
    per call, < len(request); None: i % len(request)). Records.req_index says which request
    each call sent. With a request set, `func_id` may also be a sequence of function ids, one per
    request: call i then calls func_id[index[i]] (one run spread over many functions). Ctrl-C
    or `stop` end the run early; the calls made so far are kept and `interrupted` is set."""
    funcs = None
    if isinstance(func_id, (list, tuple, np.ndarray)):
        if not _is_set(request) or len(func_id) != len(request):
            raise ValueError("a sequence of function ids needs a request set with one request per id")
        funcs = np.asarray(func_id)
        func_id = int(funcs[0]) if len(funcs) else 0
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
    if _is_set(request):
        reqs: list[memoryview] | None = [as_buffer(b) for b in request]
        if not reqs:
            raise ValueError("a request set needs at least one request")
        if expect is not None and not _is_set(expect):
            raise ValueError("with a request set, expect is a list (one expected reply per request) or None")
        exps = None if expect is None else [as_buffer(b) for b in expect]
        if exps is not None and len(exps) != len(reqs):
            raise ValueError(f"{len(exps)} expected replies for {len(reqs)} requests")
        if index is None:
            idx = np.arange(n, dtype=np.int64) % len(reqs)
            c_index = None
        else:
            idx = np.asarray(index)
            if idx.ndim != 1 or len(idx) != n:
                raise ValueError(f"index needs one request index per call ({n}), got shape {idx.shape}")
            if idx.dtype.kind not in "iu" or (n and (int(idx.min()) < 0 or int(idx.max()) >= len(reqs))):
                raise ValueError(f"index must hold integers in [0, {len(reqs)})")
            c_index = idx = np.ascontiguousarray(idx, dtype=np.uint32)
        req_index = idx.astype(np.uint32)
        req = exp = None
        sizes = [r.nbytes for r in reqs]
        request_bytes = round(float(np.mean(np.asarray(sizes)[req_index])))
    else:
        if index is not None:
            raise ValueError("index is for a request set (request given as a list)")
        if _is_set(expect):
            raise ValueError("expect is a list only with a request set")
        req = as_buffer(request)
        exp = as_buffer(expect) if expect is not None else None
        reqs = exps = c_index = None
        req_index = np.zeros(n, dtype=np.uint32)
        request_bytes = len(req)
    run = _loadgen.LoadRun(client._check_open(), func_id, req, exp, concurrency=concurrency, sched=sched, n=n,
                           max_outstanding=max_outstanding, timeout_us=max(1, int(timeout_s * 1e6)), spin=spin,
                           reqs=reqs, expects=exps, index=c_index, funcs=funcs)
    rec, order = run.rec, run.order
    # the thread keeps the client alive while the run uses its handle (Client.__del__ frees it)
    th = threading.Thread(target=lambda c=client: run.run(), name="splitrpc-load", daemon=True)
    interrupted = False
    t0 = time.monotonic()
    th.start()
    seen = errs = 0
    last_t = t0
    try:
        while th.is_alive():
            th.join(interval_s)
            if stop is not None and stop.is_set():
                run.stop()
                interrupted = True
            if on_progress is not None and th.is_alive():
                now = time.monotonic()
                fin = run.finished
                recent = rec[order[seen:fin]]
                ok = recent[recent["code"] == OK]
                p99 = percentiles(ok["done_ns"] - ok["sched_ns"], (99,))[99]
                errs += int(np.count_nonzero(recent["code"] != OK))  # only the new ones: O(interval)
                on_progress(Snapshot(now - t0, int(run.sent), fin, n, (fin - seen) / max(now - last_t, 1e-9),
                                     p99 / 1e3 if p99 is not None else float("nan"), errs))
                seen, last_t = fin, now
    except KeyboardInterrupt:
        run.stop()
        interrupted = True
        th.join()
    except BaseException:  # on_progress raised: the run stops before the caller goes on
        run.stop()
        th.join()
        raise
    run.check()
    out = Records(rec, order[:run.finished].copy(), run.start_ns, mode, concurrency, interrupted,
                  req_index=req_index)
    out.meta = {"func_id": func_id, "request_bytes": request_bytes, "timeout_s": timeout_s, "spin": bool(spin)}
    if reqs is not None:
        out.meta["request_set"] = {"requests": len(reqs), "request_bytes_min": min(sizes),
                                   "request_bytes_max": max(sizes), "checks_replies": exps is not None}
    return out
