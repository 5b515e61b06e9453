"""describe.py: the server functions of docs/PROTOCOL.md's Amendment 1: their reserved ids, requests and JSON replies (ping: is the server ready; describe: what it serves), built by the server and read by the client.

One source of truth for both sides: the ids, the request bytes, the reply layout and its
version. A reply is UTF-8 JSON. A client checks the reply's first key, so that a user
function registered under a reserved id on a server older than the amendment (whose reply is
something else) is an error, never taken for a description.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, NoReturn, cast

import numpy as np

from splitrpc._native.wire import PROTOCOLS
from splitrpc.spec import TensorSpec

RESERVED_MIN = 0xFF00          # ids RESERVED_MIN .. 0xFFFF are the server's own; no user function there
PING_ID = 0xFFFF
DESCRIBE_ID = 0xFFFE
PING_REQUEST = b"SRPC-PING"     # the request bytes of each (another request: BAD_REQUEST)
DESCRIBE_REQUEST = b"SRPC-DESCRIBE"
LAYOUT = 1                      # "describe" and "ping" in a reply: the version of its layout
MAX_REPLY = 256 * 1024          # a description longer than this is refused at start (about 600 functions)


class NotDescribed(ValueError):
    """A reply that is not a ping or describe reply of a layout this client reads."""


@dataclass(frozen=True)
class FunctionInfo:
    """One function as a server describes it."""
    func_id: int
    name: str
    version: str | None
    raw: bool
    inputs: tuple[TensorSpec, ...] = ()  # TensorSpecs (tensor functions)
    outputs: tuple[TensorSpec, ...] = ()
    max_request: int | None = None   # raw functions: the request and reply limits in bytes
    max_response: int | None = None
    max_batch: int | None = None
    executor: str = "inline"
    priority: int | None = None
    device: str = "cpu"

    @property
    def request_bytes(self) -> int | None:
        """A tensor function's exact request size (its inputs back to back); None for raw."""
        return None if self.raw else sum(s.nbytes for s in self.inputs)

    def example(self, rng: np.random.Generator, max_bytes: int | None = None) -> bytes:
        """A request of random inputs (TensorSpec.random) for a tensor function; ValueError for a
        raw function, whose bytes only its author knows, or for a request over max_bytes (the
        server's max_message: a description is the server's word, not to be trusted with memory)."""
        if self.raw:
            raise ValueError(f"{self.name} is a raw function (requests of up to {self.max_request} bytes of its own "
                             "format): give the request bytes")
        if max_bytes is not None and cast(int, self.request_bytes) > max_bytes:  # int: not raw
            raise ValueError(f"{self.name} declares a request of {self.request_bytes} bytes, over the server's "
                             f"largest message ({max_bytes})")
        return b"".join(s.random(rng).tobytes() for s in self.inputs)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.func_id, "name": self.name, "version": self.version,
                             "kind": "raw" if self.raw else "tensor", "max_batch": self.max_batch,
                             "executor": self.executor, "priority": self.priority, "device": self.device}
        if self.raw:
            d.update(max_request=self.max_request, max_response=self.max_response)
        else:
            d.update(inputs=[_spec_json(s) for s in self.inputs], outputs=[_spec_json(s) for s in self.outputs])
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "FunctionInfo":
        try:
            if not isinstance(d, dict):
                raise TypeError("a function entry must be an object")
            raw = d["kind"] == "raw"
            if d["kind"] not in ("raw", "tensor"):
                raise NotDescribed(f"function kind {d['kind']!r}")
            if not isinstance(d["name"], str):
                raise NotDescribed(f"a function name must be a string, got {str(d['name'])[:40]!r}")
            return cls(func_id=_int(d["id"], "a function id", 0, 0xFFFF), name=d["name"], version=d.get("version"),
                       raw=raw,
                       inputs=() if raw else tuple(_spec(s) for s in d["inputs"]),
                       outputs=() if raw else tuple(_spec(s) for s in d["outputs"]),
                       max_request=_opt_int(d.get("max_request"), "max_request"),
                       max_response=_opt_int(d.get("max_response"), "max_response"),
                       max_batch=_opt_int(d.get("max_batch"), "max_batch"), executor=str(d.get("executor", "inline")),
                       priority=_opt_int(d.get("priority"), "priority"), device=str(d.get("device", "cpu")))
        except NotDescribed:
            raise
        except Exception as e:  # noqa: BLE001 - KeyError, TypeError, ValueError, OverflowError...
            raise NotDescribed(f"a function entry that does not read: {e!r}") from None


@dataclass(frozen=True)
class Description:
    """A server's answer to describe: its functions (the server functions left out), its
    largest message, the protocol versions it speaks, the splitrpc version."""
    functions: tuple[FunctionInfo, ...]
    max_message: int
    protocols: tuple[int, ...]
    software: str
    extra: dict[str, Any] = field(default_factory=dict)
    digest: str | None = None  # changes exactly when the functions do (Amendment 2); None: an older server

    def by_name(self, name: str) -> FunctionInfo:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(f"no function named {name!r}; the server has: {', '.join(f.name for f in self.functions)}")

    def by_id(self, func_id: int) -> FunctionInfo:
        for f in self.functions:
            if f.func_id == func_id:
                return f
        raise KeyError(f"no function {func_id}")


def _spec_json(s: TensorSpec) -> dict[str, Any]:
    return {"name": s.name, "dtype": s.dtype, "shape": list(s.shape)}


MAX_NDIM = 32  # dimensions of a described tensor at most (numpy's own limit is 64)


def _int(v: Any, what: str, lo: int, hi: int) -> int:
    """A JSON number that is an integer in lo .. hi (not a bool, not 1.7, not "12")."""
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise NotDescribed(f"{what} must be an integer from {lo} to {hi}, got {str(v)[:40]!r}")
    return v


def _opt_int(v: Any, what: str) -> int | None:
    """An optional count of the description's: None, or an integer 0 .. 2**62."""
    return None if v is None else _int(v, what, 0, 1 << 62)


def _spec(d: dict[str, Any]) -> TensorSpec:
    """A TensorSpec from the server's JSON, every field checked: a name string, a numeric
    little-endian (or byte-sized) dtype of nonzero size, a list of at most MAX_NDIM positive integers."""
    name, dtype, shape = d["name"], d["dtype"], d["shape"]
    if not isinstance(name, str) or not isinstance(dtype, str) or not isinstance(shape, list):
        raise NotDescribed(f"a tensor spec needs name and dtype strings and a shape list, got {str(d)[:80]!r}")
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise NotDescribed(f"tensor {name[:40]!r}: dtype {dtype[:40]!r} is not a numpy type ({e})") from None
    if dt.kind not in "biufc" or dt.itemsize == 0 or dt.byteorder == ">" or dt.shape or dt.names:
        raise NotDescribed(f"tensor {name[:40]!r}: dtype {dtype[:40]!r} is not a little-endian or byte-sized number")
    if len(shape) > MAX_NDIM:
        raise NotDescribed(f"tensor {name[:40]!r}: {len(shape)} dimensions, at most {MAX_NDIM}")
    return TensorSpec(name, dtype, tuple(_int(x, f"tensor {name[:40]!r}'s shape", 1, 1 << 62) for x in shape))


DIGEST_HEX = 16  # the digest's length: hex digits of SHA-256


def digest(functions: Iterable[FunctionInfo]) -> str:
    """The functions' digest (docs/PROTOCOL.md, Amendment 2): the first 64 bits of SHA-256 of
    their JSON array as describe sends it, in hex. Opaque to a client, which only compares."""
    body = json.dumps([f.to_json() for f in sorted(functions, key=lambda f: f.func_id)], separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:DIGEST_HEX]


def encode_description(functions: list[FunctionInfo], *, max_message: int, protocols: Iterable[int] = PROTOCOLS,
                       software: str) -> bytes:
    doc = {"describe": LAYOUT, "software": software, "max_message": max_message, "protocols": list(protocols),
           "digest": digest(functions),
           "functions": [f.to_json() for f in sorted(functions, key=lambda f: f.func_id)]}
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_description(reply: bytes) -> Description:
    """The Description in a describe reply; NotDescribed for anything else (the reply is the
    server's: hostile until checked)."""
    doc = _json(reply, "describe")
    try:
        funcs, protos = doc.get("functions", []), doc.get("protocols", [])
        if not isinstance(funcs, list) or not isinstance(protos, list):
            raise TypeError("functions and protocols must be lists")
        return Description(functions=tuple(FunctionInfo.from_json(f) for f in funcs),
                           max_message=int(doc.get("max_message", 0)), protocols=tuple(int(p) for p in protos),
                           software=str(doc.get("software", "")), digest=_digest_field(doc),
                           extra={k: v for k, v in doc.items()
                                  if k not in ("describe", "functions", "max_message", "protocols", "software",
                                               "digest")})
    except NotDescribed:
        raise
    except Exception as e:  # noqa: BLE001 - any way the fields do not read is the same answer
        raise NotDescribed(f"a describe reply whose fields do not read: {type(e).__name__}: {e}") from None


def _digest_field(doc: dict[str, Any]) -> str | None:
    """A reply's digest: None where it has none (a server older than Amendment 2); NotDescribed
    for one that is not a short string."""
    d = doc.get("digest")
    if d is None:
        return None
    if not isinstance(d, str) or not 0 < len(d) <= 64:
        raise NotDescribed(f"a digest that is not a string of 1 to 64 characters: {str(d)[:80]!r}")
    return d


def encode_ping(*, ready: bool, state: str, functions: int, uptime_s: float, pending: int,
                digest: str | None = None) -> bytes:
    doc: dict[str, Any] = {"ping": LAYOUT, "ready": ready, "state": state, "functions": functions,
                           "uptime_s": round(uptime_s, 3), "pending": pending}
    if digest is not None:
        doc["digest"] = digest
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_ping(reply: bytes) -> dict[str, Any]:
    doc = _json(reply, "ping")
    doc["digest"] = _digest_field(doc)
    return doc


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _json(reply: bytes, key: str) -> dict[str, Any]:
    """The reply's JSON object if its first key is `key` with a layout this client reads."""
    if not bytes(reply[:len(key) + 3]).startswith(b'{"' + key.encode() + b'"'):
        raise NotDescribed(f"not a {key} reply (a server older than docs/PROTOCOL.md's Amendment 1, with a "
                           f"function of its own at that id?): {bytes(reply[:40])!r}")
    try:  # NaN and Infinity are not JSON; deep nesting and huge numbers fail too
        doc = json.loads(bytes(reply).decode("utf-8"), parse_constant=_no_constant)
    except Exception as e:  # noqa: BLE001 - RecursionError, ValueError, ...: not a reply of ours
        raise NotDescribed(f"a {key} reply that is not JSON: {type(e).__name__}: {e}") from None
    if not isinstance(doc, dict) or doc.get(key) != LAYOUT:
        raise NotDescribed(f"{key} reply layout {doc.get(key) if isinstance(doc, dict) else '?'!r}; "
                           f"this client reads {LAYOUT}")
    return doc
