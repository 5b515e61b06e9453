"""GNN models served (issue 16): replies equal a local run of the model, each batch routed to a lane by its summed PSGS (or always one lane), bad seed lists fail their call alone, cost tables with NaN or negative values are refused, calibration files set the threshold, and the command line (serve --models graphsage, call graphsage, calibrate, bench-gnn) works end to end."""
import json
import subprocess

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("scipy")

import splitrpc  # noqa: E402
from conftest import free_udp_port, settled, splitrpc_cmd as _cmd  # noqa: E402  (run_env: a conftest fixture)
from splitrpc.services.gnn import calibrate, serve  # noqa: E402
from splitrpc.services.gnn.serve import load_trace  # noqa: E402


@pytest.fixture(scope="module")
def gnn_servers():
    """One routed server (threshold 3000) and one per static lane, each with GraphSAGE and GAT on
    the small graph: {policy: (server, {model: service})}."""
    made = {}
    try:
        for policy in ("routed", "cpu", "bulk"):
            srv = splitrpc.Server("127.0.0.1", 0, wait="block")
            svcs = {m: serve.register_gnn(srv, m, small=True, policy=policy, threshold=3000, torch_threads=None)
                    for m in ("graphsage", "gat")}
            srv.start()
            made[policy] = (srv, svcs)
        yield made
    finally:
        for srv, _ in made.values():
            srv.close()


def _lanes_used(svc) -> dict:
    return {k: v["calls"] for k, v in svc.stats().items()}


@pytest.mark.parametrize("model", ["graphsage", "gat"])
def test_replies_equal_the_local_model_and_batches_go_by_psgs(gnn_servers, model):
    srv, svcs = gnn_servers["routed"]
    svc = svcs[model]
    rng = np.random.default_rng(1)
    before = _lanes_used(svc)
    with splitrpc.Client("127.0.0.1", srv.port, timeout=10.0) as c:
        low = svc.graph.degree.argsort()[:3].astype("<i8")            # the least-connected seeds: small PSGS
        assert svc.psgs[low].sum() < 3000
        rep = c.call(serve.FUNC_IDS[model], low.tobytes())
        assert svc.check_reply(low.tobytes(), rep)
        mid = _lanes_used(svc)
        assert mid["cpu"] == before["cpu"] + 1 and mid["bulk"] == before["bulk"]
        big = svc.example(rng, 128)                                   # far above the threshold
        assert svc.psgs[np.frombuffer(big, "<i8")].sum() >= 3000
        rep = c.call(serve.FUNC_IDS[model], big)
        assert len(rep) == 128 * svc.classes * 4 and svc.check_reply(big, rep)
        after = _lanes_used(svc)
        assert after["bulk"] == mid["bulk"] + 1 and after["cpu"] == mid["cpu"]
        # many calls at once: every reply right, whatever lane each batch took
        reqs = [svc.example(rng, int(n)) for n in rng.integers(1, 40, 60)]
        futs = [c.call_async(serve.FUNC_IDS[model], r) for r in reqs]
        assert all(svc.check_reply(r, f.result(10)) for r, f in zip(reqs, futs))


def test_concurrent_lanes_route_each_batch_to_its_lanes_thread():
    """concurrent_lanes=True: the function's executor is a LanePool, which sends each batch to
    its lane's thread by the router's rule; the executor's counts per lane equal the service's."""
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    try:
        svc = serve.register_gnn(srv, "graphsage", small=True, threshold=3000, torch_threads=None,
                                 concurrent_lanes=True)
        srv.start()
        assert svc.concurrent_lanes
        rng = np.random.default_rng(4)
        low = svc.graph.degree.argsort()[:3].astype("<i8")
        reqs = [low.tobytes()] * 5 + [svc.example(rng, 128) for _ in range(5)]
        with splitrpc.Client("127.0.0.1", srv.port, timeout=10.0) as c:
            for r in reqs:
                assert svc.check_reply(r, c.call(15, r))
        # a lane counts a batch just after its replies leave: read once it has (settled)
        want = {k: v["batches"] for k, v in svc.stats().items()}
        ex = settled(srv, lambda s: {k: v["batches"] for k, v in s["executors"]["graphsage"]["lanes"].items()}
                     == want)["executors"]["graphsage"]
        assert ex["kind"] == "lanes" and ex["misrouted"] == 0
        assert {k: v["batches"] for k, v in ex["lanes"].items()} == want
        assert ex["lanes"]["cpu"]["batches"] >= 1 and ex["lanes"]["bulk"]["batches"] >= 1
    finally:
        srv.close()


@pytest.mark.parametrize("policy", ["cpu", "bulk"])
def test_a_static_policy_uses_one_lane(gnn_servers, policy):
    srv, svcs = gnn_servers[policy]
    svc = svcs["graphsage"]
    rng = np.random.default_rng(2)
    with splitrpc.Client("127.0.0.1", srv.port, timeout=10.0) as c:
        for n in (1, 200):
            r = svc.example(rng, n)
            assert svc.check_reply(r, c.call(15, r))
    used = _lanes_used(svc)
    other = "bulk" if policy == "cpu" else "cpu"
    assert used[policy] >= 2 and used[other] == 0


def test_bad_seed_lists_fail_their_call_alone(gnn_servers):
    srv, svcs = gnn_servers["routed"]
    n = svcs["graphsage"].graph.num_nodes
    good = np.array([3, 4], "<i8").tobytes()
    with splitrpc.Client("127.0.0.1", srv.port, timeout=10.0) as c:
        bad = {
            np.array([-1], "<i8").tobytes(): (splitrpc.BadRequest, "cost key -1"),
            np.array([1, n], "<i8").tobytes(): (splitrpc.BadRequest, f"cost key {n} .* outside the table of {n} rows"),
            np.array([2**62], "<i8").tobytes(): (splitrpc.BadRequest, "outside the table"),
            b"": (splitrpc.BadRequest, "holds 1 to 256 int64 seed ids, got none"),
            b"\x01\x02\x03": (splitrpc.BadRequest, "does not hold whole 8-byte cost keys"),
            np.zeros(serve.MAX_SEEDS + 1, "<i8").tobytes(): (splitrpc.TooLarge, "limit"),
        }
        futs = [(c.call_async(15, req), exc, why) for req, (exc, why) in bad.items()]
        ok = c.call_async(15, good)
        for f, exc, why in futs:
            with pytest.raises(exc, match=why):
                f.result(10)
        assert svcs["graphsage"].check_reply(good, ok.result(10))


@pytest.mark.parametrize("table, why", [([1.0, float("nan")], "node 1 is nan"), ([3.0, -2.0], "node 1 is -2.0"),
                                        ([float("inf")], "node 0 is inf"), ([], "non-empty")])
def test_cost_tables_with_nan_or_negative_values_are_refused(table, why):
    with pytest.raises(ValueError, match=why):
        serve.cost_table(table)
    if table:  # the generic table refuses non-integers too
        with pytest.raises(ValueError, match="integers"):
            splitrpc.CostTable(np.array(table))


def _calibration(tmp_path, strict=1234.0):
    """A calibration file from synthetic measurements whose curves cross."""
    rng = np.random.default_rng(0)
    ps = np.exp(rng.uniform(np.log(100), np.log(1e5), 800))
    lane = np.where(np.arange(800) % 2, "cpu", "gpu")
    lat = np.where(lane == "cpu", 1e-4 + ps * 1e-7, 2e-3 + ps * 1e-8) * rng.uniform(1, 1.2, 800)
    cal = calibrate.calibrate(calibrate.Measurements(lane, ps, lat), 8, fanouts=(25, 10), graph="small")
    path = tmp_path / "cal.json"
    cal.save(path)
    return cal, str(path)


def test_the_threshold_comes_from_a_number_a_calibration_file_or_the_default(tmp_path):
    cal, path = _calibration(tmp_path)
    assert serve.threshold_from(None, "loose", 77.0) == 77.0
    assert serve.threshold_from(path, "loose", None) == cal.threshold("loose")
    assert serve.threshold_from(path, "strict", None) == cal.threshold("strict")
    # no point named: the file's default, which calibrate() sets to DEFAULT_POINT
    assert cal.default == calibrate.DEFAULT_POINT
    assert serve.threshold_from(path, None, None) == cal.threshold(calibrate.DEFAULT_POINT)
    assert serve.threshold_from(None, "loose", None) is None
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(calibrate.CalibrationError):
        serve.threshold_from(str(tmp_path / "broken.json"), "loose", None)
    srv = splitrpc.Server("127.0.0.1", 0)
    try:
        svc = serve.register_gnn(srv, "graphsage", small=True, calibration=path, point="strict", torch_threads=None)
        assert svc.router.threshold == cal.threshold("strict")
        with pytest.raises(ValueError, match="threshold must be a PSGS >= 0"):
            serve.Router(svc, "routed", -1)
        with pytest.raises(ValueError, match="policy must be one of"):
            serve.Router(svc, "fastest", None)
    finally:
        srv.close()


# ------------------------------------------------------------------ the command line


def test_serve_and_call_graphsage_from_the_command_line(run_env, tmp_path):
    port = free_udp_port()
    trace = tmp_path / "trace.npz"
    proc = subprocess.Popen(_cmd("serve", "--port", str(port), "--wait", "block", "--models", "graphsage,lenet",
                                 "--small", "--gnn-threshold", "2500", "--gnn-trace", str(trace), "--drain-linger", "0"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **run_env)
    try:
        line = proc.stdout.readline()
        assert "graphsage(15)" in line and "lenet(10)" in line and "threshold 2500" in line, line + proc.stderr.read()
        assert "stand-in for the GPU lane" in line
        p = subprocess.run(_cmd("call", "graphsage", "--small", "--port", str(port), "--timeout", "5"),
                           capture_output=True, text=True, timeout=120, **run_env)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "reply matches the model's output within tolerance: True" in p.stdout
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert "graphsage: cpu lane" in out and "wrote" in out, out + err
    t = load_trace(str(trace))  # every batch: its lane follows the threshold on its summed PSGS
    assert t["t_end"].size >= 1 and int(t["calls"].sum()) >= 1 and list(t["lanes"]) == ["cpu", "bulk"]
    assert np.all(t["service_s"] > 0) and np.all(t["psgs"] > 0)
    assert np.array_equal(t["lane"] == 0, t["psgs"] < 2500)


def test_gnn_trace_is_refused_with_several_processes(run_env, tmp_path):
    p = subprocess.run(_cmd("serve", "--port", "0", "--processes", "2", "--models", "graphsage", "--small",
                            "--gnn-trace", str(tmp_path / "t.npz")), capture_output=True, text=True, timeout=60,
                       **run_env)
    assert p.returncode == 2 and "one process only" in p.stderr


def test_serve_refuses_a_bad_calibration_file(run_env, tmp_path):
    (tmp_path / "cal.json").write_text("[]")
    p = subprocess.run(_cmd("serve", "--port", "0", "--models", "graphsage", "--small", "--gnn-calibration",
                            str(tmp_path / "cal.json")), capture_output=True, text=True, timeout=120, **run_env)
    assert p.returncode == 2 and "calibration" in p.stderr


def test_calibrate_writes_a_file_the_server_takes(run_env, tmp_path):
    out = tmp_path / "c" / "cal.json"
    p = subprocess.run(_cmd("gnn", "calibrate", "--small", "--per-size", "22", "--out", str(out)), capture_output=True,
                       text=True, timeout=300, **run_env)
    assert p.returncode == 0, p.stdout + p.stderr
    cal = calibrate.Calibration.load(str(out))
    assert out.with_suffix(".png").stat().st_size > 10_000
    for k in ("strict", "loose", "cpu_preferred", "gpu_preferred"):
        assert f"{k}" in p.stdout and cal.threshold(k) >= 0
    # too few samples: an error that says how many are needed
    p = subprocess.run(_cmd("gnn", "calibrate", "--small", "--per-size", "1", "--out", str(tmp_path / "few.json")),
                       capture_output=True, text=True, timeout=300, **run_env)
    assert p.returncode == 1 and f"at least {calibrate.MIN_SAMPLES} are needed" in p.stderr, p.stderr


def test_bench_gnn_runs_end_to_end_on_the_small_graph(run_env, tmp_path):
    out = tmp_path / "bench"
    p = subprocess.run(_cmd("bench", "gnn", "--small", "--duration", "0.5", "--rounds", "1", "--fractions", "0.3,0.6", "--min-calls", "20",
                            "--per-size", "22", "--placement-requests", "200", "--out", str(out), "--quiet"),
                       capture_output=True, text=True, timeout=600, **run_env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((out / "gnn.json").read_text())
    assert doc["wrong_replies"] == 0 and doc["gpu"] is False
    assert set(doc["table"]) == {"cpu", "bulk", "strict", "loose"}
    for pol in doc["table"].values():
        for wl in ("small", "large", "mixed"):
            assert all(c["p99_us"] > 0 for c in pol[wl].values())
    assert {"mixed_routed_p99_gain", "fap_hit_rate_vs_hash"} <= set(doc["targets"])
    assert doc["placement"]["requests"] == 200  # --placement-requests (1000 by default)
    for f in ("gnn.md", "gnn_p99.png", "gnn_calibration.png", "gnn_placement.png"):
        assert (out / f).stat().st_size > 0
    assert "stand-in for the GPU lane" in (out / "gnn.md").read_text()
