"""protocol_ab.py: what a wire protocol version costs end to end: one server, `splitrpc load` with one version and then another in alternated order each round, per service and concurrency; each version's median p50, p99 and calls/s over the rounds, and B's median p50 over A's with a bootstrap 95% interval.

    python -m splitrpc.bench.suites.protocol_ab --a 2 --b 3 --services vecadd,head --concurrency 1,16 \\
        --rounds 7 --out bench/results/protocol_v3

Client and server share the machine (loopback, the server in poll mode, the client busy-polling),
as in bench/results/protocol_v2.md. A difference is claimed only where the interval excludes 1.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

from splitrpc.bench.helpers.intervals import RESAMPLES, ratio_interval
from splitrpc.bench.helpers.procs import free_port
from splitrpc.machine import describe
from splitrpc.reporting import SuiteFailed, command_of, run_as_module, run_suite


def _load(exe: str, port: int, service: str, conc: int, calls: int, proto: int, out: str) -> dict:
    cmd = [exe, "load", "--port", str(port), "--service", service, "--concurrency", str(conc), "--calls", str(calls),
           "--protocol", str(proto), "--busy-poll", "--out", out, "--no-plots", "--quiet"]
    p = subprocess.run(cmd, text=True, capture_output=True)
    if p.returncode:
        raise SuiteFailed(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    with open(os.path.join(out, "report.json")) as f:
        run = json.load(f)["runs"][0]
    if run["errors"] or run["invalid"] or run["timeouts"]:
        raise SuiteFailed(f"{' '.join(cmd)}: {run['errors']} errors, {run['invalid']} invalid, "
                          f"{run['timeouts']} timeouts")
    return {"p50_us": run["latency_us"]["p50"], "p99_us": run["latency_us"]["p99"], "rps": run["achieved_rps"]}


def _median(v):
    v = sorted(v)
    n = len(v)
    return (v[n // 2] + v[(n - 1) // 2]) / 2 if n else None


def run(a) -> dict:
    exe = a.splitrpc
    port = free_port()
    srv = subprocess.Popen([exe, "serve", "--port", str(port), "--wait", "poll"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    runs = []
    try:
        time.sleep(1.5)
        if srv.poll() is not None:
            raise SuiteFailed(f"the server exited: {srv.stderr.read()[-500:]}")
        services, concs = a.services.split(","), [int(c) for c in a.concurrency.split(",")]
        protos = (a.a, a.b)
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(a.rounds):
                order = protos if r % 2 == 0 else protos[::-1]
                for svc in services:
                    for conc in concs:
                        for proto in order:
                            where = os.path.join(tmp, f"{svc}-{conc}-{proto}-{r}")
                            m = _load(exe, port, svc, conc, a.calls, proto, where)
                            runs.append({"round": r, "service": svc, "concurrency": conc, "protocol": proto, **m})
                print(f"round {r + 1}/{a.rounds} done", flush=True)
    finally:
        srv.terminate()
        srv.wait(10)
    return {"machine": describe(), "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": command_of(a), "a": a.a, "b": a.b, "rounds": a.rounds, "calls": a.calls, "runs": runs,
            "cells": cells(runs, a.a, a.b)}


def cells(runs: list[dict], pa: int, pb: int) -> list[dict]:
    out = []
    for svc, conc in sorted({(x["service"], x["concurrency"]) for x in runs}, key=lambda k: (k[0], k[1])):
        side = {p: [x for x in runs if x["service"] == svc and x["concurrency"] == conc and x["protocol"] == p]
                for p in (pa, pb)}
        cell = {"service": svc, "concurrency": conc}
        for p, rs in side.items():
            cell[str(p)] = {k: _median([x[k] for x in rs]) for k in ("p50_us", "p99_us", "rps")}
            cell[str(p)]["p50_rounds"] = [round(x["p50_us"], 2) for x in rs]
        cell["p50_ratio"] = ratio_interval([x["p50_us"] for x in side[pa]], [x["p50_us"] for x in side[pb]])
        cell["rps_ratio"] = ratio_interval([x["rps"] for x in side[pa]], [x["rps"] for x in side[pb]])
        out.append(cell)
    return out


def report(doc: dict) -> str:
    pa, pb = doc["a"], doc["b"]
    lines = [f"# Protocol version {pb} against version {pa}: the end-to-end cost", "",
             f"Machine: {doc['machine']}; {doc['started']}. Client and server share it (loopback, server "
             "`--wait poll`, client `--busy-poll`).", "",
             "```sh", doc["command"], "```", "",
             f"{doc['rounds']} rounds of {doc['calls']:,} closed-loop calls per cell, the two versions in alternated "
             f"order each round. Interval: bootstrap 95% of the ratio of medians ({RESAMPLES:,} resamples).", "",
             f"| service | C | v{pa} p50 µs (rounds) | v{pb} p50 µs (rounds) | v{pb}/v{pa} p50 [95%] | "
             f"v{pa} calls/s | v{pb} calls/s | v{pb}/v{pa} calls/s [95%] |",
             "|---|---:|---|---|---|---:|---:|---|"]
    for c in doc["cells"]:
        def fmt(r):
            return "n/a" if r["ratio"] is None else f"{r['ratio']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"
        a, b = c[str(pa)], c[str(pb)]
        ra, rb = ", ".join(map(str, a["p50_rounds"])), ", ".join(map(str, b["p50_rounds"]))
        lines.append(f"| {c['service']} | {c['concurrency']} | {a['p50_us']:.1f} ({ra}) "
                     f"| {b['p50_us']:.1f} ({rb}) | {fmt(c['p50_ratio'])} | "
                     f"{a['rps']:,.0f} | {b['rps']:,.0f} | {fmt(c['rps_ratio'])} |")
    return "\n".join(lines) + "\n"


def _arguments(p) -> None:
    p.add_argument("--a", type=int, default=2, help="the baseline protocol version")
    p.add_argument("--b", type=int, default=3, help="the version compared with it")
    p.add_argument("--services", default="vecadd,head")
    p.add_argument("--concurrency", default="1,16")
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--splitrpc", default=os.path.join(os.path.dirname(sys.executable), "splitrpc"),
                   help="the splitrpc command of the server and the load (default: beside this Python)")
    p.add_argument("--out", required=True, help="the folder of ab.json and ab.md")
    p.add_argument("--from-json", metavar="AB.json", help="no runs: the report again from an earlier ab.json")


def _run_or_load(a) -> dict:
    if a.from_json:
        with open(a.from_json) as f:
            return json.load(f)
    return run(a)


def cmd_protocol_ab(a) -> int:
    return run_suite(a, name="ab", who="protocol_ab", run=_run_or_load, markdown=report, echo=True)


def main(argv: list[str] | None = None) -> int:
    return run_as_module("splitrpc.bench.suites.protocol_ab", __doc__, _arguments, cmd_protocol_ab, argv)


if __name__ == "__main__":
    sys.exit(main())
