"""gateway.py: `splitrpc gateway --replicas HOST:PORT,...`: the Open Inference Protocol (KServe v2) front end, HTTP/REST and gRPC on one event loop, in front of splitrpc servers (splitrpc.gateway)."""
from __future__ import annotations

import argparse
import asyncio
import sys
from importlib import util
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from splitrpc.plugins import Capability

NEEDS = ("starlette", "uvicorn", "grpc", "tritonclient.grpc", "prometheus_client")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               caps: list[Capability]) -> argparse.ArgumentParser:
    g = sub.add_parser("gateway", help="KServe v2 / Triton inference protocol (HTTP and gRPC) in front of splitrpc "
                                       "servers")
    g.add_argument("--replicas", required=True, metavar="HOST:PORT,...",
                   help="the splitrpc servers (replicas of one service; a DNS name resolving to several)")
    g.add_argument("--host", default="127.0.0.1", help="where the gateway listens (default: %(default)s)")
    g.add_argument("--http-port", type=int, default=8000, help="HTTP/REST port (default: %(default)s; /metrics too)")
    g.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (default: %(default)s; -1: none)")
    g.add_argument("--timeout", type=float, default=5.0, help="seconds a call may take (default: %(default)s)")
    g.add_argument("--key", metavar="FILE", help="replicas with keys: the gateway's calls signed with this key "
                                                 "(FILE or FILE:ID; docs/security.md)")
    g.set_defaults(func=cmd_gateway)
    return g


async def serve(replicas: list[str], host: str, http_port: int, grpc_port: int, timeout: float,
                started: asyncio.Event | None = None, key: str | None = None) -> bool:
    """Both faces until cancelled (or uvicorn's own signal handling stops it); False when they
    never started (no replica described itself, a port taken)."""
    import uvicorn

    from splitrpc.gateway import Gateway
    from splitrpc.gateway.grpc_service import start_server
    from splitrpc.gateway.http import make_app

    gw = Gateway(replicas, timeout=timeout, key=key)
    server = uvicorn.Server(uvicorn.Config(make_app(gw), host=host, port=http_port, log_level="warning",
                                           lifespan="on"))
    grpc_server = None
    failed: list[BaseException] = []

    async def announce() -> None:
        nonlocal grpc_server
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.02)
        if grpc_port >= 0:
            try:
                grpc_server, port = await start_server(gw, host, grpc_port)
            except Exception as e:  # noqa: BLE001 - e.g. the port taken: the gateway does not start half
                print(f"splitrpc gateway: gRPC on {host}:{grpc_port}: {e}", file=sys.stderr, flush=True)
                failed.append(e)
                server.should_exit = True
                return
        print(f"splitrpc gateway: HTTP http://{host}:{http_port}/v2" + (f", gRPC {host}:{port}" if grpc_port >= 0
                                                                        else "")
              + f"; models {', '.join(sorted(gw.models))} from {', '.join(replicas)}", flush=True)
        if started is not None:
            started.set()

    ann = asyncio.ensure_future(announce())
    try:
        await server.serve()
    finally:
        ann.cancel()
        if grpc_server is not None:
            await grpc_server.stop(grace=1.0)
    return bool(server.started) and not failed


def cmd_gateway(a: argparse.Namespace) -> int:
    missing = [m for m in NEEDS if util.find_spec(m.split(".")[0]) is None]
    if missing:
        print(f"splitrpc gateway: needs {', '.join(missing)}: pip install \"splitrpc[gateway]\"", file=sys.stderr)
        return 2
    replicas = [r.strip() for r in a.replicas.split(",") if r.strip()]
    if not replicas or not a.timeout > 0:
        print("splitrpc gateway: --replicas names at least one HOST:PORT; --timeout is positive seconds",
              file=sys.stderr)
        return 2
    if not asyncio.run(serve(replicas, a.host, a.http_port, a.grpc_port, a.timeout, key=a.key)):
        print(f"splitrpc gateway: did not start (no replica of {a.replicas} described itself, or a port is taken)",
              file=sys.stderr)
        return 1
    return 0
