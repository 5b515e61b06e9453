"""probes.py: what a section of `splitrpc check` needs before it can run (a GPU, CuPy, PyTorch with CUDA), each raising Skipped with the reason, and whether the CUDA driver in this process is the tests' emulation (for the labels)."""
from __future__ import annotations

import ctypes
import os
from types import ModuleType
from typing import Any

from splitrpc import gpu
from splitrpc.check.section import Skipped

EMULATED_LABEL = "EMULATED"


def driver_emulated() -> bool:
    """True when the libcuda.so.1 this process loaded is the tests' emulated driver
    (native/tests/fake_libcuda.c, which exports fake_cuda_shadow); False for a real driver or
    none. Loads nothing: a driver not yet loaded is not looked at."""
    try:
        lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError:
        return False
    return hasattr(lib, "fake_cuda_shadow")


def need_gpu(device: str) -> int:
    """The ordinal of `device` ("cuda:N") once it is usable; Skipped("no GPU: ...") otherwise."""
    ordinal = gpu.parse_device(device)
    if ordinal < 0:
        raise Skipped(f"--device is {device}")
    if not gpu.available(ordinal):
        raise Skipped(f"no GPU: {gpu.last_error() or 'no CUDA driver'}")
    return ordinal


def need_cupy() -> Any:
    """The cupy module; Skipped when it is not installed."""
    try:
        return gpu.import_cupy()
    except ImportError:
        raise Skipped("CuPy is not installed: device callbacks get CuPy arrays (pip install 'splitrpc[gpu]')") from None


def need_torch_cuda() -> ModuleType:
    """The torch module, with a CUDA device; Skipped otherwise (PyTorch runs its own CUDA runtime,
    which the emulated driver does not serve)."""
    import importlib.util

    if driver_emulated() and importlib.util.find_spec("torch") is not None:
        # Known without importing PyTorch (seconds, in every such section's child): its CUDA runtime
        # is not served by the emulated driver this process has loaded, so it would see no device.
        raise Skipped("PyTorch with CUDA needed: the driver is the tests' emulation, and PyTorch's own CUDA "
                      "runtime cannot be emulated")
    try:
        import torch
    except ImportError:
        raise Skipped("PyTorch is not installed (pip install 'splitrpc[models]')") from None
    if not torch.cuda.is_available():
        why = ("the driver is the tests' emulation, and PyTorch's own CUDA runtime cannot be emulated"
               if driver_emulated() else f"torch {torch.__version__} sees no CUDA device")
        raise Skipped(f"PyTorch with CUDA needed: {why}")
    return torch
