"""The EMULATED separate GNN lane (issue 32): a seed's logits do not depend on its batch (so answers kept per seed are right), the lane holds each batch for its model's time while using next to no CPU, new seeds are computed and counted apart, the model's numbers are validated and fitted only to a calibration measured on a GPU, and a routed server with it runs both lanes at once and answers like the local model."""
import time

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("scipy")

import splitrpc  # noqa: E402
from conftest import settled  # noqa: E402
from splitrpc.services.gnn import calibrate, serve  # noqa: E402
from splitrpc.services.gnn.emulated_lane import EmulatedLane, LaneModel  # noqa: E402


@pytest.fixture(scope="module")
def svc():
    return serve.GNNService("graphsage", small=True, lane="emulated", lane_model=LaneModel(0.02, 1e-6))


def test_a_seeds_logits_do_not_depend_on_its_batch(svc):
    rng = np.random.default_rng(0)
    seeds = serve.draw_seeds(svc.graph, rng, 40)
    together = svc.reference(seeds)
    alone = np.concatenate([svc.reference(seeds[i:i + 1]) for i in range(len(seeds))])
    np.testing.assert_allclose(together, alone, rtol=serve.RTOL, atol=serve.RTOL * float(np.abs(together).max()))


def test_the_lane_answers_like_the_cpu_lane_and_holds_the_batch_for_its_models_time(svc):
    rng = np.random.default_rng(1)
    em = svc.emulated
    seeds = serve.draw_seeds(svc.graph, rng, 30)
    assert em.warm(seeds) == np.unique(seeds).size and em.warm(seeds) == 0
    psgs = float(svc.psgs[seeds].sum())
    want = em.model.seconds(psgs)
    cpu0, t0 = time.process_time(), time.perf_counter()
    got = svc.infer(seeds, "emulated", calls=3, psgs=psgs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    assert wall >= want and wall < want + 0.05
    assert cpu < 0.5 * want  # it slept: the time is the model's, not a core's
    np.testing.assert_allclose(got, svc.reference(seeds), rtol=serve.RTOL,
                               atol=serve.RTOL * float(np.abs(got).max()))
    st = svc.stats()["emulated"]
    assert st["calls"] == 3 and st["batches"] == 1 and st["emulation"]["late"] == 0
    assert st["emulation"]["model"] == {"fixed_s": 0.02, "per_psgs_s": 1e-6, "source": "assumed"}
    assert "EMULATED" in st["label"]


def test_new_seeds_are_computed_on_the_spot_and_counted_apart():
    calls = []

    def compute(seeds):
        calls.append(seeds.tolist())
        return np.repeat(seeds[:, None].astype(np.float32), 2, axis=1)

    em = EmulatedLane(compute, LaneModel(1e-4, 0.0))
    out = em.run(np.array([5, 3, 5], np.int64), psgs=10)
    assert out.tolist() == [[5, 5], [3, 3], [5, 5]] and calls == [[3, 5]]
    em.run(np.array([3, 7], np.int64), psgs=10)
    assert calls == [[3, 5], [7]] and em.stats()["misses"] == 3 and em.stats()["batches"] == 2
    slow = EmulatedLane(lambda s: (time.sleep(0.01), np.zeros((len(s), 1), np.float32))[1], LaneModel(1e-4, 0.0))
    slow.run(np.array([1], np.int64), psgs=1)
    assert slow.late == 1 and slow.miss_s >= 0.01


@pytest.mark.parametrize("bad", [dict(fixed_s=-1.0), dict(per_psgs_s=float("nan")), dict(fixed_s=0.0, per_psgs_s=0.0),
                                 dict(fixed_s="1")])
def test_bad_models_are_refused(bad):
    with pytest.raises(ValueError, match="LaneModel"):
        LaneModel(**bad)


def _cal(tmp_path, gpu_label):
    rng = np.random.default_rng(0)
    ps = np.exp(rng.uniform(np.log(100), np.log(1e5), 800))
    lane = np.where(np.arange(800) % 2, "cpu", "gpu")
    lat = np.where(lane == "cpu", 1e-4 + ps * 1e-7, 2e-3 + ps * 1e-8)
    cal = calibrate.calibrate(calibrate.Measurements(lane, ps, lat), 8, fanouts=(25, 10), graph="small",
                              labels={"cpu": "CPU", "gpu": gpu_label})
    path = tmp_path / "cal.json"
    cal.save(path)
    return str(path)


def test_the_model_is_fitted_only_to_a_calibration_measured_on_a_gpu(tmp_path):
    m = LaneModel.from_calibration(_cal(tmp_path, "GPU sampler (PyTorch on CUDA)"))
    assert m.fixed_s == pytest.approx(2e-3, rel=0.2) and m.per_psgs_s == pytest.approx(1e-8, rel=0.2)
    assert m.source.startswith("fitted to ")
    for label in ("bulk sampler (PyTorch on the CPU; stand-in for the GPU lane)",
                  "EMULATED GPU lane (answers from the CPU code, time from a cost model; no GPU)"):
        with pytest.raises(calibrate.CalibrationError, match="not a GPU"):
            LaneModel.from_calibration(_cal(tmp_path, label))


def test_a_routed_server_runs_both_lanes_at_once_and_answers_right():
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    try:
        s = serve.register_gnn(srv, "graphsage", small=True, threshold=3000, torch_threads=None, lane="emulated",
                               lane_model=LaneModel(0.005, 0.0))
        srv.start()
        assert s.concurrent_lanes and s.other == "emulated"
        rng = np.random.default_rng(4)
        low = s.graph.degree.argsort()[:3].astype("<i8")
        reqs = [low.tobytes()] * 4 + [s.example(rng, 128) for _ in range(4)]
        with splitrpc.Client("127.0.0.1", srv.port, timeout=10.0) as c:
            futs = [c.call_async(15, r) for r in reqs]
            assert all(s.check_reply(r, f.result(10)) for r, f in zip(reqs, futs))
        # a lane counts a batch just after its replies leave: read once every lane is idle (settled)
        ex = settled(srv, lambda st: all(v["running"] == 0 and v["batches"] >= 1 for v in
                                         st["executors"]["graphsage"]["lanes"].values()))["executors"]["graphsage"]
        assert ex["kind"] == "lanes" and ex["lanes"]["cpu"]["batches"] >= 1 and ex["lanes"]["emulated"]["batches"] >= 1
    finally:
        srv.close()


def test_each_call_goes_to_its_own_lane_by_its_psgs():
    """route_by="request" (the default where the lanes run together): a call below the threshold
    runs on the CPU lane and one at or above it on the other, whatever it arrives with, so each
    lane's seed count is exactly its own calls' (per batch, a batch of small calls with one large
    one would go to one lane together)."""
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    try:
        s = serve.register_gnn(srv, "graphsage", small=True, threshold=3000, torch_threads=None, lane="emulated",
                               lane_model=LaneModel(0.02, 0.0))
        srv.start()
        assert s.route_by == "request"
        rng = np.random.default_rng(5)
        low = s.graph.degree.argsort()[:3].astype("<i8")
        assert s.psgs[low].sum() < 3000
        large = [s.example(rng, 128) for _ in range(3)]
        assert all(s.psgs[np.frombuffer(r, "<i8")].sum() >= 3000 for r in large)
        reqs = [low.tobytes(), large[0], low.tobytes(), low.tobytes(), large[1], low.tobytes(), large[2]]
        with splitrpc.Client("127.0.0.1", srv.port, timeout=10.0) as c:
            futs = [c.call_async(15, r) for r in reqs]
            assert all(s.check_reply(r, f.result(10)) for r, f in zip(reqs, futs))
        st = s.stats()
        assert st["cpu"]["seeds"] == 4 * 3 and st["cpu"]["calls"] == 4  # no spill by default
        assert st["emulated"]["seeds"] == 3 * 128 and st["emulated"]["calls"] == 3
    finally:
        srv.close()


def test_per_request_routing_needs_the_lanes_together():
    srv = splitrpc.Server("127.0.0.1", 0)
    try:
        with pytest.raises(ValueError, match="needs the routed policy with the lanes together"):
            serve.register_gnn(srv, "graphsage", small=True, policy="cpu", lane="emulated", torch_threads=None,
                               route_by="request")
        with pytest.raises(ValueError, match="route_by must be one of"):
            serve.register_gnn(srv, "graphsage", small=True, lane="emulated", torch_threads=None, route_by="call")
        for route_by, spill in (("batch", 4), ("request", 0)):
            with pytest.raises(ValueError, match="spill is a number of calls >= 1 for per-request routing"):
                serve.register_gnn(srv, "graphsage", small=True, lane="emulated", torch_threads=None,
                                   route_by=route_by, spill=spill)
    finally:
        srv.close()


def test_static_policies_must_name_the_services_other_lane():
    srv = splitrpc.Server("127.0.0.1", 0)
    try:
        with pytest.raises(ValueError, match="other lane is 'emulated'"):
            serve.register_gnn(srv, "graphsage", small=True, policy="bulk", lane="emulated", torch_threads=None)
        with pytest.raises(ValueError, match="lane_model is the emulated lane's"):
            serve.GNNService("graphsage", small=True, lane="bulk", lane_model=LaneModel())
        with pytest.raises(ValueError, match="one of bulk, emulated, gpu"):
            serve.GNNService("graphsage", small=True, lane="tpu")
    finally:
        srv.close()


def test_serve_with_the_emulated_lane_from_the_command_line(run_env):
    import subprocess

    from conftest import free_udp_port, splitrpc_cmd

    port = free_udp_port()
    proc = subprocess.Popen(splitrpc_cmd("serve", "--port", str(port), "--wait", "block", "--models", "graphsage",
                                         "--small", "--gnn-threshold", "0", "--gnn-lane", "emulated",
                                         "--gnn-lane-warm", "--drain-linger", "0"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **run_env)
    try:
        line = proc.stdout.readline()
        assert "EMULATED GPU lane" in line and "lanes together" in line, line + proc.stderr.read()
        p = subprocess.run(splitrpc_cmd("call", "graphsage", "--small", "--port", str(port), "--timeout", "5"),
                           capture_output=True, text=True, timeout=120, **run_env)
        assert p.returncode == 0 and "within tolerance: True" in p.stdout, p.stdout + p.stderr
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert "emulated lane 1 batches" in out, out + err  # threshold 0: every batch on the emulated lane
    for bad in (["--gnn-lane-model", "x.json"], ["--gnn-lane-warm"]):
        p = subprocess.run(splitrpc_cmd("serve", "--port", "0", "--models", "graphsage", "--small", *bad),
                           capture_output=True, text=True, timeout=60, **run_env)
        assert p.returncode == 2 and "give --gnn-lane emulated" in p.stderr
