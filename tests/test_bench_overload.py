"""test_bench_overload.py: bench-overload shortened to a few seconds (report structure, BUSY under overload, bounded RSS, no wrong replies), its analysis on made-up records, and bad input."""
import json

import numpy as np
import pytest

from splitrpc.bench.suites import overload as ov
from splitrpc.load_run import OK, REC_DTYPE, TIMEOUT

CHECKS = {"goodput under overload", "excess calls answered BUSY", "server memory bounded", "latency recovers",
          "no wrong replies"}


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """About 4 s of load: a two-step ramp, then 0.8 s at 0.5x, 1.5 s at 3x, 1 s at 0.5x."""
    out = tmp_path_factory.mktemp("overload")
    rc = ov.main(["--ramp", "32,128", "--ramp-s", "0.4", "--base-s", "0.8", "--overload-s", "1.5", "--tail-s", "1",
                  "--quiet", "--out", str(out)])
    return rc, json.loads((out / "overload.json").read_text()), (out / "overload.md").read_text()


def test_report_structure(short_run):
    rc, doc, md = short_run
    assert rc == 0
    assert doc["command"].startswith("python -m splitrpc.bench.suites.overload --ramp 32,128")
    assert doc["machine"]["cpus"] >= 1 and doc["date"] and doc["wall_s"] > 0
    assert "--batch-cost-us" in doc["server"]["argv"] and "--metrics-port" in doc["server"]["argv"]
    assert doc["validation"]["passed"]
    assert doc["config"]["retries"] == 0 and doc["client"]["retransmits"] == 0
    assert doc["client"]["sent_calls"] == sum(p["due"] for p in doc["results"]["phases"].values())
    assert [r["concurrency"] for r in doc["ramp"]] == [32, 128]
    assert doc["peak_rps"] == max(r["goodput_rps"] for r in doc["ramp"]) > 0
    assert [p["name"] for p in doc["phases"]] == ["baseline", "overload", "after"]
    res = doc["results"]
    assert {c["name"] for c in res["checks"]} == CHECKS
    assert all(isinstance(c["pass"], bool) for c in res["checks"])
    n = len(res["series"]["t_s"])
    assert n == round(3.3 / 0.1) and all(len(v) == n for v in res["series"].values())
    assert len(doc["samples"]["t_s"]) == len(doc["samples"]["rss_mib"]) > 10
    for name in CHECKS:
        assert f"| {name} |" in md
    assert md.startswith("# Overload: open loop at 3x capacity") and f"`{doc['command']}`" in md


def test_overload_gets_busy_and_no_wrong_reply(short_run):
    _, doc, _ = short_run
    res = doc["results"]
    over = res["phases"]["overload"]
    assert over["offered_rps"] > 2 * doc["peak_rps"]          # the generator did offer an overload
    assert over["busy"] > 0 and over["server"]["busy_sent"] > 0
    assert over["server"]["queued_max"] > 0
    assert res["invalid"] == 0 and all(p["invalid"] == 0 for p in res["phases"].values())
    assert next(c for c in res["checks"] if c["name"] == "no wrong replies")["pass"]


def test_rss_bounded(short_run):
    _, doc, _ = short_run
    rss = doc["results"]["rss"]
    assert rss["baseline"]["median_mib"] > 0 and rss["overload"]["max_mib"] > 0
    assert rss["growth_mib"] <= ov.TARGETS["rss_growth_max_mib"]


def _recs(rows):
    """Records from (due s, latency ms or None, code)."""
    rec = np.zeros(len(rows), REC_DTYPE)
    for i, (due, lat, code) in enumerate(rows):
        rec[i]["sched_ns"] = int(due * 1e9)
        rec[i]["sent_ns"] = int(due * 1e9) + 1
        rec[i]["done_ns"] = int(due * 1e9 + (lat or 0) * 1e6)
        rec[i]["code"] = code
    return rec


def test_analysis_of_made_up_records():
    """1 s baseline (p99 1 ms), 1 s overload (half BUSY, a few timeouts), 1 s after whose first
    300 ms are slow: recovery at 0.3 s."""
    rows = [(t, 1.0, OK) for t in np.arange(0, 1, 0.001)]
    rows += [(t, 20.0, OK) if i % 2 else (t, None, ov.BUSY) for i, t in enumerate(np.arange(1, 2, 0.0005))]
    rows += [(2.0001, None, TIMEOUT)] * 10
    rows += [(t, 30.0 if t < 2.3 else 1.0, OK) for t in np.arange(2.001, 3, 0.001)]
    rows.sort(key=lambda r: r[0])
    rec = _recs(rows)
    a = type("A", (), {"base_s": 1.0, "overload_s": 1.0, "tail_s": 1.0, "factor": 3.0})
    phs = ov.phases(a, 1000.0)
    samples = [{"t_ns": int(t * 1e9), "rss_kib": 100 * 1024, "busy": float(int(t * 1000)), "calls": None,
                "replies": None, "queued": 256.0 if 1 <= t < 2 else 0.0} for t in np.arange(-0.5, 3.5, 0.1)]
    res = ov.analyze(rec, 0, phs, samples, peak=1000.0, bin_s=0.1)
    over = res["phases"]["overload"]
    assert over["due"] == 2000 and over["busy"] == 1000 and over["ok"] == 1000
    assert res["phases"]["after"]["timeouts"] == 10
    assert res["busy_fraction"] == 1.0
    assert res["phases"]["baseline"]["p99_us"] == pytest.approx(1000.0)
    assert res["recovery"]["recovery_s"] == pytest.approx(0.3)
    assert res["rss"]["growth_mib"] == 0 and res["rss"]["trend_mib"] == 0
    assert over["server"]["queued_max"] == 256 and over["server"]["busy_sent"] == pytest.approx(1000, abs=100)
    checks = {c["name"]: c["pass"] for c in res["checks"]}
    assert checks == {"goodput under overload": True, "excess calls answered BUSY": True,
                      "server memory bounded": True, "latency recovers": True, "no wrong replies": True}


def test_parse_metrics():
    m = ov.parse_metrics('# HELP x y\n# TYPE x counter\nsplitrpc_errors_total{code="BUSY"} 12\nsplitrpc_queued_calls 3\n'
                         'splitrpc_queue_delay_seconds_sum 0.001500000\n')
    assert m == {'splitrpc_errors_total{code="BUSY"}': 12.0, "splitrpc_queued_calls": 3.0,
                 "splitrpc_queue_delay_seconds_sum": 0.0015}


@pytest.mark.parametrize("args, word", [(["--factor", "1"], "--factor must be > 1"),
                                        (["--overload-s", "0"], "must be > 0"),
                                        (["--tail-s", "0.2"], "--tail-s must hold")])
def test_bad_input_exits_2(tmp_path, capsys, args, word):
    assert ov.main([*args, "--out", str(tmp_path)]) == 2
    assert word in capsys.readouterr().err
