"""device.py: the GPU sections of `splitrpc check`: device Tensor Queues (double mapping, a batch that wraps the ring, completion flags) and device callbacks served through a loopback server in each orchestration (O1, O1 + CUDA graph, O2), each run three times under a leak check."""
from __future__ import annotations

import ctypes
import gc
import os
import time
from typing import Any, Callable

import numpy as np

import splitrpc
from splitrpc import gpu
from splitrpc._native import gpu as _gpu
from splitrpc.check.probes import EMULATED_LABEL, driver_emulated, need_cupy, need_gpu
from splitrpc.check.section import BUDGET_NOTE, Context, Cut, Failed, Result, Section, Skipped, expect
from splitrpc.check.serving import errors_sent, loopback_server, settled, wave
from splitrpc.spec import TensorSpec

F32 = "float32"
FLAG_TIMEOUT_S = 10.0
# The emulated driver's live counts that must come back to where they were (a real driver has none).
_FAKE_COUNTS = ("fake_cuda_vmm_live_mappings", "fake_cuda_vmm_live_reservations", "fake_cuda_vmm_live_handles",
                "fake_cuda_host_live", "fake_cuda_live_allocations", "fake_cuda_live_streams")


def _label() -> str:
    return f"{EMULATED_LABEL}: " if driver_emulated() else ""


class Accounting:
    """A leak check that runs a body several times and looks at what the GPU holds after each run:
    the library's own count of what it holds (splitrpc.gpu.live: queues, pinned buffers,
    registrations, streams, O2 kernels; any driver), which must be back where it was before the
    first run after every run; on the emulated driver, its live mappings, reservations, handles,
    buffers, allocations and streams, which must not change after the first run (they count
    objects; a first use may keep one); and free device memory (cuMemGetInfo), which
    must not fall by a granule or more after each run but the first (what the driver or a library
    caches on first use stays; a leak repeats, and a leaked device Tensor Queue holds at least one
    granule). On a shared GPU another process's allocations can move free memory too."""

    def __init__(self, ordinal: int):
        self.ordinal = ordinal
        self.granule = gpu.device_info(ordinal)["granularity"] or (2 << 20)
        self.emulated = driver_emulated()

    def _snapshot(self) -> dict[str, int]:
        release()
        snap = {"free": gpu.mem_info(self.ordinal)[0], **gpu.live()}
        if self.emulated:
            lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_NOW)
            snap.update({n: getattr(lib, n)() for n in _FAKE_COUNTS})
        return snap

    def repeated(self, body: Callable[[], Any], what: str, runs: int = 3) -> tuple[Any, dict[str, Any]]:
        """body() run `runs` times (>= 3) under the check above; the last run's return value, and
        {"free_drops", "held"} of the snapshots."""
        snaps, out = [self._snapshot()], None
        for _ in range(runs):
            out = body()
            snaps.append(self._snapshot())
        counts = [k for k in snaps[0] if k != "free"]
        for k in counts:
            # splitrpc's holdings: back to where they were before the first run; the emulated
            # driver's objects: steady from the first run on (a first use may keep one for the
            # process, as the mirror self-test keeps its counter)
            seen = [s[k] for s in (snaps if not k.startswith("fake") else snaps[1:])]
            expect(len(set(seen)) == 1, f"{what}: {k.removeprefix('fake_cuda_')} went {' -> '.join(map(str, seen))} "
                                        f"over {runs} runs ({'the emulated driver' if k.startswith('fake') else 'held by splitrpc'})")
        drops = [snaps[i]["free"] - snaps[i + 1]["free"] for i in range(1, runs)]
        expect(min(drops) < self.granule, f"{what}: device memory fell after every run: "
                                          f"{', '.join(f'{d:,} B' for d in drops)} (cuMemGetInfo; granule {self.granule:,} B)")
        return out, {"free_drops": drops, "held": {k: snaps[-1][k] for k in counts}}

    def words(self) -> str:
        return ("the library's holdings, the emulated driver's counts and device memory back after each of three runs"
                if self.emulated else "the library's holdings and device memory back after each of three runs")


def release() -> None:
    """Drops what Python still holds of finished work: garbage, and CuPy's cached device and
    pinned blocks, so that the driver's counts show only what is really in use."""
    gc.collect()
    try:
        import cupy
    except ImportError:
        return
    for pool in ("get_default_memory_pool", "get_default_pinned_memory_pool"):
        get = getattr(cupy, pool, None)
        if get is not None:
            get().free_all_blocks()


# ------------------------------------------------------------------ device Tensor Queues

# (element bytes, capacity): one element, a page, elements that do not divide the granule,
# a 1 MiB element, a ring of several granules
TQ_SHAPES = ((1, 1), (4096, 600), (4000, 1000), (12345, 333), (1 << 20, 5))


def _pattern(n: int, seed: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def _check_layout(q: _gpu.DeviceQueue, gran: int, kernels: bool) -> None:
    need = q.elem_size * q.capacity
    what = f"device TQ {q.elem_size} B x {q.capacity}"
    expect(q.ring_bytes % gran == 0 and need <= q.ring_bytes < need + gran,
           f"{what}: ring {q.ring_bytes} B is not {need} B rounded up to the {gran} B granule")
    expect(q.base % gran == 0, f"{what}: base {q.base:#x} is not granule-aligned")
    for seq in (0, 1, q.capacity - 1, q.capacity, 2 * q.capacity + 3, 1 << 40):
        expect(q.elem(seq) == q.base + seq * q.elem_size % q.ring_bytes, f"{what}: element {seq} is misplaced")
    if kernels:
        q.check_mirror()  # a kernel writes through each mapping and reads through the other


def _check_copies(q: _gpu.DeviceQueue, stage: _gpu.PinnedBuffer, back: _gpu.PinnedBuffer, seed: int) -> None:
    """The whole ring written through one mapping by the copy engine and read through the other,
    both ways; then 3 elements that wrap the ring's end written in one copy at their contiguous
    address and read back one by one from where they really are."""
    ring, elem = q.ring_bytes, q.elem_size
    src, dst = np.frombuffer(stage.host, np.uint8), np.frombuffer(back.host, np.uint8)
    for way, (wr, rd) in enumerate(((q.base + ring, q.base), (q.base, q.base + ring))):
        src[:ring] = _pattern(ring, seed + way)
        dst[:ring] = 0
        _gpu.copy_htod(wr, stage, 0, ring)
        _gpu.copy_dtoh(back, 0, rd, ring)
        _gpu.stream_sync(0)
        bad = int(np.count_nonzero(src[:ring] != dst[:ring]))
        expect(bad == 0, f"the two mappings of a {ring} B ring differ in {bad} bytes "
                         f"({'upper to lower' if way == 0 else 'lower to upper'})")
    s = ring // elem - 1  # its run of 3 elements crosses the end of the ring
    expect(q.elem(s) + 3 * elem > q.base + ring, "the run chosen does not wrap")
    src[:3 * elem] = _pattern(3 * elem, seed + 7)
    dst[:3 * elem] = 0
    _gpu.copy_htod(q.elem(s), stage, 0, 3 * elem)
    for k in range(3):
        _gpu.copy_dtoh(back, k * elem, q.elem(s + k), elem)
    _gpu.stream_sync(0)
    bad = int(np.count_nonzero(src[:3 * elem] != dst[:3 * elem]))
    expect(bad == 0, f"a batch of 3 x {elem} B wrapping the ring's end read back with {bad} bytes wrong")


def _wait_word(buf: _gpu.PinnedBuffer, index: int, value: int) -> bool:
    words = np.frombuffer(buf.host, np.uint32)
    end = time.monotonic() + FLAG_TIMEOUT_S
    while time.monotonic() < end:
        if int(words[index]) == value:
            return True
        time.sleep(0.0002)
    return False


def _check_flags(ordinal: int, q: _gpu.DeviceQueue, stage: _gpu.PinnedBuffer, back: _gpu.PinnedBuffer,
                 flags: _gpu.PinnedBuffer, seed: int) -> dict[str, bool]:
    """A completion flag set on the stream after a copy there and back, by a stream store and by
    a host function: the flag must not come before the data. Says which way the device took."""
    out: dict[str, bool] = {}
    n = min(q.ring_bytes, 1 << 20)
    src, dst = np.frombuffer(stage.host, np.uint8), np.frombuffer(back.host, np.uint8)
    for i, (way, store) in enumerate((("stream store", True), ("host function", False))):
        src[:n] = _pattern(n, seed + 20 + i)
        dst[:n] = 0
        _gpu.copy_htod(q.base, stage, 0, n)
        _gpu.copy_dtoh(back, 0, q.base, n)
        _gpu.signal(0, flags, i, store, 100 + i)
        expect(_wait_word(flags, i, 100 + i), f"the completion flag set by a {way} never came "
                                              f"({FLAG_TIMEOUT_S:g} s)")
        expect(np.array_equal(src[:n], dst[:n]), f"the flag set by a {way} came before the copies were done")
        _gpu.stream_sync(0)
    info = gpu.device_info(ordinal)
    out["stream_memops"] = bool(info["stream_memops"])  # 0 now: the driver answered NOT_SUPPORTED to the store
    return out


def _exercise_queues(ordinal: int, gran: int, kernels: bool, seed: int) -> dict[str, bool]:
    """One pass: every shape laid out (and mirror-tested), then copies through both mappings, a
    wrapping batch and completion flags on one queue; everything made is destroyed."""
    for elem, cap in TQ_SHAPES:
        q = _gpu.DeviceQueue(ordinal, elem, cap)
        try:
            _check_layout(q, gran, kernels)
        finally:
            q.close()
    q = _gpu.DeviceQueue(ordinal, 4096, 600)
    bufs = []
    try:
        stage, back, flags = (_gpu.PinnedBuffer(q.ring_bytes), _gpu.PinnedBuffer(q.ring_bytes), _gpu.PinnedBuffer(4096))
        bufs = [stage, back, flags]
        _check_copies(q, stage, back, seed)
        return _check_flags(ordinal, q, stage, back, flags, seed)
    finally:
        for b in bufs:
            b.close()
        q.close()


def run_device_tq(ctx: Context) -> Result:
    ordinal = need_gpu(ctx.device)
    kernels = bool(gpu.kernel_archs())
    gran = gpu.device_info(ordinal)["granularity"]
    acct = Accounting(ordinal)
    flags, acc = acct.repeated(lambda: _exercise_queues(ordinal, gran, kernels, ctx.seed), "device Tensor Queues")
    facts = {"granularity": gran, "shapes": [list(s) for s in TQ_SHAPES], "mirror_self_test": kernels, **flags,
             "accounting": acc}
    mirror = "the mirror self-test passed (kernels)" if kernels else "no mirror self-test (built without kernels)"
    flag = "stream stores" if facts["stream_memops"] else "host functions (the driver refused stream stores)"
    return Result(
        summary=f"{_label()}{len(TQ_SHAPES)} queue shapes laid out and double-mapped, {mirror}; a batch wrapping "
                f"the ring's end read back exactly; completion flags by {flag}; nothing left (3 runs)",
        facts=facts,
        markdown=[f"- {_label()}device Tensor Queues {', '.join(f'{e} B x {c}' for e, c in TQ_SHAPES)}: "
                  f"granule {gran // 1024} KiB, {mirror}; copies through both mappings; 3 elements wrapping the "
                  f"ring's end; completion flags by stream store and by host function ({flag} in use); "
                  f"{acct.words()} (device memory fell by {', '.join(f'{d:,}' for d in acc['free_drops'])} B)"])


# ------------------------------------------------------------------ device callbacks


VEC = 1000               # floats per vecadd element: 4000 B elements do not divide the 2 MiB ring
VEC_CALLS = (300, 300)   # two waves: 600 calls go round a 524-element ring
MATMUL_CALLS = 64
MATMUL_RTOL = 1e-3       # a GPU GEMM sums in another order
FIRST_CALL_TIMEOUT_S = 60.0  # a first call compiles CuPy kernels, captures a graph or launches O2
# ... but it must end with room for the server's stop within the section's cap: a stream wait and
# the O2 kernel's stop each give up after 5 s (SRPC_GPU_WAIT_TIMEOUT_MS),
# so that a call that never comes back fails the section with what the stop found.
TEARDOWN_S = 12.0


def _vecadd_right(q: bytes, r: bytes) -> bool:
    return r == (np.frombuffer(q, "<f4") + np.float32(1)).astype("<f4").tobytes()


def _matmul_right(q: bytes, r: bytes) -> bool:
    a = np.frombuffer(q, "<f4")
    ref = a[:1024].reshape(32, 32) @ a[1024:].reshape(32, 32)
    if len(r) != 4096:
        return False
    got = np.frombuffer(r, "<f4").reshape(32, 32)
    scale = max(1.0, float(np.abs(ref).max()))
    return bool(np.all(np.isfinite(got)) and np.allclose(got, ref, rtol=MATMUL_RTOL, atol=MATMUL_RTOL * scale))


def _device_functions(cupy: Any, device: str, mode: str, seen: list[type]) -> Callable[[splitrpc.Server], None]:
    """setup(srv): vecadd (and, but for O2, matmul) on the device in orchestration `mode`."""
    def vecadd(x: Any, y: Any) -> None:
        seen.append(type(x))
        cupy.add(x, 1, out=y)

    vecadd.o2_kernel = "vecadd"  # type: ignore[attr-defined]  # a function attribute O2 reads

    def matmul(a: Any, b: Any, c: Any) -> None:
        cupy.matmul(a, b, out=c)

    def setup(srv: splitrpc.Server) -> None:
        srv.add_function(vecadd, 1, "vecadd", [TensorSpec("x", F32, (VEC,))], [TensorSpec("y", F32, (VEC,))],
                         device=device, orchestration=mode, capacity=64, max_batch=8)
        if mode != "o2":
            srv.add_function(matmul, 2, "matmul", [TensorSpec("a", F32, (32, 32)), TensorSpec("b", F32, (32, 32))],
                             [TensorSpec("c", F32, (32, 32))], device=device, orchestration=mode, max_batch=8)
    return setup


MIN_FIRST_CALL_S = 5.0  # a served run is not started unless its first call may take this long


def _first_call_timeout(ctx: Context) -> float:
    """What the first call may take: FIRST_CALL_TIMEOUT_S, less when the cap is nearer; Cut when
    the cap leaves too little for a call and the server's stop (the budget gave it too little)."""
    t = min(FIRST_CALL_TIMEOUT_S, ctx.left() - TEARDOWN_S)
    if t < MIN_FIRST_CALL_S:
        why = (f"{ctx.left():.0f} s of its cap left{BUDGET_NOTE if ctx.budget_limited else ''}"
               f": a served run needs {MIN_FIRST_CALL_S + TEARDOWN_S:g} s (a first call and the server's stop)")
        raise Cut(why) if ctx.budget_limited else Failed(why)
    return t


def _first_call(c: splitrpc.Client, ctx: Context, func_id: int, data: bytes, timeout: float) -> bytes:
    """A function's first call, which may compile kernels or capture a graph: its time-out is a
    failure, but a cut where the check's budget shortened the section (the call had less time
    than it may need)."""
    try:
        return c.call(func_id, data, timeout=timeout)
    except splitrpc.CallTimeout:
        if ctx.budget_limited and timeout < FIRST_CALL_TIMEOUT_S:
            raise Cut(f"function {func_id}'s first call had {timeout:.0f} s of the budget, and needed more") from None
        raise


def _serve_once(cupy: Any, ordinal: int, mode: str, rng: np.random.Generator, ctx: Context) -> dict[str, Any]:
    first_s = _first_call_timeout(ctx)
    device = f"cuda:{ordinal}"
    seen: list[type] = []
    with loopback_server(_device_functions(cupy, device, mode, seen), wait="poll") as srv:
        where = srv.stats()["devices"]
        expect(set(where.values()) == {device}, f"the server runs them on {where}, not {device}: it fell back")
        calls = {}
        with splitrpc.Client("127.0.0.1", srv.port, timeout=10.0) as c:
            x = rng.standard_normal(VEC).astype("<f4").tobytes()
            expect(_vecadd_right(x, _first_call(c, ctx, 1, x, first_s)), "vecadd: the first reply is wrong")
            calls["vecadd"] = 1 + sum(wave(c, 1, [rng.standard_normal(VEC).astype("<f4").tobytes() for _ in range(n)],
                                           _vecadd_right, "vecadd") for n in VEC_CALLS)
            if mode != "o2":
                m = rng.standard_normal(2048).astype("<f4").tobytes()
                expect(_matmul_right(m, _first_call(c, ctx, 2, m, first_s)), "matmul: the first reply is wrong")
                calls["matmul"] = 1 + wave(c, 2, [rng.standard_normal(2048).astype("<f4").tobytes()
                                                  for _ in range(MATMUL_CALLS)], _matmul_right, "matmul")
        st = settled(srv, lambda s: s["in_flight"] == 0)
    fallback = st["graph_fallback"]
    if mode == "graph":  # vecadd's callback is one CuPy kernel: it must be captured
        expect("vecadd" not in fallback, f"vecadd was not captured into a CUDA graph: {fallback.get('vecadd')}")
    errors = errors_sent(st)
    expect(not errors, f"the server sent errors {errors}")
    expect(st["in_flight"] == 0, f"{st['in_flight']} batches still in flight after every reply")
    if mode == "o2":
        expect(not seen, "O2 ran the Python callback: the persistent kernel should have done the work")
    else:
        expect(bool(seen) and all(t is cupy.ndarray for t in seen), f"the callback got {set(seen)}, not CuPy arrays")
    return {"calls": calls, "mean_batch": st["mean_batch"], "batches": st["batches"],
            "busy_answers": st["errors"].get("BUSY", 0), "graph_fallback": fallback}


MODE_TEXT = {"o1": "O1 (a callback per batch)", "graph": "O1 + CUDA graph (captured once per batch size, replayed)",
             "o2": "O2 (the persistent kernel polls a doorbell)"}


def _run_callbacks(ctx: Context, mode: str) -> Result:
    ordinal = need_gpu(ctx.device)
    cupy = need_cupy()
    if mode == "o2" and not gpu.kernel_archs():
        raise Skipped("O2 runs a kernel of the library's, and this build has none (no CUDA compiler at build time)")
    rng = np.random.default_rng(ctx.seed)
    acct = Accounting(ordinal)
    run, held = acct.repeated(lambda: _serve_once(cupy, ordinal, mode, rng, ctx), f"{mode} served")
    run["accounting"] = held
    total = sum(run["calls"].values())
    what = " and ".join(f"{k} ({v} calls)" for k, v in run["calls"].items())
    # A callback the capture refuses (CuPy's cuBLAS: matmul) is served as O1, said here
    uncaptured = "".join(f"; {k} not captured, served as O1 ({why})" for k, why in run["graph_fallback"].items())
    return Result(summary=f"{_label()}{MODE_TEXT[mode]}: {what} served on cuda:{ordinal}, every reply right, "
                          f"mean batch {run['mean_batch']:.1f}, nothing left{uncaptured}",
                  facts=run,
                  markdown=[f"- {_label()}{MODE_TEXT[mode]} on cuda:{ordinal}: {what}, {total} replies checked "
                            f"(vecadd exact, matmul rtol {MATMUL_RTOL:g}), the request ring gone round "
                            f"({VEC * 4} B elements), mean batch {run['mean_batch']:.2f}{uncaptured}; {acct.words()} "
                            f"(device memory fell by {', '.join(f'{d:,}' for d in run['accounting']['free_drops'])} B)"])


def run_device_o1(ctx: Context) -> Result:
    return _run_callbacks(ctx, "o1")


def run_device_graph(ctx: Context) -> Result:
    return _run_callbacks(ctx, "graph")


def run_device_o2(ctx: Context) -> Result:
    return _run_callbacks(ctx, "o2")


SECTIONS = [
    Section("device-tq", "device Tensor Queues: allocate, double-map, a batch wrapping the ring, flags, release",
            run_device_tq, cap_s=15, tier="core"),
    Section("device-o1", "device callbacks served on the GPU, O1: vecadd and matmul, replies checked, nothing left",
            run_device_o1, cap_s=35, tier="core"),
    Section("device-graph", "device callbacks served on the GPU, O1 + CUDA graph, replies checked, nothing left",
            run_device_graph, cap_s=35, tier="core"),
    Section("device-o2", "O2: the persistent vecadd kernel served through the server, replies checked, nothing left",
            run_device_o2, cap_s=35, tier="core"),
]
