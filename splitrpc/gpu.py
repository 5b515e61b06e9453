"""gpu.py: the GPU side of a function: device parsing, CuPy views of device Tensor Queue elements, the per-function stream, CUDA-graph replay.

CuPy is imported only when a function is registered on a GPU, so the package imports and
serves on the CPU without it. Everything here runs on the server's worker thread. The native
calls are in splitrpc._native.gpu.
"""
from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

from splitrpc._native import gpu as _gpu
from splitrpc._native import server as _server
from splitrpc.errors import GPUError as GPUError  # noqa: F401 - public here as splitrpc.gpu.GPUError
from splitrpc.errors import GPUUnavailable as GPUUnavailable

if TYPE_CHECKING:
    from splitrpc.spec import TensorSpec

log = logging.getLogger("splitrpc.gpu")

ORCHESTRATIONS = ("o1", "graph", "o2")
# O2 runs a persistent kernel compiled into the library, named by the callback's `o2_kernel`
# attribute; these are the ones there are.
O2_KERNELS = ("vecadd",)


def check_o2(callback: Callable[..., Any], inputs: list[TensorSpec], outputs: list[TensorSpec], raw: bool) -> None:
    """Raises ValueError unless a function can use orchestration="o2": a callback naming a
    compiled persistent kernel, and one float32 input and one float32 output of equal size."""
    kernel = getattr(callback, "o2_kernel", None)
    if kernel not in O2_KERNELS:
        raise ValueError(f"orchestration='o2' runs a persistent kernel compiled into splitrpc; the callback "
                         f"must name one of {O2_KERNELS} in its o2_kernel attribute (got {kernel!r}), "
                         "as splitrpc.services.builtin.vecadd does")
    if raw or len(inputs) != 1 or len(outputs) != 1:
        raise ValueError("orchestration='o2' takes exactly one input and one output tensor")
    i, o = inputs[0], outputs[0]
    if i.np_dtype.str != "<f4" or o.np_dtype.str != "<f4" or i.nbytes != o.nbytes:
        raise ValueError(f"orchestration='o2' (vecadd) needs float32 input and output of the same size, got "
                         f"{i.np_dtype} {i.shape} -> {o.np_dtype} {o.shape}")


def parse_device(device: str) -> int:
    """'cpu' -> -1, 'cuda' -> 0, 'cuda:N' -> N; anything else raises ValueError."""
    if device == "cpu":
        return -1
    m = re.fullmatch(r"cuda(?::(\d+))?", device)
    if not m:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return int(m.group(1) or 0)


def last_error() -> str:
    """Why the last GPU call of this thread failed ("" when none did)."""
    return _gpu.last_error()


def probe(ordinal: int) -> None:
    """Raises GPUUnavailable (with the driver's reason) unless device `ordinal` can be used."""
    if not _gpu.init(ordinal):
        raise GPUUnavailable(f"cuda:{ordinal} is not usable: {last_error() or 'no CUDA driver'}")


def available(ordinal: int = 0) -> bool:
    """True when the CUDA driver loads and device `ordinal` exists."""
    return _gpu.init(ordinal)


def device_name(ordinal: int = 0) -> str:
    return _gpu.device_name(ordinal)


def import_cupy() -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise ImportError("a function on a CUDA device needs CuPy: pip install 'splitrpc[gpu]' "
                          f"(or the cupy-cudaXXx wheel matching your CUDA driver). Cause: {exc}") from exc
    return cupy


def _refused_by_capture(e: BaseException) -> bool:
    """Whether an error raised while capturing a callback into a CUDA graph says the capture itself
    is refused (so the callback runs as O1 from then on), not that the callback is wrong: a
    library's NotImplementedError (CuPy's for cuBLAS, cuSOLVER, cuRAND during capture), or the
    driver's capture errors (cudaErrorStreamCapture*)."""
    text = str(e).lower()
    return isinstance(e, NotImplementedError) or "streamcapture" in text or "stream is capturing" in text


class DeviceRunner:
    """Runs one GPU function's batches: requests to the device TQ, the callback on the
    function's stream with CuPy views of the elements, then the outputs back and the done word,
    all stream-ordered; the worker never waits for the GPU. With O2 the persistent kernel
    replaces the callback and writes the outputs and the done word itself."""

    def __init__(self, ordinal: int, inputs: list[TensorSpec], outputs: list[TensorSpec], callback: Callable[..., Any],
                 orchestration: str) -> None:
        if orchestration not in ORCHESTRATIONS:
            raise ValueError(f"orchestration must be one of {ORCHESTRATIONS}, got {orchestration!r}")
        self.cupy = import_cupy()
        self.ordinal = ordinal
        self.inputs, self.outputs = inputs, outputs
        self.callback = callback
        self.orchestration = orchestration
        self.device = self.cupy.cuda.Device(ordinal)
        with self.device:
            self.stream = self.cupy.cuda.Stream(non_blocking=True)
        self.graphs: dict[int, tuple[Any, list[Any]]] = {}  # B -> (graph, static inputs, static outputs)
        # Why the callback could not be captured into a CUDA graph (it is then run as O1), or None;
        # e.g. CuPy refuses every cuBLAS call during stream capture (cupy/cupy#6290).
        self.graph_fallback: str | None = None
        self.o2: Any = None     # srpc_o2_t * while the O2 kernel runs
        self.o2_floats = inputs[0].nbytes // 4 if orchestration == "o2" else 0

    def start(self) -> None:
        """Launches the O2 kernel (other orchestrations: nothing to do). Call once every
        queue exists: while it runs, whatever waits for the whole device waits for ever."""
        if self.orchestration != "o2" or self.o2 is not None:
            return
        self.o2 = _gpu.o2_start(self.ordinal, self.o2_floats)

    def stop(self) -> None:
        """Waits for the stream (a deadline: GPUError naming the wait, not a hang), then ends the
        O2 kernel once it has served every batch (a deadline too). After a GPUError here, work may
        still land in the function's queues: the server must not free them (Server.close)."""
        _gpu.stream_sync(self.stream.ptr)
        if self.o2 is not None:
            o2, self.o2 = self.o2, None
            _gpu.o2_stop(o2)

    def _view(self, addr: int, spec: TensorSpec, count: int) -> Any:
        cp = self.cupy
        nbytes = count * spec.nbytes
        mem = cp.cuda.UnownedMemory(addr, nbytes, self, self.ordinal)
        return cp.ndarray((count, *spec.shape), dtype=spec.np_dtype, memptr=cp.cuda.MemoryPointer(mem, 0))

    def views(self, b: Any, count: int) -> list[Any]:
        """CuPy views of the batch's device TQ elements, inputs then outputs (no copy)."""
        din, dout = _gpu.device_pointers(b, len(self.inputs), len(self.outputs))
        args = [self._view(din[k], s, count) for k, s in enumerate(self.inputs)]
        return args + [self._view(dout[k], s, count) for k, s in enumerate(self.outputs)]

    def run(self, srv: Any, b: Any, args: Sequence[Any] | None) -> None:
        """Queues the batch's work on the stream and hands it back in flight (args: views(),
        unused with O2). Raises while the batch is still open, so the caller completes it."""
        stream = self.stream.ptr
        _gpu.stage_in(srv, b, stream)
        if self.o2 is not None:
            _gpu.submit_o2(srv, b, self.o2, stream)
            return
        args = cast("Sequence[Any]", args)  # None only with O2 (returned above): the caller's views() otherwise
        with self.device, self.stream:
            if self.orchestration != "graph" or not self._replay(args, b.count):
                r = self.callback(*args)
                if r is not None:  # some calls fail alone
                    _server.fail_calls(srv, b, b.count, r)
        _gpu.submit(srv, b, stream)

    def _replay(self, args: Sequence[Any], count: int) -> bool:
        """O1 with a CUDA graph per batch size: the callback is captured once on static
        buffers; each batch copies its elements in, replays the graph and copies the outputs
        back (device-to-device, on the same stream). False, having done nothing, when the
        callback cannot be captured (graph_fallback says why; the caller runs it as O1)."""
        if self.graph_fallback is not None:
            return False
        cp = self.cupy
        n_in = len(self.inputs)
        entry = self.graphs.get(count)
        if entry is None:
            static = [cp.empty_like(a) for a in args]
            for s, a in zip(static[:n_in], args[:n_in]):
                s[...] = a
            self.callback(*static)  # warm-up outside the capture (lazy allocations, plans)
            self.stream.begin_capture()
            try:
                self.callback(*static)
            except Exception as e:
                try:
                    self.stream.end_capture()  # the partial graph is dropped; the stream captures no more
                except Exception:  # noqa: BLE001 - a capture the driver invalidated ends with an error
                    pass
                if not _refused_by_capture(e):
                    raise  # the callback's own error: this batch fails, the next tries the capture again
                self.graph_fallback = f"{type(e).__name__}: {e}"
                log.warning("%s: a CUDA graph of the callback cannot be captured (%s): it runs as O1, a launch "
                            "per batch (server.stats()['graph_fallback'])",
                            getattr(self.callback, "__name__", "a function"), self.graph_fallback)
                return False
            graph = self.stream.end_capture()
            entry = self.graphs[count] = (graph, static)
        graph, static = entry
        for s, a in zip(static[:n_in], args[:n_in]):
            s[...] = a
        graph.launch(self.stream)
        for a, s in zip(args[n_in:], static[n_in:]):
            a[...] = s
        return True



def device_info(ordinal: int = 0) -> dict[str, Any]:
    """What device `ordinal` offers: name, driver_version, cc_major/minor, multiprocessors,
    total_memory, vmm and granularity, map_host_memory, unified_addressing, host_register,
    stream_memops, memops_v2, gpudirect_rdma, PCI address (-1: the driver cannot say)."""
    return _gpu.device_info(ordinal)


def mem_info(ordinal: int = 0) -> tuple[int, int]:
    """(free, total) bytes of device `ordinal`'s memory now."""
    return _gpu.mem_info(ordinal)


def kernel_archs() -> str:
    """The GPU architectures the library's kernels were compiled for ("" when none were)."""
    return _gpu.kernel_archs()


def device_count() -> int:
    """CUDA devices the driver sees (0 without a driver)."""
    return max(_gpu.device_count(), 0)


def live() -> dict[str, int]:
    """What this process holds of the driver through splitrpc now: device Tensor Queues, pinned
    allocations, host registrations, streams and O2 kernels (all 0 once everything is closed)."""
    return _gpu.live()
