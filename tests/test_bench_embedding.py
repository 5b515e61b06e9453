"""bench-embedding (issue 18) end to end on a small setting: every phase runs (store configurations through splitrpc with replies checked, warm-up curves, updates, insertion rates) and the report says what it measured."""
import json

import pytest
from conftest import require_redis_server

pytest.importorskip("torch")
pytest.importorskip("rocksdict")
pytest.importorskip("redis")
require_redis_server()

from splitrpc.bench.suites import embedding  # noqa: E402


def test_bench_embedding_small_run(tmp_path):
    out = tmp_path / "r"
    rc = embedding.main(["--rows", "2000", "--requests", "300", "--calls", "1500", "--concurrency", "64",
                         "--warmup-batches", "4", "--warmup-calls", "1500", "--update-rate", "500", "--insert-vectors", "5000", "--rounds", "2",
                         "--quiet", "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "embedding.json").read_text())
    assert set(doc["configs"]) == set(embedding.CONFIGS)
    for name, r in doc["configs"].items():
        assert r["ok"] == r["calls"] == 1500 and r["p99_ms"] >= r["p50_ms"] > 0, name
    assert doc["configs"]["l3"]["l1_hit_rate"] is None and doc["configs"]["l3"]["l1_fill"] is None  # no L1
    assert 0 < doc["configs"]["l1-5%"]["l1_hit_rate"] <= 1 and 0 < doc["configs"]["l1-5%"]["l1_fill"] <= 1
    assert doc["configs"]["l1-5%"]["defaults"] == 0.0  # synchronous: every miss waited for its true vector
    t05 = doc["configs"]["l1-5%-t0.5"]  # medians of 2 rounds are means: defaults + hits <= every unique key
    assert 0 <= t05["defaults"] <= 1 - t05["l1_hit_rate"] + 1e-9
    assert set(doc["warmup"]) == {"0.0", "0.5", "1.0"} and all(len(w["hit_rate"]) == 4 for w in doc["warmup"].values())
    assert doc["updates"]["with"]["ok"] == 1500 and len(doc["updates"]["rounds"]["with"]) == 2
    assert all(len(v) == 2 for v in doc["config_rounds"].values())
    assert set(doc["insert_mb_per_s"]) == {"hashmap", "redis", "rocksdb"}
    assert len(doc["acceptance"]) == 9  # issue 18's 7, and issue 36's two under updates (with intervals)
    u = doc["updates"]["with"]
    assert u["updates_applied"] > 0 and 0 < u["update_serving_us"] < u["update_us"]  # CPU per update, both sides
    assert doc["updates"]["without"]["update_us"] is None
    md = (out / "embedding.md").read_text()
    assert "## Acceptance (issues 18 and 36)" in md and "| l1-5% |" in md and "CPU per update" in md
    assert "bootstrap 95% interval over 2 alternated runs each" in md


def test_the_configurations_a_run_measures():
    import argparse

    from splitrpc.bench.suites import embedding as suite

    p = argparse.ArgumentParser()
    suite._arguments(p)
    assert suite._config_names(p.parse_args([])) == list(suite.CONFIGS)
    assert suite._config_names(p.parse_args(["--device", "cuda:0"])) == [*suite.CONFIGS, *suite.GPU_CONFIGS]
    a = p.parse_args(["--device", "cuda:1", "--configs", "gpu-l1-5%,l3"])
    assert suite._config_names(a) == ["gpu-l1-5%", "l3"]
    assert suite._config(a, "gpu-l1-5%") == {"l1_fraction": 0.05, "l2": "none", "l1_device": "cuda:1"}
    assert "l1_device" not in suite._config(a, "l3")
    for bad, why in ((["--configs", "l9"], "unknown configuration"), (["--configs", "gpu-whole"], "need --device")):
        with pytest.raises(SystemExit, match=why):
            suite._config_names(p.parse_args(bad))


def test_the_report_of_gpu_rows():
    from splitrpc.bench.suites import embedding as suite

    row = {"calls_per_s": 1000.0, "p50_ms": 1.0, "p99_ms": 2.0, "l1_hit_rate": None, "defaults": 0.0, "l1_fill": None}
    c = {"gpu-whole": row, "gpu-l3": {**row, "calls_per_s": 400.0},
         "gpu-l1-5%": {**row, "calls_per_s": 1300.0, "p99_ms": 2.4, "l1_hit_rate": 0.8},
         "gpu-l1-1%": {**row, "l1_hit_rate": 0.72}}
    doc = {"machine": {"cpu": "x", "cpus": 2}, "command": "c", "date": "d", "seconds": 1.0, "rows": 10,
           "concurrency": 1, "calls": 1, "rounds": 1, "device": "cuda:0", "configs": c}
    doc["acceptance"] = suite.acceptance(doc)
    got = {x["what"]: x["met"] for x in doc["acceptance"]}
    assert got == {"L1 5% (on the GPU, exact) over L3: >= 3x the throughput of L3 alone (MLPs on the GPU)": True,
                   "L1 5% (on the GPU, exact) p99 within 1.3x of the whole tables in GPU memory": True,
                   "GPU L1 hit rate drop from 5% to 1% within 5 points of HPS's 6": True}
    md = suite.markdown(doc)
    assert "Rows gpu-*: L1 (or the whole tables) and the MLPs on cuda:0" in md and "| gpu-l1-5% | 1300 |" in md
