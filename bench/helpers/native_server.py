"""native_server.py: the built-ins vecadd and echo served as native functions (splitrpc.native), for `splitrpc serve splitrpc.bench.helpers.native_server:register`: the benchmarks' measure of what the runtime costs per call with no Python callback."""
from __future__ import annotations

from splitrpc import Server, TensorSpec
from splitrpc.native import NativeFunction
from splitrpc.services.builtin import ECHO_MAX


def register(server: Server) -> None:
    """Registers vecadd (1) and echo (3) in C, with the Python built-ins' sizes."""
    f32 = "float32"
    server.add_function(NativeFunction.builtin("vecadd"), 1, "vecadd", [TensorSpec("x", f32, (256,))],
                        [TensorSpec("y", f32, (256,))])
    server.add_function(NativeFunction.builtin("echo", ECHO_MAX), 3, "echo", raw=True, max_request=ECHO_MAX,
                        max_response=ECHO_MAX, capacity=64)
