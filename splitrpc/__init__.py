"""splitrpc: a control/data path splitting RPC runtime for low-latency ML inference serving."""
from splitrpc import _native, gpu
from splitrpc.auth import Key, KeyTable
from splitrpc.client import Client
from splitrpc.cost import CostTable
from splitrpc.errors import (AuthUnavailable, BadRequest, Busy, CallTimeout, DeadlineExceeded, DescriptionChanged,
                             DtypeMismatch, Forbidden, InputError, InternalError, KeyFileError, MissingInput,
                             NativeError, NoSuchFunction, NotContiguous, RemoteError, ReplyMismatch, ShapeMismatch,
                             SplitRPCError, TooLarge, Unavailable, UnexpectedInput, UnknownFunction, Draining)
from splitrpc.executor import Executor, LanePool, StagePipeline, ThreadPool, current_lane, stage_result
from splitrpc.function_config import FunctionConfig
from splitrpc.gpu import GPUError, GPUUnavailable
from splitrpc.pool import Pool
from splitrpc.server import QueueView, Server
from splitrpc.spec import TensorSpec

__version__ = _native.version()


def _check_build() -> None:
    """The extension must come from the same build as the installed package."""
    from importlib import metadata

    try:
        dist = metadata.version("splitrpc")
    except metadata.PackageNotFoundError:
        return
    if dist != __version__:
        raise ImportError(f"splitrpc native extension {__version__} does not match the installed package {dist}")


_check_build()


def features() -> dict[str, bool]:
    """What the native core was compiled with: {'cuda': bool, 'dpdk': bool, 'sanitizers': bool}."""
    return _native.features()


__all__ = [
    "Server", "Client", "TensorSpec", "features", "SplitRPCError", "NativeError", "CallTimeout", "RemoteError",
    "UnknownFunction", "BadRequest", "Busy", "DeadlineExceeded", "InternalError", "TooLarge", "Draining", "Unavailable",
    "GPUError", "GPUUnavailable", "gpu", "ThreadPool", "LanePool", "StagePipeline", "Executor", "current_lane",
    "stage_result", "CostTable", "FunctionConfig", "QueueView", "Pool", "Key", "KeyTable", "Forbidden", "AuthUnavailable",
    "KeyFileError", "NoSuchFunction", "InputError", "MissingInput", "UnexpectedInput", "DtypeMismatch", "ShapeMismatch",
    "NotContiguous", "ReplyMismatch", "DescriptionChanged",
]
