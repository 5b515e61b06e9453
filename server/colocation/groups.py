"""groups.py: GNNSched's grouping policies (FIFO, SQTF, BQT, and serial as the one-at-a-time baseline) over a queue of requests with PMC estimates, and the online co-location scheduler that runs one group at a time under a memory budget (after GNNSched, Sun et al., 2024).

Inside a group requests run at once; groups run one after another. Unlike the printed algorithms
(and GNNSched's code), which test ``gPMC > gTH`` before adding a request and so can overshoot the
allocatable memory MA by one request, a group here never holds more than MA: a request joins the
current group only if ``gPMC + pmc <= MA``, and a request whose PMC alone exceeds MA is refused
(never queued). SQTF and BQT also close a group once it passes the balance threshold
``gTH = ceil(SP / ceil(SP / MA))`` (SP the queue's summed PMC), as the paper does.

Pure logic: no clocks, no threads. The simulator (sim.py) and the server's scheduler
(colocate.py) drive it.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

POLICIES = ("fifo", "sqtf", "bqt", "serial")  # serial: one request per group, in arrival order (no co-location)


@dataclass(frozen=True)
class Request:
    """One request as the scheduler sees it: its PMC (bytes) and QoS target (seconds); `seq`
    orders arrivals (ties in QoS keep it) and identifies the request."""
    seq: int
    pmc: int
    qos: float
    service: str = ""


class Refused(ValueError):
    """A request that can never run under the budget (or has no valid estimate); says why."""

    def __init__(self, request: Request, why: str):
        super().__init__(why)
        self.request = request


def group_threshold(total_pmc: int, budget: int) -> int:
    """gTH = ceil(SP / ceil(SP / MA)): the queue split into the fewest budget-sized groups, evened out."""
    return math.ceil(total_pmc / math.ceil(total_pmc / budget)) if total_pmc > 0 else budget


def check(request: Request, budget: int) -> None:
    """Raises Refused for a request that can never run: a PMC that is not a positive integer, or one
    over the budget."""
    pmc = request.pmc
    if isinstance(pmc, bool) or not isinstance(pmc, int) or pmc <= 0:
        raise Refused(request, f"the PMC estimate {pmc!r} is not a positive number of bytes")
    if pmc > budget:
        raise Refused(request, f"its PMC estimate {pmc} B exceeds the memory budget {budget} B: it can never run")
    if not (isinstance(request.qos, (int, float)) and math.isfinite(request.qos) and request.qos > 0):
        raise Refused(request, f"the QoS target {request.qos!r} is not a positive number of seconds")


def form_groups(queue: list[Request], budget: int, policy: str) -> list[list[Request]]:
    """The queue (in arrival order) cut into groups by `policy`, every group's summed PMC at most
    `budget`; each request in exactly one group. Every request must pass check()."""
    if policy not in POLICIES:
        raise ValueError(f"unknown grouping policy {policy!r}; known: {', '.join(POLICIES)}")
    if budget <= 0:
        raise ValueError(f"the budget must be positive, got {budget}")
    for r in queue:
        check(r, budget)
    if policy == "serial":
        return [[r] for r in queue]
    if policy == "fifo":
        order, threshold = list(queue), budget
    else:
        ranked = deque(sorted(queue, key=lambda r: (r.qos, r.seq)))
        threshold = group_threshold(sum(r.pmc for r in queue), budget)
        if policy == "sqtf":
            order = list(ranked)
        else:  # bqt: alternately the shortest and the longest QoS target left
            order = [ranked.popleft() if i % 2 == 0 else ranked.pop() for i in range(len(queue))]
    groups: list[list[Request]] = []
    g_pmc = 0
    for r in order:
        if not groups or g_pmc > threshold or g_pmc + r.pmc > budget:
            groups.append([])
            g_pmc = 0
        groups[-1].append(r)
        g_pmc += r.pmc
    return groups


@dataclass
class CoScheduler:
    """The online co-location scheduler: requests are submitted as they arrive; when no group is
    running, next_group() forms groups over everything queued by the policy and starts the first
    (the rest wait and are formed again, with whatever arrived meanwhile, when it ends); done()
    reports each started request's end. The memory of a group is reserved when it starts and
    released when its last request is done. Not thread-safe: one caller (the simulator, or the
    server's scheduler thread under its lock)."""

    budget: int
    policy: str = "bqt"
    queue: list[Request] = field(default_factory=list)
    running: dict[int, Request] = field(default_factory=dict)
    reserved: int = 0          # bytes of the running group
    peak_reserved: int = 0
    groups_started: int = 0

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"unknown grouping policy {self.policy!r}; known: {', '.join(POLICIES)}")
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget <= 0:
            raise ValueError(f"the budget must be a positive number of bytes, got {self.budget!r}")

    def submit(self, request: Request) -> None:
        """Queues request, or raises Refused (the request is then not queued)."""
        check(request, self.budget)
        self.queue.append(request)

    def next_group(self) -> list[Request]:
        """Starts the next group and returns it; [] while a group runs or nothing is queued."""
        if self.running or not self.queue:
            return []
        group = form_groups(self.queue, self.budget, self.policy)[0]
        started = {r.seq for r in group}
        self.queue = [r for r in self.queue if r.seq not in started]
        self.reserved = sum(r.pmc for r in group)
        if self.reserved > self.budget:  # form_groups guarantees this; checked where it is cheap
            raise AssertionError(f"group of {self.reserved} B over the budget {self.budget} B")
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self.running = {r.seq: r for r in group}
        self.groups_started += 1
        return group

    def peek(self) -> list[Request]:
        """The group next_group() would start after the running one if nothing else arrived."""
        return form_groups(self.queue, self.budget, self.policy)[0] if self.queue else []

    def done(self, request: Request) -> bool:
        """Marks a started request finished; True when that ended its group (memory released)."""
        if self.running.pop(request.seq, None) is None:
            raise KeyError(f"request {request.seq} is not running")
        if self.running:
            return False
        self.reserved = 0
        return True
