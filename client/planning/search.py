"""search.py: Hercules's configuration search over (threads per instance o, instances m, batch size d), or for sparse-dense pipeline scheduling over (dense threads, sparse threads, batch size): the "gradient" search (a discrete hill climb per o) and the grid search it is measured against, both over a measure(config) function returning the latency-bounded throughput (0 where the SLA cannot be met) (after Hercules, Ke et al., HPCA 2022).

Gradient search, as the paper describes it:
- for each o, ascending: start at the smallest m and d; measure the neighbours (m, d+1),
  (m+1, d) and (m+1, d+1) (the next value of each axis); keep those that meet the SLA (and the
  power cap, where measure reports power); move to the one with the largest throughput if it
  beats the current point by more than `margin` (a noise margin, relative); stop when none does;
- stop the outer loop when an o's best falls below the previous o's best (patience=0, the
  paper's rule; patience=k tolerates k such o's in a row before stopping: throughput need not
  be unimodal in o, and tests/test_planning_search.py shows a server where the paper's rule
  stops one o too early).
It assumes throughput roughly convex in (m, d); every point is measured once (cached).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Config:
    threads: int     # o: intra-op threads per instance; sparse-dense: the dense (MLP) stage's threads
    instances: int   # m: co-located instances (server processes or executor threads)
    batch: int       # d: batch size
    sparse: int = 0  # sparse-dense pipeline scheduling: the sparse (lookup) stage's threads; 0: model-based

    def label(self) -> str:
        if self.sparse:
            return f"sparse={self.sparse} dense={self.threads} m={self.instances} d={self.batch}"
        return f"o={self.threads} m={self.instances} d={self.batch}"


@dataclass
class Point:
    config: Config
    qps: float                 # latency-bounded throughput; 0: the SLA cannot be met
    power: float | None = None


@dataclass
class SearchResult:
    best: Point | None
    explored: list = field(default_factory=list)  # Points in the order measured

    @property
    def measured(self) -> int:
        return len(self.explored)


class _Measurer:
    """measure() once per config; a result that exceeds the power cap counts as 0."""

    def __init__(self, measure: Callable, power_cap: float | None):
        self.measure, self.cap, self.cache, self.order = measure, power_cap, {}, []

    def __call__(self, c: Config) -> Point:
        if c not in self.cache:
            r = self.measure(c)
            qps, power = (r if isinstance(r, tuple) else (r, None))
            qps = float(qps or 0.0)
            if self.cap is not None and power is not None and power > self.cap:
                qps = 0.0
            p = Point(c, qps, power)
            self.cache[c] = p
            self.order.append(p)
        return self.cache[c]


def _check_axes(threads, instances, batches) -> tuple[list, list, list]:
    axes = [sorted(set(int(v) for v in a)) for a in (threads, instances, batches)]
    if any(not a or a[0] < 1 for a in axes):
        raise ValueError("every axis needs at least one value, all >= 1")
    return axes[0], axes[1], axes[2]


def gradient_search(measure: Callable, threads, instances, batches, *, margin: float = 0.03,
                    power_cap: float | None = None, patience: int = 0,
                    progress: Callable | None = None, make: Callable = Config) -> SearchResult:
    """Hercules's search; measure(Config) -> qps or (qps, power). progress(point) after each
    measurement. make(o, m, d) builds the Config of a point of the three axes (default Config:
    o threads, m instances, d batch); the sparse-dense search passes (dense threads, sparse
    threads, batch), so its climb for each dense count moves the sparse allotment and the batch
    until the two stages balance (Hercules's S-D search on a CPU)."""
    if patience < 0:
        raise ValueError("patience must be >= 0")
    os_, ms, ds = _check_axes(threads, instances, batches)
    meas = _Measurer(measure, power_cap)

    def at(mi: int, di: int, o: int) -> Point:
        p = meas(make(o, ms[mi], ds[di]))
        if progress:
            progress(p)
        return p

    best: Point | None = None
    prev_o_best = -1.0
    worse = 0
    for o in os_:
        mi = di = 0
        cur = at(mi, di, o)
        while True:
            steps = [(mi, di + 1), (mi + 1, di), (mi + 1, di + 1)]
            cands = [(at(a, b, o), a, b) for a, b in steps if a < len(ms) and b < len(ds)]
            cands = [c for c in cands if c[0].qps > 0]
            if not cands:
                break
            nxt, a, b = max(cands, key=lambda c: c[0].qps)
            if nxt.qps <= cur.qps * (1 + margin):
                break
            cur, mi, di = nxt, a, b
        if best is None or cur.qps > best.qps:
            best = cur
        if cur.qps < prev_o_best:
            worse += 1
            if worse > patience:
                break
        else:
            worse = 0
        prev_o_best = cur.qps
    return SearchResult(best if best is not None and best.qps > 0 else None, list(meas.order))


def grid_search(measure: Callable, threads, instances, batches, *, power_cap: float | None = None,
                progress: Callable | None = None, make: Callable = Config) -> SearchResult:
    """Every point measured; the best is the optimum the gradient search is judged against.
    make(o, m, d) as gradient_search's."""
    os_, ms, ds = _check_axes(threads, instances, batches)
    meas = _Measurer(measure, power_cap)
    for o in os_:
        for m in ms:
            for d in ds:
                p = meas(make(o, m, d))
                if progress:
                    progress(p)
    best = max(meas.order, key=lambda p: p.qps)
    return SearchResult(best if best.qps > 0 else None, list(meas.order))


def batch_only_search(measure: Callable, batches, *, threads: int = 1, instances: int = 1,
                      margin: float = 0.03, make: Callable = Config) -> SearchResult:
    """DeepRecSys's search, the paper's baseline: batch size alone (one instance, one thread),
    climbing while throughput improves by more than margin."""
    return gradient_search(measure, [threads], [instances], batches, margin=margin, make=make)
