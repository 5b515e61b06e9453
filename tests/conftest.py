"""conftest.py: the tests' shared server fixtures and helpers (the root conftest.py makes the installed splitrpc the one imported)."""
import gc
import os
import shutil
import socket
import sys
import time

import pytest

_TESTS = os.path.dirname(os.path.abspath(__file__))
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)  # the shared helper wire_ref.py

import splitrpc  # noqa: E402
from splitrpc.services import register_builtin_services  # noqa: E402
from splitrpc.services.fleet.cluster import LOOPBACK_ENV  # noqa: E402 - no ray import

for _k, _v in LOOPBACK_ENV.items():  # Ray on 127.0.0.1 only, whichever test imports it first
    os.environ.setdefault(_k, _v)


def free_udp_port() -> int:
    """A UDP port on 127.0.0.1 that nobody listens on (bound, read and closed again)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_port():
    """A UDP port on 127.0.0.1 where a socket is bound and never answers (a server that is there
    but silent: no ICMP "port unreachable", so calls wait for their timeout); closed after the test."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def splitrpc_cmd(*args) -> list:
    """`python -m splitrpc ARGS` with this interpreter."""
    return [sys.executable, "-m", "splitrpc", *args]


@pytest.fixture
def run_env(tmp_path):
    """cwd and environment in which only the installed splitrpc can be imported (subprocess kwargs)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    return {"cwd": str(tmp_path), "env": env}


def read_until(p, done, timeout: float = 60.0) -> list:
    """Reads process p's stdout lines until done(line) is true; the lines read, that one last.
    Fails with p's stderr if p exits first, or after timeout seconds."""
    lines = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        line = p.stdout.readline()
        if not line:
            raise AssertionError(f"the process exited: {p.stderr.read()}")
        lines.append(line)
        if done(line):
            return lines
    raise AssertionError(f"no such line in {timeout:g} s; read: {lines[-5:]}")


def wait_for(pred, timeout: float = 5.0, interval: float = 0.005):
    """Polls pred() until it is truthy (returns its value) or the timeout passes (returns the last value)."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > end:
            return v
        time.sleep(interval)


def settled(srv, pred, timeout: float = 5.0) -> dict:
    """srv.stats() once pred(stats) holds (or the last one after the timeout): the library's own
    helper (splitrpc.check.serving.settled). A counter of what was sent is bumped just after the
    send, so a client can see a reply a moment before it."""
    from splitrpc.check.serving import settled as library_settled

    return library_settled(srv, pred, timeout)


@pytest.fixture(scope="session")
def emulated_gpu_build(tmp_path_factory):
    """A CMake build tree (native tests on, no Python extension, no DPDK) with the emulated
    driver (fake_cuda/libcuda.so.1, native/tests/fake_libcuda.c), test_gpu, test_fake_cuda and test_embed_gpu,
    built once per session; the kernels are compiled in where nvcc exists."""
    import pathlib
    import shutil
    import subprocess

    root = pathlib.Path(__file__).resolve().parents[1]
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.fail("cmake is needed for the native tests: pip install '.[test]' provides it")
    d = tmp_path_factory.mktemp("native-emulated-gpu")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    cfg = subprocess.run([cmake, "-S", str(root), "-B", str(d), *gen, "-DSPLITRPC_TESTS=ON", "-DSPLITRPC_PYTHON=OFF",
                          "-DSPLITRPC_DPDK=OFF"], capture_output=True, text=True)
    assert cfg.returncode == 0, cfg.stdout[-4000:] + cfg.stderr[-4000:]
    bld = subprocess.run([cmake, "--build", str(d), "-j", "2", "--target", "test_gpu", "test_fake_cuda", "fake_cuda",
                          "test_embed_gpu"],
                         capture_output=True, text=True)
    assert bld.returncode == 0, bld.stdout[-4000:] + bld.stderr[-4000:]
    return d


def emulated_gpu_env(build) -> dict:
    """os.environ with the emulated driver first on the library path and the emulated CuPy
    (tests/emu) first on the Python path: a child process then sees a GPU (EMULATED)."""
    def first(path: str, var: str) -> str:  # no empty entry: it would mean the working directory
        return os.pathsep.join([path] + [p for p in os.environ.get(var, "").split(os.pathsep) if p])

    return dict(os.environ, LD_LIBRARY_PATH=first(str(build / "fake_cuda"), "LD_LIBRARY_PATH"),
                PYTHONPATH=first(os.path.join(_TESTS, "emu"), "PYTHONPATH"))


@pytest.fixture
def builtin_server(_heap_frozen):
    """A running server with the four built-in services, idle-efficient (wait="block")."""
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    register_builtin_services(srv)
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


def require_redis_server() -> None:
    """Fails the calling test module where Debian's redis-server is missing: the Redis tier is
    tested against a real one (.ci/run installs it)."""
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is needed (Debian: apt-get install redis-server; .ci/run installs it)")


@pytest.fixture
def _heap_frozen():
    """The test process's heap frozen (gc.freeze) while an in-process server runs. After the torch
    tests, a full collection of this process scanned that heap for up to 270 ms (measured with
    gc.callbacks), holding the GIL: the server's worker could run no callback meanwhile, the
    function's queue filled at the offered rate, and the calls beyond it were answered BUSY
    (test_open_loop_latency_counts_from_the_due_time failed so once). Frozen objects are not
    scanned; the ones the test makes still are. Cheap: no collection is run."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture
def make_server(_heap_frozen):
    """Factory of started servers (block mode), closed at the end of the test.

    make_server(setup, **server_kwargs): setup(srv) registers functions before start."""
    made = []

    def make(setup=None, **kw):
        kw.setdefault("wait", "block")
        srv = splitrpc.Server("127.0.0.1", 0, **kw)
        made.append(srv)
        if setup is not None:
            setup(srv)
        srv.start()
        return srv

    try:
        yield make
    finally:
        for s in made:
            s.close()


@pytest.fixture
def make_client():
    """Factory of clients, closed at the end of the test."""
    made = []

    def make(port, **kw):
        c = splitrpc.Client("127.0.0.1", port, **kw)
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.close()
