"""typed.py: functions by name (docs/client.md): a callable bound to one function's TensorSpecs from the server's describe; inputs by name or position, any array-like (numpy, __array__, DLPack, PyTorch and CuPy tensors: a device array is copied to the host), checked against the specs before anything is sent; outputs a NamedTuple of numpy arrays viewing the reply; a leading batch dimension makes that many concurrent calls. For the blocking and asyncio clients and pools alike; stubs (stubs.py) are built on it.

Thread rules: a Directory is shared by the threads of its client (a lock guards its cache); a
Function or AsyncFunction holds no state of its own beyond its immutable Signature.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import keyword
import math
import threading
import time
import weakref
from collections import namedtuple
from concurrent.futures import Future
from typing import Any, Awaitable, Callable, Protocol, Sequence

import numpy as np

from splitrpc import describe as describe_
from splitrpc.errors import (BadRequest, DescriptionChanged, DtypeMismatch, MissingInput, NoSuchFunction,
                             NotContiguous, ReplyMismatch, ShapeMismatch, UnexpectedInput, UnknownFunction)
from splitrpc.spec import TensorSpec

RECHECK_S = 1.0  # after BAD_REQUEST, a typed call reads the description again at most this often
OPTIONS = ("timeout", "cast", "deadline", "idempotent")  # call options, keyword-only; an input's name wins


class Caller(Protocol):
    """What a typed function calls through: splitrpc.Client and splitrpc.Pool."""

    def call(self, func_id: int, data: Any = b"", timeout: float | None = None) -> bytes: ...

    def call_async(self, func_id: int, data: Any = b"", timeout: float | None = None) -> Future[bytes]: ...


def host_array(x: Any) -> np.ndarray[Any, Any]:
    """x as a numpy array on the host: numpy as it is; a PyTorch tensor through .numpy() (a CUDA
    one copied to the host first); a CuPy array (anything with __cuda_array_interface__ and
    .get()) copied to the host; anything with __dlpack__ on the CPU or __array__ without a copy
    where numpy can; else np.asarray (lists, scalars)."""
    if type(x) is np.ndarray:
        return x
    mod = type(x).__module__
    if mod == "torch" or mod.startswith("torch."):
        t = x.detach()
        return np.asarray((t.cpu() if t.device.type != "cpu" else t).numpy())
    if hasattr(x, "__cuda_array_interface__"):
        get = getattr(x, "get", None)
        if not callable(get):
            raise TypeError(f"a device array of type {type(x).__name__} without .get(): copy it to the host first")
        return np.asarray(get())
    if hasattr(x, "__dlpack__") and not hasattr(x, "__array__"):
        return np.from_dlpack(x)
    return np.asarray(x)


def _spec_text(s: TensorSpec, batch: bool = False) -> str:
    return f"{s.np_dtype.name}[{'N, ' if batch else ''}{', '.join(map(str, s.shape))}]"


_TUPLE_NAMES = set(dir(tuple))  # a named tuple's field may not be count, index...


def _field(name: str, i: int, taken: set[str]) -> str:
    """An output's field name: its name where that is a usable identifier not taken yet, else
    out<i> (then out<i>_2...); recorded in taken."""
    ok = name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_") \
        and name not in _TUPLE_NAMES and name not in taken
    out, k = (name if ok else f"out{i}"), 2
    while out in taken:
        out, k = f"out{i}_{k}", k + 1
    taken.add(out)
    return out


def _repr(s: "Signature", kind: str = "") -> str:
    return (f"<splitrpc {kind}function {s.name} (id {s.func_id}): "
            f"({', '.join(f'{x.name}: {_spec_text(x)}' for x in s.inputs)}) -> "
            f"({', '.join(f'{x.name}: {_spec_text(x)}' for x in s.outputs)})>")


class Signature:
    """One tensor function's inputs and outputs, precomputed for checking inputs and reading replies."""

    def __init__(self, info: describe_.FunctionInfo):
        if info.raw:
            raise ValueError(f"{info.name} is a raw function: it has no tensor specs")
        self.info, self.name, self.func_id = info, info.name, info.func_id
        self.inputs, self.outputs = info.inputs, info.outputs
        self.in_names = tuple(s.name for s in info.inputs)
        self.in_index = {n: i for i, n in enumerate(self.in_names)}
        taken: set[str] = set()
        self.Outputs = namedtuple(_field(info.name, 0, set()) + "_outputs",  # type: ignore[misc]
                                  [_field(s.name, i, taken) for i, s in enumerate(info.outputs)])
        self.out_bytes = sum(s.nbytes for s in info.outputs)
        offsets, off = [], 0
        for s in info.outputs:
            offsets.append(off)
            off += s.nbytes
        self.out_layout = tuple((s.np_dtype, s.shape, math.prod(s.shape), o, o % s.np_dtype.itemsize == 0)
                                for s, o in zip(info.outputs, offsets))
        # reading the reply: one 1-D output is one frombuffer (the commonest case, the cheapest)
        self.one_out = (info.outputs[0].np_dtype if len(info.outputs) == 1 and len(info.outputs[0].shape) == 1
                        else None)
        # a single output of any shape: the blocking client's fast path receives the reply straight into it
        self.out_one = (info.outputs[0].shape, info.outputs[0].np_dtype) if len(info.outputs) == 1 else None
        # the fast path: one input, given as a numpy array of exactly its spec
        self.one = info.inputs[0] if len(info.inputs) == 1 else None
        self.one_dtype = self.one.np_dtype if self.one else None
        self.one_shape = self.one.shape if self.one else None

    # ------------------------------------------------------------------ inputs

    def bind(self, args: Sequence[Any], kwargs: dict[str, Any]) -> list[Any]:
        """The inputs in spec order, from positions then names; MissingInput / UnexpectedInput."""
        if len(args) > len(self.inputs):
            raise UnexpectedInput(f"{self.name} takes {len(self.inputs)} inputs ({', '.join(self.in_names)}), "
                                  f"got {len(args)} by position", function=self.name, expected=len(self.inputs),
                                  given=len(args))
        vals: list[Any] = list(args) + [_MISSING] * (len(self.inputs) - len(args))
        for k, v in kwargs.items():
            i = self.in_index.get(k)
            if i is None:
                raise UnexpectedInput(f"{self.name} has no input {k!r}; its inputs: {', '.join(self.in_names)}",
                                      function=self.name, input=k, expected=self.in_names, given=k)
            if vals[i] is not _MISSING:
                raise UnexpectedInput(f"{self.name}: input {k!r} given twice (by position and by name)",
                                      function=self.name, input=k)
            vals[i] = v
        for i, v in enumerate(vals):
            if v is _MISSING:
                s = self.inputs[i]
                raise MissingInput(f"{self.name}: input {s.name!r} ({_spec_text(s)}) was not given",
                                   function=self.name, input=s.name, expected=_spec_text(s))
        return vals

    def check(self, args: Sequence[Any], kwargs: dict[str, Any], cast: bool = False) -> tuple[list[np.ndarray[Any, Any]], int | None]:
        """(the inputs as C-ordered host arrays of their specs' dtypes, N for a batch of N or
        None for one call); InputError subclasses for any mismatch."""
        arrays = []
        batch: int | None = -1  # not known yet
        for s, v in zip(self.inputs, self.bind(args, kwargs)):
            try:
                a = host_array(v)
                if a.dtype.kind not in "biufc":
                    raise TypeError(f"numpy makes an array of {a.dtype} of it, not of numbers")
            except (TypeError, ValueError) as e:
                raise DtypeMismatch(f"{self.name}: input {s.name!r} is not an array ({type(v).__name__}: {e})",
                                    function=self.name, input=s.name, expected=_spec_text(s),
                                    given=type(v).__name__) from None
            if isinstance(v, (list, tuple, int, float, complex)) and a.dtype != s.np_dtype:
                a = _python_numbers(a, s, self.name)  # no dtype of their own: the spec's, if no value changes
            if a.shape == s.shape:
                n = None
            elif a.ndim == len(s.shape) + 1 and a.shape[1:] == s.shape and a.shape[0] > 0:
                n = a.shape[0]
            else:
                raise ShapeMismatch(f"{self.name}: input {s.name!r} has shape {list(a.shape)}; expected "
                                    f"{list(s.shape)} (one call) or [N, {', '.join(map(str, s.shape))}] (N calls)",
                                    function=self.name, input=s.name, expected=s.shape, given=a.shape)
            if batch != -1 and n != batch:
                raise ShapeMismatch(f"{self.name}: input {s.name!r} is {'a batch of ' + str(n) if n else 'one call'}"
                                    f", another input {'a batch of ' + str(batch) if batch else 'one call'}",
                                    function=self.name, input=s.name, expected=batch, given=n)
            batch = n
            if a.dtype != s.np_dtype:
                if not (cast and np.can_cast(a.dtype, s.np_dtype, "safe")):
                    how = "not without changing values" if cast else "give cast=True to cast where no value changes"
                    raise DtypeMismatch(f"{self.name}: input {s.name!r} is {a.dtype.name} ({a.dtype.str}); expected "
                                        f"{s.np_dtype.name} ({s.dtype}): {how}", function=self.name, input=s.name,
                                        expected=s.dtype, given=a.dtype.str)
                a = np.ascontiguousarray(a, dtype=s.np_dtype)
            if not a.flags.c_contiguous:
                if not cast:
                    raise NotContiguous(f"{self.name}: input {s.name!r} is not in C order (a transposed or strided "
                                        "view): np.ascontiguousarray() it, or give cast=True", function=self.name,
                                        input=s.name, expected="C order", given="strided")
                a = np.ascontiguousarray(a)
            arrays.append(a)
        return arrays, (None if batch == -1 else batch)

    def requests(self, arrays: list[np.ndarray[Any, Any]], n: int | None) -> list[Any]:
        """The request of each call: one for a single call, n for a batch (views where an input is
        one array, else the inputs' bytes back to back)."""
        if n is None:
            if len(arrays) == 1:
                return [arrays[0].reshape(-1).view(np.uint8)]
            return [np.concatenate([a.reshape(-1).view(np.uint8) for a in arrays])]  # one copy: the request
        flats = [a.reshape(n, -1).view(np.uint8) for a in arrays]
        if len(flats) == 1:
            return [flats[0][i] for i in range(n)]
        both = np.concatenate(flats, axis=1)  # one copy: row i is call i's request
        return [both[i] for i in range(n)]

    # ------------------------------------------------------------------ outputs

    def read(self, reply: bytes) -> Any:
        """The reply as the Outputs named tuple of read-only numpy arrays viewing it (copied where
        an output's offset is not a multiple of its item size)."""
        if self.one_out is not None and len(reply) == self.out_bytes:  # the commonest case first
            return tuple.__new__(self.Outputs, (np.frombuffer(reply, self.one_out),))
        if len(reply) != self.out_bytes:
            raise self.mismatch(len(reply))
        out = []
        for dt, shape, count, off, aligned in self.out_layout:
            a = np.ndarray(shape, dt, reply, off)  # read-only where the reply is bytes
            out.append(a if aligned else a.copy())
        return tuple.__new__(self.Outputs, out)

    def mismatch(self, n: int) -> ReplyMismatch:
        return ReplyMismatch(f"{self.name} replied {n} bytes; its outputs "
                             f"({', '.join(_spec_text(s) for s in self.outputs)}) are {self.out_bytes}")

    def read_batch(self, replies: list[bytes]) -> Any:
        """N replies as the Outputs named tuple of [N, *shape] arrays (every reply's size checked
        before anything is allocated: the sizes are the server's word)."""
        n = len(replies)
        for i, r in enumerate(replies):
            if len(r) != self.out_bytes:
                raise ReplyMismatch(f"{self.name} (call {i} of a batch of {n}) replied {len(r)} bytes; its outputs "
                                    f"are {self.out_bytes}")
        outs = [np.empty((n, *shape), dt) for dt, shape, _, _, _ in self.out_layout]
        for i, r in enumerate(replies):
            for o, (dt, shape, count, off, _) in zip(outs, self.out_layout):
                o[i] = np.frombuffer(r, dt, count, off).reshape(shape)
        return self.Outputs(*outs)


_MISSING: Any = object()


def _python_numbers(a: np.ndarray[Any, Any], s: TensorSpec, function: str) -> np.ndarray[Any, Any]:
    """Python numbers (a list, a scalar) in the spec's dtype: integers where every value fits
    exactly, floats where none overflows; else DtypeMismatch."""
    want = s.np_dtype
    with np.errstate(all="ignore"):
        if a.dtype.kind in "biu" and want.kind in "biu":
            b = a.astype(want)
            ok = bool(np.array_equal(b, a))
        elif a.dtype.kind in "biuf" and want.kind in "fc":
            b = a.astype(want)
            ok = bool(np.isfinite(b).all() or not np.isfinite(a).all())
        else:
            b, ok = a, False
    if not ok:
        raise DtypeMismatch(f"{function}: input {s.name!r}: these Python numbers ({a.dtype.name}) do not fit "
                            f"{want.name} ({s.dtype}) without changing", function=function, input=s.name,
                            expected=s.dtype, given=a.dtype.str)
    return b


def _options(sig: Signature, kwargs: dict[str, Any]) -> tuple[float | None, bool, dict[str, Any]]:
    """Takes the call options out of kwargs, where they are not inputs' names: (timeout, cast,
    the caller's keywords: deadline (a Client's) and idempotent (a Pool's) where given)."""
    timeout = kwargs.pop("timeout", None) if "timeout" not in sig.in_index else None
    cast = bool(kwargs.pop("cast", False)) if "cast" not in sig.in_index else False
    kw = {k: kwargs.pop(k) for k in OPTIONS[2:] if k in kwargs and k not in sig.in_index}
    return timeout, cast, kw


class _Bound:
    """What a Function's calls need, kept apart from the Function (its call refers to this, and
    nothing here refers back: no reference cycle per function made)."""

    __slots__ = ("dir", "info", "sig", "caller", "func_id", "call_array", "into")

    def __init__(self, directory: "Directory", caller: Caller, signature: Signature):
        self.dir, self.info, self.sig, self.caller = directory, signature.info, signature, caller
        self.func_id = signature.func_id
        # a Client's call of a checked array as it is; a Pool's call otherwise
        self.call_array: Callable[[int, Any], bytes] = getattr(caller, "_call_array", caller.call)
        # a Client's call whose reply is received straight into the one output's array, which
        # must hold an error's text too (at least the client's _into_min bytes) and no more than
        # a reply can be (its max_reply: the description's sizes are the server's word, and the
        # array is allocated before anything is sent); None: the reply's bytes, Signature.read
        into = getattr(caller, "_call_into", None)
        self.into: Callable[[int, Any, Any], int] | None = (
            into if into is not None and signature.out_one is not None
            and getattr(caller, "_into_min", 1 << 62) <= signature.out_bytes <= getattr(caller, "max_reply", 0)
            else None)

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The general path: the options taken out of kwargs, then invoke."""
        timeout, cast, kw = _options(self.sig, kwargs)
        return self.invoke(args, kwargs, timeout, cast, kw)

    def invoke(self, args: Sequence[Any], named: dict[str, Any], timeout: float | None, cast: bool,
               caller_kw: dict[str, Any]) -> Any:
        sig = self.sig
        arrays, n = sig.check(args, named, cast)
        reqs = sig.requests(arrays, n)
        try:
            if n is None:
                if self.into is not None and timeout is None and not caller_kw and sig.out_one is not None:
                    out = np.empty(*sig.out_one)  # the reply received straight into the one output's array
                    got = self.into(self.func_id, reqs[0], out)
                    if got != sig.out_bytes:
                        raise sig.mismatch(got)
                    return tuple.__new__(sig.Outputs, (out,))
                return sig.read(self.caller.call(self.func_id, reqs[0], timeout, **caller_kw))
            futs = [self.caller.call_async(self.func_id, r, timeout, **caller_kw) for r in reqs]
            return sig.read_batch([f.result() for f in futs])
        except (UnknownFunction, BadRequest, ReplyMismatch) as e:
            self.dir.changed(self.info, e)
            raise


def _call_of(b: _Bound) -> Callable[..., Any]:
    """The function a Function's call runs: a fast path for one input given as a numpy array of
    exactly its spec (its constants in the closure), else the general path."""
    sig, func_id, missing, nd, empty = b.sig, b.func_id, _MISSING, np.ndarray, np.empty
    if b.into is not None and sig.one is not None and sig.out_one is not None:
        # the reply received straight into a fresh array of the one output: no bytes in between
        dt, shape, (oshape, odt), obytes, outputs, into = (sig.one_dtype, sig.one_shape, sig.out_one,
                                                           sig.out_bytes, sig.Outputs, b.into)

        def call(a: Any = missing, /, *args: Any, **kwargs: Any) -> Any:  # /: an input may be named self, a...
            if not kwargs and not args and type(a) is nd and a.dtype is dt and a.shape == shape \
                    and a.flags.c_contiguous:
                out = empty(oshape, odt)
                try:
                    n = into(func_id, a, out)
                    if n == obytes:
                        return tuple.__new__(outputs, (out,))
                    raise sig.mismatch(n)
                except (UnknownFunction, BadRequest, ReplyMismatch) as e:
                    b.dir.changed(b.info, e)
                    raise
            return b.call(args if a is missing else (a, *args), kwargs)
        return call
    dt, shape, call_array = sig.one_dtype, sig.one_shape, b.call_array

    def call_general(a: Any = missing, /, *args: Any, **kwargs: Any) -> Any:
        if not kwargs and not args and sig.one is not None and type(a) is nd and a.dtype is dt \
                and a.shape == shape and a.flags.c_contiguous:  # the checked array as it is
            try:
                return sig.read(call_array(func_id, a))
            except (UnknownFunction, BadRequest, ReplyMismatch) as e:
                b.dir.changed(b.info, e)
                raise
        return b.call(args if a is missing else (a, *args), kwargs)
    return call_general


class Function(functools.partial):  # type: ignore[type-arg]
    """A tensor function of a blocking Client or Pool, by name: fn(*inputs, **inputs) -> Outputs.

    Options, keyword-only (an input of the same name wins): timeout (seconds, the client's by
    default), cast (cast an input where no value changes, and copy a strided one into C order),
    deadline (a time.monotonic() instant; Client only), idempotent (Pool only: see Pool.call). A
    leading batch dimension [N, *shape] on every input makes N concurrent calls (the server
    batches them) and returns [N, *shape] outputs. Raises an InputError subclass before anything
    is sent; ReplyMismatch for a reply of the wrong size; DescriptionChanged where the server says
    the function is gone or its request is wrong and its description has changed since this one
    was read.

    Why a functools.partial: calling an object whose class defines __call__ in Python goes
    through that method's lookup, a bound call and a second frame; a partial is called in C and
    hands the call straight to the function _call_of made (measured: about 1 us less per call
    on a busy-polling client, bench/suites/typed_cost.py). partial's own func, args and keywords
    attributes are an implementation detail."""

    info: describe_.FunctionInfo
    name: str
    func_id: int
    signature: Signature
    Outputs: Any
    _b: _Bound
    __signature__: inspect.Signature

    def __new__(cls, directory: "Directory", caller: Caller, signature: Signature) -> "Function":
        b = _Bound(directory, caller, signature)
        self = super().__new__(cls, _call_of(b))
        self._b, self.info, self.name, self.func_id = b, signature.info, signature.name, signature.func_id
        self.signature, self.Outputs = signature, signature.Outputs

        self.__signature__ = _call_signature(signature)
        return self

    def __repr__(self) -> str:
        return _repr(self.signature)

    def __get__(self, obj: Any, objtype: Any = None) -> "Function":
        """Itself, as before it was a partial: a class attribute `infer = client.fn.lenet` is not
        bound as a method (Python 3.13 warns that a partial will be; 3.14 binds it)."""
        return self

    def __copy__(self) -> "Function":  # bound to one client and one description: nothing to copy
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> "Function":
        return self

    def invoke(self, args: Sequence[Any], named: dict[str, Any] | None = None, *, timeout: float | None = None,
               cast: bool = False, **caller_kw: Any) -> Any:
        """The call with its inputs (by position, then by name) and its options kept apart, so an
        input may be named like an option (stubs call this)."""
        return self._b.invoke(args, named or {}, timeout, cast, caller_kw)


def _call_signature(sig: Signature) -> inspect.Signature:
    """What inspect.signature (and an IDE) shows of a Function: its inputs by name, then the call
    options keyword-only; (*inputs, **options) where an input's name is not a Python identifier
    or is one of the options."""
    P = inspect.Parameter
    opts = [P("timeout", P.KEYWORD_ONLY, default=None), P("cast", P.KEYWORD_ONLY, default=False),
            P("deadline", P.KEYWORD_ONLY, default=None), P("idempotent", P.KEYWORD_ONLY, default=None)]
    try:
        if any(n in OPTIONS for n in sig.in_names):
            raise ValueError("an input named like an option")
        return inspect.Signature([P(n, P.POSITIONAL_OR_KEYWORD) for n in sig.in_names] + opts)
    except ValueError:
        return inspect.Signature([P("inputs", P.VAR_POSITIONAL), P("options", P.VAR_KEYWORD)])


class RawFunction:
    """A raw function by name: fn(data, timeout=None) -> bytes (its bytes are its own format)."""

    def __init__(self, directory: "Directory", caller: Caller, info: describe_.FunctionInfo):
        self._dir, self.info, self.name, self.func_id, self._caller = directory, info, info.name, info.func_id, caller

    def __repr__(self) -> str:
        return f"<splitrpc raw function {self.name} (id {self.func_id}): <= {self.info.max_request} B>"

    def __call__(self, data: Any = b"", timeout: float | None = None) -> bytes:
        try:
            return self._caller.call(self.func_id, data, timeout)
        except UnknownFunction as e:
            self._dir.changed(self.info, e)
            raise


class Directory:
    """A client's functions by name: its server's description, read once (a lock: the client's
    threads share it) and read again when a call says the function is gone or its request wrong.
    It keeps each function's Signature, not the callables, which hold their client: no cycle."""

    def __init__(self, describe: Callable[[], describe_.Description]):
        self._describe = describe
        self._lock = threading.Lock()
        self.checked_at = float("-inf")  # when a call's error last read the description again (monotonic)
        self.description: describe_.Description | None = None
        self._made: dict[str, Signature | describe_.FunctionInfo] = {}

    def _read(self) -> describe_.Description:
        with self._lock:
            if self.description is None:
                self.description = self._describe()
                self._made = {}
            return self.description

    def function(self, name: str, caller: Caller) -> Function | RawFunction:
        d = self._read()
        made = self._made.get(name)
        if made is None:
            info = _find(d, name)
            made = info if info.raw else Signature(info)
            with self._lock:
                if self.description is d:
                    self._made[name] = made
        if isinstance(made, Signature):
            return Function(self, caller, made)
        return RawFunction(self, caller, made)

    def adopt(self, d: describe_.Description) -> None:
        """Takes a description read elsewhere (a stub's check) as this client's current one."""
        with self._lock:
            if self.description is None or not _same(self.description, d):
                self.description, self._made = d, {}

    def changed(self, info: describe_.FunctionInfo, error: Exception) -> None:
        """After UNKNOWN_FUNCTION, BAD_REQUEST or a reply of the wrong size from a typed call made
        from `info`: raises DescriptionChanged (from error) when the server's description of that
        function is not `info` any more; else returns (the error stands). The description is read
        again unless the client already holds a newer one that differs (after BAD_REQUEST at most
        every RECHECK_S: a callback may refuse values, and each refusal must not cost a describe)."""
        current = self.description
        if current is None or _lookup(current, info.name) == info:
            if not _recheck(self, error):
                return
            try:
                current = self._describe()
            except Exception:  # noqa: BLE001 - the call's own error is the one to report
                return
            self.adopt(current)
        _raise_if_changed(info, current, error)


def directory_of(caller: Any) -> Directory:
    """The Directory of a blocking Client or Pool, made on first use. It holds the caller by a
    weak reference: no cycle keeps a client from being closed when it is dropped."""
    d = caller.__dict__.get("_typed_directory")
    if d is None:
        proxy = weakref.proxy(caller)
        d = caller.__dict__.setdefault("_typed_directory", Directory(lambda: proxy.describe()))
    return d  # type: ignore[no-any-return]


def async_directory_of(caller: Any) -> AsyncDirectory:
    """The AsyncDirectory of an asyncio Client or Pool, made on first use (weakly held, as above)."""
    d = caller.__dict__.get("_typed_directory")
    if d is None:
        proxy = weakref.proxy(caller)
        d = caller.__dict__.setdefault("_typed_directory", AsyncDirectory(lambda: proxy.describe()))
    return d  # type: ignore[no-any-return]


def _recheck(directory: Any, error: Exception) -> bool:
    """Whether this error should read the description again: always after UNKNOWN_FUNCTION, after
    BAD_REQUEST only if the last reading is RECHECK_S old."""
    now = time.monotonic()
    if isinstance(error, BadRequest) and now - directory.checked_at < RECHECK_S:
        return False
    directory.checked_at = now
    return True


def _same(a: describe_.Description, b: describe_.Description) -> bool:
    if a.digest is not None and b.digest is not None:
        return a.digest == b.digest
    return a.functions == b.functions  # a server older than Amendment 2: compare what it says


def _lookup(d: describe_.Description, name: str) -> describe_.FunctionInfo | None:
    """The function of that name in d, None if it has none (or more than one)."""
    found = [f for f in d.functions if f.name == name]
    return found[0] if len(found) == 1 else None


def _raise_if_changed(info: describe_.FunctionInfo, current: describe_.Description, error: Exception) -> None:
    """DescriptionChanged (from error) when current's function info.name is not info."""
    now = _lookup(current, info.name)
    if now == info:
        return
    if now is None:
        what = f"{info.name!r} is gone"
    elif now.raw:
        what = f"{info.name!r} is now id {now.func_id}, raw"
    else:
        what = (f"{info.name!r} is now id {now.func_id}: ({', '.join(f'{s.name}: {_spec_text(s)}' for s in now.inputs)})"
                f" -> ({', '.join(f'{s.name}: {_spec_text(s)}' for s in now.outputs)})")
    raise DescriptionChanged(f"the server's functions changed since this client read them ({what}): "
                             f"call {info.name!r} again to use its new description", function=info.name) from error


def _find(d: describe_.Description, name: str) -> describe_.FunctionInfo:
    found = [f for f in d.functions if f.name == name]
    if len(found) == 1:
        return found[0]
    if found:
        raise NoSuchFunction(f"the server describes {len(found)} functions named {name!r} (ids "
                             f"{', '.join(str(f.func_id) for f in found)}): call one by its id (client.call)")
    raise NoSuchFunction(f"the server has no function {name!r}; it has: "
                         f"{', '.join(f.name for f in d.functions) or 'none'}")


class NoSuchAttribute(NoSuchFunction, AttributeError):
    """client.fn.<name> for a name the server does not have: NoSuchFunction, and an AttributeError
    as getattr and hasattr expect."""


class Functions:
    """client.fn: the functions as attributes (client.fn.lenet) and items (client.fn["my-fn"])."""

    _lookup: Callable[[str], Any]

    def __init__(self, lookup: Callable[[str], Any]):
        object.__setattr__(self, "_lookup", lookup)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._lookup(name)
        except NoSuchFunction as e:
            raise NoSuchAttribute(str(e)) from None

    def __getitem__(self, name: str) -> Any:
        return self._lookup(name)


# ------------------------------------------------------------------ asyncio


class AsyncFunction:
    """A tensor function of splitrpc.aio.Client or aio.Pool: ``await fn(*inputs, **inputs)``;
    as Function (a batch is N calls awaited together)."""

    def __init__(self, directory: "AsyncDirectory", caller: Any, signature: Signature):
        info = signature.info
        self._dir, self.info, self.name, self.func_id = directory, info, info.name, info.func_id
        self.signature, self.Outputs, self._caller = signature, signature.Outputs, caller

    def __repr__(self) -> str:
        return _repr(self.signature, "async ")

    async def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        sig = self.signature
        timeout, cast, kw = _options(sig, kwargs)
        arrays, n = sig.check(args, kwargs, cast)
        reqs = sig.requests(arrays, n)
        try:
            if n is None:
                return sig.read(await self._caller.call(self.func_id, reqs[0], timeout, **kw))
            replies = await asyncio.gather(*(self._caller.call(self.func_id, r, timeout, **kw) for r in reqs))
            return sig.read_batch(list(replies))
        except (UnknownFunction, BadRequest, ReplyMismatch) as e:
            await self._dir.changed(self.info, e)
            raise


class AsyncRawFunction:
    """A raw function of an asyncio client: ``await fn(data, timeout=None)`` -> bytes."""

    def __init__(self, directory: "AsyncDirectory", caller: Any, info: describe_.FunctionInfo):
        self._dir, self.info, self.name, self.func_id, self._caller = directory, info, info.name, info.func_id, caller

    async def __call__(self, data: Any = b"", timeout: float | None = None) -> bytes:
        try:
            return await self._caller.call(self.func_id, data, timeout)  # type: ignore[no-any-return]
        except UnknownFunction as e:
            await self._dir.changed(self.info, e)
            raise


class AsyncDirectory:
    """Directory for the asyncio clients: used from their event loop's thread only."""

    def __init__(self, describe: Callable[[], Awaitable[describe_.Description]]):
        self._describe = describe
        self.checked_at = float("-inf")
        self.description: describe_.Description | None = None
        self._made: dict[str, Signature | describe_.FunctionInfo] = {}
        self._reading: asyncio.Future[describe_.Description] | None = None

    async def _read(self) -> describe_.Description:
        if self.description is None:
            if self._reading is None:  # one describe for every task that asks meanwhile
                self._reading = asyncio.ensure_future(self._describe())
            try:
                d = await asyncio.shield(self._reading)
            finally:
                if self._reading is not None and self._reading.done():
                    self._reading = None
            if self.description is None:
                self.description, self._made = d, {}
        return self.description

    async def function(self, name: str, caller: Any) -> AsyncFunction | AsyncRawFunction:
        d = await self._read()
        made = self._made.get(name)
        if made is None:
            info = _find(d, name)
            made = self._made[name] = info if info.raw else Signature(info)
        if isinstance(made, Signature):
            return AsyncFunction(self, caller, made)
        return AsyncRawFunction(self, caller, made)

    async def changed(self, info: describe_.FunctionInfo, error: Exception) -> None:
        """Directory.changed, awaited."""
        current = self.description
        if current is None or _lookup(current, info.name) == info:
            if not _recheck(self, error):
                return
            try:
                current = await self._describe()
            except Exception:  # noqa: BLE001 - the call's own error is the one to report
                return
            if self.description is None or not _same(self.description, current):
                self.description, self._made = current, {}
        _raise_if_changed(info, current, error)


class AsyncFunctions:
    """aio client.fn: ``await client.fn.lenet(x)`` (the description read on first use)."""

    _dir: AsyncDirectory
    _caller: Any

    def __init__(self, directory: AsyncDirectory, caller: Any):
        object.__setattr__(self, "_dir", directory)
        object.__setattr__(self, "_caller", caller)

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name.startswith("__"):
            raise AttributeError(name)
        return self[name]

    def __getitem__(self, name: str) -> Callable[..., Awaitable[Any]]:
        directory, caller = self._dir, self._caller

        async def call(*args: Any, **kwargs: Any) -> Any:
            fn = await directory.function(name, caller)
            return await fn(*args, **kwargs)
        call.__name__ = call.__qualname__ = name
        return call
