"""tune_command.py: `splitrpc plan tune`: Hercules's configuration search on this machine: a zoo model served at each configuration (o intra-op threads, m server processes, d batch size; with --schedules sd, a model with sparse and dense stages, such as dlrm, also as a sparse-dense pipeline over its stages' threads) and its latency-bounded QPS measured with the native open-loop generator; the gradient search, the grid search and a batch-size-only search compared on the same measurements; the best configuration saved as an efficiency tuple tagged with the machine kind (input to `splitrpc plan provision --tuples`) (after Hercules, Ke et al., HPCA 2022).

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

from splitrpc.loadgen.reporting import add_subcommand, command_of, run_as_module, run_suite


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
    p.add_argument("--schedules", type=_schedules, default=["model"],
                   help="model: model-based scheduling (the whole model per instance; axes o x m x d); sd: "
                        "Hercules's sparse-dense pipeline (lookups and MLPs on separately sized thread stages; axes "
                        "--dense x --sparse x d, one process), for models with those stages (dlrm); comma list "
                        "(default: model)")
    p.add_argument("--sparse", type=_ints, default=[1, 2, 3], help="sd: sparse (lookup) stage threads (default: 1,2,3)")
    p.add_argument("--dense", type=_ints, default=[1, 2], help="sd: dense (MLP) stage threads (default: 1,2)")
    p.add_argument("--trial-s", type=float, default=1.0, help="seconds per open-loop trial (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=3, help="trials per rate, median p99 (default: %(default)s)")
    p.add_argument("--margin", type=float, default=0.03, help="noise margin before a move counts (default: %(default)s)")
    p.add_argument("--kind", help="the machine kind the tuples are tagged with (default: from this machine)")
    p.add_argument("--device", default="cpu", help="where the models run: cpu, or cuda:N (then each tuple's power is "
                   "that GPU's board power, read through nvidia-smi) (default: %(default)s)")
    p.add_argument("--out", default="splitrpc-tune")


SCHEDULES = {  # name: (the axes' labels (outer, rows, columns), what it is)
    "model": (("o threads", "m processes", "d batch"), "model-based scheduling"),
    "sd": (("dense threads", "sparse threads", "d batch"), "sparse-dense pipeline scheduling"),
}


def _schedules(text: str) -> list[str]:
    v = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in v if x not in SCHEDULES]
    if not v or bad:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a comma list of {', '.join(SCHEDULES)}")
    return list(dict.fromkeys(v))


def entry_key(model: str, schedule: str) -> str:
    """tune.json's key of a model's results under a schedule: the model's name for model-based."""
    return model if schedule == "model" else f"{model}/{schedule}"


def machine_kind() -> str:
    """A tag for this machine: CPUs, architecture, GPU if one is visible."""
    gpu = "nogpu"
    if os.path.exists("/proc/driver/nvidia/gpus") and os.listdir("/proc/driver/nvidia/gpus"):
        gpu = "gpu"
    return f"{os.cpu_count()}cpu-{platform.machine()}-{gpu}"


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _space(a, schedule: str):
    """(outer axis, row axis, batches, make) of a schedule: make(outer, row, d) -> Config."""
    from splitrpc.loadgen.planning import search
    if schedule == "model":
        return a.threads, a.instances, a.batches, search.Config
    return a.dense, a.sparse, a.batches, lambda dense, sparse, d: search.Config(dense, 1, d, sparse=sparse)


def _at(schedule: str, c) -> list:
    """A Config's place on its schedule's axes (outer, row, batch)."""
    return [c.threads, c.instances if schedule == "model" else c.sparse, c.batch]


def run(a) -> dict:
    from splitrpc.loadgen.planning import search, tune
    models = [m.strip() for m in a.models.split(",") if m.strip()]
    for m in models:
        try:
            tune.served_model(m, small=not a.full_size)
            if "sd" in a.schedules:
                tune.stage_args(m, 1, 1)
        except tune.TuneError as e:
            raise ValueError(f"--models: {e}") from None
    sla = a.sla_ms / 1e3
    kind = a.kind or machine_kind()
    doc = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
           "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, {platform.platform()}", "kind": kind,
           "sla_ms": a.sla_ms, "axes": {"threads": a.threads, "instances": a.instances, "batches": a.batches},
           "schedules": a.schedules, "trial_s": a.trial_s, "repeats": a.repeats, "margin": a.margin,
           "device": a.device,
           "power_note": ("the models ran on the CPU: no power is read (RAPL is not read; NVML reads a GPU's)"
                          if a.device == "cpu" else f"power: {a.device}'s board power at each point's QPS"),
           "models": {}}
    if "sd" in a.schedules:
        doc["axes"].update(sparse=a.sparse, dense=a.dense)
    t_start = time.monotonic()
    for model in models:
        for schedule in a.schedules:
            key = entry_key(model, schedule)
            outer, rows, batches, make = _space(a, schedule)
            grid_n = len(outer) * len(rows) * len(batches)
            points: dict = {}

            def measure(c: search.Config) -> float:
                if c not in points:
                    _say(f"{key}: point {len(points) + 1}/{grid_n}: {c.label()}")
                    start = max(50.0, 0.5 * max((p["qps"] for p in points.values()), default=100.0))
                    points[c] = tune.measure_config(model, c, sla, trial_s=a.trial_s, repeats=a.repeats,
                                                    small=not a.full_size, start=start, device=a.device,
                                                    log=lambda m: _say("    " + m))
                    _say(f"    -> {points[c]['qps']:.0f} calls/s within p99 {a.sla_ms:g} ms")
                return points[c]["qps"]

            grid = search.grid_search(measure, outer, rows, batches, make=make)
            grad = search.gradient_search(measure, outer, rows, batches, margin=a.margin, make=make)
            bonly = search.batch_only_search(measure, batches, threads=outer[0], instances=rows[0], margin=a.margin,
                                             make=make)
            best_grid = grid.best.qps if grid.best else 0.0
            best_grad = grad.best.qps if grad.best else 0.0
            best_b = bonly.best.qps if bonly.best else 0.0

            def cfg(p):
                return p and {**p.config.__dict__, "label": p.config.label()}

            doc["models"][key] = {
                "model": model, "schedule": schedule, "labels": list(SCHEDULES[schedule][0]),
                "axes": {"outer": outer, "rows": rows, "batches": batches},
                "points": [{"threads": c.threads, "instances": c.instances, "batch": c.batch, "sparse": c.sparse,
                            "at": _at(schedule, c), **p} for c, p in points.items()],
                "grid": {"best": cfg(grid.best), "qps": best_grid, "measured": grid.measured},
                "gradient": {"best": cfg(grad.best), "qps": best_grad, "measured": grad.measured,
                             "path": [_at(schedule, p.config) for p in grad.explored]},
                "batch_only": {"best": cfg(bonly.best), "qps": best_b, "measured": bonly.measured},
                "gradient_of_grid": best_grad / best_grid if best_grid else None,
                "gradient_points_share": grad.measured / grid_n,
                "gain_over_batch_only": best_grad / best_b if best_b else None}
            _say(f"{key}: gradient {best_grad:.0f} ({grad.measured} points) vs grid {best_grid:.0f} ({grid_n}) vs "
                 f"batch-only {best_b:.0f} ({bonly.measured})")
    doc["tuples"] = []
    for model in models:  # a model's tuple: the better schedule's gradient best
        r = max((doc["models"][entry_key(model, s)] for s in a.schedules), key=lambda r: r["gradient"]["qps"])
        doc["tuples"].append({"model": model, "kind": kind, "qps": r["gradient"]["qps"], "power": _power_at(r),
                              "schedule": r["schedule"], "config": r["gradient"]["best"], "sla_ms": a.sla_ms})
    doc["seconds"] = time.monotonic() - t_start
    return doc


def _power_at(r: dict) -> float | None:
    """The board power measured at the gradient search's best point (None: not read)."""
    best = r["gradient"]["best"]
    if not best:
        return None
    for p in r["points"]:
        if all(p[k] == best[k] for k in ("threads", "instances", "batch", "sparse")):
            return p.get("power_w")
    return None


def _grid_table(r: dict) -> dict:
    return {tuple(p["at"]): p["qps"] for p in r["points"]}


def markdown(doc: dict) -> str:
    ax = doc["axes"]
    space = f"o (threads) {ax['threads']}, m (processes) {ax['instances']}, d (batch) {ax['batches']}"
    if "sparse" in ax:
        space += (f"; sparse-dense: sparse (lookup) threads {ax['sparse']}, dense (MLP) threads {ax['dense']} (one "
                  "intra-op thread each), one process")
    lines = [f"# Configuration search (Hercules) on this machine ({doc['date']})", "",
             f"Command: `{doc['command']}`  ", f"Machine: {doc['machine']} (kind tag `{doc['kind']}`); the open-loop "
             "generator shares its CPUs with the server (loopback).  ",
             f"SLA: p99 <= {doc['sla_ms']:g} ms; each trial {doc['trial_s']:g} s, {doc['repeats']} repeats, median "
             f"p99; noise margin {100 * doc['margin']:.0f}%. Space: {space}. {doc['power_note'][:1].upper() + doc['power_note'][1:]}.", "",
             "| model | schedule | grid best (QPS, config) | gradient best | gradient / grid | "
             "points (gradient / grid) | batch-only best | gradient / batch-only |", "|---|---|---|---|---|---|---|---|"]

    def cfg(c):
        return c["label"] if c else "-"

    for r in doc["models"].values():
        n = len(r["axes"]["outer"]) * len(r["axes"]["rows"]) * len(r["axes"]["batches"])
        lines.append(f"| {r['model']} | {SCHEDULES[r['schedule']][1]} | {r['grid']['qps']:.0f} "
                     f"({cfg(r['grid']['best'])}) | {r['gradient']['qps']:.0f} ({cfg(r['gradient']['best'])}) | "
                     f"**{100 * (r['gradient_of_grid'] or 0):.1f}%** | {r['gradient']['measured']} / {n} "
                     f"(**{100 * r['gradient_points_share']:.0f}%**) | {r['batch_only']['qps']:.0f} "
                     f"({cfg(r['batch_only']['best'])}) | {(r['gain_over_batch_only'] or 0):.2f}x |")
    both = [(m, doc["models"][m], doc["models"][f"{m}/sd"]) for m in doc["models"] if f"{m}/sd" in doc["models"]]
    for m, mb, sd in both:
        ratio = sd["grid"]["qps"] / mb["grid"]["qps"] if mb["grid"]["qps"] else float("nan")
        lines += ["", f"{m}: the sparse-dense pipeline's grid best is {ratio:.2f}x model-based scheduling's "
                  "(one measurement per point: a comparison of schedules, not a claim with an interval)."]
    lines += ["", "Every point (latency-bounded QPS):", ""]
    for key, r in doc["models"].items():
        outer_l, row_l, col_l = r["labels"]
        table = _grid_table(r)
        lines += [f"**{key}** ({SCHEDULES[r['schedule']][1]})", "",
                  f"| {outer_l} | {row_l} | " + " | ".join(f"d={d}" for d in r["axes"]["batches"]) + " |",
                  "|---|---|" + "---|" * len(r["axes"]["batches"])]
        for o in r["axes"]["outer"]:
            for i in r["axes"]["rows"]:
                lines.append(f"| {o} | {i} | " + " | ".join(f"{table.get((o, i, d), float('nan')):.0f}"
                                                             for d in r["axes"]["batches"]) + " |")
        lines.append("")
    lines += ["Efficiency tuples (tune_tuples.json, for `splitrpc plan provision --tuples`; each model's better "
              "schedule):", "", "```", json.dumps(doc["tuples"], indent=1), "```", "",
              f"Run time: {doc['seconds']:.0f} s."]
    return "\n".join(lines) + "\n"


def plot(doc: dict, path: str) -> str:
    from matplotlib import figure

    entries = list(doc["models"].items())
    nt = max(len(r["axes"]["outer"]) for _, r in entries)
    fig = figure.Figure(figsize=(4.5 * nt, 3.6 * len(entries)))
    axes = np.atleast_2d(fig.subplots(len(entries), nt, squeeze=False))
    for row, (key, r) in enumerate(entries):
        outer_l, row_l, col_l = r["labels"]
        outer, rows, batches = r["axes"]["outer"], r["axes"]["rows"], r["axes"]["batches"]
        table = _grid_table(r)
        vmax = max(table.values()) or 1.0
        for col in range(nt):
            ax = axes[row, col]
            if col >= len(outer):
                ax.set_axis_off()
                continue
            o = outer[col]
            z = np.array([[table.get((o, i, d), np.nan) for d in batches] for i in rows])
            im = ax.imshow(z, origin="lower", aspect="auto", vmin=0, vmax=vmax, cmap="viridis")
            for yi, i in enumerate(rows):
                for xi, d in enumerate(batches):
                    ax.text(xi, yi, f"{table.get((o, i, d), 0):.0f}", ha="center", va="center", fontsize=7,
                            color="w")
            seq = [(batches.index(d), rows.index(i)) for (oo, i, d) in r["gradient"]["path"] if oo == o]
            if seq:
                xs, ys = zip(*seq)
                ax.plot(xs, ys, "o--", color="r", markersize=9, fillstyle="none", label="gradient search's points")
                ax.legend(fontsize=6, loc="upper left")
            ax.set_xticks(range(len(batches)), [str(d) for d in batches])
            ax.set_yticks(range(len(rows)), [str(i) for i in rows])
            ax.set_xlabel(col_l)
            ax.set_ylabel(row_l)
            ax.set_title(f"{key}, {o} {outer_l}: latency-bounded QPS", fontsize=8)
            fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(f"Grid surface and the gradient search's points (SLA p99 {doc['sla_ms']:g} ms, {doc['kind']})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def cmd_tune(a) -> int:
    from splitrpc.loadgen.planning.tune import TuneError

    def tuples(doc) -> list:  # the input of `splitrpc plan provision --tuples`
        tp = os.path.join(a.out, "tune_tuples.json")
        with open(tp, "w") as f:
            json.dump([{k: t[k] for k in ("model", "kind", "qps", "power")} for t in doc["tuples"]], f, indent=1)
        return [tp]

    return run_suite(a, name="tune", who="tune", run=run, markdown=markdown, plot=plot, needs=("torch",),
                     hint="PyTorch for the zoo models: pip install 'splitrpc[models]'", errors=(ValueError, TuneError),
                     after=tuples)


def main(argv: list[str] | None = None) -> int:
    return run_as_module("splitrpc.loadgen.planning.tune_command", __doc__, _arguments, cmd_tune, argv)


if __name__ == "__main__":
    sys.exit(main())
