"""serve.py: a GNN model (GraphSAGE or GAT over a graph of the store) served as one splitrpc function with two sampling lanes, each batch routed to one by its summed PSGS (Quiver's hybrid sampling) (after Quiver, Tan et al., arXiv 2023).

The request is a list of seed node ids (little-endian int64, 1 .. MAX_SEEDS of them), the reply
their logits (float32, seeds x classes, in request order). The function is raw (requests of any
length) and costs each call the sum of its seeds' PSGS, computed by the native engine from the
PSGS table (``CostTable(keys=None)``); a seed id outside the graph fails that call alone with
BAD_REQUEST before any Python runs. When a batch is formed its calls' costs are summed: below the
threshold it goes to the CPU lane (the per-seed sampler in C), else to the other lane (the GPU
sampler; without a GPU the bulk PyTorch sampler on the CPU, a stand-in for it, or the EMULATED
lane of emulated_lane.py, which answers from the CPU code and takes a cost model's time while
occupying no core; each labelled so).
Feature gathering and the model run after sampling, on the lane's thread.

A lane takes one batch at a time (its lock). Where the other lane is a GPU the two lanes are
separate hardware and run together: the function's executor is a splitrpc.LanePool with one
thread per lane (Server.stats()["executors"] shows each lane's queue), so two batches overlap, on
different lanes. There each call is routed by its own PSGS (Quiver's per-request rule, the
default): the function has two cost classes (cost_classes, bound = the threshold), the engine
puts each call in its lane's queue when its request is complete, and each lane's batches form
from its own calls; or (route_by="batch") each batch by its summed PSGS as the pool takes it. The bulk stand-in runs on the same CPU cores as the CPU lane, so by
default the lanes take turns (one thread): running both at once would add no processor, only
contention, and a second thread takes the next batch while the first runs, cut early and held
while its lane is busy (measured: bench/results/gnn.md). Static policies ("cpu", "bulk") use
one lane and one thread: the baselines of the benchmark.

Sampling is a function of (salt, node, hop) in both lanes (see sampling.py), so the two lanes
give the same sample and the same logits for a request, and a reply can be checked against a
local run (``GNNService.reference``).
"""
from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from splitrpc.errors import BadRequest
from splitrpc.services.gnn import graph as graph_
from splitrpc.services.gnn.calibrate import Calibration

log = logging.getLogger("splitrpc.gnn")

MAX_SEEDS = 256                 # seed ids per request (the request is at most 2 KiB)
FANOUTS = (25, 10)              # GraphSAGE's [25, 10], as in Quiver's evaluation
FUNC_IDS = {"graphsage": 15, "gat": 16}
HIDDEN = {"graphsage": 128, "gat": 32}   # hidden width (GAT: per head, 4 heads)
SMALL_HIDDEN = {"graphsage": 32, "gat": 8}
POLICIES = ("routed", "cpu", "bulk", "emulated", "gpu")  # the last three: that (other) lane alone
ROUTE_BY = ("auto", "request", "batch")  # routed: each call by its own PSGS, or each batch by its sum
# The routing threshold without a calibration file: the batch PSGS (summed over its calls' seeds)
# from which the other lane is taken. Measured on this project's 2-vCPU VM, reddit-like graph,
# FANOUTS, CPU lane against the bulk stand-in: the "strict" crossing (calibrate.DEFAULT_POINT) of
# bench/results/gnn_calibration.json, 43166, rounded. Calibrations on that VM put it anywhere from
# 22k to 43k; calibrate your own machine with `splitrpc gnn calibrate`.
DEFAULT_THRESHOLD = 43000.0
RTOL = 1e-4                     # replies vs the local reference: same sample, float sums reordered
TRACE_ROWS = 1 << 20            # batches a BatchTrace keeps (about 30 MB)


OTHER_LANES = ("bulk", "emulated", "gpu")  # the non-CPU lane: stand-in, emulated, real


def other_lane(device: str = "cuda", lane: str | None = None) -> str:
    """The name of the non-CPU lane: `lane` when given ("bulk", "emulated" or "gpu"; "gpu" only
    where torch sees CUDA: else ValueError); else "gpu" for a CUDA device where torch sees one,
    and "bulk" (the stand-in) otherwise."""
    import torch

    if lane is not None:
        if lane not in OTHER_LANES:
            raise ValueError(f"the other GNN lane is one of {', '.join(OTHER_LANES)}, got {lane!r}")
        if lane == "gpu" and not torch.cuda.is_available():
            raise ValueError("the GPU lane needs a CUDA device, and torch sees none: use 'emulated' (labelled so) "
                             "or 'bulk'")
        return lane
    return "gpu" if device != "cpu" and torch.cuda.is_available() else "bulk"


def lane_options(lane: str, lane_model: str | None = None) -> dict:
    """GNNService's device, lane and lane_model for a --lane option ("auto": the GPU where torch
    sees one, else bulk; or "bulk", "emulated", "gpu") and a --lane-model file (the emulated lane's
    model fitted to it). ValueError for a --lane-model without --lane emulated, or a file that
    does not fit."""
    if lane_model and lane != "emulated":
        raise ValueError("--lane-model is the emulated lane's: give --lane emulated")
    from splitrpc.services.gnn.emulated_lane import LaneModel

    return {"device": "cuda" if lane in ("auto", "gpu") else "cpu", "lane": None if lane == "auto" else lane,
            "lane_model": LaneModel.load(lane_model)}


@dataclass
class LaneStats:
    batches: int = 0
    calls: int = 0
    seeds: int = 0
    psgs: float = 0.0
    busy_s: float = 0.0


@dataclass
class Lane:
    """One sampling lane: one batch at a time (lock), its counters."""

    name: str
    label: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    stats: LaneStats = field(default_factory=LaneStats)


class BatchTrace:
    """Every served batch's (end time, lane, summed PSGS, calls, service time), for checking the
    calibrated bounds and the lane mix afterwards (`splitrpc serve --gnn-trace`). Fixed capacity:
    rows past it are counted in `dropped`, not kept. One lock; any thread may add."""

    def __init__(self, lanes, capacity: int = TRACE_ROWS):
        self.lanes = list(lanes)
        self.t_end = np.zeros(capacity, np.float64)     # time.monotonic() when the batch ended
        self.lane = np.zeros(capacity, np.uint8)        # index into self.lanes
        self.psgs = np.zeros(capacity, np.float64)
        self.calls = np.zeros(capacity, np.uint32)
        self.service_s = np.zeros(capacity, np.float64)  # on the lane, lock held: no queueing
        self.n = self.dropped = 0
        self._lock = threading.Lock()

    def add(self, lane: str, psgs: float, calls: int, service_s: float, t_end: float) -> None:
        with self._lock:
            i = self.n
            if i >= self.t_end.size:
                self.dropped += 1
                return
            self.t_end[i], self.lane[i], self.psgs[i] = t_end, self.lanes.index(lane), psgs
            self.calls[i], self.service_s[i] = calls, service_s
            self.n = i + 1

    def save(self, path: str) -> None:
        """Writes the rows so far as an .npz (arrays of those names, plus lanes and dropped)."""
        with self._lock, open(path, "wb") as f:  # a file object: savez adds no ".npz" to the name
            n = self.n
            np.savez(f, t_end=self.t_end[:n], lane=self.lane[:n], psgs=self.psgs[:n], calls=self.calls[:n],
                     service_s=self.service_s[:n], lanes=np.array(self.lanes), dropped=np.int64(self.dropped))


def load_trace(path: str) -> dict:
    """A BatchTrace file as a dict of arrays ("lanes": the lane names, "lane": indices into it)."""
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


class GNNService:
    """A GNN model over a synthetic graph, ready to serve: the graph, its node features, the PSGS
    table (the admission cost), the model with weights from `seed`, and the lanes.

    model: "graphsage" or "gat"; small: the "small" graph and narrow layers (tests, CI) instead
    of "reddit-like"; salt: the sampling salt (the same salt gives the same samples). lane: the
    non-CPU lane (other_lane()); "emulated" takes lane_model (emulated_lane.LaneModel, default
    its assumed numbers)."""

    def __init__(self, model: str = "graphsage", *, small: bool = False, fanouts=FANOUTS, seed: int = 0,
                 salt: int = 0, device: str = "cpu", lane: str | None = None, lane_model=None):
        import torch

        from splitrpc.services.gnn import metrics, sage_gat, sampling

        if model not in FUNC_IDS:
            raise ValueError(f"unknown GNN model {model!r}; known: {', '.join(FUNC_IDS)}")
        self.model_name, self.small, self.seed, self.salt = model, bool(small), int(seed), int(salt)
        self.fanouts = tuple(int(f) for f in fanouts)
        preset = "small" if small else "reddit-like"
        p = graph_.PRESETS[preset]
        self.graph = graph_.synthetic(preset, seed=seed)
        self.classes = p["classes"]
        self.features = torch.from_numpy(graph_.node_features(self.graph.num_nodes, p["dim"], seed=seed))
        self.psgs = metrics.psgs(self.graph, self.fanouts)
        self.cost_table = cost_table(self.psgs)
        hidden = (SMALL_HIDDEN if small else HIDDEN)[model]
        self.module = sage_gat.build(model, p["dim"], self.classes, hidden=hidden, hops=len(self.fanouts), seed=seed)
        self.device = device
        other = other_lane(device, lane)
        self.lanes = {"cpu": Lane("cpu", sampling.LANE_LABELS["cpu"]),
                      other: Lane(other, sampling.LANE_LABELS[other])}
        self.other = other
        # The GPU lane runs sampling, feature gathering and the model on the device: its own copies
        # of the model and of the features there (Quiver's GPU lane; never run: no GPU here).
        self._on_lane = {}
        if other == "gpu":
            import copy

            self._on_lane["gpu"] = (copy.deepcopy(self.module).to("cuda"), self.features.to("cuda"))
        self.emulated = None
        if other == "emulated":
            from splitrpc.services.gnn.emulated_lane import EmulatedLane

            self.emulated = EmulatedLane(lambda seeds: self._run(seeds, "cpu"), lane_model)
        elif lane_model is not None:
            raise ValueError("lane_model is the emulated lane's: give lane='emulated' with it")
        self.trace: BatchTrace | None = None  # set to record every batch (serve --gnn-trace)
        self.router: Router | None = None     # how batches are routed (register_gnn sets it)
        self.concurrent_lanes = False         # a batch on each lane at once (register_gnn sets it)
        self.route_by = "batch"               # routed: each "request" or each "batch" (register_gnn sets it)
        self.spill = None                     # per request: CPU-lane calls from which small ones spill over
        self._sampling, self._models = sampling, sage_gat

    # ------------------------------------------------------------------ one batch

    def sample(self, seeds: np.ndarray, lane: str):
        """The Sample of `seeds` on lane "cpu" or the other lane (no lock; the emulated lane
        samples as the CPU lane does)."""
        if lane in ("cpu", "emulated"):
            return self._sampling.cpu_sample(self.graph, seeds, self.fanouts, self.salt)
        return self._sampling.bulk_sample(self.graph, seeds, self.fanouts, self.salt,
                                          device="cuda" if lane == "gpu" else "cpu")

    def infer(self, seeds, lane: str = "cpu", *, calls: int = 0, psgs: float = 0.0) -> np.ndarray:
        """Logits (len(seeds), classes) float32 of `seeds` (int64 node ids) sampled on `lane`,
        holding that lane for the whole batch and counting it (calls and psgs: the batch's, for
        the counters and the trace)."""
        seeds = np.ascontiguousarray(seeds, dtype=np.int64)
        ln = self.lanes[lane]
        with ln.lock:
            t0 = time.perf_counter()
            out = self._run(seeds, lane)
            dt = time.perf_counter() - t0
            st = ln.stats
            st.busy_s += dt
            st.batches += 1
            st.seeds += len(seeds)
            st.calls += calls
            st.psgs += psgs
        if self.trace is not None:
            self.trace.add(lane, psgs, calls, dt, time.monotonic())
        return out

    def _run(self, seeds: np.ndarray, lane: str) -> np.ndarray:
        import torch

        if lane == "emulated":
            return self.emulated.run(seeds, float(self.psgs[seeds].sum()))
        s = self.sample(seeds, lane)
        module, features = self._on_lane.get(lane, (self.module, self.features))
        with torch.inference_mode():
            logits = self._models.forward(module, s, features)
        return logits.detach().to("cpu").numpy()

    def reference(self, seeds) -> np.ndarray:
        """The logits a server with this setup answers for `seeds` (CPU lane, no counting)."""
        return self._run(np.ascontiguousarray(seeds, dtype=np.int64), "cpu")

    def check_reply(self, request: bytes, reply: bytes) -> bool:
        """Whether `reply` holds the logits this model gives the request's seeds (RTOL)."""
        seeds = np.frombuffer(request, "<i8")
        want = self.reference(seeds)
        if len(reply) != want.nbytes:
            return False
        got = np.frombuffer(reply, "<f4").reshape(want.shape)
        return bool(np.all(np.isfinite(got)) and np.allclose(got, want, rtol=RTOL,
                                                              atol=RTOL * max(1.0, float(np.abs(want).max()))))

    # ------------------------------------------------------------------ requests

    def example(self, rng: np.random.Generator, n: int = 8, by_degree: bool = True) -> bytes:
        """A request of n seed ids, drawn in proportion to out-degree (by_degree) or uniformly."""
        return draw_seeds(self.graph, rng, n, by_degree).astype("<i8").tobytes()

    def stats(self) -> dict:
        """Per lane its counters and label (the emulated lane's also its model and misses, under
        "emulation")."""
        out = {name: dict(vars(ln.stats), label=ln.label) for name, ln in self.lanes.items()}
        if self.emulated is not None:
            out["emulated"]["emulation"] = self.emulated.stats()
        return out


def cost_table(psgs) -> np.ndarray:
    """The admission cost of each seed: its PSGS rounded up (the engine sums integers per call),
    as uint32. ValueError for a table with NaN, infinite, negative or too large values, saying
    which node: a cost table is checked before it is registered."""
    p = np.asarray(psgs, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"a PSGS table is a non-empty 1-D array, got shape {p.shape}")
    bad = np.flatnonzero(~np.isfinite(p) | (p < 0) | (p > 2**32 - 1))
    if bad.size:
        raise ValueError(f"PSGS of node {int(bad[0])} is {p[bad[0]]}: a cost must be a finite number from 0 to 2**32 - 1")
    return np.maximum(np.ceil(p), 1).astype(np.uint32)


def draw_seeds(graph: graph_.Graph, rng: np.random.Generator, n: int, by_degree: bool = True) -> np.ndarray:
    """n seed ids (int64), with probability proportional to out-degree (by_degree) or uniform."""
    if by_degree and graph.num_edges:
        p = graph.degree / graph.num_edges
        return rng.choice(graph.num_nodes, size=n, p=p).astype(np.int64)
    return rng.integers(0, graph.num_nodes, n, dtype=np.int64)


class Router:
    """Which lane a batch of summed PSGS `cost` takes: policy "routed" (below threshold: "cpu",
    else the other lane), "cpu", or the other lane's name (static: that lane alone)."""

    def __init__(self, service: GNNService, policy: str = "routed", threshold: float | None = None):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        if policy not in ("routed", "cpu") and policy != service.other:
            raise ValueError(f"policy {policy!r} runs every batch on the {policy} lane, but this service's other "
                             f"lane is {service.other!r}")
        if threshold is not None and (math.isnan(threshold) or threshold < 0):
            raise ValueError(f"threshold must be a PSGS >= 0 (inf: always the CPU lane), got {threshold!r}")
        self.service, self.policy = service, policy
        self.threshold = DEFAULT_THRESHOLD if threshold is None else float(threshold)

    def lane(self, cost: float) -> str:
        if self.policy == "cpu":
            return "cpu"
        if self.policy != "routed":
            return self.service.other
        return "cpu" if cost < self.threshold else self.service.other

    def class_bound(self) -> int:
        """The threshold as the one cost bound of per-request routing (cost_classes=(bound,)): a
        call of PSGS below it is class 0 (the CPU lane), else class 1 (the other lane). Costs are
        integers from 1 to 2**32 - 1, so a threshold of 0 (every call to the other lane) becomes 1
        and one past that range (inf: every call to the CPU lane) the top."""
        return int(min(max(math.ceil(min(self.threshold, 2.0**32)), 1), 2**32 - 1))

    def threads(self, concurrent: bool) -> int:
        """Batches run at once: one per lane when the policy uses both and they may run together
        (concurrent), else one."""
        return 2 if self.policy == "routed" and concurrent else 1


def resolve_route_by(option: str, together: bool) -> str:
    """A route_by option ("auto", "request", "batch") as it applies to a routed function whose
    lanes run together (`together`) or take turns: auto is "request" where they run together
    (each lane its own queue), else "batch" (lanes taking turns have one queue)."""
    if option not in ROUTE_BY:
        raise ValueError(f"route_by must be one of {ROUTE_BY}, got {option!r}")
    return ("request" if together else "batch") if option == "auto" else option


def threshold_from(calibration: str | None, point: str | None, threshold: float | None) -> float | None:
    """The routing threshold: a fixed number wins, else the calibration file's `point` ("strict",
    "loose", "cpu_preferred", "gpu_preferred"; None: the file's default), else None
    (DEFAULT_THRESHOLD)."""
    if threshold is not None:
        return float(threshold)
    if calibration:
        return Calibration.load(calibration).threshold(point)
    return None


def register_gnn(server, model: str = "graphsage", *, small: bool = False, policy: str = "routed",
                 threshold: float | None = None, calibration: str | None = None, point: str | None = None,
                 func_id: int | None = None, max_batch: int = 8, max_delay_us: int = 0, seed: int = 0,
                 salt: int = 0, device: str = "cpu", torch_threads: int | None = 1,
                 trace: bool = False, concurrent_lanes: bool | None = None, lane: str | None = None,
                 lane_model=None, warm: bool = False, route_by: str = "auto", spill: int | None = None) -> GNNService:
    """Builds the model's GNNService and registers it on `server` (before it starts) under
    FUNC_IDS[model] (or func_id); returns the service (its .stats() counts each lane's work).
    threshold (a PSGS) or calibration (a file of `splitrpc gnn calibrate`, its `point`) set the
    routing threshold, else DEFAULT_THRESHOLD. torch_threads sets PyTorch's intra-op threads for
    the process (1: each lane is one core); None leaves it. trace: record every batch in
    ``service.trace`` (a BatchTrace). concurrent_lanes: whether a routed function runs a batch on
    each lane at once (two threads); None: only where the other lane is separate hardware (a GPU,
    or the emulated lane, which occupies no CPU core). lane, lane_model: GNNService's; warm: the
    emulated lane computes every node's answer now (EmulatedLane.warm). route_by (routed policy,
    lanes together): "request" routes each call by its own PSGS (Quiver's rule: the engine puts it
    in the queue of its lane, cost_classes, so each lane's batches form from its own calls),
    "batch" each batch by its calls' summed PSGS as a LanePool takes it; "auto": "request" where
    the lanes run together, else "batch" (lanes taking turns have one queue). spill (per request
    only; None: never, Quiver's rule as it is): while the CPU lane holds this many calls not yet
    answered, a call below the threshold goes to the other lane instead (load-aware routing, an
    addition to Quiver's static threshold: small calls overflow a busy CPU lane)."""
    import torch

    from splitrpc.executor import LanePool, ThreadPool, current_lane
    from splitrpc import CostTable

    if torch_threads is not None:
        torch.set_num_threads(int(torch_threads))
    svc = GNNService(model, small=small, seed=seed, salt=salt, device=device, lane=lane, lane_model=lane_model)
    router = Router(svc, policy, threshold_from(calibration, point, threshold))
    svc.router = router
    if warm:
        if svc.emulated is None:
            raise ValueError("warm is the emulated lane's: give lane='emulated'")
        t0 = time.perf_counter()
        svc.emulated.warm(np.arange(svc.graph.num_nodes, dtype=np.int64))
        log.info("%s: the emulated lane computed %d nodes' answers in %.1f s", model, svc.graph.num_nodes,
                 time.perf_counter() - t0)
    if trace:
        svc.trace = BatchTrace(svc.lanes)
    separate = svc.other in ("gpu", "emulated")
    threads = router.threads(separate if concurrent_lanes is None else bool(concurrent_lanes))
    svc.concurrent_lanes = threads == 2
    svc.route_by = resolve_route_by(route_by, threads == 2)
    if svc.route_by == "request" and threads != 2:
        raise ValueError("route_by='request' routes each call to its lane's queue: it needs the routed policy with "
                         "the lanes together (concurrent_lanes)")
    route_by = svc.route_by
    if spill is not None and (route_by != "request" or isinstance(spill, bool) or not isinstance(spill, int)
                              or spill < 1):
        raise ValueError(f"spill is a number of calls >= 1 for per-request routing, got {spill!r} "
                         f"(routing per {route_by})")
    svc.spill = spill
    classes = svc.classes

    def gnn_batch(reqs, resps, costs):
        lengths: list = [0] * len(reqs)
        seeds, rows = [], []
        for i, q in enumerate(reqs):
            n = len(q) // 8  # the engine let only whole int64 keys, each a node of the graph, through
            if n == 0:
                lengths[i] = BadRequest(f"a {model} request holds 1 to {MAX_SEEDS} int64 seed ids, got none")
                continue
            seeds.append(np.frombuffer(q, "<i8"))
            rows.append((i, n))
        if not seeds:
            return lengths
        cost = float(np.sum(costs, dtype=np.float64))
        lane = current_lane() or router.lane(cost)  # the LanePool routed it by the same rule
        logits = svc.infer(np.concatenate(seeds), lane, calls=len(rows), psgs=cost)
        at = 0
        for i, n in rows:
            out = logits[at:at + n].reshape(-1).view(np.uint8)  # rows of a C-order array: no copy
            resps[i][:out.size] = out
            lengths[i] = out.size
            at += n
        return lengths

    gnn_batch.__name__ = model
    cost_classes = class_spill = None
    if route_by == "request":  # each call to its lane's queue by its own PSGS: class 0 the CPU lane, 1 the other
        executor = LanePool.by_class({"cpu": 1, svc.other: 1}, ["cpu", svc.other], name=f"gnn-{model}")
        cost_classes = (router.class_bound(),)
        class_spill = (spill,) if spill else None
    elif threads == 2:  # a batch on each lane at once: one thread per lane, so no batch waits behind its own lane's
        executor = LanePool({"cpu": 1, svc.other: 1},
                            lambda job: router.lane(float(np.sum(job.call_kwargs["costs"], dtype=np.float64))),
                            name=f"gnn-{model}")
    else:
        executor = ThreadPool(1, name=f"gnn-{model}")
    server.add_function(gnn_batch, func_id if func_id is not None else FUNC_IDS[model], model, raw=True,
                        max_request=8 * MAX_SEEDS, max_response=4 * classes * MAX_SEEDS, max_batch=max_batch,
                        max_delay_us=max_delay_us, executor=executor,
                        cost=CostTable(svc.cost_table, keys=None, key_dtype="int64"), cost_classes=cost_classes,
                        class_spill=class_spill)
    log.info("%s: %d nodes, %d edges, fan-outs %s, policy %s, threshold %.0f (per %s), lanes: %s", model,
             svc.graph.num_nodes, svc.graph.num_edges, list(svc.fanouts), policy, router.threshold, route_by,
             "; ".join(ln.label for ln in svc.lanes.values()))
    return svc
