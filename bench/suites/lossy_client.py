"""lossy_client.py: the client over a lossy, damaging link (issue 15): a default `Client(timeout=10.0)` makes N vecadd calls through a chaos proxy (5% loss, 5% duplication, 5% reordering each way, 1% of datagrams with a header byte damaged); counts right, wrong and failed calls, retransmissions and the proxy's faults.

    .venv/bin/python bench/suites/lossy_client.py --calls 20000 --out bench/results/client_chaos

Run it from a source checkout: the chaos proxy is the test suite's (tests/chaos_proxy.py).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import datetime, timezone

import numpy as np

import splitrpc
from splitrpc.reporting import command_of, run_as_module, run_suite
from splitrpc.services import SERVICES, register_builtin_services

FAULTS = dict(loss=0.05, dup=0.05, reorder=0.05, corrupt=0.01)
VEC = SERVICES["vecadd"]


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calls", type=int, default=20_000)
    p.add_argument("--wave", type=int, default=64, help="futures outstanding at once")
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--out", required=True, help="output path without extension (.md and .json are written)")


def _check(a) -> str | None:
    """What is wrong with the arguments, or None."""
    if a.calls < 1 or a.wave < 1:
        return "--calls and --wave must be >= 1"
    return None


def run(a) -> dict:
    """--calls vecadd calls through the chaos proxy, --wave at a time: the counts."""
    from chaos_proxy import ChaosProxy, Faults

    rng = np.random.default_rng(a.seed)
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    register_builtin_services(srv)
    srv.start()
    right = wrong = failed = 0
    failures: dict[str, int] = {}
    t0 = time.monotonic()
    try:
        with ChaosProxy(("127.0.0.1", srv.port), to_server=Faults(**FAULTS), to_client=Faults(**FAULTS),
                        seed=a.seed) as px, splitrpc.Client("127.0.0.1", px.port, timeout=10.0) as c:
            for i in range(0, a.calls, a.wave):
                reqs = [VEC.example(rng) for _ in range(min(a.wave, a.calls - i))]
                futs = [(r, c.call_async(VEC.func_id, r)) for r in reqs]
                for r, f in futs:
                    try:
                        ok = f.result() == VEC.expected(r)
                        right, wrong = right + ok, wrong + (not ok)
                    except splitrpc.SplitRPCError as e:
                        failed += 1
                        failures[type(e).__name__] = failures.get(type(e).__name__, 0) + 1
                done = i + len(reqs)
                if done % 2000 < a.wave:
                    print(f"  {done:,}/{a.calls:,} calls: {right:,} right, {wrong} wrong, {failed} failed", flush=True)
            client = c.stats()
            up, down = dict(px.up.counts), dict(px.down.counts)
        elapsed = time.monotonic() - t0
        server = srv.stats()
    finally:
        srv.close()
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
            "faults_each_way": FAULTS, "client": "splitrpc.Client(timeout=10.0), every other setting its default",
            "calls": a.calls, "wave": a.wave, "right": right, "wrong": wrong, "failed": failed, "failures": failures,
            "elapsed_s": round(elapsed, 2), "client_stats": client, "proxy_to_server": up, "proxy_to_client": down,
            "server_drops": server["drops"], "server_cache_hits": server.get("cache_hits")}


def markdown(doc: dict) -> str:
    client = doc["client_stats"]
    lines = ["# A default client through a lossy, damaging link (issue 15)", "",
             f"- date: {doc['date']}", f"- command: `{doc['command']}`", f"- machine: {doc['machine']}",
             f"- client: {doc['client']}; {doc['wave']} futures at a time",
             f"- faults, each way: {doc['faults_each_way']} (corrupt: one header byte changed after the UDP checksum)",
             "", "| calls | right | wrong | failed | retransmits | BUSY retries | seconds |",
             "|---:|---:|---:|---:|---:|---:|---:|",
             f"| {doc['calls']:,} | {doc['right']:,} | {doc['wrong']} | {doc['failed']} | {client['retransmits']:,} | "
             f"{client['busy_retries']} | {doc['elapsed_s']:.1f} |", "",
             f"- proxy, to the server: {doc['proxy_to_server']}", f"- proxy, to the client: {doc['proxy_to_client']}",
             f"- damaged datagrams refused: server `bad_check` {doc['server_drops'].get('bad_check')}, client "
             f"`dropped` {client['dropped']}", ""]
    return "\n".join(lines)


def verdict(doc: dict) -> str | None:
    """Why the run fails its own check (every call right), or None."""
    if (doc["wrong"], doc["failed"]) == (0, 0):
        return None
    return f"{doc['wrong']} wrong and {doc['failed']} failed of {doc['calls']:,} calls"


def _tests_on_path() -> None:
    """The test suite's folder (the chaos proxy's) on sys.path: the checkout's this file is in, or the
    current directory's."""
    here = os.path.dirname(os.path.abspath(__file__))
    for tests in (os.path.join(here, os.pardir, os.pardir, "tests"), os.path.join(os.getcwd(), "tests")):
        if os.path.isfile(os.path.join(tests, "chaos_proxy.py")):
            sys.path.insert(0, os.path.normpath(tests))
            return


def cmd_lossy_client(a) -> int:
    _tests_on_path()
    return run_suite(a, name=os.path.basename(a.out), who="lossy_client", run=run, markdown=markdown,
                     needs=("chaos_proxy",), hint="a source checkout: the chaos proxy is tests/chaos_proxy.py",
                     check=_check, verdict=verdict, echo=True, out=os.path.dirname(a.out) or ".")


def main(argv: list[str] | None = None) -> int:
    return run_as_module("splitrpc.bench.suites.lossy_client", __doc__, _arguments, cmd_lossy_client, argv)


if __name__ == "__main__":
    sys.exit(main())
