"""test_loadgen.py: the load generator: arrival schedules, traces, native runs, reply checks,
validation, and `splitrpc load` writing its JSON, CSV and PNG reports."""
import csv
import json

import numpy as np
import pytest

from splitrpc import Client, TensorSpec
from splitrpc.cli import main
from splitrpc.loadgen import report, schedule
from splitrpc.loadgen.runner import INVALID, OK, TIMEOUT, run_load
from splitrpc.loadgen.validate import validate
from splitrpc.services import SERVICES

from conftest import free_udp_port


def gap_stats(at):
    gaps = np.diff(np.concatenate(([0], at.astype(np.float64)))) / 1e9
    return 1 / gaps.mean(), gaps.std() / gaps.mean()


@pytest.mark.parametrize("arrival,cv_arg,cv_want,tol_cv", [("poisson", 0, 1.0, 0.03), ("hyperexp", 3.0, 3.0, 0.1),
                                                          ("hyperexp", 1.5, 1.5, 0.05), ("constant", 0, 0.0, 1e-6)])
def test_schedule_rate_and_cv(arrival, cv_arg, cv_want, tol_cv):
    at = schedule.arrivals(arrival, 10_000, 200_000, cv=cv_arg, seed=3)
    assert at.dtype == np.uint64 and np.all(np.diff(at.astype(np.int64)) >= 0)
    rate, cv = gap_stats(at)
    assert rate == pytest.approx(10_000, rel=0.03)
    assert cv == pytest.approx(cv_want, rel=tol_cv, abs=1e-3)


def test_schedule_is_deterministic_per_seed():
    a = schedule.arrivals("poisson", 1000, 1000, seed=5)
    assert np.array_equal(a, schedule.arrivals("poisson", 1000, 1000, seed=5))
    assert not np.array_equal(a, schedule.arrivals("poisson", 1000, 1000, seed=6))


@pytest.mark.parametrize("kw", [dict(arrival="poisson", rate=0), dict(arrival="poisson", rate=float("nan")),
                                dict(arrival="hyperexp", rate=10, cv=1.0), dict(arrival="gamma", rate=10)])
def test_schedule_rejects_bad_arguments(kw):
    with pytest.raises(ValueError):
        schedule.arrivals(n=10, **kw)


def test_trace_pieces_follow_their_rates():
    at = schedule.trace_arrivals([0, 1, 2], [2000, 0, 8000], 2.5, seed=2) / 1e9
    assert abs(np.sum(at < 1) - 2000) < 250
    assert np.sum((at >= 1) & (at < 2)) == 0
    assert abs(np.sum(at >= 2) - 4000) < 400 and at.max() < 2.5


def test_trace_csv_roundtrip_and_errors(tmp_path):
    p = tmp_path / "t.csv"
    schedule.write_trace_csv(p, [0, 10, 20], [5, 50, 500])
    t, r = schedule.read_trace_csv(p)
    assert list(t) == [0, 10, 20] and list(r) == [5, 50, 500]
    bad = tmp_path / "bad.csv"
    bad.write_text("time_s,rate_rps\n0,5\n1,oops\n")
    with pytest.raises(schedule.TraceError, match="bad.csv:3"):
        schedule.read_trace_csv(bad)
    bad.write_text("0,5\n0,6\n")
    with pytest.raises(schedule.TraceError, match="increase"):
        schedule.read_trace_csv(bad)
    bad.write_text("0,-5\n")
    with pytest.raises(schedule.TraceError, match=">= 0"):
        schedule.read_trace_csv(bad)


def test_wikipedia_day_shape():
    t, r = schedule.wikipedia_day(10_000, 60, noise=0.1, seed=1)
    assert len(t) == 288 and t[0] == 0 and t[-1] < 60
    assert r.max() == pytest.approx(10_000)
    assert 0.3 < r.min() / r.max() < 0.7   # a diurnal trough
    quiet = schedule.wikipedia_day(10_000, 60, noise=0.0)[1]
    rel = r / r.max() / (quiet / quiet.max())
    assert 0.05 < np.std(rel / rel.mean()) < 0.15   # the 10% Gaussian noise is there


def test_closed_loop_run_checks_every_reply(builtin_server):
    svc = SERVICES["vecadd"]
    req = svc.example(np.random.default_rng(0))
    with Client("127.0.0.1", builtin_server.port, timeout=2.0) as c:
        r = run_load(c, svc.func_id, req, expect=svc.expected(req), concurrency=4, n=500)
        assert r.mode == "closed" and len(r.order) == 500 and np.all(r.rec["code"] == OK)
        assert np.all(r.rec["reply_len"] == 1024)
        wrong = bytearray(svc.expected(req))
        wrong[5] ^= 1
        r = run_load(c, svc.func_id, req, expect=bytes(wrong), concurrency=2, n=50)
        assert np.all(r.rec["code"] == INVALID)
        s = report.summarize(r)
        assert s["invalid"] == 50 and s["errors_by_code"] == {"INVALID": 50} and s["ok"] == 0


def test_load_runs_beside_futures_on_one_client(builtin_server):
    """Futures (call_async) and two load runs share one client, each seeing only its own
    replies: the futures' poller used to take a run's replies, which then timed out."""
    import threading

    svc = SERVICES["vecadd"]
    req = svc.example(np.random.default_rng(1))
    with Client("127.0.0.1", builtin_server.port, timeout=5.0) as c:
        futs = [c.call_async(svc.func_id, req) for _ in range(32)]
        runs = []
        threads = [threading.Thread(target=lambda: runs.append(
            run_load(c, svc.func_id, req, expect=svc.expected(req), concurrency=4, n=1000, timeout_s=5.0)))
            for _ in range(2)]
        for t in threads:
            t.start()
        more = [c.call_async(svc.func_id, req) for _ in range(32)]
        for t in threads:
            t.join(60)
        assert all(f.result(timeout=30) == svc.expected(req) for f in futs + more)
        assert len(runs) == 2 and all(np.all(r.rec["code"] == OK) for r in runs), \
            [np.unique(r.rec["code"], return_counts=True) for r in runs]


def test_open_loop_latency_counts_from_the_due_time(builtin_server):
    svc = SERVICES["vecadd"]
    req = svc.example(np.random.default_rng(0))
    sched = schedule.arrivals("poisson", 2000, 600, seed=1)
    with Client("127.0.0.1", builtin_server.port, timeout=2.0) as c:
        r = run_load(c, svc.func_id, req, expect=svc.expected(req), schedule=sched)
    rec = r.rec
    assert np.all(rec["code"] == OK)
    assert np.array_equal(rec["sched_ns"], sched)
    assert np.all(rec["sent_ns"] >= rec["sched_ns"]) and np.all(rec["done_ns"] > rec["sent_ns"])
    assert np.array_equal(np.sort(r.latency_ns()), np.sort((rec["done_ns"] - rec["sched_ns"]).astype(np.int64)))
    s = report.summarize(r)
    assert s["offered_rps"] == pytest.approx(2000, rel=0.15)
    assert s["achieved_rps"] == pytest.approx(s["offered_rps"], rel=0.15)
    ts = report.time_series(r, 0.05)
    assert ts["offered_rps"].sum() * 0.05 == 600


def test_unanswered_calls_time_out():
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind(("127.0.0.1", 0))
        with Client("127.0.0.1", sink.getsockname()[1]) as c:
            r = run_load(c, 1, b"x" * 16, concurrency=3, n=6, timeout_s=0.02)
    assert np.all(r.rec["code"] == TIMEOUT)
    assert report.summarize(r)["timeouts"] == 6


def test_run_rejects_bad_arguments(builtin_server):
    with Client("127.0.0.1", builtin_server.port) as c:
        with pytest.raises(ValueError):
            run_load(c, 1, b"", concurrency=1, n=0)
        with pytest.raises(ValueError):
            run_load(c, 1, b"", schedule=np.array([], dtype=np.uint64))


def _wrong_vecadd(srv):
    def plus_two(x, y):
        np.add(x, np.float32(2), out=y)

    srv.add_function(plus_two, 1, "vecadd", [TensorSpec("x", "float32", (256,))], [TensorSpec("y", "float32", (256,))])


def test_validation_catches_a_wrong_reply(make_server, builtin_server):
    with Client("127.0.0.1", builtin_server.port) as c:
        v = validate(c, SERVICES["vecadd"], calls=8)
    assert v.passed and v.ok == 8
    bad = make_server(_wrong_vecadd)
    with Client("127.0.0.1", bad.port) as c:
        v = validate(c, SERVICES["vecadd"], calls=8)
    assert not v.passed and v.invalid == 8 and "differs" in v.problems[0]


def _load(tmp_path, port, *args):
    out = tmp_path / "out"
    rc = main(["load", "--port", str(port), "--out", str(out), "--quiet", "--warmup-s", "0.1", *args])
    return rc, out


def test_cli_closed_writes_json_csv_and_plots(builtin_server, tmp_path, capsys):
    rc, out = _load(tmp_path, builtin_server.port, "--mode", "closed", "--concurrency", "1,4", "--calls", "300")
    assert rc == 0, capsys.readouterr()
    doc = json.loads((out / "report.json").read_text())
    assert [r["concurrency"] for r in doc["runs"]] == [1, 4]
    assert all(r["ok"] == 300 and r["latency_us"]["p50"] > 0 for r in doc["runs"])
    assert doc["validation"]["passed"] and doc["machine"]["cpus"] >= 1
    rows = list(csv.DictReader(open(out / "runs.csv")))
    assert len(rows) == 2 and float(rows[1]["lat_p99_us"]) >= float(rows[1]["lat_p50_us"])
    for png in ("latency_cdf.png", "throughput_vs_concurrency.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_open_sweep(builtin_server, tmp_path, capsys):
    rc, out = _load(tmp_path, builtin_server.port, "--mode", "open", "--rates", "500,2000", "--duration", "0.5",
                    "--arrival", "hyperexp", "--cv", "2")
    assert rc == 0, capsys.readouterr()
    doc = json.loads((out / "report.json").read_text())
    assert [round(r["offered_rps"], -2) for r in doc["runs"]] == pytest.approx([500, 2000], rel=0.5)
    assert (out / "latency_vs_load.png").stat().st_size > 5000


def test_cli_trace_replay(builtin_server, tmp_path, capsys):
    trace = tmp_path / "trace.csv"
    schedule.write_trace_csv(trace, [0, 0.5, 1.0], [500, 1500, 800])
    rc, out = _load(tmp_path, builtin_server.port, "--mode", "trace", "--trace", str(trace), "--service", "matmul")
    assert rc == 0, capsys.readouterr()
    doc = json.loads((out / "report.json").read_text())
    assert doc["trace"]["points"] == 3 and doc["runs"][0]["ok"] == doc["trace"]["calls"]
    assert (out / "series.csv").exists() and (out / "latency_over_time.png").exists()
    rc, out = _load(tmp_path, builtin_server.port, "--mode", "trace", "--wiki-peak", "2000", "--duration", "1")
    assert rc == 0 and json.loads((out / "report.json").read_text())["trace"]["points"] == 288


def test_cli_reports_wrong_replies_and_fails(make_server, tmp_path, capsys):
    bad = make_server(_wrong_vecadd)
    rc, out = _load(tmp_path, bad.port, "--calls", "50", "--no-plots")
    assert rc == 1
    doc = json.loads((out / "report.json").read_text())
    assert doc["runs"][0]["invalid"] == 50 and doc["validation"]["invalid"] == 32
    assert "FAILED: 50 invalid replies in the measured runs; validation: 32 of 32" in capsys.readouterr().err


@pytest.mark.parametrize("args,msg", [(["--service", "nope"], "unknown service"),
                                      (["--mode", "trace"], "--trace"),
                                      (["--func-id", "1"], "--request-file"),
                                      (["--mode", "trace", "--trace", "/nonexistent.csv"], "nonexistent"),
                                      (["--timeout-ms", "50"], "is a server")])
def test_cli_usage_errors(tmp_path, capsys, args, msg):
    rc, _ = _load(tmp_path, free_udp_port(), *args)
    assert rc == 2 and msg in capsys.readouterr().err
