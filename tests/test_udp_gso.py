"""test_udp_gso.py: a batch's replies to one client go to the kernel as one buffer it cuts (UDP segmentation offload) and still arrive as the protocol's datagrams, each whole and right; the stat counts them; SPLITRPC_UDP_GSO=0 turns it off."""
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

from splitrpc import TensorSpec

import wire_ref as ref

SPEC_IN, SPEC_OUT = [TensorSpec("x", "float32", (256,))], [TensorSpec("y", "float32", (256,))]
UDP_SEGMENT = 103


def _kernel_offers_gso() -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.getsockopt(socket.SOL_UDP, UDP_SEGMENT)
            return True
        except OSError:
            return False


def _server(make_server, started: threading.Event, release: threading.Event):
    def setup(srv):
        @srv.function(9, "hold", inputs=SPEC_IN, outputs=SPEC_OUT)
        def hold(x, y):  # holds the worker while the calls of the next batch queue up
            started.set()
            release.wait(10)
            np.add(x, 1, out=y)

        @srv.function(1, "vecadd", inputs=SPEC_IN, outputs=SPEC_OUT, max_batch=16)
        def vecadd(x, y):
            np.add(x, np.float32(1), out=y)

    return make_server(setup)


def _batch_of_replies(srv, started, release, n=8) -> list[bytes]:
    """n vecadd calls from one raw socket, queued behind the held worker so they run as one batch:
    the replies as received, one datagram each."""
    xs = [np.full(256, i, np.float32) for i in range(n)]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(5)
        s.sendto(ref.datagram(ref.Header(0, 9, 1000, 0, 1, 1024, 0, 2), xs[0].tobytes()), ("127.0.0.1", srv.port))
        assert started.wait(5)
        for i, x in enumerate(xs):
            s.sendto(ref.datagram(ref.Header(0, 1, 1 + i, 0, 1, 1024, 0, 2), x.tobytes()), ("127.0.0.1", srv.port))
        deadline = time.monotonic() + 5
        while srv.stats()["queued"] < n and time.monotonic() < deadline:
            time.sleep(0.002)
        release.set()
        got = [s.recv(70000) for _ in range(n + 1)]
    replies = sorted((d for d in got if ref.decode(d).func_id == 1), key=lambda d: ref.decode(d).req_id)
    assert len(replies) == n
    for i, d in enumerate(replies):  # each one datagram of the protocol, whole and right
        h = ref.decode(d)
        assert (h.type, h.req_id, h.nseg, h.msg_len, len(d)) == (1, 1 + i, 1, 1024, 22 + 1024)
        assert np.array_equal(np.frombuffer(d[22:], np.float32), xs[i] + 1)
    return replies


def test_a_batch_of_replies_is_cut_by_the_kernel(make_server):
    if not _kernel_offers_gso():
        pytest.skip("this kernel has no UDP segmentation offload (UDP_SEGMENT, Linux 4.18+)")
    started, release = threading.Event(), threading.Event()
    srv = _server(make_server, started, release)
    _batch_of_replies(srv, started, release)
    deadline = time.monotonic() + 5  # counted once the send returned: maybe after the replies came
    while srv.stats()["tx_coalesced"] < 8 and time.monotonic() < deadline:
        time.sleep(0.002)
    assert srv.stats()["tx_coalesced"] >= 8


def test_off_by_the_environment(make_server, monkeypatch):
    monkeypatch.setenv("SPLITRPC_UDP_GSO", "0")
    started, release = threading.Event(), threading.Event()
    srv = _server(make_server, started, release)
    _batch_of_replies(srv, started, release)
    assert srv.stats()["tx_coalesced"] == 0


SERVER = """
import numpy as np, splitrpc
from splitrpc import TensorSpec
srv = splitrpc.Server("{ip}", {port}, wait="block")
srv.add_function(lambda reqs, resps: [resps[i].__setitem__(slice(0, len(r)), r) or len(r) for i, r in enumerate(reqs)],
                 3, "echo", raw=True, max_request=1 << 20, max_response=1 << 20)
srv.start()
print("READY", flush=True)
import os, time
while not os.path.exists("{flag}"):  # until the test has made its calls
    time.sleep(0.02)
print("COALESCED", srv.stats()["tx_coalesced"], flush=True)
srv.close()
"""

CLIENT = """
import numpy as np, splitrpc
with splitrpc.Client("{ip}", {port}, timeout=5.0, segment_size=1450) as c:
    for i in range(5):
        data = np.random.default_rng(i).bytes(20000 + 1000 * i)  # 14-18 segments of 1472 B each way
        assert c.call(3, data) == data
print("OK")
"""

SERVER_IP, CLIENT_IP, PORT = "10.99.7.1", "10.99.7.2", 9555


@contextlib.contextmanager
def _veth(mtu: int):
    """A veth pair (bench/helpers/netns.py) with MTU `mtu` at both ends: SERVER_IP on side a, CLIENT_IP on
    side b (whose transmit checksum offload is off); yields (pair, run) where run(ns, code) starts
    `python -c code` in namespace ns as a Proc. Skips where this machine cannot make it."""
    from splitrpc.bench.helpers import netns
    from splitrpc.bench.helpers.procs import Proc

    try:
        ctx = netns.veth_pair(CLIENT_IP, tag=f"g{os.getpid() % 100000}")
        pair = ctx.__enter__()
    except netns.NetnsUnavailable as e:
        pytest.skip(f"cannot make the veth pair here: {e}")
    procs = []
    try:
        for step in (("ip", "-n", pair.a, "addr", "add", f"{SERVER_IP}/24", "dev", pair.a_if),
                     ("ip", "-n", pair.a, "link", "set", pair.a_if, "mtu", str(mtu)),
                     ("ip", "-n", pair.b, "link", "set", pair.b_if, "mtu", str(mtu))):
            r = subprocess.run(step, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}

        def run(ns: str, code: str) -> Proc:
            procs.append(Proc(pair.exec_argv(ns, [sys.executable, "-c", code]), env=env))
            return procs[-1]

        yield pair, run
    finally:
        for p in procs:
            p.stop()
        ctx.__exit__(None, None, None)


def _client(run, ns: str, code: str) -> str:
    """Runs code in namespace ns to its end; its stdout."""
    p = run(ns, code)
    try:
        out, err = p.p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.stop()
        raise
    assert p.p.returncode == 0, out[-2000:] + err[-2000:]
    return out


def test_a_route_with_a_small_mtu_or_no_checksum_offload_still_gets_every_datagram():
    """Over a veth pair with MTU 1400 (1472-byte datagrams: IP fragments each one, but the kernel
    refuses a run cut at 1472): the server's side refuses its reply runs as over the MTU, the
    client's (transmit checksum offload off) refuses its request runs for the device; both fall
    back to one datagram per message, and every call is answered right."""
    with _veth(1400) as (pair, run):
        flag = os.path.join(tempfile.mkdtemp(), "done")
        server = run(pair.a, SERVER.format(ip=SERVER_IP, port=PORT, flag=flag))
        server.wait_line("READY", 60)
        assert _client(run, pair.b, CLIENT.format(ip=SERVER_IP, port=PORT)).strip().endswith("OK")
        open(flag, "w").close()
        line = server.wait_line("COALESCED", 30)
        assert int(line.split()[1]) == 0  # no run of 1472-byte datagrams went out cut by the kernel


RECEIVER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("{ip}", {port}))
print("READY", flush=True)
s.settimeout(10)
lens = [len(s.recv(70000)) for _ in range({n})]
print("LENS", *lens, flush=True)
import time
time.sleep(60)  # until stopped (the test reads the line from a live process)
"""

SENDER = """
import splitrpc
from splitrpc.errors import CallTimeout
with splitrpc.Client("{ip}", {port}, timeout=0.3, retries=0) as c:
    try:
        c.call(3, bytes({size}))
    except CallTimeout:
        pass
print("SENT")
"""


@pytest.mark.parametrize("mtu, seg", [(9000, 8950), (1400, 1350)])
def test_client_segments_fit_the_route_mtu(mtu, seg):
    """A client cuts its requests at what the route's MTU carries whole: jumbo frames take 8950-byte
    segments (not 1450), an MTU of 1400 takes 1350 (not 1450, which IP would fragment)."""
    size = 40000
    n = -(-size // seg)
    with _veth(mtu) as (pair, run):
        recv = run(pair.a, RECEIVER.format(ip=SERVER_IP, port=PORT, n=n))
        recv.wait_line("READY", 30)
        assert "SENT" in _client(run, pair.b, SENDER.format(ip=SERVER_IP, port=PORT, size=size))
        lens = [int(v) for v in recv.wait_line("LENS", 30).split()[1:]]
    assert lens[:-1] == [22 + seg] * (n - 1) and lens[-1] == 22 + size - (n - 1) * seg
