"""cupy.cuda (EMULATED, test-only): devices, streams (the emulated driver's, so the runtime and the callbacks share them), graph capture and replay of the queued work, memory pointers; see tests/emu/cupy/__init__.py."""
from __future__ import annotations

import ctypes
import threading

import numpy as np

_lib = ctypes.CDLL("libcuda.so.1")
if not hasattr(_lib, "fake_cuda_shadow"):
    raise ImportError("the emulated cupy needs the emulated libcuda.so.1 (native/tests/fake_libcuda.c) on "
                      "LD_LIBRARY_PATH, not a real driver")
_lib.fake_cuda_shadow.restype = ctypes.c_void_p
_lib.fake_cuda_shadow.argtypes = [ctypes.c_ulonglong]
_HOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_tls = threading.local()
_pending: dict = {}          # id -> the ctypes callback of a queued host function (kept alive until it ran)
_pending_lock = threading.Lock()
_errors: list = []           # exceptions raised by queued work, raised again by the next synchronize


class CUDARuntimeError(RuntimeError):
    pass


class OutOfMemoryError(MemoryError):
    """cupy.cuda.memory.OutOfMemoryError: an allocation the device has no room for."""


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise CUDARuntimeError(f"{what}: CUDA error {rc} (emulated driver)")


def _shadow_view(ptr: int, shape, dtype) -> np.ndarray:
    """The driver's read-write shadow of device memory at ptr, as an array."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    host = _lib.fake_cuda_shadow(ctypes.c_ulonglong(ptr))
    if not host:
        raise CUDARuntimeError(f"device address {ptr:#x} is not live device memory (emulated driver)")
    buf = (ctypes.c_char * n).from_address(host)
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


class Device:
    """A device; entering it makes its primary context current on this thread."""

    def __init__(self, device: int = 0):
        self.id = int(device)

    def use(self) -> None:
        ctx = ctypes.c_void_p()
        _check(_lib.cuInit(0), "cuInit")
        _check(_lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), self.id), "cuDevicePrimaryCtxRetain")
        _check(_lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def __enter__(self) -> "Device":
        self.use()
        return self

    def __exit__(self, *exc) -> None:
        pass


class Stream:
    """An emulated driver stream (null=True: the legacy default stream). As a context manager,
    the current stream of this thread."""

    def __init__(self, null: bool = False, non_blocking: bool = False):
        self._capture = None
        if null:
            self.ptr = 0
            return
        Device(0).use() if not _current_ctx() else None
        s = ctypes.c_void_p()
        _check(_lib.cuStreamCreate(ctypes.byref(s), 1 if non_blocking else 0), "cuStreamCreate")
        self.ptr = s.value or 0
        self._owned = True

    def __enter__(self) -> "Stream":
        stack = getattr(_tls, "streams", None)
        if stack is None:
            stack = _tls.streams = []
        stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _tls.streams.pop()

    def synchronize(self) -> None:
        _check(_lib.cuStreamSynchronize(ctypes.c_void_p(self.ptr)), "cuStreamSynchronize")
        if _errors:
            e = _errors.pop(0)
            raise CUDARuntimeError(f"queued work failed: {e!r}") from e

    def begin_capture(self) -> None:
        self._capture = []

    def end_capture(self) -> "Graph":
        work, self._capture = self._capture or [], None
        return Graph(work)

    def __del__(self):
        if getattr(self, "_owned", False) and self.ptr:
            try:
                _lib.cuStreamDestroy_v2(ctypes.c_void_p(self.ptr))
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass


Stream.null = Stream(null=True)


class Graph:
    """Captured work, queued again on a stream by each launch."""

    def __init__(self, work: list):
        self.work = work

    def launch(self, stream: Stream | None = None) -> None:
        s = stream or get_current_stream()
        for fn in self.work:
            _submit(s, fn)


def _current_ctx() -> bool:
    ctx = ctypes.c_void_p()
    return _lib.cuCtxGetCurrent(ctypes.byref(ctx)) == 0 and bool(ctx.value)


def get_current_stream() -> Stream:
    stack = getattr(_tls, "streams", None)
    return stack[-1] if stack else Stream.null


def _submit(stream: Stream, fn) -> None:
    """fn as a host function on stream: it runs after the stream's earlier work."""
    def trampoline(_arg):
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - kept for the next synchronize, as a sticky GPU error
            _errors.append(e)
        finally:
            with _pending_lock:
                _pending.pop(key_holder[0], None)

    key_holder = [None]
    cb = _HOSTFN(trampoline)
    key_holder[0] = id(cb)
    with _pending_lock:
        _pending[id(cb)] = cb
    if not _current_ctx():
        Device(0).use()
    rc = _lib.cuLaunchHostFunc(ctypes.c_void_p(stream.ptr), cb, None)
    if rc != 0:
        with _pending_lock:
            _pending.pop(id(cb), None)
        _check(rc, "cuLaunchHostFunc")


def _enqueue(fn) -> None:
    """fn queued on the current stream (or recorded, while it captures a graph). An operation is
    a kernel launch on a GPU: an injected launch failure (fake_cuda_fail_launches) makes it raise
    here, as CuPy raises when a launch fails."""
    rc = _lib.fake_cuda_take_launch_failure()
    if rc:
        raise CUDARuntimeError(f"cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED ({rc}) (emulated driver, injected)")
    s = get_current_stream()
    if s._capture is not None:
        s._capture.append(fn)
    else:
        _submit(s, fn)


class Memory:
    """Device memory of cuMemAlloc, freed with the last pointer to it (after the legacy stream)."""

    def __init__(self, size: int):
        if not _current_ctx():
            Device(0).use()
        p = ctypes.c_ulonglong()
        rc = _lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(max(1, size)))
        if rc == 2:  # CUDA_ERROR_OUT_OF_MEMORY
            raise OutOfMemoryError(f"Out of memory allocating {size:,} bytes (emulated driver)")
        _check(rc, "cuMemAlloc")
        self.ptr, self.size = p.value, size

    def __del__(self):
        try:
            _lib.cuMemFree_v2(ctypes.c_ulonglong(self.ptr))
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class UnownedMemory:
    """Device memory someone else owns (the runtime's device Tensor Queues)."""

    def __init__(self, ptr: int, size: int, owner, device_id: int = 0):
        self.ptr, self.size, self.owner, self.device_id = int(ptr), int(size), owner, device_id


class MemoryPointer:
    def __init__(self, mem, offset: int = 0):
        self.mem, self.offset = mem, int(offset)
        self.ptr = mem.ptr + self.offset


def alloc(nbytes: int) -> MemoryPointer:
    return MemoryPointer(Memory(nbytes), 0)


def emulate_kernel(fn) -> None:
    """EMULATION ONLY (no CuPy counterpart): queue fn() on the current stream as a kernel that
    runs until it returns (a long kernel, or one a test holds until it lets it finish)."""
    _enqueue(fn)
