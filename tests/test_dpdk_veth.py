"""The DPDK transport end to end: a splitrpc server on net_af_packet over one end of a veth pair, in a network namespace the test makes, answering a kernel-socket client in another (ARP included), every service and message sizes up to 1 MiB, and hostile datagrams."""
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest
from dpdk_calls import CALLS, STATS_FUNCTION

from splitrpc import dpdk
from splitrpc.bench.helpers import netns
from splitrpc.bench.helpers.procs import Proc

SERVER_IP, CLIENT_IP, PORT = "10.99.0.1", "10.99.0.2", 9000
EAL = ["--no-huge", "--no-shconf", "-m", "256", "--no-pci", "--no-telemetry", "-l", "0", "--log-level=*:error"]


@pytest.fixture
def veth_pair():
    """Namespaces joined by a veth pair (bench/helpers/netns.py): the server's end in one with no kernel
    address, the client's in the other."""
    if not dpdk.available():
        pytest.skip("splitrpc was built without DPDK (no libdpdk-dev)")
    try:
        with netns.veth_pair(CLIENT_IP) as pair:
            yield pair
    except netns.NetnsUnavailable as e:
        pytest.skip(f"cannot make the veth pair here: {e}")


SERVER = """
import json, sys, splitrpc
from splitrpc.services import register_builtin_services
srv = splitrpc.Server({ip!r}, {port}, wait="poll", transport="dpdk", dpdk_port="net_af_packet0",
                      dpdk_args={eal!r} + ["--vdev=net_af_packet0,iface={iface},framecnt=16384"])
register_builtin_services(srv)

""" + STATS_FUNCTION + """
print("READY", flush=True)
srv.serve()
"""

CLIENT = """
import socket
import numpy as np
import splitrpc
c = splitrpc.Client({ip!r}, {port}, timeout=10.0, retries=5)  # a burst may overrun a packet ring
""" + CALLS.replace("{", "{{").replace("}", "}}") + """
# hostile datagrams: garbage, a header that lies about its size, a reply-type packet
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for junk in (b"", b"x" * 7, b"\\x53" * 22, rng.bytes(1400), bytes([0x53, 0x12]) + b"\\xff" * 40):
    s.sendto(junk, ({ip!r}, {port}))
futs = [c.call_async(1, np.full(256, i, np.float32).tobytes()) for i in range(64)]
for i, f in enumerate(futs):
    assert np.array_equal(np.frombuffer(f.result(), np.float32), np.full(256, i + 1, np.float32))

# malformed frames, hand-made on a raw socket, to the server's MAC (learned by ARP above)
import json, struct
mac = next(l.split()[3] for l in open("/proc/net/arp") if l.startswith({ip!r} + " "))
dst = bytes.fromhex(mac.replace(":", ""))
raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
raw.bind(({iface_b!r}, 0))
src = raw.getsockname()[4][:6]

def csum(b):
    b += b"\\0" * (len(b) % 2)
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff

def frame(ethertype=0x0800, ihl=5, udp_len=None, dport={port}, payload=b"x" * 30):
    ulen = 8 + len(payload) if udp_len is None else udp_len
    opts = b"\\x01" * 4 * (ihl - 5)
    ip = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, 4 * ihl + 8 + len(payload), 1, 0, 64, 17, 0,
                     socket.inet_aton({client_ip!r}), socket.inet_aton({ip!r})) + opts
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    udp = struct.pack("!HHHH", 40000, dport, ulen, 0) + payload
    return dst + src + struct.pack("!H", ethertype) + ip + udp

before = json.loads(c.call(99, b""))["drops"]
for f in (frame(ethertype=0x86dd), frame(ihl=6), frame(udp_len=200), frame(dport={port} + 1)):
    raw.send(f)
import time
for _ in range(100):
    after = json.loads(c.call(99, b""))["drops"]
    if all(after[k] > before[k] for k in ("ethertype", "ip_header", "udp_length", "not_ours")):
        break
    time.sleep(0.02)
for k in ("ethertype", "ip_header", "udp_length", "not_ours"):
    assert after[k] == before[k] + 1, (k, before, after)
assert c.call(1, np.zeros(256, np.float32).tobytes()) == np.ones(256, np.float32).tobytes()
print("OK")
"""


def test_dpdk_server_answers_kernel_client_over_veth(veth_pair):
    a, b, iface = veth_pair.a, veth_pair.b, veth_pair.a_if
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    server = Proc(["ip", "netns", "exec", a, sys.executable, "-c",
                   textwrap.dedent(SERVER.format(ip=SERVER_IP, port=PORT, eal=EAL, iface=iface))], env=env)
    try:
        server.wait_line("READY", 60)
        r = subprocess.run(["ip", "netns", "exec", b, sys.executable, "-c",
                            textwrap.dedent(CLIENT.format(ip=SERVER_IP, port=PORT, iface_b=veth_pair.b_if,
                                                          client_ip=CLIENT_IP))],
                           capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir(), env=env)
        assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stdout[-3000:] + r.stderr[-3000:]
        server.check_alive()
        neigh = netns.run_in(b, "ip", "neigh", "show", SERVER_IP).stdout
        assert "lladdr" in neigh, f"the client never learned the server's MAC through ARP: {neigh!r}"
    finally:
        server.stop()


def test_bench_dpdk_end_to_end(veth_pair, tmp_path):
    """`splitrpc bench dpdk` with a few calls: both systems measured, no errors, files written.
    (It makes its own namespaces; the fixture only checks that this machine can.)"""
    from splitrpc.bench.suites import dpdk_veth

    rc = dpdk_veth.main(["--services", "vecadd,head", "--concurrency", "1,4", "--calls", "300", "--rounds", "1",
                         "--out", str(tmp_path)])
    assert rc == 0

    doc = json.loads((tmp_path / "dpdk_veth.json").read_text())
    rows = {(r["system"], r["service"], r["concurrency"]): r for r in doc["table"]}
    assert set(rows) == {(s, v, c) for s in ("dpdk", "kernel-udp") for v in ("vecadd", "head") for c in (1, 4)}
    assert all(r["p50_us"] and r["p50_us"] > 0 and r["errors"] == 0 for r in rows.values()), rows
    assert "dpdk / kernel p50" in (tmp_path / "dpdk_veth.md").read_text()


def test_bench_dpdk_rejects_bad_input(capsys):
    from splitrpc.bench.suites import dpdk_veth

    assert dpdk_veth.main(["--services", "matmul"]) == 2
    assert "unknown services" in capsys.readouterr().err


DPDK_CLIENT = """
import splitrpc
c = splitrpc.Client({server!r}, {port}, timeout=10.0, retries=5, transport="dpdk", dpdk_port="net_af_packet0",
                    local_ip={local!r}, dpdk_args={eal!r} + ["--vdev=net_af_packet0,iface={iface},framecnt=4096"])
""" + CALLS.replace("{", "{{").replace("}", "}}") + """
print("OK")
"""


def test_dpdk_client_calls_kernel_server_over_veth(veth_pair, tmp_path):
    """The other way round: a DPDK client (ARP for the server, answering the server's ARP) on
    one end, `splitrpc serve` on a kernel socket at the other end's address; then the load
    generator from the same DPDK port."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    server = Proc(veth_pair.exec_argv(veth_pair.b, [sys.executable, "-m", "splitrpc", "serve", "--host", CLIENT_IP,
                                                    "--port", str(PORT)]), env=env)
    try:
        code = textwrap.dedent(DPDK_CLIENT.format(server=CLIENT_IP, port=PORT, local=SERVER_IP, eal=EAL,
                                                  iface=veth_pair.a_if))
        for attempt in range(3):  # the kernel server may still be binding: its first calls time out
            r = subprocess.run(veth_pair.exec_argv(veth_pair.a, [sys.executable, "-c", code]), capture_output=True,
                               text=True, timeout=300, cwd=tempfile.gettempdir(), env=env)
            if r.returncode == 0 or "CallTimeout" not in r.stderr:
                break
        assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stdout[-3000:] + r.stderr[-3000:]
        eal = " ".join(EAL + [f"--vdev=net_af_packet0,iface={veth_pair.a_if},framecnt=4096"])
        load = subprocess.run(veth_pair.exec_argv(veth_pair.a, [
            sys.executable, "-m", "splitrpc", "load", "--host", CLIENT_IP, "--port", str(PORT), "--transport", "dpdk",
            "--dpdk-port", "net_af_packet0", "--dpdk-args", eal, "--local-ip", SERVER_IP, "--calls", "2000",
            "--concurrency", "1,8", "--warmup-s", "0", "--out", str(tmp_path), "--no-plots", "--quiet"]),
            capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir(), env=env)
        assert load.returncode == 0, load.stdout[-3000:] + load.stderr[-3000:]
        runs = json.loads((tmp_path / "report.json").read_text())["runs"]
        assert len(runs) == 2 and all(r["ok"] == 2000 and r["errors"] == 0 for r in runs), runs
        server.check_alive()
    finally:
        server.stop()


KEYED_SERVER = SERVER.replace('dpdk_port="net_af_packet0",', 'dpdk_port="net_af_packet0", keys={keys!r},')

KEYED_CLIENT = """
import json
import numpy as np
import splitrpc
for encrypt in (False, True):
    with splitrpc.Client({ip!r}, {port}, timeout=10.0, retries=5, key={key!r}, encrypt=encrypt) as c:
        for n in (0, 1, 1400, 5000, 70000):  # one datagram, several, and a message larger than 64 KiB
            data = bytes(range(256)) * (n // 256) + bytes(n % 256)
            assert c.call(3, data) == data, n
        futs = [c.call_async(1, np.full(256, i, np.float32).tobytes()) for i in range(64)]
        for i, f in enumerate(futs):
            assert np.array_equal(np.frombuffer(f.result(), np.float32), np.full(256, i + 1, np.float32))
        st = c.stats()
        assert st["handshakes"] == 1 and st["bad_auth"] == 0 and st["handshakes_failed"] == 0, st
        srv = json.loads(c.call(99, b""))
assert srv["auth"]["ok"] > 200 and not any(srv["auth_drops"].values()), srv
print("OK")
"""


def test_dpdk_server_speaks_sessions_to_a_kernel_client_over_veth(veth_pair, tmp_path):
    """A DPDK server with keys (version 5's sessions, docs/PROTOCOL-v5.md) and splitrpc's kernel UDP
    client with a key, authenticating and then encrypting: the handshake's ACCEPT that the DPDK
    transport builds as a whole datagram, and every sealed datagram both ways, pass the kernel's
    IP and UDP checks and the client's tags, for messages of one datagram, several, and over 64 KiB."""
    from splitrpc import auth

    if not auth._auth.available():
        pytest.skip("libsodium's shared library is not installed")
    k = auth.Key.generate(1)
    auth.KeyTable([k]).save(tmp_path / "keys.json")
    auth.save_client_key(k, tmp_path / "client.json")
    a, b, iface = veth_pair.a, veth_pair.b, veth_pair.a_if
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    server = Proc(["ip", "netns", "exec", a, sys.executable, "-c",
                   textwrap.dedent(KEYED_SERVER.format(ip=SERVER_IP, port=PORT, eal=EAL, iface=iface,
                                                       keys=str(tmp_path / "keys.json")))], env=env)
    try:
        server.wait_line("READY", 60)
        r = subprocess.run(["ip", "netns", "exec", b, sys.executable, "-c",
                            textwrap.dedent(KEYED_CLIENT.format(ip=SERVER_IP, port=PORT,
                                                                key=str(tmp_path / "client.json")))],
                           capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir(), env=env)
        assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stdout[-3000:] + r.stderr[-3000:]
        server.check_alive()
    finally:
        server.stop()
