"""test_udp_gso.py: a batch's replies to one client go to the kernel as one buffer it cuts (UDP segmentation offload) and still arrive as the protocol's datagrams, each whole and right; the stat counts them; SPLITRPC_UDP_GSO=0 turns it off."""
import socket
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


def test_a_route_with_a_small_mtu_or_no_checksum_offload_still_gets_every_datagram():
    """Over a veth pair with MTU 1400 (1472-byte datagrams: IP fragments each one, but the kernel
    refuses a run cut at 1472): the server's side refuses its reply runs as over the MTU, the
    client's (transmit checksum offload off) refuses its request runs for the device; both fall
    back to one datagram per message, and every call is answered right."""
    import os
    import subprocess
    import sys
    import tempfile

    from splitrpc.bench.helpers import netns
    from splitrpc.bench.helpers.procs import Proc

    server_ip, port = "10.99.7.1", 9555
    try:
        ctx = netns.veth_pair("10.99.7.2", tag=f"g{os.getpid() % 100000}")
        pair = ctx.__enter__()
    except netns.NetnsUnavailable as e:
        pytest.skip(f"cannot make the veth pair here: {e}")
    try:
        for step in (("ip", "-n", pair.a, "addr", "add", f"{server_ip}/24", "dev", pair.a_if),
                     ("ip", "-n", pair.a, "link", "set", pair.a_if, "mtu", "1400"),
                     ("ip", "-n", pair.b, "link", "set", pair.b_if, "mtu", "1400")):
            r = subprocess.run(step, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
        flag = os.path.join(tempfile.mkdtemp(), "done")
        server = Proc(pair.exec_argv(pair.a, [sys.executable, "-c", SERVER.format(ip=server_ip, port=port, flag=flag)]),
                      env=env)
        try:
            server.wait_line("READY", 60)
            r = subprocess.run(pair.exec_argv(pair.b, [sys.executable, "-c", CLIENT.format(ip=server_ip, port=port)]),
                               capture_output=True, text=True, timeout=120, cwd=tempfile.gettempdir(), env=env)
            assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stdout[-2000:] + r.stderr[-2000:]
            open(flag, "w").close()
            line = server.wait_line("COALESCED", 30)
            assert int(line.split()[1]) == 0  # no run of 1472-byte datagrams went out cut by the kernel
        finally:
            server.stop()
    finally:
        ctx.__exit__(None, None, None)


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
    import os
    import subprocess
    import sys
    import tempfile

    from splitrpc.bench.helpers import netns
    from splitrpc.bench.helpers.procs import Proc

    server_ip, port, size = "10.99.8.1", 9556, 40000
    n = -(-size // seg)
    try:
        ctx = netns.veth_pair("10.99.8.2", tag=f"m{os.getpid() % 100000}")
        pair = ctx.__enter__()
    except netns.NetnsUnavailable as e:
        pytest.skip(f"cannot make the veth pair here: {e}")
    try:
        for step in (("ip", "-n", pair.a, "addr", "add", f"{server_ip}/24", "dev", pair.a_if),
                     ("ip", "-n", pair.a, "link", "set", pair.a_if, "mtu", str(mtu)),
                     ("ip", "-n", pair.b, "link", "set", pair.b_if, "mtu", str(mtu))):
            r = subprocess.run(step, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
        recv = Proc(pair.exec_argv(pair.a, [sys.executable, "-c", RECEIVER.format(ip=server_ip, port=port, n=n)]),
                    env=env)
        try:
            recv.wait_line("READY", 30)
            r = subprocess.run(pair.exec_argv(pair.b, [sys.executable, "-c",
                                                       SENDER.format(ip=server_ip, port=port, size=size)]),
                               capture_output=True, text=True, timeout=60, cwd=tempfile.gettempdir(), env=env)
            assert r.returncode == 0 and "SENT" in r.stdout, r.stderr[-2000:]
            lens = [int(v) for v in recv.wait_line("LENS", 30).split()[1:]]
        finally:
            recv.stop()
    finally:
        ctx.__exit__(None, None, None)
    assert lens[:-1] == [22 + seg] * (n - 1) and lens[-1] == 22 + size - (n - 1) * seg
