"""Co-located GNN services in a real server (issue 17): replies equal a local run, calls of several services share groups under the budget, a call too large for the budget gets TOO_LARGE naming its estimate and the budget, bad subgraphs, failing and NaN estimators fail their call alone, and the counters reach stats() and /metrics."""
import concurrent.futures as cf
import math
import threading
import urllib.request

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import splitrpc  # noqa: E402
from conftest import settled  # noqa: E402
from splitrpc.admin import AdminServer  # noqa: E402
from splitrpc.services.colocation import colocate, op_models, pmc  # noqa: E402

F, C = 16, 5
LIMITS = dict(max_nodes=400, max_edges=3000)


def _models():
    return {k: op_models.build(k, F, hidden=16, layers=2, classes=C, seed=i) for i, k in enumerate(op_models.MODELS)}


def _request(nn, ne, seed=0):
    x, ei = op_models.random_request(nn, ne, F, seed=seed)
    return x, ei, colocate.pack_request(x.numpy(), ei.numpy())


def _local(model, x, ei):
    with torch.inference_mode():
        return model(x, ei).numpy()


class _Slow(torch.nn.Module):
    """A model that takes `seconds` (sleeping, so the GIL is free) and answers zeros."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def forward(self, x, ei):
        import time
        time.sleep(self.seconds)
        return torch.zeros(x.shape[0], C)


class _Fixed:
    """An estimator of fixed answers (or raising)."""

    def __init__(self, value):
        self.value = value

    def estimate(self, nn, ne):
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


@pytest.fixture
def served():
    """A server with GCN, SAGE and GIN (func ids 1..3) co-located under BQT, a budget 0.8x GIN's
    largest request, and two services with odd estimators (4: raises, 5: NaN)."""
    ms = _models()
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    est = pmc.Estimator(ms["gin"])
    budget = int(0.8 * est.estimate(400, 3000).pmc)  # the largest request allowed does not fit
    co = colocate.CoLocation(budget, policy="bqt")
    svcs = {k: co.add(srv, i + 1, k, m, features=F, classes=C, qos=5.0, **LIMITS) for i, (k, m) in enumerate(ms.items())}
    co.add(srv, 4, "raises", ms["gcn"], features=F, classes=C, qos=5.0, estimator=_Fixed(RuntimeError("boom")), **LIMITS)
    co.add(srv, 5, "nan", ms["gcn"], features=F, classes=C, qos=5.0, estimator=_Fixed(float("nan")), **LIMITS)
    co.add(srv, 6, "slow", _Slow(0.3), features=F, classes=C, qos=5.0, estimator=_Fixed(1000), **LIMITS)
    co.start()
    srv.start()
    cl = splitrpc.Client("127.0.0.1", srv.port, timeout=20.0)
    yield srv, co, cl, ms, svcs
    cl.close()
    srv.stop()
    co.stop()
    srv.close()


def test_replies_equal_a_local_run_and_groups_stay_within_the_budget(served):
    srv, co, cl, ms, _ = served
    slow = cl.call_async(6, _request(5, 5)[2])  # holds the device while the others queue
    futs = []
    for i in range(30):
        kind = op_models.MODELS[i % 3]
        x, ei, req = _request(50 + 10 * i, 200 + 40 * i, seed=i)
        futs.append((kind, x, ei, cl.call_async(op_models.MODELS.index(kind) + 1, req)))
    for kind, x, ei, f in futs:
        got = np.frombuffer(f.result(), dtype=np.float32).reshape(x.shape[0], C)
        assert np.allclose(got, _local(ms[kind], x, ei), atol=1e-5)
    assert not np.frombuffer(slow.result(), np.float32).any()
    st = co.stats()
    assert st["peak_reserved"] <= st["budget"] and st["reserved"] == 0 and st["queued"] == 0
    assert sum(s["ok"] for s in st["services"].values()) == 31
    assert st["groups"] < 20  # calls queued behind the slow one ran together
    assert srv.stats()["colocation"]["services"]["gcn"]["ok"] == 10


def test_a_call_over_the_budget_gets_too_large_naming_estimate_and_budget(served):
    _, co, cl, ms, _ = served
    x, ei, req = _request(400, 3000)
    est = pmc.Estimator(ms["gin"]).estimate(400, 3000).pmc
    assert est > co.budget
    with pytest.raises(splitrpc.TooLarge, match=f"PMC estimate {est} B exceeds the co-location memory budget {co.budget} B"):
        cl.call(3, req)
    assert co.stats()["services"]["gin"]["too_large"] == 1
    x, ei, req = _request(20, 50)  # the service goes on
    assert np.allclose(np.frombuffer(cl.call(3, req), np.float32).reshape(20, C), _local(ms["gin"], x, ei), atol=1e-5)


@pytest.mark.parametrize("mangle,why", [
    (lambda b: b[:10], "starts with int64 NN and NE"),
    (lambda b: b[:-1], "make"),
    (lambda b: b + b"\0", "make"),
    (lambda b: colocate.HEADER.pack(0, 5) + b[16:], "NN = 0"),
    (lambda b: colocate.HEADER.pack(5, 0) + b[16:], "NE = 0"),
    (lambda b: colocate.HEADER.pack(-1, 5) + b[16:], "NN = -1"),
    (lambda b: colocate.HEADER.pack(401, 5) + b[16:], "NN = 401"),
    (lambda b: colocate.HEADER.pack(10, 3001) + b[16:], "NE = 3001"),
])
def test_bad_subgraphs_fail_their_call_alone(served, mangle, why):
    _, co, cl, ms, _ = served
    x, ei, req = _request(10, 30)
    with pytest.raises(splitrpc.BadRequest, match=why):
        cl.call(1, mangle(req))
    assert np.allclose(np.frombuffer(cl.call(1, req), np.float32).reshape(10, C), _local(ms["gcn"], x, ei), atol=1e-5)


def test_edge_ids_out_of_range_are_bad_requests(served):
    _, _, cl, _, _ = served
    for bad in (10, -1):
        x, ei, _ = _request(10, 30)
        ei[0, 3] = bad
        with pytest.raises(splitrpc.BadRequest, match="edge ids must lie in 0 .. 9"):
            cl.call(2, colocate.pack_request(x.numpy(), ei.numpy()))


def test_estimators_that_raise_or_return_nan_fail_their_call_only(served):
    _, co, cl, _, _ = served
    _, _, req = _request(10, 30)
    with pytest.raises(splitrpc.InternalError, match="PMC estimator failed: RuntimeError: boom"):
        cl.call(4, req)
    with pytest.raises(splitrpc.InternalError, match="PMC estimate refused"):
        cl.call(5, req)
    st = co.stats()["services"]
    assert st["raises"]["failed"] == 1 and st["nan"]["failed"] == 1
    assert cl.call(1, req)  # the others go on


def test_a_batch_mixing_good_and_bad_calls_answers_each(served):
    _, co, cl, ms, _ = served
    good = [_request(20 + i, 60, seed=i) for i in range(6)]
    calls = []
    for i, (x, ei, req) in enumerate(good):
        calls.append(("ok", x, ei, cl.call_async(1, req)))
        calls.append(("bad", None, None, cl.call_async(1, req[:-8])))
    for what, x, ei, f in calls:
        if what == "ok":
            assert np.allclose(np.frombuffer(f.result(), np.float32).reshape(x.shape[0], C), _local(ms["gcn"], x, ei), atol=1e-5)
        else:
            with pytest.raises(splitrpc.BadRequest):
                f.result()


def test_counters_reach_metrics(served):
    srv, co, cl, _, _ = served
    _, _, req = _request(10, 30)
    cl.call(1, req)
    with AdminServer(srv, 0) as m:
        text = urllib.request.urlopen(f"http://127.0.0.1:{m.port}/metrics", timeout=5).read().decode()
    assert 'splitrpc_colocation_calls_total{service="gcn"} 1.0' in text
    assert 'splitrpc_colocation_qos_violations_total{service="gcn"} 0.0' in text
    assert f"splitrpc_colocation_budget_bytes {float(co.budget)}" in text


def test_serial_runs_one_call_at_a_time_and_violations_are_counted():
    ms = _models()
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    co = colocate.CoLocation(1 << 30, policy="serial")
    co.add(srv, 1, "gcn", ms["gcn"], features=F, classes=C, qos=1e-9, **LIMITS)  # every call violates
    co.start()
    srv.start()
    try:
        with splitrpc.Client("127.0.0.1", srv.port, timeout=20.0) as cl:
            futs = [cl.call_async(1, _request(30, 90, seed=i)[2]) for i in range(12)]
            for f in futs:
                f.result()
        st = co.stats()
        assert st["groups"] == 12 and st["mean_group_size"] == 1.0
        assert st["services"]["gcn"]["violations"] == 12 and st["services"]["gcn"]["p99_s"] > 0
    finally:
        srv.stop()
        co.stop()
        srv.close()


def test_qos_is_measured_at_registration_when_not_given():
    srv = splitrpc.Server("127.0.0.1", 0)
    try:
        co = colocate.CoLocation(1 << 30)
        svc = co.add(srv, 1, "gin", _models()["gin"], features=F, classes=C, **LIMITS)
        assert 0 < svc.qos < 5 and math.isfinite(svc.qos)
        co.stop()
    finally:
        srv.close()


def test_bad_settings_are_errors_at_start():
    srv = splitrpc.Server("127.0.0.1", 0)
    try:
        with pytest.raises(ValueError, match="exceeds the device's memory"):
            colocate.CoLocation(colocate.host_memory() + 1)
        for bad in (0, -5, 1.5, True):
            with pytest.raises(ValueError):
                colocate.CoLocation(bad)
        with pytest.raises(ValueError):
            colocate.CoLocation(1 << 20, policy="lifo")
        with pytest.raises(ValueError, match="must be 'cpu' or 'cuda:N'"):
            colocate.CoLocation(1 << 20, device="tpu:0")
        if not torch.cuda.is_available():  # the CUDA place (device.CudaPlace) needs a device PyTorch sees
            with pytest.raises(ValueError, match="sees no CUDA device"):
                colocate.CoLocation(1 << 20, device="cuda:0")
        co = colocate.CoLocation(1 << 20)
        with pytest.raises(ValueError, match="max_message"):
            co.add(srv, 1, "big", _models()["gcn"], features=F, classes=C, qos=1.0, max_nodes=10**6, max_edges=10)
        with pytest.raises(ValueError, match="qos"):
            co.add(srv, 1, "q", _models()["gcn"], features=F, classes=C, qos=float("nan"), **LIMITS)
        co.stop()
    finally:
        srv.close()


def test_stats_sources_cannot_shadow_the_engines_keys():
    srv = splitrpc.Server("127.0.0.1", 0)
    try:
        for key in ("calls", "functions", "drops"):
            with pytest.raises(ValueError, match="engine"):
                srv.add_stats_source(key, dict)
        with pytest.raises(ValueError, match="callable"):
            srv.add_stats_source("x", 5)
        srv.add_stats_source("mine", lambda: {"n": 1})
        assert srv.stats()["mine"] == {"n": 1}
    finally:
        srv.close()


def test_calls_after_the_scheduler_stopped_fail_instead_of_hanging():
    ms = _models()
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    co = colocate.CoLocation(1 << 30)
    co.add(srv, 1, "gcn", ms["gcn"], features=F, classes=C, qos=1.0, **LIMITS)
    co.start()
    srv.start()
    try:
        co.stop()
        with splitrpc.Client("127.0.0.1", srv.port, timeout=5.0) as cl:
            with pytest.raises(splitrpc.InternalError, match="stopped"):
                cl.call(1, _request(10, 20)[2])
    finally:
        srv.stop()
        srv.close()


def test_it_is_the_services_executor_started_and_stopped_by_the_server():
    """Issue 31, item 5: a CoLocation is an Executor: the server's start starts its dispatcher (no
    co.start()), Server.stats()["executors"] reports its load like a ThreadPool's, describe says
    where the function runs, and the server's stop ends its threads."""
    ms = _models()
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    co = colocate.CoLocation(1 << 30, policy="bqt", max_parallel=4)
    assert isinstance(co, splitrpc.Executor)
    co.add(srv, 1, "gcn", ms["gcn"], features=F, classes=C, qos=5.0, **LIMITS)
    co.add(srv, 2, "sage", ms["sage"], features=F, classes=C, qos=5.0, **LIMITS)
    srv.start()
    try:
        with splitrpc.Client("127.0.0.1", srv.port, timeout=20.0) as cl:
            futs = [cl.call_async(1 + i % 2, _request(20, 40, seed=i)[2]) for i in range(10)]
            for f in futs:
                f.result()
            with pytest.raises(splitrpc.BadRequest):
                cl.call(1, b"short")
        # the dispatcher counts a group's calls once they have all ended, after their replies left
        ex = settled(srv, lambda st: st["executors"]["gcn"]["batches"] == 10)["executors"]
        assert ex["gcn"] == ex["sage"]  # one executor serves both
        assert ex["gcn"]["kind"] == "colocation" and ex["gcn"]["threads"] == 4
        assert ex["gcn"]["batches"] == 10 and ex["gcn"]["queued"] == 0 and ex["gcn"]["running"] == 0
        assert 1 <= ex["gcn"]["groups"] <= 10 and ex["gcn"]["busy_s"] > 0
        assert {f.name: f.executor for f in srv.functions()} == {"gcn": "pool:4", "sage": "pool:4"}
        assert any(t.name == "splitrpc-colocate-dispatch" for t in threading.enumerate())
    finally:
        srv.close()
    assert not any(t.name.startswith("splitrpc-colocate") for t in threading.enumerate())
    assert co.stats()["services"]["sage"]["ok"] == 5 and co.stats()["services"]["gcn"]["bad_request"] == 1


def test_two_servers_share_one_budget_and_its_dispatcher_runs_while_either_does():
    ms = _models()
    a, b = (splitrpc.Server("127.0.0.1", 0, wait="block") for _ in range(2))
    co = colocate.CoLocation(1 << 30)
    co.add(a, 1, "gcn", ms["gcn"], features=F, classes=C, qos=5.0, **LIMITS)
    co.add(b, 1, "gin", ms["gin"], features=F, classes=C, qos=5.0, **LIMITS)
    a.start()
    b.start()
    try:
        a.close()  # b still uses it
        x, ei, req = _request(12, 30)
        with splitrpc.Client("127.0.0.1", b.port, timeout=20.0) as cl:
            got = np.frombuffer(cl.call(1, req), np.float32).reshape(12, C)
        assert np.allclose(got, _local(ms["gin"], x, ei), atol=1e-5)
    finally:
        b.close()
    assert not any(t.name.startswith("splitrpc-colocate") for t in threading.enumerate())
    with pytest.raises(ValueError, match="already a co-located service"):
        co.add(b, 2, "gin", ms["gin"], features=F, classes=C, qos=5.0, **LIMITS)


def test_bad_executor_settings_are_errors():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_parallel"):
            colocate.CoLocation(1 << 20, max_parallel=bad)
