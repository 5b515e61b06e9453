"""The model zoo: I/O sizes, seeded weights, batching, in-place outputs, hostile inputs, serving (API, CLI, gRPC)."""
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

import splitrpc
from splitrpc.services import SERVICES
from splitrpc.services import models as zoo

from conftest import free_udp_port

torch = pytest.importorskip("torch", reason="the model zoo needs torch: pip install 'splitrpc[models]'")

SIZES = {"lenet": (784, 40), "lstm": (8192, 1024), "resnet18": (602112, 4000), "resnet50": (602112, 4000),
         "bert-like": (6152, 2056)}
NAMES = sorted(SIZES)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def run_env() -> dict:
    """cwd and environment in which only the installed splitrpc can be imported."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    return {"cwd": tempfile.gettempdir(), "env": env}


def requests_for(name: str, n: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [zoo.MODELS[name].example(rng) for _ in range(n)]


def floats(name: str, reply: bytes) -> np.ndarray:
    """The reply's float outputs, flattened."""
    info = zoo.MODELS[name]
    return np.concatenate([a.ravel() for a, s in zip(zoo.split(info.outputs, reply), info.outputs)
                           if s.np_dtype.kind == "f"])


# ------------------------------------------------------------------ the table


@pytest.mark.parametrize("name", NAMES)
def test_io_sizes_are_exact(name):
    info = zoo.MODELS[name]
    assert (info.request_size, info.reply_size) == SIZES[name]
    assert (sum(s.nbytes for s in info.inputs), sum(s.nbytes for s in info.outputs)) == SIZES[name]
    assert len(info.example(np.random.default_rng(0))) == SIZES[name][0]


def test_func_ids_are_distinct_and_clear_of_the_builtin_services():
    ids = [m.func_id for m in zoo.MODELS.values()]
    assert sorted(ids) == list(range(10, 15))
    assert not set(ids) & {s.func_id for s in SERVICES.values()}
    assert sorted(zoo.MODELS) == NAMES and all(m.name == n for n, m in zoo.MODELS.items())


def test_resolve_names():
    assert zoo.resolve("all") == list(zoo.MODELS)
    assert zoo.resolve(" lenet, bert-like ,lenet") == ["lenet", "bert-like"]
    assert zoo.resolve(["lstm"]) == ["lstm"]
    with pytest.raises(ValueError, match="nosuch"):
        zoo.resolve("lenet,nosuch")


def test_torch_is_optional(tmp_path):
    """splitrpc, its services, CLI and the zoo's table import without torch; building names the extra to install."""
    code = (
        "import sys\n"
        "import splitrpc, splitrpc.services, splitrpc.cli, splitrpc.bench.helpers.peers.grpc_peer\n"
        "from splitrpc.services import models\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "assert models.MODELS['lenet'].request_size == 784\n"
        "sys.modules['torch'] = None  # as if not installed\n"
        "try:\n"
        "    models.MODELS['lenet'].build()\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, **run_env())
    assert out.returncode == 0, out.stderr
    assert "pip install 'splitrpc[models]'" in out.stdout


# ------------------------------------------------------------------ the callbacks (small configurations, CPU)


@pytest.mark.parametrize("name", NAMES)
def test_weights_are_deterministic_for_a_seed(name):
    info = zoo.MODELS[name]
    state = torch.get_rng_state()
    a, b, c = (info.build(small=True, seed=s).module.state_dict() for s in (0, 0, 1))
    assert torch.equal(torch.get_rng_state(), state)  # torch's global RNG is left alone
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point())
    req = requests_for(name, 1)
    assert zoo.reference(name, req[0], small=True, seed=0) == zoo.run_batch(info.build(small=True), info, req)[0]
    assert zoo.reference(name, req[0], small=True, seed=1) != zoo.reference(name, req[0], small=True, seed=0)


@pytest.mark.parametrize("name", NAMES)
def test_batched_equals_unbatched(name):
    info = zoo.MODELS[name]
    cb = info.build(small=True)
    reqs = requests_for(name, 3, seed=7)
    batched = zoo.run_batch(cb, info, reqs)
    for req, rep in zip(reqs, batched):
        one = zoo.run_batch(cb, info, [req])[0]
        want = floats(name, one)
        assert np.allclose(floats(name, rep), want, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(want).max()))
        assert zoo.check_reply(name, req, rep, small=True)
    # the rows differ: each is its own request's answer
    assert not np.allclose(floats(name, batched[0]), floats(name, batched[1]), rtol=zoo.RTOL, atol=zoo.RTOL)


@pytest.mark.parametrize("name", NAMES)
def test_outputs_are_written_in_place(name):
    info = zoo.MODELS[name]
    cb = info.build(small=True)
    reqs = requests_for(name, 2, seed=3)
    per_call = [zoo.split(info.inputs, r) for r in reqs]
    ins = [np.stack([p[k] for p in per_call]) for k in range(len(info.inputs))]
    outs = []
    for s in info.outputs:
        a = np.empty((2, *s.shape), s.np_dtype)
        a[...] = np.nan if s.np_dtype.kind == "f" else -1  # poison
        outs.append(a)
    ptrs = [o.ctypes.data for o in outs]
    assert cb(*ins, *outs) is None
    assert [o.ctypes.data for o in outs] == ptrs
    for o, s in zip(outs, info.outputs):
        assert np.all(np.isfinite(o)) if s.np_dtype.kind == "f" else np.all(o >= 0)
    for i, req in enumerate(reqs):
        assert zoo.check_reply(name, req, b"".join(o[i].tobytes() for o in outs), small=True)


def test_check_reply_rejects_wrong_replies():
    for name in ("lenet", "bert-like"):
        a, b = requests_for(name, 2, seed=11)
        ra, rb = zoo.reference(name, a, small=True), zoo.reference(name, b, small=True)
        assert zoo.check_reply(name, a, ra, small=True)
        assert not zoo.check_reply(name, a, rb, small=True)      # another request's answer
        assert not zoo.check_reply(name, a, ra[:-1], small=True)  # wrong length
        assert not zoo.check_reply(name, a, ra, small=True, seed=1)  # other weights' answer
        nan = bytearray(ra)
        nan[:4] = np.float32(np.nan).tobytes()
        assert not zoo.check_reply(name, a, bytes(nan), small=True)
    # bert-like: a span that is not the best of the reply's logits, or outside the valid length
    info = zoo.MODELS["bert-like"]
    logits, span = zoo.split(info.outputs, ra)
    s, e = divmod(int(span[0]), 1024)
    for other in ((s, e + 1), (e + 1, e), (0, 383)):
        bad = logits.tobytes() + np.array([other[0] * 1024 + other[1]], "<i8").tobytes()
        assert not zoo.check_reply("bert-like", a, bad, small=True)


@pytest.mark.parametrize("name", NAMES)
def test_read_only_inputs_are_copied_not_handed_to_torch_as_writable(name, monkeypatch):
    """Inputs are read-only by contract; one in read-only memory (a view of immutable request
    bytes, as the benchmark peers decode) reaches torch as a copy, never through torch.from_numpy
    (which would warn that the tensor could write it), and gives the same reply."""
    info = zoo.MODELS[name]
    cb = info.build(small=True)
    req = requests_for(name, 1, seed=4)[0]
    read_only = [a[None] for a in zoo.split(info.inputs, req)]
    assert not any(a.flags.writeable for a in read_only)
    from_numpy = torch.from_numpy

    def checked(a):
        assert a.flags.writeable, "torch.from_numpy got read-only memory"
        return from_numpy(a)

    monkeypatch.setattr(torch, "from_numpy", checked)
    outs = [np.empty((1, *s.shape), s.np_dtype) for s in info.outputs]
    cb(*read_only, *outs)
    want = [np.empty((1, *s.shape), s.np_dtype) for s in info.outputs]
    cb(*(np.array(a) for a in read_only), *want)  # writable copies: zero-copy into torch
    for o, w in zip(outs, want):
        assert np.array_equal(o, w)


def test_lenet_takes_uint8_pixels():
    info = zoo.MODELS["lenet"]
    assert [s.np_dtype for s in info.inputs] == [np.dtype(np.uint8)]
    cb = info.build(small=True)
    imgs = np.stack([np.zeros((1, 28, 28), np.uint8), np.full((1, 28, 28), 255, np.uint8),
                     np.random.default_rng(0).integers(0, 256, (1, 28, 28), dtype=np.uint8)])
    out = np.full((3, 10), np.nan, np.float32)
    cb(imgs, out)
    assert np.all(np.isfinite(out))
    assert not np.allclose(out[0], out[1]) and not np.allclose(out[1], out[2])
    with torch.inference_mode():
        direct = cb.module(torch.from_numpy(imgs))[0].numpy()
    assert np.array_equal(out, direct)


def test_bert_like_survives_hostile_integers():
    info = zoo.MODELS["bert-like"]
    cb = info.build(small=True)
    big, small_ = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    rng = np.random.default_rng(5)
    b = 6
    ids = rng.integers(small_, big, (b, 384), dtype=np.int64, endpoint=True)
    ids[0, :4] = [-1, small_, big, 30522]
    seg = rng.integers(small_, big, (b, 384), dtype=np.int64, endpoint=True)
    seg[1] = -5
    seg[2] = 1 << 40
    valid = np.array([[0], [-3], [385], [big], [small_], [1]], np.int64)
    logits = np.full((b, 2, 256), np.nan, np.float32)
    span = np.full((b, 1), -1, np.int64)
    cb(ids, seg, valid, logits, span)
    assert np.all(np.isfinite(logits))
    for i in range(b):
        n = min(max(int(valid[i, 0]), 1), 384)
        s, e = divmod(int(span[i, 0]), 1024)
        assert 0 <= s <= e < min(n, 256) and e - s < 30, (i, s, e)
        req = ids[i].tobytes() + seg[i].tobytes() + valid[i].tobytes()
        assert zoo.check_reply("bert-like", req, logits[i].tobytes() + span[i].tobytes(), small=True)
    # a valid length of 0, 1 or below: only position 0 can be the answer
    assert span[0, 0] == span[1, 0] == span[4, 0] == span[5, 0] == 0
    # ids are taken modulo the vocabulary: id + vocab is the same token
    vocab = cb.module.config.vocab
    one = [np.array(x) for x in zoo.split(info.inputs, requests_for("bert-like", 1)[0])]  # writable copies
    shifted = [one[0] + vocab * rng.integers(-1000, 1000, 384)] + one[1:]
    out_a = [np.empty((1, *s.shape), s.np_dtype) for s in info.outputs]
    out_b = [np.empty((1, *s.shape), s.np_dtype) for s in info.outputs]
    cb(*(x[None] for x in one), *out_a)
    cb(*(x[None] for x in shifted), *out_b)
    assert np.array_equal(out_a[0], out_b[0]) and np.array_equal(out_a[1], out_b[1])


@pytest.mark.parametrize("name", NAMES)
def test_full_size_configuration(name):
    """The full models (ResNet-50 included, one image: about 0.1-1 s on a CPU) answer like their reference."""
    info = zoo.MODELS[name]
    cb = info.build(small=False)
    n = 2 if name in ("lenet", "lstm") else 1
    reqs = requests_for(name, n, seed=2)
    for req, rep in zip(reqs, zoo.run_batch(cb, info, reqs)):
        assert np.all(np.isfinite(floats(name, rep)))
        assert zoo.check_reply(name, req, rep, small=False)


def test_register_models_passes_device_only_off_the_cpu(monkeypatch):
    calls = []

    class FakeServer:
        def add_function(self, fn, func_id, name, inputs, outputs, **kw):
            calls.append((func_id, name, sum(s.nbytes for s in inputs), sum(s.nbytes for s in outputs), kw))

    built = []
    monkeypatch.setattr(zoo.ModelInfo, "build",
                        lambda self, device="cpu", small=False, seed=0: built.append((self.name, device, small)))
    zoo.register_models(FakeServer(), "lenet,bert-like", max_batch=4, max_delay_us=50, small=True)
    zoo.register_models(FakeServer(), ["resnet50"], device="cuda:0")
    assert [c[:4] for c in calls] == [(10, "lenet", 784, 40), (14, "bert-like", 6152, 2056),
                                      (13, "resnet50", 602112, 4000)]
    assert calls[0][4] == {"max_batch": 4, "max_delay_us": 50, "capacity": 256}
    assert "device" not in calls[1][4]
    assert calls[2][4]["device"] == "cuda:0" and calls[2][4]["capacity"] == 64
    # without a CUDA device torch runs the model on the CPU (the server falls back to host memory)
    gpu = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert built == [("lenet", "cpu", True), ("bert-like", "cpu", True), ("resnet50", gpu, False)]


# ------------------------------------------------------------------ served


def test_served_end_to_end(make_server, make_client):
    """A real server with lenet and bert-like (small): single calls and concurrent ones (batched)."""
    srv = make_server(lambda s: zoo.register_models(s, "lenet,bert-like", small=True, max_batch=8))
    c = make_client(srv.port, timeout=10.0)
    for name in ("lenet", "bert-like"):
        info = zoo.MODELS[name]
        reqs = requests_for(name, 8, seed=21)
        assert zoo.check_reply(name, reqs[0], c.call(info.func_id, reqs[0]), small=True)
        futs = [c.call_async(info.func_id, r) for r in reqs]
        for req, fut in zip(reqs, futs):
            rep = fut.result(timeout=30)
            assert len(rep) == info.reply_size and zoo.check_reply(name, req, rep, small=True)
        with pytest.raises(splitrpc.BadRequest):
            c.call(info.func_id, reqs[0][:-1])
    st = srv.stats()
    assert st["functions"] == {"lenet": 9, "bert-like": 9}
    assert st["errors"]["INTERNAL"] == 0


@needs_cuda
@pytest.mark.parametrize("name", NAMES)
def test_cuda_matches_the_cpu(name):
    """On a GPU: torch tensors on the device in and out (the gRPC peer's way), and CuPy arrays if installed."""
    info = zoo.MODELS[name]
    cb = info.build(device="cuda", small=True)
    reqs = requests_for(name, 3, seed=4)
    per_call = [zoo.split(info.inputs, r) for r in reqs]
    ins = [torch.from_numpy(np.stack([p[k] for p in per_call])).cuda() for k in range(len(info.inputs))]
    dtypes = [torch.from_numpy(np.empty(0, s.np_dtype)).dtype for s in info.outputs]
    outs = [torch.full((3, *s.shape), -1, dtype=t, device="cuda") for s, t in zip(info.outputs, dtypes)]
    cb(*ins, *outs)
    host = [o.cpu().numpy() for o in outs]
    for i, req in enumerate(reqs):
        assert zoo.check_reply(name, req, b"".join(h[i].tobytes() for h in host), small=True)
    cupy = pytest.importorskip("cupy")
    cins = [cupy.asarray(t.cpu().numpy()) for t in ins]
    couts = [cupy.zeros((3, *s.shape), s.np_dtype) for s in info.outputs]
    with cupy.cuda.Stream(non_blocking=True) as stream:
        cb(*cins, *couts)
        stream.synchronize()
    for i, req in enumerate(reqs):
        assert zoo.check_reply(name, req, b"".join(cupy.asnumpy(o[i]).tobytes() for o in couts), small=True)


# ------------------------------------------------------------------ command line and gRPC peer


def splitrpc_cmd(*args):
    return [sys.executable, "-m", "splitrpc", *args]


def test_cli_serves_and_calls_a_model():
    port = free_udp_port()
    proc = subprocess.Popen(splitrpc_cmd("serve", "--port", str(port), "--wait", "block", "--models", "lenet",
                                         "--small", "--drain-linger", "0"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **run_env())
    try:
        end = time.monotonic() + 60
        while True:
            p = subprocess.run(splitrpc_cmd("call", "lenet", "--port", str(port), "--timeout", "1"),
                               capture_output=True, text=True, timeout=120, **run_env())
            if p.returncode == 0 or time.monotonic() > end or proc.poll() is not None:
                break
            time.sleep(0.3)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "784 B request -> 40 B reply" in p.stdout
        assert "reply matches the model's output within tolerance: True" in p.stdout
        assert "logits float32[10]" in p.stdout
        v = subprocess.run(splitrpc_cmd("call", "vecadd", "--port", str(port), "--timeout", "1"),
                           capture_output=True, text=True, timeout=60, **run_env())
        assert "reply matches the expected output: True" in v.stdout  # the built-in services are still there
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert "lenet(10)" in out and "(small)" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)


def test_cli_rejects_an_unknown_model():
    p = subprocess.run(splitrpc_cmd("serve", "--port", str(free_udp_port()), "--models", "lenet,nosuch"),
                       capture_output=True, text=True, timeout=60, **run_env())
    assert p.returncode == 2 and "nosuch" in p.stderr


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("variant", ["sync", "asyncio"])
def test_grpc_peer_serves_a_model(variant):
    grpc = pytest.importorskip("grpc")
    from splitrpc.bench.helpers.peers import grpc_peer

    port = free_tcp_port()
    cmd = [sys.executable, "-m", "splitrpc.bench.helpers.peers.grpc_peer", "serve", "--service", "echo", "--port", str(port),
           "--variant", variant, "--models", "lenet,bert-like", "--small"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **run_env())
    try:
        out, end = b"", time.monotonic() + 60
        while b"READY\n" not in out:
            if time.monotonic() > end or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"grpc_peer did not print READY: {proc.stderr.read().decode(errors='replace')[-3000:]}")
            if select.select([proc.stdout], [], [], 0.5)[0]:
                out += os.read(proc.stdout.fileno(), 4096)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            for name in ("lenet", "bert-like"):
                call = ch.unary_unary(grpc_peer.method(name))
                for req in requests_for(name, 2, seed=9):
                    assert zoo.check_reply(name, req, call(req, timeout=30), small=True)
                with pytest.raises(grpc.RpcError) as ei:
                    call(b"short", timeout=30)
                assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert ch.unary_unary(grpc_peer.method("echo"))(b"still here", timeout=30) == b"still here"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
