"""gpu_check.py: the trimmed GPU benchmarks of `splitrpc check --bench`, the bench capability's check sections (bench/plugin.py): O1 / O1+CG / O2 (SplitRPC Figures 3 and 12), device callbacks against host callbacks end to end, and batching on the GPU, and bench-embedding's GPU rows (issue 36); one short run per cell, so indicative numbers, not comparison claims."""
from __future__ import annotations

from types import SimpleNamespace

from splitrpc.bench.suites import orchestration as orch
from splitrpc.check import Context, Cut, Failed, Result, Section, Skipped, done
from splitrpc.check.probes import EMULATED_LABEL, driver_emulated, need_cupy, need_gpu

ORCH_SERVICES = ("vecadd", "matmul", "lenet")
E2E_SERVICES = ("vecadd", "matmul")
BATCHES = (1, 32)  # the batching speedup: one call per batch against up to 32
C1, C32 = orch.LATENCY_CONC, orch.THROUGHPUT_CONC
ONE_RUN = ("one short run per cell (the check's trimmed benchmark): indicative, not a comparison claim; "
           "`splitrpc bench orchestration --rounds 5` measures with rounds")


def _labels() -> tuple[str, str]:
    """(the markdown's note, the summary's and plot titles' tag) on the emulated driver; ("", "") on a real one."""
    if not driver_emulated():
        return "", ""
    return (f" ({EMULATED_LABEL}: the tests' emulated driver and CuPy; these times are the emulation's, not a GPU's)",
            f" ({EMULATED_LABEL})")


def _f(v, d: int = 1) -> str:
    return "-" if v is None else f"{v:,.{d}f}"


def _ratio(a, b) -> float | None:
    return a / b if a and b else None


def _failed(rows: list[dict]) -> list[str]:
    return [f"{r['service']} {orch.MODE_LABEL[r['mode']]} {r['device']}: {r['status']}" for r in rows
            if str(r.get("status", "")).startswith("failed")]


def run_orchestration(ctx: Context) -> Result:
    device = f"cuda:{need_gpu(ctx.device)}"
    need_cupy()
    note, tag = _labels()
    state = orch.gpu_state(device)
    cells = orch.plan(list(ORCH_SERVICES), list(orch.MODES), state)
    a = SimpleNamespace(services=list(ORCH_SERVICES), calls=ctx.bench_calls, small=True)
    runs, computes = orch.run_round(0, cells, a, orch.Callbacks(small=True))
    rows = orch.table(cells, runs, computes)
    md = [f"- {ONE_RUN}; {ctx.bench_calls} recorded calls per run; LeNet small{note}", "",
          f"| service | mode | p50 µs c={C1} | p99 µs c={C1} | calls/s c={C32} | mean batch | compute p50 µs | "
          "orch. share | vs O1 | replies checked / wrong | status |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        share = "-" if r["orchestration_share"] is None else f"{100 * r['orchestration_share']:.0f}%"
        md.append(f"| {r['service']} | {orch.MODE_LABEL[r['mode']]} | {_f(r['p50_us'])} | {_f(r['p99_us'])} | "
                  f"{_f(r['throughput_rps'], 0)} | {_f(r['mean_batch'], 2)} | {_f(r['compute_p50_us'])} | {share} | "
                  f"{_f(r['norm_e2e'], 2)} | {r['checked']} / {r['wrong'] + r['invalid']} | {r['status']} |")
    measured = [r for r in rows if r["p50_us"] is not None]
    plot = {"name": "orchestration", "title": f"O1 vs O1+CG vs O2 on {state['name'] or device}{tag}",
            "ylabel": f"p50 latency at c={C1}, µs", "categories": list(ORCH_SERVICES),
            "series": {orch.MODE_LABEL[m]: [next((r["p50_us"] for r in measured if r["service"] == s and r["mode"] == m),
                                                 None) for s in ORCH_SERVICES] for m in orch.MODES}}
    summary = "; ".join(f"{r['service']} {orch.MODE_LABEL[r['mode']]} p50 {_f(r['p50_us'])} µs" for r in measured)
    res = Result(summary=(summary or "no cell could run") + tag,
                 facts={"rows": rows, "computes": computes}, markdown=md, plots=[plot] if measured else [])
    bad = _failed(rows)
    if bad:  # the cells that did run stay in the report
        raise Failed("; ".join(bad), result=res)
    return res


def _e2e_rows(ctx: Context, cells: list[tuple[str, str, int]]) -> list[dict]:
    """measure_e2e for each (service, device, max_batch), O1, callbacks built once."""
    cbs = orch.Callbacks(small=True)
    rows = []
    for name, dev, mb in cells:
        r = orch.measure_e2e(name, "o1", dev, cbs.get(name, dev), ctx.bench_calls, True, max_batch=mb)
        rows.append({**r, "max_batch": mb})
        done(f"{name} on {dev} max batch {mb}: {r['status']}")
    return rows


def _done(res: Result, rows: list[dict]) -> Result:
    """res, or Failed naming the cells that failed (res, with the cells that ran, kept in it)."""
    bad = _failed(rows)
    if bad:
        raise Failed("; ".join(bad), result=res)
    return res


def run_e2e(ctx: Context) -> Result:
    device = f"cuda:{need_gpu(ctx.device)}"
    need_cupy()
    note, tag = _labels()
    cells = [(s, d, orch.MAX_BATCH) for s in E2E_SERVICES for d in ("cpu", device)]
    rows = _e2e_rows(ctx, cells)
    md = [f"- O1, max batch {orch.MAX_BATCH}, the same in-process server and native load generator for both; "
          f"{ONE_RUN}{note}", "",
          f"| service | callbacks on | p50 µs c={C1} | p99 µs c={C1} | calls/s c={C32} | mean batch c={C32} | status |",
          "|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        md.append(f"| {r['service']} | {r['device']} | {_f(r.get('p50_us'))} | {_f(r.get('p99_us'))} | "
                  f"{_f(r.get('throughput_rps'), 0)} | {_f(r.get('mean_batch'), 2)} | {r['status']} |")
    ratios = {}
    for s in E2E_SERVICES:
        host, dev = (next(r for r in rows if r["service"] == s and r["device"] == d) for d in ("cpu", device))
        ratios[s] = {"p50_device_over_host": _ratio(dev.get("p50_us"), host.get("p50_us")),
                     "throughput_device_over_host": _ratio(dev.get("throughput_rps"), host.get("throughput_rps"))}
    md += ["", "device / host: " + "; ".join(f"{s} p50 {_f(v['p50_device_over_host'], 2)}x, calls/s "
                                             f"{_f(v['throughput_device_over_host'], 2)}x" for s, v in ratios.items())]
    plot = {"name": "device_vs_host", "title": f"Device vs host callbacks, c={C32}{tag}",
            "ylabel": "calls/s", "categories": list(E2E_SERVICES),
            "series": {d: [next(r.get("throughput_rps") for r in rows if r["service"] == s and r["device"] == d)
                           for s in E2E_SERVICES] for d in ("cpu", device)}}
    return _done(Result(summary="; ".join(f"{s}: device/host p50 {_f(v['p50_device_over_host'], 2)}x, calls/s "
                                          f"{_f(v['throughput_device_over_host'], 2)}x" for s, v in ratios.items())
                        + tag, facts={"rows": rows, "ratios": ratios}, markdown=md, plots=[plot]), rows)


def run_batching(ctx: Context) -> Result:
    device = f"cuda:{need_gpu(ctx.device)}"
    need_cupy()
    note, tag = _labels()
    rows = _e2e_rows(ctx, [(s, device, b) for s in E2E_SERVICES for b in BATCHES])
    md = [f"- O1 on {device}, c={C32}: max batch {BATCHES[0]} against {BATCHES[1]}; {ONE_RUN}{note}", "",
          f"| service | max batch | calls/s c={C32} | mean batch | p50 µs c={C1} | status |", "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        md.append(f"| {r['service']} | {r['max_batch']} | {_f(r.get('throughput_rps'), 0)} | "
                  f"{_f(r.get('mean_batch'), 2)} | {_f(r.get('p50_us'))} | {r['status']} |")
    speedup = {s: _ratio(*(next(r.get("throughput_rps") for r in rows if r["service"] == s and r["max_batch"] == b)
                           for b in (BATCHES[1], BATCHES[0]))) for s in E2E_SERVICES}
    md += ["", "batching speedup (calls/s at max batch "
               f"{BATCHES[1]} / at {BATCHES[0]}): " + "; ".join(f"{s} {_f(v, 2)}x" for s, v in speedup.items())]
    return _done(Result(summary="batching speedup " + "; ".join(f"{s} {_f(v, 2)}x" for s, v in speedup.items())
                        + tag, facts={"rows": rows, "speedup": speedup}, markdown=md), rows)


TUNE_MODELS = ("lenet", "resnet18")   # two zoo models, small
TUNE_AXES = {"threads": [1], "instances": [1, 2], "batches": [1, 8, 32]}
TUNE_SLA_MS = 20.0
TUNE_POINT_S = 30.0  # a point is not started with less than this left of the section's cap (one took ~10 s on an H200)


class _OutOfTime(Exception):
    """bench-tune's measure() with too little of the cap left for another point."""


def run_tune(ctx: Context) -> Result:
    """Hercules's search trimmed to the device minutes: each model served on the GPU at every point
    of a small grid (one 0.3 s trial per rate), the gradient search against the grid on the same
    measurements, and the board power at each point's QPS (nvidia-smi): the efficiency tuples."""
    from splitrpc.check.probes import need_torch_cuda
    from splitrpc.loadgen.planning import search, tune

    device = f"cuda:{need_gpu(ctx.device)}"
    need_torch_cuda()
    rows, out = [], {}
    for model in TUNE_MODELS:
        points: dict = {}

        def measure(c, model=model, points=points):
            if c not in points:
                if ctx.left() < TUNE_POINT_S:  # the section's cap (what the budget left it) is nearly spent
                    raise _OutOfTime(f"{model} at {c}")
                points[c] = tune.measure_config(model, c, TUNE_SLA_MS / 1e3, trial_s=0.3, repeats=1, small=True,
                                                start=200.0, steps=3, device=device)
                done(f"{model} {c}: {points[c]['qps']:,.0f} QPS")
            return points[c]["qps"]

        try:
            grid = search.grid_search(measure, TUNE_AXES["threads"], TUNE_AXES["instances"], TUNE_AXES["batches"])
            grad = search.gradient_search(measure, TUNE_AXES["threads"], TUNE_AXES["instances"], TUNE_AXES["batches"])
        except _OutOfTime as e:
            rows += [{"model": model, **c.__dict__, "qps": p["qps"], "power_w": p["power_w"]} for c, p in points.items()]
            finished = ", ".join(out) or "no model"
            raise Cut(f"{ctx.left():.0f} s of its cap left, under the {TUNE_POINT_S:g} s a point needs: not measured "
                      f"from {e} on; finished: {finished}",
                      result=Result(summary=f"cut: {finished} finished", facts={"models": out, "points": rows})) from None
        best = grad.best.config if grad.best else None
        at = points.get(best, {}) if best else {}
        out[model] = {"grid_qps": grid.best.qps if grid.best else 0.0, "gradient_qps": grad.best.qps if grad.best else 0.0,
                      "gradient_points": grad.measured, "grid_points": grid.measured,
                      "best": best and best.__dict__, "power_w": at.get("power_w"), "power_note": at.get("power_note")}
        rows += [{"model": model, **c.__dict__, "qps": p["qps"], "power_w": p["power_w"]} for c, p in points.items()]
    md = [f"- `splitrpc plan tune` trimmed: {', '.join(TUNE_MODELS)} (small) on {device}, threads {TUNE_AXES['threads']}, "
          f"processes {TUNE_AXES['instances']}, batch {TUNE_AXES['batches']}, p99 SLA {TUNE_SLA_MS:g} ms, one 0.3 s "
          f"trial per rate; {ONE_RUN}", "",
          "| model | grid best QPS | gradient best QPS | gradient / grid | points (gradient / grid) | power at best (W) |",
          "|---|---:|---:|---:|---:|---:|"]
    for m, r in out.items():
        md.append(f"| {m} | {_f(r['grid_qps'], 0)} | {_f(r['gradient_qps'], 0)} | "
                  f"{_f(_ratio(r['gradient_qps'], r['grid_qps']), 3)} | {r['gradient_points']} / {r['grid_points']} | "
                  f"{_f(r['power_w'])} |")
    return Result(summary="; ".join(f"{m}: gradient {_f(r['gradient_qps'], 0)} of grid {_f(r['grid_qps'], 0)} QPS, "
                                    f"power {_f(r['power_w'])} W" for m, r in out.items()),
                  facts={"models": out, "points": rows, "axes": TUNE_AXES, "sla_ms": TUNE_SLA_MS}, markdown=md)


# The trimmed bench-embedding of `splitrpc check --bench`: the GPU rows and their CPU neighbours,
# small tables, one round.
BENCH_CONFIGS = ("gpu-whole", "gpu-l3", "gpu-l1-5%", "gpu-l1-1%", "l3", "l1-5%")
BENCH_ROWS = 40_000


def run_bench_embedding(ctx: Context) -> Result:
    import argparse
    import os

    from splitrpc import gpu
    from splitrpc.bench.suites import embedding as suite

    need_gpu(ctx.device)
    if not gpu.kernel_archs():
        raise Skipped("splitrpc was built without a CUDA compiler: no GPU kernels (the device cache needs them)")
    need_cupy()
    for mod, why in (("rocksdict", "the L3 tier"), ("torch", "the DLRM model's weights and reference replies")):
        try:
            __import__(mod)
        except ImportError:
            raise Skipped(f"{mod} is not installed ({why}): pip install 'splitrpc[models,embedding]' "
                          "(bench/gpu/fetch_wheels.sh carries rocksdict)") from None
    label = f" ({EMULATED_LABEL}: the tests' emulated driver and CuPy; these numbers are the emulation's)" \
        if driver_emulated() else ""
    p = argparse.ArgumentParser()
    suite._arguments(p)
    calls = max(200, ctx.bench_calls)
    a = p.parse_args(["--rows", str(BENCH_ROWS), "--requests", "20000", "--calls", str(calls), "--concurrency", "256",
                      "--warmup-calls", str(4 * calls), "--rounds", "1", "--skip", "warmup,updates,insert",
                      "--device", ctx.device, "--configs", ",".join(BENCH_CONFIGS), "--quiet", "--out", os.devnull])
    doc = suite.run(a)
    c = doc["configs"]
    md = [f"- trimmed `bench-embedding`{label}: 26 tables x {BENCH_ROWS:,} keys x 32, {calls:,} measured calls per "
          "configuration after a warm-up, one round: indicative, not a comparison claim "
          f"(`splitrpc bench embedding --device {ctx.device} --rounds 5` measures)", "",
          "| store | calls/s | p50 ms | p99 ms | L1 hit rate |", "|---|---:|---:|---:|---:|"]
    for n, r in c.items():
        h = "-" if r["l1_hit_rate"] is None else f"{r['l1_hit_rate']:.3f}"
        md.append(f"| {n} | {r['calls_per_s']:,.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {h} |")
    md += [""] + [f"- {'met' if x['met'] else 'NOT met'} (one round): {x['what']}: {x['value']}" for x in doc["acceptance"]]
    g5, g3 = c["gpu-l1-5%"], c["gpu-l3"]
    hit = "-" if g5["l1_hit_rate"] is None else f"{g5['l1_hit_rate']:.3f}"
    return Result(summary=f"{label.strip() + ' ' if label else ''}GPU L1 5%: {g5['calls_per_s']:,.0f} calls/s "
                          f"({g5['calls_per_s'] / g3['calls_per_s']:.2f}x L3 alone on the GPU), hit rate "
                          f"{hit}, p99 {g5['p99_ms']:.1f} ms; one trimmed round",
                  facts={"configs": c, "acceptance": doc["acceptance"], "emulated": bool(label)}, markdown=md)


SECTIONS = [
    Section("bench-orchestration", "O1 / O1+CUDA graph / O2 end to end and compute alone: vecadd, matmul, LeNet",
            run_orchestration, cap_s=50, stage="bench", tier="core"),
    Section("bench-e2e", f"device callbacks against host callbacks over loopback at c={C1} and c={C32}",
            run_e2e, cap_s=30, stage="bench", tier="core"),
    Section("bench-batching", f"batching on the GPU: max batch {BATCHES[0]} against {BATCHES[1]} at c={C32}",
            run_batching, cap_s=30, stage="bench", tier="core"),
    Section("bench-tune", "Hercules's search trimmed: LeNet and ResNet-18 on the GPU over a 6-point grid, gradient vs "
            "grid, board power at each point (efficiency tuples)", run_tune, cap_s=180, stage="bench"),
    Section("bench-embedding", "DLRM with L1 on the GPU at 5% and 1% against L3 alone and the whole tables on the GPU "
            "(MLPs there too), and the CPU's L3 and L1 5%: bench-embedding trimmed", run_bench_embedding, cap_s=180,
            stage="bench"),
]
