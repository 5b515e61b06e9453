"""provision_command.py: `splitrpc plan provision`: a plan over a day of load: servers of each kind per model at every step, by Hercules's integer program and by the greedy baseline, side by side, with the over-provision R taken from the trace's own history; the paper's Section III-C example by default (its tuples SYNTHETIC, labelled so) (after Hercules, Ke et al., HPCA 2022).

Inputs:
- tuples: --tuples FILE.json, a list of {"model", "kind", "qps", "power"} (the efficiency tuples
  of `splitrpc plan tune`; power may be null), or the built-in example's (synthetic);
- inventory: --inventory cpu=70,cpu+nmp=15,cpu+gpu=5 (default: the example's);
- loads: --trace FILE.csv (a header time_s,MODEL1,MODEL2,... then one row per step, loads in
  QPS), or a Wikipedia-like day per model (`splitrpc load`'s shape, a different seed per model)
  peaking at --peak QPS over --steps steps.
Outputs under --out: provision.json (every step's allocations), provision.md (the summary, the
peak step, infeasible steps with each model's shortfall) and provision.png (power over the day,
servers by kind).
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from datetime import datetime, timezone

import numpy as np

from splitrpc.loadgen.reporting import add_subcommand, command_of, run_as_module, run_suite


def add_parser(sub) -> argparse.ArgumentParser:
    return add_subcommand(sub, "provision", "servers per model and kind over a day of load: Hercules's integer "
                          "program against greedy", __doc__, _arguments, cmd_provision)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tuples", metavar="FILE.json", help="efficiency tuples (default: the paper's example, synthetic)")
    p.add_argument("--inventory", metavar="KIND=N,...", help="servers available per kind (default: the example's)")
    p.add_argument("--trace", metavar="FILE.csv", help="loads per step: time_s,MODEL,... (default: a Wikipedia-like day)")
    p.add_argument("--peak", type=float, default=50_000.0, help="the generated day's peak QPS per model")
    p.add_argument("--steps", type=int, default=48, help="steps of the generated day (re-plans)")
    p.add_argument("--noise", type=float, default=0.05, help="relative noise of the generated day")
    p.add_argument("--over", type=float, help="over-provision R (default: from the trace's history)")
    p.add_argument("--over-quantile", type=float, default=0.95,
                   help="R from history: this quantile of the step-to-step relative rises (default: %(default)s)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="splitrpc-provision")
    p.add_argument("--quiet", action="store_true")


def _inventory(text: str) -> dict:
    inv = {}
    for part in filter(None, text.split(",")):
        k, sep, v = part.partition("=")
        if not sep or not k.strip():
            raise ValueError(f"--inventory: {part!r} is not KIND=N")
        inv[k.strip()] = int(v)
    return inv


def _trace(path: str) -> tuple[np.ndarray, list[str], np.ndarray]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 2 or rows[0][0] != "time_s" or len(rows[0]) < 2:
        raise ValueError(f"{path}: expected a header time_s,MODEL,... and at least one row")
    models = rows[0][1:]
    try:
        data = np.array([[float(x) for x in r] for r in rows[1:]])
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    if data.shape[1] != len(models) + 1:
        raise ValueError(f"{path}: every row needs {len(models) + 1} values")
    return data[:, 0], models, data[:, 1:]


def run(a) -> dict:
    from splitrpc.arrivals import wikipedia_day
    from splitrpc.loadgen.planning import provision as pv

    t_start = time.monotonic()
    synthetic = a.tuples is None
    if synthetic:
        tuples = pv.EXAMPLE_TUPLES
    else:
        with open(a.tuples) as f:
            tuples = [pv.Tuple(str(d["model"]), str(d["kind"]), float(d["qps"]),
                               None if d.get("power") is None else float(d["power"])) for d in json.load(f)]
    inventory = _inventory(a.inventory) if a.inventory else dict(pv.EXAMPLE_INVENTORY)
    problem = pv.Problem(tuples, inventory)
    if a.trace:
        times, models, loads = _trace(a.trace)
        missing = set(problem.models) - set(models)
        if missing:
            raise ValueError(f"--trace has no column for {sorted(missing)}")
        loads = loads[:, [models.index(m) for m in problem.models]]
    else:
        cols = [wikipedia_day(a.peak, 86_400.0, points=a.steps, noise=a.noise, seed=a.seed + i)
                for i in range(len(problem.models))]
        times, loads = cols[0][0], np.stack([c[1] for c in cols], axis=1)
    over = a.over if a.over is not None else pv.over_provision(loads, a.over_quantile)
    steps = []
    for k, (t, row) in enumerate(zip(times, loads)):
        ld = dict(zip(problem.models, map(float, row)))
        mi, gr = problem.milp(ld, over), problem.greedy(ld, over)
        steps.append({"time_s": float(t), "loads": ld,
                      **{name: {"servers": {f"{h}/{m}": n for (h, m), n in al.servers.items()}, "power": al.power,
                                "feasible": al.feasible, "shortfall": al.shortfall, "by_kind": al.by_kind()}
                         for name, al in (("milp", mi), ("greedy", gr))}})
        if not a.quiet and (k % 8 == 0 or k == len(times) - 1):
            print(f"\r  planning step {k + 1}/{len(times)}", end="", file=sys.stderr, flush=True)
    if not a.quiet:
        print(file=sys.stderr, flush=True)
    doc = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
           "synthetic_tuples": synthetic, "tuples": [t.__dict__ for t in tuples], "inventory": inventory,
           "models": problem.models, "power_unit": "W" if problem.watts else "servers",
           "over_provision": over, "over_from_history": a.over is None, "steps": steps}
    doc["summary"] = summary(doc)
    doc["seconds"] = time.monotonic() - t_start
    return doc


def summary(doc: dict) -> dict:
    steps = doc["steps"]
    both = [s for s in steps if s["milp"]["feasible"] and s["greedy"]["feasible"]]
    peak = max(steps, key=lambda s: sum(s["loads"].values()))
    saving = lambda s: 1 - s["milp"]["power"] / s["greedy"]["power"] if s["greedy"]["power"] else 0.0  # noqa: E731
    peak_both = max(both, key=lambda s: sum(s["loads"].values())) if both else None
    return {
        "steps": len(steps), "both_feasible": len(both),
        "milp_never_more": all(s["milp"]["power"] <= s["greedy"]["power"] + 1e-6 for s in both),
        "greedy_infeasible_milp_feasible": sum(1 for s in steps if s["milp"]["feasible"] and not s["greedy"]["feasible"]),
        "infeasible": [{"time_s": s["time_s"], "shortfall": s["milp"]["shortfall"]} for s in steps
                       if not s["milp"]["feasible"]],
        "peak": {"time_s": peak["time_s"], "loads": peak["loads"], "milp_power": peak["milp"]["power"],
                 "greedy_power": peak["greedy"]["power"], "greedy_feasible": peak["greedy"]["feasible"],
                 "saving": saving(peak)},
        "mean_saving": float(np.mean([saving(s) for s in both])) if both else None,
        # the busiest step both serve: the fair comparison where greedy cannot serve the peak
        "peak_both": None if peak_both is None else {
            "time_s": peak_both["time_s"], "milp_power": peak_both["milp"]["power"],
            "greedy_power": peak_both["greedy"]["power"], "saving": saving(peak_both)},
    }


def markdown(doc: dict) -> str:
    s, u = doc["summary"], doc["power_unit"]
    inv = ", ".join(f"{k} {v}" for k, v in doc["inventory"].items())
    lines = ["# Provisioning: Hercules's integer program against greedy", "", f"Command: `{doc['command']}`  ",
             f"Date: {doc['date']}; {doc['seconds']:.1f} s.", "",
             f"Inventory: {inv}. Models: {', '.join(doc['models'])}. Over-provision R = {doc['over_provision']:.3f}"
             + (" (from the trace's history)" if doc["over_from_history"] else " (given)") + ".", ""]
    if doc["synthetic_tuples"]:
        lines += ["**The efficiency tuples are SYNTHETIC** (the paper's Section III-C example gives none): chosen "
                  "only to have its shape (CPU+NMP > CPU+GPU > CPU in QPS/W for both models, NMP's gain larger on "
                  "the second).", ""]
    lines += ["| model | kind | QPS | power (W) |", "|---|---|---|---|"]
    lines += [f"| {t['model']} | {t['kind']} | {t['qps']:g} | {t['power'] if t['power'] is not None else '-'} |"
              for t in doc["tuples"]]
    p = s["peak"]
    lines += ["", f"Peak step (t = {p['time_s'] / 3600:.1f} h, loads "
              + ", ".join(f"{m} {v:,.0f}" for m, v in p["loads"].items()) + f"): MILP {p['milp_power']:,.0f} {u}, "
              f"greedy {p['greedy_power']:,.0f} {u}" + ("" if p["greedy_feasible"] else " (greedy cannot serve it)")
              + f": {100 * p['saving']:.1f}% less.", "",
              f"Steps: {s['steps']}; both feasible at {s['both_feasible']}, where the MILP is never above greedy: "
              f"{s['milp_never_more']}; mean saving there {100 * (s['mean_saving'] or 0):.1f}%. Steps greedy cannot "
              f"serve but the MILP can: {s['greedy_infeasible_milp_feasible']}."]
    if s["peak_both"] and not p["greedy_feasible"]:
        b = s["peak_both"]
        lines += ["", f"Busiest step both can serve (t = {b['time_s'] / 3600:.1f} h): MILP {b['milp_power']:,.0f} {u}, "
                  f"greedy {b['greedy_power']:,.0f} {u}: {100 * b['saving']:.1f}% less."]
    lines += [""]
    if s["infeasible"]:
        lines += ["Infeasible steps (no allocation serves every load; shortfall per model, QPS):", ""]
        lines += [f"- t = {x['time_s'] / 3600:.1f} h: " + ", ".join(f"{m} {v:,.0f}" for m, v in x["shortfall"].items())
                  for x in s["infeasible"]]
    else:
        lines += ["Every step is feasible."]
    lines += ["", "## Peak allocation", "", "| kind/model | MILP | greedy |", "|---|---|---|"]
    peak = max(doc["steps"], key=lambda x: sum(x["loads"].values()))
    for k in sorted(set(peak["milp"]["servers"]) | set(peak["greedy"]["servers"])):
        lines.append(f"| {k} | {peak['milp']['servers'].get(k, 0)} | {peak['greedy']['servers'].get(k, 0)} |")
    return "\n".join(lines) + "\n"


def plot(doc: dict, path: str) -> str:
    from matplotlib import figure

    steps = doc["steps"]
    t = np.array([s["time_s"] for s in steps]) / 3600
    fig = figure.Figure(figsize=(12, 4))
    ax = fig.subplots(1, 2)
    for name, style in (("milp", "-"), ("greedy", "--")):
        ax[0].plot(t, [s[name]["power"] for s in steps], style, label=name)
    ax[0].set_xlabel("hour")
    ax[0].set_ylabel(f"provisioned power ({doc['power_unit']})")
    ax[0].legend()
    ax[0].set_title("power over the day", fontsize=9)
    for k in doc["inventory"]:
        ax[1].plot(t, [s["milp"]["by_kind"].get(k, 0) for s in steps], label=f"{k} (MILP)")
    ax[1].set_xlabel("hour")
    ax[1].set_ylabel("servers")
    ax[1].legend(fontsize=7)
    ax[1].set_title("servers by kind (MILP)", fontsize=9)
    fig.suptitle("Provisioning" + (" (SYNTHETIC efficiency tuples)" if doc["synthetic_tuples"] else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def cmd_provision(a) -> int:
    from splitrpc.loadgen.planning.provision import ProvisionError

    def peak(doc) -> list:
        p = doc["summary"]["peak"]
        return [f"peak: MILP {p['milp_power']:,.0f} vs greedy {p['greedy_power']:,.0f} {doc['power_unit']} "
                f"({100 * p['saving']:.1f}% less); infeasible steps: {len(doc['summary']['infeasible'])}"]

    return run_suite(a, name="provision", who="provision", run=run, markdown=markdown, plot=plot, needs=("scipy",),
                     hint="scipy: pip install 'splitrpc[fleet]'", errors=(ValueError, ProvisionError, OSError, KeyError),
                     after=peak)


def main(argv: list[str] | None = None) -> int:
    return run_as_module("splitrpc.loadgen.planning.provision_command", __doc__, _arguments, cmd_provision, argv)


if __name__ == "__main__":
    sys.exit(main())
