"""test_bench_one_offs.py: the one-off suites (lossy_client, noisy_neighbour, priority_classes, pool_overhead, ab_builds, scale, aio_client, gateway) end through run_suite: bad arguments exit 2 with nothing written, --report rewrites the Markdown from a run's JSON, and lossy_client's verdict."""
import json

import pytest

from splitrpc.bench.suites import (ab_builds, aio_client, lossy_client, noisy_neighbour, pool_overhead,
                                   priority_classes, scale)
from splitrpc.bench.suites import gateway as gateway_suite


@pytest.mark.parametrize("main, argv, who", [
    (noisy_neighbour.main, ["--calls", "10"], "noisy_neighbour"),
    (priority_classes.main, ["--seconds", "0"], "priority_classes"),
    (pool_overhead.main, ["--a", "x=python", "--b", "y=python", "--rounds", "1"], "pool_overhead"),
    (pool_overhead.main, ["--a", "x", "--b", "y=python"], "pool_overhead"),
    (ab_builds.main, ["--a", "x"], "ab_builds"),
    (ab_builds.main, ["--a", "x", "--b", "y=splitrpc"], "ab_builds"),
    (lossy_client.main, ["--calls", "0"], "lossy_client"),
    (scale.main, ["--functions", "4,8"], "scale"),
    (scale.main, ["--functions", "1,x"], "scale"),
    (scale.main, ["--clients", "0"], "scale"),
    (aio_client.main, ["--rounds", "1"], "aio_client"),
    (gateway_suite.main, ["--calls", "10"], "gateway"),
])
def test_bad_arguments_exit_2_and_write_nothing(tmp_path, capsys, main, argv, who):
    out = tmp_path / "r"
    if main in (pool_overhead.main, scale.main, aio_client.main, gateway_suite.main):
        argv = [*argv, "--out", str(tmp_path / "r.md")]
    else:
        argv = [*argv, "--out", str(out)]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(f"splitrpc {who}: ")
    assert list(tmp_path.iterdir()) == []


def _neighbour_doc() -> dict:
    def m(p99, slow=None):
        return {"p50_us": p99 / 4, "p99_us": p99, "ok": 100, "failed": 0, "calls_per_s": 1000.0, "slow_calls": slow}

    runs = {"idle, slow inline": [m(100.0), m(120.0)], "idle, slow on a pool of 2": [m(110.0), m(100.0)],
            "busy neighbour, slow inline": [m(10000.0, 5), m(12000.0, 7)],
            "busy neighbour, slow on a pool of 2": [m(150.0, 90), m(170.0, 110)]}
    med = {name: {k: sum(r[k] for r in rs) / len(rs) for k in ("p50_us", "p99_us", "calls_per_s")}
           for name, rs in runs.items()}
    return {"date": "d", "command": "c", "machine": {"cpus": 2}, "calls": 100, "rounds": 2, "slow_callback": "s",
            "runs": runs, "medians": med}


def test_noisy_neighbour_report_rewrites_the_markdown(tmp_path, capsys):
    src = tmp_path / "neighbour.json"
    src.write_text(json.dumps(_neighbour_doc()))
    assert noisy_neighbour.main(["--report", str(src)]) == 0
    md = (tmp_path / "neighbour.md").read_text()
    assert md == noisy_neighbour.markdown(_neighbour_doc()) and md in capsys.readouterr().out
    assert "| busy neighbour, slow on a pool of 2 | 40.0 | 160.0 [150–170] | 1,000 | 100.0 |" in md
    assert "vecadd's p99 is **1.52×** its p99 on the same server idle" in md  # 160 / 105


def test_priority_classes_report_rewrites_the_markdown(tmp_path):
    def r(p99, busy, low=True):
        cls = {"p50_us": p99 / 2, "p99_us": p99, "codes": {"OK": 10, "BUSY": busy}, "goodput_rps": 1000.0}
        return {"high": dict(cls, codes={"OK": 10}), "low": cls if low else None}

    doc = {"date": "d", "command": "c", "machine": {}, "seconds": 1.0, "rounds": 1,
           "runs": {"high class alone": [r(1000.0, 0, low=False)], "3x overload, sched=priority": [r(1500.0, 40)],
                    "3x overload, sched=rr (control)": [r(9000.0, 0)]}}
    src = tmp_path / "priority.json"
    src.write_text(json.dumps(doc))
    assert priority_classes.main(["--report", str(src)]) == 0
    md = (tmp_path / "priority.md").read_text()
    assert "| 3x overload, sched=priority | 750 | 1,500 | 0 | 1,000 | 1,500 | 40 | 1,000 |" in md
    assert "| high class alone | 500 | 1,000 | 0 | 1,000 | - | - | - |" in md
    assert "overload is **1.50×** its p99 alone" in md and "p99 is 9.0× its p99 alone" in md


def test_pool_overhead_markdown():
    doc = {"date": "d", "command": "c", "machine": {}, "builds": {"old": "p", "new": "q"}, "rounds": 3,
           "calls": 10, "warmup": 1, "runs": {"old": [], "new": []},
           "table": [{"metric": "c1 p50 us", "a_median": 10.0, "b_median": 20.0, "ratio": 2.0, "lo": 1.5, "hi": 2.5}]}
    md = pool_overhead.markdown(doc)
    assert md.startswith("# Pool path: old vs new\n")
    assert "| c1 p50 us | 10.0 | 20.0 | 2.000 | [1.500, 2.500] |" in md


def test_lossy_client_small_run_and_its_verdict(tmp_path, capsys):
    out = tmp_path / "sub" / "chaos"
    assert lossy_client.main(["--calls", "128", "--out", str(out)]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    assert (doc["calls"], doc["right"], doc["wrong"], doc["failed"]) == (128, 128, 0, 0)
    assert doc["command"].startswith("python -m splitrpc.bench.suites.lossy_client --calls 128")
    md = out.with_suffix(".md").read_text()
    assert "| 128 | 128 | 0 | 0 |" in md and md in capsys.readouterr().out
    assert lossy_client.verdict(doc) is None
    assert lossy_client.verdict({**doc, "wrong": 1}) == "1 wrong and 0 failed of 128 calls"


def test_scale_small_run(tmp_path, capsys):
    """Every cell measured with no error, the ratios against each axis's base, memory per function stated."""
    out = tmp_path / "f.md"
    assert scale.main(["--functions", "1,3", "--clients", "2,40", "--rounds", "2", "--calls", "300",
                       "--out", str(out)]) == 0
    doc = json.loads((tmp_path / "f.json").read_text())
    rows = {r["cell"]: r for r in doc["table"]}
    assert set(rows) == {"1 functions", "3 functions", "3 functions (one busy)", "2 clients", "40 clients"}
    assert all(r["errors"] == 0 and r["calls/s"] > 0 and r["p99 us"] >= r["p50 us"] > 0 for r in rows.values())
    assert rows["1 functions"]["calls/s ratio"]["ratio"] == 1.0 and rows["2 clients"]["calls/s ratio"]["ratio"] == 1.0
    assert rows["3 functions"]["calls/s ratio"]["lo"] is not None
    assert rows["40 clients"]["p99 us ratio"]["lo"] is not None
    assert doc["kib_per_function"] is not None and "Memory per function" in out.read_text()


def test_aio_client_small_run(tmp_path):
    """The threads, aio (and uvloop, where installed) rows, their ratios over the threads', and the
    10,000 concurrent calls all right with no Busy."""
    out = tmp_path / "a.md"
    assert aio_client.main(["--rounds", "2", "--calls", "320", "--out", str(out)]) == 0
    doc = json.loads((tmp_path / "a.json").read_text())
    rows = {r["system"]: r for r in doc["table"]}
    assert {"threads", "aio"} <= set(rows) and rows["threads"]["calls/s ratio"]["ratio"] == 1.0
    assert all(r["wrong"] == 0 and r["calls/s"] > 0 and r["p99 us"] >= r["p50 us"] > 0 for r in rows.values())
    assert rows["aio"]["calls/s ratio"]["lo"] is not None
    g = doc["gather"]
    assert g["right"] == g["calls"] == 10_000 and g["busy"] == 0 and "Target (issue 35)" in out.read_text()
