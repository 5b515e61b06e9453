"""session_churn.py: issue 52's churn, measured: N short-lived keyed clients (each a fresh `splitrpc.Client` making one session and one call, as every `splitrpc call --key` does) at a steady rate against one server holding K keys, and whether every one was served at its first INIT: clients refused or failed, clients that waited for an INIT's resend (over 150 ms: the first went unanswered), each call's runs on the server, and the server's drops.

    python -m splitrpc.bench.suites.session_churn --clients 10000 --seconds 60 --keys 4 --out bench/results/session_churn

The server runs in this process (its own threads, blocking receive); the clients are made one after
the other on this thread, paced to the rate, on loopback. Nothing emulated.
"""
from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone

import numpy as np

import splitrpc
from splitrpc import Key, KeyTable
from splitrpc.errors import SplitRPCError
from splitrpc.machine import describe
from splitrpc.loadgen.reporting import SuiteFailed, command_of, run_as_module, run_suite

ECHO = 10
SLOW_S = 0.15  # an INIT unanswered is sent again at 200 ms: a first call slower than this waited for it


def run(a) -> dict:
    keys = [Key.generate(i + 1) for i in range(a.keys)]
    runs: dict[bytes, int] = {}

    def echo(reqs, resps):
        for q, r in zip(reqs, resps):
            b = bytes(q)
            runs[b] = runs.get(b, 0) + 1
            r[:len(q)] = q
        return [len(q) for q in reqs]

    srv = splitrpc.Server("127.0.0.1", 0, wait="block", keys=KeyTable(keys))
    srv.add_function(echo, ECHO, "echo", raw=True, max_request=64, max_response=64)
    srv.start()
    first_us, errors, slow, handshakes = [], {}, 0, 0
    t0 = time.monotonic()
    try:
        for i in range(a.clients):
            due = t0 + i * a.seconds / a.clients
            if due > time.monotonic():
                time.sleep(due - time.monotonic())
            body = b"%d" % i
            try:
                with splitrpc.Client("127.0.0.1", srv.port, key=keys[i % a.keys], timeout=a.timeout) as c:
                    t = time.perf_counter()
                    got = c.call(ECHO, body)
                    dt = time.perf_counter() - t
                    handshakes += c.stats()["handshakes"]
                if got != body:
                    raise SuiteFailed(f"client {i}: the reply {got!r} is not its call's")
                first_us.append(dt * 1e6)
                slow += dt > SLOW_S
            except SplitRPCError as e:
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
            if (i + 1) % max(a.clients // 10, 1) == 0:
                print(f"{i + 1:,} clients in {time.monotonic() - t0:.1f} s; {sum(errors.values())} failed, "
                      f"{slow} waited for a resend", flush=True)
        wall = time.monotonic() - t0
        time.sleep(0.2)
        st = srv.stats()
    finally:
        srv.close()
    twice = sum(1 for n in runs.values() if n > 1)
    lat = np.array(first_us) if first_us else np.zeros(1)
    return {"machine": describe(), "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": command_of(a), "clients": a.clients, "seconds": a.seconds, "keys": a.keys, "wall_s": wall,
            "rate_per_s": a.clients / wall, "served": len(first_us), "errors": errors, "slow": slow,
            "handshakes": handshakes, "calls_run": len(runs), "calls_run_twice": twice,
            "first_call_us": {"p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)),
                              "max": float(lat.max())},
            "server_drops": {k: v for k, v in st["drops"].items() if v}}


def report(doc: dict) -> str:
    ok = doc["served"] == doc["clients"] and not doc["errors"] and doc["slow"] == 0 and not doc["calls_run_twice"]
    f = doc["first_call_us"]
    return "\n".join([
        "# Short-lived keyed clients: sessions under churn (issue 52)", "",
        f"Machine: {doc['machine']}; {doc['started']}. Server in the measuring process (blocking receive), "
        "clients made one after the other, loopback. Nothing emulated.", "",
        "```sh", doc["command"], "```", "",
        f"{doc['clients']:,} clients of {doc['keys']} keys (one each in turn) in {doc['wall_s']:.1f} s "
        f"({doc['rate_per_s']:.0f} a second; the issue's churn is 10,000 a minute, 167 a second). Each: a fresh "
        "`splitrpc.Client` with its key, one echo call (its handshake first), closed.", "",
        "| measure | value |", "|---|---:|",
        f"| clients served at their first call | {doc['served']:,} of {doc['clients']:,} |",
        f"| clients failed | {sum(doc['errors'].values())} {doc['errors'] or ''} |",
        f"| clients that waited for an INIT's resend (first call > {SLOW_S * 1000:.0f} ms) | {doc['slow']} |",
        f"| sessions made (handshakes, all clients) | {doc['handshakes']:,} |",
        f"| calls run on the server / run twice | {doc['calls_run']:,} / {doc['calls_run_twice']} |",
        f"| first call (handshake and call) p50 / p99 / max | {f['p50']:.0f} / {f['p99']:.0f} / {f['max']:.0f} µs |",
        f"| server drops | {doc['server_drops'] or 'none'} |", "",
        "**Every client served at its first INIT, no call run twice**" if ok else "**NOT every client served "
        "at its first INIT (or a call ran twice)**", ""])


def _arguments(p) -> None:
    p.add_argument("--clients", type=int, default=10000)
    p.add_argument("--seconds", type=float, default=60.0, help="over how long the clients are made (a steady rate)")
    p.add_argument("--keys", type=int, default=4, help="keys in the server's table; the clients use them in turn")
    p.add_argument("--timeout", type=float, default=5.0, help="each call's timeout, s")
    p.add_argument("--out", required=True, help="the folder of churn.json and churn.md")
    p.add_argument("--from-json", metavar="JSON", help="no runs: the report again from an earlier churn.json")


def _run_or_load(a) -> dict:
    if a.from_json:
        with open(a.from_json) as f:
            return json.load(f)
    if a.clients < 1 or a.keys < 1 or a.seconds <= 0:
        raise SuiteFailed("--clients and --keys at least 1, --seconds above 0")
    return run(a)


def cmd_session_churn(a) -> int:
    return run_suite(a, name="churn", who="session_churn", run=_run_or_load, markdown=report, echo=True)


def main(argv: list[str] | None = None) -> int:
    return run_as_module("splitrpc.bench.suites.session_churn", __doc__, _arguments, cmd_session_churn, argv)


if __name__ == "__main__":
    sys.exit(main())
