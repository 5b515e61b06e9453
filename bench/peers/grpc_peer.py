"""grpc_peer.py: the benchmark services over grpcio (raw bytes, generic handler), sync or asyncio server, asyncio client.

    python -m splitrpc.bench.peers.grpc_peer serve  --service vecadd --port 50051 [--variant sync|asyncio] [--workers 16]
    python -m splitrpc.bench.peers.grpc_peer client --service vecadd --port 50051 --concurrency 16 --calls 5000 --warmup 500

No protobuf: the method `/splitrpc.bench.Peer/<service>` takes and returns the request and reply
bytes as they are (no (de)serializer). `serve` prints READY once it accepts calls and stops on
SIGTERM/SIGINT; `client` prints one JSON line (see common.result). The client (a grpc.aio channel,
`--concurrency` tasks each with one call outstanding) is the same for both server variants;
--variant only labels its result.
"""
from __future__ import annotations

import asyncio
import signal
import sys
from concurrent.futures import ThreadPoolExecutor

from . import common

try:
    import grpc
    import grpc.aio
    _IMPORT_ERROR = None
except ImportError as e:  # the orchestrator reports it instead of crashing
    grpc = None
    _IMPORT_ERROR = e

PEER = "grpcio"
VARIANTS = ("sync", "asyncio")
SERVICE = "splitrpc.bench.Peer"
MAX_MESSAGE = 16 << 20  # head requests are 588 KiB; gRPC's default limit is 4 MiB, raised for headroom
OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE)]


def available() -> tuple[bool, str]:
    """Whether grpcio imports here, and why not."""
    if grpc is None:
        return False, f"grpcio not installed ({_IMPORT_ERROR})"
    return True, f"grpcio {grpc.__version__}"


def method(service: str) -> str:
    return f"/{SERVICE}/{service}"


# ------------------------------------------------------------------ server


def _handler(service: str, fn) -> "grpc.GenericRpcHandler":
    return grpc.method_handlers_generic_handler(SERVICE, {service: grpc.unary_unary_rpc_method_handler(fn)})


def serve_sync(args) -> None:
    def call(request: bytes, context) -> bytes:
        try:
            return common.compute(args.service, request)
        except ValueError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))

    server = grpc.server(ThreadPoolExecutor(max_workers=args.workers), options=OPTIONS)
    server.add_generic_rpc_handlers((_handler(args.service, call),))
    if server.add_insecure_port(f"{args.host}:{args.port}") == 0:
        raise OSError(f"grpc: cannot bind {args.host}:{args.port}")
    stop = common.stop_event()
    server.start()
    common.ready()
    while not stop.wait(0.5):
        pass
    server.stop(grace=1.0).wait()


async def serve_asyncio(args) -> None:
    async def call(request: bytes, context) -> bytes:
        try:
            return common.compute(args.service, request)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))

    server = grpc.aio.server(options=OPTIONS)
    server.add_generic_rpc_handlers((_handler(args.service, call),))
    if server.add_insecure_port(f"{args.host}:{args.port}") == 0:
        raise OSError(f"grpc: cannot bind {args.host}:{args.port}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    common.ready()
    await stop.wait()
    await server.stop(grace=1.0)


# ------------------------------------------------------------------ client


async def client_async(args) -> dict:
    async with grpc.aio.insecure_channel(f"{args.host}:{args.port}", options=OPTIONS) as channel:
        stub = channel.unary_unary(method(args.service))  # no serializers: bytes in, bytes out

        def call(request: bytes):
            return stub(request, timeout=args.timeout_s)

        def describe(e):
            return f"{e.code().name}: {e.details()}"

        async def run_phase(tally, request, concurrency):
            if args.rate:
                await common.open_loop_async(call, request, tally, args.rate, args.seed, (grpc.aio.AioRpcError,),
                                             describe=describe)
            else:
                await common.closed_loop_async(call, request, tally, concurrency, (grpc.aio.AioRpcError,),
                                               describe=describe)

        return await common.measure_async(args, PEER, run_phase)


def main(argv=None) -> int:
    p, subs = common.parser("grpc_peer", VARIANTS, __doc__)
    subs["serve"].add_argument("--workers", type=int, default=16, help="thread pool size of the sync server")
    args = p.parse_args(argv)

    def serve(a):
        return serve_sync(a) if a.variant == "sync" else asyncio.run(serve_asyncio(a))

    return common.run_cli(p, args, available, serve, client_async, open_loop=True)


if __name__ == "__main__":
    sys.exit(main())
