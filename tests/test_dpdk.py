"""DPDK's EAL: initialised in a child process (once per process) with --no-huge on virtual ports, never exiting it, the caller's CPU affinity kept; a build without DPDK says so."""
import os
import subprocess
import sys
import tempfile
import textwrap
import threading

import pytest
from dpdk_calls import CALLS, STATS_FUNCTION

from splitrpc import dpdk

needs_dpdk = pytest.mark.skipif(not dpdk.available(), reason="splitrpc was built without DPDK (no libdpdk-dev)")
# No hugepages, no shared config, no PCI scan, one lcore, quiet: what CI machines allow.
EAL = ["--no-huge", "--no-shconf", "-m", "128", "--no-pci", "--no-telemetry", "-l", "0", "--log-level=*:error"]


def run_child(code: str) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter (a fresh EAL) outside the source tree."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, cwd=tempfile.gettempdir(), env=env)


def last_line(text: str) -> str:
    """The child's last output line (on bad options the EAL prints its usage to stdout first)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


@needs_dpdk
def test_init_probes_virtual_ports_and_keeps_affinity():
    r = run_child(f"""
        import os
        from splitrpc import dpdk
        before = os.sched_getaffinity(0)
        assert not dpdk.ready()
        dpdk.init({EAL!r} + ["--vdev=net_null0", "--vdev=net_null1"])
        assert dpdk.ready() and dpdk.port_count() == 2, dpdk.port_count()
        assert os.sched_getaffinity(0) == before, (os.sched_getaffinity(0), before)
        dpdk.init(["--whatever"])  # once per process: later calls change nothing
        assert dpdk.port_count() == 2
        print("OK", len(before))
    """)
    assert r.returncode == 0 and last_line(r.stdout).startswith("OK"), r.stdout[-3000:] + r.stderr[-3000:]


@needs_dpdk
def test_bad_arguments_raise_and_never_exit():
    r = run_child(f"""
        from splitrpc import dpdk
        for bad in (["--help"], ["-v"], ["-h"]):  # the EAL would print and exit(): refused first
            try:
                dpdk.init(bad)
            except dpdk.DPDKError as e:
                assert "not allowed" in str(e), e
            else:
                raise SystemExit("no error for " + repr(bad))
        try:
            dpdk.port_count()
        except dpdk.DPDKError as e:
            assert "not initialised" in str(e)
        else:
            raise SystemExit("port_count before init")
        try:
            dpdk.init({EAL!r} + ["--no-such-eal-option"])
        except dpdk.DPDKError as e:
            first = str(e)
        else:
            raise SystemExit("an unknown option was accepted")
        try:
            dpdk.init({EAL!r})
        except dpdk.DPDKError as e:  # the EAL cannot be initialised twice: the same error again
            assert str(e) == first, (str(e), first)
        else:
            raise SystemExit("a second init after a failure succeeded")
        assert not dpdk.ready()
        print("OK", first)
    """)
    assert r.returncode == 0 and last_line(r.stdout).startswith("OK"), r.stdout[-3000:] + r.stderr[-3000:]


@needs_dpdk
def test_leftover_non_eal_arguments_are_an_error():
    r = run_child(f"""
        from splitrpc import dpdk
        try:
            dpdk.init({EAL!r} + ["--", "not-eal"])
        except dpdk.DPDKError as e:
            assert "not EAL options" in str(e), e
            print("OK")
    """)
    assert r.returncode == 0 and last_line(r.stdout).startswith("OK"), r.stdout[-3000:] + r.stderr[-3000:]


@pytest.mark.skipif(dpdk.available(), reason="checks a build without DPDK")
def test_without_dpdk_the_build_says_so():
    with pytest.raises(dpdk.DPDKUnavailable, match="without DPDK"):
        dpdk.init(EAL)
    with pytest.raises(dpdk.DPDKUnavailable):
        dpdk.port_count()
    assert not dpdk.ready()


def test_args_must_be_a_sequence():
    with pytest.raises(TypeError):
        dpdk.init("--no-huge")


def build_native(tmp_path, *targets: str):
    """Configures the native tests with DPDK (no CUDA compiler) in tmp_path and builds the targets;
    returns the path of the first."""
    import pathlib
    import shutil

    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.fail("cmake is needed for the native tests: pip install '.[test]' provides it")
    root = pathlib.Path(__file__).resolve().parents[1]
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    cfg = subprocess.run([cmake, "-S", str(root), "-B", str(tmp_path), *gen, "-DSPLITRPC_TESTS=ON",
                          "-DSPLITRPC_PYTHON=OFF", "-DSPLITRPC_CUDA=OFF", "-DSPLITRPC_DPDK=ON"],
                         capture_output=True, text=True)
    assert cfg.returncode == 0, cfg.stdout[-4000:] + cfg.stderr[-4000:]
    bld = subprocess.run([cmake, "--build", str(tmp_path), "-j", "2", "--target", *targets],
                         capture_output=True, text=True)
    assert bld.returncode == 0, bld.stdout[-4000:] + bld.stderr[-4000:]
    return tmp_path / targets[0]


def run_native(exe, *args, env=None) -> subprocess.CompletedProcess:
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir(),
                       env=env)
    last = last_line(r.stdout)
    assert r.returncode == 0 and last.endswith(" 0 failed") and not last.startswith("0 passed"), \
        r.stdout[-4000:] + r.stderr[-4000:]
    return r


@pytest.fixture(scope="module")
def native_build(tmp_path_factory):
    """The DPDK native tests and the stand-in libcuda.so.1 (native/tests/fake_libcuda.c), built
    once for this module."""
    if not dpdk.available():
        pytest.skip("splitrpc was built without DPDK (no libdpdk-dev)")
    d = tmp_path_factory.mktemp("native")
    build_native(d, "test_dpdk", "test_dpdk_pool", "fake_cuda")
    return d


def fake_cuda_env(build) -> dict:
    """A child's environment that loads the stand-in libcuda.so.1 of `build`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["LD_LIBRARY_PATH"] = str(build / "fake_cuda")
    return env


@needs_dpdk
def test_native_dpdk_transport_on_net_ring(native_build):
    """native/tests/test_dpdk.c: messages up to 200 kB through the transport's send and its
    software header/payload split (chained and single mbufs), malformed frames dropped by
    reason, ARP answered and learned, on net_ring ports that loop what they send back; again
    with the NIC's buffer split emulated into a host payload pool. Then with the stand-in
    libcuda (device memory the CPU cannot touch, read by the test through its shadow): the split
    into GPU memory, one-segment requests handed on as device addresses and every other
    datagram copied device to host, 4000 requests through a pool of ~3000 buffers."""
    r = run_native(native_build / "test_dpdk")
    assert "net_ring0 (chained): " in r.stdout and "split emulated, host payload pool): " in r.stdout, r.stdout
    r = run_native(native_build / "test_dpdk", env=fake_cuda_env(native_build))
    assert "net_ring3 (split emulated, GPU payload pool): " in r.stdout and "FAILED" not in r.stdout, r.stdout


@needs_dpdk
def test_native_payload_pools(native_build):
    """native/tests/test_dpdk_pool.c: the buffer split's payload pool in host memory of our own
    (mmap, registered with rte_extmem_register, DMA-mapped for a net_ring port, external mbufs):
    every buffer inside the registered region with its IOVA set, torn down and made again more
    times than the EAL has memseg lists (a leaked registration would run out); the GPU pool's
    clear error without a GPU; a port without buffer split asked for a GPU pool splits in
    software. Then again with a stand-in libcuda.so.1 (native/tests/fake_libcuda.c: host memory
    that faults if touched): the GPU pool's control flow (64 KiB alignment, SYNC_MEMOPS,
    registration, teardown down to cuMemFree) runs and its "GPU memory" is never read. Buffer
    split itself, real GPU memory and a real DMA mapping need a NIC and a GPU."""
    exe = native_build / "test_dpdk_pool"
    r = run_native(exe)
    assert "host pool, round 2: " in r.stdout or "IOVA as PA" in r.stdout, r.stdout
    assert "GPU pool" in r.stdout
    r = run_native(exe, env=fake_cuda_env(native_build))
    assert "GPU pool, round 2: made on cuda:0 of the stand-in driver" in r.stdout, r.stdout + r.stderr


def test_server_dpdk_arguments_are_checked_first():
    import splitrpc

    with pytest.raises(ValueError, match="dpdk_port"):
        splitrpc.Server("10.0.0.1", 9000, transport="dpdk")
    with pytest.raises(ValueError, match="UDP port"):
        splitrpc.Server("10.0.0.1", 0, transport="dpdk", dpdk_port="net_null0")
    for bad in ("gpu", "cuda:", "cuda:x", "cuda:64", None):
        with pytest.raises(ValueError, match="dpdk_payload"):
            splitrpc.Server("10.0.0.1", 9000, transport="dpdk", dpdk_port="net_null0", dpdk_payload=bad)
    with pytest.raises(ValueError, match="transport"):
        splitrpc.Server("127.0.0.1", 0, transport="rdma")
    srv = splitrpc.Server("127.0.0.1", 0)
    try:
        assert "dpdk" not in srv.stats() and srv.transport == "udp"
    finally:
        srv.close()


@needs_dpdk
def test_server_on_a_dpdk_port_in_a_child():
    """A server on a net_null port: created, stats with the port's counters, closed; a host
    that is not an IPv4 literal is refused."""
    r = run_child(f"""
        import splitrpc
        try:
            splitrpc.Server("localhost", 9000, transport="dpdk", dpdk_port="net_null0",
                            dpdk_args={EAL!r} + ["--vdev=net_null0"])
        except splitrpc.NativeError as e:
            print("refused", e)
        srv = splitrpc.Server("10.0.0.1", 9000, transport="dpdk", dpdk_port="net_null0", dpdk_args=[])
        st = srv.stats()["dpdk"]
        assert srv.port == 9000 and set(st["drops"]) >= {{"ethertype", "not_ours", "udp_checksum"}}, st
        assert st["rx_buffer_split"] is False  # net_null cannot split frames: software does
        assert st["payload_pool"] == "none", st
        srv.close()
        print("OK")
    """)
    out = r.stdout.splitlines()
    assert r.returncode == 0 and out and out[-1] == "OK", r.stdout[-3000:] + r.stderr[-3000:]
    assert any(line.startswith("refused") for line in out)


MEMIF_SERVER = """
import json
import splitrpc
from splitrpc.services import register_builtin_services
srv = splitrpc.Server("10.77.0.1", 9000, wait="poll", transport="dpdk", dpdk_port="net_memif0",
                      dpdk_args={eal!r} + ["--vdev=net_memif0,role=server,socket={sock}"], **{kw!r})
register_builtin_services(srv)

""" + STATS_FUNCTION + """


def inject(requests, responses):  # the stand-in libcuda fails the next copy out of GPU memory (b"c")
    import ctypes                  # or the next synchronisation after one (b"s")
    cuda = ctypes.CDLL("libcuda.so.1")
    for r in requests:
        if bytes(r) == b"c":
            cuda.fake_cuda_fail_copies(1, 1)
        else:
            cuda.fake_cuda_fail_syncs_after(1, 1)
    return [0] * len(responses)


if {kw!r}.get("dpdk_payload", "").startswith("cuda:"):
    srv.add_function(inject, 98, "inject", raw=True, max_request=1, max_response=1)
    # a device function (the emulated cupy of tests/emu under the emulated driver): its requests
    # arrive as GPU payloads and go device to device into its queue
    import ctypes
    import cupy

    def dev_vecadd(x, y):
        cupy.add(x, 1, out=y)

    spec = lambda n: [splitrpc.TensorSpec(n, "float32", (256,))]  # noqa: E731
    srv.add_function(dev_vecadd, 50, "dev_vecadd", spec("x"), spec("y"), device="cuda:0")

    def gpu_stats(requests, responses):  # where the functions run, and the emulated driver's copies
        drv = ctypes.CDLL("libcuda.so.1")
        drv.fake_cuda_copies.restype = ctypes.c_ulonglong
        body = json.dumps({{"devices": srv.stats()["devices"],
                            "copies": [drv.fake_cuda_copies(k) for k in range(3)]}}).encode()
        for r in responses:
            r[:len(body)] = body
        return [len(body)] * len(responses)

    srv.add_function(gpu_stats, 97, "gpu_stats", raw=True, max_request=16, max_response=4096)
print("READY", flush=True)
srv.serve()
"""

MEMIF_CLIENT = """
import json
import sys
import numpy as np
import splitrpc
from splitrpc.load_run import OK, run_load
c = splitrpc.Client("10.77.0.1", 9000, timeout=10.0, retries=5, transport="dpdk", dpdk_port="net_memif0",
                    local_ip="10.77.0.2", protocol={proto!r}, key={key!r}, encrypt={encrypt!r},
                    dpdk_args={eal!r} + ["--vdev=net_memif0,role=client,socket={sock}"])
""" + CALLS.replace("{", "{{").replace("}", "}}") + """
futs = [c.call_async(1, np.full(256, i, np.float32).tobytes()) for i in range(64)]
assert all(np.array_equal(np.frombuffer(f.result(), np.float32), np.full(256, i + 1, np.float32))
           for i, f in enumerate(futs))
# the load generator's native loop, from the same DPDK port
vecadd = SERVICES["vecadd"]
req = vecadd.example(rng)
for conc in (1, 8):
    recs = run_load(c, vecadd.func_id, req, expect=vecadd.expected(req), concurrency=conc, n=2000, timeout_s=5.0)
    codes = recs.rec["code"]
    assert len(codes) == 2000 and (codes == OK).all(), (conc, np.unique(codes, return_counts=True))
if {gpu!r}:  # a failed copy out of GPU memory, then a failed wait for one: INTERNAL, never run
    for how, says in ((b"c", "copy from GPU memory failed"), (b"s", "copy of the request from GPU memory failed")):
        c.call(98, how)
        try:
            c.call(vecadd.func_id, req)
            raise AssertionError("a call whose request was lost in GPU memory ran")
        except splitrpc.InternalError as e:
            assert says in e.message, e
        assert c.call(vecadd.func_id, req) == vecadd.expected(req)
if {gpu!r}:  # a device function fed by GPU payloads
    before = json.loads(c.call(97, b"").decode())
    futs = [c.call_async(50, np.full(256, i, np.float32).tobytes()) for i in range(64)]
    assert all(np.array_equal(np.frombuffer(f.result(), np.float32), np.full(256, i + 1, np.float32))
               for i, f in enumerate(futs))
    after = json.loads(c.call(97, b"").decode())
    print("GPUSTATS", json.dumps({{"before": before, "after": after}}), flush=True)
print("STATS", c.call(99, b"").decode(), flush=True)
print("CSTATS", json.dumps(c.stats()), flush=True)
print("OK", flush=True)
sys.stdin.readline()  # the test stops the server before this client lets go of the link
"""


@needs_dpdk
@pytest.mark.parametrize("split", ["software", "emulated-host", "emulated-gpu", "emulated-auto", "emulated-gpu-v3",
                                   "emulated-gpu-v4", "emulated-gpu-v5", "emulated-gpu-v5e"])
def test_dpdk_client_and_server_over_memif(tmp_path, split, request):
    """Two processes, each with its own EAL, joined by a shared-memory memif link: the DPDK
    client asks the server's MAC by ARP, calls every service up to 1 MiB, then runs the load
    generator's native loop. The server splits frames in software as usual, or as a NIC's
    buffer split would into a host payload pool, or into GPU memory (asked for, or the default
    where a CUDA driver has a device): there the stand-in
    libcuda (device memory the CPU cannot touch) serves, one-segment requests reach the host
    functions by device-to-host copies in the engine, and nothing reads the payloads on the host.
    The server is stopped before the client lets go of the link: DPDK 22.11's memif unmaps the
    link's memory from its interrupt thread when the peer leaves, under the feet of a process
    polling it (README, "Serve over DPDK"). emulated-gpu-v3: the client speaks protocol version 3,
    whose data check is read on the host, so no request's data is handed on in GPU memory;
    emulated-gpu-v4 likewise with version 4's signed calls (a server with keys in its legacy mode,
    docs/PROTOCOL-v4.md): every datagram, both ways, signed and checked over DPDK. emulated-gpu-v5
    and -v5e: sessions (docs/PROTOCOL-v5.md), authenticated and encrypted: the handshake's INIT and
    ACCEPT and every data datagram, both ways, sealed and opened over DPDK."""
    from splitrpc.bench.helpers.procs import Proc

    sock = str(tmp_path / "memif.sock")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    kw = {"software": {}, "emulated-host": {"dpdk_emulate_split": True, "dpdk_payload": "host"},
          "emulated-gpu": {"dpdk_emulate_split": True, "dpdk_payload": "cuda:0"},
          "emulated-gpu-v3": {"dpdk_emulate_split": True, "dpdk_payload": "cuda:0"},
          "emulated-gpu-v4": {"dpdk_emulate_split": True, "dpdk_payload": "cuda:0"},
          "emulated-gpu-v5": {"dpdk_emulate_split": True, "dpdk_payload": "cuda:0"},
          "emulated-gpu-v5e": {"dpdk_emulate_split": True, "dpdk_payload": "cuda:0"},
          "emulated-auto": {"dpdk_emulate_split": True}}[split]
    on_gpu = split in ("emulated-gpu", "emulated-auto", "emulated-gpu-v3", "emulated-gpu-v4", "emulated-gpu-v5",
                       "emulated-gpu-v5e")
    v3 = split.endswith(("-v3", "-v4", "-v5", "-v5e"))  # the data checked on the host: a CRC-32C, or a tag
    key_file = None
    if split.endswith(("-v4", "-v5", "-v5e")):
        from splitrpc import auth

        if not auth._auth.available():
            pytest.skip("libsodium's shared library is not installed")
        k = auth.Key.generate(1)
        auth.KeyTable([k]).save(tmp_path / "keys.json")
        auth.save_client_key(k, tmp_path / "client.json")
        kw = dict(kw, keys=str(tmp_path / "keys.json"), legacy_v4=split.endswith("-v4"))
        key_file = str(tmp_path / "client.json")
    server_env = fake_cuda_env(request.getfixturevalue("native_build")) if on_gpu else env
    if on_gpu:  # the emulated cupy, for the device function (tests/emu/cupy)
        server_env["PYTHONPATH"] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "emu")
    server = Proc([sys.executable, "-c", textwrap.dedent(MEMIF_SERVER.format(eal=EAL, sock=sock, kw=kw))],
                  env=server_env)
    try:
        server.wait_line("READY", 60)
        code = textwrap.dedent(MEMIF_CLIENT.format(eal=EAL, sock=sock, gpu=split == "emulated-gpu",
                                                   proto=3 if split.endswith("-v3") else 4 if split.endswith("-v4")
                                                   else None, key=key_file, encrypt=split.endswith("-v5e")))
        client = subprocess.Popen([sys.executable, "-c", code],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  cwd=tempfile.gettempdir(), env=env)
    except BaseException:
        server.stop()
        raise
    try:
        lines = wait_for_line(client, "OK", 240)
        server.check_alive()
    finally:
        server.stop()
        out, err = client.communicate("\n", timeout=60)
    assert lines[-1:] == ["OK"] and client.returncode == 0, f"{lines[-5:]} {out[-3000:]} {err[-3000:]}"
    import json

    st = json.loads(next(ln for ln in lines if ln.startswith("STATS "))[6:])
    assert st["rx_split_emulated"] == (split != "software"), st
    assert st["payload_pool"] == ("gpu" if on_gpu else "none" if split == "software" else "host"), st
    if v3:  # every request's data copied to the host, where its check is read
        assert st["rx_device_payloads"] == 0 and st["rx_device_to_host"] > 1000, st
    else:
        assert (st["rx_device_payloads"] > 1000 and st["rx_device_to_host"] > 700) == on_gpu, st
    if key_file:  # every datagram signed and taken, none dropped
        assert st["auth"]["ok"] > 1000 and not any(st["auth_drops"].values()), st
    if split.endswith(("-v5", "-v5e")):  # one session, every reply opened under it
        cst = json.loads(next(ln for ln in lines if ln.startswith("CSTATS "))[7:])
        assert cst["handshakes"] == 1 and cst["bad_auth"] == 0 and cst["handshakes_failed"] == 0, cst
    if split == "emulated-gpu":  # EMULATED: GPU payloads copied device to device into a device function's queue
        g = json.loads(next(ln for ln in lines if ln.startswith("GPUSTATS "))[9:])
        assert g["after"]["devices"]["dev_vecadd"] == "cuda:0", g
        assert g["after"]["copies"][2] - g["before"]["copies"][2] >= 64, g  # DtoD: one per request at least


def wait_for_line(proc: subprocess.Popen, word: str, timeout: float) -> list[str]:
    """The child's stdout lines up to the first that is `word` (or all it printed before
    exiting, or before `timeout`, when it is killed)."""
    lines: list[str] = []

    def read():
        for ln in proc.stdout:
            lines.append(ln.rstrip("\n"))
            if lines[-1] == word:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        proc.kill()
    return lines
