"""dpdk.py: DPDK's EAL from Python: initialised once per process, never exiting it, with its ports and errors."""
from __future__ import annotations

import errno
from typing import Sequence

from ._native import ffi, lib
from .errors import SplitRPCError


class DPDKError(SplitRPCError):
    """The EAL could not be initialised or used; the message is DPDK's reason."""


class DPDKUnavailable(DPDKError):
    """This build of splitrpc has no DPDK (libdpdk was not found when it was built)."""


def available() -> bool:
    """True when the native core was compiled with DPDK."""
    return bool(lib.srpc_features() & lib.SRPC_FEATURE_DPDK)


def last_error() -> str:
    return ffi.string(lib.srpc_dpdk_last_error()).decode("utf-8", "replace")


def init(args: Sequence[str]) -> None:
    """Initialises the EAL with these EAL arguments (no program name), e.g.
    ``["--no-huge", "--no-shconf", "-l", "0", "--vdev=net_memif0"]``. Once per process: later
    calls do nothing after a success and raise the same error after a failure. The calling
    thread keeps its CPU affinity."""
    if isinstance(args, (str, bytes)):
        raise TypeError("args must be a sequence of EAL arguments, not one string")
    keep = [ffi.new("char[]", str(a).encode()) for a in args]
    argv = ffi.new("const char *[]", keep) if keep else ffi.NULL
    rc = lib.srpc_dpdk_init(argv, len(keep))
    if rc == -errno.ENOTSUP:
        raise DPDKUnavailable(last_error())
    if rc != 0:
        raise DPDKError(f"DPDK EAL initialisation failed ({errno.errorcode.get(-rc, rc)}): {last_error()}")


def ready() -> bool:
    return bool(lib.srpc_dpdk_ready())


def port_count() -> int:
    """Ethernet ports DPDK probed (physical ones, and --vdev virtual ones)."""
    rc = lib.srpc_dpdk_port_count()
    if rc == -errno.ENOTSUP:
        raise DPDKUnavailable(last_error())
    if rc < 0:
        raise DPDKError("DPDK is not initialised: call splitrpc.dpdk.init(args) first")
    return rc
