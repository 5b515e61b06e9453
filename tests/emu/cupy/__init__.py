"""cupy (EMULATED, test-only; no memory pool, so the reuse hazards of CuPy's pool cannot show here): the part of CuPy's API that splitrpc's device callbacks and tests use (add, matmul, maximum, exp, swapaxes, concatenate, empty, empty_like, asarray, asnumpy, ndarray reshape views, indexing, arithmetic, assignment and get(), cuda.*), over the emulated CUDA driver (native/tests/fake_libcuda.c), for running the GPU code paths without a GPU. Put tests/emu first on PYTHONPATH and the emulated libcuda.so.1 on LD_LIBRARY_PATH.

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

    def reshape(self, *shape) -> "ndarray":
        """A view with another shape (the array is C-contiguous)."""
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        shape = np.empty(0 if self.size == 0 else self.size, np.uint8).reshape(shape).shape if -1 in shape else shape
        if int(np.prod(shape, dtype=np.int64)) != self.size:
            raise ValueError(f"cannot reshape {self.shape} into {shape}")
        return ndarray(shape, self.dtype, memptr=self.data)

    def __getitem__(self, key) -> "ndarray":
        """A new array of self[key] (host index arrays, slices, None), computed in stream order."""
        key = tuple(k.get() if isinstance(k, ndarray) else k for k in key) if isinstance(key, tuple) else \
            (key.get() if isinstance(key, ndarray) else key)
        shape = np.empty(self.shape, np.uint8)[key].shape
        out = ndarray(shape, self.dtype)
        _enqueue(lambda: out._host().__setitem__(Ellipsis, self._host()[key]))
        return out

    def _binary(self, other, op, reflected: bool = False) -> "ndarray":
        if isinstance(other, np.ndarray):  # as CuPy: no implicit host-to-device conversion
            raise TypeError("Unsupported type <class 'numpy.ndarray'> (emulated cupy, as CuPy)")
        b = other._host if isinstance(other, ndarray) else (lambda: other)
        shape = np.broadcast_shapes(self.shape, other.shape if isinstance(other, ndarray) else ())
        # dtypes as numpy 2 promotes them (a Python scalar does not widen an array)
        dtype = op(np.empty(0, self.dtype), other._host()[:0] if isinstance(other, ndarray) else other).dtype
        out = ndarray(shape, dtype)
        _enqueue(lambda: out._host().__setitem__(Ellipsis, op(b(), self._host()) if reflected else op(self._host(), b())))
        return out

    def __add__(self, o):
        return self._binary(o, np.add)

    def __radd__(self, o):
        return self._binary(o, np.add, True)

    def __sub__(self, o):
        return self._binary(o, np.subtract)

    def __mul__(self, o):
        return self._binary(o, np.multiply)

    def __truediv__(self, o):
        return self._binary(o, np.divide)

    def __rtruediv__(self, o):
        return self._binary(o, np.divide, True)

    def __neg__(self):
        return self._binary(-1, np.multiply)

    def __matmul__(self, o):
        return matmul(self, o)

    @property
    def T(self) -> "ndarray":
        return swapaxes(self, 0, 1)

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
    if cuda.get_current_stream()._capture is not None:  # as CuPy 14 does (cupy/cupy#6290)
        raise NotImplementedError("calling cuBLAS API during stream capture is currently unsupported")
    out = out if out is not None else ndarray((*a.shape[:-1], b.shape[-1]), np.result_type(a.dtype, b.dtype))

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


def _unary(a: ndarray, fn, shape=None) -> ndarray:
    out = ndarray(shape if shape is not None else a.shape, fn(np.empty((0,) * a.ndim, a.dtype)).dtype)
    _enqueue(lambda: out._host().__setitem__(Ellipsis, fn(a._host())))
    return out


def exp(a: ndarray) -> ndarray:
    return _unary(a, np.exp)


def maximum(a: ndarray, b) -> ndarray:
    return a._binary(b, np.maximum)


def swapaxes(a: ndarray, i: int, j: int) -> ndarray:
    """A contiguous copy with axes i and j swapped (arrays here are always C-contiguous)."""
    shape = list(a.shape)
    shape[i], shape[j] = shape[j], shape[i]
    return _unary(a, lambda h: np.swapaxes(h, i, j), tuple(shape))


def concatenate(arrays, axis: int = 0) -> ndarray:
    arrays = list(arrays)
    shape = np.concatenate([np.empty(x.shape, np.uint8) for x in arrays], axis=axis).shape
    out = ndarray(shape, np.result_type(*[x.dtype for x in arrays]))
    _enqueue(lambda: np.concatenate([x._host() for x in arrays], axis=axis, out=out._host()))
    return out
