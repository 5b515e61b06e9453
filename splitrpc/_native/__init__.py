"""_native: the only code that touches cffi's ffi/lib; turns -errno returns into exceptions."""
import errno as _errno
import os as _os

try:
    from ._splitrpc_cffi import ffi, lib
except ImportError as exc:  # pragma: no cover - depends on how the package was installed
    raise ImportError(
        "splitrpc's native extension (_splitrpc_cffi) is not built or not importable. "
        "Install the package with `pip install .` from the repository root and import it from "
        f"outside the source tree. Cause: {exc}"
    ) from exc

from ..errors import NativeError

ETIMEDOUT = _errno.ETIMEDOUT
ESHUTDOWN = _errno.ESHUTDOWN
ENOBUFS = _errno.ENOBUFS


def check(rc: int, what: str) -> int:
    """Returns rc when it is >= 0, else raises NativeError for the -errno it carries."""
    if rc < 0:
        raise NativeError(-rc, f"{what}: {_os.strerror(-rc)}")
    return rc


def version() -> str:
    return ffi.string(lib.srpc_version()).decode()


def features() -> dict:
    f = lib.srpc_features()
    return {
        "cuda": bool(f & lib.SRPC_FEATURE_CUDA),
        "dpdk": bool(f & lib.SRPC_FEATURE_DPDK),
        "sanitizers": bool(f & lib.SRPC_FEATURE_SANITIZE),
        "fault_injection": bool(f & lib.SRPC_FEATURE_FAULTS),
    }
