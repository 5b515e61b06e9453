"""ab_builds.py: an A/B benchmark of two installed builds of splitrpc in one run: `splitrpc bench` of each, rounds interleaved (A B, then B A, ...), its splitrpc rows and the raw-UDP limit compared cell by cell with the rounds' spread.

    python bench/suites/ab_builds.py --a main=/path/to/venv-old/bin/splitrpc --b new=.venv/bin/splitrpc \\
        --rounds 3 --out bench/results/ab_example

Each build measures the raw-UDP limit in its own runs, so ratios to it are taken within a run.
A cell of B is "worse" only when its best round is worse than A's worst (the rounds' ranges
do not overlap), "better" the other way round, else "same". Each cell also gets B's median over
A's with a bootstrap 95% interval (10,000 resamples of each build's rounds): a change is
claimed only where the interval excludes 1, and with many cells some will by chance.

    python bench/suites/ab_builds.py --from-json OUT/ab.json --out OUT   # the report again, from its runs
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

import numpy as np

from splitrpc.bench.helpers.intervals import RESAMPLES, paired_ratio_interval, ratio_interval
from splitrpc.machine import describe
from splitrpc.loadgen.reporting import SuiteFailed, command_of, run_as_module, run_suite

SYSTEMS = ("raw-udp-busy", "splitrpc-poll", "splitrpc-block")
METRICS = (("p50_us", "p50 µs", -1), ("p99_us", "p99 µs", -1), ("throughput_rps", "calls/s", +1))


def _bench_cmd(exe: str) -> list[str]:
    """How exe runs the side-by-side suite: `bench sidebyside` since the CLI's groups (stop 67), where
    `bench --help` lists it among the suites; plain `bench` in the builds before them (an A/B's base
    may be one), whose help has no such list (though its description names sidebyside.py)."""
    try:
        h = subprocess.run([exe, "bench", "--help"], cwd=tempfile.gettempdir(), text=True, capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SuiteFailed(f"{exe} bench --help failed: {e}") from e
    if h.returncode != 0:
        raise SuiteFailed(f"{exe} bench --help exited {h.returncode}: {h.stderr.strip()[-500:]}")
    listed = re.search(r"^\s+sidebyside\s", h.stdout, re.M)
    return [exe, "bench", "sidebyside"] if listed else [exe, "bench"]


def _run(exe: str, a, out: str) -> list[dict]:
    cmd = [*_bench_cmd(exe), "--systems", a.systems, "--services", a.services, "--concurrency", a.concurrency,
           "--calls", str(a.calls), "--rounds", "1", "--rates", a.rates, "--sweep-s", str(a.sweep_s), "--out", out]
    if a.segment_size is not None:
        cmd += ["--segment-size", str(a.segment_size)]
    print("$", " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, cwd=tempfile.gettempdir(), text=True, capture_output=True)
    except OSError as e:
        raise SuiteFailed(f"{exe} bench failed: {e}") from e
    if p.returncode != 0:
        raise SuiteFailed(f"{exe} bench failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    with open(os.path.join(out, "sidebyside.json")) as f:
        doc = json.load(f)
    return doc["runs"] + doc["open_loop"]


def _key(r: dict, rates: list[float]) -> tuple:
    """(system, service, concurrency, rate): an open-loop run by the rate asked for, not the one drawn."""
    rate = None
    if r.get("concurrency") is None and r.get("offered_rps"):
        rate = min(rates, key=lambda x: abs(x - r["offered_rps"]))
    return (r["system"], r["service"], r.get("concurrency"), rate)


def _spread(vals: list[float]) -> dict:
    vals = sorted(v for v in vals if v is not None)
    if not vals:
        return {"median": None, "min": None, "max": None}
    n = len(vals)
    med = vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2
    return {"median": med, "min": vals[0], "max": vals[-1]}


def _verdict(a: dict, b: dict, sign: int) -> str:
    """sign +1: higher is better; -1: lower is better."""
    if a["median"] is None or b["median"] is None:
        return "-"
    if sign > 0:
        return "worse" if b["max"] < a["min"] else "better" if b["min"] > a["max"] else "same"
    return "worse" if b["min"] > a["max"] else "better" if b["max"] < a["min"] else "same"


def _get(runs: list[dict], system: str, service: str, conc: int, metric: str) -> float | None:
    return next((r.get(metric) for r in runs if r["system"] == system and r["service"] == service
                 and r.get("concurrency") == conc and r.get(metric)), None)


def _ratio(runs: list[dict], system: str, service: str, conc: int, metric: str,
           base: str = "raw-udp-busy") -> float | None:
    """system's metric over base's (the raw-UDP limit), in one run."""
    x, b = _get(runs, system, service, conc, metric), _get(runs, base, service, conc, metric)
    return x / b if x and b else None


# Within-run ratios reported for every closed-loop (service, concurrency) the runs hold:
# (system, base, metric, label).
RATIOS = (("splitrpc-poll", "raw-udp-busy", "throughput_rps", "calls/s"),
          ("splitrpc-poll", "raw-udp-busy", "p50_us", "p50"),
          ("splitrpc-poll", "raw-udp-busy", "p99_us", "p99"),
          ("splitrpc-poll", "c-min-busy", "throughput_rps", "calls/s"),
          ("splitrpc-poll", "c-min-busy", "p50_us", "p50"),
          ("splitrpc-block", "c-min-busy", "throughput_rps", "calls/s"),
          ("splitrpc-block", "c-min-busy", "p50_us", "p50"))


def _within_run(runs: list[list[dict]], system: str, base: str, service: str, conc: int, metric: str) -> dict:
    """system's metric over base's in each run of one build: their spread and the median's
    bootstrap interval (the runs resampled as pairs), or None where a run lacks either."""
    pairs = [(_get(rr, base, service, conc, metric), _get(rr, system, service, conc, metric)) for rr in runs]
    pairs = [(b, x) for b, x in pairs if b and x]
    if not pairs:
        return None
    out = _spread([x / b for b, x in pairs])
    ci = paired_ratio_interval([1.0] * len(pairs), [x / b for b, x in pairs], stat=lambda v: np.median(v, axis=-1))
    out.update(lo=ci["lo"], hi=ci["hi"])
    return out


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--a", metavar="NAME=SPLITRPC", help="the baseline build: a name and its splitrpc command")
    p.add_argument("--b", metavar="NAME=SPLITRPC", help="the build compared with it")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help="what each build's `splitrpc bench` runs (keep raw-udp-busy: the ratios are to it)")
    p.add_argument("--segment-size", type=int, default=None,
                   help="the request segments of splitrpc's and c-min's client (`splitrpc bench --segment-size`)")
    p.add_argument("--services", default="vecadd,head,matmul,echo")
    p.add_argument("--concurrency", default="1,16,32")
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--rates", default="1000,5000,20000,50000,100000,200000")
    p.add_argument("--sweep-s", type=float, default=2.0)
    p.add_argument("--out", required=True, help="the folder of ab.json and ab.md")
    p.add_argument("--from-json", metavar="AB.json", help="no runs: the report again from an earlier ab.json's runs "
                                                         "(with the --rates it was made with)")


def _builds(a) -> list[tuple[str, str]]:
    """[(name, splitrpc command)] of --a and --b; ValueError where one is not NAME=SPLITRPC."""
    builds = []
    for spec in (a.a, a.b):
        name, _, exe = spec.partition("=")
        if not name or not exe:
            raise ValueError(f"expected NAME=SPLITRPC, got {spec!r}")
        builds.append((name, os.path.abspath(exe) if os.sep in exe else exe))
    return builds


def _check(a) -> str | None:
    """What is wrong with the arguments, or None."""
    if a.from_json:
        return None
    if not a.a or not a.b:
        return "--a and --b name the two builds (or --from-json an earlier run)"
    try:
        _builds(a)
    except ValueError as e:
        return str(e)
    return None


def run(a) -> dict:
    """The rounds of both builds (or, with --from-json, an earlier run's) and their analysis."""
    rates = [float(x) for x in a.rates.split(",")]
    if a.from_json:
        with open(a.from_json) as f:
            old = json.load(f)
        doc = analyse(old["runs"], list(old["builds"].items()), rates)
        doc.update({k: old[k] for k in ("date", "command", "machine", "builds", "rounds", "wall_s")})
        return doc
    builds = _builds(a)
    os.makedirs(a.out, exist_ok=True)
    t0 = time.monotonic()
    runs: dict[str, list[list[dict]]] = {name: [] for name, _ in builds}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            order = builds if rnd % 2 == 0 else builds[::-1]
            for name, exe in order:
                print(f"round {rnd + 1}/{a.rounds}: {name}", flush=True)
                runs[name].append(_run(exe, a, os.path.join(tmp, f"{rnd}-{name}")))
    doc = analyse(runs, builds, rates)
    doc.update({"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
                "machine": describe(), "builds": dict(builds), "rounds": a.rounds, "wall_s": time.monotonic() - t0})
    return doc


def cmd_ab_builds(a) -> int:
    return run_suite(a, name="ab", who="ab_builds", run=run, markdown=markdown, check=_check,
                     after=lambda doc: [f"{doc['wall_s']:.0f} s of runs"])


def main(argv: list[str] | None = None) -> int:
    return run_as_module("splitrpc.bench.suites.ab_builds", __doc__, _arguments, cmd_ab_builds, argv)


def analyse(runs: dict, builds: list, rates: list) -> dict:
    """The table (per cell and metric: each build's spread, the verdict, B/A with its interval)
    and the ratios to the raw-UDP limit, from each build's runs."""
    (na, _), (nb, _) = builds
    cells = {}
    for name in (na, nb):
        for rnd in runs[name]:
            for r in rnd:
                cells.setdefault(_key(r, rates), {}).setdefault(name, []).append(r)
    table = []
    for key in sorted(cells, key=lambda k: (k[1], k[2] or 0, k[3] or 0, SYSTEMS.index(k[0]) if k[0] in SYSTEMS else 9)):
        by = cells[key]
        if na not in by or nb not in by:
            continue
        row = {"system": key[0], "service": key[1], "concurrency": key[2], "offered_rps": key[3]}
        for m, _, sign in METRICS:
            sa, sb = _spread([r.get(m) for r in by[na]]), _spread([r.get(m) for r in by[nb]])
            row[m] = {na: sa, nb: sb, "verdict": _verdict(sa, sb, sign),
                      "b_over_a": ratio_interval([r.get(m) for r in by[na]], [r.get(m) for r in by[nb]])}
        table.append(row)
    closed = sorted({(k[1], k[2]) for k in cells if k[2] is not None})
    ratios = {name: {} for name in (na, nb)}
    for service, conc in closed:
        for system, base, metric, label in RATIOS:
            got = {name: _within_run(runs[name], system, base, service, conc, metric) for name in (na, nb)}
            if all(v is not None for v in got.values()):
                for name in (na, nb):
                    ratios[name][f"{service} c={conc} {label}, {system} / {base}"] = got[name]
    return {"table": table, "ratios": ratios, "runs": runs}


def markdown(doc: dict) -> str:
    na, nb = list(doc["builds"])

    def f(v, d=1):
        return "-" if v is None else f"{v:,.{d}f}"

    def cell(s, d=1):
        return f"{f(s['median'], d)} ({f(s['min'], d)}-{f(s['max'], d)})"

    lines = [f"# A/B: {na} vs {nb}", "", f"- date: {doc['date']}", f"- command: `{doc['command']}`",
             f"- builds: {', '.join(f'{k}: `{v}`' for k, v in doc['builds'].items())}",
             f"- machine: {doc['machine']}",
             f"- {doc['rounds']} rounds, builds interleaved (A B, B A, ...); each cell: median (min-max over rounds)",
             "- verdict: worse/better only when the rounds' ranges do not overlap, else same",
             f"- {nb}/{na}: ratio of medians, bootstrap 95% interval ({RESAMPLES:,} resamples of the rounds); * where "
             "it excludes 1", "",
             "## Ratios within each run (to the raw-UDP limit, to the minimal C server)", "",
             "median over the runs (min-max) [bootstrap 95% interval of the median, the runs resampled]", "",
             f"| ratio | {na} | {nb} |", "|---|---:|---:|"]

    def rcell(s):
        ci = f" [{s['lo']:.2f}, {s['hi']:.2f}]" if s.get("lo") is not None else ""
        return cell(s, 2) + ci
    for k in doc["ratios"][na]:
        lines.append(f"| {k} | {rcell(doc['ratios'][na][k])} | {rcell(doc['ratios'][nb][k])} |")
    for m, label, _ in METRICS:
        d = 0 if m == "throughput_rps" else 1
        lines += ["", f"## {label}", "", f"| service | system | conc or rate | {na} | {nb} | verdict | {nb}/{na} [95% CI] |",
                  "|---|---|---:|---:|---:|---|---|"]
        for r in doc["table"]:
            where = r["concurrency"] if r["concurrency"] is not None else f"{r['offered_rps']:,.0f}/s"
            ci = r[m].get("b_over_a") or {}
            est = "-" if ci.get("ratio") is None else (
                f"{ci['ratio']:.3f} [{ci['lo']:.3f}, {ci['hi']:.3f}]" + (" *" if not ci["lo"] <= 1 <= ci["hi"] else ""))
            lines.append(f"| {r['service']} | {r['system']} | {where} | {cell(r[m][na], d)} | {cell(r[m][nb], d)} | "
                         f"{r[m]['verdict']} | {est} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
