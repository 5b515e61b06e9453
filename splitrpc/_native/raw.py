"""raw.py (binding layer): the C baselines through cffi: the raw-UDP echo server and its ping-pong or closed-loop clients (no header, no processing: the kernel socket path's limit), and the minimal server of the protocol (its own limit)."""
from __future__ import annotations

import numpy as np

from splitrpc._native import check, ffi, lib


def echo_serve(host: str, port: int, busy: bool, req_size: int, resp_size: int, stop: "StopFlag | None" = None) -> int:
    """srpc_raw_echo_serve on this thread (the GIL released) until stop is set (None: until the
    process ends); its code (0, or -errno)."""
    flag = stop._flag if stop is not None else ffi.new("int *")
    return lib.srpc_raw_echo_serve(host.encode(), port, int(busy), req_size, resp_size, flag)


class StopFlag:
    """Stops a baseline server running on another thread of this process: set() (any thread)."""

    def __init__(self):
        self._flag = ffi.new("int *")

    def set(self) -> None:
        self._flag[0] = 1


def min_serve(host: str, port: int, busy: bool, stop: StopFlag | None = None) -> int:
    """srpc_min_serve on this thread (the GIL released) until stop is set (None: until the process
    ends); its code (0, or -errno)."""
    flag = stop._flag if stop is not None else ffi.new("int *")
    return lib.srpc_min_serve(host.encode(), port, int(busy), flag)


def multi_closed_loop(host: str, port: int, sockets: int, func_id: int, request: bytes, expect: bytes | None,
                      concurrency: int, warmup: int, n: int) -> tuple[np.ndarray, int, int]:
    """srpc_multi_closed_loop: `concurrency` calls of func_id outstanding, each sent from the next of
    `sockets` client sockets in turn: (latency of each of the n recorded calls in ns, 0 where it
    failed; their wall time in ns; the count that failed); raises NativeError."""
    lat = np.zeros(n, np.uint64)
    elapsed, errors = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    exp = ffi.from_buffer(expect) if expect is not None else ffi.NULL
    check(lib.srpc_multi_closed_loop(host.encode(), port, sockets, func_id, ffi.from_buffer(request), len(request),
                                     exp, len(expect or b""), concurrency, warmup, n,
                                     ffi.cast("uint64_t *", lat.ctypes.data), elapsed, errors),
          "srpc_multi_closed_loop")
    return lat, int(elapsed[0]), int(errors[0])


def pingpong(host: str, port: int, req_size: int, resp_size: int, busy: bool, warmup: int, n: int) -> np.ndarray:
    """srpc_raw_pingpong: the latency of each of n calls (ns); raises NativeError."""
    lat = np.zeros(max(n, 1), np.uint64)
    check(lib.srpc_raw_pingpong(host.encode(), port, req_size, resp_size, int(busy), warmup, n,
                                ffi.cast("uint64_t *", lat.ctypes.data)), "raw ping")
    return lat[:n]


def closed_loop(host: str, port: int, req_size: int, resp_size: int, busy: bool, concurrency: int, warmup: int,
                n: int) -> tuple[np.ndarray, int]:
    """srpc_raw_closed_loop: (latency of each of the n recorded calls in ns, their wall time in ns);
    raises NativeError."""
    lat = np.zeros(n, np.uint64)
    elapsed = ffi.new("uint64_t *")
    check(lib.srpc_raw_closed_loop(host.encode(), port, req_size, resp_size, int(busy), concurrency, warmup, n,
                                   ffi.cast("uint64_t *", lat.ctypes.data), elapsed), "srpc_raw_closed_loop")
    return lat, int(elapsed[0])
