"""scale.py: what a server's cost does as its work grows (issue 34), two axes: N functions (vecadd, 1 KiB in and out, the library's default queue sizes) with one client keeping 16 calls outstanding spread uniformly over all N (and, at the largest N, all on one), and M client sockets (one vecadd function, 16 calls outstanding, each sent from the next of M sockets in turn); calls/s, p50 and p99; cells alternated round by round; each cell's median over its axis's base (1 function; the smallest M) with a bootstrap 95% interval; and the memory each function takes (the server's resident set).

    python bench/suites/scale.py --functions 1,16,256,1024 --clients 16,256,4096 --rounds 5 \\
        --out bench/results/scale/scale.md

The server runs in a child process of this interpreter (--serve N PORT MAX_BATCH), `wait=poll`. The
functions axis uses splitrpc's native load generator with a request set of one request per
function; the clients axis the many-socket closed loop (splitrpc.raw_udp.multi_closed_loop).
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


def serve(n: int, port: int, max_batch: int = 0) -> None:
    """A server with n vecadd functions (ids FIRST_ID ..; max_batch 0: the default), busy-polling,
    until SIGTERM; prints READY with its resident set in KiB once started."""
    import numpy as np

    import splitrpc
    from splitrpc import TensorSpec

    spec_in, spec_out = [TensorSpec("x", "float32", (256,))], [TensorSpec("y", "float32", (256,))]
    one = np.float32(1.0)

    def vecadd(x, y) -> None:  # server/builtin.py's vecadd
        np.add(x, one, out=y)

    srv = splitrpc.Server("127.0.0.1", port, wait="poll")
    for fid in range(FIRST_ID, FIRST_ID + n):
        srv.add_function(vecadd, fid, f"vecadd{fid}", spec_in, spec_out, max_batch=max_batch or None)
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


def _request():
    import numpy as np

    x = np.random.default_rng(5).standard_normal(256).astype("<f4")
    return x.tobytes(), (x + np.float32(1)).astype("<f4").tobytes()


def _summary(lat_ns, elapsed_s: float, errors: int) -> dict:
    import numpy as np

    from splitrpc.latency_histogram import percentiles

    ok = np.asarray(lat_ns)
    ok = ok[ok > 0].astype(np.int64)
    pct = percentiles(ok, (50, 99))
    return {"calls/s": ok.size / elapsed_s, "p50 us": pct[50] / 1e3, "p99 us": pct[99] / 1e3, "errors": int(errors)}


def measure(cell: tuple, calls: int = CALLS) -> dict:
    """One cell, on a fresh server: ("functions", n, spread[, max_batch]) or ("clients", m); a tenth
    of `calls` as warm-up, then `calls` calls at CONCURRENCY outstanding."""
    import numpy as np

    from splitrpc import Client, raw_udp
    from splitrpc.bench.helpers.procs import Proc, free_port
    from splitrpc.load_run import run_load
    from splitrpc.loadgen import report

    axis, n = cell[0], cell[1] if cell[0] == "functions" else 1
    port = free_port()
    mb = cell[3] if axis == "functions" and len(cell) > 3 else 0
    proc = Proc([sys.executable, os.path.abspath(__file__), "--serve", str(n), str(port), str(mb)])
    try:
        rss = int(proc.wait_line("READY", 120.0).split()[1])
        req, want = _request()
        warm = max(calls // 10, 10)
        with Client("127.0.0.1", port, timeout=2.0, busy_poll=True, retries=0) as c:
            proc.wait_until(lambda: c.call(FIRST_ID, req, timeout=0.2), "scale server")
            if axis == "clients":
                lat, elapsed_ns, errors = raw_udp.multi_closed_loop("127.0.0.1", port, cell[1], FIRST_ID, req, want,
                                                                    CONCURRENCY, warm, calls)
                out = _summary(lat, elapsed_ns / 1e9, errors)
            else:
                from splitrpc.function_config import FUNCTION_DEFAULTS

                ids = list(range(FIRST_ID, FIRST_ID + n)) if cell[2] else [FIRST_ID]
                rng = np.random.default_rng(n)
                # warm-up long enough that every queue has gone round its ring once: the steady state
                # (pages touched, views cached), not the first touch of each element
                warm = max(warm, len(ids) * FUNCTION_DEFAULTS["capacity"] * 3 // 2)
                for m in (warm, calls):
                    idx = rng.integers(0, len(ids), m).astype(np.uint32)
                    recs = run_load(c, ids, [req] * len(ids), expect=[want] * len(ids), concurrency=CONCURRENCY,
                                    n=m, index=idx, spin=True)
                s = report.summarize(recs)
                out = _summary(recs.latency_ns(), s["duration_s"], s["errors"])
        out["rss KiB"], out["rss after KiB"] = rss, _rss_kib(proc.p.pid)  # after: the queues' pages in use
        return out
    finally:
        proc.stop()


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--functions", default="1,16,256,1024", help="counts of functions, comma-separated (with 1)")
    p.add_argument("--clients", default="16,256,4096", help="counts of client sockets, comma-separated ('': none)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=CALLS, help="recorded calls per cell (and a tenth as warm-up)")
    p.add_argument("--out", metavar="FILE.md", help="also write the report here, and its rounds as FILE.json")
    p.add_argument("--batch-one", action="store_true",
                   help="also one function with max_batch=1: batches of one call as the load spread over "
                        "many functions makes them, without the functions (what the functions cost apart)")
    p.add_argument("--serve", nargs=3, type=int, metavar=("N", "PORT", "MAX_BATCH"), help=argparse.SUPPRESS)


def _counts(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _check(a) -> str | None:
    try:
        fns, cls = _counts(a.functions), _counts(a.clients)
    except ValueError:
        return f"--functions and --clients take comma-separated counts, got {a.functions!r}, {a.clients!r}"
    if not fns or min(fns) < 1 or max(fns) > 2000 or 1 not in fns or (cls and (min(cls) < 1 or max(cls) > 65536)):
        return "--functions: counts in 1..2000 including 1 (the base); --clients: counts in 1..65536"
    if a.rounds < 2 or a.calls < 100:
        return "--rounds 2 or more; --calls 100 or more"
    return None


def _key(cell: tuple) -> str:
    if cell[0] == "clients":
        return f"{cell[1]} clients"
    if len(cell) > 3:
        return f"{cell[1]} functions (max_batch {cell[3]})"
    return f"{cell[1]} functions" + ("" if cell[2] else " (one busy)")


def run(a) -> dict:
    from splitrpc.loadgen.reporting import command_of

    fns, cls = _counts(a.functions), sorted(_counts(a.clients))
    # N functions with the load spread over all; the most registered with the load on one; M clients
    cells = [("functions", n, True) for n in fns] + ([("functions", max(fns), False)] if max(fns) > 1 else []) \
        + ([("functions", 1, True, 1)] if a.batch_one else []) + [("clients", m) for m in cls]
    runs: dict = {_key(c): [] for c in cells}
    for rnd in range(a.rounds):
        for cell in (cells if rnd % 2 == 0 else cells[::-1]):
            r = measure(cell, a.calls)
            runs[_key(cell)].append(r)
            print(f"round {rnd + 1}/{a.rounds}: {_key(cell):>26s}  {r['calls/s']:10,.0f} calls/s  "
                  f"p50 {r['p50 us']:7.1f} µs  p99 {r['p99 us']:8.1f} µs  errors {r['errors']}  "
                  f"RSS {r['rss KiB'] / 1024:7.1f} -> {r['rss after KiB'] / 1024:7.1f} MiB", flush=True)
    bases = {"functions": runs[_key(("functions", 1, True))], "clients": runs[_key(("clients", cls[0]))] if cls else []}
    table = []
    for cell in cells:
        rs, base = runs[_key(cell)], bases[cell[0]]
        row = {"cell": _key(cell), "axis": cell[0], "count": cell[1]}
        for m in ("calls/s", "p50 us", "p99 us"):
            row[m] = sorted(r[m] for r in rs)[len(rs) // 2]
            row[f"{m} ratio"] = ratio_interval([r[m] for r in base], [r[m] for r in rs])
        row["errors"] = sum(r["errors"] for r in rs)
        row["rss MiB"] = sorted(r["rss after KiB"] for r in rs)[len(rs) // 2] / 1024
        table.append(row)
    rss = {r["cell"]: r["rss MiB"] for r in table}
    n_max = max(fns)
    per_fn = (rss[_key(("functions", n_max, True))] - rss[_key(("functions", 1, True))]) * 1024 / (n_max - 1) \
        if n_max > 1 else None
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
            "machine": describe(), "rounds": a.rounds, "calls": a.calls, "concurrency": CONCURRENCY,
            "table": table, "kib_per_function": per_fn, "runs": runs}


def markdown(doc: dict) -> str:
    f = lambda r: "-" if r["ratio"] is None else f"{r['ratio']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"  # noqa: E731
    lines = ["# Cost as functions and clients grow", "",
             f"- date: {doc['date']}", f"- command: `{doc['command']}`", f"- machine: {doc['machine']}",
             f"- {doc['rounds']} rounds, cells alternated; per cell a fresh `wait=poll` server with N vecadd "
             f"functions (1 KiB in and out, default queues); {doc['concurrency']} calls outstanding; "
             f"{doc['calls']:,} calls after a tenth as many to warm up; loopback",
             "- functions: one busy-polling splitrpc client (native load generator), the calls spread uniformly "
             "over the N functions ('one busy': all on one of the N registered); the warm-up is at least 1.5 "
             "rings' worth of calls per function, so that every element has been used (steady state)",
             "- clients: one vecadd function, each call sent from the next of M client sockets in turn (the "
             "many-socket closed loop, one thread busy-polling epoll)",
             "- 'max_batch 1': one function whose batches are one call each, as the load spread over many "
             "functions makes them: the ratio of the spread cell over it is what the functions themselves cost",
             f"- ratios: the median over the axis's base cell's (1 function; the fewest clients), bootstrap 95% "
             f"interval ({RESAMPLES:,} resamples)",
             "", "| cell | calls/s | ratio | p50 µs | ratio | p99 µs | ratio | errors | server RSS after, MiB |",
             "|---|---:|---|---:|---|---:|---|---:|---:|"]
    for r in doc["table"]:
        lines.append(f"| {r['cell']} | {r['calls/s']:,.0f} | {f(r['calls/s ratio'])} | {r['p50 us']:.1f} | "
                     f"{f(r['p50 us ratio'])} | {r['p99 us']:.1f} | {f(r['p99 us ratio'])} | {r['errors']} | "
                     f"{r['rss MiB']:.1f} |")
    if doc["kib_per_function"] is not None:
        lines += ["", f"Memory per function (default queues, 1 KiB in and out): {doc['kib_per_function']:,.0f} KiB "
                  "of resident set (the most functions' RSS after their run less the one-function server's, over "
                  "the functions added)."]
    lines += ["", "Rounds (JSON):", "", "```", json.dumps(doc["runs"]), "```", ""]
    return "\n".join(lines)


def cmd_scale(a) -> int:
    from splitrpc.loadgen.reporting import run_suite

    name = os.path.basename(a.out or "").removesuffix(".md")
    return run_suite(a, name=name, who="scale", run=run, markdown=markdown, check=_check, echo=True,
                     out=os.path.dirname(a.out or "") or ".", write=bool(a.out))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--serve"]:
        serve(int(args[1]), int(args[2]), int(args[3]) if len(args) > 3 else 0)
        return 0
    from splitrpc.loadgen.reporting import run_as_module

    return run_as_module("splitrpc.bench.suites.scale", __doc__, _arguments, cmd_scale, argv)


if __name__ == "__main__":
    sys.exit(main())
