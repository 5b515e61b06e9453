"""native.py: native functions: a C callback (srpc_native_fn, native/include/splitrpc_server.h) registered with Server.add_function like a Python one, whose batches the worker runs inside the C loop with no Python per batch (run to completion); and the built-ins vecadd and echo as native functions, what the runtime costs without Python."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from splitrpc._native import ffi, lib

# The built-ins served natively: name -> (func_id, C symbol). Their sizes are the Python
# built-ins' (server/builtin.py), so a client cannot tell the two apart.
BUILTINS = {"vecadd": (1, "srpc_native_vecadd"), "echo": (3, "srpc_native_echo")}


@dataclass(frozen=True)
class NativeFunction:
    """A C function ``int f(void *ctx, srpc_server_t *srv, srpc_batch_t *b)`` at `address`, given `ctx`: it reads
    b->in, writes b->out (raw: b->out_len) and returns 0, or an error code (1..8) that every
    call of the batch gets. It runs on the server's worker thread, inside the C loop: it must
    be quick and must not block (nothing is received while it runs), and must not call back
    into the server's batch API. `keep` is held while the server lives (the library the code
    is in, the memory ctx points to). Host functions with the inline executor only."""
    address: int
    ctx: int = 0
    name: str | None = None
    keep: Any = None

    def __post_init__(self) -> None:
        if isinstance(self.address, bool) or not isinstance(self.address, int) or self.address <= 0:
            raise ValueError(f"a native function needs the address of its C code, got {self.address!r}")
        if isinstance(self.ctx, bool) or not isinstance(self.ctx, int) or self.ctx < 0:
            raise ValueError(f"ctx must be an address (an int >= 0), got {self.ctx!r}")

    @property
    def __name__(self) -> str:  # what add_function names a function by when name= is not given
        return self.name or f"native@{self.address:#x}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{self.__name__} is a native function: the server runs it, Python cannot call it")

    @classmethod
    def builtin(cls, name: str, max_request: int | None = None) -> "NativeFunction":
        """The built-in `name` ("vecadd" or "echo") in C. echo is raw: give its max_request
        (= max_response), the size each of its queue elements has."""
        if name not in BUILTINS:
            raise ValueError(f"no native built-in {name!r}: one of {', '.join(BUILTINS)}")
        fn = ffi.addressof(lib, BUILTINS[name][1])
        keep: Any = None
        ctx = 0
        if name == "echo":
            if not isinstance(max_request, int) or max_request < 1:
                raise ValueError("the native echo needs max_request, its request and reply limit")
            keep = ffi.new("uint32_t *", max_request)
            ctx = int(ffi.cast("uintptr_t", keep))
        return cls(int(ffi.cast("uintptr_t", fn)), ctx, name, keep)
