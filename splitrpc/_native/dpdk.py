"""dpdk.py (binding layer): DPDK's EAL through cffi: initialisation with EAL arguments, readiness, probed ports and the last error."""
from __future__ import annotations

import errno
from typing import Sequence

from splitrpc._native import ENOTSUP, ffi, lib, text
from splitrpc.errors import DPDKError, DPDKUnavailable


def available() -> bool:
    """True when the native core was compiled with DPDK."""
    return bool(lib.srpc_features() & lib.SRPC_FEATURE_DPDK)


def last_error() -> str:
    """Why the last failing DPDK call of any thread failed ("" if none)."""
    return text(lib.srpc_dpdk_last_error(), "replace")


def init(args: Sequence[str]) -> None:
    """srpc_dpdk_init with these EAL arguments; raises DPDKUnavailable (no DPDK in this build)
    or DPDKError with DPDK's reason."""
    keep = [ffi.new("char[]", str(a).encode()) for a in args]
    argv = ffi.new("const char *[]", keep) if keep else ffi.NULL
    rc = lib.srpc_dpdk_init(argv, len(keep))
    if rc == -ENOTSUP:
        raise DPDKUnavailable(last_error())
    if rc != 0:
        raise DPDKError(f"DPDK EAL initialisation failed ({errno.errorcode.get(-rc, rc)}): {last_error()}")


def ready() -> bool:
    return bool(lib.srpc_dpdk_ready())


def port_count() -> int:
    """Ethernet ports DPDK probed; raises DPDKUnavailable or DPDKError (not initialised)."""
    rc = lib.srpc_dpdk_port_count()
    if rc == -ENOTSUP:
        raise DPDKUnavailable(last_error())
    if rc < 0:
        raise DPDKError("DPDK is not initialised: call splitrpc.dpdk.init(args) first")
    return rc
