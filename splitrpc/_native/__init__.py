"""_native: the only code that touches cffi's ffi/lib; turns -errno returns into exceptions and C names into Python ones.

Like pyzmq's zmq/backend/cffi, this package is the binding layer: its modules, one per concern
(server, client, loadgen, gpu, dpdk, raw, wire), hold every cffi call, struct and buffer, and the
public classes (splitrpc.Server, splitrpc.Client, splitrpc.gpu, splitrpc.dpdk, splitrpc.loadgen)
are thin layers over them.
"""
import errno as _errno
import os as _os

try:
    from splitrpc._native._splitrpc_cffi import ffi, lib
except ImportError as exc:  # pragma: no cover - depends on how the package was installed
    raise ImportError(
        "splitrpc's native extension (_splitrpc_cffi) is not built or not importable. "
        "Install the package with `pip install .` from the repository root and import it from "
        f"outside the source tree. Cause: {exc}"
    ) from exc

from splitrpc.errors import NativeError
from splitrpc._native import sodium_pick as _sodium_pick

# Before the core's first use of libsodium: a newer one than the system's where PyNaCl has it.
_sodium_pick.pick(ffi.string(lib.srpc_auth_library_env()).decode())

ETIMEDOUT = _errno.ETIMEDOUT
ESHUTDOWN = _errno.ESHUTDOWN
ENOBUFS = _errno.ENOBUFS
EBUSY = _errno.EBUSY
ENOTSUP = _errno.ENOTSUP
ENODEV = _errno.ENODEV


def check(rc: int, what: str) -> int:
    """Returns rc when it is >= 0, else raises NativeError for the -errno it carries."""
    if rc < 0:
        raise NativeError(-rc, f"{what}: {_os.strerror(-rc)}")
    return rc


def text(ptr, errors: str = "strict") -> str | None:
    """A NUL-terminated C string as str (UTF-8); None for NULL."""
    if ptr == ffi.NULL:
        return None
    return ffi.string(ptr).decode("utf-8", errors)


def version() -> str:
    return text(lib.srpc_version())


def features() -> dict:
    f = lib.srpc_features()
    return {
        "cuda": bool(f & lib.SRPC_FEATURE_CUDA),
        "dpdk": bool(f & lib.SRPC_FEATURE_DPDK),
        "sanitizers": bool(f & lib.SRPC_FEATURE_SANITIZE),
        "fault_injection": bool(f & lib.SRPC_FEATURE_FAULTS),
    }


def strerror(code: int) -> str:
    """The C core's name of an error code: "BUSY", "TIMEOUT", ... ("UNKNOWN" for a code it does not know)."""
    return text(lib.srpc_strerror(int(code)))


# The error codes that travel in ERROR datagrams (1 .. SRPC_E_MAX - 1) and their names, from C.
ERROR_NAMES = {code: strerror(code) for code in range(1, lib.SRPC_E_MAX)}
E_BUSY = lib.SRPC_E_BUSY
E_INTERNAL = lib.SRPC_E_INTERNAL
