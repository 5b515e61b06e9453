"""server.py: the Python server API: register functions, run the batch worker, read counters.

The native engine thread receives, reassembles and queues requests; this module's worker
thread takes whole batches (one contiguous (B, ...) view per Tensor Queue, no copy), runs the
callback once per batch and hands the batch back, after which the engine's code sends the
replies. Python never sees a datagram.
"""
from __future__ import annotations

import ipaddress
import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from . import dpdk, gpu
from ._native import ESHUTDOWN, ETIMEDOUT, check, ffi, lib
from .errors import SplitRPCError
from .spec import TensorSpec

log = logging.getLogger("splitrpc.server")

WAIT_MODES = {"poll": lib.SRPC_WAIT_POLL, "block": lib.SRPC_WAIT_BLOCK, "adaptive": lib.SRPC_WAIT_ADAPTIVE}

_NO_POS = (1 << 64) - 1  # srpc_batch_t.pos when a function's address period is too long to cache
_ARGS_CACHE_LIMIT = 8192
_WAIT_US = 100_000  # the worker returns to Python this often when idle (Ctrl-C, stop)

_DROP_NAMES = [
    "short", "bad_header", "bad_segment", "truncated", "not_request", "inconsistent",
    "reassembly_timeout", "memory_cap", "table_full", "duplicate", "rejected", "tx_failed", "not_allowed",
    "bad_check", "client_memory_cap",
]
_ERROR_NAMES = {1: "UNKNOWN_FUNCTION", 2: "BAD_REQUEST", 3: "BUSY", 4: "DEADLINE", 5: "INTERNAL", 6: "TOO_LARGE"}


@dataclass
class _Function:
    func_id: int
    name: str
    callback: Callable
    inputs: list
    outputs: list
    raw: bool
    max_request: int
    max_response: int
    device: str = "cpu"               # where its Tensor Queues are: "cpu" or "cuda:N"
    runner: gpu.DeviceRunner | None = None  # set for a function on a GPU
    calls: int = field(default=0)
    # The callback's arguments by (ring position, B): a ring revisits the same positions, and
    # building the numpy views costs about a microsecond each, finding them a tenth of that.
    args_cache: dict = field(default_factory=dict)

    def run(self, b) -> None:
        count = b.count
        if self.raw:
            self._run_raw(b, count)
            return
        self.callback(*self.args(b, count))

    def args(self, b, count: int) -> list:
        """The callback's arrays for a batch: numpy views of the host elements, or CuPy views
        of the device elements for a GPU function; cached by (ring position, B)."""
        key = (b.pos, count)
        args = self.args_cache.get(key)
        if args is None:
            if self.runner is not None:
                args = self.runner.views(b, count)
            else:
                bin_, bout = getattr(b, "in"), b.out
                args = [_view(bin_[k], spec, count) for k, spec in enumerate(self.inputs)]
                args += [_view(bout[k], spec, count) for k, spec in enumerate(self.outputs)]
            if key[0] != _NO_POS and len(self.args_cache) < _ARGS_CACHE_LIMIT:
                self.args_cache[key] = args
        return args

    def _run_raw(self, b, count: int) -> None:
        reqs = [ffi.buffer(getattr(b, "in")[0] + i * self.max_request, b.in_len[i]) for i in range(count)]
        resps = [ffi.buffer(b.out[0] + i * self.max_response, self.max_response) for i in range(count)]
        lengths = self.callback([memoryview(r) for r in reqs], [memoryview(r) for r in resps])
        lengths = list(lengths) if lengths is not None else []
        if len(lengths) != count:
            raise SplitRPCError(f"raw function {self.name!r} returned {len(lengths)} lengths for {count} calls")
        for i, n in enumerate(lengths):
            n = int(n)
            if not 0 <= n <= self.max_response:
                raise SplitRPCError(f"raw function {self.name!r}: reply length {n} outside 0..{self.max_response}")
            b.out_len[i] = n


def _error_text(exc: BaseException) -> bytes:
    """The exception as an ERROR datagram's text: UTF-8, at most 256 bytes, cut between characters."""
    text = f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")[:256]
    return text.decode("utf-8", "ignore").encode("utf-8")


def _view(ptr, spec: TensorSpec, count: int) -> np.ndarray:
    """A (count, *shape) array over `count` contiguous Tensor Queue elements (no copy)."""
    buf = ffi.buffer(ptr, count * spec.nbytes)
    return np.frombuffer(buf, dtype=spec.np_dtype).reshape((count, *spec.shape))



def _payload_device(where: str) -> int:
    """dpdk_payload: "auto" -> SRPC_DPDK_PAYLOAD_AUTO, "host" -> -1, "cuda:N" -> N."""
    if where == "auto":
        return -2  # SRPC_DPDK_PAYLOAD_AUTO
    if where == "host":
        return -1
    if isinstance(where, str) and where.startswith("cuda:") and where[5:].isdigit() and int(where[5:]) < 64:
        return int(where[5:])
    raise ValueError(f"dpdk_payload must be 'auto', 'host' or 'cuda:N', got {where!r}")

class Server:
    """A splitrpc server bound to one UDP port.

    Register functions with :meth:`function`, then :meth:`serve` (blocks) or :meth:`start`
    (runs the worker on a background thread) and :meth:`stop`. Usable as a context manager.

    wait: "poll" (the worker busy-polls the socket while it waits for a batch: lowest
    latency, one core), "block" (it sleeps in poll()), "adaptive" (polls for spin_us after
    each batch, then sleeps). rx_takeover_us: a callback running longer than this lets the
    engine thread take over receiving. Sizes are bytes, times seconds unless named _us.

    allow: the client networks served ("10.0.0.0/8,127.0.0.1" or a list of such; IPv4 and IPv6
    prefixes, at most 32); datagrams from elsewhere are dropped unread and counted as
    drops["not_allowed"]. None: any source (the default host, 127.0.0.1, already keeps the
    server to this machine).

    Partial messages (segments still missing) hold at most reassembly_memory bytes in all and
    reassembly_memory_per_client for the clients of one IP address (any port); a new message
    over either is dropped (drops["memory_cap"], drops["client_memory_cap"]) and its client's
    retransmission tries again later.

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
        host: str = "127.0.0.1",
        port: int = 9230,
        *,
        wait: str = "adaptive",
        spin_us: int = 200,
        rx_takeover_us: int = 1000,
        segment_size: int = 1450,
        segment_size_loopback: int = 65000,
        max_message: int = 1 << 20,
        reassembly_timeout: float = 0.5,
        reassembly_memory: int = 256 << 20,
        reassembly_memory_per_client: int = 64 << 20,
        reply_cache_ttl: float = 10.0,
        reply_cache_bytes: int = 64 << 20,
        max_calls: int = 65536,
        socket_buffer: int = 32 << 20,
        allow: str | Sequence[str] | None = None,
        transport: str = "udp",
        dpdk_args: Sequence[str] = (),
        dpdk_port: str | None = None,
        dpdk_mtu: int = 1500,
        dpdk_payload: str = "auto",
        dpdk_emulate_split: bool = False,
    ):
        if wait not in WAIT_MODES:
            raise ValueError(f"wait must be one of {sorted(WAIT_MODES)}, got {wait!r}")
        if transport not in ("udp", "dpdk"):
            raise ValueError(f"transport must be 'udp' or 'dpdk', got {transport!r}")
        if transport == "dpdk":
            if not dpdk_port:
                raise ValueError("transport='dpdk' needs dpdk_port, the DPDK name of the port to serve on "
                                 "(e.g. 'net_af_packet0' for --vdev=net_af_packet0,iface=eth0)")
            if not 0 < int(port) < 65536:
                raise ValueError(f"transport='dpdk' needs a UDP port from 1 to 65535, got {port}")
            payload_gpu = _payload_device(dpdk_payload)
            dpdk.init(dpdk_args)  # once per process; raises DPDKError / DPDKUnavailable
        cfg = ffi.new("srpc_server_config_t *")
        lib.srpc_server_config_init(cfg)
        self._host = ffi.new("char[]", host.encode())
        cfg.host = self._host
        cfg.port = int(port)
        cfg.wait_mode = WAIT_MODES[wait]
        cfg.spin_us = int(spin_us)
        cfg.rx_takeover_us = int(rx_takeover_us)
        cfg.seg_size = int(segment_size)
        cfg.seg_size_loopback = int(segment_size_loopback)
        cfg.max_message = int(max_message)
        cfg.reasm_timeout_us = int(reassembly_timeout * 1e6)
        cfg.reasm_mem_cap = int(reassembly_memory)
        cfg.reasm_mem_cap_client = int(reassembly_memory_per_client)
        cfg.reply_cache_us = int(reply_cache_ttl * 1e6)
        cfg.reply_cache_bytes = int(reply_cache_bytes)
        cfg.max_calls = int(max_calls)
        cfg.sock_buf_bytes = int(socket_buffer)
        if allow:
            text = allow if isinstance(allow, str) else ",".join(allow)
            nets = [n for n in text.replace(",", " ").split() if n]
            if len(nets) > 32:
                raise ValueError(f"allow: at most 32 networks, got {len(nets)}")
            for n in nets:
                try:
                    ipaddress.ip_network(n, strict=False)
                except ValueError as e:
                    raise ValueError(f"allow: {n!r} is not an IPv4 or IPv6 network ({e})") from None
            self._allow = ffi.new("char[]", text.encode())
            cfg.allow = self._allow
        if transport == "dpdk":
            self._dpdk_port = ffi.new("char[]", dpdk_port.encode())
            cfg.dpdk_dev = self._dpdk_port
            cfg.dpdk_mtu = int(dpdk_mtu)
            cfg.dpdk_payload_gpu = payload_gpu
            cfg.dpdk_emulate_split = 1 if dpdk_emulate_split else 0
        out = ffi.new("srpc_server_t **")
        check(lib.srpc_server_create(cfg, out), f"cannot create a server on {host}:{port}")
        self._srv = out[0]
        self.host = host
        self.transport = transport
        self._funcs: dict[int, _Function] = {}
        self._state = "created"
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ registration

    @property
    def port(self) -> int:
        return check(lib.srpc_server_port(self._srv), "srpc_server_port")

    def function(
        self,
        func_id: int,
        name: str | None = None,
        inputs: Sequence[TensorSpec] = (),
        outputs: Sequence[TensorSpec] = (),
        *,
        max_batch: int = 8,
        max_delay_us: int = 0,
        capacity: int = 256,
        raw: bool = False,
        max_request: int = 1 << 20,
        max_response: int = 1 << 20,
        device: str = "cpu",
        orchestration: str = "o1",
        deadline: float | None = None,
    ) -> Callable:
        """Decorator registering `fn` under func_id.

        Tensor functions get ``fn(*inputs, *outputs)``, each a (B, *shape) numpy view of B
        consecutive Tensor Queue elements, and write their results into the outputs.
        Raw functions (``raw=True``) get ``fn(requests, responses)``: lists of B memoryviews
        (requests of their own length, responses of max_response bytes) and return the B
        reply lengths. The views are valid only during the call.

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
        """

        def register(fn: Callable) -> Callable:
            self.add_function(fn, func_id, name, inputs, outputs, max_batch=max_batch,
                              max_delay_us=max_delay_us, capacity=capacity, raw=raw,
                              max_request=max_request, max_response=max_response, device=device,
                              orchestration=orchestration, deadline=deadline)
            return fn

        return register

    def add_function(self, fn, func_id, name=None, inputs=(), outputs=(), *, max_batch=8, max_delay_us=0,
                     capacity=256, raw=False, max_request=1 << 20, max_response=1 << 20, device="cpu",
                     orchestration="o1", deadline=None) -> None:
        if self._state != "created":
            raise SplitRPCError("functions must be registered before the server starts")
        if not 0 <= func_id <= 0xFFFF:
            raise ValueError(f"func_id must fit in 16 bits, got {func_id}")
        if func_id in self._funcs:
            raise ValueError(f"func_id {func_id} is already registered ({self._funcs[func_id].name})")
        if max_batch < 1 or capacity < 1:
            raise ValueError("max_batch and capacity must be at least 1")
        if deadline is not None and not 0 < deadline <= 4000:
            raise ValueError(f"deadline must be a positive number of seconds (at most 4000), got {deadline!r}")
        inputs, outputs = list(inputs), list(outputs)
        name = name or getattr(fn, "__name__", str(func_id))
        ordinal = gpu.parse_device(device)
        if orchestration not in gpu.ORCHESTRATIONS:
            raise ValueError(f"orchestration must be one of {gpu.ORCHESTRATIONS}, got {orchestration!r}")
        if ordinal >= 0 and raw:
            raise ValueError("a raw function cannot run on a GPU: declare its tensors instead")
        if orchestration == "o2":
            gpu.check_o2(fn, inputs, outputs, raw)
        if ordinal >= 0:
            try:
                gpu.probe(ordinal)
            except gpu.GPUUnavailable as exc:
                log.warning("function %s: %s; serving it from host memory on the CPU", name, exc)
                ordinal = -1
        if ordinal >= 0:
            gpu.import_cupy()  # a GPU without CuPy is a setup error, not a reason to fall back
        if raw:
            if inputs or outputs:
                raise ValueError("a raw function takes max_request/max_response, not tensor specs")
            in_sizes, out_sizes = [int(max_request)], [int(max_response)]
        else:
            if not inputs or not outputs:
                raise ValueError("a tensor function needs at least one input and one output TensorSpec")
            in_sizes, out_sizes = [s.nbytes for s in inputs], [s.nbytes for s in outputs]
        fc = ffi.new("srpc_func_config_t *")
        c_in = ffi.new("uint32_t[]", in_sizes)
        c_out = ffi.new("uint32_t[]", out_sizes)
        fc.func_id, fc.raw = func_id, int(raw)
        fc.n_in, fc.n_out = len(in_sizes), len(out_sizes)
        fc.in_sizes, fc.out_sizes = c_in, c_out
        fc.capacity, fc.max_batch, fc.max_delay_us = capacity, max_batch, max_delay_us
        fc.on_gpu, fc.gpu_device = int(ordinal >= 0), max(ordinal, 0)
        fc.deadline_us = max(int(deadline * 1e6), 1) if deadline else 0
        rc = lib.srpc_server_add_function(self._srv, fc)
        if rc < 0 and ordinal >= 0:
            raise gpu.GPUError(f"cannot register function {func_id} on cuda:{ordinal}: {gpu.last_error()}")
        check(rc, f"cannot register function {func_id}")
        f = _Function(func_id, name, fn, inputs, outputs, raw, int(max_request), int(max_response))
        if ordinal >= 0:
            f.device = f"cuda:{ordinal}"
            f.runner = gpu.DeviceRunner(ordinal, inputs, outputs, fn, orchestration)
        self._funcs[func_id] = f

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

    def _start_engine(self) -> None:
        with self._lock:
            if self._state != "created":
                raise SplitRPCError(f"server already {self._state}")
            runners = [f.runner for f in self._funcs.values() if f.runner is not None]
            try:
                for r in runners:
                    r.start()
                check(lib.srpc_server_start(self._srv), "cannot start the engine")
            except BaseException:
                for r in runners:
                    r.stop()
                raise
            self._state = "running"

    def _worker(self) -> None:
        b = ffi.new("srpc_batch_t *")
        srv, funcs, null = self._srv, self._funcs, ffi.NULL
        next_batch, complete_next = lib.srpc_server_next_batch, lib.srpc_server_complete_next
        rc = next_batch(srv, b, _WAIT_US)
        while True:  # once per batch: keep this loop lean
            if rc:
                if rc == -ETIMEDOUT:
                    rc = next_batch(srv, b, _WAIT_US)
                    continue
                if rc == -ESHUTDOWN:
                    return
                check(rc, "srpc_server_complete_next")
            fn = funcs[b.func_id]
            try:
                if fn.runner is not None:
                    rc = self._run_gpu(fn, b)
                else:
                    fn.run(b)
                    fn.calls += b.count
                    rc = complete_next(srv, b, 0, null, _WAIT_US)
            except Exception as exc:  # the calls of this batch get INTERNAL; serving goes on
                log.warning("function %s raised %s: %s", fn.name, type(exc).__name__, exc)
                rc = complete_next(srv, b, lib.SRPC_E_INTERNAL, ffi.new("char[]", _error_text(exc)), _WAIT_US)

    def _run_gpu(self, fn: _Function, b) -> int:
        """One batch of a GPU function: queued on its stream and handed back in flight; returns
        next_batch's code. Raises while the batch is still open, so the caller completes it."""
        count = b.count
        runner = fn.runner
        runner.run(self._srv, b, None if runner.o2 is not None else fn.args(b, count))
        fn.calls += count
        return lib.srpc_server_next_batch(self._srv, b, _WAIT_US)

    def stop(self) -> None:
        """Stops the engine and the worker; calls not yet answered are dropped."""
        with self._lock:
            if self._state == "running":
                lib.srpc_server_stop(self._srv)
                self._state = "stopped"
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()
            self._thread = None
        for f in self._funcs.values():  # no copy or kernel may still target the queues when they are freed
            if f.runner is not None:
                f.runner.stop()

    def close(self) -> None:
        """Stops and frees the native server; the port is released."""
        self.stop()
        with self._lock:
            if self._srv is not None:
                lib.srpc_server_destroy(self._srv)
                self._srv = None
                self._state = "closed"

    def __enter__(self) -> "Server":
        if self._state == "created":
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------ counters

    def stats(self) -> dict:
        """Counters of the engine: datagrams, calls, batches, drops by reason, errors by code,
        calls queued now and the queue-delay histogram of the calls run."""
        st = ffi.new("srpc_server_stats_t *")
        check(lib.srpc_server_stats(self._srv, st), "srpc_server_stats")
        hist = {i: int(st.batch_hist[i]) for i in range(1, lib.SRPC_BATCH_HIST) if st.batch_hist[i]}
        qd = [int(st.queue_delay_hist[i]) for i in range(lib.SRPC_QDELAY_HIST)]
        return {
            "rx_datagrams": st.rx_datagrams, "rx_bytes": st.rx_bytes,
            "tx_datagrams": st.tx_datagrams, "tx_bytes": st.tx_bytes, "rx_in_place": st.rx_in_place,
            "unplaced": st.unplaced,
            "calls": st.calls, "replies": st.replies, "batches": st.batches,
            "mean_batch": (st.batch_calls / st.batches) if st.batches else 0.0,
            "batch_sizes": hist,
            "drops": {name: int(st.drops[i]) for i, name in enumerate(_DROP_NAMES)},
            "errors": {name: int(st.errors[c]) for c, name in _ERROR_NAMES.items()},
            "cache_hits": st.cache_hits,
            "partial_messages": st.partial_msgs, "reassembly_bytes": st.reasm_bytes,
            "cached_replies": st.cached_replies, "in_flight": st.inflight, "queued": st.queued,
            # calls run, by how long they were queued (RX_COMPLETE to the start of their batch):
            # bucket i counts delays of at most le_us[i] (and more than le_us[i-1]); the last, longer
            "queue_delay": {"le_us": [1 << i for i in range(lib.SRPC_QDELAY_HIST - 1)] + [None], "counts": qd,
                            "count": sum(qd), "sum_us": st.queue_delay_sum_ns / 1e3},
            "socket_buffers": {"rcvbuf": st.rcvbuf, "sndbuf": st.sndbuf},
            "functions": {f.name: f.calls for f in self._funcs.values()},
            "devices": {f.name: f.device for f in self._funcs.values()},
            **({"dpdk": self._dpdk_stats()} if self.transport == "dpdk" else {}),
        }

    def _dpdk_stats(self) -> dict:
        """The DPDK port's counters: frames, drops by reason, ARP replies, failed sends; whether the
        port splits frames in hardware, and where the payloads then land ("none": software split,
        "dpdk", "host" or "gpu": the payload pool's memory)."""
        st = ffi.new("srpc_dpdk_stats_t *")
        check(lib.srpc_server_dpdk_stats(self._srv, st), "srpc_server_dpdk_stats")
        drops = {}
        for i in range(1, lib.SRPC_DPDK_DROP_SLOTS):
            name = lib.srpc_dpdk_drop_name(i)
            if name == ffi.NULL:
                break
            drops[ffi.string(name).decode()] = int(st.drops[i])
        return {"rx_frames": st.rx_frames, "tx_frames": st.tx_frames, "drops": drops, "rx_too_big": st.rx_too_big,
                "tx_failed": st.tx_failed, "no_neighbour": st.no_neighbour, "arp_replies": st.arp_replies,
                "rx_buffer_split": bool(st.rx_buffer_split), "rx_split_emulated": bool(st.rx_split_emulated),
                "payload_pool": ffi.string(lib.srpc_dpdk_payload_pool_name(st.payload_pool)).decode(),
                "rx_device_payloads": st.rx_device_payloads, "rx_device_to_host": st.rx_device_to_host}
