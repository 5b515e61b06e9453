"""GPU data path: device parsing, the CPU fallback of device="cuda:N" functions, staging TQs laid out like device TQs, and (where a GPU and CuPy exist) real GPU functions with batches in flight."""
import logging
import os
import time

import numpy as np
import pytest
from conftest import settled

import splitrpc
from splitrpc import gpu
from splitrpc._native import ffi, lib

F32 = "float32"
HAS_GPU = gpu.available(0)


def has_cupy() -> bool:
    try:
        gpu.import_cupy()
        return True
    except ImportError:
        return False


needs_gpu = pytest.mark.skipif(not (HAS_GPU and has_cupy()), reason="needs a CUDA GPU and CuPy")


def vecadd(x, y):
    y[...] = x + 1


vecadd.o2_kernel = "vecadd"


def vec_fn(srv, func_id=1, **kw):
    srv.add_function(vecadd, func_id, "vecadd", [splitrpc.TensorSpec("x", F32, (256,))],
                     [splitrpc.TensorSpec("y", F32, (256,))], **kw)


@pytest.mark.parametrize("text,ordinal", [("cpu", -1), ("cuda", 0), ("cuda:0", 0), ("cuda:3", 3)])
def test_parse_device(text, ordinal):
    assert gpu.parse_device(text) == ordinal


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:x", "CUDA:0", "cuda:-1", "", "cuda:0 "])
def test_parse_device_rejects(text):
    with pytest.raises(ValueError, match="device must be"):
        gpu.parse_device(text)


def test_bad_orchestration_and_raw_on_gpu():
    srv = splitrpc.Server("127.0.0.1", 0)
    try:
        with pytest.raises(ValueError, match="orchestration"):
            vec_fn(srv, orchestration="o3")
        with pytest.raises(ValueError, match="raw function cannot run on a GPU"):
            srv.add_function(lambda q, r: [], 2, "echo", raw=True, device="cuda:0")
        assert srv.stats()["functions"] == {}
    finally:
        srv.close()


def test_o2_refuses_what_its_kernel_cannot_do():
    """O2 runs a compiled vecadd kernel: refused for any other callback or tensor layout,
    on every machine (before looking for a GPU), so a setup error does not hide behind a
    CPU fallback."""
    spec = splitrpc.TensorSpec
    srv = splitrpc.Server("127.0.0.1", 0)
    try:
        with pytest.raises(ValueError, match="o2_kernel"):
            srv.add_function(lambda x, y: None, 1, "f", [spec("x", F32, (256,))], [spec("y", F32, (256,))],
                             device="cuda:0", orchestration="o2")
        bad = [([spec("x", F32, (256,))], [spec("y", F32, (255,))], "same size"),
               ([spec("x", "int32", (256,))], [spec("y", "int32", (256,))], "float32"),
               ([spec("x", F32, (4,)), spec("z", F32, (4,))], [spec("y", F32, (4,))], "one input")]
        for ins, outs, msg in bad:
            with pytest.raises(ValueError, match=msg):
                srv.add_function(vecadd, 1, "f", ins, outs, device="cuda:0", orchestration="o2")
        with pytest.raises(ValueError, match="one input and one output"):
            srv.add_function(vecadd, 2, "echo", raw=True, orchestration="o2")
        assert srv.stats()["functions"] == {}
    finally:
        srv.close()


@pytest.mark.skipif(HAS_GPU, reason="checks the behaviour without a GPU")
def test_without_gpu_the_driver_says_why():
    assert not gpu.available(0)
    assert lib.srpc_gpu_device_count() == -19 or lib.srpc_gpu_device_count() == 0  # -ENODEV
    with pytest.raises(gpu.GPUUnavailable, match="cuda:0 is not usable"):
        gpu.probe(0)
    assert gpu.last_error() != ""


@pytest.mark.skipif(HAS_GPU, reason="checks the fallback without a GPU")
@pytest.mark.parametrize("orchestration", ["o1", "graph", "o2"])
def test_cuda_function_falls_back_to_host(make_server, make_client, caplog, orchestration):
    with caplog.at_level(logging.WARNING, logger="splitrpc.server"):
        srv = make_server(lambda s: vec_fn(s, device="cuda:0", orchestration=orchestration))
    assert any("serving it from host memory" in r.getMessage() for r in caplog.records)
    c = make_client(srv.port, timeout=2.0)
    x = np.arange(256, dtype=np.float32)
    assert np.array_equal(np.frombuffer(c.call(1, x), np.float32), x + 1)
    st = settled(srv, lambda st: st["in_flight"] == 0)  # counted finished just after its reply
    assert st["devices"] == {"vecadd": "cpu"} and st["in_flight"] == 0


def test_staging_tq_has_the_device_ring_size():
    """srpc_tq_create_aligned: the ring is a multiple of the alignment (a GPU's 2 MiB
    granularity), so host staging and device TQ put element seq at the same offset."""
    out = ffi.new("srpc_tq_t **")
    two_mib = 2 << 20
    assert lib.srpc_tq_create_aligned(1024, 300, two_mib, out) == 0
    tq = out[0]
    try:
        assert lib.srpc_tq_ring_bytes(tq) == two_mib
        base = int(ffi.cast("uintptr_t", lib.srpc_tq_base(tq)))
        assert int(ffi.cast("uintptr_t", lib.srpc_tq_elem(tq, 2048 + 5))) == base + 5 * 1024
        # the mirror: the upper mapping shows what the lower one holds
        ffi.buffer(lib.srpc_tq_base(tq), 4)[:] = b"abcd"
        assert ffi.buffer(lib.srpc_tq_base(tq) + two_mib, 4)[:] == b"abcd"
    finally:
        lib.srpc_tq_destroy(tq)
    for bad in (0, 3, 3 << 20):
        assert lib.srpc_tq_create_aligned(1024, 4, bad, out) == -22  # -EINVAL: not a power of two
    assert lib.srpc_tq_create_aligned(1024, 4, 1, out) == 0  # smaller than a page: pages
    assert lib.srpc_tq_ring_bytes(out[0]) == os.sysconf("SC_PAGE_SIZE")
    lib.srpc_tq_destroy(out[0])


# ---------------------------------------------------------------------- on a real GPU


@needs_gpu
@pytest.mark.parametrize("orchestration", ["o1", "graph", "o2"])
def test_gpu_vecadd_many_batches_in_flight(make_server, make_client, orchestration):
    """1000-float (4000 B) elements do not divide the 2 MiB ring: 1200 calls go round it twice,
    with elements and batches that straddle its end (the mirror on the device, two copies or
    two output addresses on the host)."""
    import cupy

    seen = []

    def on_gpu(x, y):
        seen.append(type(x))
        cupy.add(x, 1, out=y)

    on_gpu.o2_kernel = "vecadd"

    def setup(s):
        s.add_function(on_gpu, 1, "vecadd", [splitrpc.TensorSpec("x", F32, (1000,))],
                       [splitrpc.TensorSpec("y", F32, (1000,))], device="cuda:0", orchestration=orchestration,
                       capacity=64, max_batch=8)

    srv = make_server(setup, wait="poll")
    c = make_client(srv.port, timeout=5.0)
    rng = np.random.default_rng(1)
    for _ in range(4):
        xs = [rng.standard_normal(1000).astype(np.float32) for _ in range(300)]
        futs = [c.call_async(1, x) for x in xs]
        for x, f in zip(xs, futs):
            assert np.array_equal(np.frombuffer(f.result(), np.float32), x + 1)
    st = srv.stats()
    end = time.monotonic() + 5  # a batch's replies go out before the worker counts it finished
    while st["in_flight"] and time.monotonic() < end:
        time.sleep(0.01)
        st = srv.stats()
    assert st["devices"] == {"vecadd": "cuda:0"} and st["in_flight"] == 0 and st["calls"] == 1200
    assert st["mean_batch"] > 1
    # every call's server time counted once, when its deferred batch finished (issue 55): it holds the queue delay
    fs = st["by_function"]["vecadd"]
    assert fs["service"]["count"] == fs["queue_delay"]["count"] == 1200
    assert fs["service"]["sum_us"] >= fs["queue_delay"]["sum_us"] > 0
    if orchestration == "o2":
        assert not seen  # the persistent kernel did the work
    else:
        assert seen and all(t is cupy.ndarray for t in seen)


@needs_gpu
def test_gpu_callback_error_answers_internal(make_server, make_client):
    def boom(x, y):
        raise RuntimeError("kernel exploded")

    srv = make_server(lambda s: s.add_function(boom, 1, "boom", [splitrpc.TensorSpec("x", F32, (4,))],
                                               [splitrpc.TensorSpec("y", F32, (4,))], device="cuda:0"))
    c = make_client(srv.port, timeout=5.0)
    with pytest.raises(splitrpc.InternalError, match="kernel exploded"):
        c.call(1, np.zeros(4, np.float32))


def _device_vecadd(make_server, make_client):
    """vecadd served on cuda:0 by a CuPy callback, and a client of it."""
    import cupy

    def on_gpu(x, y):
        cupy.add(x, 1, out=y)

    srv = make_server(lambda s: s.add_function(on_gpu, 1, "vecadd", [splitrpc.TensorSpec("x", F32, (256,))],
                                               [splitrpc.TensorSpec("y", F32, (256,))], device="cuda:0"))
    return srv, make_client(srv.port, timeout=5.0)


@needs_gpu
def test_typed_function_takes_cupy_arrays(make_server, make_client):
    """Issue 53 on a GPU: a CuPy array in device memory given to client.fn.vecadd is copied to the
    host and called, one call and a batch of them; the outputs are numpy; a wrong dtype refused."""
    import cupy
    from splitrpc.errors import DtypeMismatch

    srv, c = _device_vecadd(make_server, make_client)
    x = np.random.default_rng(5).standard_normal(256).astype(np.float32)
    y = c.fn.vecadd(cupy.asarray(x)).y
    assert type(y) is np.ndarray and np.array_equal(y, x + 1)
    xs = np.stack([x, 2 * x, 3 * x])
    ys = c.fn.vecadd(cupy.asarray(xs)).y
    assert type(ys) is np.ndarray and ys.shape == (3, 256) and np.array_equal(ys, xs + 1)
    with pytest.raises(DtypeMismatch):
        c.fn.vecadd(cupy.asarray(x.astype(np.float64)))


@needs_gpu
def test_typed_function_takes_cuda_torch_tensors(make_server, make_client):
    """Issue 53 on a GPU: a CUDA PyTorch tensor given to client.fn.vecadd is copied to the host and
    called, one call and a batch; the outputs are numpy."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch here has no CUDA (torch.cuda.is_available() is False)")
    srv, c = _device_vecadd(make_server, make_client)
    x = np.random.default_rng(6).standard_normal(256).astype(np.float32)
    t = torch.from_numpy(x).to("cuda:0")
    assert t.is_cuda
    assert np.array_equal(c.fn.vecadd(t).y, x + 1)
    xs = np.stack([x, -x])
    ys = c.fn.vecadd(torch.from_numpy(xs).cuda()).y
    assert type(ys) is np.ndarray and np.array_equal(ys, xs + 1)
