"""indep.py: `splitrpc bench indep`: splitrpc and the minimal C server of the protocol measured by a client neither was tuned for (bench/clients/indep_client.c, written from docs/PROTOCOL.md alone): blocking and spinning, 1 and 16 calls outstanding, systems alternated over rounds, a bootstrap interval for each target ratio, and each server's cost per call (CPU, system calls, context switches)."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import time
from datetime import datetime, timezone

import numpy as np

from splitrpc.bench.helpers import indep_client
from splitrpc.bench.helpers.intervals import ratio_interval
from splitrpc.bench.helpers.procs import Proc, ServerDied, start_min, start_splitrpc
from splitrpc.loadgen.load_cli import comma_list
from splitrpc.loadgen.reporting import SuiteFailed, command_of, run_suite

# system -> how it is served: the minimal C server (busy or blocking), or `splitrpc serve` with a
# --wait mode, the built-ins in Python or as native functions (splitrpc.native).
SYSTEMS = {
    "c-min-busy": ("min", "1"), "c-min-block": ("min", "0"),
    "splitrpc-poll": ("serve", "poll"), "splitrpc-adaptive": ("serve", "adaptive"), "splitrpc-block": ("serve", "block"),
    "native-poll": ("native", "poll"), "native-block": ("native", "block"),
}
NATIVE_MODULE = "splitrpc.bench.helpers.native_server:register"
# cell -> (client mode, calls outstanding)
CELLS = {"block16": ("block", 16), "spin16": ("spin", 16), "spin1": ("spin", 1), "block1": ("block", 1)}
# The targets of issue 51: (what, cell, system, baseline(s), statistic, bound, higher is better).
# A baseline list: the better of them in that cell (by median).
TARGETS = (
    ("blocking client, 16 outstanding: splitrpc (default wait) vs the C server's best mode", "block16",
     "splitrpc-adaptive", ("c-min-busy", "c-min-block"), "calls_per_s", 1.0, True),
    ("blocking client, 16 outstanding: splitrpc --wait block vs the C server blocking", "block16",
     "splitrpc-block", ("c-min-block",), "calls_per_s", 1.0, True),
    ("spinning client, 16 outstanding: splitrpc --wait poll vs the C server busy", "spin16",
     "splitrpc-poll", ("c-min-busy",), "calls_per_s", 1.1, True),
    ("spinning client, 1 outstanding, p50: splitrpc --wait poll (Python callback) vs the C server busy", "spin1",
     "splitrpc-poll", ("c-min-busy",), "p50_us", 1.2, False),
    ("spinning client, 1 outstanding, p50: native function, poll vs the C server busy", "spin1",
     "native-poll", ("c-min-busy",), "p50_us", 1.1, False),
    ("spinning client, 1 outstanding, p99: splitrpc --wait poll vs the C server busy", "spin1",
     "splitrpc-poll", ("c-min-busy",), "p99_us", 1.5, False),
)
PERF_EVENTS = ("raw_syscalls:sys_enter", "syscalls:sys_enter_recvmmsg", "syscalls:sys_enter_sendmmsg",
               "context-switches")


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("indep", help="splitrpc vs the minimal C server, measured by an independent client",
                       description=__doc__)
    p.add_argument("--systems", type=comma_list(str, positive=False), default=list(SYSTEMS),
                   help=f"from {','.join(SYSTEMS)}")
    p.add_argument("--cells", type=comma_list(str, positive=False), default=list(CELLS),
                   help=f"client mode and calls outstanding, from {','.join(CELLS)}")
    p.add_argument("--rounds", type=int, default=5, help="rounds, systems alternated (reversed every other round)")
    p.add_argument("--calls", type=int, default=100000, help="measured calls per run at 16 outstanding (a quarter "
                                                             "at 1)")
    p.add_argument("--base", default=None, metavar="DIR",
                   help="also run the splitrpc systems from an older build: DIR holds its installed splitrpc "
                        "package (put on PYTHONPATH); they are named base:SYSTEM")
    p.add_argument("--client", default=None,
                   help=f"the client binary (default: the installed one, or ${indep_client.CLIENT_ENV})")
    p.add_argument("--out", default="splitrpc-bench-indep")
    p.set_defaults(func=cmd_indep)
    return p


def _start(system: str, base: str | None) -> tuple[Proc, int]:
    kind, arg = SYSTEMS[system.split(":", 1)[-1]]
    env = {**os.environ, "PYTHONPATH": os.path.abspath(base or "")} if system.startswith("base:") else None
    if kind == "min":
        return start_min(arg == "1", env=env)
    return start_splitrpc(arg, (NATIVE_MODULE,) if kind == "native" else (), env=env)


def _ticks(stat_path: str) -> int:
    """utime + stime in a /proc stat file, in clock ticks."""
    with open(stat_path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _cpu_ticks(pid: int) -> int:
    """The whole process's CPU time, in clock ticks."""
    return _ticks(f"/proc/{pid}/stat")


def _thread_ticks(pid: int) -> dict[int, int]:
    """Each of the process's threads' CPU time, in clock ticks."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[int(tid)] = _ticks(f"/proc/{pid}/task/{tid}/stat")
        except OSError:  # a thread that ended meanwhile
            continue
    return out


def _busy_threads(before: dict[int, int], after: dict[int, int], seconds: float) -> list[float]:
    """Each thread's share of a core over the run, highest first (those above 5%)."""
    hz = os.sysconf("SC_CLK_TCK")
    shares = sorted(((after[t] - before.get(t, 0)) / hz / seconds for t in after), reverse=True)
    return [round(x, 2) for x in shares if x > 0.05]


class _PerfCounts:
    """perf stat on the server process for the length of one run: its system calls (all; receives;
    sends) and context switches; empty where perf is missing or not allowed."""

    def __init__(self, pid: int, path: str):
        self.path, self.p = path, None
        if os.path.exists(path):
            os.remove(path)  # never an earlier run's counts
        if shutil.which("perf"):
            self.p = subprocess.Popen(["perf", "stat", "-x,", "-o", path, "-e", ",".join(PERF_EVENTS), "-p", str(pid)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)  # attached before the run begins

    def stop(self) -> dict:
        if self.p is None:
            return {}
        self.p.send_signal(2)
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return {}
        out = {}
        try:
            for line in open(self.path):
                parts = line.strip().split(",")
                if len(parts) > 2 and parts[0][:1].isdigit():
                    out[parts[2]] = float(parts[0])
        except OSError:
            return {}
        return out


def _measure(system: str, a, path: str, tmp: str) -> dict:
    """Every cell of one system on one server: the client's figures and the server's cost per call."""
    proc, port = _start(system, a.base)
    cells = {}
    try:
        proc.wait_until(lambda: indep_client.run(path, port, "block", 1, 10, 0), f"{system} server")
        for cell in a.cells:
            mode, outstanding = CELLS[cell]
            calls = a.calls if outstanding > 1 else max(a.calls // 4, 1000)
            t0 = _cpu_ticks(proc.p.pid)  # CPU over perf's window: the run and ~0.3 s before it
            perf = _PerfCounts(proc.p.pid, os.path.join(tmp, "perf.txt"))
            th0, w0 = _thread_ticks(proc.p.pid), time.monotonic()
            try:
                d = indep_client.run(path, port, mode, outstanding, calls, max(calls // 20, 500))
            except (RuntimeError, subprocess.TimeoutExpired) as e:  # this cell only: the others stand
                proc.check_alive()
                perf.stop()
                cells[cell] = {"failed": str(e)}
                print(f"  {system:22s} {cell:8s} failed: {e}", flush=True)
                continue
            finally:
                ticks = _cpu_ticks(proc.p.pid) - t0
                threads = _busy_threads(th0, _thread_ticks(proc.p.pid), time.monotonic() - w0)
            counts = perf.stop()
            n = max(d["ok"], 1)
            # The server's counters cover the warm-up and perf's attach time too: per call of the
            # whole run, client calls included (ok + warm-up), as a rate, not an exact count.
            whole = n + d.get("warmup", 0)
            cost = {"server_cpu_us": ticks / os.sysconf("SC_CLK_TCK") * 1e6 / whole}
            if counts:
                cost.update(server_syscalls=counts.get("raw_syscalls:sys_enter", 0) / whole,
                            server_recvmmsg=counts.get("syscalls:sys_enter_recvmmsg", 0) / whole,
                            server_sendmmsg=counts.get("syscalls:sys_enter_sendmmsg", 0) / whole,
                            server_ctx=counts.get("context-switches", 0) / whole)
            cost.update(client_ctx=(d["ctx_vol"] + d["ctx_invol"]) / n,
                        client_cpu_us=(d["cpu_user_s"] + d["cpu_sys_s"]) * 1e6 / n,
                        busy_threads=len(threads))
            cells[cell] = {k: d[k] for k in ("calls_per_s", "p50_us", "p99_us", "errors", "lost", "resends")} | cost
            cells[cell]["thread_cores"] = threads  # not a median: each run's own
            print(f"  {system:22s} {cell:8s} {d['calls_per_s']:10,.0f} calls/s  p50 {d['p50_us']:7.1f} µs  "
                  f"p99 {d['p99_us']:7.1f} µs  server {cost['server_cpu_us']:5.1f} µs CPU/call"
                  + (f", {cost['server_syscalls']:.1f} syscalls, {cost['server_ctx']:.2f} switches" if counts else ""),
                  flush=True)
    finally:
        proc.stop()
    return cells


def _targets(runs: dict, systems: list[str]) -> list[dict]:
    out = []
    for what, cell, system, bases, stat, bound, higher in TARGETS:
        if system not in systems or not all(b in systems for b in bases):
            continue
        vals = {s: [r[stat] for r in _cell_runs(runs[s], cell)] for s in (system, *bases)}
        if not vals[system]:
            continue
        # The baseline: the better of its systems by median (for throughput the higher).
        pick = max if higher else min
        base = pick(bases, key=lambda b: float(np.median(vals[b])) if vals[b] else (-1 if higher else 1e18))
        iv = ratio_interval(vals[base], vals[system])
        met = None
        if iv["lo"] is not None:
            met = iv["lo"] >= bound if higher else iv["hi"] <= bound
        out.append({"target": what, "cell": cell, "system": system, "baseline": base, "statistic": stat,
                    "bound": bound, "higher_is_better": higher, **iv, "met": met})
    return out


def _cell_runs(rounds: list[dict], cell: str) -> list[dict]:
    """The rounds' results of one cell, those that failed left out."""
    return [r[cell] for r in rounds if cell in r and "failed" not in r[cell]]


def _medians(rounds: list[dict], cells: list[str]) -> dict:
    """Each cell's median over the rounds of every figure (each run's own thread list left out)."""
    out = {}
    for c in cells:
        runs = _cell_runs(rounds, c)
        if runs:
            out[c] = {k: float(np.median([r[k] for r in runs])) for k in runs[0] if k != "thread_cores"}
    return out


def run(a) -> dict:
    path = indep_client.client_path(a.client)
    # The older build's splitrpc systems (its native functions only where it has them).
    has_native = bool(a.base) and os.path.exists(os.path.join(a.base, "splitrpc", "native.py"))
    systems = list(a.systems) + ([f"base:{s}" for s in a.systems
                                  if SYSTEMS[s][0] == "serve" or (SYSTEMS[s][0] == "native" and has_native)]
                                 if a.base else [])
    runs: dict[str, list[dict]] = {s: [] for s in systems}
    tmp = os.path.join(a.out, ".tmp")
    os.makedirs(tmp, exist_ok=True)
    t0 = time.monotonic()
    for rnd in range(a.rounds):
        order = systems if rnd % 2 == 0 else systems[::-1]
        print(f"round {rnd + 1}/{a.rounds} ({time.monotonic() - t0:.0f} s)", flush=True)
        for s in order:
            try:
                runs[s].append(_measure(s, a, path, tmp))
            except (ServerDied, RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"  {s}: failed: {e}", flush=True)
                runs[s].append({"failed": str(e)})
    shutil.rmtree(tmp, ignore_errors=True)
    medians = {s: _medians(rs, a.cells) for s, rs in runs.items()}
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
            "client": {"path": path, "source": f"bench/clients/{indep_client.CLIENT_SRC}",
                       "discipline": indep_client.DISCIPLINE},
            "cpus": os.cpu_count(), "rounds": a.rounds, "calls": a.calls, "cells": {c: CELLS[c] for c in a.cells},
            "systems": systems, "runs": runs, "medians": medians, "targets": _targets(runs, systems),
            "seconds": round(time.monotonic() - t0, 1)}


def markdown(doc: dict) -> str:
    lines = [f"# Independent client: splitrpc vs the minimal C server ({doc['date']})", "",
             f"`{doc['command']}`: {doc['rounds']} rounds, systems alternated, {doc['cpus']} CPUs, loopback; "
             f"client {doc['client']['source']} ({doc['client']['discipline']}). Medians over rounds; server cost per "
             "call, warm-up included, over perf's window (the run and about 0.3 s before it, while perf attaches), from "
             "/proc (CPU) and perf stat (system calls, context switches; all of the server's threads): a busy-polling "
             "server's CPU and receives per call are mostly its idle spinning (one core / throughput), a blocking "
             "server's are its work. Client context switches from its getrusage. Server threads busy: those above 5% of a core "
             "over the run (median over rounds).", ""]
    lines += ["| system | cell | calls/s | p50 µs | p99 µs | server CPU µs/call | syscalls/call | recvmmsg/call | "
              "sendmmsg/call | server switches/call | client switches/call | server threads busy |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s, cells in doc["medians"].items():
        for c, m in cells.items():
            f = lambda k, fmt: format(m[k], fmt) if k in m else "n/a"  # noqa: E731 - a table cell
            lines.append(f"| {s} | {c} | {m['calls_per_s']:,.0f} | {m['p50_us']:.1f} | {m['p99_us']:.1f} | "
                         f"{m['server_cpu_us']:.2f} | {f('server_syscalls', '.2f')} | {f('server_recvmmsg', '.2f')} | "
                         f"{f('server_sendmmsg', '.2f')} | {f('server_ctx', '.3f')} | {m['client_ctx']:.3f} | "
                         f"{f('busy_threads', 'g')} |")
    lines += ["", "## Targets (issue 51): ratio of medians, bootstrap 95% interval; met only when the interval clears "
              "the bound", "", "| target | system / baseline | ratio | 95% interval | bound | met |", "|---|---|---:|---|---:|---|"]
    for t in doc["targets"]:
        r = "n/a" if t["ratio"] is None else f"{t['ratio']:.2f}"
        iv = "n/a" if t["lo"] is None else f"{t['lo']:.2f} - {t['hi']:.2f}"
        lines.append(f"| {t['target']} ({t['statistic']}) | {t['system']} / {t['baseline']} | {r} | {iv} | "
                     f"{'≥' if t['higher_is_better'] else '≤'} {t['bound']} | "
                     f"{'yes' if t['met'] else 'no' if t['met'] is False else 'n/a'} |")
    return "\n".join(lines) + "\n"


def plot(doc: dict, path: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [c for c in doc["cells"] if c.endswith("16")]
    systems = [s for s in doc["medians"] if any(c in doc["medians"][s] for c in cells)]
    if not cells or not systems:
        return []
    fig, ax = plt.subplots(figsize=(9, 4))
    w = 0.8 / len(systems)
    for i, s in enumerate(systems):
        ys = [doc["medians"][s].get(c, {}).get("calls_per_s", 0) / 1e3 for c in cells]
        ax.bar(np.arange(len(cells)) + i * w, ys, w, label=s)
    ax.set_xticks(np.arange(len(cells)) + 0.4 - w / 2, cells)
    ax.set_ylabel("kcalls/s (median)")
    ax.set_title("vecadd 1 KiB, independent client")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def _check(a) -> str | None:
    bad = [s for s in a.systems if s not in SYSTEMS] + [c for c in a.cells if c not in CELLS]
    if bad:
        return f"unknown system or cell: {', '.join(bad)}"
    if a.rounds < 1 or a.calls < 100:
        return "--rounds must be at least 1 and --calls at least 100"
    if a.base and not os.path.isdir(os.path.join(a.base, "splitrpc")):
        return f"--base {a.base}: no splitrpc package there"
    return None


def cmd_indep(a) -> int:
    return run_suite(a, name="indep", who="bench indep", run=run, markdown=markdown, plot=plot, check=_check,
                     errors=(SuiteFailed,), echo=True)
