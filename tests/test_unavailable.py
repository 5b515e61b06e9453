"""Failing fast on a server that is not there (issue 33, item 2): a call to a closed loopback port raises Unavailable at once, not CallTimeout after its timeout, for blocking calls and futures (sent or held in the window); wait_for_ready (per client, per call) waits for a server that starts within the timeout; the Pool takes such a replica out and sends idempotent calls to another."""
import threading
import time

import numpy as np
import pytest
from conftest import free_udp_port

import splitrpc
from splitrpc.services import SERVICES, register_builtin_services

VEC = SERVICES["vecadd"]
SLOW = 5.0  # the calls' timeout: failing well before it is failing fast


def test_a_closed_port_fails_calls_at_once_with_unavailable(make_client):
    port = free_udp_port()
    c = make_client(port, timeout=SLOW, window=4)
    t0 = time.monotonic()
    with pytest.raises(splitrpc.Unavailable, match=f"127.0.0.1 port {port} is unreachable"):
        c.call(VEC.func_id, b"x" * 8)
    futs = [c.call_async(VEC.func_id, b"x" * 8) for _ in range(20)]  # 4 sent, 16 held in the window
    for f in futs:
        with pytest.raises(splitrpc.Unavailable):
            f.result()
    assert time.monotonic() - t0 < SLOW / 2
    st = c.stats()
    assert st["unavailable"] == 21 and st["unreachable"] >= 1 and st["timeouts"] == 0, st
    assert isinstance(splitrpc.Unavailable("x"), ConnectionError)


def test_wait_for_ready_waits_for_a_server_that_starts_within_the_timeout(make_client):
    port = free_udp_port()
    c = make_client(port, timeout=SLOW)
    srv = splitrpc.Server("127.0.0.1", port, wait="block")
    register_builtin_services(srv)
    rng = np.random.default_rng(33)
    req = VEC.example(rng)
    starter = threading.Timer(0.3, srv.start)
    starter.start()
    try:
        assert c.call(VEC.func_id, req, wait_for_ready=True) == VEC.expected(req)  # sent before the server was up
        assert c.stats()["retransmits"] >= 1  # sent again until the server was there
    finally:
        starter.join()
        srv.close()
    with pytest.raises(splitrpc.Unavailable):  # and closed again: the client's default fails fast
        c.call(VEC.func_id, req)


def test_wait_for_ready_per_client_and_its_per_call_override(make_client):
    port = free_udp_port()
    c = make_client(port, timeout=0.3, wait_for_ready=True)
    t0 = time.monotonic()
    with pytest.raises(splitrpc.CallTimeout):
        c.call(VEC.func_id, b"x" * 8)
    assert time.monotonic() - t0 >= 0.25
    with pytest.raises(splitrpc.Unavailable):
        c.call(VEC.func_id, b"x" * 8, timeout=SLOW, wait_for_ready=False)
    with pytest.raises(splitrpc.Unavailable):
        c.call_async(VEC.func_id, b"x" * 8, SLOW, wait_for_ready=False).result()


def test_the_pool_sends_idempotent_calls_past_a_replica_whose_port_is_closed(make_server):
    """No prober (probe_interval=None): only the calls can find the dead replica; every
    idempotent call is answered, the dead replica is taken out at its first Unavailable, and a
    call not marked idempotent that lands there raises Unavailable at once."""
    srv = make_server(register_builtin_services)
    dead = free_udp_port()
    rng = np.random.default_rng(7)
    with splitrpc.Pool([("127.0.0.1", dead), ("127.0.0.1", srv.port)], choice="random", timeout=SLOW,
                       probe_interval=None, seed=3) as pool:
        for _ in range(40):
            req = VEC.example(rng)
            assert pool.call(VEC.func_id, req, idempotent=True) == VEC.expected(req)
        st = pool.stats()
        assert st["totals"]["unavailable"] == 1 and st["totals"]["ok"] == 40, st
    with splitrpc.Pool([("127.0.0.1", dead)], timeout=SLOW, probe_interval=None) as pool:
        t0 = time.monotonic()
        with pytest.raises(splitrpc.Unavailable):
            pool.call(VEC.func_id, VEC.example(rng))
        assert time.monotonic() - t0 < SLOW / 2
