"""Device functions on the emulated GPU (issue 21): cases that need the emulated driver's accounting and fault injection. They run in tests/test_gpu_emulated.py's subprocess, with the emulated libcuda.so.1 and the emulated cupy; anywhere else they skip, saying so. EMULATED: nothing here ran on a GPU."""
import ctypes
import time

import numpy as np
import pytest
from conftest import settled

import splitrpc
from splitrpc import gpu


def _emulated_driver():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return lib if hasattr(lib, "fake_cuda_vmm_live_mappings") else None


DRV = _emulated_driver()
pytestmark = pytest.mark.skipif(DRV is None or not gpu.available(0),
                                reason="runs on the emulated driver only (tests/test_gpu_emulated.py runs it)")
F32 = "float32"
HTOD, DTOH = 0, 1
ILLEGAL_ADDRESS, NOT_SUPPORTED = 700, 801  # CUresult codes
if DRV is not None:
    DRV.fake_cuda_stream_writes.restype = ctypes.c_ulonglong
    DRV.fake_cuda_device_memory_used.restype = ctypes.c_size_t
    DRV.fake_cuda_set_device_memory.argtypes = [ctypes.c_size_t]


def _live() -> dict:
    return {name: getattr(DRV, f"fake_cuda_{name}")() for name in
            ("vmm_live_mappings", "vmm_live_reservations", "vmm_live_handles", "host_live", "live_modules")}


def _idle(srv) -> dict:
    """srv.stats() once no batch is in flight (5 s at most): a batch's replies go out before the
    worker counts it finished, so a client can see its last reply first."""
    return settled(srv, lambda st: st["in_flight"] == 0)


def _vecadd_server(make_server, orchestration, n=256, capacity=64, max_batch=8):
    import cupy

    def on_gpu(x, y):
        cupy.add(x, 1, out=y)

    on_gpu.o2_kernel = "vecadd"
    return make_server(lambda s: s.add_function(on_gpu, 1, "vecadd", [splitrpc.TensorSpec("x", F32, (n,))],
                                                [splitrpc.TensorSpec("y", F32, (n,))], device="cuda:0",
                                                orchestration=orchestration, capacity=capacity,
                                                max_batch=max_batch),
                       wait="poll")


def _serving(make_server, make_client, orchestration, timeout=5.0, client_kw=None, **fn_kw):
    """A vecadd device function's server, a client, and x = 0..255 already served once."""
    srv = _vecadd_server(make_server, orchestration, **fn_kw)
    c = make_client(srv.port, timeout=timeout, **(client_kw or {}))
    x = np.arange(256, dtype=np.float32)
    assert np.array_equal(np.frombuffer(c.call(1, x), np.float32), x + 1)
    return srv, c, x


def test_o2_ten_thousand_calls_then_nothing_left(make_server, make_client):
    """O2: the persistent kernel serves 10,000 calls (the descriptor ring of 64 slots wraps over
    150 times), stops, and the server's close leaves no mapping, reservation, allocation handle
    or mapped host buffer in the driver's accounting."""
    before, runs = _live(), DRV.fake_cuda_launches(2)
    srv = _vecadd_server(make_server, "o2")
    c = make_client(srv.port, timeout=10.0)
    rng = np.random.default_rng(2)
    done = 0
    while done < 10_000:
        xs = [rng.standard_normal(256).astype(np.float32) for _ in range(500)]
        futs = [c.call_async(1, x) for x in xs]
        for x, f in zip(xs, futs):
            assert np.array_equal(np.frombuffer(f.result(), np.float32), x + 1)
        done += len(xs)
    st = _idle(srv)
    assert st["calls"] == 10_000 and st["in_flight"] == 0
    assert DRV.fake_cuda_launches(2) == runs  # the kernel is still running: counted when it returns
    srv.close()
    assert DRV.fake_cuda_launches(2) == runs + 1  # ... it returned at stop
    after = _live()
    assert {k: after[k] - before[k] for k in after if k != "live_modules"} == \
        {"vmm_live_mappings": 0, "vmm_live_reservations": 0, "vmm_live_handles": 0, "host_live": 0}, (before, after)


def test_o2_with_its_ring_full_the_worker_waits_for_the_kernel(make_server, make_client):
    """The O2 kernel is held (fake_cuda_pause_o2) while 100 one-call batches arrive: its ring of
    64 descriptors fills, so exactly 64 batches are in flight and the worker waits on the 65th
    (srpc_server_submit_o2's -EBUSY, retried). Once the kernel runs again every call is served
    right, and nothing is left in flight."""
    srv, c, x = _serving(make_server, make_client, "o2", capacity=256, max_batch=1, timeout=30.0,
                         client_kw={"window": 0})
    xs = [x + i for i in range(100)]
    DRV.fake_cuda_pause_o2(1)
    try:
        futs = [c.call_async(1, v) for v in xs]
        end = time.monotonic() + 10
        while srv.stats()["in_flight"] < 64 and time.monotonic() < end:
            time.sleep(0.005)
        time.sleep(0.2)
        assert srv.stats()["in_flight"] == 64 and not any(f.done() for f in futs)
    finally:
        DRV.fake_cuda_pause_o2(0)
    for v, f in zip(xs, futs):
        assert np.array_equal(np.frombuffer(f.result(), np.float32), v + 1)
    st = _idle(srv)
    assert st["in_flight"] == 0 and st["calls"] == 101 and st["errors"]["INTERNAL"] == 0


def _full_device(used: int) -> None:
    DRV.fake_cuda_set_device_memory(used + 3 * 2**20)  # one 2 MiB ring fits, two do not


def _no_stream(used: int) -> None:
    DRV.fake_cuda_fail_stream_creates(1)


def _clear_add_faults() -> None:
    DRV.fake_cuda_set_device_memory(0)
    DRV.fake_cuda_fail_stream_creates(0)


@pytest.mark.parametrize("fault,error", [(_full_device, r"cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY"),
                                         (_no_stream, r"cuStreamCreate")], ids=["full-device", "no-stream"])
def test_a_failed_add_function_leaves_nothing_and_the_id_free(make_client, fault, error):
    """add_function fails on the device with GPUError: there is room for the function's input
    queue but not its output queue (naming cuMemCreate and OUT_OF_MEMORY), or its CUDA stream
    cannot be created. Either way nothing is left (no device memory, mapping, reservation or
    stream), the function
    is not half registered (the engine would otherwise hold its id with no callback behind it),
    and the same id then registers on that server, which serves it."""
    import cupy

    def on_gpu(x, y):
        cupy.add(x, 1, out=y)

    def add(s):
        s.add_function(on_gpu, 1, "vecadd", [splitrpc.TensorSpec("x", F32, (256,))],
                       [splitrpc.TensorSpec("y", F32, (256,))], device="cuda:0")

    gpu.available(0)
    before, used, streams = _live(), DRV.fake_cuda_device_memory_used(), DRV.fake_cuda_live_streams()
    srv = splitrpc.Server("127.0.0.1", 0, wait="poll")
    try:
        fault(used)
        try:
            with pytest.raises(gpu.GPUError, match=rf"cannot register function 1 on cuda:0: .*{error}"):
                add(srv)
        finally:
            _clear_add_faults()
        assert DRV.fake_cuda_device_memory_used() == used and _live() == before
        assert DRV.fake_cuda_live_streams() == streams  # the function's stream, where made, is gone
        assert not srv.functions()
        add(srv)
        srv.start()
        c = make_client(srv.port, timeout=5.0)
        x = np.arange(256, dtype=np.float32)
        assert np.array_equal(np.frombuffer(c.call(1, x), np.float32), x + 1)
    finally:
        srv.close()


def test_out_of_device_memory_in_a_callback_answers_its_call_internal(make_server, make_client):
    """The callback allocates a temporary on a full device (CuPy raises OutOfMemoryError): that
    call alone is answered INTERNAL, saying so; with room again the next calls are served."""
    import cupy

    def on_gpu(x, y):
        t = cupy.empty_like(x)
        cupy.add(x, 1, out=t)
        y[...] = t

    srv = make_server(lambda s: s.add_function(on_gpu, 1, "vecadd", [splitrpc.TensorSpec("x", F32, (256,))],
                                               [splitrpc.TensorSpec("y", F32, (256,))], device="cuda:0",
                                               max_batch=1), wait="poll")
    c = make_client(srv.port, timeout=5.0)
    x = np.arange(256, dtype=np.float32)
    assert np.array_equal(np.frombuffer(c.call(1, x), np.float32), x + 1)
    DRV.fake_cuda_set_device_memory(DRV.fake_cuda_device_memory_used())  # full
    try:
        with pytest.raises(splitrpc.InternalError, match="Out of memory allocating 1,024 bytes"):
            c.call(1, x)
    finally:
        DRV.fake_cuda_set_device_memory(0)
    for i in range(5):
        assert np.array_equal(np.frombuffer(c.call(1, x + i), np.float32), x + i + 1)
    assert _idle(srv)["in_flight"] == 0


def test_a_device_callback_fails_some_calls_of_its_batch_alone(make_server, make_client):
    """Per-call results from a device function (O1): the callback computes on the device, reads
    back what it needs to judge each call (get(), which waits for its stream) and returns
    {index: BadRequest} for the calls that fail; those calls get their error, the others of the
    same batch their outputs."""
    import threading

    import cupy

    gate, sizes = threading.Event(), []

    def on_gpu(x, y):
        gate.wait(10)  # the first batch waits, so the calls behind it batch up
        cupy.add(x, 1, out=y)
        first = x.get()[:, 0]
        sizes.append((len(first), int((first < 0).sum())))
        return {int(i): splitrpc.BadRequest(f"negative input {first[i]:g}") for i in np.flatnonzero(first < 0)}

    srv = make_server(lambda s: s.add_function(on_gpu, 1, "vecadd", [splitrpc.TensorSpec("x", F32, (64,))],
                                               [splitrpc.TensorSpec("y", F32, (64,))], device="cuda:0",
                                               capacity=64, max_batch=16), wait="poll")
    c = make_client(srv.port, timeout=10.0)
    xs = [np.full(64, v, np.float32) for v in [1, -2, 3, 4, -5, 6, -7, 8] * 4]
    futs = [c.call_async(1, x) for x in xs]
    gate.set()
    for x, f in zip(xs, futs):
        if x[0] < 0:
            with pytest.raises(splitrpc.BadRequest, match=f"negative input {x[0]:g}"):
                f.result()
        else:
            assert np.array_equal(np.frombuffer(f.result(), np.float32), x + 1)
    assert any(n > bad > 0 for n, bad in sizes), sizes  # a batch with both outcomes
    st = settled(srv, lambda st: st["in_flight"] == 0 and st["errors"]["BAD_REQUEST"] == 12)
    assert st["errors"]["BAD_REQUEST"] == 12 and st["errors"]["INTERNAL"] == 0 and st["in_flight"] == 0


def test_a_failed_o2_doorbell_answers_its_call_internal(make_server, make_client):
    """The store that rings an O2 batch's doorbell cannot be queued: that call alone is answered
    INTERNAL (the kernel never saw it), and the next batches, on the same slot, are served."""
    srv, c, x = _serving(make_server, make_client, "o2", max_batch=1)
    DRV.fake_cuda_fail_stream_writes(1, ILLEGAL_ADDRESS)
    with pytest.raises(splitrpc.InternalError, match="O2 doorbell"):
        c.call(1, x)
    for i in range(100):
        assert np.array_equal(np.frombuffer(c.call(1, x + i), np.float32), x + i + 1)
    assert _idle(srv)["in_flight"] == 0


@pytest.mark.parametrize("kind", [HTOD, DTOH])
def test_a_failed_copy_answers_its_calls_internal_and_the_next_call_succeeds(make_server, make_client, kind):
    """The staging copy of one batch (requests to the device, or replies back) fails: that
    batch's calls are answered INTERNAL, and the calls after it are served."""
    srv, c, x = _serving(make_server, make_client, "o1", max_batch=1, timeout=5.0)
    DRV.fake_cuda_fail_copies(kind, 1)
    with pytest.raises(splitrpc.InternalError):
        c.call(1, x)
    for _ in range(5):
        assert np.array_equal(np.frombuffer(c.call(1, x), np.float32), x + 1)
    assert _idle(srv)["in_flight"] == 0


def test_batches_in_flight_complete_out_of_order_across_streams_replies_in_order(make_server, make_client):
    """Two device functions, each with its stream. 8 one-call batches of the slow one are all in
    flight at once: each queues a kernel that runs until the test lets it finish. Meanwhile the
    fast function's 8 batches complete on their stream: out of order across streams. Each
    function's replies come in the order of its calls."""
    import threading

    import cupy

    gate = threading.Event()

    def slow(x, y):
        cupy.cuda.emulate_kernel(lambda: gate.wait(30))
        cupy.add(x, 1, out=y)

    def fast(x, y):
        cupy.add(x, 2, out=y)

    def setup(s):
        for fid, fn in ((1, slow), (2, fast)):
            s.add_function(fn, fid, fn.__name__, [splitrpc.TensorSpec("x", F32, (64,))],
                           [splitrpc.TensorSpec("y", F32, (64,))], device="cuda:0", capacity=64, max_batch=1)

    srv = make_server(setup, wait="poll")
    c = make_client(srv.port, timeout=30.0)
    order, lock = [], threading.Lock()

    def record(tag):
        def cb(_f):
            with lock:
                order.append(tag)
        return cb

    x = np.arange(64, dtype=np.float32)
    futs = []
    try:
        for i in range(8):
            f = c.call_async(1, x + i)
            f.add_done_callback(record(("slow", i)))
            futs.append((f, x + i + 1))
        end = time.monotonic() + 10
        while srv.stats()["in_flight"] < 8 and time.monotonic() < end:  # handed back at once: 8 out
            time.sleep(0.005)
        assert srv.stats()["in_flight"] == 8
        fast_futs = []
        for i in range(8):
            f = c.call_async(2, x + i)
            f.add_done_callback(record(("fast", i)))
            fast_futs.append((f, x + i + 2))
        for f, want in fast_futs:  # served while the slow stream still holds all 8
            assert np.array_equal(np.frombuffer(f.result(), np.float32), want)
        assert not any(f.done() for f, _ in futs)
    finally:
        gate.set()
    for f, want in futs:
        assert np.array_equal(np.frombuffer(f.result(), np.float32), want)
    slow_done = [i for tag, i in order if tag == "slow"]
    fast_done = [i for tag, i in order if tag == "fast"]
    assert slow_done == list(range(8)) and fast_done == list(range(8)), order  # in order per function
    assert order[:8] == [("fast", i) for i in range(8)], order  # ... and out of order across streams


def test_a_graceful_stop_with_device_batches_in_flight(make_server, make_client):
    """stop(grace=) while 8 batches of a device function are in flight, their kernels held: the
    stop waits for them, every call is answered right, and once closed nothing is left in the
    driver's accounting (no copy or kernel ran on freed memory: the driver would report it)."""
    import threading

    import cupy

    gate = threading.Event()

    def slow(x, y):
        cupy.cuda.emulate_kernel(lambda: gate.wait(30))
        cupy.add(x, 1, out=y)

    gpu.available(0)
    before = _live()
    srv = make_server(lambda s: s.add_function(slow, 1, "slow", [splitrpc.TensorSpec("x", F32, (64,))],
                                               [splitrpc.TensorSpec("y", F32, (64,))], device="cuda:0",
                                               capacity=64, max_batch=1), wait="poll")
    c = make_client(srv.port, timeout=30.0)
    x = np.arange(64, dtype=np.float32)
    futs = [c.call_async(1, x + i) for i in range(8)]
    end = time.monotonic() + 10
    while srv.stats()["in_flight"] < 8 and time.monotonic() < end:
        time.sleep(0.005)
    assert srv.stats()["in_flight"] == 8
    timer = threading.Timer(0.3, gate.set)
    timer.start()
    t0 = time.monotonic()
    try:
        left = srv.stop(grace=20)
    finally:
        gate.set()
        timer.cancel()
    assert left == 0 and time.monotonic() - t0 >= 0.25
    for i, f in enumerate(futs):
        assert np.array_equal(np.frombuffer(f.result(timeout=5), np.float32), x + i + 1)
    srv.close()
    after = _live()
    assert {k: after[k] - before[k] for k in after if k != "live_modules"} == \
        {"vmm_live_mappings": 0, "vmm_live_reservations": 0, "vmm_live_handles": 0, "host_live": 0}, (before, after)


def test_a_failed_o2_launch_fails_the_start_alone(make_server, make_client):
    """O2's kernel is launched once, when the server starts: a failed launch is the start's
    error (GPUError naming cuLaunchKernel); closing that server leaves nothing behind in the
    driver's accounting, and the next server serves."""
    import cupy

    before = _live()

    def on_gpu(x, y):
        cupy.add(x, 1, out=y)

    on_gpu.o2_kernel = "vecadd"
    srv = splitrpc.Server("127.0.0.1", 0, wait="poll")
    srv.add_function(on_gpu, 1, "vecadd", [splitrpc.TensorSpec("x", F32, (256,))],
                     [splitrpc.TensorSpec("y", F32, (256,))], device="cuda:0", orchestration="o2")
    DRV.fake_cuda_fail_launches(1)
    with pytest.raises(gpu.GPUError, match="cuLaunchKernel"):
        srv.start()
    srv.close()
    after = _live()
    assert {k: after[k] - before[k] for k in after if k != "live_modules"} == \
        {"vmm_live_mappings": 0, "vmm_live_reservations": 0, "vmm_live_handles": 0, "host_live": 0}, (before, after)
    srv = _vecadd_server(make_server, "o2")
    c = make_client(srv.port, timeout=5.0)
    x = np.arange(256, dtype=np.float32)
    for _ in range(100):
        assert np.array_equal(np.frombuffer(c.call(1, x), np.float32), x + 1)


@pytest.mark.parametrize("orchestration", ["o1", "graph"])
def test_a_failed_launch_in_a_callback_answers_its_calls_internal(make_server, make_client, orchestration):
    """A kernel launch of the batch fails (the emulated cupy raises, as CuPy does). With graphs
    the failure is taken by the batch's first operation, the copy into the captured graph's
    static input (the emulated graph launch itself takes no injected failure), after the graph
    was captured. Only that batch's call is answered INTERNAL, and the calls after it are
    served."""
    srv, c, x = _serving(make_server, make_client, orchestration, max_batch=1, timeout=5.0)
    DRV.fake_cuda_fail_launches(1)
    with pytest.raises(splitrpc.InternalError, match="LAUNCH_FAILED"):
        c.call(1, x)
    for _ in range(5):
        assert np.array_equal(np.frombuffer(c.call(1, x), np.float32), x + 1)
    assert _idle(srv)["in_flight"] == 0


def test_without_a_stream_store_the_worker_waits_and_a_failed_wait_answers_internal(make_server, make_client):
    """A batch's done word is set by a store queued on its stream (cuStreamWriteValue32). When
    that store cannot be queued, the worker waits for the stream instead (srpc_server_submit):
    the call is served. When the wait fails as well, that call alone is answered INTERNAL, and
    the calls after it are served, with stores again."""
    srv, c, x = _serving(make_server, make_client, "o1", max_batch=1, timeout=5.0)
    syncs = DRV.fake_cuda_stream_syncs()
    DRV.fake_cuda_fail_stream_writes(1, ILLEGAL_ADDRESS)
    assert np.array_equal(np.frombuffer(c.call(1, x + 1), np.float32), x + 2)  # waited for
    assert DRV.fake_cuda_stream_syncs() > syncs
    DRV.fake_cuda_fail_stream_writes(1, ILLEGAL_ADDRESS)
    DRV.fake_cuda_fail_syncs_after(DTOH, 1)  # the wait for that batch's reply copy fails
    with pytest.raises(splitrpc.InternalError):
        c.call(1, x)
    writes = DRV.fake_cuda_stream_writes()
    for i in range(5):
        assert np.array_equal(np.frombuffer(c.call(1, x + i), np.float32), x + i + 1)
    assert DRV.fake_cuda_stream_writes() == writes + 5  # one store per batch again
    assert _idle(srv)["in_flight"] == 0


# Last in this file: after a NOT_SUPPORTED answer the runtime signals by host functions for the
# rest of the process, as it would with such a driver, and O2 (which needs the stores) cannot start.
def test_a_driver_without_stream_stores_signals_by_host_functions(make_server, make_client):
    """A driver that answers cuStreamWriteValue32 with NOT_SUPPORTED: that batch and every one
    after it is signalled by a host function on its stream instead (no store queued, none
    waited for), batches in flight included; an O2 function then fails its start, saying why,
    and leaves nothing behind in the driver's accounting."""
    srv, c, x = _serving(make_server, make_client, "o1", max_batch=4, timeout=10.0)
    writes = DRV.fake_cuda_stream_writes()
    DRV.fake_cuda_fail_stream_writes(1, NOT_SUPPORTED)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(256).astype(np.float32) for _ in range(300)]
    futs = [c.call_async(1, v) for v in xs]
    for v, f in zip(xs, futs):
        assert np.array_equal(np.frombuffer(f.result(), np.float32), v + 1)
    assert DRV.fake_cuda_stream_writes() == writes  # every done word since came from a host function
    st = _idle(srv)
    assert st["in_flight"] == 0 and st["errors"]["INTERNAL"] == 0

    import cupy

    def on_gpu(x, y):
        cupy.add(x, 1, out=y)

    on_gpu.o2_kernel = "vecadd"
    before = _live()
    o2 = splitrpc.Server("127.0.0.1", 0, wait="poll")
    o2.add_function(on_gpu, 1, "vecadd", [splitrpc.TensorSpec("x", F32, (256,))],
                    [splitrpc.TensorSpec("y", F32, (256,))], device="cuda:0", orchestration="o2")
    with pytest.raises(gpu.GPUError, match="no stream memory operations"):
        o2.start()
    o2.close()
    after = _live()
    assert {k: after[k] - before[k] for k in after if k != "live_modules"} == \
        {"vmm_live_mappings": 0, "vmm_live_reservations": 0, "vmm_live_handles": 0, "host_live": 0}, (before, after)


def test_a_callback_the_capture_refuses_runs_as_o1_and_says_why(make_server, make_client):
    """orchestration="graph" with a callback CuPy will not capture (cuBLAS: CuPy 14 refuses it during
    stream capture, as the first GPU run found, bench/results/gpu/): every call is still answered
    right, run as O1; stats()['graph_fallback'] names the function and the reason; a capturable
    function beside it (vecadd) is still captured and replayed."""
    import cupy

    def matmul(a, b, c):
        cupy.matmul(a, b, out=c)

    def vecadd(x, y):
        cupy.add(x, 1, out=y)

    def setup(s):
        s.add_function(vecadd, 1, "vecadd", [splitrpc.TensorSpec("x", F32, (256,))],
                       [splitrpc.TensorSpec("y", F32, (256,))], device="cuda:0", orchestration="graph", max_batch=8)
        s.add_function(matmul, 2, "matmul", [splitrpc.TensorSpec("a", F32, (8, 8)), splitrpc.TensorSpec("b", F32, (8, 8))],
                       [splitrpc.TensorSpec("c", F32, (8, 8))], device="cuda:0", orchestration="graph", max_batch=8)

    srv = make_server(setup, wait="poll")
    c = make_client(srv.port, timeout=10.0)
    rng = np.random.default_rng(3)
    reqs = [rng.standard_normal(128).astype(np.float32) for _ in range(40)]
    futs = [c.call_async(2, r) for r in reqs] + [c.call_async(1, np.arange(256, dtype=np.float32) + i)
                                                 for i in range(40)]
    for r, f in zip(reqs, futs[:40]):
        want = r[:64].reshape(8, 8) @ r[64:].reshape(8, 8)
        assert np.allclose(np.frombuffer(f.result(), np.float32).reshape(8, 8), want, rtol=1e-5, atol=1e-5)
    for i, f in enumerate(futs[40:]):
        assert np.array_equal(np.frombuffer(f.result(), np.float32), np.arange(256, dtype=np.float32) + i + 1)
    st = _idle(srv)
    assert set(st["graph_fallback"]) == {"matmul"}, st["graph_fallback"]
    assert "cuBLAS" in st["graph_fallback"]["matmul"] and "NotImplementedError" in st["graph_fallback"]["matmul"]
    assert st["errors"]["INTERNAL"] == 0 and st["in_flight"] == 0
    runners = {f.name: f.runner for f in srv._user_functions()}
    assert runners["vecadd"].graphs and not runners["matmul"].graphs  # vecadd replayed from its graphs


def test_a_stream_that_makes_no_progress_fails_its_wait_naming_it():
    """Every wait of the library on a stream has a deadline (SRPC_GPU_WAIT_TIMEOUT_MS, 5 s): with
    the emulated GPU making no progress (fake_cuda_hold_streams, SPLITRPC_EMULATED_FAULT=stream-hang
    in bench/gpu/run.sh's dry run), the wait fails with GPUError naming the stream and the wait
    instead of hanging; once the GPU runs again the work completes and a wait returns."""
    import cupy

    from splitrpc._native import gpu as native_gpu

    s = cupy.cuda.Stream(non_blocking=True)
    x = cupy.asarray(np.zeros(256, dtype=np.float32))
    DRV.fake_cuda_hold_streams(1)
    try:
        with s:
            cupy.add(x, 1, out=x)  # queued; the held GPU does not run it
        t0 = time.monotonic()
        with pytest.raises(gpu.GPUError, match=r"waiting for the stream's work on CUDA stream 0x[0-9a-f]+: not "
                                               r"completed after \d{4} ms"):
            native_gpu.stream_sync(s.ptr)
        assert 4.5 < time.monotonic() - t0 < 30
    finally:
        DRV.fake_cuda_hold_streams(0)
    native_gpu.stream_sync(s.ptr)
    assert np.array_equal(cupy.asnumpy(x), np.ones(256, np.float32))


def test_typed_functions_take_cupy_arrays(make_server, make_client):
    """Issue 53: a CuPy array (EMULATED device memory) given to a typed function is copied to the
    host (.get()) and called; a batch of them too; a device function's outputs come back as numpy."""
    import cupy

    srv, c, x = _serving(make_server, make_client, "o1")
    d = cupy.asarray(x)
    assert np.array_equal(c.fn.vecadd(d)[0], x + 1)
    xs = np.stack([x, 2 * x, 3 * x])
    y = c.function("vecadd")(cupy.asarray(xs))[0]
    assert isinstance(y, np.ndarray) and y.shape == (3, 256) and np.array_equal(y, xs + 1)
    from splitrpc.errors import DtypeMismatch
    with pytest.raises(DtypeMismatch):
        c.fn.vecadd(cupy.asarray(x.astype(np.float64)))


def test_typed_zoo_functions_take_cupy_arrays(make_server, make_client):
    """Issue 53: every built-in and zoo function (served on the CPU) called by name with CuPy
    arrays (EMULATED device memory), copied to the host; replies against the references."""
    torch = pytest.importorskip("torch")  # noqa: F841 - the zoo's models are PyTorch's
    import cupy
    from conftest import register_builtin_services
    from splitrpc.services.models import registry as zoo

    srv = make_server(lambda s: (register_builtin_services(s), zoo.register_models(s, "all", small=True)))
    c = make_client(srv.port, timeout=60.0)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(256).astype(np.float32)
    a, b = rng.standard_normal((2, 32, 32)).astype(np.float32)
    assert np.array_equal(c.fn.vecadd(cupy.asarray(x)).y, x + 1)
    assert np.allclose(c.fn.matmul(cupy.asarray(a), cupy.asarray(b)).c, a @ b, rtol=1e-5, atol=1e-5)
    img = rng.standard_normal((3, 224, 224)).astype(np.float32)
    assert np.array_equal(c.fn.head(cupy.asarray(img)).y, img.reshape(-1)[:1000])
    for name, info in zoo.MODELS.items():
        req = info.example(rng)
        out = c.function(name)(*(cupy.asarray(np.array(v)) for v in zoo.split(info.inputs, req)))
        assert zoo.check_reply(name, req, b"".join(o.tobytes() for o in out), small=True), name
