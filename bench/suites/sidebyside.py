"""sidebyside.py: `splitrpc bench sidebyside`: the same services served by splitrpc, grpcio, pyzmq,
Triton (PyTriton), the in-process callback, the raw-UDP limit and the minimal C server of the
protocol, measured in one run; writes a markdown + JSON table and PNG plots."""
from __future__ import annotations

import argparse
import os
import subprocess
import time
from datetime import datetime, timezone

import numpy as np

from splitrpc.bench.helpers import indep_client, systems
from splitrpc.bench.helpers.procs import ServerDied, start_min, start_raw, start_splitrpc
from splitrpc.bench.helpers.systems import MIN_SERVICES, PEERS, SYSTEMS, Result
from splitrpc.loadgen import report
from splitrpc.loadgen.load_cli import comma_list
from splitrpc.loadgen.reporting import SuiteFailed, command_of, run_suite

SERVICES = ("vecadd", "head", "matmul", "echo")


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("sidebyside", help="side-by-side benchmark: splitrpc vs grpcio, pyzmq, Triton, raw UDP",
                       description=__doc__)
    p.add_argument("--systems", type=comma_list(str, positive=False), default=list(SYSTEMS),
                   help=f"from {','.join(SYSTEMS)}")
    p.add_argument("--services", type=comma_list(str, positive=False), default=list(SERVICES))
    p.add_argument("--concurrency", type=comma_list(int, positive=False), default=[1, 16, 32])
    p.add_argument("--calls", type=int, default=20000, help="recorded calls per run of a fast system and a 1-8 KiB "
                                                            "service (head: a tenth; Python peers: a tenth of that)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, systems interleaved; tables quote medians")
    p.add_argument("--rates", type=comma_list(float, positive=False), default=[1000, 5000, 20000, 50000, 100000, 200000],
                   help="open-loop sweep (vecadd) for splitrpc and grpc-asyncio, calls/s")
    p.add_argument("--sweep-s", type=float, default=2.0, help="seconds per open-loop rate")
    p.add_argument("--segment-size", type=int, default=None,
                   help="splitrpc's and c-min's client: request segment size in bytes (default: by destination, "
                        "65000 on loopback; 8950 is a jumbo frame's); raw UDP cuts at 65000 whatever this says")
    p.add_argument("--no-indep", dest="indep", action="store_false",
                   help="leave out the rows of the independent client (bench/clients/indep_client.c: vecadd on "
                        "the protocol's servers, spinning against busy ones, blocking against blocking ones)")
    p.add_argument("--out", default="splitrpc-bench")
    p.set_defaults(func=cmd_bench)
    return p


def _calls(system: str, service: str, calls: int) -> int:
    n = calls if service != "head" else max(calls // 10, 100)
    if system in PEERS:
        n = max(n // 10, 100 if service != "head" else 50)
    return n


def _say(r: Result) -> None:
    key = f"c={r.concurrency}" if r.concurrency else f"{r.offered_rps or 0:,.0f}/s"
    if r.status.startswith(("unavailable", "failed")):
        print(f"  {r.system:15s} {r.service:7s} {key:>10s}  {r.status}", flush=True)
        return
    print(f"  {r.system:15s} {r.service:7s} {key:>10s}  p50 {r.p50_us:10.1f} µs  p99 {r.p99_us:10.1f} µs  "
          f"{r.throughput_rps or 0:12,.0f} calls/s  errors {r.errors} invalid {r.invalid}", flush=True)


def _failed(system: str, service: str, conc, why: str) -> Result:
    return Result(system, service, conc, status=f"failed: {why}")


def _indep_rows(system: str, port: int, busy: bool, a, add) -> None:
    """vecadd on the same server again, measured by the independent client (written from the
    protocol page alone; spinning against a busy server, blocking against a blocking one): rows
    SYSTEM+indep, so that no claim rests on the project's own client alone."""
    name = f"{system}+indep"
    try:
        path = indep_client.client_path()
    except SuiteFailed as e:
        add(Result(name, "vecadd", None, status=f"unavailable: {e}"))
        return
    for conc in a.concurrency:
        n = _calls(system, "vecadd", a.calls)
        try:
            d = indep_client.run(path, port, "spin" if busy else "block", conc, n, max(n // 10, 10))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            add(_failed(name, "vecadd", conc, str(e)))
            continue
        add(Result(name, "vecadd", conc, calls=d["calls"], ok=d["ok"], errors=d["errors"] + d["lost"],
                   p50_us=d["p50_us"], p99_us=d["p99_us"], throughput_rps=d["calls_per_s"]))


def _measure_system(system: str, a, out: list[Result]) -> None:
    """All services and concurrencies of one system, one server per service (splitrpc: one)."""
    def add(r: Result) -> None:
        out.append(r)
        _say(r)

    if system == "splitrpc-local":
        for svc in a.services:
            add(systems.local_callback(svc, _calls(system, svc, a.calls)))
        return
    if system in PEERS:
        ok, why = systems.peer_available(system)
        if not ok:
            for svc in a.services:
                add(Result(system, svc, None, status=f"unavailable: {why}"))
            return
    if system.startswith(("splitrpc", "c-min")):  # servers of the protocol, called by splitrpc's native client
        busy = system.endswith(("poll", "busy"))
        proc, port = start_splitrpc(system.split("-")[1]) if system.startswith("splitrpc") else start_min(busy)
        try:
            with systems.splitrpc_client(port, busy=busy, segment_size=a.segment_size) as c:
                proc.wait_until(lambda: c.call(1, systems.request_for("vecadd")[0], timeout=0.2), f"{system} server")
                for svc in a.services:
                    if system.startswith("c-min") and svc not in MIN_SERVICES:
                        add(Result(system, svc, None, status=f"unavailable: serves {', '.join(MIN_SERVICES)} only"))
                        continue
                    for conc in a.concurrency:
                        add(systems.splitrpc_run(c, system, svc, conc, _calls(system, svc, a.calls)))
                if getattr(a, "indep", True) and "vecadd" in a.services:
                    _indep_rows(system, port, busy, a, add)
        except ServerDied as e:
            add(_failed(system, "*", None, str(e)))
        finally:
            proc.stop()
        return
    for svc in a.services:
        try:
            if system.startswith("raw-udp"):
                proc, port = start_raw(system.endswith("busy"), *systems.raw_sizes(svc))
            else:
                proc, port = systems.start_peer(system, svc)
        except ServerDied as e:
            add(_failed(system, svc, None, str(e)))
            continue
        try:
            for conc in a.concurrency:
                n = _calls(system, svc, a.calls)
                try:
                    if system.startswith("raw-udp"):
                        add(systems.raw_run(proc, port, svc, system.endswith("busy"), conc, n))
                    else:
                        add(systems.peer_run(system, svc, port, conc, n))
                except (ServerDied, OSError, ValueError) as e:
                    add(_failed(system, svc, conc, str(e)))
        finally:
            proc.stop()


def _median_table(results: list[Result]) -> list[dict]:
    """One row per (system, service, concurrency): medians over rounds of p50, p99, throughput."""
    groups: dict[tuple, list[Result]] = {}
    for r in results:
        if r.offered_rps is None:
            groups.setdefault((r.system, r.service, r.concurrency), []).append(r)
    rows = []
    for (system, service, conc), rs in groups.items():
        good = [r for r in rs if r.p50_us is not None]
        med = (lambda k: float(np.median([getattr(r, k) for r in good if getattr(r, k) is not None]))
               if any(getattr(r, k) is not None for r in good) else None)
        rows.append({"system": system, "service": service, "concurrency": conc, "rounds": len(good),
                     "p50_us": med("p50_us"), "p99_us": med("p99_us"), "throughput_rps": med("throughput_rps"),
                     "errors": sum(r.errors for r in rs), "invalid": sum(r.invalid for r in rs),
                     "status": next((r.status for r in rs if r.status != "ok"), "ok")})
    return rows


def _row(rows, system, service, conc=1):
    return next((r for r in rows if r["system"] == system and r["service"] == service and r["concurrency"] == conc
                 and r["p50_us"] is not None), None)


def _targets(rows: list[dict]) -> list[dict]:
    """The issue's acceptance targets, each with its measured value or why it is missing."""
    def ratio(a, b, key="p50_us"):
        return (a[key] / b[key]) if a and b and a.get(key) and b.get(key) else None

    sp, raw = _row(rows, "splitrpc-poll", "vecadd"), _row(rows, "raw-udp-busy", "vecadd")
    grpc = _row(rows, "grpc-sync", "vecadd") or _row(rows, "grpc-asyncio", "vecadd")
    sp16, raw16 = _row(rows, "splitrpc-poll", "vecadd", 16), _row(rows, "raw-udp-busy", "vecadd", 16)
    hp, hraw = _row(rows, "splitrpc-poll", "head"), _row(rows, "raw-udp-busy", "head")
    cmin, cmin16, hmin = (_row(rows, "c-min-busy", "vecadd"), _row(rows, "c-min-busy", "vecadd", 16),
                          _row(rows, "c-min-busy", "head"))
    t = [("vecadd p50 / busy-poll raw-UDP p50", ratio(sp, raw), "<=", 2.0),
         ("grpcio vecadd p50 / splitrpc vecadd p50", ratio(grpc, sp), ">=", 30.0),
         ("splitrpc / raw-UDP vecadd throughput at concurrency 16", ratio(sp16, raw16, "throughput_rps"), ">=", 0.5),
         ("head p50 / busy-poll raw-UDP p50 (same bytes)", ratio(hp, hraw), "<=", 1.5),
         # issue 34's bars: splitrpc ahead of the minimal C server of the protocol, tails near the wire
         ("splitrpc / minimal C server vecadd throughput at concurrency 16", ratio(sp16, cmin16, "throughput_rps"),
          ">=", 1.2),
         ("splitrpc / raw-UDP vecadd throughput at concurrency 16 (issue 34)", ratio(sp16, raw16, "throughput_rps"),
          ">=", 1.0),
         ("vecadd p50 / busy-poll raw-UDP p50 (issue 34)", ratio(sp, raw), "<=", 1.2),
         ("vecadd p99 / busy-poll raw-UDP p99", ratio(sp, raw, "p99_us"), "<=", 1.5),
         ("vecadd p50 / minimal C server p50", ratio(sp, cmin), "<=", 1.0),
         ("head p50 / minimal C server p50 (the client's segment size)", ratio(hp, hmin), "<=", 1.1)]
    return [{"target": name, "value": v, "op": op, "bound": b,
             "met": None if v is None else (v <= b if op == "<=" else v >= b)} for name, v, op, b in t]


def _open_sweep(a, out: list[Result]) -> None:
    if "splitrpc-poll" in a.systems and "vecadd" in a.services:
        proc, port = start_splitrpc("poll")
        try:
            with systems.splitrpc_client(port, busy=True) as c:  # as in the closed loop: the client spins
                proc.wait_until(lambda: c.call(1, systems.request_for("vecadd")[0], timeout=0.2), "splitrpc server")
                for rate in a.rates:
                    r = systems.splitrpc_open(c, "splitrpc-poll", "vecadd", rate, a.sweep_s)
                    out.append(r)
                    _say(r)
        finally:
            proc.stop()
    for system in ("grpc-asyncio",):
        if system not in a.systems or "vecadd" not in a.services:
            continue
        ok, why = systems.peer_available(system)
        if not ok:
            out.append(Result(system, "vecadd", None, 0.0, status=f"unavailable: {why}"))
            continue
        try:
            proc, port = systems.start_peer(system, "vecadd")
        except ServerDied as e:
            out.append(_failed(system, "vecadd", None, str(e)))
            continue
        try:
            for rate in a.rates:
                try:
                    r = systems.peer_open(system, "vecadd", port, rate, a.sweep_s)
                except (ServerDied, OSError, ValueError) as e:
                    r = _failed(system, "vecadd", None, str(e))
                    r.offered_rps = rate
                out.append(r)
                _say(r)
                if r.throughput_rps and r.throughput_rps < 0.5 * rate:
                    break  # far past the knee: higher rates only queue up
        finally:
            proc.stop()


def _markdown(doc: dict, rows: list[dict], local: dict) -> str:
    f = lambda v, d=1: "-" if v is None else f"{v:,.{d}f}"  # noqa: E731
    lines = ["# splitrpc side by side (loopback, one machine)", "",
             f"- date: {doc['date']}", f"- command: `{doc['command']}`", f"- machine: {doc['machine']}",
             f"- {doc['rounds']} rounds, systems interleaved within each round; the table quotes medians over rounds",
             "- request segments of splitrpc's and c-min's client: " + (f"{doc['segment_size']} bytes"
                                                                       if doc.get("segment_size")
                                                                       else "by destination (65000 bytes on loopback)"),
             "- closed loop: `concurrency` calls outstanding from one client; latency per call in µs, calls/s = "
             "recorded calls / wall time",
             "- RPC tax = p50 end to end minus the p50 of the callback run in-process (splitrpc-local); raw-udp "
             "runs no callback",
             "- splitrpc-poll: server busy-polls, client spins (`--wait poll`, `busy_poll=True`); splitrpc-block: both "
             "sleep in the kernel. raw-udp-*: a C UDP ping-pong of the same bytes with no header and no work. "
             "c-min-*: the minimal C server of the protocol (one thread, recvmmsg/sendmmsg, each call answered "
             "alone, the service computed in C; busy: spins, block: sleeps in poll) called by the same native client "
             "as splitrpc: the protocol's own cost. SYSTEM+indep: vecadd on the same server measured by the "
             "independent client (bench/clients/indep_client.c, written from docs/PROTOCOL.md alone; one sendmmsg "
             "per call; spinning against busy servers, blocking against blocking ones).", "",
             "| service | system | conc | p50 µs | p99 µs | calls/s | RPC tax µs | errors | status |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: (SERVICES.index(r["service"]) if r["service"] in SERVICES else 9,
                                         r["concurrency"] or 0, SYSTEMS.index(r["system"]) if r["system"] in SYSTEMS else 99)):
        runs_callback = r["system"].startswith("splitrpc") and r["system"] != "splitrpc-local"  # a Python callback
        tax = (r["p50_us"] - local[r["service"]]) if r["p50_us"] is not None and r["service"] in local \
            and runs_callback else None
        lines.append(f"| {r['service']} | {r['system']} | {r['concurrency'] or '-'} | {f(r['p50_us'])} | "
                     f"{f(r['p99_us'])} | {f(r['throughput_rps'], 0)} | {f(tax)} | {r['errors'] + r['invalid']} | "
                     f"{r['status']} |")
    lines += ["", "## Targets", "", "| target | measured | bound | met |", "|---|---:|---:|---|"]
    for t in doc["targets"]:
        lines.append(f"| {t['target']} | {f(t['value'], 2)} | {t['op']} {t['bound']} | "
                     f"{'-' if t['met'] is None else 'yes' if t['met'] else 'NO'} |")
    if doc["open_loop"]:
        lines += ["", "## Open loop, vecadd (Poisson arrivals; latency from the due time)", "",
                  "| system | offered calls/s | achieved calls/s | p50 µs | p99 µs | errors |", "|---|---:|---:|---:|---:|---:|"]
        for r in doc["open_loop"]:
            lines.append(f"| {r['system']} | {f(r['offered_rps'], 0)} | {f(r['throughput_rps'], 0)} | {f(r['p50_us'])} | "
                         f"{f(r['p99_us'])} | {r['errors'] + r['invalid']} |")
    return "\n".join(lines) + "\n"


def _plots(out_dir: str, results: list[Result], rows: list[dict], sweep: list[Result]) -> list[str]:
    from splitrpc.loadgen import plots

    made = []
    tput = {}
    for r in rows:
        if r["service"] == "vecadd" and r["throughput_rps"] and r["system"] != "splitrpc-local":
            tput.setdefault(r["system"], []).append((r["concurrency"], r["throughput_rps"]))
    if tput:
        made.append(plots.throughput_vs_concurrency({k: sorted(v) for k, v in tput.items()},
                                                    os.path.join(out_dir, "throughput_vs_concurrency.png"),
                                                    title="vecadd: throughput vs concurrency"))
    cdf = {}
    for r in results:  # the last round's c=1 vecadd latencies of each system
        if r.service == "vecadd" and r.concurrency == 1 and r.lat_us is not None and r.offered_rps is None:
            cdf[r.system] = r.lat_us
    if cdf:
        made.append(plots.latency_cdf(cdf, os.path.join(out_dir, "latency_cdf_vecadd.png"),
                                      title="vecadd, concurrency 1: latency CDF"))
    series = {}
    for r in sweep:
        if r.p50_us is not None:
            series.setdefault(r.system, []).append({"offered_rps": r.offered_rps, "achieved_rps": r.throughput_rps or 0,
                                                    "mean_us": r.mean_us, "p99_us": r.p99_us})
    if series:
        made.append(plots.latency_vs_load(series, os.path.join(out_dir, "latency_vs_load.png"),
                                          title="vecadd, open loop (Poisson): latency vs offered load"))
    return made


def _check(a) -> str | None:
    unknown = [s for s in a.systems if s not in SYSTEMS] + [s for s in a.services if s not in SERVICES]
    if a.segment_size is not None and not 1 <= a.segment_size <= 65485:
        return f"--segment-size must be 1..65485 (one datagram's data), got {a.segment_size}"
    if unknown or a.rounds < 1 or a.calls < 1:
        return (f"unknown systems/services {unknown} or bad --rounds/--calls; systems: {', '.join(SYSTEMS)}; "
                f"services: {', '.join(SERVICES)}")
    return None


def run(a) -> tuple[dict, list[Result], list[Result]]:
    """Every round, then the open-loop sweep: the report's document, the closed-loop results and
    the sweep's (their latencies, for the plots)."""
    results: list[Result] = []
    t0 = time.monotonic()
    for rnd in range(a.rounds):
        print(f"round {rnd + 1}/{a.rounds}", flush=True)
        for system in a.systems:
            _measure_system(system, a, results)
    print("open-loop sweep (vecadd)", flush=True)
    sweep: list[Result] = []
    _open_sweep(a, sweep)
    rows = _median_table(results)
    local = {r["service"]: r["p50_us"] for r in rows if r["system"] == "splitrpc-local" and r["p50_us"]}
    doc = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
           "machine": report.machine(), "rounds": a.rounds, "calls": a.calls, "segment_size": a.segment_size,
           "wall_s": round(time.monotonic() - t0, 1), "table": rows, "targets": _targets(rows),
           "callback_p50_us": local, "open_loop": [r.as_dict() for r in sweep], "runs": [r.as_dict() for r in results]}
    return doc, results, sweep


def cmd_bench(a) -> int:
    measured: dict = {}

    def run_(a) -> dict:
        doc, measured["results"], measured["sweep"] = run(a)
        return doc

    return run_suite(a, name="sidebyside", who="bench sidebyside", run=run_, check=_check, echo=True,
                     markdown=lambda doc: _markdown(doc, doc["table"], doc["callback_p50_us"]),
                     plot=lambda doc, path: _plots(os.path.dirname(path), measured["results"], doc["table"],
                                                   measured["sweep"]))
