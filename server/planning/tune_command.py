"""tune_command.py: `splitrpc tune`: Hercules's configuration search on this machine: a zoo model served at each configuration (o intra-op threads, m server processes, d batch size) and its latency-bounded QPS measured with the native open-loop generator; the gradient search, the grid search and a batch-size-only search compared on the same measurements; the best configuration saved as an efficiency tuple tagged with the machine kind (input to `splitrpc provision --tuples`) (after Hercules, Ke et al., HPCA 2022).

Every point any search asks for is measured once and cached: the grid is measured whole (it is
the baseline), and each search's cost is the number of distinct points it asked for. The load
generator runs on the same machine as the server (loopback): on a small VM it takes CPU from
the configurations with many threads or processes, which the report states.

Outputs under --out: tune.json (every point's trials), tune.md, tune.png (per thread count, the
grid's surface over instances x batch size with the gradient search's path), tune_tuples.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone

import numpy as np

from splitrpc.reporting import add_subcommand, command_of, run_as_module, run_suite


def add_parser(sub) -> argparse.ArgumentParser:
    return add_subcommand(sub, "tune", "Hercules's configuration search for a zoo model on this machine: gradient "
                          "vs grid vs batch-only, efficiency tuples", __doc__, _arguments, cmd_tune)


def _ints(text: str) -> list[int]:
    try:
        v = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a comma list of integers") from None
    if not v or v[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected integers >= 1")
    return v


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default="lenet",
                   help="models `splitrpc serve --models` serves (the zoo's, dlrm, ...), comma list (default: %(default)s)")
    p.add_argument("--full-size", action="store_true", help="the models' full configurations (default: --small)")
    p.add_argument("--sla-ms", type=float, default=20.0, help="p99 SLA in ms (default: %(default)s)")
    p.add_argument("--threads", type=_ints, default=[1, 2], help="o values (default: 1,2)")
    p.add_argument("--instances", type=_ints, default=[1, 2], help="m values (default: 1,2)")
    p.add_argument("--batches", type=_ints, default=[1, 2, 4, 8, 16], help="d values (default: 1,2,4,8,16)")
    p.add_argument("--trial-s", type=float, default=1.0, help="seconds per open-loop trial (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=3, help="trials per rate, median p99 (default: %(default)s)")
    p.add_argument("--margin", type=float, default=0.03, help="noise margin before a move counts (default: %(default)s)")
    p.add_argument("--kind", help="the machine kind the tuples are tagged with (default: from this machine)")
    p.add_argument("--device", default="cpu", help="where the models run: cpu, or cuda:N (then each tuple's power is "
                   "that GPU's board power, read through nvidia-smi) (default: %(default)s)")
    p.add_argument("--out", default="splitrpc-tune")


def machine_kind() -> str:
    """A tag for this machine: CPUs, architecture, GPU if one is visible."""
    gpu = "nogpu"
    if os.path.exists("/proc/driver/nvidia/gpus") and os.listdir("/proc/driver/nvidia/gpus"):
        gpu = "gpu"
    return f"{os.cpu_count()}cpu-{platform.machine()}-{gpu}"


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(a) -> dict:
    from splitrpc.services.planning import search, tune
    models = [m.strip() for m in a.models.split(",") if m.strip()]
    for m in models:
        try:
            tune.served_model(m, small=not a.full_size)
        except tune.TuneError as e:
            raise ValueError(f"--models: {e}") from None
    sla = a.sla_ms / 1e3
    kind = a.kind or machine_kind()
    grid_n = len(a.threads) * len(a.instances) * len(a.batches)
    doc = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
           "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, {platform.platform()}", "kind": kind,
           "sla_ms": a.sla_ms, "axes": {"threads": a.threads, "instances": a.instances, "batches": a.batches},
           "trial_s": a.trial_s, "repeats": a.repeats, "margin": a.margin, "device": a.device,
           "power_note": ("the models ran on the CPU: no power is read (RAPL is not read; NVML reads a GPU's)"
                          if a.device == "cpu" else f"power: {a.device}'s board power at each point's QPS"),
           "models": {}}
    t_start = time.monotonic()
    for model in models:
        points: dict = {}

        def measure(c: search.Config) -> float:
            if c not in points:
                k = len(points) + 1
                _say(f"{model}: point {k}/{grid_n}: o={c.threads} m={c.instances} d={c.batch}")
                start = max(50.0, 0.5 * max((p["qps"] for p in points.values()), default=100.0))
                points[c] = tune.measure_config(model, c, sla, trial_s=a.trial_s, repeats=a.repeats,
                                                small=not a.full_size, start=start, device=a.device,
                                                log=lambda m: _say("    " + m))
                _say(f"    -> {points[c]['qps']:.0f} calls/s within p99 {a.sla_ms:g} ms")
            return points[c]["qps"]

        grid = search.grid_search(measure, a.threads, a.instances, a.batches)
        grad = search.gradient_search(measure, a.threads, a.instances, a.batches, margin=a.margin)
        bonly = search.batch_only_search(measure, a.batches, threads=a.threads[0], instances=a.instances[0],
                                         margin=a.margin)
        best_grid = grid.best.qps if grid.best else 0.0
        best_grad = grad.best.qps if grad.best else 0.0
        best_b = bonly.best.qps if bonly.best else 0.0
        doc["models"][model] = {
            "points": [{"threads": c.threads, "instances": c.instances, "batch": c.batch, **p} for c, p in points.items()],
            "grid": {"best": grid.best and grid.best.config.__dict__, "qps": best_grid, "measured": grid.measured},
            "gradient": {"best": grad.best and grad.best.config.__dict__, "qps": best_grad, "measured": grad.measured,
                         "path": [p.config.__dict__ for p in grad.explored]},
            "batch_only": {"best": bonly.best and bonly.best.config.__dict__, "qps": best_b,
                           "measured": bonly.measured},
            "gradient_of_grid": best_grad / best_grid if best_grid else None,
            "gradient_points_share": grad.measured / grid_n,
            "gain_over_batch_only": best_grad / best_b if best_b else None}
        _say(f"{model}: gradient {best_grad:.0f} ({grad.measured} points) vs grid {best_grid:.0f} ({grid_n}) vs "
             f"batch-only {best_b:.0f} ({bonly.measured})")
    doc["tuples"] = [{"model": m, "kind": kind, "qps": r["gradient"]["qps"], "power": _power_at(r),
                      "config": r["gradient"]["best"], "sla_ms": a.sla_ms} for m, r in doc["models"].items()]
    doc["seconds"] = time.monotonic() - t_start
    return doc


def _power_at(r: dict) -> float | None:
    """The board power measured at the gradient search's best point (None: not read)."""
    best = r["gradient"]["best"]
    if not best:
        return None
    for p in r["points"]:
        if (p["threads"], p["instances"], p["batch"]) == (best["threads"], best["instances"], best["batch"]):
            return p.get("power_w")
    return None


def markdown(doc: dict) -> str:
    ax = doc["axes"]
    lines = [f"# Configuration search (Hercules) on this machine ({doc['date']})", "",
             f"Command: `{doc['command']}`  ", f"Machine: {doc['machine']} (kind tag `{doc['kind']}`); the open-loop "
             "generator shares its CPUs with the server (loopback).  ",
             f"SLA: p99 <= {doc['sla_ms']:g} ms; each trial {doc['trial_s']:g} s, {doc['repeats']} repeats, median "
             f"p99; noise margin {100 * doc['margin']:.0f}%. Space: o (threads) {ax['threads']}, m (processes) "
             f"{ax['instances']}, d (batch) {ax['batches']}. {doc['power_note']}.", "",
             "| model | grid best (QPS, config) | gradient best | gradient / grid | points (gradient / grid) | "
             "batch-only best | gradient / batch-only |", "|---|---|---|---|---|---|---|"]
    n = len(ax["threads"]) * len(ax["instances"]) * len(ax["batches"])

    def cfg(c):
        return f"o={c['threads']} m={c['instances']} d={c['batch']}" if c else "-"

    for m, r in doc["models"].items():
        lines.append(f"| {m} | {r['grid']['qps']:.0f} ({cfg(r['grid']['best'])}) | {r['gradient']['qps']:.0f} "
                     f"({cfg(r['gradient']['best'])}) | **{100 * (r['gradient_of_grid'] or 0):.1f}%** | "
                     f"{r['gradient']['measured']} / {n} (**{100 * r['gradient_points_share']:.0f}%**) | "
                     f"{r['batch_only']['qps']:.0f} ({cfg(r['batch_only']['best'])}) | "
                     f"{(r['gain_over_batch_only'] or 0):.2f}x |")
    lines += ["", "Every point (latency-bounded QPS):", ""]
    for m, r in doc["models"].items():
        lines += [f"**{m}**", "", "| o | m | " + " | ".join(f"d={d}" for d in ax["batches"]) + " |",
                  "|---|---|" + "---|" * len(ax["batches"])]
        table = {(p["threads"], p["instances"], p["batch"]): p["qps"] for p in r["points"]}
        for o in ax["threads"]:
            for i in ax["instances"]:
                lines.append(f"| {o} | {i} | " + " | ".join(f"{table.get((o, i, d), float('nan')):.0f}"
                                                             for d in ax["batches"]) + " |")
        lines.append("")
    lines += ["Efficiency tuples (tune_tuples.json, for `splitrpc provision --tuples`):", "", "```",
              json.dumps(doc["tuples"], indent=1), "```", "", f"Run time: {doc['seconds']:.0f} s."]
    return "\n".join(lines) + "\n"


def plot(doc: dict, path: str) -> str:
    from matplotlib import figure

    ax_ = doc["axes"]
    models = list(doc["models"])
    nt = len(ax_["threads"])
    fig = figure.Figure(figsize=(4.5 * nt, 3.6 * len(models)))
    axes = np.atleast_2d(fig.subplots(len(models), nt, squeeze=False))
    for row, m in enumerate(models):
        r = doc["models"][m]
        table = {(p["threads"], p["instances"], p["batch"]): p["qps"] for p in r["points"]}
        vmax = max(table.values()) or 1.0
        path_pts = [(p["threads"], p["instances"], p["batch"]) for p in r["gradient"]["path"]]
        for col, o in enumerate(ax_["threads"]):
            ax = axes[row, col]
            z = np.array([[table.get((o, i, d), np.nan) for d in ax_["batches"]] for i in ax_["instances"]])
            im = ax.imshow(z, origin="lower", aspect="auto", vmin=0, vmax=vmax, cmap="viridis")
            for yi, i in enumerate(ax_["instances"]):
                for xi, d in enumerate(ax_["batches"]):
                    ax.text(xi, yi, f"{table.get((o, i, d), 0):.0f}", ha="center", va="center", fontsize=7,
                            color="w")
            seq = [(ax_["batches"].index(d), ax_["instances"].index(i)) for (oo, i, d) in path_pts if oo == o]
            if seq:
                xs, ys = zip(*seq)
                ax.plot(xs, ys, "o--", color="r", markersize=9, fillstyle="none", label="gradient search's points")
                ax.legend(fontsize=6, loc="upper left")
            ax.set_xticks(range(len(ax_["batches"])), [str(d) for d in ax_["batches"]])
            ax.set_yticks(range(len(ax_["instances"])), [str(i) for i in ax_["instances"]])
            ax.set_xlabel("batch size d")
            ax.set_ylabel("processes m")
            ax.set_title(f"{m}, o={o} threads: latency-bounded QPS", fontsize=8)
            fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(f"Grid surface and the gradient search's points (SLA p99 {doc['sla_ms']:g} ms, {doc['kind']})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def cmd_tune(a) -> int:
    from splitrpc.services.planning.tune import TuneError

    def tuples(doc) -> list:  # the input of `splitrpc provision --tuples`
        tp = os.path.join(a.out, "tune_tuples.json")
        with open(tp, "w") as f:
            json.dump([{k: t[k] for k in ("model", "kind", "qps", "power")} for t in doc["tuples"]], f, indent=1)
        return [tp]

    return run_suite(a, name="tune", who="tune", run=run, markdown=markdown, plot=plot, needs=("torch",),
                     hint="PyTorch for the zoo models: pip install 'splitrpc[models]'", errors=(ValueError, TuneError),
                     after=tuples)


def main(argv: list[str] | None = None) -> int:
    return run_as_module("splitrpc.services.planning.tune_command", __doc__, _arguments, cmd_tune, argv)


if __name__ == "__main__":
    sys.exit(main())
