"""capacity.py: open-loop load through a splitrpc.Pool (Poisson arrivals at a rate that may change over time, each call's latency counted from when it was due, so a late sender cannot hide queueing: no coordinated omission), per-second bins against an SLA, and the latency-bounded throughput of a service (the highest rate whose p99 stays under the SLA, by doubling then bisection) (after Hercules, Ke et al., HPCA 2022).
"""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

import numpy as np

from splitrpc.errors import Busy, CallTimeout, Draining

OUTCOMES = ("ok", "busy", "draining", "timeout", "error")


@dataclass
class Run:
    """One open-loop run: per call its due time (s from the start), latency (s, nan if it failed)
    and outcome (an index of OUTCOMES)."""
    due: np.ndarray
    latency: np.ndarray
    outcome: np.ndarray
    seconds: float
    late_max_s: float          # the most the sender fell behind a due time

    def count(self, what: str) -> int:
        return int((self.outcome == OUTCOMES.index(what)).sum())

    def p(self, q: float) -> float:
        ok = self.latency[self.outcome == 0]
        return float(np.quantile(ok, q)) if ok.size else float("nan")

    def bins(self, sla_s: float, width_s: float = 1.0) -> list[dict]:
        """Per bin of due times: calls, failed (any outcome but ok), p99 (s), met (p99 <= sla_s
        and no call failed; a bin with no call is met)."""
        n = int(np.ceil(self.seconds / width_s))
        idx = np.minimum((self.due // width_s).astype(int), max(n - 1, 0))
        out = []
        for b in range(n):
            sel = idx == b
            lat = self.latency[sel & (self.outcome == 0)]
            failed = int((sel & (self.outcome != 0)).sum())
            p99 = float(np.quantile(lat, 0.99)) if lat.size else float("nan")
            out.append({"t_s": b * width_s, "calls": int(sel.sum()), "failed": failed, "p99_s": p99,
                        "met": failed == 0 and (not lat.size or p99 <= sla_s)})
        return out


def open_loop(pool, func_id: int, payload, rate, seconds: float, *, seed: int = 1, timeout: float | None = None,
              idempotent: bool = True, progress=None) -> Run:
    """Calls pool.call_async at Poisson arrivals for `seconds`: rate is calls/s, or a function of
    the time since the start giving it. Waits for every call to finish (its timeout) before it
    returns. progress(t) is called about once a second."""
    rate_at = rate if callable(rate) else (lambda _t, r=float(rate): r)
    rng = random.Random(seed)
    due, lat, out = [], [], []
    lock = threading.Lock()
    pending = [0]
    done = threading.Condition(lock)

    def finish(k: int, t_due: float, fut) -> None:
        end = time.monotonic()
        try:
            fut.result()
            o, v = 0, end - t_due
        except Busy:
            o, v = 1, float("nan")
        except Draining:
            o, v = 2, float("nan")
        except CallTimeout:
            o, v = 3, float("nan")
        except Exception:  # noqa: BLE001 - counted as an error, the run goes on
            o, v = 4, float("nan")
        with lock:
            lat[k], out[k] = v, o
            pending[0] -= 1
            if not pending[0]:
                done.notify_all()

    t0 = time.monotonic()
    t = 0.0
    late = 0.0
    next_progress = 1.0
    while True:
        r = rate_at(t)
        t += rng.expovariate(r) if r > 0 else 0.01
        if t >= seconds:
            break
        if r <= 0:
            continue
        now = time.monotonic() - t0
        if t > now:
            time.sleep(t - now)
        else:
            late = max(late, now - t)
        with lock:
            k = len(due)
            due.append(t)
            lat.append(float("nan"))
            out.append(4)
            pending[0] += 1
        fut = pool.call_async(func_id, payload, timeout, idempotent=idempotent)
        fut.add_done_callback(lambda f, k=k, td=t0 + t: finish(k, td, f))
        if progress is not None and t >= next_progress:
            next_progress += 1.0
            progress(t)
    with lock:
        done.wait_for(lambda: not pending[0], (timeout or pool.timeout) * pool.max_attempts + 5)
        return Run(np.array(due), np.array(lat), np.array(out, dtype=np.int8), seconds, late)


def latency_bounded_qps(measure, sla_s: float, *, start: float = 50.0, limit: float = 1e6, steps: int = 4,
                        log=None) -> tuple[float, list[dict]]:
    """The highest rate whose p99 meets sla_s (no call failed either): measure(rate) -> Run;
    the rate doubles from `start` until a run misses, then `steps` bisections. Returns (rate,
    the trials [{rate, p99_s, failed, met}])."""
    trials = []

    def ok(rate: float) -> bool:
        run = measure(rate)
        failed = len(run.outcome) - run.count("ok")
        p99 = run.p(0.99)
        met = failed == 0 and p99 <= sla_s
        trials.append({"rate": rate, "p99_s": p99, "failed": failed, "met": met, "calls": len(run.outcome)})
        if log:
            log(f"rate {rate:8.0f}/s: p99 {p99 * 1e3:7.2f} ms, {failed} failed -> {'met' if met else 'missed'}")
        return met

    lo, hi = 0.0, start
    while hi <= limit and ok(hi):
        lo, hi = hi, hi * 2
    for _ in range(steps):
        mid = (lo + hi) / 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo, trials
