"""arrivals.py: open-loop arrival schedules (native), rate traces from CSV, and a diurnal
Wikipedia-like day with Gaussian noise."""
from __future__ import annotations

import csv
import math

import numpy as np
import numpy.typing as npt

from splitrpc._native import loadgen as _loadgen

ARRIVALS: dict[str, int] = _loadgen.ARRIVALS  # name -> the C core's enum srpc_arrival


class TraceError(ValueError):
    """A rate trace that cannot be replayed (bad CSV, times not increasing, negative rates)."""


def _kind(arrival: str) -> int:
    try:
        return ARRIVALS[arrival]
    except KeyError:
        raise ValueError(f"unknown arrival process {arrival!r}; choose one of {', '.join(ARRIVALS)}") from None


def _check_shape(arrival: str, cv: float) -> None:
    if arrival == "hyperexp" and not cv > 1:
        raise ValueError(f"a hyperexponential schedule needs a coefficient of variation > 1, got {cv}")


def arrivals(arrival: str, rate: float, n: int, *, cv: float = 4.0, seed: int = 1) -> npt.NDArray[np.uint64]:
    """Due times in ns (uint64, from 0) of n arrivals at a mean of `rate` calls/s."""
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate must be a positive number of calls/s, got {rate}")
    if n < 0:
        raise ValueError("n must be >= 0")
    _check_shape(arrival, cv)
    return _loadgen.schedule_fill(_kind(arrival), rate, cv, seed, n)


def validate_trace(t_s: npt.ArrayLike, rate: npt.ArrayLike) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    t = np.asarray(t_s, dtype=np.float64)
    r = np.asarray(rate, dtype=np.float64)
    if t.ndim != 1 or t.shape != r.shape or len(t) == 0:
        raise TraceError("a trace needs equally many times and rates, at least one of each")
    if not np.all(np.isfinite(t)) or not np.all(np.isfinite(r)):
        raise TraceError("a trace holds a value that is not a finite number")
    if t[0] < 0 or np.any(np.diff(t) <= 0):
        raise TraceError("trace times must start at >= 0 and increase strictly")
    if np.any(r < 0):
        raise TraceError("trace rates must be >= 0")
    return t, r


def trace_arrivals(t_s: npt.ArrayLike, rate: npt.ArrayLike, end_s: float, *, arrival: str = "poisson", cv: float = 4.0,
                   seed: int = 1) -> npt.NDArray[np.uint64]:
    """Due times (ns) following a piecewise-constant rate trace: rate[i] calls/s from t_s[i]
    to t_s[i+1], the last piece until end_s."""
    t, r = validate_trace(t_s, rate)
    if not end_s > t[0]:
        raise TraceError(f"the trace ends at {end_s} s, before it starts")
    _check_shape(arrival, cv)
    edges = np.append(t, max(end_s, t[-1]))
    expected = float(np.sum(r * np.clip(np.diff(edges), 0, None)))
    cap = int(expected * 1.2 + 10 * math.sqrt(expected + 1) + 1000)
    while True:
        if cap >= 2**31:
            raise TraceError(f"the trace asks for about {expected:.3g} calls, more than one run can hold")
        at = _loadgen.schedule_trace(_kind(arrival), cv, t, r, end_s, seed, cap)
        if at is not None:
            return at
        cap *= 2  # more arrivals than room (unlikely): try again with more


def read_trace_csv(path: str) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Reads a `time_s,rate_rps` CSV (a header line is allowed) into (times, rates)."""
    t, r = [], []
    with open(path, newline="") as f:
        for lineno, row in enumerate(csv.reader(f), 1):
            if not row or row[0].strip().startswith("#"):
                continue
            try:
                a, b = float(row[0]), float(row[1])
            except (ValueError, IndexError):
                if lineno == 1:
                    continue  # the header
                raise TraceError(f"{path}:{lineno}: expected `time_s,rate_rps`, got {','.join(row)!r}") from None
            t.append(a)
            r.append(b)
    try:
        return validate_trace(t, r)
    except TraceError as e:
        raise TraceError(f"{path}: {e}") from None


def write_trace_csv(path: str, t_s: npt.ArrayLike, rate: npt.ArrayLike) -> None:
    t, r = validate_trace(t_s, rate)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["time_s", "rate_rps"])
        for a, b in zip(t, r):
            w.writerow([f"{a:.6f}", f"{b:.3f}"])


def wikipedia_day(peak_rps: float, duration_s: float, *, points: int = 288, noise: float = 0.1,
                  seed: int = 1) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """A day of Wikipedia-like load compressed into duration_s: a diurnal cycle (trough about
    half the peak, in the early morning; peak in the evening), each point multiplied by
    Gaussian noise of relative standard deviation `noise`, scaled so the largest point is
    peak_rps. Returns (times in s, rates in calls/s), `points` of them."""
    if not (peak_rps > 0 and duration_s > 0 and points >= 2 and noise >= 0):
        raise ValueError("peak_rps and duration_s must be > 0, points >= 2, noise >= 0")
    hours = np.arange(points) * 24.0 / points
    phase = 2 * np.pi * (hours - 20.0) / 24.0  # busiest around 20:00
    shape = 0.72 + 0.22 * np.cos(phase) + 0.06 * np.cos(2 * phase)
    rng = np.random.default_rng(seed)
    rates = np.clip(shape * rng.normal(1.0, noise, points), 0, None)
    rates *= peak_rps / rates.max()
    times = np.asarray(np.arange(points) * (duration_s / points), dtype=np.float64)  # float64 to numpy 2's stubs too
    return times, rates
