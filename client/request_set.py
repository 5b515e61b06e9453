"""request_set.py: request sets for `splitrpc load --requests FILE.npz`: several different requests
in one run (each with its expected reply, a weight and a class name), saved to and read from
an npz file, and the per-call request draw.

The file holds `data` (uint8: all requests back to back) and `offsets` (uint64, n + 1:
request k is data[offsets[k]:offsets[k + 1]]), optionally `expect_data` and `expect_offsets`
(the expected reply of each request, the same way), `weights` (float, n: each call draws its
request with these probabilities; default uniform) and `names` (str, n: the class of each
request in the report; requests may share a class)."""
from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass

import numpy as np

from splitrpc.client import as_buffer


@dataclass
class RequestSet:
    """The requests of a run, with their expected replies (None: replies are not checked),
    weights (None: uniform) and class names (None: each request is its own class, named by
    its index)."""
    requests: list[bytes]
    expects: list[bytes] | None = None
    weights: np.ndarray | None = None
    names: list[str] | None = None

    def __post_init__(self) -> None:
        n = len(self.requests)
        if n == 0:
            raise ValueError("a request set needs at least one request")
        if n >= 2**32:
            raise ValueError("too many requests in one set")
        for k, r in enumerate(self.requests):
            if len(r) >= 2**32:
                raise ValueError(f"request {k} is {len(r)} B, over 2^32 - 1")
        if self.expects is not None and len(self.expects) != n:
            raise ValueError(f"{len(self.expects)} expected replies for {n} requests")
        if self.weights is not None:
            w = np.asarray(self.weights, dtype=np.float64)
            if w.shape != (n,):
                raise ValueError(f"weights has shape {w.shape}, expected ({n},): one weight per request")
            if not np.all(np.isfinite(w)) or np.any(w < 0):
                raise ValueError("weights must be finite and >= 0")
            if not w.sum() > 0:
                raise ValueError("weights are all zero: no request could be drawn")
            self.weights = w
        if self.names is not None:
            if len(self.names) != n:
                raise ValueError(f"{len(self.names)} names for {n} requests")
            self.names = [str(x) for x in self.names]
            if any(not x for x in self.names):
                raise ValueError("names must not be empty")

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def probabilities(self) -> np.ndarray:
        """Each request's probability of being drawn (the weights normalised; uniform without)."""
        if self.weights is None:
            return np.full(len(self), 1.0 / len(self))
        return self.weights / self.weights.sum()

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n request indices (uint32), each drawn independently with `probabilities`."""
        if self.weights is None:
            return rng.integers(0, len(self), size=n, dtype=np.uint32)
        return rng.choice(len(self), size=n, p=self.probabilities).astype(np.uint32)

    def class_names(self) -> list[str]:
        """The class of each request: its name, else its index."""
        return list(self.names) if self.names is not None else [str(k) for k in range(len(self))]


def _pack(bufs) -> tuple[np.ndarray, np.ndarray]:
    views = [as_buffer(b) for b in bufs]
    off = np.zeros(len(views) + 1, dtype=np.uint64)
    np.cumsum([v.nbytes for v in views], out=off[1:])
    data = np.frombuffer(b"".join(views), dtype=np.uint8)
    return data, off


def save_request_set(path, requests, expects=None, weights=None, names=None) -> None:
    """Writes a request set to `path` (an npz file, exactly that name: see this module's
    docstring for the arrays). requests and expects are sequences of bytes-likes (expects:
    one per request, or None), weights one float per request (None: uniform), names one
    string per request (None: classes named by index). Raises ValueError for a set that
    load_request_set would refuse."""
    rs = RequestSet([bytes(as_buffer(r)) for r in requests],
                    None if expects is None else [bytes(as_buffer(e)) for e in expects],
                    None if weights is None else np.asarray(weights, dtype=np.float64),
                    None if names is None else list(names))
    arrays = {}
    arrays["data"], arrays["offsets"] = _pack(rs.requests)
    if rs.expects is not None:
        arrays["expect_data"], arrays["expect_offsets"] = _pack(rs.expects)
    if rs.weights is not None:
        arrays["weights"] = rs.weights
    if rs.names is not None:
        arrays["names"] = np.array(rs.names, dtype=str)
    with open(os.fspath(path), "wb") as f:
        np.savez(f, **arrays)


def _split(z, data_key: str, off_key: str) -> list[bytes]:
    data, off = z[data_key], z[off_key]
    if data.ndim != 1 or data.dtype != np.uint8:
        raise ValueError(f"{data_key} must be a 1-d uint8 array, got {data.dtype} of shape {data.shape}")
    if off.ndim != 1 or off.dtype.kind not in "iu" or len(off) < 2:
        raise ValueError(f"{off_key} must be a 1-d integer array of n + 1 >= 2 offsets, got {off.dtype} "
                         f"of shape {off.shape}")
    if int(off.max()) >= 2**63:
        raise ValueError(f"{off_key} holds offsets past the data's {len(data)} B")
    o = off.astype(np.int64)
    if o[0] != 0:
        raise ValueError(f"{off_key}[0] is {int(o[0])}, not 0")
    d = np.diff(o)
    if np.any(d < 0):
        k = int(np.argmax(d < 0))
        raise ValueError(f"{off_key} decreases at {k + 1} ({int(o[k])} -> {int(o[k + 1])})")
    if o[-1] != len(data):
        raise ValueError(f"{off_key} ends at {int(o[-1])}, not at the end of {data_key} ({len(data)} B)")
    if np.any(d >= 2**32):
        raise ValueError(f"{off_key}: a piece of {int(d.max())} B is over 2^32 - 1")
    raw = data.tobytes()
    return [raw[a:b] for a, b in zip(o[:-1].tolist(), o[1:].tolist())]


def load_request_set(path) -> RequestSet:
    """Reads a request set written by save_request_set (or any npz with those arrays). Raises
    ValueError, naming the file, when it is not an npz, misses an array or holds inconsistent
    ones (offsets out of range or decreasing, lengths mismatched, weights negative, NaN or all
    zero); OSError when it cannot be read."""
    where = os.fspath(path)
    try:
        z = np.load(where, allow_pickle=False)
    except (zipfile.BadZipFile, EOFError, ValueError) as e:
        raise ValueError(f"{where}: not a request-set npz file ({e})") from None
    if not hasattr(z, "files"):  # an .npy file: one array
        raise ValueError(f"{where}: a single array, not a request-set npz file (data, offsets, ...)")
    with z:
        try:
            missing = [k for k in ("data", "offsets") if k not in z.files]
            if missing:
                raise ValueError(f"missing {' and '.join(missing)} (have: {', '.join(z.files) or 'nothing'})")
            if ("expect_data" in z.files) != ("expect_offsets" in z.files):
                raise ValueError("expect_data and expect_offsets come together")
            requests = _split(z, "data", "offsets")
            expects = _split(z, "expect_data", "expect_offsets") if "expect_data" in z.files else None
            weights = names = None
            if "weights" in z.files:
                w = z["weights"]
                if w.dtype.kind not in "fiu":
                    raise ValueError(f"weights must be numbers, got {w.dtype}")
                weights = w.astype(np.float64)
            if "names" in z.files:
                nm = z["names"]
                if nm.dtype.kind != "U" or nm.ndim != 1:
                    raise ValueError(f"names must be a 1-d array of strings, got {nm.dtype} of shape {nm.shape}")
                names = nm.tolist()
            return RequestSet(requests, expects, weights, names)
        except (ValueError, zipfile.BadZipFile, EOFError) as e:
            raise ValueError(f"{where}: {e}") from None
