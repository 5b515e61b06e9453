"""orchestration.py: `splitrpc bench orchestration`: O1, O1+CUDA graphs and O2 for vecadd, matmul and LeNet, end to end and compute alone (SplitRPC Figs. 3, 12)."""
from __future__ import annotations

import argparse
import gc
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from types import SimpleNamespace

import numpy as np

import splitrpc
from splitrpc import gpu
from splitrpc.function_config import FUNCTION_DEFAULTS
from splitrpc.loadgen.reporting import add_subcommand, command_of, run_as_module, run_suite
from splitrpc.loadgen import report
from splitrpc.latency_histogram import percentiles
from splitrpc.loadgen.load_cli import comma_list
from splitrpc.load_run import OK, run_load
from splitrpc.services import SERVICES as BUILTIN
from splitrpc.services import builtin
from splitrpc.services.models import MODELS, split
from splitrpc.spec import TensorSpec

SERVICES = ("vecadd", "matmul", "lenet")
MODES = ("o1", "graph", "o2")
MODE_LABEL = {"o1": "O1", "graph": "O1+CG", "o2": "O2"}
MAX_BATCH = FUNCTION_DEFAULTS["max_batch"]  # the library's default batching limit
LATENCY_CONC, THROUGHPUT_CONC = 1, 32
VALIDATE_CALLS = 16      # distinct requests checked one by one (batch 1), then all at once (batched)
MATMUL_RTOL = 1e-3       # a GPU GEMM sums in another order (and may use TF32)
CALL_TIMEOUT_S = 2.0
FIRST_CALL_TIMEOUT_S = 60.0  # the first call of a cell may capture a graph or initialise cuBLAS/cuDNN
O2_NA = ("n/a: O2 has a persistent kernel for vecadd only; a model of many kernels would need dynamic "
         "parallelism, which the paper shows is 8-9x slower")


class Unavailable(Exception):
    """A cell that cannot be measured on this machine (no GPU, no CuPy, no torch); the text says why."""


@dataclass(frozen=True)
class Service:
    """One benchmarked service: its function id, tensors and the persistent kernel it has (if any)."""
    name: str
    func_id: int
    inputs: tuple
    outputs: tuple
    o2_kernel: str | None = None
    capacity: int = FUNCTION_DEFAULTS["capacity"]  # Tensor Queue elements

    @property
    def reply_size(self) -> int:
        return sum(s.nbytes for s in self.outputs)

    def exact(self, device: str) -> bool:
        """Whether a reply must equal the expected bytes (else: within a tolerance)."""
        return self.name == "vecadd" or (self.name == "matmul" and device == "cpu")


_F32 = "float32"
_SERVICES = {
    "vecadd": Service("vecadd", 1, (TensorSpec("x", _F32, (256,)),), (TensorSpec("y", _F32, (256,)),), "vecadd"),
    "matmul": Service("matmul", 2, (TensorSpec("a", _F32, (32, 32)), TensorSpec("b", _F32, (32, 32))),
                      (TensorSpec("c", _F32, (32, 32)),)),
    "lenet": Service("lenet", MODELS["lenet"].func_id, MODELS["lenet"].inputs, MODELS["lenet"].outputs,
                     capacity=MODELS["lenet"].capacity),
}


def service(name: str) -> Service:
    return _SERVICES[name]


def request(name: str, seed: int) -> bytes:
    """A valid request of the service, fixed by `seed`."""
    rng = np.random.default_rng(seed)
    return MODELS["lenet"].example(rng) if name == "lenet" else BUILTIN[name].example(rng)


# ------------------------------------------------------------------ reply checks


def check_reply(name: str, req: bytes, reply: bytes, *, exact: bool, small: bool = False) -> bool:
    """Whether `reply` answers `req`: vecadd/matmul equal to the expected bytes when `exact`,
    matmul within MATMUL_RTOL otherwise; LeNet close to the CPU reference (models.check_reply)."""
    if name == "lenet":
        from splitrpc.services.models import check_reply as model_check

        return model_check("lenet", req, reply, small=small)
    want = BUILTIN[name].expected(req)
    if len(reply) != len(want):
        return False
    if exact:
        return bytes(reply) == want
    got, ref = np.frombuffer(reply, "<f4"), np.frombuffer(want, "<f4")
    scale = max(1.0, float(np.abs(ref).max()))
    return bool(np.all(np.isfinite(got)) and np.allclose(got, ref, rtol=MATMUL_RTOL, atol=MATMUL_RTOL * scale))


# ------------------------------------------------------------------ callbacks


def _cupy():
    try:
        return gpu.import_cupy()
    except ImportError as e:
        raise Unavailable(str(e)) from None


def _gpu_callback(name: str):
    """The CuPy callback of vecadd or matmul: launches on the current stream, no synchronize."""
    cp = _cupy()
    if name == "vecadd":
        one = np.float32(1.0)

        def vecadd(x, y):
            cp.add(x, one, out=y)

        vecadd.o2_kernel = "vecadd"  # orchestration="o2" runs the library's persistent kernel instead
        return vecadd

    def matmul(a, b, c):
        cp.matmul(a, b, out=c)

    return matmul


def _lenet_callback(device: str, small: bool):
    try:
        import torch
    except ImportError as e:
        raise Unavailable(f"LeNet needs PyTorch: pip install 'splitrpc[models]' ({e})") from None
    if device != "cpu" and not torch.cuda.is_available():
        raise Unavailable(f"torch {torch.__version__} sees no CUDA device (a CPU build?), LeNet cannot run on {device}")
    if device != "cpu":
        _cupy()  # the server hands a GPU function CuPy arrays
    return MODELS["lenet"].build(device, small=small)


def make_callback(name: str, device: str, small: bool):
    """The service's serving callback for `device`: numpy on "cpu", CuPy (or torch on CuPy
    arrays) on "cuda:N". Raises Unavailable when a package it needs is missing."""
    if name == "lenet":
        return _lenet_callback(device, small)
    if device == "cpu":
        return builtin.vecadd if name == "vecadd" else builtin.matmul
    return _gpu_callback(name)


def o2_status(name: str) -> str | None:
    """None when the service can use O2 (the library's own rule, gpu.check_o2), else the n/a text."""
    svc = service(name)
    try:
        gpu.check_o2(SimpleNamespace(o2_kernel=svc.o2_kernel), list(svc.inputs), list(svc.outputs), False)
    except ValueError:
        return O2_NA
    return None


# ------------------------------------------------------------------ GPU and plan


def gpu_state(device: str) -> dict:
    """Whether `device` is a usable GPU: {"device", "usable", "reason", "name"}."""
    ordinal = gpu.parse_device(device)
    if ordinal < 0:
        return {"device": device, "usable": False, "reason": "--device is cpu", "name": None}
    try:
        gpu.probe(ordinal)
    except gpu.GPUUnavailable as e:
        return {"device": device, "usable": False, "reason": str(e), "name": None}
    try:
        name = gpu.device_name(ordinal)
    except gpu.GPUUnavailable:
        name = None
    return {"device": f"cuda:{ordinal}", "usable": True, "reason": "", "name": name}


def plan(services: list[str], modes: list[str], state: dict) -> list[dict]:
    """The cells of the table: {"service", "mode", "device", "status"} where status is None for
    a cell to measure, or why it cannot exist ("n/a: ...") or cannot run here ("unavailable: ...")."""
    cells = []
    dev = state["device"]
    for name in services:
        if dev != "cpu" and not state["usable"]:  # the host-only baseline, so there is something to compare
            cells.append({"service": name, "mode": "o1", "device": "cpu", "status": None})
        for mode in modes:
            status = o2_status(name) if mode == "o2" else None
            if status is None and dev == "cpu" and mode != "o1":
                status = f"n/a: {MODE_LABEL[mode]} needs a GPU (--device cpu)"
            if status is None and dev != "cpu" and not state["usable"]:
                status = f"unavailable: {state['reason']}"
            cells.append({"service": name, "mode": mode, "device": dev, "status": status})
    return cells


# ------------------------------------------------------------------ compute alone


def _batch1(name: str, req: bytes) -> list[np.ndarray]:
    """The request's input arrays with a batch dimension of 1 (what the callback gets at batch 1)."""
    return [np.ascontiguousarray(a)[None] for a in split(service(name).inputs, req)]


def _percentiles(lat_ns: np.ndarray) -> tuple[float | None, float | None]:
    pct = percentiles(lat_ns[lat_ns > 0].astype(np.int64), (50, 99))
    if pct[50] is None:
        return None, None
    return pct[50] / 1e3, pct[99] / 1e3


def _timed(once, calls: int) -> np.ndarray:
    for _ in range(max(calls // 10, 3)):
        once()
    lat = np.zeros(calls, np.int64)
    for i in range(calls):
        t0 = time.perf_counter_ns()
        once()
        lat[i] = max(time.perf_counter_ns() - t0, 1)
    return lat


def measure_compute(name: str, device: str, cb, calls: int, small: bool) -> dict:
    """The callback alone at batch 1 on ready arrays (on a GPU: device arrays, one stream, and
    each call waits for the stream); p50/p99 µs and whether its output is right."""
    req = request(name, 0)
    svc = service(name)
    ins = _batch1(name, req)
    if device == "cpu":
        outs = [np.empty((1, *s.shape), s.np_dtype) for s in svc.outputs]
        lat = _timed(lambda: cb(*ins, *outs), calls)
        got = b"".join(o.tobytes() for o in outs)
    else:
        cp = gpu.import_cupy()
        with cp.cuda.Device(gpu.parse_device(device)):
            stream = cp.cuda.Stream(non_blocking=True)
            with stream:
                dins = [cp.asarray(a) for a in ins]
                douts = [cp.empty((1, *s.shape), s.np_dtype) for s in svc.outputs]
                stream.synchronize()

                def once():
                    cb(*dins, *douts)
                    stream.synchronize()

                lat = _timed(once, calls)
                got = b"".join(cp.asnumpy(o).tobytes() for o in douts)
    p50, p99 = _percentiles(lat)
    return {"service": name, "device": device, "p50_us": p50, "p99_us": p99,
            "valid": check_reply(name, req, got, exact=svc.exact(device), small=small)}


# ------------------------------------------------------------------ end to end


def _closed(c, svc: Service, req: bytes, exact: bool, conc: int, calls: int) -> dict:
    """One closed-loop run of the native load generator after a warm-up; replies are compared
    with the expected bytes in native code when exact, else only their length is checked here."""
    expect = BUILTIN[svc.name].expected(req) if exact else None
    kw = dict(expect=expect, concurrency=conc, timeout_s=CALL_TIMEOUT_S)
    run_load(c, svc.func_id, req, n=max(calls // 10, 10), **kw)
    recs = run_load(c, svc.func_id, req, n=calls, **kw)
    s = report.summarize(recs)
    ok = recs.rec[recs.rec["code"] == OK]
    wrong_len = int(np.count_nonzero(ok["reply_len"] != svc.reply_size))
    p50, p99 = _percentiles(recs.latency_ns())
    return {"concurrency": conc, "calls": calls, "ok": s["ok"] - wrong_len, "p50_us": p50, "p99_us": p99,
            "throughput_rps": (s["ok"] - wrong_len) / s["duration_s"] if s["duration_s"] > 0 else None,
            "errors": s["errors"] - s["invalid"], "errors_by_code": s["errors_by_code"],
            "invalid": s["invalid"] + wrong_len}


def validate(c, name: str, device: str, small: bool, n: int = VALIDATE_CALLS) -> dict:
    """n distinct requests one at a time (batch 1), then all n at once (batched by the server);
    every reply checked with check_reply. {"checked", "wrong", "first_wrong"}."""
    svc = service(name)
    exact = svc.exact(device)
    reqs = [request(name, seed) for seed in range(1, n + 1)]
    wrong, first = 0, None

    def judge(req: bytes, get, how: str) -> None:
        nonlocal wrong, first
        try:
            ok = check_reply(name, req, get(), exact=exact, small=small)
            why = "wrong reply"
        except Exception as e:  # noqa: BLE001 - a failed call is a failed check
            ok, why = False, f"{type(e).__name__}: {e}"
        if not ok:
            wrong += 1
            first = first or f"{how}: {why}"

    for r in reqs:
        judge(r, lambda r=r: c.call(svc.func_id, r, timeout=CALL_TIMEOUT_S), "batch 1")
    futs = [(r, c.call_async(svc.func_id, r, timeout=CALL_TIMEOUT_S)) for r in reqs]
    for r, f in futs:
        judge(r, lambda f=f: f.result(), "batched")
    return {"checked": 2 * n, "wrong": wrong, "first_wrong": first}


def _batch_calls(st: dict) -> float:
    return st["mean_batch"] * st["batches"]


def _status(v: dict, c1: dict, c32: dict) -> str:
    if v["wrong"] or c1["invalid"] or c32["invalid"]:
        return (f"failed: wrong replies (validation {v['wrong']}/{v['checked']}"
                f"{', ' + v['first_wrong'] if v['first_wrong'] else ''}; load runs {c1['invalid'] + c32['invalid']})")
    if not c1["ok"] or not c32["ok"]:
        return "failed: no call succeeded"
    errs = c1["errors"] + c32["errors"]
    if errs:
        codes = {**c1["errors_by_code"], **c32["errors_by_code"]}
        return f"ok ({errs} calls failed: {codes})"
    return "ok"


def measure_e2e(name: str, mode: str, device: str, cb, calls: int, small: bool, max_batch: int = MAX_BATCH) -> dict:
    """One cell through a real server (in-process, busy-polling, on loopback): validation,
    c=1 latency, c=32 throughput and its mean batch. The server is closed whatever happens."""
    svc = service(name)
    out = {"service": name, "mode": mode, "device": device}
    srv = None
    try:
        srv = splitrpc.Server("127.0.0.1", 0, wait="poll")
        srv.add_function(cb, svc.func_id, name, list(svc.inputs), list(svc.outputs), max_batch=max_batch,
                         capacity=svc.capacity, device=device, orchestration=mode)
        srv.start()
        where = srv.stats()["devices"][name]
        if where != device:
            return {**out, "status": f"failed: the server runs it on {where}, not {device}"}
        req = request(name, 0)
        with splitrpc.Client("127.0.0.1", srv.port, timeout=CALL_TIMEOUT_S, busy_poll=True) as c:
            c.call(svc.func_id, req, timeout=FIRST_CALL_TIMEOUT_S)
            not_captured = srv.stats()["graph_fallback"].get(name)
            if not_captured:  # the server runs it as O1: measuring that here would be the O1 row mislabelled
                return {**out, "status": f"n/a: its callback cannot be captured into a CUDA graph ({not_captured}); "
                                         "the server runs it as O1, the O1 row stands for it"}
            v = validate(c, name, device, small)
            c1 = _closed(c, svc, req, svc.exact(device), LATENCY_CONC, calls)
            st0 = srv.stats()
            c32 = _closed(c, svc, req, svc.exact(device), THROUGHPUT_CONC, calls)
            st1 = srv.stats()
        batches = st1["batches"] - st0["batches"]
        mean_batch = (_batch_calls(st1) - _batch_calls(st0)) / batches if batches else None
        return {**out, "status": _status(v, c1, c32), "p50_us": c1["p50_us"], "p99_us": c1["p99_us"],
                "throughput_rps": c32["throughput_rps"], "mean_batch": mean_batch,
                "errors": c1["errors"] + c32["errors"], "invalid": c1["invalid"] + c32["invalid"],
                "checked": v["checked"], "wrong": v["wrong"], "c1": c1, "c32": c32}
    except Exception as e:  # noqa: BLE001 - a cell that breaks is reported, the others still run
        return {**out, "status": f"failed: {type(e).__name__}: {e}"}
    finally:
        if srv is not None:
            srv.close()
            del srv
            gc.collect()  # its graphs and buffers go now, not while the next cell's O2 kernel runs


# ------------------------------------------------------------------ rounds and table


def _say(r: dict) -> None:
    head = f"  {r['service']:7s} {MODE_LABEL[r['mode']]:6s} {r['device']:7s}"
    if r.get("p50_us") is None:
        print(f"{head} {r['status']}", flush=True)
        return
    print(f"{head} c=1 p50 {r['p50_us']:9.1f} µs p99 {r['p99_us']:9.1f} µs | c=32 {r['throughput_rps'] or 0:10,.0f} "
          f"calls/s, mean batch {r['mean_batch'] or 0:4.2f} | replies checked {r['checked']}, wrong {r['wrong']} "
          f"| {r['status']}", flush=True)


def _say_compute(c: dict) -> None:
    head = f"  {c['service']:7s} compute {c['device']:7s}"
    if c["p50_us"] is None:
        print(f"{head} failed: {c['error']}", flush=True)
        return
    print(f"{head} p50 {c['p50_us']:9.1f} µs p99 {c['p99_us']:9.1f} µs, output {'right' if c['valid'] else 'WRONG'}",
          flush=True)


class Callbacks:
    """Built callbacks by (service, device), built once (LeNet takes a moment); Unavailable kept as text."""

    def __init__(self, small: bool):
        self.small, self.made = small, {}

    def get(self, name: str, device: str):
        key = (name, device)
        if key not in self.made:
            try:
                self.made[key] = make_callback(name, device, self.small)
            except Unavailable as e:
                self.made[key] = Unavailable(str(e))
        cb = self.made[key]
        if isinstance(cb, Unavailable):
            raise Unavailable(str(cb))
        return cb


def run_round(rnd: int, cells: list[dict], a, cbs: Callbacks) -> tuple[list[dict], list[dict]]:
    """One round: per service, its compute alone per device, then its cells with the modes in
    an order rotated by round (so no mode always goes first). Returns (cells, computes)."""
    runs, computes = [], []
    for name in a.services:
        mine = [c for c in cells if c["service"] == name]
        shift = rnd % len(mine)
        for device in dict.fromkeys(c["device"] for c in mine if c["status"] is None):
            try:
                comp = measure_compute(name, device, cbs.get(name, device), a.calls, a.small)
            except Unavailable:
                continue  # its cells say why
            except Exception as e:  # noqa: BLE001 - reported in the table, the other cells still run
                comp = {"service": name, "device": device, "p50_us": None, "p99_us": None, "valid": False,
                        "error": f"{type(e).__name__}: {e}"}
            comp["round"] = rnd
            computes.append(comp)
            _say_compute(comp)
        for cell in mine[shift:] + mine[:shift]:
            r = dict(cell, round=rnd)
            if cell["status"] is None:
                try:
                    cb = cbs.get(name, cell["device"])
                    r = dict(measure_e2e(name, cell["mode"], cell["device"], cb, a.calls, a.small), round=rnd)
                except Unavailable as e:
                    r["status"] = f"unavailable: {e}"
            runs.append(r)
            _say(r)
    return runs, computes


def _median(values) -> float | None:
    v = [x for x in values if x is not None]
    return float(np.median(v)) if v else None


def table(cells: list[dict], runs: list[dict], computes: list[dict]) -> list[dict]:
    """One row per cell: medians over rounds, the compute alone of its service and device, and
    the Figure 3 breakdown normalised to the O1 row of the same service and device."""
    rows = []
    for cell in cells:
        rs = [r for r in runs if all(r[k] == cell[k] for k in ("service", "mode", "device"))]
        good = [r for r in rs if r.get("p50_us") is not None]
        comp = [c for c in computes if c["service"] == cell["service"] and c["device"] == cell["device"]]
        row = {k: cell[k] for k in ("service", "mode", "device")}
        row.update({"rounds": len(good), "p50_us": _median(r["p50_us"] for r in good),
                    "p99_us": _median(r["p99_us"] for r in good),
                    "throughput_rps": _median(r["throughput_rps"] for r in good),
                    "mean_batch": _median(r["mean_batch"] for r in good),
                    "compute_p50_us": _median(c["p50_us"] for c in comp) if good else None,
                    "compute_valid": all(c["valid"] for c in comp) if comp else None,
                    "checked": sum(r.get("checked", 0) for r in rs), "wrong": sum(r.get("wrong", 0) for r in rs),
                    "errors": sum(r.get("errors", 0) for r in rs), "invalid": sum(r.get("invalid", 0) for r in rs),
                    "status": next((r["status"] for r in rs if r["status"] != "ok"), "ok" if rs else cell["status"])})
        if row["compute_valid"] is False and row["status"] == "ok":
            err = next((c["error"] for c in comp if c.get("error")), "it gave a wrong output")
            row["status"] = f"failed: the compute alone: {err}"
        rows.append(row)
    _normalise(rows)
    return rows


def _normalise(rows: list[dict]) -> None:
    """orchestration = E2E p50 - compute p50; shares of the O1 row's E2E p50 (O1 = 1.0)."""
    for row in rows:
        o1 = next((r for r in rows if r["service"] == row["service"] and r["device"] == row["device"]
                   and r["mode"] == "o1" and r["p50_us"]), None)
        e2e, comp = row["p50_us"], row["compute_p50_us"]
        row["orchestration_us"] = e2e - comp if e2e is not None and comp is not None else None
        row["orchestration_share"] = row["orchestration_us"] / e2e if row["orchestration_us"] is not None else None
        base = o1["p50_us"] if o1 else None
        row["norm_e2e"] = e2e / base if e2e is not None and base else None
        row["norm_compute"] = comp / base if comp is not None and base and e2e is not None else None
        row["norm_orchestration"] = row["orchestration_us"] / base if row["orchestration_us"] is not None and base \
            else None


# ------------------------------------------------------------------ report


def _f(v, d: int = 1) -> str:
    return "-" if v is None else f"{v:,.{d}f}"


def _breakdown(r: dict) -> str:
    if r["norm_e2e"] is None:
        return "-"
    if r["norm_compute"] is None:
        return f"{r['norm_e2e']:.2f}"
    return f"{r['norm_compute']:.2f} + {r['norm_orchestration']:.2f} = {r['norm_e2e']:.2f}"


def markdown(doc: dict) -> str:
    g = doc["gpu"]
    gpu_line = (f"{g['device']}: {g['name'] or 'name unknown'}" if g["usable"]
                else f"none usable ({g['reason']}): every GPU cell is reported unavailable; CUDA graphs (O1+CG) "
                     "and O2 need a GPU, and a CPU O1 row per service gives the host-only baseline")
    lines = ["# O1 vs O1+CUDA graphs vs O2 (SplitRPC Figures 3 and 12), loopback, one machine", "",
             f"- date: {doc['date']}", f"- command: `{doc['command']}`", f"- machine: {doc['machine']}",
             f"- GPU: {gpu_line}",
             f"- {doc['rounds']} round(s) of {doc['calls']} recorded calls per run, modes interleaved (order rotated "
             "per round); the table quotes medians over rounds",
             f"- E2E: an in-process splitrpc server (`wait=\"poll\"`, max_batch {MAX_BATCH}) and the native "
             f"closed-loop load generator (busy-polling client) on 127.0.0.1; p50/p99 at concurrency "
             f"{LATENCY_CONC}, calls/s and the server's mean batch at concurrency {THROUGHPUT_CONC}",
             "- compute: the callback alone at batch 1 on ready arrays in the same process (on a GPU: device arrays, "
             "waiting for the stream after each call); one per service and device, the same work for every mode",
             "- orch. = E2E p50 - compute p50: everything that is not the work itself (launches, graph replay or "
             "doorbell, copies, batching, the RPC path over loopback); share = orch. / E2E",
             "- vs O1: compute + orch. = E2E, each divided by the E2E p50 of the O1 row of the same service and "
             "device (Figure 3's normalised breakdown)",
             f"- replies: {VALIDATE_CALLS} distinct requests one at a time and {VALIDATE_CALLS} at once per run, "
             "each checked (vecadd: exact bytes; matmul: exact on the CPU, rtol "
             f"{MATMUL_RTOL:g} on a GPU; LeNet: the CPU reference, rtol 1e-2), and every load-run reply "
             "(exact bytes where exact, else its length); the column gives the validation replies checked and "
             "the wrong replies of validation and load runs together", "",
             "| service | mode | device | p50 µs c=1 | p99 µs c=1 | calls/s c=32 | mean batch | compute p50 µs | "
             "orch. µs | orch. share | vs O1: compute + orch. = E2E | replies checked / wrong | status |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in doc["table"]:
        share = "-" if r["orchestration_share"] is None else f"{100 * r['orchestration_share']:.0f}%"
        checked = f"{r['checked']} / {r['wrong'] + r['invalid']}" if r["checked"] else "-"
        lines.append(f"| {r['service']} | {MODE_LABEL[r['mode']]} | {r['device']} | {_f(r['p50_us'])} | "
                     f"{_f(r['p99_us'])} | {_f(r['throughput_rps'], 0)} | {_f(r['mean_batch'], 2)} | "
                     f"{_f(r['compute_p50_us'])} | {_f(r['orchestration_us'])} | {share} | {_breakdown(r)} | "
                     f"{checked} | {r['status']} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ command line


def add_parser(sub) -> argparse.ArgumentParser:
    return add_subcommand(sub, "orchestration", "O1 vs O1+CUDA graphs vs O2 for vecadd, matmul and LeNet",
                          __doc__, _arguments, cmd_bench_orchestration)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--services", type=comma_list(str, positive=False), default=list(SERVICES),
                   help=f"from {','.join(SERVICES)}")
    p.add_argument("--modes", type=comma_list(str, positive=False), default=list(MODES),
                   help="from o1 (CPU-managed), graph (O1 with CUDA graphs), o2 (persistent kernel)")
    p.add_argument("--device", default="cuda:0", help="cuda:N (without a usable GPU: reported, plus a CPU O1 "
                                                      "baseline) or cpu")
    p.add_argument("--small", action="store_true", help="LeNet's small configuration (the same network)")
    p.add_argument("--calls", type=int, default=5000, help="recorded calls per load run and per compute run")
    p.add_argument("--rounds", type=int, default=3, help="rounds, modes interleaved; the table quotes medians")
    p.add_argument("--out", default="splitrpc-orchestration", help="directory for orchestration.md and .json")


def _bad_input(a) -> str | None:
    unknown = [s for s in a.services if s not in SERVICES]
    if unknown:
        return f"unknown service(s) {', '.join(unknown)}; known: {', '.join(SERVICES)}"
    unknown = [m for m in a.modes if m not in MODES]
    if unknown:
        return f"unknown mode(s) {', '.join(unknown)}; known: {', '.join(MODES)}"
    if a.calls < 1 or a.rounds < 1:
        return "--calls and --rounds must be at least 1"
    try:
        gpu.parse_device(a.device)
    except ValueError as e:
        return str(e)
    return None


def run(a) -> dict:
    """Every round of every cell; the report's document."""
    a.services, a.modes = list(dict.fromkeys(a.services)), list(dict.fromkeys(a.modes))
    t0 = time.monotonic()
    state = gpu_state(a.device)
    print(f"GPU: {state['device']} " + (f"({state['name']})" if state["usable"] else f"unusable: {state['reason']}"),
          flush=True)
    cells = plan(a.services, a.modes, state)
    cbs = Callbacks(a.small)
    runs, computes = [], []
    for rnd in range(a.rounds):
        print(f"round {rnd + 1}/{a.rounds}", flush=True)
        r, c = run_round(rnd, cells, a, cbs)
        runs += r
        computes += c
    machine = report.machine()
    machine["gpu"] = state["name"]
    doc = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
           "machine": machine, "gpu": state, "rounds": a.rounds, "calls": a.calls, "small": a.small,
           "max_batch": MAX_BATCH, "concurrency": {"latency": LATENCY_CONC, "throughput": THROUGHPUT_CONC},
           "table": table(cells, runs, computes), "computes": computes,
           "runs": runs}
    doc["wall_s"] = round(time.monotonic() - t0, 1)
    return doc


def _failed_cells(doc: dict) -> str | None:
    failed = [r for r in doc["table"] if r["status"].startswith("failed")]
    if not failed:
        return None
    return f"{len(failed)} cell(s) failed: " + "; ".join(f"{r['service']} {r['mode']} {r['device']}: {r['status']}"
                                                          for r in failed)


def cmd_bench_orchestration(a) -> int:
    return run_suite(a, name="orchestration", who="bench orchestration", run=run, markdown=markdown,
                     check=_bad_input, verdict=_failed_cells, echo=True)


def main(argv: list[str] | None = None) -> int:
    return run_as_module("splitrpc.bench.suites.orchestration", __doc__, _arguments, cmd_bench_orchestration, argv)


if __name__ == "__main__":
    sys.exit(main())
