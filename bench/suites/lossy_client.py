"""lossy_client.py: the client over a lossy, damaging link (issue 15): a default `Client(timeout=10.0)` makes N vecadd calls through a chaos proxy (5% loss, 5% duplication, 5% reordering each way, 1% of datagrams with a header byte damaged); counts right, wrong and failed calls, retransmissions and the proxy's faults.

    .venv/bin/python bench/suites/lossy_client.py --calls 20000 --out bench/results/client_chaos

Run it from a source checkout: the chaos proxy is the test suite's (tests/chaos_proxy.py).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone

import numpy as np

import splitrpc
from splitrpc.services import SERVICES, register_builtin_services

FAULTS = dict(loss=0.05, dup=0.05, reorder=0.05, corrupt=0.01)
VEC = SERVICES["vecadd"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20_000)
    p.add_argument("--wave", type=int, default=64, help="futures outstanding at once")
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--out", required=True, help="output path without extension (.md and .json are written)")
    a = p.parse_args(argv)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))
    try:
        from chaos_proxy import ChaosProxy, Faults
    except ImportError:
        return "lossy_client.py needs a source checkout: the chaos proxy is tests/chaos_proxy.py"
    if a.calls < 1 or a.wave < 1:
        return "--calls and --wave must be >= 1"
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
    doc = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "command": "bench/suites/lossy_client.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
           "faults_each_way": FAULTS, "client": "splitrpc.Client(timeout=10.0), every other setting its default",
           "calls": a.calls, "wave": a.wave, "right": right, "wrong": wrong, "failed": failed, "failures": failures,
           "elapsed_s": round(elapsed, 2), "client_stats": client, "proxy_to_server": up, "proxy_to_client": down,
           "server_drops": server["drops"], "server_cache_hits": server.get("cache_hits")}
    with open(a.out + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    lines = ["# A default client through a lossy, damaging link (issue 15)", "",
             f"- date: {doc['date']}", f"- command: `{doc['command']}`", f"- machine: {doc['machine']}",
             f"- client: {doc['client']}; {a.wave} futures at a time",
             f"- faults, each way: {FAULTS} (corrupt: one header byte changed after the UDP checksum)", "",
             "| calls | right | wrong | failed | retransmits | BUSY retries | seconds |", "|---:|---:|---:|---:|---:|---:|---:|",
             f"| {a.calls:,} | {right:,} | {wrong} | {failed} | {client['retransmits']:,} | {client['busy_retries']} | "
             f"{elapsed:.1f} |", "",
             f"- proxy, to the server: {up}", f"- proxy, to the client: {down}",
             f"- damaged datagrams refused: server `bad_check` {server['drops'].get('bad_check')}, client "
             f"`dropped` {client['dropped']}", ""]
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0 if (wrong, failed) == (0, 0) else 1


if __name__ == "__main__":
    sys.exit(main())
