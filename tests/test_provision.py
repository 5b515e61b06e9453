"""Provisioning (issue 20, Hercules): the integer program is optimal (brute force on small random problems) and never above greedy; an infeasible load reports the shortfall per model; R from history; `splitrpc plan provision` on the paper's Section III-C example (synthetic tuples): MILP <= greedy at every step, >= 10% less at peak, infeasible days listed."""
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("scipy")

from splitrpc.loadgen.planning import provision as pv  # noqa: E402


def _brute(problem: pv.Problem, loads: dict) -> tuple[float, float]:
    """(least unserved QPS, least power for it) over every integer allocation."""
    H, M = problem.qps.shape
    need = np.array([loads[m] for m in problem.models])
    cells = [(h, m) for h in range(H) for m in range(M) if not np.isnan(problem.qps[h, m])]
    best = (np.inf, np.inf)
    for ns in itertools.product(*[range(int(problem.avail[h]) + 1) for h, _ in cells]):
        used = np.zeros(H)
        served = np.zeros(M)
        power = 0.0
        for (h, m), n in zip(cells, ns):
            used[h] += n
            served[m] += n * problem.qps[h, m]
            power += n * problem.power[h, m]
        if (used > problem.avail).any():
            continue
        short = float(np.maximum(0, need - served).sum())
        best = min(best, (round(short, 6), power))
    return best


@pytest.mark.parametrize("seed", range(12))
def test_the_integer_program_is_optimal_and_never_above_greedy(seed):
    rng = np.random.default_rng(seed)
    kinds, models = ["a", "b"], ["m1", "m2"]
    tuples = [pv.Tuple(m, k, float(rng.integers(1, 9) * 100), float(rng.integers(1, 9) * 50))
              for m in models for k in kinds if rng.random() > 0.15 or k == "a"]
    inv = {k: int(rng.integers(0, 4)) for k in kinds}
    problem = pv.Problem(tuples, inv)
    loads = {m: float(rng.integers(0, 20) * 100) for m in problem.models}
    mi, gr = problem.milp(loads), problem.greedy(loads)
    short, power = _brute(problem, loads)
    assert sum(mi.shortfall.values()) == pytest.approx(short, abs=1e-6)
    assert mi.power == pytest.approx(power) and mi.feasible == (short == 0)
    for al in (mi, gr):
        assert all(n >= 0 for n in al.servers.values())
        for k, n in al.by_kind().items():
            assert n <= inv[k]
    if gr.feasible:
        assert mi.feasible and mi.power <= gr.power + 1e-9


def test_infeasible_loads_report_the_shortfall_per_model():
    problem = pv.Problem(pv.EXAMPLE_TUPLES, pv.EXAMPLE_INVENTORY)
    al = problem.milp({"rmc1": 40_000, "rmc2": 200_000})
    assert not al.feasible and al.shortfall["rmc1"] == 0 and al.shortfall["rmc2"] > 0
    assert al.by_kind() == pv.EXAMPLE_INVENTORY  # everything is in use
    served = sum(n * next(t.qps for t in pv.EXAMPLE_TUPLES if (t.kind, t.model) == (h, m))
                 for (h, m), n in al.servers.items() if m == "rmc2")
    assert served + al.shortfall["rmc2"] == pytest.approx(200_000)
    ok = problem.milp({"rmc1": 0, "rmc2": 0})
    assert ok.feasible and ok.power == 0 and ok.servers == {}


def test_bad_problems_are_refused():
    with pytest.raises(pv.ProvisionError, match="two tuples"):
        pv.Problem([pv.Tuple("m", "cpu", 10, 1), pv.Tuple("m", "cpu", 20, 1)], {"cpu": 1})
    with pytest.raises(pv.ProvisionError):
        pv.Problem([pv.Tuple("m", "nowhere", 1, 1)], {"cpu": 1})
    with pytest.raises(pv.ProvisionError):
        pv.Problem([pv.Tuple("m", "cpu", -1, 1)], {"cpu": 1})
    p = pv.Problem([pv.Tuple("m", "cpu", 10, 1)], {"cpu": 1})
    with pytest.raises(pv.ProvisionError):
        p.milp({"other": 1})
    with pytest.raises(pv.ProvisionError):
        p.milp({"m": float("nan")})


def test_over_provision_from_history():
    assert pv.over_provision(np.array([100, 120, 90, 99]), quantile=1.0) == pytest.approx(0.2)
    assert pv.over_provision(np.array([[100, 50], [100, 75]]), quantile=1.0) == pytest.approx(0.5)
    assert pv.over_provision(np.array([100, 90, 80])) == 0.0


def _provision(run_env, tmp_path, *args):
    out = tmp_path / "p"
    r = subprocess.run([sys.executable, "-m", "splitrpc", "plan", "provision", "--quiet", "--out", str(out), *args],
                       capture_output=True, text=True, timeout=120, **run_env)
    return r, out


def test_the_papers_example(run_env, tmp_path):
    r, out = _provision(run_env, tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "provision.json").read_text())
    s = doc["summary"]
    assert doc["synthetic_tuples"] and "SYNTHETIC" in (out / "provision.md").read_text()
    assert s["milp_never_more"] and s["both_feasible"] >= 40 and not s["infeasible"]
    assert s["peak"]["saving"] >= 0.10 and (s["peak_both"] is None or s["peak_both"]["saving"] >= 0.10)
    assert all(st["milp"]["power"] <= st["greedy"]["power"] + 1e-6 for st in doc["steps"]
               if st["greedy"]["feasible"])
    assert 0 < doc["over_provision"] < 0.5 and doc["over_from_history"]


def test_an_infeasible_day_lists_the_shortfall(run_env, tmp_path):
    r, out = _provision(run_env, tmp_path, "--peak", "80000")
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "provision.json").read_text())["summary"]
    assert s["infeasible"] and all(sum(x["shortfall"].values()) > 0 for x in s["infeasible"])
    assert "Infeasible steps" in (out / "provision.md").read_text()


def test_a_trace_file_and_bad_input(run_env, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("time_s,rmc1,rmc2\n0,10000,20000\n600,30000,25000\n1200,20000,40000\n")
    r, out = _provision(run_env, tmp_path, "--trace", str(trace), "--over", "0")
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "provision.json").read_text())
    assert len(doc["steps"]) == 3 and doc["steps"][1]["loads"] == {"rmc1": 30000.0, "rmc2": 25000.0}
    assert doc["over_provision"] == 0 and not doc["over_from_history"]
    for bad in (["--inventory", "cpu70"], ["--trace", str(tmp_path / "missing.csv")]):
        r, _ = _provision(run_env, tmp_path, *bad)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
