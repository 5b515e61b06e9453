"""test_aio.py: splitrpc.aio.Client: awaitable calls with the blocking client's semantics (right replies, per-call errors, timeouts, Unavailable, retransmission on a lossy link, the window), 10,000 concurrent calls, cancellation abandoning a call, one loop per client, and uvloop."""
import asyncio
import socket
import time

import numpy as np
import pytest
from chaos_proxy import ChaosProxy, Faults

import splitrpc
from splitrpc import TensorSpec, aio
from splitrpc.services import SERVICES, register_builtin_services

VEC = SERVICES["vecadd"]
SLOW_ID, FAIL_ID = 40, 41


def _slow_and_failing(srv) -> None:
    register_builtin_services(srv)

    @srv.function(SLOW_ID, "slow", inputs=[TensorSpec("x", "float32", (4,))],
                  outputs=[TensorSpec("y", "float32", (4,))])
    def slow(x, y):
        time.sleep(0.2)
        y[:] = x

    @srv.function(FAIL_ID, "fails", inputs=[TensorSpec("x", "float32", (4,))],
                  outputs=[TensorSpec("y", "float32", (4,))])
    def fails(x, y):
        raise ValueError("this function always fails")


def _run(coro):
    return asyncio.run(coro)


def test_calls_are_right_and_errors_are_the_blocking_clients(make_server):
    srv = make_server(_slow_and_failing)
    rng = np.random.default_rng(1)

    async def main():
        async with aio.Client("127.0.0.1", srv.port) as c:
            x = VEC.example(rng)
            assert await c.call(VEC.func_id, x) == VEC.expected(x)
            assert (await c.ping())["ready"] is True
            names = {f.name for f in (await c.describe()).functions}
            assert {"vecadd", "slow", "fails"} <= names
            with pytest.raises(splitrpc.UnknownFunction):
                await c.call(999, b"x")
            with pytest.raises(splitrpc.InternalError, match="always fails"):
                await c.call(FAIL_ID, np.zeros(4, np.float32))
            with pytest.raises(splitrpc.BadRequest):
                await c.call(VEC.func_id, b"too short")
            with pytest.raises(ValueError, match="aux"):
                await c.call(VEC.func_id, x, aux=70000)
            assert await c.call(VEC.func_id, x) == VEC.expected(x)  # the client goes on after errors
            assert c.pending() == 0

    _run(main())


def test_ten_thousand_concurrent_calls_are_right_and_none_sees_busy(builtin_server):
    """The window holds what the server's queue could not take: every call right, no Busy."""
    rng = np.random.default_rng(2)
    xs = [VEC.example(rng) for _ in range(100)]

    async def main():
        async with aio.Client("127.0.0.1", builtin_server.port, timeout=30.0) as c:
            replies = await asyncio.gather(*[c.call(VEC.func_id, xs[i % 100]) for i in range(10_000)])
            assert all(r == VEC.expected(xs[i % 100]) for i, r in enumerate(replies))
            st = c.stats()
            assert st["window_waits"] > 0 and st["errors"] == 0 and st["timeouts"] == 0 and c.pending() == 0

    _run(main())


def test_a_lossy_link_is_retransmitted_by_the_loops_timer(make_server):
    """30% loss each way: the loop wakes for each retransmission (nothing else receives)."""
    srv = make_server(register_builtin_services)
    rng = np.random.default_rng(3)
    xs = [VEC.example(rng) for _ in range(200)]
    with ChaosProxy(("127.0.0.1", srv.port), to_server=Faults(loss=0.3), to_client=Faults(loss=0.3), seed=5) as px:
        async def main():
            async with aio.Client("127.0.0.1", px.port, timeout=20.0, retries=30, rto_min=0.005, rto_initial=0.02,
                                  rto_max=0.05) as c:
                for i in range(0, len(xs), 8):
                    got = await asyncio.gather(*[c.call(VEC.func_id, x) for x in xs[i:i + 8]])
                    assert got == [VEC.expected(x) for x in xs[i:i + 8]]
                return c.stats()

        st = _run(main())
    assert st["retransmits"] > 50 and st["timeouts"] == 0
    assert px.up.counts["lost"] > 20 and px.down.counts["lost"] > 20


def test_timeout_and_unavailable(make_server):
    srv = make_server(register_builtin_services)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    with ChaosProxy(("127.0.0.1", srv.port), to_server=Faults(loss=1.0)) as px:
        async def main():
            async with aio.Client("127.0.0.1", px.port, timeout=0.3, retries=2, rto_min=0.01) as c:
                t = time.monotonic()
                with pytest.raises(splitrpc.CallTimeout):
                    await c.call(VEC.func_id, VEC.example(np.random.default_rng(4)))
                took = time.monotonic() - t
                assert 0.25 <= took < 1.0, took
                with pytest.raises(splitrpc.CallTimeout, match="deadline"):
                    await c.call(VEC.func_id, b"", deadline=time.monotonic() - 1)
            async with aio.Client("127.0.0.1", dead, timeout=5.0) as c:
                t = time.monotonic()
                with pytest.raises(splitrpc.Unavailable):
                    await c.call(VEC.func_id, b"x")
                assert time.monotonic() - t < 2.0

        _run(main())


def test_a_cancelled_call_is_abandoned_and_its_late_reply_dropped(make_server):
    srv = make_server(_slow_and_failing)

    async def main():
        async with aio.Client("127.0.0.1", srv.port, timeout=5.0) as c:
            task = asyncio.ensure_future(c.call(SLOW_ID, np.ones(4, np.float32)))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert c.abandoned == 1 and c.pending() == 0
            await asyncio.sleep(0.4)  # the slow reply comes meanwhile, for a call nobody waits for
            x = VEC.example(np.random.default_rng(5))
            assert await c.call(VEC.func_id, x) == VEC.expected(x)
            st = c.stats()
            assert st["late_or_unknown"] >= 1 and st["abandoned"] == 1

    _run(main())


def test_close_fails_pending_calls_and_one_loop_owns_a_client(make_server):
    srv = make_server(_slow_and_failing)
    c = aio.Client("127.0.0.1", srv.port, timeout=5.0)

    async def first():
        task = asyncio.ensure_future(c.call(SLOW_ID, np.ones(4, np.float32)))
        await asyncio.sleep(0.02)
        c.close()
        with pytest.raises(splitrpc.SplitRPCError, match="closed"):
            await task
        with pytest.raises(splitrpc.SplitRPCError, match="closed"):
            await c.call(VEC.func_id, b"")

    _run(first())
    c2 = aio.Client("127.0.0.1", srv.port)

    async def use():
        x = VEC.example(np.random.default_rng(6))
        return await c2.call(VEC.func_id, x) == VEC.expected(x)

    assert _run(use())
    with pytest.raises(RuntimeError, match="another event loop"):
        _run(use())  # asyncio.run makes a new loop
    c2.close()


@pytest.mark.parametrize("kw,msg", [(dict(busy_poll=True), "busy_poll"), (dict(transport="dpdk"), "DPDK"),
                                    (dict(window=-1), "window")])
def test_bad_settings_are_refused(kw, msg):
    with pytest.raises(ValueError, match=msg):
        aio.Client("127.0.0.1", 9, **kw)


def test_uvloop(builtin_server):
    uvloop = pytest.importorskip("uvloop")
    rng = np.random.default_rng(7)
    xs = [VEC.example(rng) for _ in range(50)]

    async def main():
        async with aio.Client("127.0.0.1", builtin_server.port, timeout=10.0) as c:
            got = await asyncio.gather(*[c.call(VEC.func_id, xs[i % 50]) for i in range(1000)])
            return all(r == VEC.expected(xs[i % 50]) for i, r in enumerate(got))

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(main())


def test_pool_spreads_awaited_calls_and_moves_them_off_a_draining_or_silent_replica(make_server):
    """Two replicas: 500 awaited calls all right and both used; one replica draining, then one
    silent (all its datagrams lost): idempotent calls still all right, through the other."""
    a, b = make_server(register_builtin_services), make_server(register_builtin_services)
    rng = np.random.default_rng(8)
    xs = [VEC.example(rng) for _ in range(20)]

    async def calls(pool, n, **kw):
        got = await asyncio.gather(*[pool.call(VEC.func_id, xs[i % 20], **kw) for i in range(n)])
        return all(g == VEC.expected(xs[i % 20]) for i, g in enumerate(got))

    async def main():
        async with aio.Pool([f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"], timeout=5.0) as pool:
            assert await calls(pool, 500)
            used = pool.stats()["replicas"]
            assert all(v["ok"] > 0 for v in used.values()), used
            a.drain()
            assert await calls(pool, 200)
            assert pool.stats()["replicas"][f"127.0.0.1:{a.port}"]["ok"] == used[f"127.0.0.1:{a.port}"]["ok"]
            with pytest.raises(TypeError, match="await"):
                pool.call_async(VEC.func_id, xs[0])
        with pytest.raises(splitrpc.SplitRPCError, match="closed"):
            await pool.call(VEC.func_id, xs[0])

    _run(main())
    c = make_server(register_builtin_services)
    with ChaosProxy(("127.0.0.1", c.port), to_server=Faults(loss=1.0)) as px:
        async def silent():
            async with aio.Pool([f"127.0.0.1:{px.port}", f"127.0.0.1:{b.port}"], timeout=5.0, attempt_timeout=0.1,
                                probe_interval=None, choice="random", seed=1) as pool:
                assert await calls(pool, 100, idempotent=True)
                return pool.failovers

        assert _run(silent()) > 0
