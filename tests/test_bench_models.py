"""test_bench_models.py: the model benchmark on LeNet (small), its validation and targets, grpc_peer --model."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from splitrpc.bench.helpers import model_server
from splitrpc.bench.suites import models_e2e
from splitrpc.bench.helpers.peers import common

HAVE_GRPC = importlib.util.find_spec("grpc") is not None


def corrupt(reply: bytes) -> bytes:
    """The reply with its first logit moved far outside the tolerance."""
    a = np.frombuffer(reply, "<f4").copy()
    a[0] += 10.0 * max(1.0, float(np.abs(a).max()))
    return a.tobytes()


# ------------------------------------------------------------------ the harness end to end


def test_harness_runs_every_system_on_lenet(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "e2e"
    rc = models_e2e.main(["--small", "--models", "lenet", "--calls", "40", "--rounds", "1", "--concurrency", "1,4",
                          "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    doc = json.loads((out / "models_e2e.json").read_text())
    md = (out / "models_e2e.md").read_text()
    rows = {(r["system"], r["concurrency"]): r for r in doc["table"] if r["model"] == "lenet"}
    want = [("splitrpc", 1), ("splitrpc", 4), ("splitrpc-local", 1)]
    want += [("grpc", 1), ("grpc", 4)] if HAVE_GRPC else []
    for key in want:
        r = rows[key]
        assert r["status"] == "ok" and r["p50_us"] > 0 and r["p99_us"] >= r["p50_us"], r
        assert r["throughput_rps"] > 0 and (r["errors"], r["invalid"]) == (0, 0), r
        assert f"| lenet | {key[0]} | {key[1]} |" in md
    for conc in (1, 4):  # measured from the server's stats: every call in a batch of 1 to max batch
        assert 1.0 <= rows[("splitrpc", conc)]["mean_batch"] <= min(conc, 8)
    runs = [r for r in doc["runs"] if r["system"] in ("splitrpc", "splitrpc-local")]
    assert runs and all(r["validated"] == models_e2e.VALIDATION_CALLS for r in runs)
    if not HAVE_GRPC:
        assert all(rows[("grpc", c)]["status"].startswith("unavailable: ") for c in (1, 4))
    targets = [t for t in doc["targets"] if t["model"] == "lenet"]
    assert len(targets) == 3 and "at concurrency 4" in targets[2]["target"]
    measured = targets if HAVE_GRPC else targets[:1]
    assert all(t["value"] > 0 and t["met"] in (True, False) for t in measured)
    assert "## Targets" in md and "This run was on the CPU" in md and "defined for a GPU" in md
    assert doc["command"].startswith("python -m splitrpc.bench.suites.models_e2e --small")
    assert doc["machine"]["cpus"] >= 1 and doc["device"] == doc["ran_on"] == "cpu" and "gpu" not in doc["machine"]
    assert printed.count("  splitrpc ") == 2  # a progress line per measurement


def test_harness_rejects_bad_input(tmp_path, capsys):
    assert models_e2e.main(["--models", "lenet,nosuch", "--out", str(tmp_path)]) == 2
    assert "nosuch" in capsys.readouterr().err
    assert models_e2e.main(["--systems", "splitrpc,nope", "--out", str(tmp_path)]) == 2
    assert "nope" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ei:
        models_e2e.main(["--concurrency", "0", "--out", str(tmp_path)])
    assert ei.value.code == 2
    assert not (tmp_path / "models_e2e.json").exists()


# ------------------------------------------------------------------ validation


def test_wrong_replies_are_detected():
    pytest.importorskip("torch")
    from splitrpc.services.models import reference

    reqs = models_e2e.validation_requests("lenet", 4)
    good = [reference("lenet", r, small=True) for r in reqs]
    assert models_e2e.wrong_replies("lenet", reqs, good, small=True) == []
    bad = [good[0], corrupt(good[1]), good[2][:-4], TimeoutError("no reply")]
    wrong = models_e2e.wrong_replies("lenet", reqs, bad, small=True)
    assert [w.split(":")[0] for w in wrong] == ["call 1", "call 2", "call 3"]
    assert models_e2e.wrong_replies("lenet", reqs, good[:3], small=True)  # a reply missing
    # the full-size BERT-like's answers are not the small one's: the configuration is checked too
    # (LeNet is small already: its two configurations are the same network)
    reqs = models_e2e.validation_requests("bert-like", 2)
    good = [reference("bert-like", r, small=True) for r in reqs]
    assert models_e2e.wrong_replies("bert-like", reqs, good, small=True) == []
    assert len(models_e2e.wrong_replies("bert-like", reqs, good, small=False)) == 2


def test_a_server_giving_wrong_replies_is_reported_invalid(make_server, make_client):
    """A splitrpc server whose lenet corrupts the first reply of every batch: the validation
    before timing catches it, the row says invalid and it meets no target."""
    pytest.importorskip("torch")
    from splitrpc.services.models import MODELS

    info = MODELS["lenet"]
    cb = info.build("cpu", small=True)

    def wrong_first(x, y):
        cb(x, y)
        y[0, 0] += 1000.0

    srv = make_server(lambda s: s.add_function(wrong_first, info.func_id, "lenet", list(info.inputs),
                                               list(info.outputs), max_batch=8))
    c = make_client(srv.port, timeout=10.0)
    n, wrong = models_e2e.splitrpc_validate(c, "lenet", small=True, timeout_s=10.0)
    assert n == models_e2e.VALIDATION_CALLS and 1 <= len(wrong) <= n
    r = models_e2e._mark_validation(models_e2e.ModelResult("splitrpc", "lenet", 1, p50_us=100.0), n, wrong)
    assert r.status.startswith(f"invalid: {len(wrong)} of {n}") and r.invalid == len(wrong)
    row = {"system": "splitrpc", "model": "lenet", "concurrency": 1, "p50_us": 100.0, "p99_us": 100.0,
           "throughput_rps": 1e4, "invalid": r.invalid, "errors": 0, "status": r.status, "mean_batch": 1.0}
    local = dict(row, system="splitrpc-local", invalid=0, status="ok")
    t = models_e2e.targets([row, local], ["lenet"], [1])
    assert t[0]["value"] is None and t[0]["met"] is None


def test_model_check_remembers_each_distinct_reply(monkeypatch):
    pytest.importorskip("torch")
    from splitrpc.services import models

    req = common.model_request("lenet")
    good = models.reference("lenet", req, small=True)
    check = common.ModelCheck("lenet", req, small=True)
    calls = []
    real = models.check_reply
    monkeypatch.setattr(models, "check_reply", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert check(good) and check(good) and not check(corrupt(good)) and not check(corrupt(good))
    assert len(calls) == 2  # once per distinct reply
    tally = common.Tally(3, check, give_up_after=10)
    tally.reply(0, 50, good)
    tally.reply(1, 50, corrupt(good))
    tally.finish()
    assert tally.lat_ns == [50, 0, 0] and (tally.errors, tally.invalid) == (1, 1)
    assert "not lenet's answer within tolerance" in tally.error_text


# ------------------------------------------------------------------ batch sizes and targets


def test_batch_sizes_leave_out_the_stats_call():
    before = {"batch_sizes": {"1": 3, "8": 1}}
    after = {"batch_sizes": {"1": 4, "4": 2, "8": 5}}
    assert model_server.run_batches(before, after) == {4: 2, 8: 4}
    assert model_server.mean_batch(before, after) == pytest.approx((8 + 32) / 6)
    assert model_server.mean_batch(before, {"batch_sizes": {"1": 4, "8": 1}}) is None


def _row(system, model, conc, p50, tput, invalid=0):
    return {"system": system, "model": model, "concurrency": conc, "p50_us": p50, "p99_us": p50,
            "throughput_rps": tput, "invalid": invalid, "errors": 0, "status": "ok", "mean_batch": None}


def test_targets_and_their_markdown():
    rows = [_row("splitrpc", "lenet", 1, 105.0, 9000.0), _row("splitrpc-local", "lenet", 1, 100.0, 10000.0),
            _row("grpc", "lenet", 1, 1000.0, 900.0), _row("splitrpc", "lenet", 32, 800.0, 40000.0),
            _row("grpc", "lenet", 32, 9000.0, 4000.0), _row("splitrpc", "bert-like", 1, 500.0, 2000.0)]
    t = models_e2e.targets(rows, ["lenet", "bert-like"], [1, 32])
    by = {(x["model"], i % 3): x for i, x in enumerate(t)}
    assert by[("lenet", 0)]["value"] == pytest.approx(1.05) and by[("lenet", 0)]["met"] is True
    assert by[("lenet", 1)]["value"] == pytest.approx(0.105) and by[("lenet", 1)]["met"] is True
    assert by[("lenet", 2)]["value"] == pytest.approx(10.0) and "concurrency 32" in by[("lenet", 2)]["target"]
    assert all(by[("bert-like", i)]["met"] is None for i in range(3))  # no local, no grpc: missing
    slow = models_e2e.targets([dict(rows[0], p50_us=150.0), rows[1]], ["lenet"], [1])
    assert slow[0]["met"] is False and slow[2]["value"] is None  # no concurrency above 1: no batching target
    doc = {"date": "d", "command": "c", "device": "cuda:0", "models": ["lenet", "bert-like"], "small": False,
           "max_batch": 8, "calls": 100, "rounds": 1, "wait": "poll", "grpc_server": "asyncio", "torch_threads": 1,
           "wall_s": 1.0, "targets": t,
           "machine": {"cpu": "x", "cpus": 16, "kernel": "k", "python": "3", "gpu": "NVIDIA H100"}}
    md = models_e2e.markdown(doc, rows)
    assert "GPU NVIDIA H100" in md and "This run was on the CPU" not in md
    assert "| lenet | splitrpc p50 / splitrpc-local p50 at concurrency 1 (within 10%) | 1.05 | <= 1.10 | yes |" in md
    assert "| bert-like | splitrpc p50 / grpcio p50 at concurrency 1 (>= 60% below) | - | <= 0.40 | - |" in md
    assert "| lenet | splitrpc | 1 | 105.0 | 105.0 | 9,000 | - | 5.0 | 0 | 0 | ok |" in md
    assert "| lenet | splitrpc | 32 | 800.0 | 800.0 | 40,000 | - | - | 0 | 0 | ok |" in md  # queueing is no tax
    assert "NO" in models_e2e.markdown(dict(doc, targets=slow), rows)
    fell_back = models_e2e.markdown(dict(doc, ran_on="cpu"), rows)  # --device cuda where torch sees no GPU
    assert "(ran on cpu: no CUDA device)" in fell_back and "This run was on the CPU" in fell_back


# ------------------------------------------------------------------ the gRPC peer's --model client


def _run_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    return {"cwd": tempfile.gettempdir(), "env": env}


def _grpc(*args) -> list:
    return [sys.executable, "-m", "splitrpc.bench.helpers.peers.grpc_peer", *map(str, args)]


@pytest.fixture
def grpc_models_server():
    """grpc_peer serving lenet and bert-like (small), no built-in service: its port."""
    pytest.importorskip("grpc")
    pytest.importorskip("torch")
    from splitrpc.bench.helpers.procs import Proc, free_port
    import socket

    port = free_port(socket.SOCK_STREAM)
    proc = Proc(_grpc("serve", "--port", port, "--models", "lenet,bert-like", "--small"), env=_run_env()["env"])
    try:
        proc.wait_line("READY", 60)  # ServerDied (with the peer's stderr) if it exits or stalls
        yield port
    finally:
        proc.stop()


def _client(port, *args) -> dict:
    p = subprocess.run(_grpc("client", "--port", port, "--warmup", 3, "--timeout-s", 30, *args), capture_output=True,
                       text=True, timeout=300, **_run_env())
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.splitlines()
    assert len(lines) == 1, p.stdout[-2000:]
    return json.loads(lines[0])


@pytest.mark.parametrize("model", ["lenet", "bert-like"])
def test_grpc_client_model_mode(grpc_models_server, model):
    res = _client(grpc_models_server, "--model", model, "--small", "--concurrency", 4, "--calls", 30)
    assert res["peer"] == "grpcio" and res["service"] == model and res["concurrency"] == 4
    assert (res["errors"], res["invalid"], res["error_text"]) == (0, 0, None)
    assert len(res["lat_ns"]) == 30 and all(v > 0 for v in res["lat_ns"]) and res["elapsed_s"] > 0


def test_grpc_client_model_mode_catches_wrong_replies(grpc_models_server):
    """The client checks against the configuration it is told: the full-size BERT-like answers differently."""
    res = _client(grpc_models_server, "--model", "bert-like", "--calls", 10)
    assert res["invalid"] == 10 and res["errors"] == 0 and all(v == 0 for v in res["lat_ns"])
    assert "not bert-like's answer within tolerance" in res["error_text"]


def test_grpc_peer_model_arguments(capsys):
    pytest.importorskip("grpc")
    from splitrpc.bench.helpers.peers import grpc_peer

    for argv in (["client", "--port", "1", "--model", "nosuch"],
                 ["client", "--port", "1", "--model", "lenet", "--service", "vecadd"],
                 ["client", "--port", "1"],
                 ["serve", "--port", "1"],
                 ["serve", "--port", "1", "--models", "lenet,nosuch"]):
        with pytest.raises(SystemExit) as ei:
            grpc_peer.main(argv)
        assert ei.value.code == 2, argv
    err = capsys.readouterr().err
    assert "nosuch" in err and "exactly one of --service and --model" in err and "--service, --models" in err


def test_add_parser_makes_the_bench_models_subcommand():
    import argparse

    p = argparse.ArgumentParser(prog="splitrpc")
    models_e2e.add_parser(p.add_subparsers(dest="cmd", required=True))
    a = p.parse_args(["models", "--small", "--models", "lenet,bert-like", "--concurrency", "1,32"])
    assert a.func is models_e2e.cmd_bench_models and a.models == ["lenet", "bert-like"] and a.small
    assert (a.device, a.max_batch, a.rounds, a.systems) == ("cpu", 8, 3, list(models_e2e.SYSTEMS))
