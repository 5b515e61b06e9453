"""The device simulator (issue 17): its concurrency model on cases worked by hand, every policy runs each request once within the budget while "unbounded" overruns, refusals are counted, runs are deterministic; the workload's queues have the paper's shape."""
import math

import numpy as np
import pytest

from splitrpc.services.colocation import sim
from splitrpc.services.colocation.sim import Device, Job

DEV = Device(memory=1000, interference=0.1, paging_slowdown=3.0)


def _job(seq, arrival=0.0, pmc=100, compute=1.0, occupancy=0.5, copy=0.0):
    return Job(seq, arrival, pmc, 10, compute, occupancy, copy)


def test_a_request_alone_takes_its_standalone_time():
    for policy in sim.SIM_POLICIES:
        r = sim.simulate([_job(0, arrival=2.0, copy=0.25)], policy, DEV)
        assert r.start[0] == pytest.approx(2.25) and r.end[0] == pytest.approx(3.25)
        assert r.summary()["violations"] == 0.0


def test_two_requests_together_share_the_device_as_modelled():
    # occupancies 0.5 + 0.5 fit: each runs at 1 / (1 + 0.1): both end at 1.1
    r = sim.simulate([_job(0), _job(1)], "fifo", DEV)
    assert np.allclose(r.end, 1.1) and r.group_pmc == [200]
    # 0.8 + 0.8 = 1.6: rate 1 / (1.6 * 1.1); the shorter (0.5 s) ends first, the other then alone
    r = sim.simulate([_job(0, occupancy=0.8, compute=0.5), _job(1, occupancy=0.8)], "fifo", DEV)
    t1 = 0.5 * 1.6 * 1.1
    assert r.end[0] == pytest.approx(t1) and r.end[1] == pytest.approx(t1 + (1.0 - 0.5))
    # serial: one after the other
    r = sim.simulate([_job(0), _job(1)], "serial", DEV)
    assert list(r.end) == pytest.approx([1.0, 2.0]) and r.summary()["groups"] == 2


def test_budget_holds_under_every_policy_and_unbounded_overruns_and_pages():
    jobs = [_job(i, arrival=0.0, pmc=400) for i in range(5)]  # 2000 B queued at once, memory 1000
    for policy in ("serial", "fifo", "sqtf", "bqt"):
        s = sim.simulate(jobs, policy, DEV).summary()
        assert s["overruns"] == 0 and s["peak_memory"] <= 1000 and s["refused"] == 0, policy
    u = sim.simulate(jobs, sim.UNBOUNDED, DEV)
    assert u.summary()["overruns"] == 1 and u.group_pmc == [2000]
    # 5 x 0.5 occupancy = 2.5, five co-runners: 2.5 * 1.4, paging x3
    assert u.end[0] == pytest.approx(2.5 * 1.4 * 3.0)


def test_mps_base_runs_at_most_four_at_once_in_arrival_order_and_pages_over_memory():
    jobs = [_job(i, pmc=100, occupancy=0.2) for i in range(6)]
    r = sim.simulate(jobs, sim.MPS_BASE, DEV)
    assert r.group_pmc == [400, 200] and r.summary()["groups"] == 2
    # four at 0.2 occupancy fit (0.8): rate 1 / (1 + 0.1 * 3); then the last two: 1 / (1 + 0.1)
    t1 = 1.3
    assert list(r.end[:4]) == pytest.approx([t1] * 4) and list(r.end[4:]) == pytest.approx([t1 + 1.1] * 2)
    big = sim.simulate([_job(i, pmc=300) for i in range(4)], sim.MPS_BASE, DEV)  # 1200 B > 1000: UVM pages
    assert big.summary()["overruns"] == 1 and big.end[0] == pytest.approx(2.0 * 1.3 * 3.0)
    assert sim.simulate([_job(i, pmc=300) for i in range(4)], "bqt", DEV).summary()["overruns"] == 0


def test_late_calls_that_arrived_while_others_ran_are_counted():
    # a 10 s request, then a 1 s one arriving at 1 s: it waits to 10 s, ends at 11: late, and it
    # arrived while the first ran; a third arriving after both, alone, is on time
    jobs = [_job(0, compute=10.0), _job(1, arrival=1.0), _job(2, arrival=20.0)]
    s = sim.simulate(jobs, "serial", DEV).summary()
    assert s["violations"] == pytest.approx(1 / 3) and s["violations_arrived_busy"] == 1.0
    s = sim.simulate([_job(0), _job(1)], "serial", DEV).summary()  # together at 0: the second waits 1 s
    assert s["violations"] == 0.0 and s["violations_arrived_busy"] == 0.0


def test_a_request_over_the_budget_is_refused_and_counted_as_a_violation():
    r = sim.simulate([_job(0, pmc=900), _job(1, pmc=100)], "bqt", DEV, budget=500)
    s = r.summary()
    assert list(r.refused) == [True, False] and s["refused"] == 1 and s["violations"] == 0.5
    assert math.isnan(r.end[0]) and r.end[1] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="exceeds the device"):
        sim.simulate([_job(0)], "fifo", DEV, budget=2000)
    with pytest.raises(ValueError):
        sim.simulate([_job(0)], "lifo", DEV)


def test_prefetch_copies_the_next_groups_inputs_while_the_current_one_runs():
    # budget 150: one request per group; the second's 0.5 s copy overlaps the first's run under
    # fifo, not under serial (GNNSched's Default copies when a request starts)
    jobs = [_job(0, pmc=100, copy=0.5), _job(1, pmc=100, copy=0.5)]
    f = sim.simulate(jobs, "fifo", DEV, budget=150)
    s = sim.simulate(jobs, "serial", DEV, budget=150)
    assert f.end[1] == pytest.approx(2.5)  # copy 0-0.5, run 0.5-1.5; its copy 0.5-1.0; runs 1.5-2.5
    assert s.end[1] == pytest.approx(3.0)


def test_every_request_runs_exactly_once_and_runs_are_deterministic():
    rng = np.random.default_rng(3)
    jobs = [_job(i, arrival=float(rng.uniform(0, 5)), pmc=int(rng.integers(1, 600)), compute=float(rng.uniform(0.01, 1)),
                 occupancy=float(rng.uniform(0.05, 1)), copy=float(rng.uniform(0, 0.1))) for i in range(60)]
    for policy in sim.SIM_POLICIES:
        a = sim.simulate(jobs, policy, DEV, budget=800)
        b = sim.simulate(jobs, policy, DEV, budget=800)
        assert np.array_equal(a.end, b.end) and not a.refused.any()
        starts = np.array([j.arrival for j in a.jobs])
        assert (a.start >= starts - 1e-12).all() and (a.end > a.start).all()
        assert sum(len([1]) for _ in a.jobs) == 60 and a.summary()["requests"] == 60
        if policy not in sim.UNBUDGETED:
            assert max(a.group_pmc) <= 800 and a.peak_memory <= 800


def test_work_counts_table2_operators():
    ops, moved, flops = sim.work("gcn", [10, 20], nn=5, ne=7)
    assert moved == 4.0 * (3 * 7 * 10 + 5 * 10) and flops == 2.0 * 5 * 10 * 20 and ops > 0
    assert sim.work("sage", [10, 20], 5, 7)[2] == 2 * flops
    with pytest.raises(ValueError):
        sim.work("gat", [10, 20], 5, 7)


def test_queues_have_the_papers_shape():
    pytest.importorskip("torch_geometric")
    from splitrpc.services.colocation import workload

    shapes = workload.subgraphs(scale=0.05, per_dataset=4)
    workload.graph.cache_clear()
    workload.subgraphs.cache_clear()
    assert workload.subgraphs(scale=0.05, per_dataset=4) == shapes  # the same graphs again, from the seed
    assert len(shapes) == 8 and {s.dataset for s in shapes} == set(workload.DATASETS)
    assert all(s.nodes >= 1 and s.edges >= 1 and s.features == workload.DATASETS[s.dataset][2] for s in shapes)
    for kind in workload.QUEUES:
        for load in workload.LOADS:
            q = workload.make_queue(kind, load=load, shapes=shapes, seed=1)
            assert len(q) == workload.QUEUE_LENGTH and [i.seq for i in q] == list(range(100))
            assert all(a.slot <= b.slot for a, b in zip(q, q[1:]))
            assert {i.model for i in q} == ({"gcn", "sage", "gin"} if kind == "mix" else {kind})
    lo = workload.make_queue("gcn", load="low", shapes=shapes)[-1].slot
    hi = workload.make_queue("gcn", load="high", shapes=shapes)[-1].slot
    assert hi < lo  # more arrivals per slot: the queue arrives in fewer slots
    for u in workload.UTILISATIONS:  # utilisation u: about 100 / u slots for 100 requests
        slots = [workload.make_queue("mix", load=u, shapes=shapes, seed=s)[-1].slot + 1 for s in range(20)]
        assert 0.8 < np.mean(slots) * u / 100 < 1.25, u
    assert workload.make_queue("gcn", load="medium", shapes=shapes) == workload.make_queue("gcn", load=0.5, shapes=shapes)
    with pytest.raises(ValueError):
        workload.make_queue("gat", shapes=shapes)
    for bad in ("heavy", 0, -0.5, 5, True, "nan"):
        with pytest.raises(ValueError):
            workload.make_queue("gcn", load=bad, shapes=shapes)


def test_the_device_is_fitted_to_measured_times_and_refuses_what_they_cannot_tell():
    true = Device(op_overhead=3e-5, gather_bw=2e11, flops=5e12)
    rng = np.random.default_rng(0)
    samples = []
    for i in range(30):
        kind = ("gcn", "sage", "gin")[i % 3]
        dims = [100, 64, 64, 8]
        nn = int(rng.integers(100, 20_000))
        ne = nn * int(rng.integers(2, 16))
        j = sim.job(true, i, 0.0, kind, dims, nn, ne, 1)
        samples.append({"kind": kind, "dims": dims, "nn": nn, "ne": ne, "seconds": j.compute})
    fit = sim.fit_device(samples, name="fitted to test")
    assert fit.op_overhead == pytest.approx(3e-5, rel=1e-3) and fit.gather_bw == pytest.approx(2e11, rel=1e-3)
    assert fit.flops == pytest.approx(5e12, rel=1e-3) and fit.memory == Device().memory and fit.name == "fitted to test"
    with pytest.raises(ValueError, match="at least 3"):
        sim.fit_device(samples[:2])
    flat = [dict(s, seconds=1e-3) for s in samples]  # no dependence on work: rates would be infinite
    with pytest.raises(ValueError, match="do not determine"):
        sim.fit_device(flat)


def test_device_overrides():
    d = sim.device_with(["op_overhead=1e-4", "memory=1024"])
    assert d.op_overhead == 1e-4 and d.memory == 1024 and "op_overhead=0.0001" in d.name
    assert sim.device_with([]) == sim.Device()
    for bad in ("op_overhead", "nope=1", "name=x", "flops=abc", "flops=-1", "flops=nan"):
        with pytest.raises(ValueError):
            sim.device_with([bad])


def test_bench_colocate_sim_command_writes_its_report(tmp_path):
    pytest.importorskip("torch_geometric")
    from splitrpc.bench.suites import colocate_sim

    out = tmp_path / "r"
    rc = colocate_sim.main(["--queues", "mix", "--loads", "high", "--repeats", "2", "--scale", "0.05", "--layers", "2",
                            "--hidden", "16", "--sensitivity", "1e-4", "--quiet", "--out", str(out)])
    assert rc == 0
    doc = __import__("json").loads((out / "colocate_sim.json").read_text())
    assert doc["device"]["simulated"] is True and len(doc["cells"]) == 1 and len(doc["sensitivity"]) == 1
    cell = doc["cells"][0]["mean"]
    assert set(cell) == set(colocate_sim.POLICY_ORDER)
    assert all(cell[p]["overruns"] == 0 for p in ("serial", "fifo", "sqtf", "bqt"))
    md = (out / "colocate_sim.md").read_text()
    assert "SIMULATED device" in md and "## Acceptance" in md
    assert "## Acceptance" in md and "interval" in md and "0.7 (high)" in md
    assert all(0 <= c["mean"]["bqt"]["violations_ci"][0] <= c["mean"]["bqt"]["violations"] for c in doc["cells"])
    for bad in (["--queues", "gat"], ["--loads", "heavy"], ["--loads", "0"], ["--repeats", "0"],
                ["--device-from", str(out / "colocate_sim.json")], ["--device-from", str(out / "none.json")]):
        assert colocate_sim.main([*bad, "--quiet", "--out", str(out)]) == 2
    check = tmp_path / "check.json"  # what `splitrpc check` on a GPU writes: the device-pmc section's fit
    fitted = __import__("dataclasses").asdict(sim.Device(name="fitted to device-pmc on cuda:0", op_overhead=1e-4))
    check.write_text(__import__("json").dumps({"sections": {"device-pmc": {"facts": {"device_fit": fitted}}}}))
    rc = colocate_sim.main(["--queues", "gcn", "--loads", "0.5", "--repeats", "2", "--scale", "0.05", "--layers", "2",
                            "--hidden", "16", "--sensitivity", "", "--device-from", str(check), "--quiet",
                            "--out", str(tmp_path / "fit")])
    assert rc == 0
    md = (tmp_path / "fit" / "colocate_sim.md").read_text()
    assert "parameters fitted to measurements on a GPU" in md and "100 us per operator" in md
