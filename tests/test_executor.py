"""Executors (issue 15, item 1): a function's batches on a thread pool run beside the worker and beside each other; a slow one holds no other function; per-call results, errors and raw lengths from pool threads; the pool's limit fills the next batch; stop waits for running callbacks."""
import threading
import time

import numpy as np
import pytest

import splitrpc
from conftest import settled
from splitrpc import TensorSpec

VEC = [TensorSpec("x", "float32", (4,))]


def _slow_and_fast(gate: threading.Event, entered: threading.Event, executor):
    def setup(srv):
        @srv.function(1, "slow", inputs=VEC, outputs=VEC, max_batch=8, executor=executor)
        def slow(x, y):
            entered.set()
            gate.wait(10)
            y[:] = x * 2

        @srv.function(2, "fast", inputs=VEC, outputs=VEC)
        def fast(x, y):
            y[:] = x + 1
    return setup


def test_a_slow_function_on_a_pool_holds_no_other_function(make_server, make_client):
    gate, entered = threading.Event(), threading.Event()
    srv = make_server(_slow_and_fast(gate, entered, executor=2))
    c = make_client(srv.port, timeout=10.0)
    x = np.arange(4, dtype=np.float32)
    slow = c.call_async(1, x)
    assert entered.wait(5)
    for i in range(50):  # all answered while the slow batch is still running
        assert np.array_equal(np.frombuffer(c.call(2, x + i), np.float32), x + i + 1)
    assert not slow.done()
    gate.set()
    assert np.array_equal(np.frombuffer(slow.result(), np.float32), x * 2)
    assert srv.stats()["functions"] == {"slow": 1, "fast": 50}


def test_inline_the_same_slow_batch_holds_the_other_function(make_server, make_client):
    """The control for the test above: inline, the fast function waits behind the slow batch."""
    gate, entered = threading.Event(), threading.Event()
    srv = make_server(_slow_and_fast(gate, entered, executor="inline"))
    c = make_client(srv.port, timeout=10.0)
    fast_c = make_client(srv.port, timeout=0.3)
    x = np.arange(4, dtype=np.float32)
    slow = c.call_async(1, x)
    assert entered.wait(5)
    with pytest.raises(splitrpc.CallTimeout):
        fast_c.call(2, x)
    gate.set()
    slow.result()


def test_batches_of_one_function_run_at_once_up_to_the_pool_size(make_server, make_client):
    lock = threading.Lock()
    running, most = [0], [0]
    both = threading.Barrier(2, timeout=5)

    def setup(srv):
        @srv.function(3, "pair", inputs=VEC, outputs=VEC, max_batch=1, executor=2)
        def pair(x, y):
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            try:
                both.wait()  # breaks (INTERNAL) unless two batches run at the same time
            except threading.BrokenBarrierError:
                pass
            time.sleep(0.01)
            y[:] = x * 3
            with lock:
                running[0] -= 1

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    xs = [np.full(4, i, np.float32) for i in range(6)]
    futs = [c.call_async(3, x) for x in xs]
    for x, f in zip(xs, futs):
        assert np.array_equal(np.frombuffer(f.result(), np.float32), x * 3)
    assert most[0] == 2  # two at once, never three
    assert not both.broken


def test_calls_wait_for_a_busy_pool_and_fill_the_next_batch(make_server, make_client):
    gate, entered = threading.Event(), threading.Event()
    srv = make_server(_slow_and_fast(gate, entered, executor=1))
    c = make_client(srv.port, timeout=10.0)
    x = np.ones(4, np.float32)
    first = c.call_async(1, x)
    assert entered.wait(5)
    rest = [c.call_async(1, x * i) for i in range(2, 7)]
    deadline = time.monotonic() + 5
    while srv.stats()["queued"] < 5 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert srv.stats()["queued"] == 5  # waiting in the queue, not handed out
    gate.set()
    first.result()
    for i, f in zip(range(2, 7), rest):
        assert np.array_equal(np.frombuffer(f.result(), np.float32), x * i * 2)
    assert srv.stats()["batch_sizes"] == {1: 1, 5: 1}


def test_per_call_errors_and_exceptions_from_a_pool_thread(make_server, make_client):
    def setup(srv):
        @srv.function(4, "lookup", inputs=[TensorSpec("key", "int64", (1,))],
                      outputs=[TensorSpec("v", "float32", (1,))], max_batch=8, executor=2)
        def lookup(key, v):
            k = key[:, 0]
            if (k == 13).any():
                raise RuntimeError("unlucky key")
            v[:, 0] = k * 0.5
            return {int(i): splitrpc.BadRequest(f"key {int(k[i])} < 0") for i in np.flatnonzero(k < 0)}

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    assert np.frombuffer(c.call(4, np.array([8], np.int64)), np.float32)[0] == 4.0
    with pytest.raises(splitrpc.BadRequest, match="key -3 < 0"):
        c.call(4, np.array([-3], np.int64))
    with pytest.raises(splitrpc.InternalError, match="RuntimeError: unlucky key"):
        c.call(4, np.array([13], np.int64))
    keys = [1, -1, 2, -2, 3] * 8
    futs = [c.call_async(4, np.array([k], np.int64)) for k in keys]
    for k, f in zip(keys, futs):
        if k < 0:
            with pytest.raises(splitrpc.BadRequest):
                f.result()
        else:
            assert np.frombuffer(f.result(), np.float32)[0] == k * 0.5
    assert srv.stats()["errors"]["INTERNAL"] == 1


def test_a_raw_function_on_a_pool(make_server, make_client):
    def setup(srv):
        @srv.function(5, "upper", raw=True, max_request=64, max_response=64, executor=2)
        def upper(reqs, resps):
            out = []
            for q, r in zip(reqs, resps):
                b = bytes(q)
                if not b.isascii():
                    out.append(splitrpc.BadRequest("not ASCII"))
                    continue
                r[:len(b)] = b.upper()
                out.append(len(b))
            return out

        @srv.function(6, "bad_length", raw=True, max_request=16, max_response=16, executor=1)
        def bad_length(reqs, resps):
            return [99] * len(reqs)

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    reqs = [b"abc", "é".encode(), b"xyz", b"", b"q" * 64] * 10
    futs = [c.call_async(5, r) for r in reqs]
    for r, f in zip(reqs, futs):
        if r.isascii():
            assert f.result() == r.upper()
        else:
            with pytest.raises(splitrpc.BadRequest, match="not ASCII"):
                f.result()
    with pytest.raises(splitrpc.InternalError, match="reply length 99 outside 0..16"):
        c.call(6, b"x")
    assert c.call(5, b"still serving") == b"STILL SERVING"


def test_one_pool_shared_by_two_functions(make_server, make_client):
    pool = splitrpc.ThreadPool(2, name="shared")
    names = set()

    def setup(srv):
        for fid, k in ((7, 2.0), (8, 3.0)):
            @srv.function(fid, f"scale{int(k)}", inputs=VEC, outputs=VEC, executor=pool)
            def scale(x, y, k=k):
                names.add(threading.current_thread().name)
                y[:] = x * k

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    x = np.arange(4, dtype=np.float32)
    for _ in range(20):
        assert np.array_equal(np.frombuffer(c.call(7, x), np.float32), x * 2)
        assert np.array_equal(np.frombuffer(c.call(8, x), np.float32), x * 3)
    assert names and all(n.startswith("shared-") for n in names)
    srv.close()
    assert pool._running == []  # its threads ended with its last server


def test_stop_waits_for_a_running_callback(make_client):
    gate, entered, finished = threading.Event(), threading.Event(), threading.Event()
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")

    @srv.function(9, "hold", inputs=VEC, outputs=VEC, executor=1)
    def hold(x, y):
        entered.set()
        gate.wait(10)
        y[:] = x
        finished.set()

    srv.start()
    c = make_client(srv.port, timeout=5.0)
    c.call_async(9, np.zeros(4, np.float32))
    assert entered.wait(5)
    threading.Timer(0.2, gate.set).start()
    srv.close()  # returns only once the callback is done with the queues
    assert finished.is_set()


@pytest.mark.parametrize("bad", ["threads", 0, -1, True, 2.5])
def test_bad_executors_are_refused(bad):
    srv = splitrpc.Server("127.0.0.1", 0)
    try:
        with pytest.raises(ValueError, match="executor|at least 1 thread"):
            srv.add_function(lambda x, y: None, 1, inputs=VEC, outputs=VEC, executor=bad)
    finally:
        srv.close()


def test_a_callback_returns_a_future_finished_later_by_another_thread(make_server, make_client):
    from concurrent.futures import Future, ThreadPoolExecutor

    mine = ThreadPoolExecutor(2)  # the user's own threads
    gate = threading.Event()

    def setup(srv):
        @srv.function(10, "later", inputs=[TensorSpec("k", "int64", (1,))],
                      outputs=[TensorSpec("v", "float32", (1,))], max_batch=4)
        def later(k, v):
            def work():
                gate.wait(10)
                if (k[:, 0] == 13).any():
                    raise ValueError("thirteen")
                v[:, 0] = k[:, 0] + 0.5
                return {int(i): splitrpc.BadRequest("negative") for i in np.flatnonzero(k[:, 0] < 0)}
            return mine.submit(work)

        @srv.function(11, "echo_later", raw=True, max_request=32, max_response=32)
        def echo_later(reqs, resps):
            f = Future()

            def work():
                for q, r in zip(reqs, resps):
                    r[:len(q)] = q
                f.set_result([len(q) for q in reqs])
            threading.Timer(0.01, work).start()
            return f

        @srv.function(2, "fast", inputs=VEC, outputs=VEC)
        def fast(x, y):
            y[:] = x + 1

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    futs = [c.call_async(10, np.array([k], np.int64)) for k in (1, -2, 3)]
    x = np.zeros(4, np.float32)
    for _ in range(20):  # the worker is free while the Futures wait
        assert np.array_equal(np.frombuffer(c.call(2, x), np.float32), x + 1)
    gate.set()
    assert np.frombuffer(futs[0].result(), np.float32)[0] == 1.5
    with pytest.raises(splitrpc.BadRequest, match="negative"):
        futs[1].result()
    assert np.frombuffer(futs[2].result(), np.float32)[0] == 3.5
    with pytest.raises(splitrpc.InternalError, match="ValueError: thirteen"):
        c.call(10, np.array([13], np.int64))
    assert c.call(11, b"raw, later") == b"raw, later"
    srv.close()
    mine.shutdown()


def test_stop_waits_for_a_future_not_done_yet(make_client):
    from concurrent.futures import Future

    pending: list[Future] = []
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")

    @srv.function(12, "never_yet", inputs=VEC, outputs=VEC)
    def never_yet(x, y):
        f = Future()
        pending.append(f)
        return f

    srv.start()
    c = make_client(srv.port, timeout=5.0)
    c.call_async(12, np.zeros(4, np.float32))
    deadline = time.monotonic() + 5
    while not pending and time.monotonic() < deadline:
        time.sleep(0.005)
    assert pending
    threading.Timer(0.2, lambda: pending[0].set_result(None)).start()
    srv.close()  # waits for the Future: its views are the queues' memory
    assert pending[0].done()


def test_a_cancelled_future_fails_its_batch_with_internal(make_server, make_client):
    from concurrent.futures import Future

    def setup(srv):
        @srv.function(13, "cancelled", inputs=VEC, outputs=VEC)
        def cancelled(x, y):
            f = Future()
            threading.Timer(0.01, f.cancel).start()
            return f

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    with pytest.raises(splitrpc.InternalError, match="CancelledError"):
        c.call(13, np.zeros(4, np.float32))
    srv.close()  # nothing left waiting


def test_a_lane_pool_routes_each_batch_and_a_busy_lane_holds_no_other(make_server, make_client):
    """LanePool shared by two functions: a batch runs on the lane its route names (current_lane()
    in the callback says which), one at a time per lane; a slow batch on one lane holds no batch
    of the other; stats() reports each lane's batches; a route that fails sends the batch to the
    first lane. (Replies of one function leave in its batches' order, so the lanes are shown
    with two functions.)"""
    gate, entered = threading.Event(), threading.Event()
    seen, running, peak = [], {"slow": 0, "quick": 0}, {"slow": 0, "quick": 0}
    lock = threading.Lock()

    def route(job):
        if job.call_args[0][0, 0] < 0:
            raise RuntimeError("no lane for a negative input")
        return "slow" if job.name == "heavy" else "quick"

    lanes = splitrpc.LanePool({"slow": 1, "quick": 1}, route, name="test-lanes")

    def body(x, y):
        lane = splitrpc.current_lane()
        with lock:
            seen.append((float(x[0, 0]), lane))
            running[lane] += 1
            peak[lane] = max(peak[lane], running[lane])
        if x[0, 0] == 100:
            entered.set()
            gate.wait(10)
        y[:] = x + 1
        with lock:
            running[lane] -= 1

    def setup(srv):
        srv.add_function(body, 1, "heavy", VEC, VEC, max_batch=1, executor=lanes)
        srv.add_function(body, 2, "light", VEC, VEC, max_batch=1, executor=lanes)

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    x = np.zeros(4, np.float32)
    slow = c.call_async(1, x + 100)
    assert entered.wait(5)
    for i in range(20):  # the quick lane serves while the slow lane's batch is held
        assert np.array_equal(np.frombuffer(c.call(2, x + i), np.float32), x + i + 1)
    assert not slow.done()
    gate.set()
    assert np.array_equal(np.frombuffer(slow.result(), np.float32), x + 101)
    assert np.array_equal(np.frombuffer(c.call(2, x - 5), np.float32), x - 4)  # route raised: first lane, served
    assert {v: lane for v, lane in seen} == {100.0: "slow", **{float(i): "quick" for i in range(20)}, -5.0: "slow"}
    assert peak == {"slow": 1, "quick": 1}
    st = settled(srv, lambda s: s["executors"]["light"]["lanes"]["slow"]["batches"] == 2)["executors"]
    assert st["heavy"] == st["light"]  # one executor, reported under each function it serves
    st = st["light"]
    assert st["kind"] == "lanes" and st["threads"] == 2 and st["misrouted"] == 1
    assert st["lanes"]["slow"]["batches"] == 2 and st["lanes"]["quick"]["batches"] == 20
    assert st["lanes"]["slow"]["busy_s"] > 0 and all(v["queued"] == 0 and v["running"] == 0
                                                     for v in st["lanes"].values())
    assert c.describe().by_name("heavy").executor == "pool:2"  # a pool of 2 threads, as the protocol says


def test_a_thread_pool_reports_its_load(make_server, make_client):
    def setup(srv):
        @srv.function(1, "pooled", inputs=VEC, outputs=VEC, executor=2)
        def pooled(x, y):
            y[:] = x

    srv = make_server(setup)
    c = make_client(srv.port, timeout=5.0)
    for i in range(10):
        c.call(1, np.full(4, i, np.float32))
    st = settled(srv, lambda s: s["executors"]["pooled"]["batches"] == 10)["executors"]["pooled"]
    assert st["kind"] == "pool" and st["threads"] == 2 and st["batches"] == 10 and st["queued"] == 0


@pytest.mark.parametrize("lanes, route", [({}, str), ({"a": 0}, str), ({"a": True}, str), ({"a": 1}, None)])
def test_a_bad_lane_pool_is_refused(lanes, route):
    with pytest.raises(ValueError):
        splitrpc.LanePool(lanes, route)


def test_an_executor_that_refuses_a_batch_fails_it_alone(make_server, make_client):
    """submit() that raises: that batch's calls get INTERNAL, the next are served, stop() returns."""
    class Picky(splitrpc.Executor):
        threads = 1

        def __init__(self):
            self.pool, self.refused = splitrpc.ThreadPool(1), 0

        def submit(self, job):
            if job.call_args[0][0, 0] < 0:
                self.refused += 1
                raise RuntimeError("no negative inputs here")
            self.pool.submit(job)

        def acquire(self):
            self.pool.acquire()

        def release(self):
            self.pool.release()

    picky = Picky()

    def setup(srv):
        srv.add_function(lambda x, y: np.copyto(y, x), 1, "picky", VEC, VEC, max_batch=1, executor=picky)

    srv = make_server(setup)
    c = make_client(srv.port, timeout=5.0)
    x = np.ones(4, np.float32)
    with pytest.raises(splitrpc.InternalError, match="no negative inputs here"):
        c.call(1, -x)
    assert np.array_equal(np.frombuffer(c.call(1, x), np.float32), x)
    assert picky.refused == 1 and srv.stats()["executors"]["picky"] == {"kind": "Picky", "threads": 1}
    srv.stop()


def test_a_pools_load_never_counts_less_than_nothing_running():
    pool = splitrpc.ThreadPool(2)
    pool.acquire()
    stop, seen = threading.Event(), []

    def feed():
        while not stop.is_set():
            pool.submit(lambda: None)
            time.sleep(0)

    t = threading.Thread(target=feed)
    t.start()
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        seen.append(pool.load()["running"])
    stop.set()
    t.join()
    pool.release()
    assert seen and min(seen) >= 0 and max(seen) <= 2


def test_a_stage_pipeline_overlaps_its_stages_and_carries_the_first_stages_result(make_server, make_client):
    """StagePipeline (Hercules's sparse-dense pipeline, issue 32): batch 1's second stage waits
    until batch 2's first stage has started, which happens only if the stages overlap (one
    thread per stage); the callback gets what the first stage computed from the batch's inputs,
    on another thread; a first stage that raises fails its batch alone with INTERNAL."""
    second_entered, first_started = threading.Event(), threading.Event()
    threads = {"first": set(), "second": set()}

    def first(job):
        x = np.asarray(job.call_args[0])
        threads["first"].add(threading.get_ident())
        if x[0, 0] == 2:
            first_started.set()
        if x[0, 0] < 0:
            raise ValueError("no first stage for a negative input")
        return x * 10  # the callback's only way to this value is stage_result()

    def body(x, y):
        threads["second"].add(threading.get_ident())
        carried = splitrpc.stage_result()
        if x[0, 0] == 1:
            second_entered.set()
            assert first_started.wait(5), "the next batch's first stage did not run beside this one"
        y[:] = carried + 1

    pipe = splitrpc.StagePipeline(first, 1, 1, name="test-stages")

    def setup(srv):
        srv.add_function(body, 1, "staged", VEC, VEC, max_batch=1, executor=pipe)

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    x = np.zeros(4, np.float32)
    f1 = c.call_async(1, x + 1)
    assert second_entered.wait(5)
    f2 = c.call_async(1, x + 2)
    assert np.array_equal(np.frombuffer(f1.result(), np.float32), x + 11)
    assert np.array_equal(np.frombuffer(f2.result(), np.float32), x + 21)
    with pytest.raises(splitrpc.errors.InternalError, match="no first stage for a negative input"):
        c.call(1, x - 1)
    assert np.array_equal(np.frombuffer(c.call(1, x + 3), np.float32), x + 31)  # the next batch is unharmed
    assert len(threads["first"]) == 1 and len(threads["second"]) == 1 and not threads["first"] & threads["second"]
    st = settled(srv, lambda s: s["executors"]["staged"]["stages"][1]["batches"] == 4)["executors"]["staged"]
    assert st["kind"] == "stages" and st["threads"] == 2 and st["first_failed"] == 1
    assert st["stages"][0]["batches"] == 4
    assert splitrpc.stage_result() is None  # not in a pipeline's second stage


@pytest.mark.parametrize("args", [(0, 1), (1, 0), (1.5, 1), (True, 1)])
def test_a_stage_pipeline_refuses_bad_thread_counts(args):
    with pytest.raises(ValueError, match="stage pipeline needs"):
        splitrpc.StagePipeline(lambda job: None, *args)
    with pytest.raises(ValueError, match="first must be callable"):
        splitrpc.StagePipeline(None, 1, 1)
