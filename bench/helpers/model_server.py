"""model_server.py: the model benchmark's splitrpc server: `splitrpc serve --models`'s models plus a stats function.

    python -m splitrpc.bench.helpers.model_server --port P --models lenet,resnet18 [--device cuda:0] [--small]
                                          [--wait poll] [--max-batch 8] [--max-delay-us 0]

Prints READY once it serves and stops on SIGTERM/SIGINT. Function STATS_FUNC_ID (raw, empty
request) answers the server's counters as JSON (Server.stats(): calls, batches, batch sizes);
the benchmark reads them before and after a timed run to report the mean batch size of that run.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys

from splitrpc.function_config import FUNCTION_DEFAULTS
from splitrpc.server import SERVER_DEFAULTS
from splitrpc.bench.helpers.procs import Proc, free_port

STATS_FUNC_ID = 90  # clear of the built-in services (1-4) and of the model zoo (10-14)
STATS_MAX_REPLY = 64 << 10
_STATS_KEYS = ("calls", "replies", "batches", "batch_sizes", "functions", "devices", "errors", "drops")


def stats_function(server, keys=_STATS_KEYS):
    """The raw callback answering each call with server.stats()'s `keys` as JSON (the benchmark
    servers' one stats function: register it as STATS_FUNC_ID, read it with read_stats)."""

    def stats(requests, responses):
        st = server.stats()
        body = json.dumps({k: st[k] for k in keys}).encode()
        if len(body) > STATS_MAX_REPLY:
            raise ValueError(f"stats of {len(body)} bytes exceed {STATS_MAX_REPLY}")
        for r in responses:
            r[:len(body)] = body
        return [len(body)] * len(responses)

    return stats


def read_stats(client, timeout: float = 5.0) -> dict:
    """The server's counters (one call of the stats function)."""
    return json.loads(client.call(STATS_FUNC_ID, b"", timeout=timeout))


def run_batches(before: dict, after: dict) -> dict[int, int]:
    """{batch size: batches} run between two read_stats() snapshots, without the batch of the second
    stats call itself (the stats function's batch is counted when it is handed out, before it runs)."""
    sizes = {int(k): v - before["batch_sizes"].get(k, 0) for k, v in after["batch_sizes"].items()}
    sizes[1] = sizes.get(1, 0) - 1
    return {k: v for k, v in sorted(sizes.items()) if v > 0}


def mean_batch(before: dict, after: dict) -> float | None:
    """Mean batch size of the model batches between two snapshots (None when there was none)."""
    sizes = run_batches(before, after)
    batches = sum(sizes.values())
    return sum(k * v for k, v in sizes.items()) / batches if batches else None


def start(models: list[str], device: str, small: bool, max_batch: int, wait: str,
          ready_s: float = 300.0, env: dict | None = None) -> tuple[Proc, int]:
    """The server as a child process, once it printed READY (building the models may take a while);
    env: its environment (None: this process's)."""
    port = free_port()
    args = [sys.executable, "-m", "splitrpc.bench.helpers.model_server", "--port", str(port), "--wait", wait,
            "--models", ",".join(models), "--device", device, "--max-batch", str(max_batch)]
    proc = Proc(args + (["--small"] if small else []), env=env)
    proc.wait_line("READY", ready_s)
    return proc, port


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m splitrpc.bench.helpers.model_server", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", help=f"address to bind (default: the library's, {SERVER_DEFAULTS['host']})")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--wait", choices=("adaptive", "poll", "block"), default="poll")
    p.add_argument("--models", metavar="NAMES", required=True, help="comma list of the zoo's models, or all")
    p.add_argument("--device", default="cpu", help="where the models run: cpu, cuda, cuda:N")
    p.add_argument("--small", action="store_true", help="the models' small configurations (same I/O sizes)")
    p.add_argument("--max-batch", type=int, default=FUNCTION_DEFAULTS["max_batch"],
                   help="calls per batch at most (default: the library's, %(default)s)")
    p.add_argument("--max-delay-us", type=int, default=FUNCTION_DEFAULTS["max_delay_us"],
                   help="how long a batch may wait for more calls (default: the library's, %(default)s)")
    return p


def main(argv=None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    from splitrpc import Server
    from splitrpc.services import models

    try:
        names = models.resolve(a.models)
    except ValueError as e:
        p.error(f"--models: {e}")
    if a.max_batch < 1 or a.max_delay_us < 0:
        p.error("need --max-batch >= 1 and --max-delay-us >= 0")
    srv = Server(a.host, a.port, wait=a.wait)
    try:
        models.register_models(srv, names, device=a.device, small=a.small, max_batch=a.max_batch,
                               max_delay_us=a.max_delay_us)
        srv.add_function(stats_function(srv), STATS_FUNC_ID, "stats", raw=True, max_request=64,
                         max_response=STATS_MAX_REPLY, capacity=16)
    except Exception as e:  # no torch (ImportError names the extra), an unusable device, ...
        srv.close()
        print(f"--models: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: srv.stop())
    where = ", ".join(sorted({d for n, d in srv.stats()["devices"].items() if n in names}))
    print(f"READY serving {','.join(names)} on {a.host}:{srv.port} (models on {where}, wait={a.wait}, "
          f"max batch {a.max_batch})", flush=True)  # the socket is bound: calls from now on wait for serve()
    try:
        srv.serve()
    finally:
        srv.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
