"""test_bench.py: `splitrpc bench` end to end on a tiny configuration: every system it was
asked for appears in the table (measured, or reported unavailable), targets and plots."""
import importlib.util
import json
import re

import pytest

from splitrpc.bench.helpers import systems
from splitrpc.cli import main


def test_bench_small_run(tmp_path, capsys):
    out = tmp_path / "b"
    rc = main(["bench", "sidebyside", "--systems",
               "raw-udp-busy,c-min-block,splitrpc-poll,splitrpc-block,splitrpc-local,grpc-asyncio",
               "--services", "vecadd,echo", "--concurrency", "1,4", "--calls", "300", "--rounds", "1",
               "--rates", "300", "--sweep-s", "0.3", "--out", str(out)])
    assert rc == 0, capsys.readouterr()
    doc = json.loads((out / "sidebyside.json").read_text())
    rows = {(r["system"], r["service"], r["concurrency"]): r for r in doc["table"]}
    for system in ("raw-udp-busy", "c-min-block", "splitrpc-poll", "splitrpc-block"):
        for svc in ("vecadd", "echo"):
            for conc in (1, 4):
                r = rows[(system, svc, conc)]
                assert r["status"] == "ok" and r["p50_us"] > 0 and r["p99_us"] >= r["p50_us"], r
                assert r["throughput_rps"] > 0 and r["errors"] == 0 and r["invalid"] == 0
    assert rows[("splitrpc-local", "vecadd", 1)]["p50_us"] > 0
    for system in ("c-min-block", "splitrpc-poll", "splitrpc-block"):  # the independent client's rows, beside
        for conc in (1, 4):
            r = rows[(f"{system}+indep", "vecadd", conc)]
            assert r["status"] == "ok" and r["p50_us"] > 0 and r["throughput_rps"] > 0 and r["errors"] == 0, r
    assert not any(s.startswith("raw-udp") and s.endswith("+indep") for s, _, _ in rows)  # not a protocol server
    grpc = [r for r in doc["table"] if r["system"] == "grpc-asyncio"]
    if importlib.util.find_spec("grpc") is None:  # not installed: reported, not dropped
        assert grpc and all(r["status"].startswith("unavailable: ") and "grpc" in r["status"] for r in grpc)
    else:
        assert {r["concurrency"] for r in grpc} == {1, 4} and all(r["status"] == "ok" for r in grpc)
    names = [t["target"] for t in doc["targets"]]
    assert len(names) == 10 and doc["targets"][0]["value"] > 0
    by_name = {t["target"]: t for t in doc["targets"]}
    assert by_name["vecadd p50 / minimal C server p50"]["value"] is None  # c-min-busy was not asked for
    sweep = [r for r in doc["open_loop"] if r["system"] == "splitrpc-poll"]
    assert len(sweep) == 1 and sweep[0]["ok"] > 0
    md = (out / "sidebyside.md").read_text()
    assert "| vecadd | splitrpc-poll | 1 |" in md and "## Targets" in md
    for png in doc["plots"]:
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert "throughput_vs_concurrency.png" in doc["plots"]


def test_bench_says_which_services_the_minimal_server_lacks(tmp_path):
    """matmul reported unavailable for c-min; head measured in 8950-byte segments (--segment-size)."""
    rc = main(["bench", "sidebyside", "--systems", "c-min-busy", "--services", "matmul,head", "--rounds", "1", "--concurrency", "1",
               "--calls", "500", "--segment-size", "8950", "--out", str(tmp_path)])
    assert rc == 0
    doc = json.loads((tmp_path / "sidebyside.json").read_text())
    rows = {r["service"]: r for r in doc["table"]}
    assert rows["matmul"]["status"] == "unavailable: serves vecadd, echo, head only"
    assert rows["head"]["status"] == "ok" and rows["head"]["errors"] == 0 and rows["head"]["p50_us"] > 0
    assert doc["segment_size"] == 8950 and "8950 bytes" in (tmp_path / "sidebyside.md").read_text()
    assert main(["bench", "sidebyside", "--segment-size", "70000", "--out", str(tmp_path / "x")]) == 2


def test_bench_reports_a_peer_that_cannot_start(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(systems, "peer_available", lambda system: (False, "pyzmq not installed (test)"))
    rc = main(["bench", "sidebyside", "--systems", "zmq", "--services", "vecadd", "--rounds", "1", "--out", str(tmp_path)])
    assert rc == 0
    doc = json.loads((tmp_path / "sidebyside.json").read_text())
    assert doc["table"][0]["status"] == "unavailable: pyzmq not installed (test)"
    assert "unavailable: pyzmq not installed (test)" in (tmp_path / "sidebyside.md").read_text()


def test_bench_rejects_unknown_names(tmp_path, capsys):
    assert main(["bench", "sidebyside", "--systems", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown" in capsys.readouterr().err


def test_ab_builds_interval_of_the_ratio():
    """ab_builds' B/A interval: contains 1 for the same rounds, excludes it for a doubled metric,
    and is left out with fewer than two rounds a side."""
    from splitrpc.bench.helpers.intervals import ratio_interval

    same = ratio_interval([10.0, 11.0, 12.0, 10.5, 11.5], [11.5, 10.0, 12.0, 11.0, 10.5])
    assert same["ratio"] == 1.0 and same["lo"] <= 1.0 <= same["hi"]
    double = ratio_interval([10.0, 11.0, 12.0, 10.5, 11.5], [20.0, 22.0, 24.0, 21.0, 23.0])
    assert double["ratio"] == 2.0 and double["lo"] > 1.5
    assert ratio_interval([1.0], [1.0, 2.0])["ratio"] is None


def test_round_ratio_interval_cancels_the_drift_both_sides_share():
    """Rounds that drift 1.5x from one to the next, B always 10% over A in its round: the paired
    median is 1.1 with a narrow interval, where the unpaired one is wide; mismatched lengths refused."""
    from splitrpc.bench.helpers.intervals import ratio_interval, round_ratio_interval

    a = [10.0, 15.0, 9.0, 13.5, 11.0, 8.0, 14.0]
    b = [x * (1.1 + 0.01 * (i % 3 - 1)) for i, x in enumerate(a)]
    paired, unpaired = round_ratio_interval(a, b), ratio_interval(a, b)
    assert abs(paired["ratio"] - 1.1) < 0.011 and 1.08 < paired["lo"] <= paired["hi"] < 1.12
    assert unpaired["hi"] - unpaired["lo"] > 5 * (paired["hi"] - paired["lo"])
    assert round_ratio_interval([1.0], [2.0])["ratio"] is None
    with pytest.raises(ValueError):
        round_ratio_interval([1.0, 2.0], [1.0])


def test_ab_builds_report_again_from_its_runs(tmp_path):
    from splitrpc.bench.suites import ab_builds

    def run(p50):
        return [{"system": "splitrpc-poll", "service": "vecadd", "concurrency": 1, "offered_rps": None,
                 "p50_us": p50, "p99_us": 2 * p50, "throughput_rps": 1e6 / p50}]

    doc = {"date": "d", "command": "c", "machine": {}, "builds": {"A": "a", "B": "b"}, "rounds": 3, "wall_s": 1.0,
           "runs": {"A": [run(10.0), run(10.2), run(9.9)], "B": [run(20.0), run(20.4), run(19.8)]}}
    src = tmp_path / "ab.json"
    src.write_text(json.dumps(doc))
    assert ab_builds.main(["--from-json", str(src), "--out", str(tmp_path / "again")]) == 0
    md = (tmp_path / "again" / "ab.md").read_text()
    assert re.search(r"\| vecadd \| splitrpc-poll \| 1 \| 10\.0 .*\| worse \| 2\.000 \[.*\] \* \|", md), md


def test_pool_overhead_client_case_measures_the_python_client_paths():
    from splitrpc.bench.suites import pool_overhead

    r = pool_overhead.one_client()
    assert set(r) == {"call p50 us", "call calls/s", "async16 calls/s"} and all(v > 0 for v in r.values())
    assert r["call p50 us"] < 1e6 / r["call calls/s"] * 10  # a p50 of the same calls, not of something else


def test_pool_overhead_measures_both_concurrencies():
    from splitrpc.bench.suites import pool_overhead

    r = pool_overhead.one()
    assert set(r) == {"c1 p50 us", "c1 calls/s", "c8 p50 us", "c8 calls/s"} and all(v > 0 for v in r.values())
    ci = pool_overhead.ratio_interval([1.0, 1.1, 0.9], [2.0, 2.2, 1.8])  # the interval its report uses
    ratio, lo, hi = ci["ratio"], ci["lo"], ci["hi"]
    assert ratio == 2.0 and lo > 1.5


def test_sessions_cost_reports_paired_and_unpaired_ratios():
    """bench/suites/sessions_cost.py from runs alone: each variant over the unkeyed one, the median of
    the rounds' ratios (paired) beside the ratio of medians; an earlier file without variants or
    paired ratios is summarised again from its runs."""
    from splitrpc.bench.suites import sessions_cost

    runs = []
    for r, base in enumerate([10.0, 14.0, 9.0, 12.0, 11.0]):
        for v, f in (("unkeyed", 1.0), ("v5", 1.1), ("v5-aes", 1.05)):
            runs.append({"round": r, "mode": "spin", "outstanding": 1, "variant": v, "p50_us": base * f,
                         "p99_us": 3 * base, "rps": 1e6 / (base * f), "handshake_us": None if v == "unkeyed" else 400})
    cells = sessions_cost.summarise(runs, ["unkeyed", "v5", "v5-aes"])
    v5 = cells[0]["v5"]
    assert abs(v5["p50_round_ratio"]["ratio"] - 1.1) < 1e-9 and v5["p50_round_ratio"]["hi"] - v5["p50_round_ratio"]["lo"] < 1e-6
    assert v5["p50_ratio"]["hi"] - v5["p50_ratio"]["lo"] > 0.2  # unpaired: the drift stays in
    doc = {"machine": {}, "started": "s", "command": "c", "rounds": 5, "calls": 10, "client": "/x/indep_client",
           "variants": ["unkeyed", "v5", "v5-aes"], "cells": cells, "handshakes": None, "runs": runs}
    md = sessions_cost.report(doc)
    assert re.search(r"\| spin \| 1 \| v5-aes \| .* \| 1\.050 \[1\.050, 1\.050\] \|", md), md
    with pytest.raises(ValueError):
        sessions_cost._variants("v5,unkeyed")
    # with version 2 unkeyed beside: the keyed variants over it too (paired), version 1 still the base
    runs2 = runs + [{"round": r, "mode": "spin", "outstanding": 1, "variant": "unkeyed-v2", "p50_us": base * 1.02,
                     "p99_us": 3 * base, "rps": 1e6 / (base * 1.02), "handshake_us": None}
                    for r, base in enumerate([10.0, 14.0, 9.0, 12.0, 11.0])]
    cells2 = sessions_cost.summarise(runs2, ["unkeyed", "unkeyed-v2", "v5", "v5-aes"])
    assert abs(cells2[0]["v5"]["p50_round_ratio_v2"]["ratio"] - 1.1 / 1.02) < 1e-9
    assert abs(cells2[0]["v5"]["p50_round_ratio"]["ratio"] - 1.1) < 1e-9
    assert "p50_round_ratio_v2" not in cells2[0]["unkeyed-v2"]
    md2 = sessions_cost.report(dict(doc, variants=["unkeyed", "unkeyed-v2", "v5", "v5-aes"], cells=cells2, runs=runs2))
    assert re.search(r"\| spin \| 1 \| v5 \| .* \| 1\.078 \[1\.078, 1\.078\] \|\n", md2), md2
    assert sessions_cost._variants("unkeyed,unkeyed-v2,v5-aes") == ["unkeyed", "unkeyed-v2", "v5-aes"]


def test_typed_cost_runs_each_round_in_a_client_process_of_its_own(tmp_path):
    """bench/suites/typed_cost.py on vecadd, two tiny rounds: each round's client is a process of
    its own, the three modes measured, the target judged from the interval's top (not run for
    its numbers: this machine is noisy)."""
    from splitrpc.bench.suites import typed_cost

    out = tmp_path / "tc.md"
    assert typed_cost.main(["--rounds", "2", "--calls", "100", "--warmup", "10", "--quiet", "--vecadd-only",
                            "--out", str(out)]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    v = doc["functions"]["vecadd"]
    assert list(doc["functions"]) == ["vecadd"] and all(len(v["rounds"][m]) == 2 for m in typed_cost.MODES)
    assert all(0 < x < 1e5 for m in typed_cost.MODES for x in v["rounds"][m])
    assert doc["target"]["met"] == (v["added_us"]["hi"] <= typed_cost.TARGET_US)
    assert v["layer_alone"]["read_into"] is True  # vecadd's one output: the reply received straight into it
    assert "each in a client process of its own" in out.read_text()


def test_ab_builds_runs_the_side_by_side_suite_in_either_builds_form(tmp_path):
    """A build with the CLI's groups runs `bench sidebyside`; an A/B's base from before them, `bench`."""
    import subprocess

    from splitrpc.bench.suites import ab_builds
    from splitrpc.loadgen.reporting import SuiteFailed

    new, old = tmp_path / "new", tmp_path / "old"
    new.write_text('#!/bin/sh\necho "positional arguments:"; echo "  SUITE"; echo "    sidebyside   side-by-side benchmark"\n')
    # the help of a build before the groups: its description is sidebyside.py's docstring
    old.write_text('#!/bin/sh\necho "usage: splitrpc bench [-h] [--systems SYSTEMS]"; echo; '
                   'echo "sidebyside.py: \\`splitrpc bench\\`: the side-by-side benchmark"\n')
    bad = tmp_path / "bad"
    bad.write_text("#!/bin/sh\necho no such command >&2; exit 2\n")
    for f in (new, old, bad):
        f.chmod(0o755)
    assert "sidebyside" in subprocess.run([str(old)], capture_output=True, text=True).stdout
    assert ab_builds._bench_cmd(str(new)) == [str(new), "bench", "sidebyside"]
    assert ab_builds._bench_cmd(str(old)) == [str(old), "bench"]
    with pytest.raises(SuiteFailed, match="exited 2: no such command"):
        ab_builds._bench_cmd(str(bad))
