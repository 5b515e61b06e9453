"""triton_peer.py: the benchmark services as NVIDIA Triton models (PyTriton, dynamic batching, CPU) and a gRPC asyncio client.

    python -m splitrpc.bench.helpers.peers.triton_peer serve  --service vecadd --port 8001
    python -m splitrpc.bench.helpers.peers.triton_peer client --service vecadd --port 8001 --concurrency 16 --calls 2000 --warmup 200

`serve` binds one model named after the service: float32 tensors of the service's shapes (echo:
one variable-length uint8 tensor), max batch 8, dynamic batcher with no queue delay (splitrpc's
defaults), one CPU instance running the builtin callback. Ports: gRPC on --port (the one the
client uses), HTTP on --port+1 (PyTriton's own control connection), metrics off. Triton takes
seconds to start: READY is printed once the model is loaded; SIGTERM/SIGINT stop server and
stub. The client (tritonclient.grpc.aio, `--concurrency` tasks each with one call outstanding)
builds the input tensors from the request bytes on every call and checks the output bytes.
"""
from __future__ import annotations

import os
import sys
import sysconfig

import numpy as np

from splitrpc.bench.helpers.peers import common

try:
    import pytriton  # noqa: F401  (the server side)
    import tritonclient.grpc  # noqa: F401  (the client side)
    _IMPORT_ERROR = None
except ImportError as e:  # the orchestrator reports it instead of crashing
    _IMPORT_ERROR = e

PEER = "triton"
VARIANTS = ("grpc",)
MAX_BATCH = 8
ECHO_TENSORS = ([("x", (-1,))], [("y", (-1,))])


def available() -> tuple[bool, str]:
    """Whether PyTriton and tritonclient import here, and why not."""
    if _IMPORT_ERROR is not None:
        return False, f"nvidia-pytriton / tritonclient not installed ({_IMPORT_ERROR})"
    from importlib import metadata
    return True, (f"nvidia-pytriton {metadata.version('nvidia-pytriton')}, "
                  f"tritonclient {metadata.version('tritonclient')}")


def ports(port: int) -> dict:
    """Triton's ports derived from --port."""
    return {"grpc_port": port, "http_port": port + 1, "metrics_port": port + 2}


def tensors(service: str) -> tuple[list, list]:
    """(inputs, outputs) of the model: lists of (name, per-item shape)."""
    return ECHO_TENSORS if service == "echo" else common.TENSORS[service]


def dtype(service: str):
    return np.uint8 if service == "echo" else np.float32


def prefer_own_libpython() -> None:
    """The Python-backend stub links libpython3.X.so.1.0 dynamically and finds the system's copy
    first when it is not the running interpreter's: put this interpreter's library directory first
    on LD_LIBRARY_PATH, which Triton and its stub inherit."""
    libdir = sysconfig.get_config_var("LIBDIR")
    if not libdir or not os.path.isdir(libdir):
        return
    rest = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != libdir]
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join([libdir, *rest])


# ------------------------------------------------------------------ server


def serve(args) -> int:
    ready_out = common.keep_stdout_for_ready()  # Triton's own log lines go to stderr
    prefer_own_libpython()  # before Triton starts: it copies os.environ when it launches
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    ins, outs = tensors(args.service)
    out_names = [name for name, _ in outs]

    @batch
    def infer(**inputs):
        arrays = common.compute_batch(args.service, [inputs[name] for name, _ in ins])
        return dict(zip(out_names, arrays))

    stop = common.stop_event()
    p = ports(args.port)
    config = TritonConfig(grpc_address=args.host, grpc_port=p["grpc_port"], http_address=args.host,
                          http_port=p["http_port"], metrics_port=p["metrics_port"], allow_metrics=False,
                          allow_gpu_metrics=False, allow_cpu_metrics=False, exit_on_error=True)
    triton = Triton(config=config)
    try:
        triton.bind(model_name=args.service, infer_func=infer,
                    inputs=[Tensor(name=n, dtype=dtype(args.service), shape=s) for n, s in ins],
                    outputs=[Tensor(name=n, dtype=dtype(args.service), shape=s) for n, s in outs],
                    config=ModelConfig(max_batch_size=MAX_BATCH,
                                       batcher=DynamicBatcher(max_queue_delay_microseconds=0)),
                    strict=True)
        triton.run()
        common.ready(ready_out)
        while not stop.wait(1.0):
            if not triton.is_alive():
                print("triton_peer: Triton or its model proxy stopped", file=sys.stderr, flush=True)
                return 1
        return 0
    finally:
        triton.stop()


# ------------------------------------------------------------------ client


async def client_async(args) -> dict:
    from tritonclient.grpc import InferInput, InferRequestedOutput
    from tritonclient.grpc.aio import InferenceServerClient
    from tritonclient.utils import InferenceServerException

    ins, outs = tensors(args.service)
    out_names = [name for name, _ in outs]
    triton_type = "UINT8" if args.service == "echo" else "FP32"

    def arrays(request: bytes) -> list:
        if args.service == "echo":
            return [np.frombuffer(request, dtype=np.uint8).reshape(1, -1)]
        return common.decode(args.service, request)

    async with InferenceServerClient(url=f"{args.host}:{args.port}") as client:

        async def call(request: bytes):
            inputs = []
            for (name, _), arr in zip(ins, arrays(request)):
                inp = InferInput(name, list(arr.shape), triton_type)
                inp.set_data_from_numpy(arr)
                inputs.append(inp)
            return await client.infer(args.service, inputs, outputs=[InferRequestedOutput(n) for n in out_names],
                                      client_timeout=args.timeout_s)

        def reply_bytes(res) -> bytes:
            return b"".join(res.as_numpy(n).tobytes() for n in out_names)

        async def run_phase(tally, request, concurrency):
            await common.closed_loop_async(call, request, tally, concurrency, (InferenceServerException,),
                                           reply_bytes)

        return await common.measure_async(args, PEER, run_phase)


def main(argv=None) -> int:
    p, _ = common.parser("triton_peer", VARIANTS, __doc__)
    return common.run_cli(p, p.parse_args(argv), available, serve, client_async)


if __name__ == "__main__":
    sys.exit(main())
