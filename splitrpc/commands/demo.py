"""demo.py: `splitrpc demo`: a server of what every capability serves by default, each function the capabilities mark for the demo loaded closed loop at concurrency 1 and 16 after a checked call, p50/p99 and throughput printed."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from splitrpc import Client, Server, __version__, features
from splitrpc.server import SERVER_DEFAULTS
from splitrpc.latency_histogram import percentiles
from splitrpc.plugins import CapabilityError
from splitrpc.server import WAIT_MODES

if TYPE_CHECKING:
    from splitrpc.plugins import Capability

CONCURRENCY = (1, 16)
MIN_CALLS = 20  # a row's calls, at least, for a function loaded with a small share of --calls


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               caps: list[Capability]) -> argparse.ArgumentParser:
    d = sub.add_parser("demo", help="start a server, load each service, print p50/p99 and throughput")
    d.add_argument("--host", help=f"the server's address (default: {SERVER_DEFAULTS['host']})")
    d.add_argument("--calls", type=int, default=2000)
    d.add_argument("--wait", choices=tuple(WAIT_MODES),
                   help=f"the server's wait mode (default: {SERVER_DEFAULTS['wait']})")
    d.set_defaults(func=cmd_demo)
    return d


def summary(name: str, conc: int, res: dict[str, Any]) -> str:
    """A row of the table: p50 and p99 in microseconds, calls/s, errors."""
    lat = res["latency_ns"]
    ok = lat[lat > 0]
    if ok.size == 0:
        return f"{name:8s} {conc:5d}  all {res['errors']} calls failed"
    tput = ok.size / res["elapsed_s"] if res["elapsed_s"] else 0.0
    # ns; the tables of `splitrpc load` and the benchmarks use the same (ok is not empty: no None)
    pct = cast("dict[float, int]", percentiles(ok, (50, 99)))
    return (f"{name:8s} {conc:5d} {pct[50] / 1e3:9.1f} {pct[99] / 1e3:9.1f} "
            f"{tput:12.0f} {res['errors']:7d}")


def cmd_demo(a: argparse.Namespace) -> int:
    caps = a.capabilities
    srv = Server(a.host, 0, wait=a.wait)
    servings = []
    try:
        for cap in caps:
            s = cap.serve(srv, [], a)
            if s is not None:
                servings.append(s)
        # asked as for a user's request (checked=False): nothing heavy is built for what the demo skips
        callees = [c for cap in caps for n in cap.callee_names() for c in [cap.callee(n, a, checked=False)]
                   if c is not None and c.demo_share > 0 and c.example is not None]
    except CapabilityError as e:
        srv.close()
        for s in servings:
            s.close()
        print(e, file=sys.stderr)
        return e.code
    srv.start()
    port = srv.port
    wait = a.wait or SERVER_DEFAULTS["wait"]
    print(f"splitrpc {__version__} demo: server on {srv.host}:{port} (wait={wait}), features {features()}")
    print(f"closed loop, {a.calls} calls per row after {a.calls // 10} warm-up calls; latency in microseconds")
    print(f"{'service':8s} {'conc':>5s} {'p50':>9s} {'p99':>9s} {'calls/s':>12s} {'errors':>7s}")
    rng = np.random.default_rng(1)
    failed = 0
    try:
        with Client(srv.host, port, timeout=2.0, busy_poll=wait == "poll") as c:
            for callee in callees:
                data = callee.example(rng)
                if not callee.verdict(data, c.call(callee.func_id, data)):
                    print(f"{callee.name}: WRONG REPLY", file=sys.stderr)
                    failed += 1
                    continue
                for conc in CONCURRENCY:
                    n = a.calls if callee.demo_share >= 1 else max(int(a.calls * callee.demo_share), MIN_CALLS)
                    res = c.closed_loop(callee.func_id, data, concurrency=conc, calls=n, warmup=max(n // 10, 1))
                    failed += res["errors"]
                    print(summary(callee.name, conc, res), flush=True)
    finally:
        st = srv.stats()
        srv.close()
        for s in servings:
            s.close()
    drops = {k: v for k, v in st["drops"].items() if v}
    why = f" ({', '.join(f'{k} {v}' for k, v in drops.items())})" if drops else ""
    print(f"server: {st['calls']} calls in {st['batches']} batches (mean batch {st['mean_batch']:.2f}), "
          f"drops {sum(drops.values())}{why}, errors {sum(st['errors'].values())}")
    if drops.get("duplicate"):
        print("  (duplicate: the client sent a request again while the server still ran it: a reply that took "
              "longer than the retransmission timeout; the server never runs a call twice)")
    return 1 if failed else 0
