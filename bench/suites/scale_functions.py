"""scale_functions.py: what serving many functions costs (issue 34): a server with N vecadd functions (1 KiB in, 1 KiB out, the library's default queue sizes), one client keeping 16 calls outstanding spread uniformly over all N (or all on one), calls/s, p50 and p99; counts alternated round by round; per N its median over N=1's with a bootstrap 95% interval; and the memory each function takes (the server's resident set with N functions against 1).

    python bench/suites/scale_functions.py --functions 1,16,256,1024 --rounds 5 \\
        --out bench/results/scale/functions.md

The server runs in a child process of this interpreter (--serve N PORT); the load is splitrpc's
native load generator with a request set of one request per function.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from datetime import datetime, timezone

from splitrpc.bench.helpers.intervals import RESAMPLES, ratio_interval
from splitrpc.machine import describe

CALLS, CONCURRENCY = 40000, 16
FIRST_ID = 1


def serve(n: int, port: int) -> None:
    """A server with n vecadd functions (ids FIRST_ID ..), busy-polling, until SIGTERM; prints
    READY with its resident set in KiB once started."""
    import numpy as np

    import splitrpc
    from splitrpc import TensorSpec

    spec_in, spec_out = [TensorSpec("x", "float32", (256,))], [TensorSpec("y", "float32", (256,))]
    one = np.float32(1.0)

    def vecadd(x, y) -> None:  # server/builtin.py's vecadd
        np.add(x, one, out=y)

    srv = splitrpc.Server("127.0.0.1", port, wait="poll")
    for fid in range(FIRST_ID, FIRST_ID + n):
        srv.add_function(vecadd, fid, f"vecadd{fid}", spec_in, spec_out)
    srv.start()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    print(f"READY {_rss_kib(os.getpid())}", flush=True)
    while not stop:
        time.sleep(0.05)
    srv.close()


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def measure(n: int, spread: bool, calls: int = CALLS) -> dict:
    """One cell: a fresh server with n functions, a tenth of `calls` as warm-up, then `calls` calls at
    CONCURRENCY outstanding."""
    import numpy as np

    from splitrpc import Client
    from splitrpc.bench.helpers.procs import Proc, free_port
    from splitrpc.load_run import run_load
    from splitrpc.loadgen import report

    port = free_port()
    proc = Proc([sys.executable, os.path.abspath(__file__), "--serve", str(n), str(port)])
    try:
        rss = int(proc.wait_line("READY", 120.0).split()[1])
        x = np.random.default_rng(5).standard_normal(256).astype("<f4")
        want = (x + np.float32(1)).astype("<f4").tobytes()
        ids = list(range(FIRST_ID, FIRST_ID + n)) if spread else [FIRST_ID]
        reqs, exps = [x.tobytes()] * len(ids), [want] * len(ids)
        rng = np.random.default_rng(n)
        with Client("127.0.0.1", port, timeout=2.0, busy_poll=True, retries=0) as c:
            proc.wait_until(lambda: c.call(FIRST_ID, x.tobytes(), timeout=0.2), "scale server")
            for m in (max(calls // 10, 10), calls):
                idx = rng.integers(0, len(ids), m).astype(np.uint32)
                recs = run_load(c, ids, reqs, expect=exps, concurrency=CONCURRENCY, n=m, index=idx, spin=True)
        rss_after = _rss_kib(proc.p.pid)  # the queues' pages are resident once calls went through them
        s = report.summarize(recs)
        lat = recs.latency_ns()
        ok = lat[lat > 0]
        from splitrpc.hdr import percentiles

        pct = percentiles(ok.astype(np.int64), (50, 99))
        return {"calls/s": ok.size / s["duration_s"], "p50 us": pct[50] / 1e3, "p99 us": pct[99] / 1e3,
                "errors": int(s["errors"]), "rss KiB": rss, "rss after KiB": rss_after}
    finally:
        proc.stop()


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--functions", default="1,16,256,1024", help="counts of functions, comma-separated")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=CALLS, help="recorded calls per cell (and a tenth as warm-up)")
    p.add_argument("--out", metavar="FILE.md", help="also write the report here, and its rounds as FILE.json")
    p.add_argument("--serve", nargs=2, type=int, metavar=("N", "PORT"), help=argparse.SUPPRESS)


def _counts(a) -> list[int]:
    return [int(v) for v in a.functions.split(",") if v.strip()]


def _check(a) -> str | None:
    try:
        counts = _counts(a)
    except ValueError:
        return f"--functions takes comma-separated counts, got {a.functions!r}"
    if not counts or min(counts) < 1 or max(counts) > 2000 or 1 not in counts or a.rounds < 2 or a.calls < 100:
        return "--functions: counts in 1..2000 including 1 (the baseline); --rounds 2 or more; --calls 100 or more"
    return None


def run(a) -> dict:
    from splitrpc.reporting import command_of

    counts = _counts(a)
    # N functions with the load spread over all; and the most functions registered with the load on one
    cells = [(n, True) for n in counts] + ([(max(counts), False)] if max(counts) > 1 else [])
    key = lambda n, spread: f"{n}" if spread else f"{n} (one busy)"  # noqa: E731
    runs: dict = {key(n, spread): [] for n, spread in cells}
    for rnd in range(a.rounds):
        for n, spread in (cells if rnd % 2 == 0 else cells[::-1]):
            r = measure(n, spread, a.calls)
            runs[key(n, spread)].append(r)
            print(f"round {rnd + 1}/{a.rounds}: {key(n, spread):>14s} functions  {r['calls/s']:10,.0f} calls/s  "
                  f"p50 {r['p50 us']:7.1f} µs  p99 {r['p99 us']:8.1f} µs  errors {r['errors']}  "
                  f"RSS {r['rss KiB'] / 1024:7.1f} -> {r['rss after KiB'] / 1024:7.1f} MiB", flush=True)
    base = runs["1"]
    table = []
    for key, rs in runs.items():
        row = {"functions": key}
        for m in ("calls/s", "p50 us", "p99 us"):
            row[m] = sorted(r[m] for r in rs)[len(rs) // 2]
            row[f"{m} ratio"] = ratio_interval([r[m] for r in base], [r[m] for r in rs])
        row["errors"] = sum(r["errors"] for r in rs)
        row["rss MiB"] = sorted(r["rss after KiB"] for r in rs)[len(rs) // 2] / 1024
        table.append(row)
    n_max = max(counts)
    rss = {r["functions"]: r["rss MiB"] for r in table}
    per_fn = (rss[str(n_max)] - rss["1"]) * 1024 / (n_max - 1) if n_max > 1 else None
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
            "machine": describe(), "rounds": a.rounds, "calls": a.calls, "concurrency": CONCURRENCY,
            "table": table, "kib_per_function": per_fn, "runs": runs}


def markdown(doc: dict) -> str:
    f = lambda r: "-" if r["ratio"] is None else f"{r['ratio']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"  # noqa: E731
    lines = ["# Cost as functions grow", "",
             f"- date: {doc['date']}", f"- command: `{doc['command']}`", f"- machine: {doc['machine']}",
             f"- {doc['rounds']} rounds, counts alternated; per cell a fresh `wait=poll` server with N vecadd "
             f"functions (1 KiB in and out, default queues) and one busy-polling client keeping "
             f"{doc['concurrency']} calls outstanding, uniformly spread over the N functions ('one busy': all "
             f"on one of the N registered); {doc['calls']:,} calls after a tenth as many to warm up; loopback",
             f"- ratios: the median over the 1-function cell's, bootstrap 95% interval ({RESAMPLES:,} resamples)",
             "", "| functions | calls/s | ratio | p50 µs | ratio | p99 µs | ratio | errors | server RSS after, MiB |",
             "|---|---:|---|---:|---|---:|---|---:|---:|"]
    for r in doc["table"]:
        lines.append(f"| {r['functions']} | {r['calls/s']:,.0f} | {f(r['calls/s ratio'])} | {r['p50 us']:.1f} | "
                     f"{f(r['p50 us ratio'])} | {r['p99 us']:.1f} | {f(r['p99 us ratio'])} | {r['errors']} | "
                     f"{r['rss MiB']:.1f} |")
    if doc["kib_per_function"] is not None:
        lines += ["", f"Memory per function (default queues, 1 KiB in and out): {doc['kib_per_function']:,.0f} KiB "
                  "of resident set (the largest count's RSS after its run less the one-function server's, over the "
                  "functions added)."]
    lines += ["", "Rounds (JSON):", "", "```", json.dumps(doc["runs"]), "```", ""]
    return "\n".join(lines)


def cmd_scale_functions(a) -> int:
    from splitrpc.reporting import run_suite

    name = os.path.basename(a.out or "").removesuffix(".md")
    return run_suite(a, name=name, who="scale_functions", run=run, markdown=markdown, check=_check, echo=True,
                     out=os.path.dirname(a.out or "") or ".", write=bool(a.out))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--serve"]:
        serve(int(args[1]), int(args[2]))
        return 0
    from splitrpc.reporting import run_as_module

    return run_as_module("splitrpc.bench.suites.scale_functions", __doc__, _arguments, cmd_scale_functions, argv)


if __name__ == "__main__":
    sys.exit(main())
