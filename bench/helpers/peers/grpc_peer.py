"""grpc_peer.py: the benchmark services over grpcio (raw bytes, generic handler), sync or asyncio server, asyncio client.

    python -m splitrpc.bench.helpers.peers.grpc_peer serve  --service vecadd --port 50051 [--variant sync|asyncio] [--workers 16]
    python -m splitrpc.bench.helpers.peers.grpc_peer client --service vecadd --port 50051 --concurrency 16 --calls 5000 --warmup 500
    python -m splitrpc.bench.helpers.peers.grpc_peer serve  --port 50051 --models lenet,resnet50 [--device cuda] [--small]
    python -m splitrpc.bench.helpers.peers.grpc_peer client --model lenet --port 50051 [--small] --concurrency 32 --calls 2000

No protobuf: the method `/splitrpc.bench.Peer/<service>` takes and returns the request and reply
bytes as they are (no (de)serializer). `serve` prints READY once it accepts calls and stops on
SIGTERM/SIGINT; `client` prints one JSON line (see common.result). The client (a grpc.aio channel,
`--concurrency` tasks each with one call outstanding) is the same for both server variants;
--variant only labels its result.

`serve --models NAMES` (a comma list or "all") also serves those models of the zoo
(splitrpc.services.models), each as the method `/splitrpc.bench.Peer/<model>`, with the same
callbacks splitrpc serves, each call a batch of 1 (--service is then optional). --device cpu:
the callback gets numpy arrays over the request bytes. --device cuda[:N]: the peer copies the
request to the GPU itself (torch tensors) and the reply back: the data movement splitrpc's GPU
path avoids. `client --model NAME` sends that model's example request (--seed) and checks every
reply against the model's reference within tolerance (splitrpc.services.models.check_reply;
--small when the server runs the small configurations) instead of comparing bytes.
"""
from __future__ import annotations

import asyncio
import signal
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from splitrpc.bench.helpers.peers import common

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


def _handler(methods: dict) -> "grpc.GenericRpcHandler":
    return grpc.method_handlers_generic_handler(
        SERVICE, {name: grpc.unary_unary_rpc_method_handler(fn) for name, fn in methods.items()})


def model_computes(names: str | None, device: str = "cpu", small: bool = False) -> dict:
    """{model name: compute(request bytes) -> reply bytes} for the named models of the zoo;
    a request of the wrong size raises ValueError."""
    if not names:
        return {}
    from splitrpc.services.models import MODELS, resolve, split
    from splitrpc.services.models.adapter import usable_device

    run_on = usable_device(device)  # as splitrpc serves them: the CPU where torch sees no CUDA device
    if run_on != device:
        print("grpc_peer: torch sees no CUDA device, the models run on the CPU", file=sys.stderr)
    computes = {}
    for name in resolve(names):
        info = MODELS[name]
        computes[name] = _model_compute(info, info.build(device=run_on, small=small), run_on, split)
    return computes


def _model_compute(info, callback, device: str, split):
    def decode(request) -> list:
        """The (1, ...) input arrays: views on the request bytes, no copy."""
        try:
            return [a[None] for a in split(info.inputs, request)]
        except ValueError as e:
            raise ValueError(f"{info.name}: request of {e}") from None

    def on_cpu(request) -> bytes:
        ins = decode(request)
        outs = [np.empty((1, *s.shape), s.np_dtype) for s in info.outputs]
        callback(*ins, *outs)
        return b"".join(o.tobytes() for o in outs)

    if device == "cpu":
        return on_cpu
    import torch

    dev = torch.device(device)
    dtypes = [torch.from_numpy(np.empty(0, s.np_dtype)).dtype for s in info.outputs]

    def on_gpu(request) -> bytes:
        # The request bytes are read-only (torch has no read-only tensors): copied straight to the GPU.
        ins = [torch.tensor(a, device=dev) for a in decode(request)]  # host -> GPU copy
        outs = [torch.empty((1, *s.shape), dtype=t, device=dev) for s, t in zip(info.outputs, dtypes)]
        callback(*ins, *outs)  # on torch's current stream; .cpu() below waits for it
        return b"".join(o.cpu().numpy().tobytes() for o in outs)  # GPU -> host copy

    return on_gpu


def _methods(args, wrap) -> dict:
    """The served methods: the --service (if any) and the --models, each compute wrapped by wrap(compute)."""
    computes = {args.service: lambda request: common.compute(args.service, request)} if args.service else {}
    computes.update(model_computes(args.models, args.device, args.small))
    return {name: wrap(fn) for name, fn in computes.items()}


def serve_sync(args) -> None:
    def wrap(compute):
        def call(request: bytes, context) -> bytes:
            try:
                return compute(request)
            except ValueError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))

        return call

    methods = _methods(args, wrap)
    server = grpc.server(ThreadPoolExecutor(max_workers=args.workers), options=OPTIONS)
    server.add_generic_rpc_handlers((_handler(methods),))
    if server.add_insecure_port(f"{args.host}:{args.port}") == 0:
        raise OSError(f"grpc: cannot bind {args.host}:{args.port}")
    stop = common.stop_event()
    server.start()
    common.ready()
    while not stop.wait(0.5):
        pass
    server.stop(grace=1.0).wait()


async def serve_asyncio(args) -> None:
    def wrap(compute):
        async def call(request: bytes, context) -> bytes:
            try:
                return compute(request)
            except ValueError as e:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))

        return call

    methods = _methods(args, wrap)
    server = grpc.aio.server(options=OPTIONS)
    server.add_generic_rpc_handlers((_handler(methods),))
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
        stub = channel.unary_unary(method(args.model or args.service))  # no serializers: bytes in, bytes out

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
    p, subs = common.parser("grpc_peer", VARIANTS, __doc__, models=True)
    subs["serve"].add_argument("--workers", type=int, default=16, help="thread pool size of the sync server")
    subs["serve"].add_argument("--models", metavar="NAMES",
                               help="also serve these models of the zoo (comma list or all), method = model name")
    subs["serve"].add_argument("--device", default="cpu", help="where the models run: cpu, cuda, cuda:N")
    subs["serve"].add_argument("--small", action="store_true", help="the models' small configurations")
    args = p.parse_args(argv)
    if args.cmd == "serve" and not (args.service or args.models):
        p.error("serve: give --service, --models or both")
    if args.cmd == "serve" and args.models:
        from splitrpc.services.models import resolve

        try:
            resolve(args.models)
        except ValueError as e:
            p.error(f"--models: {e}")

    def serve(a):
        return serve_sync(a) if a.variant == "sync" else asyncio.run(serve_asyncio(a))

    return common.run_cli(p, args, available, serve, client_async, open_loop=True)


if __name__ == "__main__":
    sys.exit(main())
