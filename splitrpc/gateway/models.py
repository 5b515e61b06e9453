"""models.py: the gateway without its transports: splitrpc functions as KServe v2 models (a described tensor function is a model of its name), requests' tensors checked against their TensorSpecs before any call, one splitrpc call per row of a batched tensor, replies split into the outputs, errors mapped to the protocol's HTTP statuses and gRPC codes, and the gateway's Prometheus metrics."""
from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from numpy.typing import NDArray

from splitrpc import describe as describe_
from splitrpc.errors import (BadRequest, Busy, CallTimeout, DeadlineExceeded, Draining, RemoteError, SplitRPCError,
                             TooLarge, Unavailable, UnknownFunction)
from splitrpc.pool import NoReplica
from splitrpc.spec import TensorSpec

# numpy dtype (TensorSpec.dtype, little-endian str) -> the protocol's datatype; BYTES has no TensorSpec
DATATYPES = {np.dtype(k).str: v for k, v in (("bool", "BOOL"), ("uint8", "UINT8"), ("uint16", "UINT16"),
                                              ("uint32", "UINT32"), ("uint64", "UINT64"), ("int8", "INT8"),
                                              ("int16", "INT16"), ("int32", "INT32"), ("int64", "INT64"),
                                              ("float16", "FP16"), ("float32", "FP32"), ("float64", "FP64"))}
NUMPY_OF = {v: np.dtype(k) for k, v in DATATYPES.items()}
MAX_ROWS = 4096  # calls one inference request may make (rows of its batch dimension)
PLATFORM = "splitrpc"


class InvalidInput(SplitRPCError):
    """A request the protocol refuses before any call: HTTP 400, gRPC INVALID_ARGUMENT."""


class ModelNotFound(InvalidInput):
    """No model of that name (or version): HTTP 404, gRPC NOT_FOUND."""


@dataclass(frozen=True)
class Model:
    """A splitrpc tensor function served as a model: its inputs and outputs take an optional
    leading batch dimension, each row one call."""
    name: str
    version: str
    func_id: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def metadata(self) -> dict[str, Any]:
        """The protocol's model metadata (shapes with -1 for the batch dimension)."""
        def tensors(specs: Sequence[TensorSpec]) -> list[dict[str, Any]]:
            return [{"name": s.name, "datatype": DATATYPES[s.dtype], "shape": [-1, *s.shape]} for s in specs]
        return {"name": self.name, "versions": [self.version], "platform": PLATFORM,
                "inputs": tensors(self.inputs), "outputs": tensors(self.outputs)}

    def requests(self, tensors: dict[str, NDArray[Any]]) -> tuple[list[bytes], bool]:
        """The splitrpc requests of one inference request (one per row) and whether its tensors had
        a batch dimension. InvalidInput for a missing, unknown, mistyped or misshapen tensor."""
        names = [s.name for s in self.inputs]
        extra = sorted(set(tensors) - set(names))
        missing = [n for n in names if n not in tensors]
        if extra or missing:
            wrong = [f"missing {missing}"] * bool(missing) + [f"unknown {extra}"] * bool(extra)
            raise InvalidInput(f"model {self.name!r} takes inputs {names}: {'; '.join(wrong)}")
        rows: int | None = None
        batched = False
        parts = []
        for spec in self.inputs:
            t = tensors[spec.name]
            if t.dtype != np.dtype(spec.dtype):
                raise InvalidInput(f"input {spec.name!r}: datatype {DATATYPES.get(t.dtype.str, t.dtype.name)}, "
                                   f"the model takes {DATATYPES[spec.dtype]}")
            if t.shape == spec.shape:
                n, b = 1, False
            elif t.ndim == len(spec.shape) + 1 and t.shape[1:] == spec.shape and 1 <= t.shape[0] <= MAX_ROWS:
                n, b = t.shape[0], True
            else:
                raise InvalidInput(f"input {spec.name!r}: shape {list(t.shape)}, the model takes {list(spec.shape)} "
                                   f"or [N, {', '.join(map(str, spec.shape))}] with 1 <= N <= {MAX_ROWS}")
            if rows is not None and (n, b) != (rows, batched):
                raise InvalidInput(f"input {spec.name!r}: {n} rows where the others have {rows}")
            rows, batched = n, b
            parts.append(np.ascontiguousarray(t, dtype=np.dtype(spec.dtype)).reshape(n, -1).view(np.uint8))
        assert rows is not None  # a tensor function has at least one input
        joined = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
        return [joined[i].tobytes() for i in range(rows)], batched

    def outputs_of(self, replies: Sequence[bytes], batched: bool) -> dict[str, NDArray[Any]]:
        """The output tensors of the calls' replies (each the outputs back to back)."""
        want = sum(s.nbytes for s in self.outputs)
        if any(len(r) != want for r in replies):
            raise SplitRPCError(f"model {self.name!r}: a reply of {[len(r) for r in replies if len(r) != want][0]} "
                                f"bytes where its outputs take {want}")
        buf = np.frombuffer(b"".join(replies), np.uint8).reshape(len(replies), want)
        out, off = {}, 0
        for s in self.outputs:
            col = buf[:, off:off + s.nbytes].copy().view(np.dtype(s.dtype)).reshape(len(replies), *s.shape)
            out[s.name] = col if batched else col[0]
            off += s.nbytes
        return out


def models_of(description: describe_.Description) -> dict[str, Model]:
    """The models a server's description offers: its tensor functions (raw ones have no tensors to
    check; the server's own ping and describe are not models)."""
    return {f.name: Model(f.name, f.version or "1", f.func_id, tuple(f.inputs), tuple(f.outputs))
            for f in description.functions
            if not f.raw and f.func_id < describe_.RESERVED_MIN and all(s.dtype in DATATYPES for s in (*f.inputs,
                                                                                                       *f.outputs))}


def tensor_from(name: str, datatype: str, shape: Sequence[Any], data: Any = None,
                raw: bytes | memoryview | None = None) -> NDArray[Any]:
    """One request tensor from its JSON (or protobuf) description and its data: a (nested) list,
    or raw little-endian bytes. InvalidInput for anything that does not add up."""
    if not isinstance(datatype, str) or datatype not in NUMPY_OF:
        raise InvalidInput(f"input {name!r}: datatype {datatype!r} is not served (one of {sorted(NUMPY_OF)})")
    if not isinstance(shape, (list, tuple)) or any(isinstance(d, bool) or not isinstance(d, int) or d < 0
                                                   for d in shape):
        raise InvalidInput(f"input {name!r}: shape must be a list of non-negative integers, got {shape!r}")
    dt = NUMPY_OF[datatype]
    count = math.prod(shape)
    if raw is not None:
        if len(raw) != count * dt.itemsize:
            raise InvalidInput(f"input {name!r}: {len(raw)} bytes of data for shape {list(shape)} of {datatype} "
                               f"({count * dt.itemsize} bytes)")
        arr = np.frombuffer(raw, dt)
    else:
        if data is None:
            raise InvalidInput(f"input {name!r} has no data")
        try:
            if dt.kind in "iu":  # integers: in the type's range, never wrapped or truncated
                vals = np.asarray(data)
                if vals.dtype.kind not in "iub":
                    raise ValueError("not all integers")
                info = np.iinfo(dt)
                if vals.size and (int(vals.min()) < info.min or int(vals.max()) > info.max):
                    raise ValueError(f"a value outside {info.min} .. {info.max}")
            arr = np.asarray(data, dtype=dt)
        except (TypeError, ValueError, OverflowError) as e:
            raise InvalidInput(f"input {name!r}: data is not {datatype}: {e}") from None
        if arr.size != count:
            raise InvalidInput(f"input {name!r}: {arr.size} values for shape {list(shape)}")
    try:
        return arr.reshape(shape)
    except ValueError as e:  # a shape numpy cannot make, e.g. [0, 10**30]
        raise InvalidInput(f"input {name!r}: shape {list(shape)}: {e}") from None


# error -> (HTTP status, gRPC status code name, retry-after seconds or None)
def status_of(e: BaseException) -> tuple[int, str, int | None]:
    if isinstance(e, ModelNotFound):
        return 404, "NOT_FOUND", None
    if isinstance(e, (InvalidInput, BadRequest, TooLarge, UnknownFunction)):
        return 400, "INVALID_ARGUMENT", None
    if isinstance(e, (Busy, NoReplica, Unavailable, Draining)):
        return 503, "UNAVAILABLE", 1
    if isinstance(e, (CallTimeout, DeadlineExceeded)):
        return 504, "DEADLINE_EXCEEDED", None
    return 500, "INTERNAL", None


class Gateway:
    """The replicas behind the gateway (an aio.Pool) and the models they serve. start() in the event
    loop the faces run on; infer() from it."""

    def __init__(self, replicas: Sequence[str], *, timeout: float = 5.0, describe_timeout: float = 30.0,
                 registry: Any = None, key: Any = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.replicas, self.timeout, self.describe_timeout = list(replicas), timeout, describe_timeout
        self.key = key  # replicas with keys: the gateway's calls signed with it (docs/security.md)
        self.pool: Any = None
        self.models: dict[str, Model] = {}
        self.registry = registry if registry is not None else CollectorRegistry()
        self.requests = Counter("splitrpc_gateway_requests", "Inference requests by model, protocol and status",
                                ["model", "protocol", "status"], registry=self.registry)
        self.seconds = Histogram("splitrpc_gateway_request_seconds", "Inference request latency in the gateway",
                                 ["model", "protocol"], registry=self.registry,
                                 buckets=(1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 1.0, 10.0))
        self.calls = Counter("splitrpc_gateway_calls", "splitrpc calls made (one per row of a request)",
                             ["model"], registry=self.registry)

    async def start(self) -> None:
        """The pool over the replicas, and the models from the first replica that describes itself
        (tried until describe_timeout). SplitRPCError when none does."""
        from splitrpc import aio

        self.pool = aio.Pool(self.replicas, timeout=self.timeout, **({"key": self.key} if self.key else {}))
        end = time.monotonic() + self.describe_timeout
        last: BaseException | None = None
        while time.monotonic() < end:
            try:
                reply = await self.pool.call(describe_.DESCRIBE_ID, describe_.DESCRIBE_REQUEST, timeout=1.0,
                                             idempotent=True)
                self.models = models_of(describe_.decode_description(reply))
                return
            except (SplitRPCError, ValueError) as e:
                last = e
                await asyncio.sleep(0.2)
        raise SplitRPCError(f"no replica of {self.replicas} described itself within {self.describe_timeout:g} s: "
                            f"{last}")

    async def stop(self) -> None:
        if self.pool is not None:
            await self.pool.aclose(timeout=1.0)
            self.pool = None

    def ready(self) -> bool:
        """Some replica is taking calls (the pool's pings say so)."""
        if self.pool is None or not self.models:
            return False
        return any(r["available"] for r in self.pool.stats()["replicas"].values())

    def model(self, name: str, version: str | None = None) -> Model:
        m = self.models.get(name)
        if m is None or (version not in (None, "", m.version)):
            raise ModelNotFound(f"no model {name!r}" + (f" version {version!r}" if version else "")
                                + f" (served: {sorted(self.models)})")
        return m

    def server_metadata(self) -> dict[str, Any]:
        from splitrpc import __version__

        return {"name": "splitrpc-gateway", "version": __version__, "extensions": ["binary_tensor_data"]}

    def timeout_of(self, micros: Any) -> float:
        """A request's own timeout (the protocol's, in microseconds) in seconds, never beyond the
        gateway's; the gateway's when it gives none. InvalidInput for one that is not a finite
        positive number."""
        if micros is None or micros == 0:
            return self.timeout
        if isinstance(micros, bool) or not isinstance(micros, (int, float)) or not 0 < micros < float("inf"):
            raise InvalidInput(f"timeout must be a positive number of microseconds, got {micros!r}")
        return min(micros / 1e6, self.timeout)

    async def infer(self, model: Model, tensors: dict[str, NDArray[Any]], timeout: float | None = None
                    ) -> dict[str, NDArray[Any]]:
        """The model's outputs for the request's input tensors: checked first (InvalidInput: no
        call made), then one splitrpc call per row, concurrently; the first failure raises."""
        reqs, batched = model.requests(tensors)
        self.calls.labels(model.name).inc(len(reqs))
        tmo = self.timeout if timeout is None else timeout
        replies = await asyncio.gather(*[self.pool.call(model.func_id, r, tmo) for r in reqs])
        return model.outputs_of(replies, batched)

    def observe(self, model: str, protocol: str, status: int | str, seconds: float) -> None:
        self.requests.labels(model, protocol, str(status)).inc()
        self.seconds.labels(model, protocol).observe(seconds)


def error_text(e: BaseException) -> str:
    return e.message if isinstance(e, RemoteError) and e.message else str(e)
