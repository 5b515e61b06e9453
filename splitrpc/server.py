"""server.py: the Python server API: register functions, run the batch worker, read counters.

The native engine thread receives, reassembles and queues requests; this module's worker
thread takes whole batches (one contiguous (B, ...) view per Tensor Queue, no copy), runs the
callback once per batch and hands the batch back, after which the engine's code sends the
replies. Python never sees a datagram.
"""
from __future__ import annotations

import dataclasses
import inspect
import ipaddress
import logging
import os
import threading
import time
from typing import Any, Callable, Sequence, TypeVar, cast

from splitrpc import dpdk, gpu
from splitrpc import auth as auth_
from splitrpc import coroutines
from splitrpc import describe as describe_
from splitrpc import executor as executor_
from splitrpc.cost import CostTable
from splitrpc.executor import ThreadPool
from splitrpc.function_config import FunctionConfig
from splitrpc.native import NativeFunction
from splitrpc._native import auth as _auth
from splitrpc._native import server as _server
from splitrpc._native.client import CLIENT_DEFAULTS
from splitrpc._native.wire import PROTOCOLS
from splitrpc.errors import BadRequest, GPUError, GPUUnavailable, KeyFileError, SplitRPCError
from splitrpc.spec import TensorSpec

log = logging.getLogger("splitrpc.server")

WAIT_MODES = _server.WAIT_MODES
# A Server's defaults as the C core sets them (srpc_server_config_init; the numbers live in
# native/src/core/tunables.h): Server keywords -> values. Read-only: change a default there.
SERVER_DEFAULTS = _server.SERVER_DEFAULTS
SCHED_POLICIES = _server.SCHED_POLICIES
# Seconds with no datagram a drained server waits (answering DRAINING) before it stops: twice a
# client's longest gap between retransmissions (rto_max, 1 s by default), so that a call still in
# flight is answered DRAINING, not silence then an unreachable port. Equal to it (1 s, before),
# a client backed off to rto_max on a loaded machine retransmitted just after the server left:
# 112 of 2,000 calls failed Unavailable in test_operations' burst drain.
DRAIN_LINGER = 2 * CLIENT_DEFAULTS["rto_max"]
LINGER_POLL = 0.01   # seconds between its looks at the receive counter
QueueView = _server.QueueView
_F = TypeVar("_F", bound=Callable[..., Any])  # a callback the function decorator registers and returns


def _takes_costs(fn: Callable[..., Any]) -> bool:
    """Whether callback fn has a parameter named costs (passed by keyword)."""
    try:
        p = inspect.signature(fn).parameters.get("costs")
    except (TypeError, ValueError):
        return False
    return p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)


class Server:
    """A splitrpc server bound to one UDP port.

    Register functions with :meth:`function`, then :meth:`serve` (blocks) or :meth:`start`
    (runs the worker on a background thread) and :meth:`stop`. Usable as a context manager.

    wait: "poll" (the worker busy-polls the socket while it waits for a batch: lowest
    latency, one core), "block" (it sleeps in poll()), "adaptive" (polls for spin_us after
    each batch, then sleeps). rx_takeover_us: a callback running longer than this lets the
    engine thread take over receiving. reply_hold_us: about how long a batch's replies may wait
    to go out with the next batches' in one send (batches of one call; 0: never). Sizes are
    bytes, times seconds unless named _us.

    sched: which function's due batch the worker takes next: "rr" (the default: each function
    with calls queued in turn), "priority" (the highest ``priority=`` of function() first, strict;
    equals in turn), "fair" (weighted fair share: the function that has had the least work per
    unit of its ``weight=``, work being admission cost where it has one, else calls) or "edf"
    (earliest deadline first: the oldest queued call's arrival plus its function's
    ``deadline``). Calls past their deadline are answered first under every policy.

    policy: an object of yours with ``choose(queues)``, asked once per batch decision when more
    than one function has a batch due (never per datagram), on the worker thread: ``queues`` is a
    list of ``QueueView`` (func_id, name, aux_class, queued, oldest_wait in seconds, queued_cost,
    in_flight, priority, weight, deadline); it returns the func_id to run next (or the QueueView,
    to pick one aux class), ``(choice, max_calls)`` to also cut the batch, or None to let
    ``sched`` decide. If it raises or returns anything else,
    ``sched`` decides, the error is counted (``stats()["sched"]["errors"]``) and logged (the
    first one with its traceback), and serving goes on. Keep it short: the worker waits for it.

    allow: the client networks served ("10.0.0.0/8,127.0.0.1" or a list of such; IPv4 and IPv6
    prefixes, at most 32); datagrams from elsewhere are dropped unread and counted as
    drops["not_allowed"]. None: any source (the default host, 127.0.0.1, already keeps the
    server to this machine).

    Partial messages (segments still missing) hold at most reassembly_memory bytes in all and
    reassembly_memory_per_client for the clients of one IP address (any port); a new message
    over either is dropped (drops["memory_cap"], drops["client_memory_cap"]) and its client's
    retransmission tries again later.

    keys: a splitrpc.KeyTable, or the path of its JSON file (docs/security.md): the server then
    takes only authenticated calls, in sessions (docs/PROTOCOL-v5.md): a client makes a session
    with a handshake authenticated by its key, and every datagram then carries the session, a
    counter and a tag, checked in C before it is used (a forged, changed, replayed or unsigned one
    is dropped unanswered and counted in drops["auth_*"]; one of a session this server does not
    have, as after a restart, is never run), each key allowed only its functions (others:
    ``Forbidden``), and every reply sealed under the caller's session. ``legacy_v4=True`` also
    takes version 4's signed datagrams (docs/PROTOCOL-v4.md), with its limits: a captured call
    runs again after a restart and on another replica; off by default (drops["auth_v4_off"]).
    ``reload_keys()`` replaces the table while serving (``splitrpc serve --keys FILE`` on
    SIGHUP). Needs libsodium (AuthUnavailable without it).

    reuse_port=True lets several server processes bind the same host:port (SO_REUSEPORT): the
    kernel hands each client address to one of them, so every segment of a message reaches the
    same process; each counts its own stats() (``splitrpc serve --processes N`` runs N of them and
    sums their counters). Kernel UDP only.

    transport="dpdk" serves on a DPDK port instead of a kernel socket: the EAL is initialised
    with dpdk_args (once per process, e.g. ``["--no-huge", "--no-shconf", "-l", "0",
    "--vdev=net_af_packet0,iface=eth0"]``), dpdk_port names the port ("net_af_packet0", a PCI
    address), host is the server's IPv4 address on it and port its UDP port (not 0). Both
    threads then poll the port (no sleeping); ARP requests for host are answered. Replies are
    cut to fit dpdk_mtu. Where the port splits frames in hardware (or dpdk_emulate_split=True
    splits them in software the same way, on any port), dpdk_payload says where the payloads
    land: "auto" (the default: cuda:0 where there is a GPU, else host memory), "host", or
    "cuda:N", GPU memory, from where a one-segment request goes straight to a GPU function's
    device Tensor Queues (stats()["dpdk"]["payload_pool"] says which one was made: GPU memory
    needs a port that verifies UDP checksums).
    """

    def __init__(
        self,
        host: str | None = None,
        port: int | None = None,
        *,
        wait: str | None = None,
        sched: str | None = None,
        policy: object | None = None,
        spin_us: int | None = None,
        rx_takeover_us: int | None = None,
        reply_hold_us: int | None = None,
        segment_size: int | None = None,
        segment_size_loopback: int | None = None,
        max_message: int | None = None,
        reassembly_timeout: float | None = None,
        reassembly_memory: int | None = None,
        reassembly_memory_per_client: int | None = None,
        reply_cache_ttl: float | None = None,
        reply_cache_bytes: int | None = None,
        max_calls: int | None = None,
        socket_buffer: int | None = None,
        reuse_port: bool = False,
        allow: str | Sequence[str] | None = None,
        keys: "auth_.KeyTable | str | os.PathLike[str] | None" = None, legacy_v4: bool = False,
        transport: str = "udp",
        dpdk_args: Sequence[str] = (),
        dpdk_port: str | None = None,
        dpdk_mtu: int | None = None,
        dpdk_payload: str = "auto",
        dpdk_emulate_split: bool = False,
    ):
        self._init_kwargs = {k: v for k, v in locals().items() if k != "self"}  # rebuild() makes it again
        self._registrations: list[tuple[Any, ...]] = []  # add_function's (fn, func_id, name, inputs, outputs, config): rebuild()
        # A setting left None takes the C core's default (srpc_server_config_init, native/src/core/tunables.h;
        # splitrpc._native.server.SERVER_DEFAULTS lists them; dpdk_mtu: 0 there, which means 1500).
        if wait is not None and wait not in WAIT_MODES:
            raise ValueError(f"wait must be one of {sorted(WAIT_MODES)}, got {wait!r}")
        if policy is not None and not callable(getattr(policy, "choose", None)):
            raise ValueError(f"policy must have a choose(queues) method, got {policy!r}")
        if sched is not None and sched not in SCHED_POLICIES:
            raise ValueError(f"sched must be one of {sorted(SCHED_POLICIES)}, got {sched!r}")
        if transport not in ("udp", "dpdk"):
            raise ValueError(f"transport must be 'udp' or 'dpdk', got {transport!r}")
        if reuse_port and transport == "dpdk":
            raise ValueError("reuse_port is for kernel UDP: a DPDK port belongs to one process")
        payload_gpu = None
        if transport == "dpdk":
            if not dpdk_port:
                raise ValueError("transport='dpdk' needs dpdk_port, the DPDK name of the port to serve on "
                                 "(e.g. 'net_af_packet0' for --vdev=net_af_packet0,iface=eth0)")
            udp_port = _server.SERVER_DEFAULTS["port"] if port is None else int(port)
            if not 0 < udp_port < 65536:
                raise ValueError(f"transport='dpdk' needs a UDP port from 1 to 65535, got {port}")
            payload_gpu = _server.payload_device(dpdk_payload)
            dpdk.init(dpdk_args)  # once per process; raises DPDKError / DPDKUnavailable
        self._keys: auth_.KeyTable | None = None
        if legacy_v4 and keys is None:
            raise ValueError("legacy_v4=True takes version 4's signed calls: it needs keys=")
        self._legacy_v4 = bool(legacy_v4)
        if keys is not None:
            _auth.require()
            self._keys = keys if isinstance(keys, auth_.KeyTable) else auth_.KeyTable.load(keys)
        allow_text = None
        if allow:
            allow_text = allow if isinstance(allow, str) else ",".join(allow)
            nets = [n for n in allow_text.replace(",", " ").split() if n]
            if len(nets) > 32:
                raise ValueError(f"allow: at most 32 networks, got {len(nets)}")
            for n in nets:
                try:
                    ipaddress.ip_network(n, strict=False)
                except ValueError as e:
                    raise ValueError(f"allow: {n!r} is not an IPv4 or IPv6 network ({e})") from None
        self._native = _server.create_server(
            host, port=port, wait=wait, sched=sched, spin_us=spin_us, rx_takeover_us=rx_takeover_us, reply_hold_us=reply_hold_us,
            segment_size=segment_size,
            segment_size_loopback=segment_size_loopback, max_message=max_message,
            reassembly_timeout=reassembly_timeout, reassembly_memory=reassembly_memory,
            reassembly_memory_per_client=reassembly_memory_per_client, reply_cache_ttl=reply_cache_ttl,
            reply_cache_bytes=reply_cache_bytes, max_calls=max_calls, socket_buffer=socket_buffer,
            reuse_port=int(bool(reuse_port)), allow=allow_text,
            dpdk_dev=dpdk_port if transport == "dpdk" else None, dpdk_mtu=dpdk_mtu, dpdk_payload_gpu=payload_gpu,
            dpdk_emulate_split=dpdk_emulate_split)
        self._srv = self._native.handle
        self.host = self._native.host
        self.transport = transport
        self._funcs: dict[int, _server.Function] = {}
        self._policy = policy
        self._state = "created"
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # batches handed to thread pools, not yet finished (PoolJobs.__init__ is unannotated, in _native)
        self._jobs = _server.PoolJobs()  # type: ignore[no-untyped-call]
        self._aio = coroutines.ServerLoop()  # where async def functions run (started only if there is one)
        self._async_functions = 0  # async def functions registered: the loop starts with the server when > 0
        self._pools_held = False         # the pools' threads were acquired (start) and not released
        # stats() key -> a function returning a dict (add_stats_source)
        self._stats_sources: dict[str, Callable[[], dict[str, Any]]] = {}
        self.stats_metrics: dict[str, Callable[[Any, str], Any]] = {}  # key -> its Prometheus families (metrics.py)
        self._draining = False
        self._worker_running = False     # the worker loop is in _server.serve (health)
        self._drain_abort = threading.Event()  # abort_drain(): a drain in stop(grace) ends now
        self._poisoned: str | None = None  # why close() must leave the native queues allocated (a GPU wait gave up)

    # ------------------------------------------------------------------ registration

    @property
    def port(self) -> int:
        return _server.server_port(self._srv)

    @property
    def max_message(self) -> int:
        """The largest request (and reply) this server takes, in bytes."""
        return self._native.max_message

    def function(
        self,
        func_id: int,
        name: str | None = None,
        inputs: Sequence[TensorSpec] = (),
        outputs: Sequence[TensorSpec] = (),
        config: FunctionConfig | None = None,
        **settings: Any,
    ) -> Callable[[_F], _F]:
        """Decorator registering `fn` under func_id, with the settings given as keywords (below)
        or as ``config=splitrpc.FunctionConfig(...)`` (keywords given with it replace its fields):
        one dataclass carries them to the C core; a bad one fails when the decorator is applied.

        Tensor functions get ``fn(*inputs, *outputs)``, each a (B, *shape) numpy view of B
        consecutive Tensor Queue elements, and write their results into the outputs.
        Raw functions (``raw=True``) get ``fn(requests, responses)``: lists of B memoryviews
        (requests of their own length, responses of max_response bytes) and return the B
        reply lengths. The views are valid only during the call.

        One call of a batch can fail alone: a tensor callback returns ``{i: error}`` (i its
        index in the batch, error a RemoteError such as ``splitrpc.BadRequest("key 7 out of
        range")``) and the other calls get their outputs; a raw callback puts the error in place
        of the call's length. The client gets that error's code and text (256 bytes at most).
        Raising fails the whole batch with INTERNAL.

        A host function may also finish its batch later, from any thread: its callback returns a
        ``concurrent.futures.Future`` and the worker goes on at once; when the Future is done, its
        result is taken as the callback's return value (None, the dict of failed calls, or a raw
        function's lengths) and the replies go out; its exception fails the batch with INTERNAL.
        The views stay valid until then (they are the batch's Tensor Queue elements, and its calls
        keep them). (GPU functions under
        ``orchestration="graph"`` or ``"o2"`` have no per-call results.)

        An ``async def`` function (a host tensor function) runs on the server's own event loop, a
        thread of its own started with the server (asyncio's current policy's loop: uvloop's where
        the program installed it), never on the worker: it may await other services, a database,
        another splitrpc server (``splitrpc.aio.Client``), and many batches are in flight at once.
        It gets the batch's arrays as a plain callback does and returns the same (None or
        ``{i: error}``); raising fails the batch with INTERNAL. With ``per_call=True`` it is awaited
        once per call instead, concurrently, each with that call's arrays (the spec's shape, no
        batch dimension); raising a RemoteError fails that call alone with it, another exception
        fails it alone with INTERNAL. stop() cancels those still running.

        ``device="cuda:N"`` puts the function's Tensor Queues in GPU memory: the callback gets
        CuPy arrays (zero-copy views of the device elements; ``torch.from_dlpack`` takes them
        as they are) and runs with the function's CUDA stream current; it launches its work on
        that stream and returns without synchronizing. The replies go out when the stream has
        finished. ``orchestration="graph"`` captures the callback once per batch size as a
        CUDA graph and replays it. ``orchestration="o2"`` hands each batch to a persistent
        kernel compiled into the library instead of calling back (SplitRPC's GPU-managed O2);
        there is one, vecadd, named by the callback's ``o2_kernel`` attribute (the built-in
        vecadd has it). While an O2 kernel runs, anything that waits for the whole device
        (``torch.cuda.synchronize()``, ``cudaDeviceSynchronize``, freeing device memory back to
        the driver) waits until the server stops. ``deadline`` (seconds): a call still queued that
        long after its request arrived is not run; its client gets DEADLINE (DeadlineExceeded).
        Without a usable GPU the function is served
        from host memory with numpy arrays (O2: with the callback), and a warning says why.

        ``executor`` says where the callback runs: ``"inline"`` (the default) on the server's one
        worker thread, the fastest for short callbacks; a number N, on a pool of N threads of its
        own; or a ``splitrpc.ThreadPool`` shared with other functions. On a pool, a slow batch
        holds neither the worker nor other functions, and several batches run at once (callbacks
        that release the GIL, like numpy and PyTorch, overlap); the function has at most N batches
        out, and its calls queue meanwhile and fill its next batch. Replies of one function still
        leave in the order its batches were taken. GPU functions run inline.

        ``cost`` gives each call an admission cost, computed by the engine when its request is
        complete: ``"aux"`` (the request header's aux, which clients set) or a
        ``splitrpc.CostTable(table, key_offset=, keys=, key_dtype=)`` (the sum of the table's rows
        for the request's integer keys; a key outside the table fails that call alone with
        BAD_REQUEST). ``max_batch_cost`` bounds a batch's summed cost as ``max_batch`` bounds its
        count (a call costlier alone runs alone). A callback with a ``costs`` parameter gets
        them: ``costs=`` a uint32 array, one per call of the batch.

        ``priority`` (0 .. 2**32 - 1, higher first) and ``weight`` (its share) matter under the
        server's ``sched="priority"`` and ``sched="fair"``. ``aux_classes=N`` (2 .. 16) gives the
        function N queues, one per priority class: a call goes to class min(aux, N - 1) of its
        request header (``client.call(f, x, aux=k)``), and class k ranks as priority
        ``priority + k`` (a higher aux runs first under ``sched="priority"``). The callback is the
        same; its batches hold calls of one class. Host functions, and not with ``cost="aux"``.
        ``cost_classes=(b1, b2, ...)`` (1 to 15 strictly ascending integers, the first at least 1)
        gives it one queue per cost range instead, chosen by the engine from each call's admission
        cost (``cost=`` is needed) once its request is complete: class 0 below b1, class k from
        b[k] up to b[k+1], the last from the last bound up. Each class forms its own batches, so
        cheap and costly calls are never batched together; an executor reads a batch's class as
        ``BatchJob.aux_class``, and ``LanePool.by_class`` runs each class on its own lane (Quiver's
        per-request routing of GNN sampling: small requests on the CPU, large on the GPU).
        ``class_spill=(n0, n1, ...)`` (one per class but the last; 0: never) makes it load-aware:
        while class k's queue holds n_k calls not yet answered (waiting or running), a call of
        class k goes to class k + 1 instead, so cheap calls overflow a busy lane to the next one up.

        ``version`` (a short string of yours, e.g. "2024-06-01" or "v3") is what the describe
        server function reports for it (``Client.describe()``, ``splitrpc describe``). Function ids
        0xFF00 .. 0xFFFF are the server's own (ping and describe: docs/PROTOCOL.md, Amendment 1).

        ``max_batch``, ``capacity`` (elements per Tensor Queue) and ``max_delay_us`` left None take
        the C core's defaults (srpc_func_config_init, native/src/core/tunables.h); a raw function's
        ``max_request`` and ``max_response`` left None are the server's max_message. A reply must
        fit in 65,535 segments of the server's smallest reply segment size less the longest tail a
        reply carries (48 bytes: version 5's AEGIS-128L), about 92 MB at the default 1,450 bytes,
        whatever protocol its callers speak (keys may be added later); a larger one is refused
        here (NativeError, errno EMSGSIZE).
        """

        def register(fn: _F) -> _F:
            self.add_function(fn, func_id, name, inputs, outputs, config, **settings)
            return fn

        return register

    def add_function(self, fn: Callable[..., Any], func_id: int, name: str | None = None,
                     inputs: Sequence[TensorSpec] = (), outputs: Sequence[TensorSpec] = (),
                     config: FunctionConfig | None = None, *, _server_function: bool = False,
                     **settings: Any) -> None:
        """Registers fn under func_id: what the function decorator does (see there); its settings
        are config's (a splitrpc.FunctionConfig) with the keywords given replacing them."""
        if self._state != "created":
            raise SplitRPCError("functions must be registered before the server starts")
        if isinstance(func_id, bool) or not isinstance(func_id, int) or not 0 <= func_id <= 0xFFFF:
            raise ValueError(f"func_id must fit in 16 bits, got {func_id!r}")
        if func_id >= describe_.RESERVED_MIN and not _server_function:
            raise ValueError(f"func_id {func_id:#x} is reserved for the server's own functions "
                             f"({describe_.RESERVED_MIN:#x} .. 0xffff: docs/PROTOCOL.md, Amendment 1)")
        if func_id in self._funcs:
            raise ValueError(f"func_id {func_id} is already registered ({self._funcs[func_id].name})")
        cfg = FunctionConfig.of(config, **settings)  # every setting checked (TypeError: not a setting)
        inputs, outputs = list(inputs), list(outputs)
        name = name or cast(str, getattr(fn, "__name__", str(func_id)))
        raw, device, executor, cost, per_call = cfg.raw, cfg.device, cfg.executor, cfg.cost, cfg.per_call
        orchestration, n_classes = cfg.orchestration, cfg.n_classes
        is_async = coroutines.is_coroutine_function(fn)
        if per_call and not is_async:
            raise ValueError(f"{name}: per_call=True is for async def functions (a plain callback takes its batch)")
        if is_async and (raw or device != "cpu" or executor != "inline" or _takes_costs(fn)):
            raise ValueError(f"{name}: an async def function is a host tensor function run on the server's event "
                             "loop: not raw, not on a GPU, no executor= and no costs parameter")
        ordinal = gpu.parse_device(device)
        native = fn if isinstance(fn, NativeFunction) else None
        if native is not None and (ordinal >= 0 or executor != "inline" or orchestration != "o1"):
            raise ValueError(f"{name}: a native function runs inline on the host (device='cpu', executor='inline', "
                             "orchestration='o1')")
        if ordinal >= 0 and raw:
            raise ValueError("a raw function cannot run on a GPU: declare its tensors instead")
        if orchestration == "o2":
            gpu.check_o2(fn, inputs, outputs, raw)
        if ordinal >= 0:
            try:
                gpu.probe(ordinal)
            except GPUUnavailable as exc:
                log.warning("function %s: %s; serving it from host memory on the CPU", name, exc)
                ordinal = -1
        if ordinal >= 0:
            gpu.import_cupy()  # a GPU without CuPy is a setup error, not a reason to fall back
        pool = executor_.resolve(executor, ordinal)
        if n_classes and ordinal >= 0:
            raise ValueError("aux_classes and cost_classes are for host functions")
        if n_classes and len(self._funcs_and_classes()) + n_classes > _server.MAX_FUNCS:
            raise ValueError(f"at most {_server.MAX_FUNCS} queues in a server (each aux class is one)")
        if isinstance(cost, CostTable) and ordinal >= 0:
            raise ValueError("a cost table is read from the request in host memory: not for a GPU function "
                             "(cost='aux' is)")
        costs_kw = _takes_costs(fn)
        if costs_kw and (cost is None or ordinal >= 0):
            raise ValueError(f"{name}: a callback with a 'costs' parameter needs cost= and a host function")
        if raw:
            if inputs or outputs:
                raise ValueError("a raw function takes max_request/max_response, not tensor specs")
            limit = self._native.max_message
            max_request = limit if cfg.max_request is None else int(cfg.max_request)
            max_response = limit if cfg.max_response is None else int(cfg.max_response)
            in_sizes, out_sizes = [max_request], [max_response]
        else:
            if not inputs or not outputs:
                raise ValueError("a tensor function needs at least one input and one output TensorSpec")
            in_sizes, out_sizes = [s.nbytes for s in inputs], [s.nbytes for s in outputs]
        if isinstance(cost, CostTable):
            cost.check_fits(in_sizes, raw)
        if native is not None:
            native.check(raw, sum(in_sizes), sum(out_sizes))
        # The device runner (CuPy, the function's stream) before the engine's registration, which
        # cannot be undone: a failure here must leave the id free.
        runner = None
        if ordinal >= 0:
            try:
                runner = gpu.DeviceRunner(ordinal, inputs, outputs, fn, orchestration)
            except Exception as exc:  # CuPy's own errors (e.g. no stream): one type for the caller
                raise GPUError(f"cannot register function {func_id} on cuda:{ordinal}: "
                                   f"{type(exc).__name__}: {exc}") from exc
        try:
            _server.add_function(self._srv, func_id, cfg, in_sizes=in_sizes, out_sizes=out_sizes,
                                 gpu_device=ordinal,
                                 max_inflight=(pool.queue_threads or pool.threads) if pool is not None else 0,
                                 native=native)
        except BaseException:
            runner = None  # its stream goes now, not with the traceback's frame
            raise
        callback = fn
        if is_async:  # run on the server's loop; the worker finishes the batch from the Future it gets
            self._async_functions += 1
            callback = coroutines.per_call_callback(fn, self._aio, name) if per_call else \
                coroutines.batch_callback(fn, self._aio)
        f = _server.Function(func_id, name, callback, inputs, outputs, raw, in_sizes[0] if raw else 0,
                             out_sizes[0] if raw else 0)
        if runner is not None:
            f.device, f.runner = f"cuda:{ordinal}", runner
        f.pool = pool
        f.costs_kw = costs_kw
        f.native = native is not None
        f.info = describe_.FunctionInfo(
            func_id=func_id, name=name, version=cfg.version, raw=raw, inputs=tuple(inputs), outputs=tuple(outputs),
            max_request=in_sizes[0] if raw else None, max_response=out_sizes[0] if raw else None,
            max_batch=cfg.max_batch or _server.FUNCTION_DEFAULTS["max_batch"],
            executor=("asyncio:per-call" if per_call else "asyncio") if is_async
            else "inline" if pool is None else f"pool:{pool.threads}",  # a native function runs inline too
            priority=_server.FUNCTION_DEFAULTS["priority"] if cfg.priority is None else cfg.priority,
            device=f"cuda:{ordinal}" if ordinal >= 0 else "cpu")
        f.server_function = _server_function
        f.keys_kw = _server_function and self._keys is not None  # what it answers depends on the caller's key
        if not _server_function:
            self._registrations.append((fn, func_id, name, tuple(inputs), tuple(outputs), cfg))
        if n_classes:  # a Function per class: each has its own queues, so its own views
            f.class_bounds = cfg.bounds
            f.classes = [f] + [dataclasses.replace(f, classes=None, args_cache={}, calls=0, aux_class=k)
                               for k in range(1, n_classes)]
        self._funcs[func_id] = f

    def rebuild(self, **settings: Any) -> "Server":
        """A new Server with this one's settings updated by `settings` (those not None: host,
        port, wait, allow, reuse_port, ... as for Server()) and the same functions and stats
        sources; this one is closed first (its port is free again). Before start only. For
        `splitrpc serve MODULE:ATTR`, which applies the command line to the module's Server.
        A callback that kept a reference to this Server object still sees this one."""
        if self._state != "created":
            raise SplitRPCError(f"only a server not yet started can be rebuilt (this one is {self._state})")
        opts = {**self._init_kwargs, **{k: v for k, v in settings.items() if v is not None}}
        unknown = set(opts) - set(self._init_kwargs)
        if unknown:
            raise ValueError(f"not a Server setting: {', '.join(sorted(unknown))}")
        regs, sources, mets = list(self._registrations), dict(self._stats_sources), dict(self.stats_metrics)
        self.close()  # first: the new one may bind the same port
        new = type(self)(**opts)
        try:
            for fn, func_id, name, inputs, outputs, cfg in regs:
                new.add_function(fn, func_id, name, inputs, outputs, cfg)
            for k, src in sources.items():
                new.add_stats_source(k, src, metrics=mets.get(k))
        except BaseException:
            new.close()
            raise
        return new

    # ------------------------------------------------------------------ running

    def start(self) -> "Server":
        """Starts the engine and a background worker thread; returns at once."""
        self._start_engine()
        self._thread = threading.Thread(target=self._worker, name="splitrpc-worker", daemon=True)
        self._thread.start()
        return self

    def serve(self) -> None:
        """Runs the worker on this thread until stop() or KeyboardInterrupt."""
        self._start_engine()
        try:
            self._worker()
        finally:
            self.stop()

    def _add_server_functions(self) -> None:
        """Registers ping and describe (docs/PROTOCOL.md, Amendment 1) just before the start, when
        every function of the user's is known. Both run inline on the worker."""
        from splitrpc import __version__

        infos = [f.info for f in self._funcs.values() if not f.server_function]
        # with keys: version 5 (sessions), and 4 where its legacy mode is on
        protocols = ((_auth.VERSION, _auth.SESSIONS) if self._legacy_v4 else (_auth.SESSIONS,)) \
            if self._keys is not None else PROTOCOLS
        doc = describe_.encode_description(infos, max_message=self.max_message, software=f"splitrpc {__version__}",
                                           protocols=protocols)
        if len(doc) > min(describe_.MAX_REPLY, self.max_message):
            raise SplitRPCError(f"the description of {len(infos)} functions takes {len(doc)} bytes, over "
                                f"{min(describe_.MAX_REPLY, self.max_message)}")
        started = time.monotonic()
        # With keys, a key learns nothing of the functions it may not call (docs/security.md):
        # describe lists, and ping counts, only those of the caller's key in the table in use
        # (issue 52, finding 6). By key id, made again after a reload.
        seen: dict[int, tuple[list[describe_.FunctionInfo], bytes, str]] = {}
        seen_table: list[auth_.KeyTable | None] = [self._keys]

        every = infos, doc, describe_.digest(infos)

        def visible(key_id: int) -> tuple[list[describe_.FunctionInfo], bytes, str]:
            if not key_id:  # a server without keys
                return every
            if seen_table[0] is not self._keys:
                seen.clear()
                seen_table[0] = self._keys
            if key_id not in seen:
                allowed = self._key_function_ids(key_id)
                mine = infos if allowed is None else [f for f in infos if f.func_id in allowed]
                seen[key_id] = mine, describe_.encode_description(
                    mine, max_message=self.max_message, software=f"splitrpc {__version__}",
                    protocols=protocols), describe_.digest(mine)
            return seen[key_id]

        def answer(expect: bytes, reply: Callable[[int], bytes]) -> Callable[..., list[int | BadRequest]]:
            def fn(requests: list[memoryview], responses: list[memoryview],
                   keys: list[int] | None = None) -> list[int | BadRequest]:
                out: list[int | BadRequest] = []
                for i, (req, resp) in enumerate(zip(requests, responses)):
                    if bytes(req) != expect:
                        out.append(BadRequest(f"this server function takes the request {expect!r}"))
                        continue
                    body = reply(keys[i] if keys else 0)
                    resp[:len(body)] = body
                    out.append(len(body))
                return out
            return fn

        def ping(key_id: int) -> bytes:
            mine, _, dig = visible(key_id)
            return describe_.encode_ping(ready=self.ready(), state=self.state, functions=len(mine),
                                         uptime_s=time.monotonic() - started, pending=self.pending(), digest=dig)

        self.add_function(answer(describe_.DESCRIBE_REQUEST, lambda key_id: visible(key_id)[1]),
                          describe_.DESCRIBE_ID, "describe",
                          raw=True, max_request=64, max_response=len(doc), _server_function=True)
        self.add_function(answer(describe_.PING_REQUEST, ping), describe_.PING_ID, "ping", raw=True,
                          max_request=64, max_response=1024, _server_function=True)

    def _key_function_ids(self, key_id: int) -> frozenset[int] | None:
        """The ids of the functions key key_id of the table in use may call: None for all of
        them, none for a key not in it (taken out by a reload since its call came in)."""
        if self._keys is None:  # (server functions take keys= only with a table)
            return None
        try:
            key = self._keys.get(key_id)
        except KeyError:
            return frozenset()
        if key.functions is None:
            return None
        names = self._function_ids()
        return frozenset(f if isinstance(f, int) else names[f] for f in key.functions
                         if isinstance(f, int) or f in names)

    def _start_engine(self) -> None:
        with self._lock:
            if self._state != "created":
                raise SplitRPCError(f"server already {self._state}")
            if describe_.PING_ID not in self._funcs:
                self._add_server_functions()
            runners = [f.runner for f in self._funcs.values() if f.runner is not None]
            if self._policy is not None:
                _server.set_policy(self._native, self._policy, {f.func_id: f.name for f in self._funcs.values()})
            if self._keys is not None:  # before the engine runs: no datagram is ever taken unsigned
                _auth.set_keys(self._srv, auth_.native_table(self._keys, self._function_ids(), self._legacy_v4))
            try:
                if self._async_functions:
                    self._aio.start()
                for r in runners:
                    r.start()
                _server.start(self._srv)
            except BaseException:
                for r in runners:
                    r.stop()
                self._aio.stop()
                raise
            for p in self._pools():
                p.acquire()
            self._pools_held = True
            self._state = "running"

    def _function_ids(self) -> dict[str, int]:
        """Function name -> id, what a key file's function names mean."""
        return {f.name: f.func_id for f in self._funcs.values()}

    def reload_keys(self, keys: "auth_.KeyTable | str | os.PathLike[str] | None" = None) -> "auth_.KeyTable":
        """Replaces the key table (a KeyTable or a file; None: the file given before, read again)
        without a restart: the engine takes it in before the next datagram, the replay windows of
        keys kept going with them, so no call in flight is dropped (calls taken in are answered
        with the key they came with). A server made without keys cannot be given some while it
        serves. Returns the table now in use; raises KeyFileError (the old table stays) for a bad
        one."""
        if self._keys is None:
            raise SplitRPCError("this server was made without keys: give Server(keys=...) to authenticate calls")
        if keys is None:
            if not self._keys.source:
                raise SplitRPCError("the key table was given in Python: pass the new one")
            keys = self._keys.source
        table = keys if isinstance(keys, auth_.KeyTable) else auth_.KeyTable.load(keys)
        if table.max_senders != self._keys.max_senders and self._state != "created":
            raise KeyFileError(f"{table.source or 'the new key table'}: max_senders cannot change while serving "
                                     f"({self._keys.max_senders} -> {table.max_senders}): the replay windows stay")
        with self._lock:
            if self._state == "created":
                self._keys = table
                return table
            native = auth_.native_table(table, self._function_ids(), self._legacy_v4)  # a bad table raises here
            _auth.set_keys(self._srv, native)
            self._keys = table
        return table

    def _user_functions(self) -> list[_server.Function]:
        """The registered functions less the server's own (ping, describe)."""
        return [f for f in self._funcs.values() if not f.server_function]

    def functions(self) -> list[describe_.FunctionInfo]:
        """What describe answers: a splitrpc.describe.FunctionInfo per registered function."""
        return [f.info for f in self._user_functions()]

    def _funcs_and_classes(self) -> list[_server.Function]:
        """Every queue's Function: a function with aux classes counts once per class."""
        return [c for f in self._funcs.values() for c in (f.classes or [f])]

    def _pools(self) -> list[executor_.Executor]:
        """The distinct thread pools of the functions (a pool may serve several)."""
        return list({id(f.pool): f.pool for f in self._funcs.values() if f.pool is not None}.values())

    def _worker(self) -> None:
        self._worker_ident = threading.get_ident()
        self._worker_running = True
        try:
            _server.serve(self._srv, self._funcs, self._jobs)  # the per-batch loop, in the binding layer
        finally:
            self._worker_running = False

    # ------------------------------------------------------------------ health, drain

    @property
    def state(self) -> str:
        """"created", "running", "draining", "stopped" or "closed"."""
        return "draining" if self._state == "running" and self._draining else self._state

    def healthy(self) -> bool:
        """Alive: the engine runs and the worker loop is in it (draining included)."""
        return self._state == "running" and self._worker_running

    def ready(self) -> bool:
        """Ready for calls: healthy, not draining, every function registered (they are all
        registered before start) and at least one of them."""
        return self.healthy() and not self._draining and bool(self._user_functions())

    def pending(self) -> int:
        """Calls received and not yet answered (being reassembled, queued or running). Any
        thread (under the server's lock: close() cannot free the engine meanwhile)."""
        with self._lock:
            return _server.pending(self._srv) if self._srv is not None else 0

    def drain(self) -> None:
        """Begins a drain: ready() turns false and every new call is answered DRAINING
        (splitrpc.Draining); calls already received are run and answered. stop(grace=) drains
        and then stops."""
        with self._lock:
            if self._state != "running":
                raise SplitRPCError(f"cannot drain a server that is {self._state}")
            _server.drain(self._srv, True)  # first: state says "draining" only once new calls get DRAINING
            self._draining = True
        log.info("draining: %d calls pending", self.pending())

    def abort_drain(self) -> None:
        """Ends a drain that stop(grace=) is waiting for: it stops at once (a second SIGTERM)."""
        self._drain_abort.set()

    def stop(self, grace: float | None = None, linger: float = DRAIN_LINGER) -> int:
        """Stops the engine and the worker. grace (seconds): drain first (see drain()) and wait up
        to grace for every call received to be answered; without it, calls not yet answered are
        dropped. Returns the calls left unanswered (0: none lost).

        linger (seconds, with grace): once every call is answered, the port stays open and every
        new call is answered DRAINING until no datagram has come for `linger` seconds (or grace
        has passed, or abort_drain()): a client's calls still in flight, or held in its window,
        then get DRAINING (safe to send elsewhere), not silence. 0: stop as soon as none is pending."""
        left = 0
        if self._aio.on_loop_thread():  # it would wait for the loop's own task, on the loop's thread
            raise SplitRPCError("stop() from an async def function would wait for itself: call drain() there and "
                                "stop from another thread")
        if grace is not None and grace > 0 and self._state == "running":
            if threading.get_ident() == getattr(self, "_worker_ident", None) and self._worker_running:
                raise SplitRPCError("stop(grace=) from a callback would wait for its own batch: call drain() there "
                                    "and stop from another thread")
            if not linger >= 0:
                raise ValueError(f"linger must be >= 0 seconds, got {linger!r}")
            if not self._draining:
                self.drain()
            end = time.monotonic() + grace
            while ((left := self.pending()) and time.monotonic() < end and not self._drain_abort.is_set()
                   and self._state == "running"):  # another thread may stop it meanwhile
                time.sleep(0.005)
            if left:
                log.warning("drain: %d calls unanswered after %s", left,
                            "abort" if self._drain_abort.is_set() else f"{grace:g} s")
            else:
                self._linger(linger, end)
                left = self.pending() if self._state == "running" else 0
        elif self._state == "running":
            left = self.pending()
        with self._lock:
            if self._state == "running":
                _server.stop(self._srv)
                self._state = "stopped"
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()
            self._thread = None
        self._aio.cancel_all()  # async functions still running: their batches are not waited for
        self._jobs.wait_idle()  # no other thread may still use the queues when they are freed
        self._aio.stop()
        with self._lock:
            held, self._pools_held = self._pools_held, False
        if held:
            for p in self._pools():
                p.release()
        first: Exception | None = None
        for f in self._funcs.values():  # no copy or kernel may still target the queues when they are freed
            if f.runner is not None:
                try:
                    f.runner.stop()
                except Exception as e:  # noqa: BLE001 - each runner is stopped; the first error is raised
                    # A wait that gave up (a stream, the O2 kernel): its work may still land in the
                    # queues, so close() must not free them (see close()).
                    self._poisoned = self._poisoned or f"function {f.name}: {e}"
                    first = first or e
        if first is not None:
            raise first
        return left

    def _linger(self, linger: float, end: float) -> None:
        """stop(grace=)'s linger: draining, until no datagram came for `linger` seconds, `end`
        (monotonic) passed, the drain was aborted or the server stopped."""
        def received() -> int:  # the engine's own counter, not the whole stats() (functions, executors, ...)
            return cast(int, _server.read_stats(self._srv)["rx_datagrams"])  # a cffi uint64_t field: an int

        last_rx, quiet_since = received(), time.monotonic()
        while self._state == "running" and not self._drain_abort.is_set():
            now = time.monotonic()
            if now - quiet_since >= linger or now >= end:
                return
            time.sleep(min(LINGER_POLL, linger))
            rx = received()
            if rx != last_rx:
                last_rx, quiet_since = rx, time.monotonic()

    def close(self) -> None:
        """Stops and frees the native server; the port is released. Where a device function's stop
        gave up waiting for the GPU (a hung kernel or stream: GPUError from stop()), the native
        server and its queues are left allocated, on purpose and said in the log: work still
        queued may write to them."""
        try:
            self.stop()
        except Exception:
            if self._poisoned is None:
                raise  # nothing is freed: the server is as it was
            with self._lock:
                if self._srv is not None:
                    log.error("not freeing the server's queues: %s; the GPU may still write to them, so they are "
                              "left allocated (restart the process to get that memory back)", self._poisoned)
                    self._srv = None
                    self._state = "closed"
            raise
        with self._lock:
            if self._srv is not None:
                _server.destroy(self._srv)
                self._srv = None
                self._state = "closed"

    def __enter__(self) -> "Server":
        if self._state == "created":
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------ counters

    def add_stats_source(self, key: str, source: Callable[[], dict[str, Any]],
                         metrics: Callable[[Any, str], Any] | None = None) -> None:
        """Adds source()'s dict to stats() under key (a scheduler layered on the functions, such as
        splitrpc.services.colocation's co-location, reports there). metrics(its dict, prefix), where
        given, yields its Prometheus metric families (prometheus_client's) for /metrics
        (splitrpc.metrics names no source's metrics: each brings its own). source runs on whichever
        thread calls stats(), metrics on the scraping thread: each takes its own locks."""
        if not callable(source) or (metrics is not None and not callable(metrics)):
            raise ValueError(f"source and metrics must be callable, got {source!r}, {metrics!r}")
        reserved = {"functions", "devices", "graph_fallback", "by_function", "dpdk", *_server.read_stats(self._srv)}
        if key in reserved:
            raise ValueError(f"stats key {key!r} is the engine's")
        self._stats_sources[key] = source
        if metrics is not None:
            self.stats_metrics[key] = metrics

    def stats(self) -> dict[str, Any]:
        """Counters of the engine: datagrams, calls, batches, drops by reason, errors by code,
        calls queued now and the queue-delay histogram of the calls run.

        Counters of what was sent (replies, errors by code, tx_*) are bumped just after the send,
        and a batch leaves in_flight just after its replies: a client may hold an answer a moment
        before stats() counts it."""
        return {
            **_server.read_stats(self._srv),
            # calls run by each function (a native function's, which Python never sees, as the C core counts them)
            "functions": {f.name: _server.read_func_stats(self._srv, f.func_id)["batch_calls"] if f.native
                          else sum(c.calls for c in (f.classes or [f])) for f in self._user_functions()},
            "devices": {f.name: f.device for f in self._user_functions()},
            # functions of orchestration="graph" whose callback could not be captured (run as O1): why
            "graph_fallback": {f.name: f.runner.graph_fallback for f in self._user_functions()
                               if f.runner is not None and f.runner.graph_fallback is not None},
            # the engine's counters of each function (its aux classes summed): calls, errors by
            # code (BUSY and DRAINING answers included), batch sizes, queue delay, calls queued
            "by_function": {f.name: _server.read_func_stats(self._srv, f.func_id) for f in self._user_functions()},
            # each function's executor (ThreadPool, LanePool, ...): batches queued, running, run, busy time
            "executors": {f.name: f.pool.load() for f in self._user_functions() if f.pool is not None},
            **({"dpdk": self._dpdk_stats()} if self.transport == "dpdk" else {}),
            **{k: src() for k, src in self._stats_sources.items()},
        }

    def _dpdk_stats(self) -> dict[str, Any]:
        """The DPDK port's counters: frames, drops by reason, ARP replies, failed sends; whether the
        port splits frames in hardware, and where the payloads then land ("none": software split,
        "dpdk", "host" or "gpu": the payload pool's memory)."""
        return _server.read_dpdk_stats(self._srv)
