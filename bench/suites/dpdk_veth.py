"""dpdk_veth.py: `splitrpc bench dpdk`: the DPDK transport (net_af_packet on one end of a veth pair) against the kernel-UDP server on the same end, driven by the same kernel-socket client from the other end's namespace; vecadd and head, p50/p99 and throughput, medians over interleaved rounds.

Needs root, iproute2, ethtool and a DPDK build of splitrpc. Note what this measures: net_af_packet
still goes through the kernel's packet sockets, so it shows the transport's own cost and
correctness on a virtual link, not what a NIC with kernel bypass would give.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import datetime, timezone

import numpy as np

from splitrpc import dpdk
from splitrpc.bench.helpers import netns
from splitrpc.loadgen.reporting import add_subcommand, command_of, run_as_module, run_suite
from splitrpc.bench.helpers.procs import Proc, ServerDied
from splitrpc.loadgen import report
from splitrpc.loadgen.load_cli import comma_list

SERVER_IP, PORT = "10.99.0.1", 9000
SYSTEMS = ("dpdk", "kernel-udp")
SERVICES = ("vecadd", "head")
EAL = ["--no-huge", "--no-shconf", "-m", "512", "--no-pci", "--no-telemetry", "-l", "0", "--log-level=*:error"]

DPDK_SERVER = """
import splitrpc
from splitrpc.services import register_builtin_services
srv = splitrpc.Server({ip!r}, {port}, wait="poll", transport="dpdk", dpdk_port="net_af_packet0",
                      dpdk_args={eal!r} + ["--vdev=net_af_packet0,iface={iface}{vdev_extra}"])
register_builtin_services(srv)
print("READY", flush=True)
srv.serve()
"""

# Runs in the client's namespace: one closed-loop run per (service, concurrency), JSON lines.
CLIENT = """
import json
from splitrpc.bench.helpers import systems
c = systems.Client({ip!r}, {port}, timeout=2.0, busy_poll=True)
c.call(1, systems.request_for("vecadd")[0], timeout=5.0, wait_for_ready=True)  # the server may still be starting
for svc in {services!r}:
    for conc in {concurrency!r}:
        n = {calls} if svc != "head" else max({calls} // 10, 100)
        r = systems.splitrpc_run(c, {system!r}, svc, conc, n)
        print(json.dumps(r.as_dict()), flush=True)
"""


def add_parser(sub) -> argparse.ArgumentParser:
    return add_subcommand(sub, "dpdk", "DPDK transport vs kernel UDP over a veth pair (root)", __doc__,
                          _arguments, cmd_bench_dpdk)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--services", type=comma_list(str, positive=False), default=list(SERVICES))
    p.add_argument("--concurrency", type=comma_list(int), default=[1, 16])
    p.add_argument("--calls", type=int, default=20000, help="recorded calls per vecadd run (head: a tenth)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, systems interleaved; tables quote medians")
    p.add_argument("--af-packet", default="framecnt=16384",
                   help="extra net_af_packet vdev arguments: its ring of frames must hold a burst of big "
                        "requests (16 head calls are ~6500 frames), as the kernel socket's buffer does")
    p.add_argument("--out", default="splitrpc-bench-dpdk")


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}


def _start_server(pair: netns.VethPair, system: str, af_packet: str = "") -> Proc:
    if system == "dpdk":
        extra = f",{af_packet}" if af_packet else ""
        code = textwrap.dedent(DPDK_SERVER.format(ip=SERVER_IP, port=PORT, eal=EAL, iface=pair.a_if, vdev_extra=extra))
        argv = [sys.executable, "-c", code]
    else:
        argv = [sys.executable, "-m", "splitrpc", "serve", "--host", SERVER_IP, "--port", str(PORT), "--wait", "poll"]
    proc = Proc(pair.exec_argv(pair.a, argv), env=_env())
    if system == "dpdk":
        proc.wait_line("READY", 60)
    return proc


def _client_runs(pair: netns.VethPair, system: str, a) -> list[dict]:
    code = textwrap.dedent(CLIENT.format(ip=SERVER_IP, port=PORT, services=list(a.services),
                                         concurrency=list(a.concurrency), calls=a.calls, system=system))
    deadline = time.monotonic() + 30
    while True:  # the kernel server prints nothing: the client's first call is the probe
        r = subprocess.run(pair.exec_argv(pair.b, [sys.executable, "-c", code]), capture_output=True, text=True,
                           timeout=1800, cwd=tempfile.gettempdir(), env=_env())
        if r.returncode == 0 or time.monotonic() > deadline or "CallTimeout" not in r.stderr:
            break
    if r.returncode != 0:
        raise ServerDied(f"{system} client exited with {r.returncode}: {r.stderr.strip()[-1500:]}")
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def measure(pair: netns.VethPair, system: str, a) -> list[dict]:
    """One round of one system: its server in the DPDK namespace, the client in the other."""
    if system == "kernel-udp":  # the kernel needs the address the DPDK server answers ARP for
        netns.run_in(pair.a, "ip", "addr", "add", f"{SERVER_IP}/24", "dev", pair.a_if)
    proc = _start_server(pair, system, a.af_packet)
    try:
        return _client_runs(pair, system, a)
    finally:
        proc.stop()
        if system == "kernel-udp":
            netns.run_in(pair.a, "ip", "addr", "del", f"{SERVER_IP}/24", "dev", pair.a_if)
        netns.run_in(pair.b, "ip", "neigh", "flush", "dev", pair.b_if)


def median_rows(runs: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["system"], r["service"], r["concurrency"]), []).append(r)
    rows = []
    for (system, service, conc), rs in groups.items():
        ok = [r for r in rs if r.get("p50_us")]

        def med(k):
            return float(np.median([r[k] for r in ok])) if ok else None

        rows.append({"system": system, "service": service, "concurrency": conc, "rounds": len(ok),
                     "p50_us": med("p50_us"), "p99_us": med("p99_us"), "throughput_rps": med("throughput_rps"),
                     "errors": sum(r["errors"] + r["invalid"] for r in rs)})
    return sorted(rows, key=lambda r: (r["service"], r["concurrency"], SYSTEMS.index(r["system"])))


def markdown(doc: dict) -> str:
    f = lambda v, d=1: "-" if v is None else f"{v:,.{d}f}"  # noqa: E731
    lines = ["# DPDK transport vs kernel UDP over a veth pair", "",
             f"- date: {doc['date']}", f"- command: `{doc['command']}`", f"- machine: {doc['machine']}",
             f"- {doc['rounds']} rounds, systems interleaved; medians over rounds. Server: the built-in services "
             "with `wait=poll` in one network namespace; client: splitrpc's native closed-loop load generator "
             "(kernel sockets, spinning) in the other, over a veth pair.",
             "- dpdk: `Server(transport=\"dpdk\")` on `net_af_packet` bound to the server's veth end (software "
             f"header/payload split, software checksums; vdev arguments `{doc['af_packet']}`); kernel-udp: "
             "`splitrpc serve` on a socket bound to an address on the same end (32 MiB socket buffers).",
             "- net_af_packet goes through the kernel's packet sockets: this shows the transport's own cost on a "
             "virtual link, not kernel bypass on a NIC.", "",
             "| service | conc | system | p50 µs | p99 µs | calls/s | errors | dpdk / kernel p50 |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    rows = doc["table"]
    for r in rows:
        other = next((o for o in rows if o["system"] == "kernel-udp" and o["service"] == r["service"]
                      and o["concurrency"] == r["concurrency"]), None)
        ratio = (r["p50_us"] / other["p50_us"]) if r["system"] == "dpdk" and other and r["p50_us"] and \
            other["p50_us"] else None
        lines.append(f"| {r['service']} | {r['concurrency']} | {r['system']} | {f(r['p50_us'])} | {f(r['p99_us'])} | "
                     f"{f(r['throughput_rps'], 0)} | {r['errors']} | {f(ratio, 2)} |")
    return "\n".join(lines) + "\n"


def _check(a) -> str | None:
    bad = [s for s in a.services if s not in SERVICES]
    if bad or a.calls < 1 or a.rounds < 1:
        return f"unknown services {bad} (from {', '.join(SERVICES)}) or bad --calls/--rounds"
    if not dpdk.available():
        return "this build has no DPDK (install libdpdk-dev and reinstall)"
    return None


def run(a) -> dict:
    """Every round, DPDK and the kernel's UDP alternated, over a veth pair it makes (a
    netns.NetnsUnavailable, saying why, where it cannot): the report's document."""
    runs: list[dict] = []
    t0 = time.monotonic()
    with netns.veth_pair() as pair:
        for rnd in range(a.rounds):
            for system in (SYSTEMS if rnd % 2 == 0 else SYSTEMS[::-1]):
                print(f"round {rnd + 1}/{a.rounds}: {system}", flush=True)
                for r in measure(pair, system, a):
                    runs.append(r)
                    print(f"  {system:10s} {r['service']:7s} c={r['concurrency']:<3d} p50 {r['p50_us'] or 0:8.1f} µs "
                          f"p99 {r['p99_us'] or 0:8.1f} µs {r['throughput_rps'] or 0:10,.0f} calls/s "
                          f"errors {r['errors'] + r['invalid']}", flush=True)
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": command_of(a),
            "machine": report.machine(), "rounds": a.rounds, "af_packet": a.af_packet,
            "wall_s": round(time.monotonic() - t0, 1), "table": median_rows(runs), "runs": runs}


def cmd_bench_dpdk(a) -> int:
    return run_suite(a, name="dpdk_veth", who="bench dpdk", run=run, markdown=markdown, check=_check,
                     errors=(netns.NetnsUnavailable,), echo=True)


def main(argv: list[str] | None = None) -> int:
    return run_as_module("splitrpc.bench.suites.dpdk_veth", __doc__, _arguments, cmd_bench_dpdk, argv)


if __name__ == "__main__":
    sys.exit(main())
