"""`splitrpc plan tune`'s measuring side (issue 20): latency-bounded QPS by doubling and bisection, 1-second bins against an SLA, the native open-loop trial's outcomes (BUSY counted), a zoo model served at a configuration, and the command's outputs (tuples that `splitrpc plan provision` reads)."""
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from splitrpc.loadgen.planning.capacity import OUTCOMES, Run, latency_bounded_qps


def _run(p99_s: float, failed: int = 0, n: int = 100) -> Run:
    lat = np.full(n, p99_s)
    out = np.zeros(n, np.int8)
    out[:failed] = 1
    lat[:failed] = np.nan
    return Run(np.linspace(0, 1, n, endpoint=False), lat, out, 1.0, 0.0)


def test_latency_bounded_qps_doubles_then_bisects():
    cliff = 730.0  # a server whose p99 meets 50 ms up to 730 calls/s, then misses
    asked = []

    def measure(rate):
        asked.append(rate)
        return _run(0.010 if rate <= cliff else 0.200)

    qps, trials = latency_bounded_qps(measure, 0.050, start=50, steps=5)
    assert asked[:5] == [50, 100, 200, 400, 800]  # doubling until the first miss
    assert cliff - 800 / 2 ** 6 <= qps <= cliff and len(trials) == 10  # then 5 bisections of [400, 800]
    assert [t["met"] for t in trials[:5]] == [True, True, True, True, False]
    # a failed call fails a trial whatever its p99
    qps, _ = latency_bounded_qps(lambda r: _run(0.001, failed=int(r > 300)), 0.050, start=100, steps=3)
    assert 250 <= qps <= 300
    # nothing meets the SLA: 0
    assert latency_bounded_qps(lambda r: _run(1.0), 0.050, start=100, steps=2)[0] == 0.0


def test_bins_against_the_sla():
    due = np.array([0.1, 0.2, 1.1, 1.2, 1.3, 2.5])
    lat = np.array([0.01, 0.02, 0.01, np.nan, 0.01, 0.09])
    out = np.array([0, 0, 0, OUTCOMES.index("busy"), 0, 0], np.int8)
    bins = Run(due, lat, out, 3.5, 0.0).bins(0.05)
    assert [b["calls"] for b in bins] == [2, 3, 1, 0]
    assert [b["met"] for b in bins] == [True, False, False, True]  # a failed call; a p99 over; an empty bin
    assert bins[1]["failed"] == 1


def test_native_trial_counts_busy(tmp_path):
    """An open-loop trial at twice a slow server's capacity: BUSY answers are counted as such,
    latencies of the others are from their due times."""
    import splitrpc
    from splitrpc import TensorSpec
    from splitrpc.loadgen.planning.tune import open_loop_native

    srv = splitrpc.Server("127.0.0.1", 0, wait="block")

    @srv.function(300, "slow", [TensorSpec("x", "float32", (4,))], [TensorSpec("y", "float32", (4,))],
                  max_batch=1, capacity=4, max_delay_us=0)
    def slow(x, y):
        time.sleep(0.002)  # ~500 calls/s
        y[:] = x

    srv.start()
    try:
        run = open_loop_native(srv.port, 300, np.zeros(4, np.float32).tobytes(), 1500, 1.0, clients=2,
                               busy_retry=False)
        assert abs(len(run.outcome) - 1500) < 10
        assert run.count("busy") > 200 and run.count("ok") > 300, {o: run.count(o) for o in OUTCOMES}
        ok = run.latency[run.outcome == 0]
        assert np.all(ok > 0.0015)  # every reply waited at least one 2 ms batch
        run2 = open_loop_native(srv.port, 300, np.zeros(4, np.float32).tobytes(), 100, 0.5, clients=1)
        assert run2.count("ok") == len(run2.outcome) and run2.p(0.99) < 0.05
    finally:
        srv.close()


def test_a_zoo_model_at_a_configuration():
    pytest.importorskip("torch")
    from splitrpc.loadgen.planning.search import Config
    from splitrpc.loadgen.planning.tune import measure_config

    r = measure_config("lenet", Config(1, 2, 4), 0.050, trial_s=0.3, repeats=1, steps=2, start=200)
    assert r["qps"] >= 200, r  # two processes of the small LeNet carry far more than 200 calls/s here
    assert r["trials"][0]["rate"] == 200 and r["trials"][0]["met"]


def test_tune_command_writes_tuples_provision_reads(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "t"
    r = subprocess.run([sys.executable, "-m", "splitrpc", "plan", "tune", "--threads", "1", "--instances", "1",
                        "--batches", "1,4", "--trial-s", "0.3", "--repeats", "1", "--sla-ms", "50",
                        "--kind", "testbox", "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((out / "tune.json").read_text())
    res = doc["models"]["lenet"]
    assert len(res["points"]) == 2 and res["grid"]["measured"] == 2
    assert res["gradient"]["qps"] == max(p["qps"] for p in res["points"]) > 0
    tuples = json.loads((out / "tune_tuples.json").read_text())
    assert tuples == [{"model": "lenet", "kind": "testbox", "qps": res["gradient"]["qps"], "power": None}]
    assert (out / "tune.md").exists()
    p = subprocess.run([sys.executable, "-m", "splitrpc", "plan", "provision", "--tuples", str(out / "tune_tuples.json"),
                        "--inventory", "testbox=4", "--peak", str(2 * res["gradient"]["qps"]), "--steps", "6",
                        "--out", str(tmp_path / "p"), "--quiet"], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    plan = json.loads((tmp_path / "p" / "provision.json").read_text())
    assert plan["models"] == ["lenet"] and plan["power_unit"] == "servers"
    bad = subprocess.run([sys.executable, "-m", "splitrpc", "plan", "tune", "--models", "nope", "--out", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert bad.returncode == 2 and "no model 'nope'" in bad.stderr and "Traceback" not in bad.stderr


def test_tune_measures_dlrm_which_the_embedding_capability_serves(tmp_path):
    """Issue 32: `splitrpc plan tune --models dlrm` (the recommendation model Hercules tunes) runs here:
    tune finds any model `serve --models` serves through the plug-ins, not only the zoo's."""
    pytest.importorskip("torch")
    pytest.importorskip("rocksdict")
    out = tmp_path / "t"
    r = subprocess.run([sys.executable, "-m", "splitrpc", "plan", "tune", "--models", "dlrm", "--threads", "1", "--instances",
                        "1", "--batches", "8", "--trial-s", "0.3", "--repeats", "1", "--sla-ms", "50",
                        "--schedules", "model,sd", "--sparse", "1,2", "--dense", "1",
                        "--kind", "testbox", "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((out / "tune.json").read_text())
    res, sd = doc["models"]["dlrm"], doc["models"]["dlrm/sd"]
    # one batch size (each point is a server started: 3 here, not 6; test_tune_command_writes_tuples_provision_reads
    # searches over batches)
    assert len(res["points"]) == 1 and all(p["qps"] > 0 and p["sparse"] == 0 for p in res["points"])
    # Hercules's sparse-dense pipeline: dense threads x sparse threads x batch, every point served
    assert sorted(tuple(p["at"]) for p in sd["points"]) == [(1, 1, 8), (1, 2, 8)]
    assert all(p["qps"] > 0 and p["sparse"] == p["at"][1] for p in sd["points"])
    (t,) = json.loads((out / "tune_tuples.json").read_text())
    best = max((res, sd), key=lambda r: r["gradient"]["qps"])
    assert t["model"] == "dlrm" and t["qps"] == best["gradient"]["qps"]
    assert "sparse-dense pipeline scheduling" in (out / "tune.md").read_text()


def test_a_sparse_dense_configuration_serves_the_pipeline_and_a_model_without_stages_is_refused(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("rocksdict")
    from splitrpc.loadgen.planning.search import Config
    from splitrpc.loadgen.planning.tune import Served

    import splitrpc

    with Served("dlrm", Config(1, 1, 8, sparse=2)) as srv, splitrpc.Client("127.0.0.1", srv.port) as c:
        info = c.describe().by_name("dlrm")
        assert info.executor == "pool:3" and info.max_batch == 8  # the two stages' 2 + 1 threads
    bad = subprocess.run([sys.executable, "-m", "splitrpc", "plan", "tune", "--models", "lenet", "--schedules", "sd",
                          "--out", str(tmp_path / "x")], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert bad.returncode == 2 and "'lenet' has no sparse and dense stages" in bad.stderr, bad.stderr[-1000:]
