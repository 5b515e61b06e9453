"""native.py: native functions: a C callback (srpc_native_fn, native/include/splitrpc_server.h) registered with Server.add_function like a Python one, whose batches the worker runs inside the C loop with no Python per batch (run to completion); and the built-ins vecadd and echo as native functions, what the runtime costs without Python."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from splitrpc._native import server as _server

ADDRESS_LIMIT = 1 << 64  # an address or ctx is a 64-bit pointer
# The built-ins served natively: name -> the C symbol (native/src/tools/native_fns.c). Their sizes
# are the Python built-ins' (server/builtin.py), so a client cannot tell the two apart.
BUILTINS = {"vecadd": "srpc_native_vecadd", "echo": "srpc_native_echo"}
VECADD_BYTES = 1024  # float32[256]: the one shape the native vecadd computes


@dataclass(frozen=True)
class NativeFunction:
    """A C function ``int f(void *ctx, srpc_server_t *srv, srpc_batch_t *b)`` at `address`, given
    `ctx`: it reads b->in, writes b->out (raw: b->out_len) and returns 0, or an error code (1..8)
    that every call of the batch gets. It runs on the server's worker thread, inside the C loop:
    it must be quick and must not block (nothing is received, and the engine thread does not
    take over, while it runs), and must not call back into the server's batch API but
    srpc_server_fail_call. `keep` is held while the server lives (the library the code is in, the
    memory ctx points to; a cffi callback given with ``error=`` so that a Python exception fails
    the batch instead of answering it). Host functions with the inline executor only.

    `raw`, `request_bytes`, `response_bytes` (None: any) are the registration the code was
    written for, checked by Server.add_function (a tensor function: the sums of its inputs' and
    outputs' sizes; raw: max_request and max_response)."""
    address: int
    ctx: int = 0
    name: str | None = None
    keep: Any = None
    raw: bool | None = None
    request_bytes: int | None = None
    response_bytes: int | None = None

    def __post_init__(self) -> None:
        for what, v, low in (("address", self.address, 1), ("ctx", self.ctx, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v < ADDRESS_LIMIT:
                raise ValueError(f"a native function's {what} is a 64-bit pointer ({'non-zero' if low else '>= 0'}), "
                                 f"got {v!r}")

    @property
    def __name__(self) -> str:  # what add_function names a function by when name= is not given
        return self.name or f"native@{self.address:#x}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{self.__name__} is a native function: the server runs it, Python cannot call it")

    def check(self, raw: bool, request_bytes: int, response_bytes: int) -> None:
        """Raises ValueError when a registration is not the one the code was written for."""
        if self.raw is not None and self.raw != raw:
            raise ValueError(f"{self.__name__} is a {'raw' if self.raw else 'tensor'} function")
        for what, want, got in (("request", self.request_bytes, request_bytes),
                                ("response", self.response_bytes, response_bytes)):
            if want is not None and want != got:
                raise ValueError(f"{self.__name__} takes a {what} of {want} bytes, registered with {got}")

    @classmethod
    def builtin(cls, name: str, max_request: int | None = None) -> NativeFunction:
        """The built-in `name` in C: "vecadd" (a tensor function of float32[256] -> float32[256])
        or "echo" (raw, max_request = max_response = the size given here: each of its queue
        elements is that many bytes)."""
        if name not in BUILTINS:
            raise ValueError(f"no native built-in {name!r}: one of {', '.join(BUILTINS)}")
        if name == "echo":
            if isinstance(max_request, bool) or not isinstance(max_request, int) or max_request < 1:
                raise ValueError("the native echo needs max_request, its request and reply limit")
            address, ctx, keep = _server.native_symbol(BUILTINS[name], max_request)
            return cls(address, ctx, name, keep, raw=True, request_bytes=max_request, response_bytes=max_request)
        address, ctx, keep = _server.native_symbol(BUILTINS[name])
        return cls(address, ctx, name, keep, raw=False, request_bytes=VECADD_BYTES, response_bytes=VECADD_BYTES)
