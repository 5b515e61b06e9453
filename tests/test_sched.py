"""The scheduler seam from Python (issue 15, item 3): Server(sched=...) with per-function priority and weight decides which function's queued calls run next; bad settings are refused."""
import threading
import time

import numpy as np
import pytest

import splitrpc
from splitrpc import TensorSpec

SPEC = [TensorSpec("x", "float32", (1,))]


class _Gate:
    """Function 99 holds the worker in its callback until release(): the calls sent meanwhile
    queue up, so the scheduler then chooses among all of them."""

    def __init__(self, srv, **kw):
        self.open, self.entered = threading.Event(), threading.Event()

        @srv.function(99, "gate", inputs=SPEC, outputs=SPEC, **kw)
        def hold(x, y):
            self.entered.set()
            self.open.wait(10)
            y[:] = x

    def close(self, c):
        """Sends the call that holds the worker and waits until it does."""
        self.first = c.call_async(99, np.zeros(1, np.float32))
        assert self.entered.wait(5)

    def release(self, srv, queued: int):
        """Opens once `queued` calls wait (or after 5 s)."""
        deadline = time.monotonic() + 5
        while srv.stats()["queued"] < queued and time.monotonic() < deadline:
            time.sleep(0.002)
        self.open.set()
        self.first.result()


def _run_order(make_server, make_client, sched, funcs, sends):
    """funcs: {func_id: function kwargs}; a gate function holds the worker while `sends` (func ids,
    in order) queue; returns the func ids in the order their calls ran."""
    order, gates = [], []

    def setup(srv):
        gates.append(_Gate(srv))
        for fid, kw in funcs.items():
            @srv.function(fid, f"f{fid}", inputs=SPEC, outputs=SPEC, max_batch=1, **kw)
            def work(x, y, fid=fid):
                order.append(fid)
                y[:] = x

    srv = make_server(setup, sched=sched)
    c = make_client(srv.port, timeout=10.0)
    x = np.zeros(1, np.float32)
    gates[0].close(c)
    futs = []
    for fid in sends:
        futs.append(c.call_async(fid, x))
        time.sleep(0.002)  # a known order of arrival
    gates[0].release(srv, len(sends))
    for f in futs:
        f.result()
    return order


def test_priority_runs_the_high_class_first(make_server, make_client):
    order = _run_order(make_server, make_client, "priority", {1: dict(priority=0), 2: dict(priority=7)},
                       [1, 1, 1, 2, 2, 2])
    assert order == [2, 2, 2, 1, 1, 1]


def test_round_robin_is_the_default_and_alternates(make_server, make_client):
    order = _run_order(make_server, make_client, None, {1: dict(priority=0), 2: dict(priority=7)},
                       [1, 1, 1, 2, 2, 2])
    assert order == [1, 2, 1, 2, 1, 2]


def test_fair_share_follows_the_weights(make_server, make_client):
    order = _run_order(make_server, make_client, "fair", {1: dict(weight=1), 2: dict(weight=2)}, [1] * 6 + [2] * 6)
    first_six = order[:6]
    assert first_six.count(2) == 4 and first_six.count(1) == 2, order


def test_edf_runs_the_nearest_deadline_first(make_server, make_client):
    order = _run_order(make_server, make_client, "edf", {1: dict(deadline=5.0), 2: dict(deadline=1.0)},
                       [1, 1, 2, 2])
    assert order == [2, 2, 1, 1]


@pytest.mark.parametrize("kw, why", [(dict(sched="lottery"), "sched must be one of"),
                                     (dict(priority=-1), "priority must be an integer"),
                                     (dict(weight=2**32), "weight must be an integer"),
                                     (dict(priority=True), "priority must be an integer")])
def test_bad_scheduling_settings_are_refused(kw, why):
    with pytest.raises(ValueError, match=why):
        srv = splitrpc.Server("127.0.0.1", 0, **({"sched": kw["sched"]} if "sched" in kw else {}))
        try:
            srv.add_function(lambda x, y: None, 1, inputs=SPEC, outputs=SPEC, **kw)
        finally:
            srv.close()


class _MostQueued:
    """A policy of the user's: the function with the most calls queued, at most 2 per batch."""

    def __init__(self):
        self.seen = []

    def choose(self, queues):
        self.seen.append([(q.func_id, q.name, q.queued, q.priority) for q in queues])
        assert all(q.oldest_wait >= 0 and q.in_flight == 0 and q.deadline is None for q in queues)
        best = max(queues, key=lambda q: q.queued)
        return best.func_id, 2


class _Broken:
    def __init__(self, how):
        self.how, self.calls = how, 0

    def choose(self, queues):
        self.calls += 1
        if self.how == "raise":
            raise RuntimeError("policy bug")
        return 12345  # no such function


def _policy_run(make_server, make_client, policy, sched="priority"):
    order, gates = [], []

    def setup(srv):
        gates.append(_Gate(srv, priority=100))
        for fid, prio in ((1, 9), (2, 1)):
            @srv.function(fid, f"f{fid}", inputs=SPEC, outputs=SPEC, max_batch=8, priority=prio)
            def work(x, y, fid=fid):
                order.extend([fid] * len(x))
                y[:] = x

    srv = make_server(setup, sched=sched, policy=policy)
    c = make_client(srv.port, timeout=10.0)
    x = np.zeros(1, np.float32)
    gates[0].close(c)
    futs = [c.call_async(1, x) for _ in range(2)] + [c.call_async(2, x) for _ in range(5)]
    gates[0].release(srv, 7)
    for f in futs:
        f.result()
    return order, srv.stats()


def test_a_python_policy_decides_once_per_batch(make_server, make_client):
    p = _MostQueued()
    order, st = _policy_run(make_server, make_client, p)
    assert order == [2, 2, 2, 2, 1, 1, 2]  # 5 vs 2 queued, cut to 2; 3 vs 2; 1 vs 2; then 2 alone
    assert p.seen[0] == [(1, "f1", 2, 9), (2, "f2", 5, 1)]
    assert st["sched"] == {"asked": 3, "errors": 0}


@pytest.mark.parametrize("how", ["raise", "unknown"])
def test_a_failing_policy_falls_back_and_is_reported(make_server, make_client, caplog, how):
    p = _Broken(how)
    with caplog.at_level("WARNING", logger="splitrpc.server"):
        order, st = _policy_run(make_server, make_client, p)
    assert order == [1, 1, 2, 2, 2, 2, 2]  # the built-in priority policy decided
    assert p.calls == 1 and st["sched"] == {"asked": 1, "errors": 1}
    assert any("scheduling policy" in r.message for r in caplog.records)


def test_a_policy_without_choose_is_refused():
    with pytest.raises(ValueError, match="choose"):
        splitrpc.Server("127.0.0.1", 0, policy=object())


def test_aux_classes_of_one_function_run_by_priority(make_server, make_client):
    """aux_classes=3: a call's class is min(aux, 2) of its header; class k ranks priority + k."""
    order, gates = [], []

    def setup(srv):
        gates.append(_Gate(srv))

        @srv.function(1, "classed", inputs=SPEC, outputs=SPEC, max_batch=8, aux_classes=3, executor=1)
        def classed(x, y):
            order.append(sorted(x[:, 0].tolist()))
            y[:] = x * 2

    srv = make_server(setup, sched="priority")
    c = make_client(srv.port, timeout=10.0)
    gates[0].close(c)
    sends = [(0, 1.0), (0, 2.0), (1, 3.0), (2, 4.0), (65535, 5.0), (1, 6.0)]
    futs = [(v, c.call_async(1, np.array([v], np.float32), aux=aux)) for aux, v in sends]
    gates[0].release(srv, len(sends))
    for v, f in futs:
        assert np.frombuffer(f.result(), np.float32)[0] == 2 * v
    assert order == [[4.0, 5.0], [3.0, 6.0], [1.0, 2.0]]  # class 2 (aux 2, 65535), class 1, class 0
    assert srv.stats()["functions"]["classed"] == 6


@pytest.mark.parametrize("kw, why", [(dict(aux_classes=17), "aux_classes must be"),
                                     (dict(aux_classes=2, cost="aux"), "both read the request header's aux"),
                                     (dict(aux_classes=True), "aux_classes must be"),
                                     (dict(cost_classes=(10,)), "needs a cost"),
                                     (dict(cost_classes=(10,), aux_classes=2, cost="aux"), "choose one"),
                                     (dict(cost_classes=(), cost="aux"), "1 to 15 bounds"),
                                     (dict(cost_classes=tuple(range(1, 17)), cost="aux"), "1 to 15 bounds"),
                                     (dict(cost_classes=(5, 5), cost="aux"), "strictly ascending"),
                                     (dict(cost_classes=(0,), cost="aux"), r"cost_classes\[0\] must be"),
                                     (dict(cost_classes=(True,), cost="aux"), r"cost_classes\[0\] must be"),
                                     (dict(cost_classes=(2**32,), cost="aux"), r"cost_classes\[0\] must be"),
                                     (dict(cost_classes=7, cost="aux"), "a sequence of cost bounds"),
                                     (dict(class_spill=(1,), cost="aux"), "give cost_classes with it"),
                                     (dict(cost_classes=(5,), class_spill=(1, 1), cost="aux"), "one limit per class"),
                                     (dict(cost_classes=(5,), class_spill=(-1,), cost="aux"), r"class_spill\[0\]"),
                                     (dict(cost_classes=(5,), class_spill=2, cost="aux"), "a sequence of call counts")])
def test_bad_aux_cost_classes_and_spill_are_refused(kw, why):
    srv = splitrpc.Server("127.0.0.1", 0)
    try:
        with pytest.raises(ValueError, match=why):
            srv.add_function(lambda x, y: None, 1, inputs=SPEC, outputs=SPEC, **kw)
    finally:
        srv.close()


def _keys(*k) -> bytes:
    return np.array(k, "<i8").tobytes()


class _TwoLanes:
    """A raw echo function 5 whose calls cost the sum of their int64 keys' rows (row k costs k),
    on LanePool.by_class with lanes "cheap" (class 0) and "dear" (class 1); the first batch on
    lane `hold` waits in its callback until `held` is set (`entered` says it has started). `seen`
    lists each batch's (lane, costs)."""

    def __init__(self, hold: str):
        self.hold, self.held, self.entered = hold, threading.Event(), threading.Event()
        self.seen, self._lock = [], threading.Lock()
        self.lanes = splitrpc.LanePool.by_class({"cheap": 1, "dear": 1}, ["cheap", "dear"], name="test-lanes")

    def body(self, reqs, resps, costs):
        lane = splitrpc.current_lane()
        with self._lock:
            self.seen.append((lane, [int(c) for c in costs]))
        if lane == self.hold and not self.held.is_set():
            self.entered.set()
            self.held.wait(10)
        for q, r in zip(reqs, resps):
            r[:len(q)] = q
        return [len(q) for q in reqs]

    def register(self, srv, name: str, **classes) -> None:
        srv.add_function(self.body, 5, name, raw=True, max_request=8 * 64, max_response=8 * 64, max_batch=8,
                         cost=splitrpc.CostTable(np.arange(100), keys=None, key_dtype="int64"), executor=self.lanes,
                         **classes)


def test_cost_classes_form_each_lanes_batches_from_its_own_calls(make_server, make_client):
    """cost_classes=(10,) with LanePool.by_class: each call's queue is the range of its cost
    (the sum of its int64 keys' rows, row k costing k), so a batch holds only cheap or only dear
    calls, runs on that class's lane, and cheap calls are answered while a dear batch holds its
    lane (per-request routing: they neither batch with it nor wait behind it); a bad key fails
    its call alone with BAD_REQUEST before any Python runs."""
    t = _TwoLanes("dear")
    srv = make_server(lambda srv: t.register(srv, "classed", cost_classes=(10,)))
    c = make_client(srv.port, timeout=10.0)
    keys, held, entered, seen = _keys, t.held, t.entered, t.seen
    first = c.call_async(5, keys(50))          # dear: holds the dear lane
    assert entered.wait(5)
    dear = [c.call_async(5, keys(7, 8)), c.call_async(5, keys(99))]  # dear (15, 99): wait for the lane
    for i in range(12):                        # cheap (cost 0 .. 9): served meanwhile
        assert c.call(5, keys(i % 10)) == keys(i % 10)
    with pytest.raises(splitrpc.BadRequest, match="outside the table"):
        c.call(5, keys(3, 100))                # key 100: no row
    assert not first.done() and not any(f.done() for f in dear)
    held.set()
    assert first.result() == keys(50)
    assert [f.result() for f in dear] == [keys(7, 8), keys(99)]
    for lane, costs in seen:
        assert all((cost >= 10) == (lane == "dear") for cost in costs), seen
    assert sorted(cost for lane, costs in seen if lane == "dear" for cost in costs) == [15, 50, 99]
    assert sum(len(costs) for lane, costs in seen if lane == "cheap") == 12
    st = srv.stats()
    assert st["executors"]["classed"]["misrouted"] == 0
    assert st["errors"]["BAD_REQUEST"] == 1


def test_a_lane_pool_by_class_names_known_lanes():
    with pytest.raises(ValueError, match="classes must name lanes"):
        splitrpc.LanePool.by_class({"a": 1}, ["a", "b"])
    with pytest.raises(ValueError, match="classes must name lanes"):
        splitrpc.LanePool.by_class({"a": 1}, [])
    pool = splitrpc.LanePool.by_class({"a": 1, "b": 2}, ["a", "b", "a"])
    assert pool.queue_threads == 2 and pool.threads == 3


def test_cheap_calls_spill_over_a_busy_lane(make_server, make_client):
    """class_spill=(1,): while the cheap class holds a call not yet answered, cheap calls go to the
    dear class's lane instead: with the cheap lane held, they are answered there; once it is free,
    cheap calls run on it again (never the other way: a dear call never runs on the cheap lane)."""
    t = _TwoLanes("cheap")
    srv = make_server(lambda srv: t.register(srv, "spilled", cost_classes=(10,), class_spill=(1,)))
    c = make_client(srv.port, timeout=10.0)
    keys, held, entered, seen = _keys, t.held, t.entered, t.seen
    first = c.call_async(5, keys(1))           # cheap: holds the cheap lane
    assert entered.wait(5)
    for i in range(2, 8):                      # cheap, but the cheap class is at its limit: the dear lane
        assert c.call(5, keys(i)) == keys(i)
    assert c.call(5, keys(60)) == keys(60)
    assert not first.done()
    held.set()
    assert first.result() == keys(1)
    assert c.call(5, keys(9)) == keys(9)       # the cheap lane is free again
    by_lane = {lane: sorted(k for ln, costs in seen if ln == lane for k in costs) for lane in ("cheap", "dear")}
    assert by_lane == {"cheap": [1, 9], "dear": [2, 3, 4, 5, 6, 7, 60]}
