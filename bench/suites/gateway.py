"""gateway.py: what `splitrpc gateway` adds to a call (issue 35): vecadd (1 KiB) one call at a time from a direct splitrpc.Client, and through the gateway with tritonclient's HTTP and gRPC clients; and, where PyTriton is installed, the same tritonclient calls against Triton's own endpoints serving the same callback; systems alternated round by round; p50, p99 and calls/s, each system's p50 over the direct call's with a bootstrap 95% interval.

    python -m splitrpc.bench.suites.gateway --rounds 5 --out bench/results/gateway/gateway.md
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from datetime import datetime, timezone
from typing import Any, Callable

from splitrpc.bench.helpers.intervals import RESAMPLES, ratio_interval
from splitrpc.machine import describe

CALLS, WARMUP = 3000, 300


def _measure(call: Callable[[], bool], calls: int) -> dict[str, Any]:
    import numpy as np

    from splitrpc.latency_histogram import percentiles

    for _ in range(WARMUP):
        call()
    lat, wrong = [], 0
    clock = time.perf_counter_ns
    t0 = time.perf_counter()
    for _ in range(calls):
        t = clock()
        ok = call()
        lat.append(clock() - t)
        wrong += not ok
    elapsed = time.perf_counter() - t0
    pct = percentiles(np.asarray(lat, dtype=np.int64), (50, 99))
    return {"p50 us": pct[50] / 1e3, "p99 us": pct[99] / 1e3, "calls/s": calls / elapsed, "wrong": wrong}


def _tensor_call(client_mod: Any, client: Any, model: str, x: Any, want: Any) -> Callable[[], bool]:
    import numpy as np

    x1, want1 = x.reshape(1, -1), want.reshape(1, -1)  # a batch of one: Triton's batched models take [B, 256]

    def call() -> bool:
        inp = client_mod.InferInput("x", [1, 256], "FP32")
        inp.set_data_from_numpy(x1)
        r = client.infer(model, [inp], outputs=[client_mod.InferRequestedOutput("y")])
        return bool(np.array_equal(r.as_numpy("y"), want1))

    return call


def run(a: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import tritonclient.grpc as tgrpc
    import tritonclient.http as thttp

    import splitrpc
    from splitrpc.bench.helpers import systems
    from splitrpc.bench.helpers.procs import Proc, free_port
    from splitrpc.loadgen.reporting import command_of

    x = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    want = x + np.float32(1)
    port = free_port()
    procs = [Proc([sys.executable, "-m", "splitrpc", "serve", "--port", str(port), "--wait", "block"])]
    http_port, grpc_port = free_port(socket.SOCK_STREAM), free_port(socket.SOCK_STREAM)
    notes = []
    try:
        with splitrpc.Client("127.0.0.1", port, timeout=0.2) as c:
            procs[0].wait_until(lambda: c.ping(timeout=0.2), "splitrpc serve")
        procs.append(Proc([sys.executable, "-m", "splitrpc", "gateway", "--replicas", f"127.0.0.1:{port}",
                           "--http-port", str(http_port), "--grpc-port", str(grpc_port)]))
        procs[1].wait_line("splitrpc gateway:", 60.0)
        direct = splitrpc.Client("127.0.0.1", port, timeout=5.0)
        xb = x.tobytes()
        calls: dict[str, Callable[[], bool]] = {
            "splitrpc direct": lambda: direct.call(1, xb) == want.tobytes(),
            "gateway http": _tensor_call(thttp, thttp.InferenceServerClient(f"127.0.0.1:{http_port}"), "vecadd", x,
                                         want),
            "gateway grpc": _tensor_call(tgrpc, tgrpc.InferenceServerClient(f"127.0.0.1:{grpc_port}"), "vecadd", x,
                                         want)}
        ok, why = systems.peer_available("triton")
        if ok:
            proc, tport = systems.start_peer("triton", "vecadd")
            procs.append(proc)
            calls["triton http"] = _tensor_call(thttp, thttp.InferenceServerClient(f"127.0.0.1:{tport + 1}"),
                                                "vecadd", x, want)
            calls["triton grpc"] = _tensor_call(tgrpc, tgrpc.InferenceServerClient(f"127.0.0.1:{tport}"), "vecadd",
                                                x, want)
        else:
            notes.append(f"Triton rows left out: {why}")
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in calls}
        names = list(calls)
        for rnd in range(a.rounds):
            for name in (names if rnd % 2 == 0 else names[::-1]):
                r = _measure(calls[name], a.calls)
                runs[name].append(r)
                print(f"round {rnd + 1}/{a.rounds}: {name:>16s}  p50 {r['p50 us']:8.1f} µs  p99 {r['p99 us']:8.1f} µs"
                      f"  {r['calls/s']:8,.0f} calls/s  wrong {r['wrong']}", flush=True)
        direct.close()
    finally:
        for p in reversed(procs):
            p.stop()
    table = []
    for name, rs in runs.items():
        row: dict[str, Any] = {"system": name}
        for m in ("p50 us", "p99 us", "calls/s"):
            row[m] = sorted(r[m] for r in rs)[len(rs) // 2]
        row["p50 ratio"] = ratio_interval([r["p50 us"] for r in runs["splitrpc direct"]], [r["p50 us"] for r in rs])
        row["wrong"] = sum(r["wrong"] for r in rs)
        table.append(row)
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
            "machine": describe(), "rounds": a.rounds, "calls": a.calls, "table": table, "runs": runs, "notes": notes}


def markdown(doc: dict[str, Any]) -> str:
    def f(r: dict[str, Any]) -> str:
        return "-" if r["ratio"] is None else f"{r['ratio']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]"

    rows = {r["system"]: r for r in doc["table"]}
    base = rows["splitrpc direct"]["p50 us"]
    lines = ["# What the gateway adds to a call", "",
             f"- date: {doc['date']}", f"- command: `{doc['command']}`", f"- machine: {doc['machine']}",
             "- vecadd (float32[256] -> +1), one call at a time from this process; `splitrpc serve --wait block` and "
             "`splitrpc gateway` (HTTP and gRPC) in child processes; tritonclient's synchronous clients for every "
             "row but the direct one (splitrpc.Client); PyTriton, where installed, serves the same callback on "
             "Triton (CPU, dynamic batcher)",
             f"- {doc['rounds']} rounds, systems alternated; {WARMUP} warm-up and {doc['calls']:,} recorded calls per "
             f"system and round; medians over rounds; p50 over the direct call's with a bootstrap 95% interval "
             f"({RESAMPLES:,} resamples)", "",
             "| system | p50 µs | p50 added over direct, µs | p50 over direct | p99 µs | calls/s | wrong |",
             "|---|---:|---:|---|---:|---:|---:|"]
    for r in doc["table"]:
        lines.append(f"| {r['system']} | {r['p50 us']:.1f} | {r['p50 us'] - base:.1f} | {f(r['p50 ratio'])} | "
                     f"{r['p99 us']:.1f} | {r['calls/s']:,.0f} | {r['wrong']} |")
    lines += ["", *[f"- {n}" for n in doc["notes"]], "", "Rounds (JSON):", "", "```", json.dumps(doc["runs"]), "```",
              ""]
    return "\n".join(lines)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=CALLS, help="recorded calls per system and round")
    p.add_argument("--out", metavar="FILE.md", help="also write the report here, and its rounds as FILE.json")


def _check(a: argparse.Namespace) -> str | None:
    return "--rounds 2 or more; --calls 100 or more" if a.rounds < 2 or a.calls < 100 else None


def _verdict(doc: dict[str, Any]) -> str | None:
    wrong = {r["system"]: r["wrong"] for r in doc["table"] if r["wrong"]}
    return f"wrong replies: {wrong}" if wrong else None


def cmd_gateway_bench(a: argparse.Namespace) -> int:
    from splitrpc.loadgen.reporting import run_suite

    name = os.path.basename(a.out or "").removesuffix(".md")
    return run_suite(a, name=name, who="gateway", run=run, markdown=markdown, check=_check, verdict=_verdict,
                     echo=True, out=os.path.dirname(a.out or "") or ".", write=bool(a.out),
                     needs=("tritonclient", "starlette", "uvicorn"), hint='pip install ".[gateway]" tritonclient[http]')


def main(argv: list[str] | None = None) -> int:
    from splitrpc.loadgen.reporting import run_as_module

    return run_as_module("splitrpc.bench.suites.gateway", __doc__, _arguments, cmd_gateway_bench, argv)


if __name__ == "__main__":
    sys.exit(main())
