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
    assert srv.stats()["tx_coalesced"] >= 8


def test_off_by_the_environment(make_server, monkeypatch):
    monkeypatch.setenv("SPLITRPC_UDP_GSO", "0")
    started, release = threading.Event(), threading.Event()
    srv = _server(make_server, started, release)
    _batch_of_replies(srv, started, release)
    assert srv.stats()["tx_coalesced"] == 0
