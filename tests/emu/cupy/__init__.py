"""cupy (EMULATED, test-only): the part of CuPy's API that splitrpc's device callbacks and tests use, over the emulated CUDA driver (native/tests/fake_libcuda.c), for running the GPU code paths without a GPU. Put tests/emu first on PYTHONPATH and the emulated libcuda.so.1 on LD_LIBRARY_PATH.

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

    def __setitem__(self, key, value) -> None:
        if isinstance(value, ndarray):
            _enqueue(lambda: self._host().__setitem__(key, value._host()))
        else:
            v = np.asarray(value)
            _enqueue(lambda: self._host().__setitem__(key, v))

    def _binary(self, other, op):
        out = ndarray(np.broadcast_shapes(self.shape, other.shape if isinstance(other, ndarray) else np.shape(other)),
                      np.result_type(self.dtype, other.dtype if isinstance(other, ndarray) else np.asarray(other)))

        def run():
            b = other._host() if isinstance(other, ndarray) else other
            op(self._host(), b, out=out._host())
        _enqueue(run)
        return out

    def __add__(self, other):
        return self._binary(other, np.add)

    def __sub__(self, other):
        return self._binary(other, np.subtract)

    def __mul__(self, other):
        return self._binary(other, np.multiply)

    __radd__, __rmul__ = __add__, __mul__

    def get(self) -> np.ndarray:
        """A host copy, after the current stream's work (synchronises it)."""
        out = np.empty(self.shape, self.dtype)
        _enqueue(lambda: np.copyto(out, self._host()))
        cuda.get_current_stream().synchronize()
        return out


def _out_or_new(a, out):
    return out if out is not None else ndarray(a.shape, a.dtype)


def add(a, b, out=None):
    out = _out_or_new(a, out)

    def run():
        np.add(a._host(), b._host() if isinstance(b, ndarray) else b, out=out._host())
    _enqueue(run)
    return out


def multiply(a, b, out=None):
    out = _out_or_new(a, out)

    def run():
        np.multiply(a._host(), b._host() if isinstance(b, ndarray) else b, out=out._host())
    _enqueue(run)
    return out


def empty(shape, dtype=np.float32) -> ndarray:
    return ndarray(shape, dtype)


def empty_like(a: ndarray) -> ndarray:
    return ndarray(a.shape, a.dtype)


def asarray(a, dtype=None) -> ndarray:
    h = np.ascontiguousarray(a, dtype=dtype)
    out = ndarray(h.shape, h.dtype)
    _enqueue(lambda: np.copyto(out._host(), h))
    return out


def asnumpy(a: ndarray) -> np.ndarray:
    return a.get()
