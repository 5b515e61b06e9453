"""sim.py: a discrete-event simulator of one device (memory, a concurrency slowdown, a copy engine) that serves a request queue with the same CoScheduler as the server, so grouping policies can be compared on any machine (after GNNSched, Sun et al., 2024).

Device model (every parameter is a field of Device; the defaults are ASSUMED, V100-class numbers,
not measured: no GPU has been available to this project):
- A request's standalone time is its operator launches (`op_overhead` each) plus its work: the
  bytes its Propagates move at `gather_bw` and its Matmul/Linear FLOPs at `flops`. Its inputs
  (x and edge_index) cross to the device at `h2d_bw` on one copy engine, in order.
- Alone, a request keeps the device busy only for its work: a fraction u = w / (launches + w) of
  its time (the rest is the host dispatching operators, PyTorch eager's cost per operator, which
  requests on their own threads and streams pay in parallel). Small GNN requests leave most of a
  GPU idle, which is what co-location uses.
- Requests running together progress at 1 / (max(1, sum of u) * (1 + interference * (k - 1))) of
  their standalone speed (k of them): processor sharing past full occupancy, plus contention.
- A set whose summed PMC exceeds the device's memory pages (UVM) and runs `paging_slowdown` times
  slower; such a group is a budget overrun.

Policies: the CoScheduler's (serial, fifo, sqtf, bqt: serial is GNNSched's "Default", one request at
a time, its inputs copied when it starts; the others copy the next group's inputs while the current
one runs, when that fits in the budget, and drop them again if the group formed next is another that
leaves no room for them), "unbounded": everything queued starts at once, with no
budget (GNNSched's MPS-Aggr), and "mps-base": at most MPS_CONCURRENCY (4) queued requests start at
once, in arrival order, with no memory estimate (GNNSched's MPS-Base: its static groups of up to
four; a set over the device's memory pages). QoS target = 2x the standalone time (inputs included).
Times in seconds.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from splitrpc.services.colocation import groups

UNBOUNDED = "unbounded"
MPS_BASE = "mps-base"
MPS_CONCURRENCY = 4  # GNNSched's MPS-Base: at most this many requests at once
UNBUDGETED = (UNBOUNDED, MPS_BASE)  # policies that know no PMC: they start requests without a budget
SIM_POLICIES = (*groups.POLICIES, UNBOUNDED, MPS_BASE)
GiB = 1 << 30


@dataclass(frozen=True)
class Device:
    """What the simulator knows of a device. Defaults: assumed V100-class figures (see the module
    docstring); fit_device() makes one from measured standalone times."""
    name: str = "V100-class, assumed parameters"
    memory: int = 16 * GiB
    flops: float = 8e12            # FLOP/s reached by Matmul/Linear
    gather_bw: float = 4e11        # bytes/s reached by Propagate's gathers and scatters
    op_overhead: float = 20e-6     # s per operator: host dispatch and launch (PyTorch eager)
    h2d_bw: float = 12e9           # bytes/s host to device
    interference: float = 0.05     # slowdown per co-running request
    paging_slowdown: float = 4.0   # a set over memory runs this much slower


def device_with(overrides: list[str], base: Device | None = None) -> Device:
    """base (default Device()) with FIELD=VALUE overrides, e.g. ["op_overhead=1e-4", "memory=8589934592"]."""
    import dataclasses

    base = base or Device()
    names = {f.name: f.type for f in dataclasses.fields(Device)}
    changes = {}
    for o in overrides:
        key, sep, value = o.partition("=")
        if not sep or key not in names or key == "name":
            raise ValueError(f"device override {o!r}: want FIELD=VALUE, FIELD one of "
                             f"{', '.join(n for n in names if n != 'name')}")
        try:
            v = float(value)
        except ValueError:
            raise ValueError(f"device override {o!r}: {value!r} is not a number") from None
        if not (math.isfinite(v) and v > 0) or (key == "interference" and v < 0):
            raise ValueError(f"device override {o!r}: must be a positive finite number")
        changes[key] = int(v) if key == "memory" else v
    if changes:
        changes["name"] = base.name + " with " + ", ".join(f"{k}={v:g}" for k, v in changes.items())
    return dataclasses.replace(base, **changes)


def fit_device(samples: list[dict], base: Device | None = None, name: str = "fitted") -> Device:
    """base (default Device()) with op_overhead, gather_bw and flops fitted (non-negative least
    squares) to measured standalone compute times: each sample {"kind", "dims", "nn", "ne",
    "seconds"} (one forward pass of an op_models model on a request of that shape, its inputs
    already on the device, e.g. the `device-pmc` section of `splitrpc check`), modelled as
    operators x op_overhead + moved bytes / gather_bw + FLOPs / flops (work()). ValueError for
    fewer than 3 samples, or a fit that leaves a term at 0 (its rate would be infinite)."""
    import dataclasses

    from scipy.optimize import nnls

    if len(samples) < 3:
        raise ValueError(f"fitting the device needs at least 3 measured passes, got {len(samples)}")
    rows, t = [], []
    for s in samples:
        ops, moved, flops = work(s["kind"], list(s["dims"]), int(s["nn"]), int(s["ne"]))
        rows.append([ops, moved, flops])
        t.append(float(s["seconds"]))
    a, y = np.array(rows, float), np.array(t, float)
    scale = a.max(axis=0)
    scale[scale == 0] = 1.0
    coef, _ = nnls(a / scale, y)
    coef = coef / scale
    if not np.all(coef > 0):
        zero = [n for n, c in zip(("op_overhead", "gather_bw", "flops"), coef) if not c > 0]
        raise ValueError(f"the measured times do not determine {', '.join(zero)} (their fitted cost is 0): measure "
                         "a wider range of shapes")
    base = base or Device()
    return dataclasses.replace(base, name=name, op_overhead=float(coef[0]), gather_bw=float(1 / coef[1]),
                               flops=float(1 / coef[2]))


@dataclass(frozen=True)
class Job:
    """One request as simulated: its PMC and input bytes, standalone compute seconds and occupancy."""
    seq: int
    arrival: float
    pmc: int
    input_bytes: int
    compute: float     # standalone compute seconds (launches and work)
    occupancy: float   # u, 0 .. 1
    copy: float        # input transfer seconds
    service: str = ""

    @property
    def standalone(self) -> float:
        return self.copy + self.compute

    @property
    def qos(self) -> float:
        return 2.0 * self.standalone


def work(kind: str, dims: list[int], nn: int, ne: int) -> tuple[int, float, float]:
    """(operators, bytes moved by Propagate, FLOPs of Matmul/Linear) of one forward pass of a
    op_models.py model: per layer Fin -> Fout, Propagate reads and writes NE x Fin messages and writes
    NN x Fin (float32), GCN one NN x Fin x Fout product, SAGE two, GIN one Fin x Fout and one Fout x Fout."""
    ops, moved, flops = 0, 0.0, 0.0
    for fin, fout in zip(dims, dims[1:]):
        moved += 4.0 * (3 * ne * fin + nn * fin)
        if kind == "gcn":
            ops, flops = ops + 6, flops + 2.0 * nn * fin * fout
        elif kind == "sage":
            ops, flops = ops + 7, flops + 4.0 * nn * fin * fout
        elif kind == "gin":
            ops, flops = ops + 8, flops + 2.0 * nn * fin * fout + 2.0 * nn * fout * fout
        else:
            raise ValueError(f"unknown model {kind!r}")
    return ops, moved, flops


def job(device: Device, seq: int, arrival: float, kind: str, dims: list[int], nn: int, ne: int, pmc: int,
        service: str = "") -> Job:
    """The Job of one request on device."""
    ops, moved, flops = work(kind, dims, nn, ne)
    w = moved / device.gather_bw + flops / device.flops
    input_bytes = 4 * nn * dims[0] + 16 * ne
    launches = ops * device.op_overhead
    return Job(seq, arrival, int(pmc), input_bytes, launches + w, w / (launches + w),
               input_bytes / device.h2d_bw, service or kind)


@dataclass
class Result:
    """A simulated run: per request (in seq order) start and end of compute and whether it was
    refused; the groups' summed PMCs; the most memory reserved at once (groups and staged inputs);
    the scheduler's own wall time on this CPU."""
    policy: str
    budget: int
    jobs: list[Job]
    start: np.ndarray
    end: np.ndarray
    refused: np.ndarray
    group_pmc: list[int] = field(default_factory=list)
    peak_memory: int = 0
    scheduler_seconds: float = 0.0

    @property
    def ran(self) -> np.ndarray:
        return ~self.refused

    def latency(self) -> np.ndarray:
        return (self.end - np.array([j.arrival for j in self.jobs]))[self.ran]

    def summary(self, short_quantile: float = 0.5) -> dict:
        """Violations (share of requests past their QoS target; refused ones count as violations; and
        of the requests that ran late, the share that arrived while others were running),
        mean job completion time (arrival to end), mean queueing time (arrival to start of compute)
        overall and of the short requests (QoS target at most the queue's median), overruns
        (groups over the budget), the peak memory and the makespan."""
        arr = np.array([j.arrival for j in self.jobs])
        qos = np.array([j.qos for j in self.jobs])
        lat = self.end - arr
        viol = np.where(self.ran, lat > qos, True)
        queued = (self.start - arr)[self.ran]
        short = (qos <= np.quantile(qos, short_quantile)) & self.ran
        busy = float(np.nanmax(self.end)) if self.ran.any() else 0.0
        # arrived while other requests ran: no policy that runs groups one after another can start it sooner
        st, en = self.start[self.ran], self.end[self.ran]
        arrived_busy = np.array([bool(np.any((st < a) & (a < en))) for a in arr])  # started before it came
        late = viol & self.ran
        return {
            "policy": self.policy, "requests": len(self.jobs), "refused": int(self.refused.sum()),
            "violations": float(viol.mean()),
            "violations_arrived_busy": float((late & arrived_busy).sum() / late.sum()) if late.any() else 0.0,
            "jct_mean": float(lat[self.ran].mean()) if self.ran.any() else math.nan,
            "jct_over_qos_mean": float((lat / qos)[self.ran].mean()) if self.ran.any() else math.nan,
            "queueing_mean": float(queued.mean()) if queued.size else math.nan,
            "queueing_short_mean": float((self.start - arr)[short].mean()) if short.any() else math.nan,
            "p99_over_qos": float(np.quantile((lat / qos)[self.ran], 0.99)) if self.ran.any() else math.nan,
            "groups": len(self.group_pmc), "mean_group_size": len(self.jobs) / max(len(self.group_pmc), 1),
            "overruns": int(sum(g > self.budget for g in self.group_pmc)),
            "peak_memory": int(self.peak_memory), "budget": int(self.budget), "makespan": busy,
            "scheduler_share": self.scheduler_seconds / busy if busy > 0 else 0.0,
        }


def _rate(device: Device, running: list[Job], over_memory: bool) -> float:
    k = len(running)
    s = max(1.0, sum(j.occupancy for j in running)) * (1.0 + device.interference * (k - 1))
    return 1.0 / (s * (device.paging_slowdown if over_memory else 1.0))


def simulate(jobs: list[Job], policy: str, device: Device, budget: int | None = None) -> Result:
    """Serves jobs (sorted by arrival) on device under `policy` (one of SIM_POLICIES) with memory
    budget `budget` (default: the device's memory) and returns what happened."""
    if policy not in SIM_POLICIES:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(SIM_POLICIES)}")
    budget = device.memory if budget is None else int(budget)
    if budget > device.memory:
        raise ValueError(f"the budget {budget} B exceeds the device's memory {device.memory} B")
    jobs = sorted(jobs, key=lambda j: (j.arrival, j.seq))
    by_seq = {j.seq: j for j in jobs}
    n = len(jobs)
    index = {j.seq: i for i, j in enumerate(jobs)}
    start, end = np.full(n, np.nan), np.full(n, np.nan)
    refused = np.zeros(n, dtype=bool)
    res = Result(policy, budget, jobs, start, end, refused)
    sched = groups.CoScheduler(budget, "fifo" if policy in UNBUDGETED else policy)
    prefetch = policy in ("fifo", "sqtf", "bqt")
    waiting: list[Job] = []           # the queue of the unbudgeted policies
    staged: dict[int, float] = {}     # seq -> when its inputs are on the device
    staged_bytes = 0
    copy_free = 0.0                   # when the copy engine is next idle
    t, nxt = 0.0, 0
    remaining: dict[int, float] = {}  # running seq -> standalone compute seconds left
    over = False

    def admit(now: float) -> None:
        nonlocal nxt
        while nxt < n and jobs[nxt].arrival <= now:
            j = jobs[nxt]
            nxt += 1
            if policy in UNBUDGETED:
                waiting.append(j)
                continue
            try:
                sched.submit(groups.Request(j.seq, j.pmc, j.qos, j.service))
            except groups.Refused:
                refused[index[j.seq]] = True

    while True:
        admit(t)
        if not remaining:
            t0 = time.perf_counter()
            if policy == UNBOUNDED:
                group, waiting[:] = list(waiting), []
            elif policy == MPS_BASE:
                group, waiting[:] = waiting[:MPS_CONCURRENCY], waiting[MPS_CONCURRENCY:]
            else:
                group = [by_seq[r.seq] for r in sched.next_group()]
            res.scheduler_seconds += time.perf_counter() - t0
            if not group:
                if nxt >= n:
                    break
                t = max(t, jobs[nxt].arrival)
                continue
            gp = sum(j.pmc for j in group)
            res.group_pmc.append(gp)
            over = gp > device.memory
            ready = max([t] + [staged[j.seq] for j in group if j.seq in staged])
            copies = sum(j.copy for j in group if j.seq not in staged)
            if copies:
                copy_free = max(copy_free, t) + copies
                ready = max(ready, copy_free)
            staged_bytes -= sum(j.input_bytes for j in group if j.seq in staged)
            for j in group:
                staged.pop(j.seq, None)
                start[index[j.seq]] = ready
                remaining[j.seq] = j.compute
            if gp + staged_bytes > budget:  # staged for a group that was formed otherwise: evict
                staged.clear()
                staged_bytes = 0
            res.peak_memory = max(res.peak_memory, gp + staged_bytes)
            if prefetch:
                t0 = time.perf_counter()
                upcoming = [by_seq[r.seq] for r in sched.peek() if r.seq not in staged]
                res.scheduler_seconds += time.perf_counter() - t0
                extra = sum(j.input_bytes for j in upcoming)
                if upcoming and gp + staged_bytes + extra <= budget:
                    for j in upcoming:
                        copy_free = max(copy_free, t) + j.copy
                        staged[j.seq] = copy_free
                    staged_bytes += extra
                    res.peak_memory = max(res.peak_memory, gp + staged_bytes)
            t = ready
            continue
        running = [by_seq[s] for s in remaining]
        rate = _rate(device, running, over)
        finish = min(remaining.values()) / rate
        if nxt < n and jobs[nxt].arrival < t + finish:
            dt = jobs[nxt].arrival - t
            t = jobs[nxt].arrival
        else:
            dt = finish
            t += finish
        for s in list(remaining):
            remaining[s] -= dt * rate
            if remaining[s] <= 1e-12:
                del remaining[s]
                end[index[s]] = t
                if policy not in UNBUDGETED:
                    sched.done(groups.Request(s, by_seq[s].pmc, by_seq[s].qos))
    return res
