"""The DPDK transport end to end: a splitrpc server on net_af_packet over one end of a veth pair, in a network namespace the test makes, answering a kernel-socket client in another (ARP included), every service and message sizes up to 1 MiB, and hostile datagrams."""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from splitrpc import dpdk
from splitrpc.bench.procs import Proc

SERVER_IP, CLIENT_IP, PORT = "10.99.0.1", "10.99.0.2", 9000
EAL = ["--no-huge", "--no-shconf", "-m", "256", "--no-pci", "--no-telemetry", "-l", "0", "--log-level=*:error"]


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)


def _why_not() -> str | None:
    if not dpdk.available():
        return "splitrpc was built without DPDK (no libdpdk-dev)"
    if os.geteuid() != 0:
        return "network namespaces and veth pairs need root"
    for tool in ("ip", "ethtool"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (iproute2, ethtool)"
    return None


@pytest.fixture
def veth_pair():
    """Namespaces A (the DPDK server's end, no kernel address) and B (10.99.0.2/24), joined by
    a veth pair. B's transmit checksum offload is off: over veth the kernel would otherwise leave
    UDP checksums for a NIC to finish, and the DPDK side checks them."""
    why = _why_not()
    if why:
        pytest.skip(why)
    tag = f"{os.getpid() % 100000}"
    a, b, va, vb = f"srpcA{tag}", f"srpcB{tag}", f"sa{tag}", f"sb{tag}"
    steps = [("ip", "netns", "add", a), ("ip", "netns", "add", b),
             ("ip", "link", "add", va, "type", "veth", "peer", "name", vb),
             ("ip", "link", "set", va, "netns", a), ("ip", "link", "set", vb, "netns", b),
             ("ip", "-n", a, "link", "set", "lo", "up"), ("ip", "-n", a, "link", "set", va, "up"),
             ("ip", "-n", b, "link", "set", "lo", "up"), ("ip", "-n", b, "addr", "add", f"{CLIENT_IP}/24", "dev", vb),
             ("ip", "-n", b, "link", "set", vb, "up"), ("ip", "netns", "exec", b, "ethtool", "-K", vb, "tx", "off")]
    try:
        for step in steps:
            r = _run(*step)
            if r.returncode != 0:
                pytest.skip(f"cannot make the veth pair here ({' '.join(step)}): {r.stderr.strip()}")
        yield a, b, va
    finally:
        _run("ip", "netns", "del", a)
        _run("ip", "netns", "del", b)


SERVER = """
import sys, splitrpc
from splitrpc.services import register_builtin_services
srv = splitrpc.Server({ip!r}, {port}, wait="poll", transport="dpdk", dpdk_port="net_af_packet0",
                      dpdk_args={eal!r} + ["--vdev=net_af_packet0,iface={iface}"])
register_builtin_services(srv)
print("READY", flush=True)
srv.serve()
"""

CLIENT = """
import socket
import numpy as np
import splitrpc
from splitrpc.services import SERVICES
c = splitrpc.Client({ip!r}, {port}, timeout=3.0)
rng = np.random.default_rng(7)
for name, svc in SERVICES.items():
    for _ in range(5):
        req = svc.example(rng)
        assert c.call(svc.func_id, req) == svc.expected(req), name
for n in (0, 1, 1449, 1450, 1451, 4096, 65536, 300000, 1 << 20):  # around one segment, up to 1 MiB
    data = rng.bytes(n)
    assert c.call(3, data) == data, n
# hostile datagrams: garbage, a header that lies about its size, a reply-type packet
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for junk in (b"", b"x" * 7, b"\\x53" * 22, rng.bytes(1400), bytes([0x53, 0x12]) + b"\\xff" * 40):
    s.sendto(junk, ({ip!r}, {port}))
futs = [c.call_async(1, np.full(256, i, np.float32).tobytes()) for i in range(64)]
for i, f in enumerate(futs):
    assert np.array_equal(np.frombuffer(f.result(), np.float32), np.full(256, i + 1, np.float32))
print("OK")
"""


def test_dpdk_server_answers_kernel_client_over_veth(veth_pair):
    a, b, iface = veth_pair
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    server = Proc(["ip", "netns", "exec", a, sys.executable, "-c",
                   textwrap.dedent(SERVER.format(ip=SERVER_IP, port=PORT, eal=EAL, iface=iface))], env=env)
    try:
        server.wait_line("READY", 60)
        r = subprocess.run(["ip", "netns", "exec", b, sys.executable, "-c",
                            textwrap.dedent(CLIENT.format(ip=SERVER_IP, port=PORT))],
                           capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir(), env=env)
        assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stdout[-3000:] + r.stderr[-3000:]
        server.check_alive()
        neigh = _run("ip", "-n", b, "neigh", "show", SERVER_IP).stdout
        assert "lladdr" in neigh, f"the client never learned the server's MAC through ARP: {neigh!r}"
    finally:
        server.stop()
