"""priority_classes.py: two priority classes under 3x overload (issue 15, the scheduler): two functions in two priority classes on one server of known capacity, the high class at half the capacity and the low class making the total 3x the capacity; under sched="priority" the high class should keep its unloaded p99 (within 2x) and get no BUSY, while the low class absorbs the BUSY answers. sched="rr" is the control.

    .venv/bin/python bench/suites/priority_classes.py --seconds 6 --rounds 3 --out bench/results/priority

The server's capacity is set, not measured from the CPU: each batch of up to MAX_BATCH calls
sleeps BATCH_COST_S in its callback (as while a GPU runs it; the CPU stays free for the load
generator, which shares this machine). Both classes run open loop with Poisson arrivals from the
native load generator, one client each, every reply checked; latency counts from each call's due
time. Each setting gets a fresh server process per round; settings are interleaved.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

import numpy as np

from splitrpc.loadgen.reporting import SuiteFailed, command_of, rewrite_markdown, run_as_module, run_suite

HI, LO = 50, 51
MAX_BATCH = 4
BATCH_COST_S = 0.002
CAPACITY = MAX_BATCH / BATCH_COST_S  # calls/s with full batches: 2000
HI_SHARE, OVERLOAD = 0.5, 3.0        # the high class at 0.5x capacity; both together at 3x
# (name, server policy, low class running)
SETTINGS = (("high class alone", "priority", False), ("3x overload, sched=priority", "priority", True),
            ("3x overload, sched=rr (control)", "rr", True))


def serve(sched: str) -> None:
    """Child: the two classes' functions on a free port (printed), under policy sched."""
    import splitrpc
    from splitrpc import TensorSpec

    srv = splitrpc.Server("127.0.0.1", 0, sched=sched)
    spec = [TensorSpec("x", "float32", (16,))]
    for fid, prio in ((HI, 1), (LO, 0)):
        @srv.function(fid, f"class{prio}", inputs=spec, outputs=spec, max_batch=MAX_BATCH, priority=prio)
        def work(x, y):
            time.sleep(BATCH_COST_S)  # a batch's fixed service time; releases the GIL
            np.add(x, 1.0, out=y)

    srv.start()
    print("READY", srv.port, flush=True)
    try:
        sys.stdin.read()
    finally:
        srv.close()


def _load(port: int, fid: int, rate: float, seconds: float, seed: int, out: dict) -> None:
    import splitrpc
    from splitrpc.load_run import code_name, run_load
    from splitrpc.arrivals import arrivals

    req = np.arange(16, dtype=np.float32)
    n = int(rate * seconds)
    with splitrpc.Client("127.0.0.1", port, timeout=2.0) as c:
        r = run_load(c, fid, req, expect=(req + 1).tobytes(), schedule=arrivals("poisson", rate, n, seed=seed),
                     timeout_s=2.0)
    codes = {}
    for code, k in zip(*np.unique(r.rec["code"], return_counts=True)):
        codes[code_name(int(code))] = int(k)
    lat = r.latency_ns() / 1e3
    out.update({"offered_rps": rate, "calls": n, "codes": codes, "ok": int(len(lat)),
                "p50_us": float(np.percentile(lat, 50)) if len(lat) else None,
                "p99_us": float(np.percentile(lat, 99)) if len(lat) else None,
                "goodput_rps": len(lat) / seconds})


def measure(sched: str, with_low: bool, seconds: float, seed: int) -> dict:
    srv = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", sched], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    line = srv.stdout.readline().split()
    if not line or line[0] != "READY":
        srv.kill()
        raise SuiteFailed(f"the server did not start: {line}")
    port = int(line[1])
    hi, lo = {}, {}
    try:
        runs = [threading.Thread(target=_load, args=(port, HI, HI_SHARE * CAPACITY, seconds, seed, hi))]
        if with_low:
            runs.append(threading.Thread(target=_load, args=(port, LO, (OVERLOAD - HI_SHARE) * CAPACITY, seconds,
                                                             seed + 1, lo)))
        for t in runs:
            t.start()
        for t in runs:
            t.join()
    finally:
        srv.communicate("", timeout=30)
    return {"high": hi, "low": lo or None}


def markdown(doc: dict) -> str:
    """The Markdown report of a run's JSON document (also: --report JSON rewrites it)."""
    runs = doc["runs"]

    def med(name, cls, key):
        vals = [r[cls][key] for r in runs[name] if r[cls] and r[cls].get(key) is not None]
        return statistics.median(vals) if vals else None

    def busy(name, cls):
        return statistics.median(r[cls]["codes"].get("BUSY", 0) for r in runs[name]) if runs[name][0][cls] else None

    alone = med("high class alone", "high", "p99_us")
    lines = ["# Two priority classes under 3x overload (issue 15)", "",
             f"- date: {doc['date']}", f"- command: `{doc['command']}`", f"- machine: {doc['machine']}",
             f"- server: one worker, batches of up to {MAX_BATCH} calls that take {BATCH_COST_S * 1e3:.0f} ms each "
             f"(callback sleep): capacity {CAPACITY:,.0f} calls/s; the high class (priority 1) offered "
             f"{HI_SHARE * CAPACITY:,.0f}/s, the low class (priority 0) {(OVERLOAD - HI_SHARE) * CAPACITY:,.0f}/s, "
             f"Poisson, {doc['seconds']} s per run; {doc['rounds']} rounds, settings interleaved, medians",
             "", "| setting | high p50 µs | high p99 µs | high BUSY | high goodput/s | low p99 µs | low BUSY | "
             "low goodput/s |", "|---|---:|---:|---:|---:|---:|---:|---:|"]

    def f(v, fmt="{:,.0f}"):
        return "-" if v is None else fmt.format(v)

    for name, _, _ in SETTINGS:
        lines.append(f"| {name} | {f(med(name, 'high', 'p50_us'))} | {f(med(name, 'high', 'p99_us'))} | "
                     f"{f(busy(name, 'high'))} | {f(med(name, 'high', 'goodput_rps'))} | "
                     f"{f(med(name, 'low', 'p99_us'))} | {f(busy(name, 'low'))} | {f(med(name, 'low', 'goodput_rps'))} |")
    pr = med("3x overload, sched=priority", "high", "p99_us")
    rr = med("3x overload, sched=rr (control)", "high", "p99_us")
    lines += ["", f"- sched=\"priority\": the high class's p99 under overload is **{pr / alone:.2f}×** its p99 alone "
              f"(target ≤ 2×), with {f(busy('3x overload, sched=priority', 'high'))} BUSY (target 0); the low class "
              f"took {f(busy('3x overload, sched=priority', 'low'))} BUSY answers.",
              f"- sched=\"rr\" (the default, for comparison): the high class's p99 is {rr / alone:.1f}× its p99 alone, "
              f"with {f(busy('3x overload, sched=rr (control)', 'high'))} BUSY.",
              "- Per-run outcome counts (OK, BUSY, TIMEOUT...) are in the JSON next to this file.", ""]
    return "\n".join(lines)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=float, default=6.0, help="length of each open-loop run")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--out", help="output path without extension (.md and .json are written)")
    p.add_argument("--serve", help=argparse.SUPPRESS)
    p.add_argument("--report", metavar="JSON", help="rewrite the Markdown report of an earlier run's JSON")


def _check(a) -> str | None:
    """What is wrong with the arguments, or None."""
    if not a.out or a.seconds <= 0 or a.rounds < 1:
        return "--out is needed, --seconds > 0, --rounds >= 1"
    return None


def run(a) -> dict:
    """--rounds rounds of the settings, interleaved: the runs."""
    from splitrpc.loadgen.report import machine

    runs: dict[str, list[dict]] = {name: [] for name, _, _ in SETTINGS}
    for rnd in range(a.rounds):
        for name, sched, low in (SETTINGS if rnd % 2 == 0 else SETTINGS[::-1]):
            m = measure(sched, low, a.seconds, a.seed + 10 * rnd)
            runs[name].append(m)
            hi, lo = m["high"], m["low"] or {}
            print(f"round {rnd + 1}/{a.rounds}  {name:34s} high p99 {hi['p99_us']:9.0f} us  codes {hi['codes']}  "
                  f"low codes {lo.get('codes', '-')}", flush=True)
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
            "machine": machine(), "seconds": a.seconds, "rounds": a.rounds, "capacity_rps": CAPACITY, "runs": runs,
            "target": "sched=priority under 3x overload: high p99 <= 2x its p99 alone, no BUSY for the high class"}


def cmd_priority_classes(a) -> int:
    if a.serve:
        serve(a.serve)
        return 0
    if a.report:
        rewrite_markdown(a.report, markdown)
        return 0
    return run_suite(a, name=os.path.basename(a.out or ""), who="priority_classes", run=run, markdown=markdown,
                     check=_check, echo=True, out=os.path.dirname(a.out or "") or ".")


def main(argv: list[str] | None = None) -> int:
    return run_as_module("splitrpc.bench.suites.priority_classes", __doc__, _arguments, cmd_priority_classes, argv)


if __name__ == "__main__":
    sys.exit(main())
