"""lossy_client.py: the client over a lossy, damaging link (issues 15 and 33): a default `Client(timeout=10.0)` makes N vecadd calls through a chaos proxy (by default 5% loss, 5% duplication, 5% reordering each way, 1% of datagrams with a header byte damaged; --data-only P: only a data byte damaged in P of the datagrams); counts right, wrong and failed calls, retransmissions and the proxy's faults.

    .venv/bin/python bench/suites/lossy_client.py --calls 20000 --out bench/results/client_chaos
    .venv/bin/python bench/suites/lossy_client.py --calls 20000 --data-only 0.02 --protocol 3 \
        --out bench/results/integrity/v3

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
from splitrpc.loadgen.reporting import command_of, run_as_module, run_suite
from splitrpc.services import SERVICES, register_builtin_services

FAULTS = dict(loss=0.05, dup=0.05, reorder=0.05, corrupt=0.01)
VEC = SERVICES["vecadd"]


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calls", type=int, default=20_000)
    p.add_argument("--wave", type=int, default=64, help="futures outstanding at once")
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--out", required=True, help="output path without extension (.md and .json are written)")
    p.add_argument("--data-only", type=float, metavar="P",
                   help="instead of the default faults: one data byte changed (after the UDP checksum) in P of the "
                        "datagrams each way, nothing else")
    p.add_argument("--protocol", type=int, help="the client's wire protocol version (default: the client's)")


def _check(a) -> str | None:
    """What is wrong with the arguments, or None."""
    if a.calls < 1 or a.wave < 1:
        return "--calls and --wave must be >= 1"
    if a.data_only is not None and not 0 < a.data_only < 1:
        return "--data-only is a probability, 0 < P < 1"
    return None


def _faults(a) -> dict:
    return FAULTS if a.data_only is None else {"corrupt_data": a.data_only}


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
        faults = _faults(a)
        with ChaosProxy(("127.0.0.1", srv.port), to_server=Faults(**faults), to_client=Faults(**faults),
                        seed=a.seed) as px, \
                splitrpc.Client("127.0.0.1", px.port, timeout=10.0, protocol=a.protocol) as c:
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
            time.sleep(0.5)  # damaged late copies (duplicates, retransmissions) reach their receiver and are counted
            client = c.stats()
            up, down = dict(px.up.counts), dict(px.down.counts)
        elapsed = time.monotonic() - t0
        server = srv.stats()
    finally:
        srv.close()
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
            "faults_each_way": _faults(a), "protocol": c_protocol(a),
            "client": f"splitrpc.Client(timeout=10.0, protocol={c_protocol(a)}), every other setting its default",
            "calls": a.calls, "wave": a.wave, "right": right, "wrong": wrong, "failed": failed, "failures": failures,
            "elapsed_s": round(elapsed, 2), "client_stats": client, "proxy_to_server": up, "proxy_to_client": down,
            "server_drops": server["drops"], "server_cache_hits": server.get("cache_hits")}


def markdown(doc: dict) -> str:
    client = doc["client_stats"]
    title = ("A default client through a lossy, damaging link (issue 15)" if "loss" in doc["faults_each_way"]
             else f"Data damaged past UDP's checksum, protocol version {doc.get('protocol')} (issue 33)")
    lines = [f"# {title}", "",
             f"- date: {doc['date']}", f"- command: `{doc['command']}`", f"- machine: {doc['machine']}",
             f"- client: {doc['client']}; {doc['wave']} futures at a time",
             f"- faults, each way: {doc['faults_each_way']} (corrupt: one header byte changed after the UDP checksum; "
             "corrupt_data: one byte at offset 22 or later, the data or version 3's check)",
             "", "| calls | right | wrong | failed | retransmits | BUSY retries | seconds |",
             "|---:|---:|---:|---:|---:|---:|---:|",
             f"| {doc['calls']:,} | {doc['right']:,} | {doc['wrong']} | {doc['failed']} | {client['retransmits']:,} | "
             f"{client['busy_retries']} | {doc['elapsed_s']:.1f} |", "",
             f"- proxy, to the server: {doc['proxy_to_server']}", f"- proxy, to the client: {doc['proxy_to_client']}",
             f"- damaged datagrams refused: server `bad_check` {doc['server_drops'].get('bad_check')}, "
             f"`bad_data_check` {doc['server_drops'].get('bad_data_check')}; client `dropped` {client['dropped']}, "
             f"`bad_data_check` {client.get('bad_data_check')}", ""]
    return "\n".join(lines)


def verdict(doc: dict) -> str | None:
    """Why the run fails its own check (every call right), or None."""
    if (doc["wrong"], doc["failed"]) == (0, 0):
        return None
    return f"{doc['wrong']} wrong and {doc['failed']} failed of {doc['calls']:,} calls"


def c_protocol(a) -> int:
    from splitrpc.client import CLIENT_DEFAULTS
    return a.protocol or CLIENT_DEFAULTS["protocol"]


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
