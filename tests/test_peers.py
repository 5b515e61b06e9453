"""The benchmark peers (bench/helpers/peers): their replies match splitrpc's services, and each peer's serve + client runs end to end."""
import importlib
import json
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

from splitrpc.bench.helpers import peers
from splitrpc.bench.helpers.peers import common
from splitrpc.services import SERVICES

READY_TIMEOUT_S = {"zmq_peer": 30, "grpc_peer": 30, "triton_peer": 180}
TRITON = os.environ.get("SPLITRPC_TEST_TRITON") == "1"
needs_triton = pytest.mark.skipif(not TRITON, reason="Triton starts slowly: set SPLITRPC_TEST_TRITON=1 to run")

# module -> what it needs imported (skipped where one is missing)
PACKAGES = {"zmq_peer": ("zmq",), "grpc_peer": ("grpc",), "triton_peer": ("pytriton", "tritonclient.grpc")}


def free_tcp_port(span: int = 1) -> int:
    """A TCP port on 127.0.0.1 such that it and the span-1 ports after it are free (bound, then closed)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + span > 65535:
            continue
        try:
            for p in range(base, base + span):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return base
    raise RuntimeError("no run of free TCP ports")


def peer_cmd(module: str, *args) -> list:
    return [sys.executable, "-m", f"splitrpc.bench.helpers.peers.{module}", *map(str, args)]


def run_env() -> dict:
    """cwd and environment in which only the installed splitrpc can be imported."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    return {"cwd": tempfile.gettempdir(), "env": env}


class PeerServer:
    """A peer's `serve` subprocess, up once it printed READY."""

    def __init__(self, module: str, service: str, variant: str | None = None):
        self.module = module
        self.port = free_tcp_port(3 if module == "triton_peer" else 1)
        args = ["serve", "--service", service, "--port", self.port]
        if variant:
            args += ["--variant", variant]
        self.proc = subprocess.Popen(peer_cmd(module, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     **run_env())
        self._wait_ready(READY_TIMEOUT_S[module])

    def _wait_ready(self, timeout: float) -> None:
        out, end = b"", time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"READY\n" not in out:
            left = end - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                self.kill()
                err = self.proc.stderr.read().decode(errors="replace")[-3000:]
                pytest.fail(f"{self.module} serve did not print READY (rc={self.proc.returncode}, stdout={out!r}): {err}")
            if select.select([fd], [], [], min(left, 0.5))[0]:
                chunk = os.read(fd, 4096)
                out += chunk
        assert out == b"READY\n", f"serve printed more than READY on stdout: {out!r}"

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def peer_server():
    """Factory of peer servers, each stopped at the end of the test."""
    made = []

    def make(module, service, variant=None):
        for pkg in PACKAGES[module]:
            pytest.importorskip(pkg)
        srv = PeerServer(module, service, variant)
        made.append(srv)
        return srv

    try:
        yield make
    finally:
        for s in made:
            s.stop()
            s.kill()


def run_client(module: str, port: int, service: str, *, variant=None, concurrency=1, calls=50, warmup=5,
               timeout_s=10.0) -> dict:
    args = ["client", "--service", service, "--port", port, "--concurrency", concurrency, "--calls", calls,
            "--warmup", warmup, "--timeout-s", timeout_s]
    if variant:
        args += ["--variant", variant]
    out = subprocess.run(peer_cmd(module, *args), capture_output=True, text=True, timeout=300, **run_env())
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 1, out.stdout[-2000:]
    return json.loads(lines[0])


def assert_clean_run(res: dict, module: str, service: str, concurrency: int, calls: int) -> None:
    mod = importlib.import_module(f"splitrpc.bench.helpers.peers.{module}")
    assert res["peer"] == mod.PEER and res["service"] == service and res["concurrency"] == concurrency
    assert res["variant"] in mod.VARIANTS
    assert (res["errors"], res["invalid"], res["error_text"]) == (0, 0, None)
    assert len(res["lat_ns"]) == calls and all(isinstance(v, int) and v > 0 for v in res["lat_ns"])
    assert res["elapsed_s"] > 0


# ------------------------------------------------------------------ the computation (no peer package needed)


@pytest.mark.parametrize("service", common.SERVICE_NAMES)
def test_compute_gives_the_expected_reply(service):
    for seed in range(4):
        req = common.fixed_request(service, seed)
        assert common.compute(service, req) == SERVICES[service].expected(req)
        assert common.compute(service, memoryview(req)) == SERVICES[service].expected(req)


@pytest.mark.parametrize("service", sorted(common.TENSORS))
def test_compute_batch_equals_one_call_per_row(service):
    reqs = [common.fixed_request(service, seed) for seed in range(3)]
    decoded = [common.decode(service, r) for r in reqs]
    batched = [np.concatenate([d[k] for d in decoded]) for k in range(len(decoded[0]))]
    outs = common.compute_batch(service, batched)
    for row, req in enumerate(reqs):
        assert b"".join(o[row].tobytes() for o in outs) == SERVICES[service].expected(req)


@pytest.mark.parametrize("service", sorted(common.TENSORS))
def test_decode_rejects_a_request_of_the_wrong_size(service):
    req = common.fixed_request(service)
    with pytest.raises(ValueError, match=service):
        common.decode(service, req[:-4])
    with pytest.raises(ValueError):
        common.compute(service, req + b"\0\0\0\0")


def test_tally_counts_failures_wrong_replies_and_missing_calls():
    t = common.Tally(5, b"ok", give_up_after=10)
    t.reply(0, 100, b"ok")
    t.reply(1, 100, b"no")
    t.fail(2, "boom")
    t.finish()
    assert t.lat_ns == [100, 0, 0, 0, 0]
    assert (t.errors, t.invalid) == (3, 1)
    assert t.error_text.startswith("invalid reply")


def test_every_peer_module_says_whether_it_can_run():
    for name, module in peers.PEER_MODULES.items():
        mod = importlib.import_module(f"splitrpc.bench.helpers.peers.{module}")
        ok, why = mod.available()
        assert mod.PEER == name and isinstance(ok, bool) and why
        assert mod.VARIANTS


# ------------------------------------------------------------------ pyzmq


@pytest.mark.parametrize("service,concurrency", [("vecadd", 1), ("vecadd", 8), ("matmul", 4), ("head", 4),
                                                 ("echo", 4)])
def test_zmq_peer(peer_server, service, concurrency):
    srv = peer_server("zmq_peer", service)
    res = run_client("zmq_peer", srv.port, service, concurrency=concurrency, calls=60)
    assert_clean_run(res, "zmq_peer", service, concurrency, 60)
    assert srv.stop() == 0


def test_zmq_peer_answers_a_bad_request_with_an_error(peer_server):
    zmq = pytest.importorskip("zmq")
    srv = peer_server("zmq_peer", "vecadd")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.rcvtimeo = 10_000
    try:
        sock.connect(f"tcp://127.0.0.1:{srv.port}")
        sock.send_multipart([(7).to_bytes(8, "little"), b"short"])
        tag, err, text = sock.recv_multipart()
    finally:
        sock.close()
        ctx.term()
    assert (int.from_bytes(tag, "little"), err) == (7, b"ERR") and b"vecadd" in text
    assert srv.stop() == 0  # SIGTERM stops it (it once waited in libzmq past it, until killed)


def test_zmq_client_without_a_server_reports_errors():
    pytest.importorskip("zmq")
    res = run_client("zmq_peer", free_tcp_port(), "vecadd", concurrency=2, calls=20, warmup=0, timeout_s=0.2)
    assert res["errors"] == 20 and res["lat_ns"] == [0] * 20 and "timeout" in res["error_text"]


# ------------------------------------------------------------------ grpcio


@pytest.mark.parametrize("variant", ["sync", "asyncio"])
@pytest.mark.parametrize("service,concurrency", [("vecadd", 1), ("vecadd", 8), ("matmul", 4), ("head", 4),
                                                 ("echo", 4)])
def test_grpc_peer(peer_server, variant, service, concurrency):
    srv = peer_server("grpc_peer", service, variant)
    res = run_client("grpc_peer", srv.port, service, variant=variant, concurrency=concurrency, calls=60)
    assert_clean_run(res, "grpc_peer", service, concurrency, 60)
    assert res["variant"] == variant
    assert srv.stop() == 0


@pytest.mark.parametrize("variant", ["sync", "asyncio"])
def test_grpc_peer_answers_a_bad_request_with_invalid_argument(peer_server, variant):
    grpc = pytest.importorskip("grpc")
    from splitrpc.bench.helpers.peers import grpc_peer

    srv = peer_server("grpc_peer", "vecadd", variant)
    with grpc.insecure_channel(f"127.0.0.1:{srv.port}") as ch:
        with pytest.raises(grpc.RpcError) as ei:
            ch.unary_unary(grpc_peer.method("vecadd"))(b"short", timeout=10)
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_grpc_client_without_a_server_reports_errors():
    pytest.importorskip("grpc")
    res = run_client("grpc_peer", free_tcp_port(), "vecadd", concurrency=2, calls=20, warmup=0, timeout_s=2.0)
    assert res["errors"] == 20 and res["lat_ns"] == [0] * 20 and "UNAVAILABLE" in res["error_text"]


@pytest.mark.parametrize("module,variant", [("zmq_peer", None), ("grpc_peer", "sync"), ("grpc_peer", "asyncio")])
def test_serve_stops_on_sigint(peer_server, module, variant):
    srv = peer_server(module, "echo", variant)
    assert srv.stop(signal.SIGINT) == 0


# ------------------------------------------------------------------ Triton (opt-in)


@needs_triton
@pytest.mark.parametrize("service", ["vecadd", "head", "echo"])
def test_triton_peer(peer_server, service):
    srv = peer_server("triton_peer", service)
    for concurrency in (1, 4):
        res = run_client("triton_peer", srv.port, service, concurrency=concurrency, calls=40)
        assert_clean_run(res, "triton_peer", service, concurrency, 40)
    assert srv.stop() == 0
