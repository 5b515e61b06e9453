"""dpdk.py: DPDK's EAL from Python: initialised once per process, never exiting it, with its ports and errors."""
from __future__ import annotations

from typing import Sequence

from splitrpc._native import dpdk as _dpdk
from splitrpc.errors import DPDKError, DPDKUnavailable  # noqa: F401 - public here as splitrpc.dpdk.DPDKError


def available() -> bool:
    """True when the native core was compiled with DPDK."""
    return _dpdk.available()


def last_error() -> str:
    return _dpdk.last_error()


def init(args: Sequence[str]) -> None:
    """Initialises the EAL with these EAL arguments (no program name), e.g.
    ``["--no-huge", "--no-shconf", "-l", "0", "--vdev=net_memif0"]``. Once per process: later
    calls do nothing after a success and raise the same error after a failure. The calling
    thread keeps its CPU affinity."""
    if isinstance(args, (str, bytes)):
        raise TypeError("args must be a sequence of EAL arguments, not one string")
    _dpdk.init(args)


def ready() -> bool:
    return _dpdk.ready()


def port_count() -> int:
    """Ethernet ports DPDK probed (physical ones, and --vdev virtual ones)."""
    return _dpdk.port_count()
