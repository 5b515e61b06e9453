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
        if policy != sim.UNBOUNDED:
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
    assert hi < lo  # twice the arrivals per slot: the queue arrives in about half the slots
    with pytest.raises(ValueError):
        workload.make_queue("gat", shapes=shapes)


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
    rc = colocate_sim.main(["--queues", "mix", "--loads", "high", "--repeats", "1", "--scale", "0.05", "--layers", "2",
                            "--hidden", "16", "--sensitivity", "1e-4", "--quiet", "--out", str(out)])
    assert rc == 0
    doc = __import__("json").loads((out / "colocate_sim.json").read_text())
    assert doc["device"]["simulated"] is True and len(doc["cells"]) == 1 and len(doc["sensitivity"]) == 1
    cell = doc["cells"][0]["mean"]
    assert set(cell) == set(colocate_sim.POLICY_ORDER)
    assert all(cell[p]["overruns"] == 0 for p in ("serial", "fifo", "sqtf", "bqt"))
    md = (out / "colocate_sim.md").read_text()
    assert "SIMULATED device" in md and "## Acceptance" in md
    with pytest.raises(SystemExit):
        colocate_sim.main(["--queues", "gat", "--quiet", "--out", str(out)])
