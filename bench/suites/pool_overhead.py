"""pool_overhead.py: A/B of two installs in one run, each build's interpreter alternated round by round (A B, B A, ...), per metric B's median over A's with a bootstrap 95% interval: what handing a batch to an executor costs (--case pool: a 4-float function on executor=1, closed loop at concurrency 1 and 8 from one client on loopback), or the Python client's own paths (--case client: vecadd 1 KiB served inline, blocking Client.call one at a time, and 16 call_async futures outstanding).

    python bench/suites/pool_overhead.py --a main=/path/to/old-venv/bin/python --b new=.venv/bin/python \\
        --rounds 8 --out bench/results/pool_overhead.md
    python bench/suites/pool_overhead.py --case client --a main=... --b new=... --rounds 7 --out FILE.md

--one runs a single measurement in this interpreter and prints it as one JSON line (what each
round runs in a child process of the build's interpreter).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone

from splitrpc.bench.helpers.intervals import RESAMPLES, ratio_interval
from splitrpc.machine import describe

CALLS, WARMUP = 20000, 2000
CONCURRENCY = (1, 8)


def one() -> dict:
    import numpy as np

    import splitrpc
    from splitrpc import TensorSpec

    spec = [TensorSpec("x", "float32", (4,))]
    srv = splitrpc.Server("127.0.0.1", 0, wait="poll")
    srv.add_function(lambda x, y: np.copyto(y, x), 1, "pooled", spec, spec, executor=1)
    srv.start()
    out = {}
    try:
        with splitrpc.Client("127.0.0.1", srv.port, timeout=5.0, busy_poll=True) as c:
            x = np.zeros(4, np.float32).tobytes()
            for conc in CONCURRENCY:
                r = c.closed_loop(1, x, concurrency=conc, calls=CALLS, warmup=WARMUP)
                lat = r["latency_ns"][r["latency_ns"] > 0]
                out[f"c{conc} p50 us"] = float(np.median(lat)) / 1e3
                out[f"c{conc} calls/s"] = lat.size / r["elapsed_s"]
    finally:
        srv.close()
    return out


def one_client() -> dict:
    """The Python client's paths against vecadd (1 KiB) served inline: Client.call one at a time
    (p50 and calls/s), and call_async with 16 futures outstanding (calls/s)."""
    import time

    import numpy as np

    import splitrpc
    from splitrpc import TensorSpec

    spec_in, spec_out = [TensorSpec("x", "float32", (256,))], [TensorSpec("y", "float32", (256,))]
    def vecadd(x, y):
        np.add(x, np.float32(1), out=y)

    srv = splitrpc.Server("127.0.0.1", 0, wait="poll")
    srv.add_function(vecadd, 1, "vecadd", spec_in, spec_out)
    srv.start()
    out = {}
    try:
        with splitrpc.Client("127.0.0.1", srv.port, timeout=5.0, busy_poll=True) as c:
            x = np.arange(256, dtype=np.float32).tobytes()
            lat = np.empty(CALLS, np.int64)
            for i in range(WARMUP):
                c.call(1, x)
            t0 = time.perf_counter()
            for i in range(CALLS):
                t = time.perf_counter_ns()
                c.call(1, x)
                lat[i] = time.perf_counter_ns() - t
            out["call p50 us"] = float(np.median(lat)) / 1e3
            out["call calls/s"] = CALLS / (time.perf_counter() - t0)
            window = []
            t0 = time.perf_counter()
            for i in range(CALLS):
                window.append(c.call_async(1, x))
                if len(window) == 16:
                    window.pop(0).result()
            for f in window:
                f.result()
            out["async16 calls/s"] = CALLS / (time.perf_counter() - t0)
    finally:
        srv.close()
    return out


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--case", choices=("pool", "client"), default="pool",
                   help="pool: the executor hand-off (default); client: the Python client's paths")
    p.add_argument("--a", metavar="NAME=PYTHON", help="the baseline build: a name and its interpreter")
    p.add_argument("--b", metavar="NAME=PYTHON", help="the build compared with it")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--out", metavar="FILE.md", help="also write the report here, and its rounds as FILE.json")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)


def _check(a) -> str | None:
    """What is wrong with the arguments, or None."""
    if not a.a or not a.b or a.rounds < 2 or "=" not in a.a or "=" not in a.b:
        return "--a and --b name the two builds (NAME=PYTHON), --rounds 2 or more"
    return None


def run(a) -> dict:
    """--rounds rounds of one() in each build's interpreter, alternated, and B's medians over A's."""
    from splitrpc.loadgen.reporting import SuiteFailed, command_of

    builds = [tuple(s.split("=", 1)) for s in (a.a, a.b)]
    runs: dict = {name: [] for name, _ in builds}
    for rnd in range(a.rounds):
        for name, py in (builds if rnd % 2 == 0 else builds[::-1]):
            print(f"round {rnd + 1}/{a.rounds}: {name}", flush=True)
            try:
                r = subprocess.run([py, os.path.abspath(__file__), "--one", a.case], capture_output=True, text=True,
                                   cwd=tempfile.gettempdir(), timeout=300)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise SuiteFailed(f"{name}: the measurement failed: {e}") from e
            if r.returncode:
                raise SuiteFailed(f"{name}: the measurement failed:\n{r.stderr[-2000:]}")
            runs[name].append(json.loads(r.stdout.strip().splitlines()[-1]))
    (na, _), (nb, _) = builds
    table = []
    for k in runs[na][0]:
        va, vb = [r[k] for r in runs[na]], [r[k] for r in runs[nb]]
        med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
        table.append({"metric": k, "a_median": med(va), "b_median": med(vb), **ratio_interval(va, vb)})
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a), "case": a.case,
            "machine": describe(), "builds": dict(builds), "rounds": a.rounds, "calls": CALLS, "warmup": WARMUP,
            "table": table, "runs": runs}


def markdown(doc: dict) -> str:
    na, nb = list(doc["builds"])
    client = doc.get("case") == "client"
    what = ("vecadd 1 KiB served inline (wait=poll); blocking Client.call one at a time, then call_async "
            "with 16 futures outstanding; one client, loopback" if client else
            "a 4-float copy on executor=1, one client, loopback, wait=poll")
    lines = [f"# {'Python client paths' if client else 'Pool path'}: {na} vs {nb}", "",
             f"- date: {doc['date']}",
             f"- command: `{doc['command']}`",
             f"- machine: {doc['machine']}",
             f"- {doc['rounds']} rounds, builds alternated; {doc['calls']} calls per cell after {doc['warmup']} "
             f"warm-up; {what}",
             f"- {nb}/{na}: ratio of medians, bootstrap 95% interval ({RESAMPLES:,} resamples of the rounds)", "",
             f"| metric | {na} | {nb} | {nb}/{na} | 95% interval |", "|---|---:|---:|---:|---|"]
    for r in doc["table"]:
        lines.append(f"| {r['metric']} | {r['a_median']:,.1f} | {r['b_median']:,.1f} | {r['ratio']:.3f} | "
                     f"[{r['lo']:.3f}, {r['hi']:.3f}] |")
    lines += ["", "Rounds (JSON):", "", "```", json.dumps(doc["runs"]), "```", ""]
    return "\n".join(lines)


def cmd_pool_overhead(a) -> int:
    from splitrpc.loadgen.reporting import run_suite

    # --out FILE.md: the report there and FILE.json beside it; without it, the report printed only
    name = os.path.basename(a.out or "").removesuffix(".md")
    return run_suite(a, name=name, who="pool_overhead", run=run, markdown=markdown, check=_check, echo=True,
                     out=os.path.dirname(a.out or "") or ".", write=bool(a.out))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--one" in args:
        # a round's child, in the build's own interpreter: nothing beyond this module's imports, so that
        # an older build (one without splitrpc.loadgen.reporting's latest) can be measured
        print(json.dumps(one_client() if "client" in args else one()))
        return 0
    from splitrpc.loadgen.reporting import run_as_module

    return run_as_module("splitrpc.bench.suites.pool_overhead", __doc__, _arguments, cmd_pool_overhead, argv)


if __name__ == "__main__":
    sys.exit(main())
