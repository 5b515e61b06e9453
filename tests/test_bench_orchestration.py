"""test_bench_orchestration.py: bench-orchestration end to end on the CPU (GPU cells reported), bad input, reply checks."""
import argparse
import importlib.util
import json
import re
import threading

import numpy as np
import pytest

from splitrpc import gpu
from splitrpc.bench.suites import orchestration as orch

HAVE_TORCH = importlib.util.find_spec("torch") is not None
SERVICES = "vecadd,matmul,lenet" if HAVE_TORCH else "vecadd,matmul"


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """One tiny run with the default device (cuda:0): (exit code, the JSON, the markdown)."""
    out = tmp_path_factory.mktemp("orch")
    rc = orch.main(["--services", SERVICES, "--calls", "40", "--rounds", "1", "--small", "--out", str(out)])
    return rc, json.loads((out / "orchestration.json").read_text()), (out / "orchestration.md").read_text()


def _rows(doc, **match):
    return [r for r in doc["table"] if all(r[k] == v for k, v in match.items())]


def test_cpu_rows_measured_and_validated(cpu_run):
    rc, doc, md = cpu_run
    assert rc == 0
    if doc["gpu"]["usable"]:
        pytest.skip("a GPU is present: the bench measures it instead of a CPU baseline")
    for svc in SERVICES.split(","):
        (r,) = _rows(doc, service=svc, mode="o1", device="cpu")
        # A call may time out on a starved shared machine (the bench says so); none may be wrong.
        assert r["status"] == "ok" or re.fullmatch(r"ok \(\d+ calls failed: \{'TIMEOUT': \d+\}\)", r["status"]), r
        assert r["p50_us"] > 0 and r["p99_us"] >= r["p50_us"] and r["throughput_rps"] > 0
        assert r["checked"] == 2 * orch.VALIDATE_CALLS and r["wrong"] == 0 and r["invalid"] == 0
        assert 1 <= r["mean_batch"] <= orch.MAX_BATCH
        assert r["compute_p50_us"] > 0 and r["compute_valid"] is True
        assert r["norm_e2e"] == pytest.approx(1.0)
        assert r["norm_compute"] + r["norm_orchestration"] == pytest.approx(1.0)
        assert f"| {svc} | O1 | cpu |" in md
    assert all(c["valid"] for c in doc["computes"])


def test_gpu_cells_reported_not_faked(cpu_run):
    _, doc, md = cpu_run
    for svc in ("matmul", "lenet") if HAVE_TORCH else ("matmul",):
        (r,) = _rows(doc, service=svc, mode="o2")
        assert r["status"].startswith("n/a: O2 has a persistent kernel for vecadd only") and r["p50_us"] is None
    if gpu.available(0):
        return  # the GPU cells were measured
    gpu_cells = [r for r in doc["table"] if r["device"] != "cpu" and not r["status"].startswith("n/a")]
    assert {(r["service"], r["mode"]) for r in gpu_cells} >= {("vecadd", "o1"), ("vecadd", "graph"),
                                                              ("vecadd", "o2"), ("matmul", "o1"), ("matmul", "graph")}
    for r in gpu_cells:
        assert r["status"].startswith("unavailable: cuda:0 is not usable: ") and len(r["status"]) > 40, r
        assert r["p50_us"] is None and r["checked"] == 0
    assert doc["gpu"]["usable"] is False and doc["gpu"]["reason"]
    assert "need a GPU" in md and "unavailable: cuda:0" in md


def test_report_header(cpu_run):
    _, doc, md = cpu_run
    assert doc["command"].startswith("python -m splitrpc.bench.suites.orchestration --services")
    assert doc["machine"]["cpus"] >= 1 and "gpu" in doc["machine"] and doc["date"]
    assert md.startswith("# O1 vs O1+CUDA graphs vs O2") and f"`{doc['command']}`" in md
    assert len(doc["runs"]) == len(doc["table"])  # one round


@pytest.mark.parametrize("args, word", [(["--services", "vecadd,nope"], "unknown service"),
                                        (["--modes", "o1,o3"], "unknown mode"),
                                        (["--device", "tpu"], "device must be"),
                                        (["--calls", "0"], "at least 1")])
def test_bad_input_exits_2(tmp_path, capsys, args, word):
    assert orch.main([*args, "--out", str(tmp_path)]) == 2
    assert word in capsys.readouterr().err
    assert not (tmp_path / "orchestration.json").exists()


def test_subcommand_parser():
    p = argparse.ArgumentParser(prog="splitrpc")
    orch.add_parser(p.add_subparsers(dest="cmd"))
    a = p.parse_args(["orchestration", "--modes", "o1,o2", "--small"])
    assert a.func is orch.cmd_bench_orchestration and a.modes == ["o1", "o2"] and a.small
    assert a.services == list(orch.SERVICES) and a.rounds == 3 and a.device == "cuda:0"


def test_check_reply_catches_wrong_replies():
    req = orch.request("vecadd", 3)
    good = (np.frombuffer(req, "<f4") + np.float32(1)).astype("<f4")
    assert orch.check_reply("vecadd", req, good.tobytes(), exact=True)
    bad = good.copy()
    bad[17] += np.float32(1e-3)
    assert not orch.check_reply("vecadd", req, bad.tobytes(), exact=True)
    assert not orch.check_reply("vecadd", req, good.tobytes()[:-4], exact=True)
    req = orch.request("matmul", 3)
    a, b = np.frombuffer(req, "<f4").reshape(2, 32, 32)
    c = (a @ b).astype("<f4")
    near = (c * np.float32(1 + 1e-6)).astype("<f4")
    assert orch.check_reply("matmul", req, c.tobytes(), exact=True)
    assert not orch.check_reply("matmul", req, near.tobytes(), exact=True)
    assert orch.check_reply("matmul", req, near.tobytes(), exact=False)  # a GPU GEMM's rounding
    far = c.copy()
    far[5, 5] += 1.0
    assert not orch.check_reply("matmul", req, far.tobytes(), exact=False)
    assert not orch.check_reply("matmul", req, (a @ b.T).astype("<f4").tobytes(), exact=False)


def test_check_reply_lenet():
    pytest.importorskip("torch")
    from splitrpc.services.models import reference

    req = orch.request("lenet", 2)
    want = reference("lenet", req, small=True)
    assert orch.check_reply("lenet", req, want, exact=False, small=True)
    bad = np.frombuffer(want, "<f4").copy()
    bad[0] += 10 * max(1.0, float(np.abs(bad).max()))
    assert not orch.check_reply("lenet", req, bad.tobytes(), exact=False, small=True)


def test_wrong_server_reply_fails_the_cell(tmp_path, capsys, monkeypatch):
    """A server callback that computes the wrong thing is caught by validation and fails the run."""
    def wrong_vecadd(x, y):
        np.add(x, np.float32(2), out=y)

    monkeypatch.setattr(orch, "make_callback", lambda name, device, small: wrong_vecadd)
    rc = orch.main(["--services", "vecadd", "--modes", "o1", "--device", "cpu", "--calls", "20", "--rounds", "1",
                    "--out", str(tmp_path)])
    assert rc == 1
    (r,) = json.loads((tmp_path / "orchestration.json").read_text())["table"]
    assert r["status"].startswith("failed: wrong replies") and r["wrong"] == r["checked"] == 32
    assert r["invalid"] > 0  # the load runs' exact comparison caught them too
    assert "failed" in capsys.readouterr().err


def test_plan():
    usable = {"device": "cuda:0", "usable": True, "reason": "", "name": "test"}
    cells = {(c["service"], c["mode"], c["device"]): c["status"] for c in orch.plan(["vecadd", "lenet"],
                                                                                     list(orch.MODES), usable)}
    assert all(d == "cuda:0" for _, _, d in cells)  # no CPU baseline with a GPU
    assert cells[("vecadd", "o2", "cuda:0")] is None and cells[("vecadd", "graph", "cuda:0")] is None
    assert cells[("lenet", "o2", "cuda:0")] == orch.O2_NA and cells[("lenet", "o1", "cuda:0")] is None
    cpu = {"device": "cpu", "usable": False, "reason": "--device is cpu", "name": None}
    cells = {(c["service"], c["mode"]): c["status"] for c in orch.plan(["vecadd"], list(orch.MODES), cpu)}
    assert cells[("vecadd", "o1")] is None and cells[("vecadd", "graph")].startswith("n/a: O1+CG needs a GPU")
    assert cells[("vecadd", "o2")].startswith("n/a: O2 needs a GPU")


def test_callback_that_raises_is_reported_and_server_closed(tmp_path, capsys, monkeypatch):
    def broken(x, y):
        raise RuntimeError("boom")

    monkeypatch.setattr(orch, "make_callback", lambda name, device, small: broken)
    rc = orch.main(["--services", "vecadd", "--modes", "o1", "--device", "cpu", "--calls", "20", "--rounds", "1",
                    "--out", str(tmp_path)])
    assert rc == 1
    doc = json.loads((tmp_path / "orchestration.json").read_text())
    (r,) = doc["table"]
    assert r["status"].startswith("failed: InternalError") and "boom" in r["status"] and r["p50_us"] is None
    assert doc["computes"][0]["error"] == "RuntimeError: boom"
    assert not [t for t in threading.enumerate() if t.name == "splitrpc-worker" and t.is_alive()]
