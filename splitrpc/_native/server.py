"""server.py (binding layer): the native server through cffi: its configuration and C defaults, the batch worker loop with numpy views of Tensor Queue elements, and its counters as plain dicts.

The worker loop runs once per batch and is the hot path of serving: it binds what it needs to
locals, looks a function's arguments up by (ring position, B) and does nothing else per batch.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from splitrpc._native import ESHUTDOWN, ETIMEDOUT, ERROR_NAMES, check, ffi, lib, text
from splitrpc._native import gpu as _gpu
from splitrpc.errors import GPUError, RemoteError, SplitRPCError
from splitrpc.executor import BatchJob

log = logging.getLogger("splitrpc.server")

WAIT_MODES = {"poll": lib.SRPC_WAIT_POLL, "block": lib.SRPC_WAIT_BLOCK, "adaptive": lib.SRPC_WAIT_ADAPTIVE}
# The scheduling policies by name: the C core's one list (srpc_sched_name, native/src/server/sched.c).
SCHED_POLICIES = {str(text(lib.srpc_sched_name(i))): i for i in range(lib.SRPC_SCHED_MAX)}

_NO_POS = (1 << 64) - 1  # srpc_batch_t.pos (UINT64_MAX) when a function's address period is too long to cache
_ARGS_CACHE_LIMIT = 8192
MAX_FUNCS = lib.SRPC_MAX_FUNCS            # queues in a server (a function with aux classes has one each)
MAX_CLASS_BOUNDS = lib.SRPC_MAX_CLASS_BOUNDS  # bounds of classes by cost (one fewer than the classes)
MAX_AUX_CLASSES = lib.SRPC_MAX_AUX_CLASSES
_NO_KWARGS: dict = {}
WAIT_US = 100_000  # the worker returns to Python this often when idle (Ctrl-C, stop)

# The keys of stats()["drops"], in the order of enum srpc_drop_reason: named by the C core.
DROP_NAMES = tuple(text(lib.srpc_drop_name(i)) for i in range(lib.SRPC_DROP_MAX))

# Server keyword -> (srpc_server_config_t field, how many of the C unit make one of ours):
# the one table for setting a configuration and for reading its defaults back.
_CONFIG_FIELDS = {
    "port": ("port", 1),
    "spin_us": ("spin_us", 1),
    "rx_takeover_us": ("rx_takeover_us", 1),
    "reply_hold_us": ("reply_hold_us", 1),
    "segment_size": ("seg_size", 1),
    "segment_size_loopback": ("seg_size_loopback", 1),
    "max_message": ("max_message", 1),
    "reassembly_timeout": ("reasm_timeout_us", 1_000_000),  # seconds
    "reassembly_memory": ("reasm_mem_cap", 1),
    "reassembly_memory_per_client": ("reasm_mem_cap_client", 1),
    "reply_cache_ttl": ("reply_cache_us", 1_000_000),  # seconds
    "reply_cache_bytes": ("reply_cache_bytes", 1),
    "max_calls": ("max_calls", 1),
    "socket_buffer": ("sock_buf_bytes", 1),
    "reuse_port": ("reuse_port", 1),  # 0 or 1
}


def _config() -> "ffi.CData":
    cfg = ffi.new("srpc_server_config_t *")
    lib.srpc_server_config_init(cfg)
    return cfg


def _read_defaults() -> dict:
    """srpc_server_config_init's values as Server keywords (seconds where the keyword says so)."""
    cfg = _config()
    out = {"host": text(cfg.host), "wait": next(k for k, v in WAIT_MODES.items() if v == cfg.wait_mode),
           "sched": next(k for k, v in SCHED_POLICIES.items() if v == cfg.sched)}
    for name, (c_field, scale) in _CONFIG_FIELDS.items():
        v = getattr(cfg, c_field)
        out[name] = v / scale if scale != 1 else int(v)
    return out


def _read_function_defaults() -> dict:
    fc = ffi.new("srpc_func_config_t *")
    lib.srpc_func_config_init(fc)
    return {"capacity": fc.capacity, "max_batch": fc.max_batch, "max_delay_us": fc.max_delay_us,
            "priority": fc.priority, "weight": fc.weight}


SERVER_DEFAULTS = _read_defaults()            # the C core's defaults (native/src/core/tunables.h)
FUNCTION_DEFAULTS = _read_function_defaults()  # a function's: srpc_func_config_init


def payload_device(where: str) -> int:
    """dpdk_payload: "auto" -> SRPC_DPDK_PAYLOAD_AUTO (config_init's default), "host" -> -1, "cuda:N" -> N."""
    if where == "auto":
        return _config().dpdk_payload_gpu  # the cdef has no negative #defines: read the default itself
    if where == "host":
        return -1
    if isinstance(where, str) and where.startswith("cuda:") and where[5:].isdigit() and int(where[5:]) < 64:
        return int(where[5:])
    raise ValueError(f"dpdk_payload must be 'auto', 'host' or 'cuda:N', got {where!r}")


@dataclass
class NativeServer:
    """A created srpc_server_t and the C strings its configuration points at."""
    handle: object
    host: str            # the address bound (the default's when none was given)
    max_message: int     # the largest request accepted
    keep: list = field(default_factory=list, repr=False)


def create_server(host: str | None = None, *, wait: str | None = None, sched: str | None = None,
                  allow: str | None = None,
                  dpdk_dev: str | None = None, dpdk_mtu: int | None = None, dpdk_payload_gpu: int | None = None,
                  dpdk_emulate_split: bool = False, **settings) -> NativeServer:
    """srpc_server_create with srpc_server_config_init's defaults, each replaced by the keyword
    given (not None); settings are Server keywords of _CONFIG_FIELDS, dpdk_payload_gpu one of
    payload_device(). Raises NativeError."""
    cfg = _config()
    keep = []

    def c_string(s: str):
        p = ffi.new("char[]", s.encode())
        keep.append(p)
        return p

    if host is not None:
        cfg.host = c_string(host)
    if wait is not None:
        cfg.wait_mode = WAIT_MODES[wait]
    if sched is not None:
        cfg.sched = SCHED_POLICIES[sched]
    for name, value in settings.items():
        if value is not None:
            c_field, scale = _CONFIG_FIELDS[name]
            setattr(cfg, c_field, int(value * scale) if scale != 1 else int(value))
    if allow:
        cfg.allow = c_string(allow)
    if dpdk_dev is not None:
        cfg.dpdk_dev = c_string(dpdk_dev)
        if dpdk_mtu is not None:
            cfg.dpdk_mtu = int(dpdk_mtu)
        if dpdk_payload_gpu is not None:
            cfg.dpdk_payload_gpu = dpdk_payload_gpu
        cfg.dpdk_emulate_split = 1 if dpdk_emulate_split else 0
    out = ffi.new("srpc_server_t **")
    where = f"{text(cfg.host)}:{cfg.port}"
    check(lib.srpc_server_create(cfg, out), f"cannot create a server on {where}")
    return NativeServer(out[0], text(cfg.host), int(cfg.max_message), keep)


def server_port(srv) -> int:
    return check(lib.srpc_server_port(srv), "srpc_server_port")


def add_function(srv, func_id: int, cfg, *, in_sizes: list, out_sizes: list, gpu_device: int,
                 max_inflight: int = 0, native=None) -> None:
    """srpc_server_add_function of a checked splitrpc.FunctionConfig cfg: its fields that name a
    C field copied as they are (cfg.c_fields(): srpc_func_config_init's default where None), the
    others converted here; gpu_device -1: host memory; max_inflight 0: no limit on the function's
    batches out at once; native None or a NativeFunction. Raises GPUError (a GPU function) or
    NativeError."""
    fc = ffi.new("srpc_func_config_t *")
    lib.srpc_func_config_init(fc)
    c_in = ffi.new("uint32_t[]", in_sizes)
    c_out = ffi.new("uint32_t[]", out_sizes)
    fc.func_id, fc.raw = func_id, int(cfg.raw)
    fc.n_in, fc.n_out = len(in_sizes), len(out_sizes)
    fc.in_sizes, fc.out_sizes = c_in, c_out
    for c_field, v in cfg.c_fields().items():
        setattr(fc, c_field, v)
    fc.on_gpu, fc.gpu_device = int(gpu_device >= 0), max(gpu_device, 0)
    fc.deadline_us = max(int(cfg.deadline * 1e6), 1) if cfg.deadline else 0
    fc.max_inflight = max_inflight
    fc.aux_classes = cfg.n_classes
    if cfg.bounds is not None:
        fc.class_by = lib.SRPC_CLASS_BY_COST
        for k, b in enumerate(cfg.bounds):
            fc.class_bounds[k] = b
        for k, n in enumerate(cfg.spill or ()):
            fc.class_spill[k] = n
    if native is not None:  # a splitrpc.native.NativeFunction: its batches run in the C loop
        fc.native = ffi.cast("srpc_native_fn", native.address)
        fc.native_ctx = ffi.cast("void *", native.ctx)
    cost = cfg.cost
    table = None
    if cost == "aux":
        fc.cost_from = lib.SRPC_COST_AUX
    elif cost is not None:
        table = cost.table  # copied by the C core during the call
        fc.cost_from = lib.SRPC_COST_TABLE
        fc.cost_table = ffi.cast("const uint32_t *", ffi.from_buffer(table))
        fc.cost_table_len = len(table)
        fc.cost_key_offset, fc.cost_key_count, fc.cost_key_size = cost.key_offset, cost.keys or 0, cost.key_bytes
    rc = lib.srpc_server_add_function(srv, fc)
    del table
    if rc < 0 and gpu_device >= 0:
        raise GPUError(f"cannot register function {func_id} on cuda:{gpu_device}: {_gpu.last_error()}")
    check(rc, f"cannot register function {func_id}")


def native_symbol(symbol: str, ctx_u32: int | None = None) -> tuple[int, int, object]:
    """(address, ctx, keep) of one of the C library's native functions (splitrpc_tools.h): ctx
    points to a uint32_t holding ctx_u32 (kept alive by keep), or is 0."""
    address = int(ffi.cast("uintptr_t", ffi.addressof(lib, symbol)))
    if ctx_u32 is None:
        return address, 0, None
    keep = ffi.new("uint32_t *", ctx_u32)
    return address, int(ffi.cast("uintptr_t", keep)), keep


@dataclass(frozen=True)
class QueueView:
    """What a scheduling policy sees of one function with a batch due (srpc_sched_view_t)."""
    func_id: int
    name: str
    aux_class: int         # which of its aux classes' queues (0 without classes)
    queued: int            # calls queued and ready
    oldest_wait: float     # seconds the oldest of them has waited
    queued_cost: int       # their summed admission cost (0 without one)
    in_flight: int         # its batches out (deferred, not finished)
    priority: int
    weight: int
    deadline: float | None  # its deadline in seconds, or None


def set_policy(native: "NativeServer", policy, names: dict) -> None:
    """Installs policy (an object with choose(views) -> func_id or QueueView, optionally in a
    (choice, max_calls) pair, or None) as
    the server's scheduling policy (srpc_server_set_sched_fn), asked once per batch decision on
    the worker thread. A choice it raises on or gets wrong is counted by the C core
    (stats()["sched"]["errors"]) and the built-in policy decides; the first such error, and then
    every 1000th, is logged."""
    errors = [0]

    def choose(_ctx, due, n, max_calls) -> int:
        try:
            views = [QueueView(v.func_id, names.get(v.func_id, str(v.func_id)), v.aux_class, v.queued,
                               v.oldest_wait_ns / 1e9,
                               v.queued_cost, v.inflight, v.priority, v.weight,
                               v.deadline_ns / 1e9 if v.deadline_ns else None) for v in (due[i] for i in range(n))]
            r = policy.choose(views)
            if r is None:
                return -1
            fid, cap = r if isinstance(r, tuple) else (r, 0)
            at = next((i for i, v in enumerate(views) if v is fid), None)  # a QueueView it was given
            if at is None and not isinstance(fid, QueueView):  # a func_id: its first queue listed
                at = next((i for i, v in enumerate(views) if v.func_id == fid), None)
            if at is None or isinstance(cap, bool) or not isinstance(cap, int) or not 0 <= cap < 2**32:
                raise SplitRPCError(f"the policy chose {r!r}: not (func_id, max_calls) of a function with a batch due "
                                    f"({[v.func_id for v in views]})")
            max_calls[0] = cap
            return at
        except Exception as exc:  # the built-in policy decides; serving goes on
            errors[0] += 1
            if errors[0] % 1000 == 1:
                log.warning("scheduling policy %r failed (%d so far; the built-in policy decided): %s: %s",
                            policy, errors[0], type(exc).__name__, exc, exc_info=errors[0] == 1)
            return -2

    cb = ffi.callback("int(void *, const srpc_sched_view_t *, uint32_t, uint32_t *)", choose, error=-2)
    native.keep.append(cb)  # alive as long as the server
    check(lib.srpc_server_set_sched_fn(native.handle, cb, ffi.NULL), "srpc_server_set_sched_fn")


def start(srv) -> None:
    check(lib.srpc_server_start(srv), "cannot start the engine")


def stop(srv) -> None:
    lib.srpc_server_stop(srv)


def drain(srv, on: bool) -> None:
    """New calls answered DRAINING (on) or served again (off)."""
    check(lib.srpc_server_drain(srv, int(bool(on))), "srpc_server_drain")


def pending(srv) -> int:
    """Calls not yet answered: being reassembled, queued or running."""
    out = ffi.new("uint64_t *")
    check(lib.srpc_server_pending(srv, out), "srpc_server_pending")
    return int(out[0])


def destroy(srv) -> None:
    lib.srpc_server_destroy(srv)


# ------------------------------------------------------------------ functions and the worker loop


def args_key(pos: int, count: int) -> int:
    """Function.args_cache's key of a batch at ring position pos (srpc_batch_t.pos) of count
    calls (a uint32): one int, where a (pos, count) tuple would be built and hashed per batch."""
    return pos << 32 | count


@dataclass(slots=True)  # slots: the worker reads a few attributes per batch, from one cold object, not a dict
class Function:
    """A registered function as the worker runs it: its callback and how to hand it a batch."""
    func_id: int
    name: str
    callback: Callable
    inputs: list
    outputs: list
    raw: bool
    max_request: int
    max_response: int
    device: str = "cpu"       # where its Tensor Queues are: "cpu" or "cuda:N"
    # Any: the classes above the binding layer (splitrpc.gpu, .executor, .describe), which it does not import
    runner: Any = None        # a splitrpc.gpu.DeviceRunner for a function on a GPU
    pool: Any = None          # a splitrpc.executor.ThreadPool that runs its batches, or None: inline
    costs_kw: bool = False    # the callback takes its calls' admission costs as costs=
    keys_kw: bool = False     # the callback takes the key id each call came with as keys= (server functions)
    native: bool = False      # a native function (splitrpc.native): its batches never reach Python
    # aux classes: the Function of each class's queues (this one is class 0), or None
    classes: list | None = None
    aux_class: int = 0        # which of its function's classes' queues this Function is
    class_bounds: tuple | None = None  # classes by cost: their bounds (class k: [b[k-1], b[k]))
    calls: int = field(default=0)
    info: Any = None               # its splitrpc.describe.FunctionInfo (what describe answers)
    server_function: bool = False  # ping or describe (docs/PROTOCOL.md, Amendment 1)
    # The callback's arguments by ring position and B (args_key): a ring revisits the same
    # positions, and building the numpy views costs about a microsecond each, finding them a
    # tenth of that. A tuple, so that callback(*args) passes it as it is.
    args_cache: dict = field(default_factory=dict)
    # The last batch's args_key and arguments: a function that sees one call at a time starts
    # each in the element it used last (callring.c rewind_if_idle), so the worker finds them here
    # without a lookup in args_cache, whose memory is cold when there are many functions.
    last_key: int = -1
    last_args: tuple = ()
    # serve()'s one test per batch: a host tensor function run inline, without costs= (set there)
    plain: bool = False

    def is_plain(self) -> bool:
        """Runs the common way: a host tensor callback on the worker, called as callback(*args)."""
        return self.runner is None and self.pool is None and not self.raw and not self.costs_kw and not self.keys_kw

    def args(self, b, count: int) -> tuple:
        """The callback's arrays for a batch: numpy views of the host elements, or CuPy views
        of the device elements for a GPU function; cached by (ring position, B)."""
        pos = b.pos
        key = args_key(pos, count)
        args = self.args_cache.get(key)
        if args is None:
            if self.runner is not None:
                args = tuple(self.runner.views(b, count))
            else:
                bin_, bout = getattr(b, "in"), b.out
                args = tuple([_view(bin_[k], spec, count) for k, spec in enumerate(self.inputs)]
                             + [_view(bout[k], spec, count) for k, spec in enumerate(self.outputs)])
            if pos != _NO_POS and len(self.args_cache) < _ARGS_CACHE_LIMIT:
                self.args_cache[key] = args
        if pos != _NO_POS:
            self.last_key, self.last_args = key, args
        return args

    def kwargs(self, srv, b, count: int) -> dict:
        """The callback's keyword arguments: costs= (a uint32 array of the calls' admission
        costs, a copy) and keys= (a list of each call's key id, 0 without keys:
        srpc_server_call_keys) when it takes them, else none."""
        if not (self.costs_kw or self.keys_kw):
            return _NO_KWARGS
        kw = {}
        if self.costs_kw:
            kw["costs"] = np.frombuffer(ffi.buffer(b.cost, 4 * count), np.uint32).copy()
        if self.keys_kw:
            ids = ffi.new("uint32_t[]", count)
            check(lib.srpc_server_call_keys(srv, b, ids), "srpc_server_call_keys")
            kw["keys"] = list(ids)
        return kw

    def raw_args(self, b, count: int) -> tuple:
        """A raw callback's arguments: the requests (their own lengths) and the responses
        (max_response bytes each) as lists of memoryviews of the batch's elements."""
        base_in, base_out, in_len = getattr(b, "in")[0], b.out[0], b.in_len
        reqs = [memoryview(ffi.buffer(base_in + i * self.max_request, in_len[i])) for i in range(count)]
        resps = [memoryview(ffi.buffer(base_out + i * self.max_response, self.max_response)) for i in range(count)]
        return reqs, resps

    def raw_lengths(self, srv, b, count: int, lengths, out) -> None:
        """A raw callback's return value into out[0..count) (the batch's out_len): a length per
        call, or a RemoteError for a call that fails alone (srpc_server_fail_call on b)."""
        lengths = list(lengths) if lengths is not None else []
        if len(lengths) != count:
            raise SplitRPCError(f"raw function {self.name!r} returned {len(lengths)} lengths for {count} calls")
        for i, n in enumerate(lengths):
            if isinstance(n, RemoteError):  # this call fails alone
                fail_call(srv, b, count, i, n)
                out[i] = 0
                continue
            n = int(n)
            if not 0 <= n <= self.max_response:
                raise SplitRPCError(f"raw function {self.name!r}: reply length {n} outside 0..{self.max_response}")
            out[i] = n



def _view(ptr, spec, count: int) -> np.ndarray:
    """A (count, *shape) array over `count` contiguous Tensor Queue elements (no copy)."""
    buf = ffi.buffer(ptr, count * spec.nbytes)
    return np.frombuffer(buf, dtype=spec.np_dtype).reshape((count, *spec.shape))


def fail_call(srv, b, count: int, i, err) -> None:
    """Call i of the open batch b gets err's ERROR alone (srpc_server_fail_call); raises
    SplitRPCError for an index outside the batch or an err that is not a RemoteError."""
    if not isinstance(err, RemoteError) or not 0 < err.code < lib.SRPC_E_MAX:
        raise SplitRPCError(f"call {i!r}: a call fails with a RemoteError instance such as "
                            f"splitrpc.BadRequest('why'), got {err!r}")
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < count:
        raise SplitRPCError(f"call index {i!r} outside the batch of {count}")
    check(lib.srpc_server_fail_call(srv, b, int(i), err.code, ffi.new("char[]", _cut(err.message))),
          "srpc_server_fail_call")


def fail_calls(srv, b, count: int, errors) -> None:
    """A tensor callback's return value: None, or {call index: RemoteError} for the calls of
    its batch that fail alone (the others get their outputs)."""
    if not hasattr(errors, "items"):
        raise SplitRPCError("a function's callback returns None, or a dict {call index: RemoteError} of the "
                            f"calls that fail, got {type(errors).__name__}")
    for i, err in errors.items():
        fail_call(srv, b, count, i, err)


def _cut(text_: str) -> bytes:
    """text_ as UTF-8, at most SRPC_ERRMSG_MAX bytes, cut between characters."""
    return text_.encode("utf-8", "replace")[:lib.SRPC_ERRMSG_MAX].decode("utf-8", "ignore").encode("utf-8")


def _error_text(exc: BaseException) -> bytes:
    """The exception as an ERROR datagram's text: UTF-8, at most 256 bytes, cut between characters."""
    return _cut(f"{type(exc).__name__}: {exc}")


class PoolJobs:
    """The batches of one server deferred in Python (handed to a thread pool, or waiting on a
    callback's Future) and not yet finished: stop() waits for them, so that no other thread still
    uses the server's queues when they are freed."""

    def __init__(self):
        self._cv = threading.Condition()
        self._n = 0
        self.stopping = False
        self.calls_lock = threading.Lock()  # Function.calls, counted on several threads

    def started(self) -> None:
        with self._cv:
            self._n += 1

    def ended(self) -> None:
        with self._cv:
            self._n -= 1
            if not self._n:
                self._cv.notify_all()

    def wait_idle(self, warn_every_s: float = 5.0) -> None:
        """Marks the server stopping (pool batches not begun are dropped) and waits for the
        others, saying every warn_every_s seconds how many it still waits for."""
        with self._cv:
            self.stopping = True
            while not self._cv.wait_for(lambda: self._n == 0, timeout=warn_every_s):
                log.warning("stop waits for %d batches still running on other threads (a thread pool, or a "
                            "callback's Future not done yet)", self._n)


def _defer(srv, b, jobs: PoolJobs, done):
    """Defers the open batch b and returns a copy that describes it (b is reused for the next
    batch, and srpc_server_defer empties it); the batch is one of jobs' until it is finished."""
    copy = ffi.new("srpc_batch_t *", b[0])
    check(lib.srpc_server_defer(srv, b, done), "srpc_server_defer")
    jobs.started()
    return copy


def _hand_to_pool(srv, fn: Function, b, count: int, jobs: PoolJobs, done) -> None:
    """Queues the batch's callback on fn's executor as a BatchJob, deferred; the executor's
    thread finishes it (_run_on_pool). The arguments are built here, while b still describes the batch."""
    args = fn.raw_args(b, count) if fn.raw else fn.args(b, count)
    kwargs = fn.kwargs(srv, b, count)
    copy = _defer(srv, b, jobs, done)
    try:
        fn.pool.submit(BatchJob(_run_on_pool, fn.name, count, args, kwargs, srv, fn, copy, jobs))
    except Exception as exc:  # an executor that cannot take it: the batch gets INTERNAL, and is ended
        _settle(srv, fn, copy, count, None, exc, jobs)


def _run_on_pool(_name: str, count: int, args, kwargs: dict, srv, fn: Function, b, jobs: PoolJobs) -> None:
    """An executor thread's part of a deferred batch (its BatchJob's run): the callback, then _settle."""
    if jobs.stopping:  # the server is stopping: the batch is dropped with the queues
        jobs.ended()
        return
    try:
        r = fn.callback(*args, **kwargs)
    except Exception as exc:
        _settle(srv, fn, b, count, None, exc, jobs)
        return
    _settle(srv, fn, b, count, r, None, jobs)


def _outcome(f: Future) -> tuple:
    """A done Future's (result, None), or (None, its exception), a cancellation included."""
    try:
        return f.result(), None
    except BaseException as e:  # CancelledError is a BaseException
        return None, e


def _settle(srv, fn: Function, b, count: int, r, exc: BaseException | None, jobs: PoolJobs) -> None:
    """Finishes the deferred batch b (srpc_server_finish, which wakes the worker to send the
    replies) from the callback's return value r: None or {i: RemoteError} for a tensor function,
    the lengths for a raw one; or, r a concurrent.futures.Future of that, once it is done (on
    the thread that completes it). exc: the callback raised, and the batch gets INTERNAL, as on
    the worker. Any thread; ends the batch's job."""
    if exc is None and isinstance(r, Future):
        r.add_done_callback(lambda f: _settle(srv, fn, b, count, *_outcome(f), jobs))
        return
    try:
        if exc is None:
            try:
                if fn.raw:
                    lens = ffi.new("uint32_t[]", count)
                    fn.raw_lengths(srv, b, count, r, lens)
                    b.out_len = lens
                elif r is not None:
                    fail_calls(srv, b, count, r)
                with jobs.calls_lock:
                    fn.calls += count
                check(lib.srpc_server_finish(srv, b, 0, ffi.NULL), "srpc_server_finish")
                return
            except Exception as e:  # a bad return value: INTERNAL, said why
                exc = e
        log.warning("function %s raised %s: %s", fn.name, type(exc).__name__, exc)
        lib.srpc_server_finish(srv, b, lib.SRPC_E_INTERNAL, ffi.new("char[]", _error_text(exc)))
    finally:
        jobs.ended()


def serve(srv, funcs: dict, jobs: PoolJobs | None = None) -> None:
    """The worker loop: takes each batch, runs its function's callback once (a GPU function's
    is queued on its stream and the batch handed back in flight; a pool function's is handed to
    its pool and finished there; one whose callback returns a Future is finished when that is
    done) and completes it, until the server stops. A callback that raises gets INTERNAL for its
    batch's calls; serving goes on."""
    b = ffi.new("srpc_batch_t *")
    done = ffi.new("uint32_t **")
    jobs = jobs if jobs is not None else PoolJobs()
    null = ffi.NULL
    next_batch, complete_next = lib.srpc_server_next_batch, lib.srpc_server_complete_next
    for f in funcs.values():
        for c in f.classes or (f,):
            c.plain = c.is_plain()
    rc = next_batch(srv, b, WAIT_US)
    while True:  # once per batch: keep this loop lean (each attribute of b is a cffi lookup)
        if rc:
            if rc == -ETIMEDOUT:
                rc = next_batch(srv, b, WAIT_US)
                continue
            if rc == -ESHUTDOWN:
                return
            check(rc, "srpc_server_complete_next")
        fn = funcs[b.func_id]
        if fn.classes is not None:  # one of its aux classes' queues
            fn = fn.classes[b.aux_class]
        count = b.count
        try:
            if fn.plain:  # a host tensor function run here, the common case: its views by args_key
                key = b.pos << 32 | count  # args_key, inlined
                if key == fn.last_key:
                    args = fn.last_args
                else:
                    args = fn.args_cache.get(key)
                    if args is None:
                        args = fn.args(b, count)
                    else:
                        fn.last_key, fn.last_args = key, args
                r = fn.callback(*args)
            elif fn.runner is not None:
                rc = _run_gpu(srv, fn, b)
                continue
            elif fn.pool is not None:
                _hand_to_pool(srv, fn, b, count, jobs, done)
                rc = next_batch(srv, b, WAIT_US)
                continue
            elif fn.raw:
                r = fn.callback(*fn.raw_args(b, count), **fn.kwargs(srv, b, count))
                if not isinstance(r, Future):
                    fn.raw_lengths(srv, b, count, r, b.out_len)
                    r = None
            else:  # a host tensor function that takes costs=
                r = fn.callback(*fn.args(b, count), **fn.kwargs(srv, b, count))
            if r is not None:
                if isinstance(r, Future):  # finished later, by whoever completes it
                    _settle(srv, fn, _defer(srv, b, jobs, done), count, r, None, jobs)
                    rc = next_batch(srv, b, WAIT_US)
                    continue
                fail_calls(srv, b, count, r)  # a tensor function's calls that fail alone
            fn.calls += count
            rc = complete_next(srv, b, 0, null, WAIT_US)
        except Exception as exc:  # the calls of this batch get INTERNAL; serving goes on
            log.warning("function %s raised %s: %s", fn.name, type(exc).__name__, exc)
            rc = complete_next(srv, b, lib.SRPC_E_INTERNAL, ffi.new("char[]", _error_text(exc)), WAIT_US)


def _run_gpu(srv, fn: Function, b) -> int:
    """One batch of a GPU function: queued on its stream and handed back in flight; returns
    next_batch's code. Raises while the batch is still open, so the caller completes it."""
    count = b.count
    runner = fn.runner
    runner.run(srv, b, None if runner.o2 is not None else fn.args(b, count))
    fn.calls += count
    return lib.srpc_server_next_batch(srv, b, WAIT_US)


# ------------------------------------------------------------------ counters


def read_stats(srv) -> dict:
    """srpc_server_stats as a dict: datagrams, calls, batches, drops by reason and errors by
    code (both named by the C core), gauges, the queue-delay histogram, socket buffers."""
    st = ffi.new("srpc_server_stats_t *")
    check(lib.srpc_server_stats(srv, st), "srpc_server_stats")
    hist = {i: int(st.batch_hist[i]) for i in range(1, lib.SRPC_BATCH_HIST) if st.batch_hist[i]}
    return {
        "rx_datagrams": st.rx_datagrams, "rx_bytes": st.rx_bytes,
        "tx_datagrams": st.tx_datagrams, "tx_bytes": st.tx_bytes, "rx_in_place": st.rx_in_place,
        "unplaced": st.unplaced,
        "calls": st.calls, "replies": st.replies, "batches": st.batches,
        "mean_batch": (st.batch_calls / st.batches) if st.batches else 0.0,
        "batch_sizes": hist,
        "drops": {name: int(st.drops[i]) for i, name in enumerate(DROP_NAMES)},
        "errors": {name: int(st.errors[c]) for c, name in ERROR_NAMES.items()},
        "cache_hits": st.cache_hits,
        "partial_messages": st.partial_msgs, "reassembly_bytes": st.reasm_bytes,
        "cached_replies": st.cached_replies, "in_flight": st.inflight, "queued": st.queued,
        # calls run, by how long they were queued (RX_COMPLETE to the start of their batch):
        # bucket i counts delays of at most le_us[i] (and more than le_us[i-1]); the last, longer
        "queue_delay": _queue_delay(st.queue_delay_hist, st.queue_delay_sum_ns),
        "socket_buffers": {"rcvbuf": st.rcvbuf, "sndbuf": st.sndbuf},
        # batch decisions put to a Python scheduling policy, and those it got wrong or raised on
        "sched": {"asked": st.sched_asked, "errors": st.sched_errors},
        # queues the batcher looked at to choose batches (work: grows with the queues holding calls)
        "sched_looks": st.sched_looks,
        # replies sent in runs to one client that the kernel cut (UDP segmentation offload)
        "tx_coalesced": st.tx_coalesced,
        # transport sends of replies (replies / tx_sends: how many went out in each)
        "tx_sends": st.tx_sends,
        # transport receives that returned datagrams (rx_datagrams / rx_receives: how many came in each)
        "rx_receives": st.rx_receives,
        # datagrams received into the place expected for another segment, then moved back whole
        "rx_unscattered": st.rx_unscattered,
        # datagrams that came coalesced with others of their sender (UDP receive offload)
        "rx_coalesced": st.rx_coalesced,
        # authenticated calls (docs/PROTOCOL-v4.md): datagrams that passed, calls refused FORBIDDEN
        # (a function the key may not call; an expired key), key tables taken in while serving. The
        # datagrams dropped are in drops (auth_*).
        # sessions: version 5's sessions held now (a gauge; docs/PROTOCOL-v5.md), made and forgotten;
        # tombstones: forgotten sessions kept while their line has calls (a gauge), and the resumes that
        # named one (docs/security.md)
        "auth": {"ok": st.auth_ok, "forbidden": st.auth_forbidden, "expired": st.auth_expired,
                 "reloads": st.auth_reloads, "sessions": st.sessions, "sessions_made": st.sessions_made,
                 "sessions_forgotten": st.sessions_forgotten, "tombstones": st.sessions_tombstones,
                 "tomb_resumes": st.sessions_tomb_resumes},
    }


def _queue_delay(hist, sum_ns) -> dict:
    qd = [int(hist[i]) for i in range(lib.SRPC_QDELAY_HIST)]
    return {"le_us": [1 << i for i in range(lib.SRPC_QDELAY_HIST - 1)] + [None], "counts": qd, "count": sum(qd),
            "sum_us": sum_ns / 1e3}


def read_func_stats(srv, func_id: int) -> dict:
    """srpc_server_func_stats as a dict: one function's calls, errors by code name, batches and
    their sizes, queue-delay and service-time histograms (read_stats's queue-delay layout), calls
    queued now."""
    st = ffi.new("srpc_func_stats_t *")
    check(lib.srpc_server_func_stats(srv, func_id, st), "srpc_server_func_stats")
    return {"calls": st.calls, "errors": {name: int(st.errors[c]) for c, name in ERROR_NAMES.items()},
            "batches": st.batches, "batch_calls": st.batch_calls,
            "batch_sizes": {i: int(st.batch_hist[i]) for i in range(1, lib.SRPC_BATCH_HIST) if st.batch_hist[i]},
            "queue_delay": _queue_delay(st.queue_delay_hist, st.queue_delay_sum_ns),
            "service": _queue_delay(st.service_hist, st.service_sum_ns), "queued": st.queued}


def read_dpdk_stats(srv) -> dict:
    """The DPDK port's counters: frames, drops by reason, ARP replies, failed sends; whether the
    port splits frames in hardware, and where the payloads then land ("none": software split,
    "dpdk", "host" or "gpu": the payload pool's memory)."""
    st = ffi.new("srpc_dpdk_stats_t *")
    check(lib.srpc_server_dpdk_stats(srv, st), "srpc_server_dpdk_stats")
    drops = {}
    for i in range(1, lib.SRPC_DPDK_DROP_SLOTS):
        name = text(lib.srpc_dpdk_drop_name(i))
        if name is None:
            break
        drops[name] = int(st.drops[i])
    return {"rx_frames": st.rx_frames, "tx_frames": st.tx_frames, "drops": drops, "rx_too_big": st.rx_too_big,
            "tx_failed": st.tx_failed, "no_neighbour": st.no_neighbour, "arp_replies": st.arp_replies,
            "rx_buffer_split": bool(st.rx_buffer_split), "rx_split_emulated": bool(st.rx_split_emulated),
            "payload_pool": text(lib.srpc_dpdk_payload_pool_name(st.payload_pool)),
            "rx_device_payloads": st.rx_device_payloads, "rx_device_to_host": st.rx_device_to_host}
