"""test_async_functions.py: `async def` server functions: run on the server's own event loop thread (never the worker's, never the engine's), per batch or per call; one that awaits a second splitrpc server answers 1,000 concurrent calls right; exceptions fail the batch, or the call alone, as for plain functions; stop() cancels what still runs; bad registrations are refused."""
import asyncio
import threading
import time

import numpy as np
import pytest

import splitrpc
from splitrpc import TensorSpec, aio
from splitrpc.coroutines import THREAD_NAME
from splitrpc.services import SERVICES, register_builtin_services

VEC = SERVICES["vecadd"]
IN = [TensorSpec("x", "float32", (256,))]
OUT = [TensorSpec("y", "float32", (256,))]
SMALL = [TensorSpec("x", "float32", (4,))]


def test_an_async_function_awaiting_a_second_server_answers_1000_concurrent_calls(make_server):
    """Server A's async function calls vecadd on server B (splitrpc.aio inside the body) and adds
    one more: 1,000 concurrent calls to A all right; every body ran on A's loop thread, none on
    its worker or on a thread Python does not know (the native engine's)."""
    backend = make_server(register_builtin_services)
    seen: set = set()
    state: dict = {}

    def setup(srv):
        @srv.function(60, "twice", inputs=IN, outputs=OUT, max_batch=8)
        async def twice(x, y):
            t = threading.current_thread()
            seen.add((t.name, isinstance(t, threading._DummyThread), t is state.get("worker")))
            c = state.get("client")
            if c is None:
                c = state["client"] = aio.Client("127.0.0.1", backend.port, timeout=10.0)
            # one backend call per call of the batch, concurrently
            replies = await asyncio.gather(*[c.call(VEC.func_id, x[i]) for i in range(x.shape[0])])
            for i, r in enumerate(replies):
                y[i] = np.frombuffer(r, np.float32) + np.float32(1)

    srv = make_server(setup)
    state["worker"] = srv._thread
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(256).astype(np.float32) for _ in range(50)]

    async def main():
        async with aio.Client("127.0.0.1", srv.port, timeout=30.0) as c:
            got = await asyncio.gather(*[c.call(60, xs[i % 50]) for i in range(1000)])
        return [np.frombuffer(g, np.float32) for g in got]

    got = asyncio.run(main())
    assert all(np.array_equal(g, (xs[i % 50] + np.float32(1)) + np.float32(1)) for i, g in enumerate(got))
    assert seen == {(THREAD_NAME, False, False)}
    info = next(f for f in srv.functions() if f.name == "twice")
    assert info.executor == "asyncio"
    srv.stop()
    assert not any(t.name == THREAD_NAME for t in threading.enumerate())  # the loop's thread is gone
    state["client"].close()


def test_per_call_mode_fails_a_call_alone(make_server):
    """per_call=True: each call awaited alone with its own arrays; a RemoteError fails that call
    alone with it, another exception fails it alone with INTERNAL; the others are answered."""
    def setup(srv):
        @srv.function(61, "each", inputs=SMALL, outputs=SMALL, per_call=True, max_batch=16)
        async def each(x, y):
            assert x.shape == (4,) and y.shape == (4,)  # one call's element, no batch dimension
            await asyncio.sleep(0.001)
            if x[0] == 7:
                raise splitrpc.BadRequest("seven is refused")
            if x[0] == 8:
                raise KeyError("eight")
            y[:] = x * 2

    srv = make_server(setup)

    async def main():
        async with aio.Client("127.0.0.1", srv.port, timeout=10.0) as c:
            return await asyncio.gather(*[c.call(61, np.full(4, i % 10, np.float32)) for i in range(200)],
                                        return_exceptions=True)

    got = asyncio.run(main())
    for i, g in enumerate(got):
        if i % 10 == 7:
            assert isinstance(g, splitrpc.BadRequest) and "seven is refused" in str(g)
        elif i % 10 == 8:
            assert isinstance(g, splitrpc.InternalError) and "KeyError" in str(g)
        else:
            assert np.array_equal(np.frombuffer(g, np.float32), np.full(4, 2 * (i % 10), np.float32))
    assert next(f for f in srv.functions() if f.name == "each").executor == "asyncio:per-call"


def test_batch_mode_raising_fails_the_batch_and_serving_goes_on(make_server):
    def setup(srv):
        @srv.function(62, "picky", inputs=SMALL, outputs=SMALL, max_batch=1)
        async def picky(x, y):
            if x[0, 0] < 0:
                raise ValueError("negative")
            if x[0, 0] == 5:
                return {0: splitrpc.TooLarge("five is too large")}
            y[:] = x + 1

    srv = make_server(setup)
    with splitrpc.Client("127.0.0.1", srv.port, timeout=5.0) as c:
        with pytest.raises(splitrpc.InternalError, match="negative"):
            c.call(62, np.full(4, -1, np.float32))
        with pytest.raises(splitrpc.TooLarge, match="five"):
            c.call(62, np.full(4, 5, np.float32))
        assert np.array_equal(np.frombuffer(c.call(62, np.ones(4, np.float32)), np.float32), np.full(4, 2.0))


def test_stop_cancels_what_still_runs(make_server):
    started = threading.Event()

    def setup(srv):
        @srv.function(63, "forever", inputs=SMALL, outputs=SMALL)
        async def forever(x, y):
            started.set()
            await asyncio.sleep(3600)

    srv = make_server(setup)
    c = splitrpc.Client("127.0.0.1", srv.port, timeout=30.0, retries=0)
    fut = c.call_async(63, np.ones(4, np.float32))
    assert started.wait(5.0)
    t = time.monotonic()
    srv.stop()  # does not wait an hour
    assert time.monotonic() - t < 5.0
    assert not any(th.name == THREAD_NAME for th in threading.enumerate())
    c.close()
    assert fut.done()


@pytest.mark.parametrize("kw,msg", [(dict(raw=True), "not raw"), (dict(executor=2), "executor"),
                                    (dict(device="cuda:0"), "GPU")])
def test_bad_async_registrations_are_refused(make_server, kw, msg):
    async def f(x, y):
        pass

    srv = splitrpc.Server("127.0.0.1", 0)
    try:
        specs = {} if kw.get("raw") else {"inputs": SMALL, "outputs": SMALL}
        with pytest.raises(ValueError, match=msg):
            srv.add_function(f, 70, "f", **specs, **kw)
        with pytest.raises(ValueError, match="per_call=True is for async def"):
            srv.add_function(lambda x, y: None, 71, "g", SMALL, SMALL, per_call=True)
    finally:
        srv.close()


def test_per_call_scalars_and_stop_from_an_async_function_is_refused(make_server):
    """Per call, a tensor of shape () is a 0-d view the function writes; stop() from an async
    function's body raises instead of waiting for itself."""
    said: list = []

    def setup(srv):
        scalar = [TensorSpec("v", "float32", ())]

        @srv.function(64, "square", inputs=scalar, outputs=scalar, per_call=True, max_batch=8)
        async def square(v, out):
            assert v.shape == () and out.shape == ()
            out[...] = v * v

        @srv.function(65, "stopper", inputs=SMALL, outputs=SMALL)
        async def stopper(x, y):
            try:
                srv.stop()
            except splitrpc.SplitRPCError as e:
                said.append(str(e))
            y[:] = x

    srv = make_server(setup)

    async def main():
        async with aio.Client("127.0.0.1", srv.port, timeout=10.0) as c:
            got = await asyncio.gather(*[c.call(64, np.float32(i)) for i in range(40)])
            await c.call(65, np.ones(4, np.float32))
        return [float(np.frombuffer(g, np.float32)[0]) for g in got]

    assert asyncio.run(main()) == [float(i * i) for i in range(40)]
    assert said and "would wait for itself" in said[0] and srv.state == "running"
