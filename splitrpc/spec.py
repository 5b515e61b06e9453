"""spec.py: TensorSpec, the name, dtype and shape of one input or output of a function."""
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if any(d <= 0 for d in self.shape):
            raise ValueError(f"tensor {self.name!r}: every dimension must be positive, got {self.shape}")
        dt = np.dtype(self.dtype)
        if dt.kind not in "biufc" or dt.itemsize == 0 or dt.shape or dt.names:  # what describe's readers take
            raise ValueError(f"tensor {self.name!r}: dtype {self.dtype!r} is not a plain numeric type")
        # The wire carries little-endian tensors (docs/PROTOCOL.md, Data of the built-in services).
        object.__setattr__(self, "dtype", dt.newbyteorder("<").str if dt.byteorder == ">" else dt.str)

    @property
    def np_dtype(self) -> np.dtype[Any]:
        return np.dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.np_dtype.itemsize

    def random(self, rng: np.random.Generator) -> npt.NDArray[Any]:
        """A random tensor of this spec (for driving a function without a request file): floats
        standard normal, integers uniform in 0 .. 15 (small enough to be a valid index for most
        functions), booleans fair coins."""
        dt = self.np_dtype
        if dt.kind == "f":
            return rng.standard_normal(self.shape).astype(dt)
        if dt.kind in "iu":
            return rng.integers(0, 16, self.shape).astype(dt)
        if dt.kind == "b":
            return rng.integers(0, 2, self.shape).astype(dt)
        if dt.kind == "c":
            return (rng.standard_normal(self.shape) + 1j * rng.standard_normal(self.shape)).astype(dt)
        return rng.integers(0, 256, self.nbytes, dtype=np.uint8).view(dt).reshape(self.shape)
