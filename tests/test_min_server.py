"""test_min_server.py: the minimal protocol server (the benchmark's bar, srpc_min_serve) answers the built-in services right in every protocol version, alone and with calls outstanding, and survives malformed datagrams."""
import socket
import struct
import threading

import numpy as np
import pytest

from splitrpc import Client, raw_udp
from splitrpc.errors import BadRequest, TooLarge, UnknownFunction
from splitrpc.services import SERVICES
from splitrpc.wire import HDR_LEN

import wire_ref as ref


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(params=[False, True], ids=["block", "busy"])
def min_server(request):
    port, stop, rc = _free_port(), raw_udp.StopFlag(), []
    th = threading.Thread(target=lambda: rc.append(raw_udp.min_serve("127.0.0.1", port, request.param, stop)),
                          daemon=True)
    th.start()
    with Client("127.0.0.1", port, timeout=10.0, wait_for_ready=True) as c:  # up once it answers
        assert c.call(3, b"up") == b"up"
    yield port
    stop.set()
    th.join(5)
    assert not th.is_alive() and rc == [0]


def _request(name: str, seed: int = 1) -> tuple[bytes, bytes]:
    svc = SERVICES[name]
    req = svc.example(np.random.default_rng(seed))
    return req, svc.expected(req)


@pytest.mark.parametrize("protocol", [1, 2, 3])
def test_each_service_answered_right_in_each_version(min_server, protocol):
    with Client("127.0.0.1", min_server, timeout=2.0, protocol=protocol, segment_size=8950) as c:
        for name in ("vecadd", "head", "echo"):
            req, want = _request(name)
            assert c.call(SERVICES[name].func_id, req) == want, name
        big = np.random.default_rng(2).bytes(300_000)  # 34 segments of 8950 B each way
        assert c.call(3, big) == big
        assert c.call(3, b"") == b""


def test_sixteen_large_calls_outstanding_all_right(min_server):
    req, want = _request("head")
    with Client("127.0.0.1", min_server, timeout=5.0, segment_size=8950) as c:
        futs = [c.call_async(4, req) for _ in range(16)]
        assert all(f.result() == want for f in futs)


def test_errors_are_the_ones_splitrpc_gives(min_server):
    with Client("127.0.0.1", min_server, timeout=2.0) as c:
        with pytest.raises(UnknownFunction):
            c.call(77, b"x")
        with pytest.raises(BadRequest):
            c.call(1, b"short")
        with pytest.raises(TooLarge):
            c.call(3, bytes(raw_udp_max() + 1))


def raw_udp_max() -> int:
    from splitrpc._native import lib

    return lib.SRPC_MIN_MAX_MSG


def _v2_header(func_id: int, req_id: int, seq: int, nseg: int, msg_len: int) -> bytes:
    return ref.encode(0, func_id, req_id, seq, nseg, msg_len, version=2)


def test_malformed_datagrams_are_dropped_and_serving_goes_on(min_server):
    bad = [b"", b"\xa5", bytes(HDR_LEN - 1), bytes(HDR_LEN), b"\xff" * 1000,
           b"\xa5\x20" + bytes(HDR_LEN - 2),                                   # v2 with a wrong check
           _v2_header(1, 5, 3, 2, 100) + bytes(10),                            # seq >= nseg
           _v2_header(3, 6, 0, 3, 30) + bytes(20),                             # S 20 gives 2 segments, not 3
           _v2_header(3, 7, 0, 50, 2_000_000) + bytes(40_000),                 # larger than it takes
           _v2_header(3, 8, 1, 2, 30) + bytes(25)]                             # a last segment too long
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for d in bad:
            s.sendto(d, ("127.0.0.1", min_server))
        # two segments of one call that disagree on msg_len: the second is dropped, no reply
        s.sendto(_v2_header(3, 9, 0, 2, 40) + bytes(20), ("127.0.0.1", min_server))
        s.sendto(_v2_header(3, 9, 1, 2, 41) + bytes(21), ("127.0.0.1", min_server))
        s.settimeout(0.3)
        got = []
        try:
            while True:
                got.append(s.recv(70000))
        except socket.timeout:
            pass
    # only the too-large request is answered (ERROR TOO_LARGE, one datagram); nothing else
    assert len(got) == 1 and got[0][1] & 0x0F == 2 and struct.unpack(">H", got[0][20:22])[0] == 6
    req, want = _request("vecadd")
    with Client("127.0.0.1", min_server, timeout=2.0) as c:
        assert c.call(1, req) == want
