"""test_loadgen.py: the load generator: arrival schedules, traces, native runs, reply checks,
validation, and `splitrpc load` writing its JSON, CSV and PNG reports."""
import csv
import json

import numpy as np
import pytest

from splitrpc import Client, TensorSpec
from splitrpc.cli import main
from splitrpc import arrivals
from splitrpc.loadgen import report
from splitrpc.load_run import INVALID, OK, TIMEOUT, run_load
from splitrpc.loadgen.validate import validate
from splitrpc.services import SERVICES

from conftest import free_udp_port


def gap_stats(at):
    gaps = np.diff(np.concatenate(([0], at.astype(np.float64)))) / 1e9
    return 1 / gaps.mean(), gaps.std() / gaps.mean()


@pytest.mark.parametrize("arrival,cv_arg,cv_want,tol_cv", [("poisson", 0, 1.0, 0.03), ("hyperexp", 3.0, 3.0, 0.1),
                                                          ("hyperexp", 1.5, 1.5, 0.05), ("constant", 0, 0.0, 1e-6)])
def test_schedule_rate_and_cv(arrival, cv_arg, cv_want, tol_cv):
    at = arrivals.arrivals(arrival, 10_000, 200_000, cv=cv_arg, seed=3)
    assert at.dtype == np.uint64 and np.all(np.diff(at.astype(np.int64)) >= 0)
    rate, cv = gap_stats(at)
    assert rate == pytest.approx(10_000, rel=0.03)
    assert cv == pytest.approx(cv_want, rel=tol_cv, abs=1e-3)


def test_schedule_is_deterministic_per_seed():
    a = arrivals.arrivals("poisson", 1000, 1000, seed=5)
    assert np.array_equal(a, arrivals.arrivals("poisson", 1000, 1000, seed=5))
    assert not np.array_equal(a, arrivals.arrivals("poisson", 1000, 1000, seed=6))


@pytest.mark.parametrize("kw", [dict(arrival="poisson", rate=0), dict(arrival="poisson", rate=float("nan")),
                                dict(arrival="hyperexp", rate=10, cv=1.0), dict(arrival="gamma", rate=10)])
def test_schedule_rejects_bad_arguments(kw):
    with pytest.raises(ValueError):
        arrivals.arrivals(n=10, **kw)


def test_trace_pieces_follow_their_rates():
    at = arrivals.trace_arrivals([0, 1, 2], [2000, 0, 8000], 2.5, seed=2) / 1e9
    assert abs(np.sum(at < 1) - 2000) < 250
    assert np.sum((at >= 1) & (at < 2)) == 0
    assert abs(np.sum(at >= 2) - 4000) < 400 and at.max() < 2.5


def test_trace_csv_roundtrip_and_errors(tmp_path):
    p = tmp_path / "t.csv"
    arrivals.write_trace_csv(p, [0, 10, 20], [5, 50, 500])
    t, r = arrivals.read_trace_csv(p)
    assert list(t) == [0, 10, 20] and list(r) == [5, 50, 500]
    bad = tmp_path / "bad.csv"
    bad.write_text("time_s,rate_rps\n0,5\n1,oops\n")
    with pytest.raises(arrivals.TraceError, match="bad.csv:3"):
        arrivals.read_trace_csv(bad)
    bad.write_text("0,5\n0,6\n")
    with pytest.raises(arrivals.TraceError, match="increase"):
        arrivals.read_trace_csv(bad)
    bad.write_text("0,-5\n")
    with pytest.raises(arrivals.TraceError, match=">= 0"):
        arrivals.read_trace_csv(bad)


def test_wikipedia_day_shape():
    t, r = arrivals.wikipedia_day(10_000, 60, noise=0.1, seed=1)
    assert len(t) == 288 and t[0] == 0 and t[-1] < 60
    assert r.max() == pytest.approx(10_000)
    assert 0.3 < r.min() / r.max() < 0.7   # a diurnal trough
    quiet = arrivals.wikipedia_day(10_000, 60, noise=0.0)[1]
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
    sched = arrivals.arrivals("poisson", 2000, 600, seed=1)
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
    arrivals.write_trace_csv(trace, [0, 0.5, 1.0], [500, 1500, 800])
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


# ---------------------------------------------------------------- request sets

ECHO = SERVICES["echo"].func_id  # replies with the request


def _echo_set():
    """Three requests of different sizes (one empty, one over several datagrams)."""
    rng = np.random.default_rng(7)
    return [b"small", b"", rng.bytes(5000)]


def test_request_set_replies_checked_per_request(builtin_server):
    reqs = _echo_set()
    idx = np.array([(i // 3) % 3 for i in range(300)], dtype=np.uint32)  # runs of 3 calls with one request
    sched = arrivals.arrivals("poisson", 3000, 300, seed=4)
    with Client("127.0.0.1", builtin_server.port, timeout=2.0) as c:
        r = run_load(c, ECHO, reqs, expect=reqs, schedule=sched, index=idx, max_outstanding=32)
        assert np.all(r.rec["code"] == OK), np.unique(r.rec["code"], return_counts=True)
        assert np.array_equal(r.req_index, idx)
        assert np.array_equal(r.rec["reply_len"], np.array([len(q) for q in reqs])[idx])
        s = report.summarize(r, names=["s", "e", "big"])
        assert {k: v["calls"] for k, v in s["by_request"].items()} == {"s": 102, "e": 99, "big": 99}
        assert all(v["ok"] == v["calls"] and v["latency_us"]["p99.9"] >= v["latency_us"]["p50"] > 0
                   for v in s["by_request"].values())

        wrong = list(reqs)
        wrong[2] = bytes([reqs[2][0] ^ 1]) + reqs[2][1:]  # request 2's expected reply is wrong
        r = run_load(c, ECHO, reqs, expect=wrong, concurrency=8, n=90)
        assert np.array_equal(r.req_index, np.arange(90) % 3)  # no index: call i sends request i % 3
        assert np.all(r.rec["code"][r.req_index == 2] == INVALID)
        assert np.all(r.rec["code"][r.req_index != 2] == OK)
        by = report.summarize(r)["by_request"]
        assert [by[k]["invalid"] for k in ("0", "1", "2")] == [0, 0, 30] and by["2"]["ok"] == 0

        r = run_load(c, ECHO, reqs, concurrency=4, n=30)  # no expects: nothing is checked
        assert np.all(r.rec["code"] == OK) and r.meta["request_set"]["checks_replies"] is False


def test_request_set_spread_over_functions(builtin_server):
    """One run calling a function per request: vecadd and echo answer their own requests, and
    each function's count on the server is its requests' share of the calls."""
    vec = SERVICES["vecadd"]
    x = vec.example(np.random.default_rng(1))
    reqs, expects, funcs = [x, b"hello"], [vec.expected(x), b"hello"], [vec.func_id, ECHO]
    idx = np.array([i % 5 == 0 for i in range(400)], dtype=np.uint32)  # 80 echo, 320 vecadd
    before = builtin_server.stats()["functions"]
    with Client("127.0.0.1", builtin_server.port, timeout=2.0) as c:
        r = run_load(c, funcs, reqs, expect=expects, concurrency=8, n=400, index=idx)
        assert np.all(r.rec["code"] == OK), np.unique(r.rec["code"], return_counts=True)
        with pytest.raises(ValueError, match="one request per id"):
            run_load(c, funcs, reqs[:1], concurrency=1, n=4)
    after = builtin_server.stats()["functions"]
    assert after["vecadd"] - before["vecadd"] >= 320 and after["echo"] - before["echo"] >= 80


def test_single_request_records_index_zero(builtin_server):
    with Client("127.0.0.1", builtin_server.port, timeout=2.0) as c:
        r = run_load(c, ECHO, b"abc", expect=b"abc", concurrency=2, n=20)
    assert r.req_index.dtype == np.uint32 and np.array_equal(r.req_index, np.zeros(20))
    assert "by_request" not in report.summarize(r) and r.meta["request_bytes"] == 3


@pytest.mark.parametrize("kw,msg", [(dict(request=[]), "at least one"),
                                    (dict(request=[b"a", b"b"], expect=[b"a"]), "1 expected replies for 2"),
                                    (dict(request=[b"a"], expect=b"a"), "expect is a list"),
                                    (dict(request=[b"a", b"b"], index=np.array([0, 2, 1, 0])), r"\[0, 2\)"),
                                    (dict(request=[b"a", b"b"], index=np.array([0, -1, 1, 0])), r"\[0, 2\)"),
                                    (dict(request=[b"a", b"b"], index=np.array([0, 1])), "one request index per call"),
                                    (dict(request=b"a", index=np.zeros(4, dtype=np.uint32)), "request set"),
                                    (dict(request=b"a", expect=[b"a"]), "only with a request set")])
def test_request_set_bad_arguments(builtin_server, kw, msg):
    with Client("127.0.0.1", builtin_server.port) as c:
        with pytest.raises(ValueError, match=msg):
            run_load(c, ECHO, concurrency=1, n=4, **kw)


def test_request_set_file_roundtrip_and_weighted_draw(tmp_path):
    from splitrpc.loadgen.request_set import load_request_set, save_request_set

    p = tmp_path / "set.bin"  # any name: written exactly there
    save_request_set(p, [b"aa", np.arange(3, dtype=np.uint8)], expects=[b"AA", b"xyz"], weights=[4, 1],
                     names=["small", "large"])
    rs = load_request_set(p)
    assert rs.requests == [b"aa", b"\x00\x01\x02"] and rs.expects == [b"AA", b"xyz"]
    assert rs.names == ["small", "large"] and list(rs.probabilities) == [0.8, 0.2]
    idx = rs.draw(1000, np.random.default_rng(3))
    # binomial(1000, 0.2): sd 12.6, so 200 +- 60 is more than 4.7 sd either way
    assert idx.dtype == np.uint32 and set(np.unique(idx)) == {0, 1} and 140 < np.sum(idx == 1) < 260
    assert np.array_equal(idx, rs.draw(1000, np.random.default_rng(3)))
    save_request_set(p, [b"x", b"y", b"z"])
    rs = load_request_set(p)
    assert rs.expects is None and rs.weights is None and rs.class_names() == ["0", "1", "2"]
    assert set(np.unique(rs.draw(300, np.random.default_rng(1)))) == {0, 1, 2}


def _npz(path, **arrays):
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


GOOD = dict(data=np.frombuffer(b"abcdef", dtype=np.uint8), offsets=np.array([0, 2, 6], dtype=np.uint64))


@pytest.mark.parametrize("arrays,msg", [
    (dict(offsets=GOOD["offsets"]), "missing data"),
    (dict(data=GOOD["data"]), "missing offsets"),
    (dict(GOOD, offsets=np.array([0, 2, 7], dtype=np.uint64)), "ends at 7"),
    (dict(GOOD, offsets=np.array([0, 4, 2, 6], dtype=np.uint64)), "decreases"),
    (dict(GOOD, offsets=np.array([1, 2, 6], dtype=np.uint64)), r"offsets\[0\]"),
    (dict(GOOD, offsets=np.array([0, 2**63 + 5], dtype=np.uint64)), "past the data"),
    (dict(GOOD, data=np.zeros(6, dtype=np.int32)), "uint8"),
    (dict(GOOD, expect_data=GOOD["data"]), "come together"),
    (dict(GOOD, expect_data=GOOD["data"], expect_offsets=np.array([0, 6], dtype=np.uint64)),
     "1 expected replies for 2"),
    (dict(GOOD, weights=np.array([1.0, -1.0])), ">= 0"),
    (dict(GOOD, weights=np.array([1.0, np.nan])), "finite"),
    (dict(GOOD, weights=np.array([0.0, 0.0])), "all zero"),
    (dict(GOOD, weights=np.array([1.0, 2.0, 3.0])), "one weight per request"),
    (dict(GOOD, names=np.array(["a"])), "1 names for 2"),
])
def test_request_set_file_errors(tmp_path, arrays, msg):
    from splitrpc.loadgen.request_set import load_request_set

    p = _npz(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match=msg) as e:
        load_request_set(p)
    assert "bad.npz" in str(e.value)


def test_request_set_not_an_npz(tmp_path):
    from splitrpc.loadgen.request_set import load_request_set

    p = tmp_path / "x.npz"
    p.write_bytes(b"not a zip at all")
    with pytest.raises(ValueError, match="x.npz"):
        load_request_set(p)
    np.save(tmp_path / "one.npy", np.zeros(3))
    with pytest.raises(ValueError, match="single array"):
        load_request_set(tmp_path / "one.npy")


def test_cli_request_set_reports_by_request(builtin_server, tmp_path, capsys):
    from splitrpc.loadgen.request_set import save_request_set

    big = np.random.default_rng(2).bytes(3000)
    reqs = [b"s1", b"s2", big]
    path = tmp_path / "set.npz"
    save_request_set(path, reqs, expects=reqs, weights=[0.4, 0.4, 0.2], names=["small", "small", "large"])
    rc, out = _load(tmp_path, builtin_server.port, "--func-id", str(ECHO), "--requests", str(path), "--mode", "open",
                    "--rates", "2000", "--duration", "0.5", "--max-outstanding", "32", "--validate", "6",
                    "--no-plots", "--seed", "5")
    assert rc == 0, capsys.readouterr()
    doc = json.loads((out / "report.json").read_text())
    assert doc["validation"]["passed"] and doc["validation"]["calls"] == 6
    assert doc["target"]["request_set"]["classes"] == {"small": {"requests": 2, "probability": 0.8},
                                                       "large": {"requests": 1, "probability": 0.2}}
    assert doc["target"]["checks_replies"] is True
    run = doc["runs"][0]
    by = run["by_request"]
    assert set(by) == {"small", "large"} and by["small"]["requests"] == [0, 1] and by["large"]["requests"] == [2]
    assert by["small"]["calls"] + by["large"]["calls"] == run["calls"] == run["ok"] == 1000
    assert 100 < by["large"]["calls"] < 300  # binomial(1000, 0.2): 200 +- 8 sd
    assert all(v["errors"] == 0 and v["latency_us"]["p50"] > 0 and v["latency_us"]["p99.9"] is not None
               for v in by.values())
    assert run["latency_us"]["p50"] > 0 and "large" in capsys.readouterr().out

    # One wrong expected reply: the run fails on exactly that class's calls.
    save_request_set(path, reqs, expects=[b"s1", b"s2", big[::-1]], names=["a", "b", "c"])
    rc, out = _load(tmp_path, builtin_server.port, "--func-id", str(ECHO), "--requests", str(path),
                    "--calls", "60", "--concurrency", "4", "--validate", "0", "--no-plots")
    assert rc == 1
    by = json.loads((out / "report.json").read_text())["runs"][0]["by_request"]
    assert by["c"]["invalid"] == by["c"]["calls"] > 0 and by["a"]["invalid"] == by["b"]["invalid"] == 0
    assert by["a"]["ok"] == by["a"]["calls"] > 0


@pytest.mark.parametrize("case,msg", [("missing", "missing offsets"), ("weights", "all zero"),
                                      ("garbage", "not a request-set npz"), ("nofile", "No such file"),
                                      ("nofunc", "--requests needs --func-id"),
                                      ("both", "--requests replaces --request-file")])
def test_cli_request_set_errors(tmp_path, capsys, case, msg):
    p = tmp_path / "s.npz"
    if case == "missing":
        _npz(p, data=GOOD["data"])
    elif case == "weights":
        _npz(p, **GOOD, weights=np.zeros(2))
    elif case == "garbage":
        p.write_bytes(b"\x00" * 10)
    else:
        _npz(p, **GOOD)
    args = ["--requests", str(p if case != "nofile" else tmp_path / "none.npz")]
    if case != "nofunc":
        args += ["--func-id", "3"]
    if case == "both":
        args += ["--request-file", str(p)]
    rc, _ = _load(tmp_path, free_udp_port(), *args)
    assert rc == 2 and msg in capsys.readouterr().err
