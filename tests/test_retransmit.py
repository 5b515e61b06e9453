"""Client retransmission through a chaos proxy: lost, duplicated and reordered datagrams in both directions, every call still gets its own right answer; the retry cap and the adaptive timeout."""
import time

import numpy as np
import pytest
from chaos_proxy import ChaosProxy, Faults

import splitrpc
from splitrpc import TensorSpec
from splitrpc.services import SERVICES, register_builtin_services

VEC = SERVICES["vecadd"]
HEAD = SERVICES["head"]


def _calls(c, svc, reqs, wave: int) -> int:
    """Calls in waves of `wave` outstanding; returns how many replies were right."""
    right = 0
    for i in range(0, len(reqs), wave):
        futs = [(r, c.call_async(svc.func_id, r)) for r in reqs[i:i + wave]]
        right += sum(f.result() == svc.expected(r) for r, f in futs)
    return right


def test_lossy_link_every_call_gets_its_own_answer(make_server, make_client):
    """5% loss, 5% duplication and 5% reordering each way: 2000 vecadd calls (16 at a time) and
    30 head calls (588 KiB, ~400 datagrams each) all return the right answer."""
    srv = make_server(register_builtin_services)
    faults = dict(loss=0.05, dup=0.05, reorder=0.05)
    rng = np.random.default_rng(11)
    with ChaosProxy(("127.0.0.1", srv.port), to_server=Faults(**faults), to_client=Faults(**faults), seed=3) as px:
        c = make_client(px.port, timeout=20.0, retries=10, rto_min=0.005, rto_initial=0.05, rto_max=0.2,
                        segment_size=1450)
        vec = [VEC.example(rng) for _ in range(2000)]
        assert _calls(c, VEC, vec, 16) == len(vec)
        head = [HEAD.example(rng) for _ in range(30)]
        assert _calls(c, HEAD, head, 1) == len(head)
        st = c.stats()
        assert st["retransmits"] > 0 and st["timeouts"] == 0 and st["errors"] == 0
        assert px.up.counts["lost"] > 0 and px.down.counts["lost"] > 0 and px.down.counts["dup"] > 0
        assert px.up.counts["reordered"] > 0 and px.down.counts["reordered"] > 0
    # the duplicates and retransmissions were answered from the reply cache or ignored
    assert srv.stats()["cache_hits"] > 0


def test_thirty_percent_drop_completes_every_call(make_server, make_client):
    srv = make_server(register_builtin_services)
    rng = np.random.default_rng(12)
    with ChaosProxy(("127.0.0.1", srv.port), to_server=Faults(loss=0.3), to_client=Faults(loss=0.3), seed=4) as px:
        c = make_client(px.port, timeout=20.0, retries=30, rto_min=0.005, rto_initial=0.02, rto_max=0.05)
        vec = [VEC.example(rng) for _ in range(300)]
        assert _calls(c, VEC, vec, 8) == len(vec)
        assert c.stats()["retransmits"] > 100  # about half the first sends cannot have made it
        assert px.up.counts["lost"] > 50 and px.down.counts["lost"] > 50


def test_retries_stop_at_the_cap_and_the_timeout_ends_the_call(make_server, make_client):
    srv = make_server(register_builtin_services)
    with ChaosProxy(("127.0.0.1", srv.port), to_server=Faults(loss=1.0)) as px:
        c = make_client(px.port, timeout=0.6, retries=3, rto_min=0.01, rto_initial=0.01, rto_max=0.02)
        with pytest.raises(splitrpc.CallTimeout):
            c.call(VEC.func_id, VEC.example(np.random.default_rng(1)))
        st = c.stats()
        assert st["retransmits"] == 3 and st["timeouts"] == 1
        assert px.up.counts["in"] == 4  # the first send and three more
        once = make_client(px.port, timeout=0.3, retries=0)
        with pytest.raises(splitrpc.CallTimeout):
            once.call(VEC.func_id, VEC.example(np.random.default_rng(2)))
        assert once.stats()["retransmits"] == 0 and px.up.counts["in"] == 5
        default = make_client(px.port, timeout=0.3, rto_initial=0.05)  # no cap by default: the timeout ends it
        with pytest.raises(splitrpc.CallTimeout):
            default.call(VEC.func_id, VEC.example(np.random.default_rng(3)))
        assert default.stats()["retransmits"] == 2 and px.up.counts["in"] == 8  # at 50 and 150 ms


def test_timeout_adapts_to_round_trips(make_server, make_client):
    srv = make_server(register_builtin_services)
    # rto_min 5 ms: a 1 ms floor was retransmitted once when another build loaded this 2-core machine
    c = make_client(srv.port, timeout=5.0, retries=2, rto_min=0.005, rto_initial=0.5, rto_max=2.0)
    assert c.stats()["rto_us"] == 500000 and c.stats()["srtt_us"] == 0
    req = VEC.example(np.random.default_rng(5))
    for _ in range(200):
        assert c.call(VEC.func_id, req) == VEC.expected(req)
    st = c.stats()
    assert 0 < st["srtt_us"] < 100000 and 5000 <= st["rto_us"] < 500000 and st["retransmits"] == 0


def test_each_function_has_its_own_round_trip_estimate(make_server, make_client):
    """A slow function called after many fast calls is not retransmitted at the fast function's
    timeout: round trips include the service time, so each function is estimated apart."""
    def setup(srv):
        register_builtin_services(srv)

        @srv.function(9, "slow", inputs=[TensorSpec("x", "uint8", (1,))], outputs=[TensorSpec("y", "uint8", (1,))])
        def slow(x, y):
            time.sleep(0.04)
            y[:] = x

    srv = make_server(setup)
    c = make_client(srv.port, timeout=5.0, retries=3, rto_min=0.005, rto_initial=0.5, rto_max=2.0)
    req = VEC.example(np.random.default_rng(6))
    for _ in range(100):
        assert c.call(VEC.func_id, req) == VEC.expected(req)
    assert c.stats()["rto_us"] == 5000  # vecadd's: the floor
    for i in range(4):
        assert c.call(9, bytes([i])) == bytes([i])
    st = c.stats()
    assert st["retransmits"] == 0, st
    assert 35000 < st["srtt_us"] < 500000 and st["rto_us"] > 40000  # the slow function's own
    assert c.call(VEC.func_id, req) == VEC.expected(req) and c.stats()["rto_us"] == 5000


@pytest.mark.parametrize("kw", [dict(retries=-1), dict(rto_min=0.0), dict(rto_min=0.5, rto_initial=0.2),
                                dict(rto_initial=2.0, rto_max=1.0)])
def test_bad_retransmission_settings(kw):
    with pytest.raises(ValueError, match="rto"):
        splitrpc.Client("127.0.0.1", 9, retries=kw.pop("retries", 3), **kw)
