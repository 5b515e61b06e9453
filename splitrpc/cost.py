"""cost.py: admission cost: how a function's calls are costed, by the native engine, once per call when its request is complete: from the request header's aux, or from a table indexed by integer keys at a fixed place in the request; max_batch_cost then bounds a batch's summed cost as max_batch bounds its count.

A cost is what a policy needs to know about a call before running it: the sampling work of a
GNN request's seed nodes (Quiver's PSGS), a request's peak GPU memory (GNNSched), the number of
embedding rows it looks up (HPS). A key outside the table (negative, past its end, huge) fails
that call alone with BAD_REQUEST, saying which key; the callback never sees it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

AUX = "aux"  # cost = the request header's aux (docs/PROTOCOL.md: a cost estimate or a priority class)
KEY_DTYPES = {"int32": 4, "int64": 8}  # little-endian signed keys


@dataclass(frozen=True)
class CostTable:
    """Each call costs the sum of ``table[key]`` over its ``keys`` integer keys, read from the
    request at byte ``key_offset`` (``key_dtype``: "int32" or "int64", little-endian, back to
    back). The keys must lie within one input tensor (a raw function's request must be long
    enough to hold them, else that call gets BAD_REQUEST). ``keys=None`` (raw functions only):
    every key from key_offset to the end of the request, a variable-length list such as a GNN
    request's seed nodes (a request that does not end on a whole key gets BAD_REQUEST; none
    costs 0). The table is copied at registration.
    """
    table: object
    key_offset: int = 0
    keys: int | None = 1
    key_dtype: str = "int32"

    def __post_init__(self) -> None:
        t = np.asarray(self.table)
        if t.ndim != 1 or t.size == 0 or t.size >= 2**32:
            raise ValueError(f"a cost table is a non-empty 1-D array of per-key costs, got shape {t.shape}")
        if not np.issubdtype(t.dtype, np.integer) or (t.size and (t.min() < 0 or t.max() > 0xFFFFFFFF)):
            raise ValueError("a cost table holds integers from 0 to 2**32 - 1")
        if self.key_dtype not in KEY_DTYPES:
            raise ValueError(f"key_dtype must be one of {sorted(KEY_DTYPES)}, got {self.key_dtype!r}")
        if (self.keys is not None and (isinstance(self.keys, bool) or not isinstance(self.keys, int)
                                       or self.keys < 1)) or self.key_offset < 0:
            raise ValueError(f"a cost table needs keys >= 1 and key_offset >= 0, got {self.keys}, {self.key_offset}")
        object.__setattr__(self, "table", np.ascontiguousarray(t, dtype=np.uint32))

    @property
    def key_bytes(self) -> int:
        return KEY_DTYPES[self.key_dtype]

    def check_fits(self, in_sizes: list[int], raw: bool) -> None:
        """Raises ValueError unless the keys lie within one input tensor (or a raw function's
        largest request); keys=None only for a raw function."""
        if self.keys is None:
            if not raw:
                raise ValueError("keys=None (every key to the end of the request) is for raw functions; "
                                 "a tensor function's keys are a fixed count")
            if self.key_offset > in_sizes[0]:
                raise ValueError(f"cost keys start at byte {self.key_offset}, past max_request {in_sizes[0]}")
            return
        end = self.key_offset + self.keys * self.key_bytes
        start = 0
        for size in in_sizes:
            if self.key_offset >= start and end <= start + size:
                return
            start += size
        where = "max_request" if raw else "one input tensor"
        raise ValueError(f"cost keys at bytes {self.key_offset}..{end} do not lie within {where} "
                         f"(input sizes {in_sizes})")
