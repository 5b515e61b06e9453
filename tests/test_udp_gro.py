"""test_udp_gro.py: datagrams a client sent as one buffer for the kernel to cut (UDP segmentation offload) reach the server still coalesced (UDP receive offload) and are taken apart there: each is checked and answered as if it had come alone, a bad one fails alone, datagrams shorter than a header are each dropped as short, and SPLITRPC_UDP_GRO=0 turns it off."""
import socket

import numpy as np
import pytest

from splitrpc import TensorSpec

import wire_ref as ref
from conftest import settled

SPEC_IN, SPEC_OUT = [TensorSpec("x", "float32", (256,))], [TensorSpec("y", "float32", (256,))]
UDP_SEGMENT, UDP_GRO = 103, 104


def _kernel_offers_offloads() -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.getsockopt(socket.SOL_UDP, UDP_SEGMENT)
            s.setsockopt(socket.SOL_UDP, UDP_GRO, 1)
            return True
        except OSError:
            return False


pytestmark = pytest.mark.skipif(not _kernel_offers_offloads(),
                                reason="this kernel has no UDP segmentation or receive offload (Linux 5.0+)")


def _server(make_server):
    def setup(srv):
        @srv.function(1, "vecadd", inputs=SPEC_IN, outputs=SPEC_OUT, max_batch=16)
        def vecadd(x, y):
            np.add(x, np.float32(1), out=y)

        srv.add_function(lambda reqs, resps: [resps[i].__setitem__(slice(0, len(r)), r) or len(r)
                                              for i, r in enumerate(reqs)],
                         3, "echo", raw=True, max_request=1 << 20, max_response=1 << 20)

    return make_server(setup)


def _send_run(sock, port: int, dgrams: list[bytes]) -> None:
    """dgrams (all of one length, the last may be shorter) as one buffer the kernel cuts."""
    seg = len(dgrams[0])
    assert all(len(d) == seg for d in dgrams[:-1]) and len(dgrams[-1]) <= seg
    sock.setsockopt(socket.SOL_UDP, UDP_SEGMENT, seg)
    try:
        sock.sendto(b"".join(dgrams), ("127.0.0.1", port))
    finally:
        sock.setsockopt(socket.SOL_UDP, UDP_SEGMENT, 0)


def _collect(sock, n: int, timeout: float = 5.0) -> list[bytes]:
    sock.settimeout(timeout)
    got = [sock.recv(70000) for _ in range(n)]
    sock.settimeout(0.1)
    with pytest.raises(socket.timeout):
        got.append(sock.recv(70000))  # nothing more
    return got


def _vecadd(req_id: int, x) -> bytes:
    return ref.datagram(ref.Header(0, 1, req_id, 0, 1, 1024, 0, 2), x.tobytes())


@pytest.fixture
def sock():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind(("127.0.0.1", 0))
    yield s
    s.close()


def test_a_run_of_calls_arrives_coalesced_and_each_is_answered(make_server, sock):
    srv = _server(make_server)
    xs = [np.full(256, i, np.float32) for i in range(8)]
    _send_run(sock, srv.port, [_vecadd(100 + i, x) for i, x in enumerate(xs)])
    replies = {ref.decode(d).req_id: d for d in _collect(sock, 8)}
    assert sorted(replies) == list(range(100, 108))
    for i, x in enumerate(xs):
        assert np.array_equal(np.frombuffer(replies[100 + i][22:], np.float32), x + 1)
    st = settled(srv, lambda st: st["calls"] == 8)
    assert st["rx_datagrams"] == 8 and st["rx_coalesced"] == 8 and st["calls"] == 8


def test_a_bad_datagram_in_a_run_fails_alone(make_server, sock):
    """The fourth has its magic flipped (its header check fails), the sixth names no function:
    the other six are answered, the sixth gets its ERROR, the fourth is counted and silent."""
    srv = _server(make_server)
    xs = [np.full(256, i, np.float32) for i in range(8)]
    dgrams = [_vecadd(200 + i, x) for i, x in enumerate(xs)]
    dgrams[3] = bytes([dgrams[3][0] ^ 0xFF]) + dgrams[3][1:]
    dgrams[5] = ref.datagram(ref.Header(0, 77, 205, 0, 1, 1024, 0, 2), xs[5].tobytes())
    _send_run(sock, srv.port, dgrams)
    got = {ref.decode(d).req_id: ref.decode(d) for d in _collect(sock, 7)}
    assert sorted(got) == [200, 201, 202, 204, 205, 206, 207]
    assert got[205].type == ref.ERROR and all(got[r].type == ref.RESPONSE for r in got if r != 205)
    st = settled(srv, lambda st: st["drops"]["bad_check"] == 1)
    assert st["rx_coalesced"] == 8 and st["drops"]["bad_check"] == 1 and st["calls"] == 6


def test_datagrams_shorter_than_a_header_in_a_run_are_each_dropped_as_short(make_server, sock):
    """Ten datagrams of 11 bytes whose bytes, put together, would make valid requests: each is
    one datagram, shorter than a header, never a call."""
    srv = _server(make_server)
    whole = b"".join(_vecadd(300 + i, np.zeros(256, np.float32))[:55] for i in range(2))
    _send_run(sock, srv.port, [whole[i:i + 11] for i in range(0, 110, 11)])
    st = settled(srv, lambda st: st["drops"]["short"] == 10)
    assert st["drops"]["short"] == 10 and st["rx_datagrams"] == 10 and st["calls"] == 0
    sock.settimeout(0.1)
    with pytest.raises(socket.timeout):
        sock.recv(70000)


@pytest.mark.parametrize("s", [1450, 8950])
def test_the_segments_of_a_message_sent_in_runs_are_put_together(make_server, sock, s):
    """200 KB echoed, cut at 1450 (runs of up to 44, copied out of the receive burst) and at 8950
    bytes (runs of 7: large segments; after the first run each next one is received laid out
    as the segments expected, every datagram's data straight into its place)."""
    srv = _server(make_server)
    data = np.random.default_rng(s).bytes(200_000)
    segs = ref.segments(3, 400, data, s)
    per_run = max(1, 65000 // len(segs[0]))
    for i in range(0, len(segs), per_run):  # each run received before the next is sent: one entry each
        _send_run(sock, srv.port, segs[i:i + per_run])
        sent = min(i + per_run, len(segs))
        assert settled(srv, lambda st: st["rx_datagrams"] >= sent)["rx_datagrams"] == sent
    sock.settimeout(5)
    dgrams = []
    while True:
        dgrams.append(sock.recv(70000))
        msgs = ref.reassemble(dgrams)
        if msgs[(ref.RESPONSE, 3, 400)]["data"] is not None:
            break
    assert msgs[(ref.RESPONSE, 3, 400)]["data"] == data
    st = settled(srv, lambda st: st["calls"] == 1)
    assert st["rx_coalesced"] >= len(segs) - per_run and st["drops"]["inconsistent"] == 0
    if s < 8192:
        assert st["rx_in_place"] == 0
    else:  # all but the first run
        assert st["rx_in_place"] == len(segs) - per_run and st["rx_unscattered"] == 0


def test_off_by_the_environment(make_server, sock, monkeypatch):
    monkeypatch.setenv("SPLITRPC_UDP_GRO", "0")
    srv = _server(make_server)
    xs = [np.full(256, i, np.float32) for i in range(8)]
    _send_run(sock, srv.port, [_vecadd(500 + i, x) for i, x in enumerate(xs)])
    assert len(_collect(sock, 8)) == 8
    st = settled(srv, lambda st: st["calls"] == 8)
    assert st["rx_coalesced"] == 0 and st["rx_datagrams"] == 8


def test_a_load_run_spread_over_functions_sends_its_burst_as_one_run(make_server):
    """A request set calling two functions with requests of one size, alternately: the native load
    generator sends each burst of calls in one send (srpc_client_send_each_cq), so they reach the
    server as one coalesced run, where one send per function's run of calls sent each alone."""
    from splitrpc import Client
    from splitrpc.load_run import run_load

    srv = _server(make_server)
    x = np.arange(256, dtype=np.float32)
    reqs, expects = [x.tobytes(), bytes(range(256)) * 4], [(x + 1).tobytes(), bytes(range(256)) * 4]
    with Client("127.0.0.1", srv.port, timeout=2.0, retries=0) as c:
        r = run_load(c, [1, 3], reqs, expect=expects, concurrency=8, n=200,
                     index=np.arange(200, dtype=np.uint32) % 2)
    assert np.all(r.rec["code"] == 0), np.unique(r.rec["code"], return_counts=True)
    st = settled(srv, lambda st: st["calls"] == 200)
    assert st["rx_coalesced"] >= 8  # the first burst: 8 calls, alternating functions, in one buffer
