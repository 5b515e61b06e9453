"""cupy (EMULATED, test-only): the part of CuPy's API that splitrpc's device callbacks and tests use (add, matmul, empty, empty_like, asarray, asnumpy, ndarray views, assignment and get(), cuda.*), over the emulated CUDA driver (native/tests/fake_libcuda.c), for running the GPU code paths without a GPU. Put tests/emu first on PYTHONPATH and the emulated libcuda.so.1 on LD_LIBRARY_PATH.

An ndarray is device memory the CPU cannot touch (the driver hands out PROT_NONE addresses); its
operations are queued on the current stream as host functions that work on the driver's shadow
of that memory, so they run in stream order, after the copies the runtime queued before them,
exactly where a kernel would. Nothing here is a GPU measurement.
"""
from __future__ import annotations

import numpy as np

from . import cuda
from .cuda import _enqueue, _shadow_view

EMULATED = True


class ndarray:
    """A C-contiguous array in emulated device memory (memptr: a cuda.MemoryPointer)."""

    def __init__(self, shape, dtype=np.float32, memptr=None):
        self.shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        if memptr is None:
            memptr = cuda.alloc(self.nbytes)
        self.data = memptr

    @property
    def ptr(self) -> int:
        return self.data.ptr

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": None, "stream": cuda.get_current_stream().ptr}

    def _host(self) -> np.ndarray:
        """The shadow of this array (only inside queued work: the stream decides when it is valid)."""
        return _shadow_view(self.ptr, self.shape, self.dtype)

    def get(self) -> np.ndarray:
        """A host copy, once the current stream's earlier work is done: CuPy's get() copies on the
        current stream and waits for it too."""
        box = {}
        s = cuda.get_current_stream()
        cuda._submit(s, lambda: box.__setitem__("v", self._host().copy()))
        s.synchronize()
        return box["v"]

    def __setitem__(self, key, value) -> None:
        if isinstance(value, ndarray):
            _enqueue(lambda: self._host().__setitem__(key, value._host()))
        else:
            v = np.asarray(value)
            _enqueue(lambda: self._host().__setitem__(key, v))


def add(a, b, out=None):
    out = out if out is not None else ndarray(a.shape, a.dtype)

    def run():
        np.add(a._host(), b._host() if isinstance(b, ndarray) else b, out=out._host())
    _enqueue(run)
    return out


def matmul(a, b, out=None):
    out = out if out is not None else ndarray((*a.shape[:-1], b.shape[-1]), a.dtype)

    def run():
        np.matmul(a._host(), b._host(), out=out._host())
    _enqueue(run)
    return out


def empty_like(a: ndarray) -> ndarray:
    return ndarray(a.shape, a.dtype)


def empty(shape, dtype=np.float32) -> ndarray:
    return ndarray(shape, dtype)


def asarray(a) -> ndarray:
    """A device copy of a host array, queued on the current stream (as CuPy's is)."""
    if isinstance(a, ndarray):
        return a
    host = np.ascontiguousarray(a)
    out = ndarray(host.shape, host.dtype)
    out[...] = host
    return out


def asnumpy(a) -> np.ndarray:
    return a.get() if isinstance(a, ndarray) else np.asarray(a)
