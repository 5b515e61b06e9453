"""spec.py: TensorSpec, the name, dtype and shape of one input or output of a function."""
from dataclasses import dataclass
from math import prod

import numpy as np


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    shape: tuple

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if any(d <= 0 for d in self.shape):
            raise ValueError(f"tensor {self.name!r}: every dimension must be positive, got {self.shape}")
        dt = np.dtype(self.dtype)
        if dt.hasobject:
            raise ValueError(f"tensor {self.name!r}: dtype {self.dtype!r} is not a plain numeric type")
        # The wire carries little-endian tensors (docs/PROTOCOL.md, Data of the built-in services).
        object.__setattr__(self, "dtype", dt.newbyteorder("<").str if dt.byteorder == ">" else dt.str)

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.np_dtype.itemsize
