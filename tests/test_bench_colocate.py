"""bench-colocate (issue 17): the real co-location benchmark runs end to end on a small setting: servers per configuration, replies checked against the models, per-service p99 and QoS violations reported."""
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from splitrpc.bench.suites import colocate  # noqa: E402


def test_bench_colocate_small_run(tmp_path):
    out = tmp_path / "r"
    rc = colocate.main(["--configs", "serial,bqt", "--loads", "0.5", "--duration", "1", "--min-calls", "20",
                        "--scale", "0.02", "--quiet", "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "colocate.json").read_text())
    assert [r["config"] for r in doc["results"]] == ["serial", "bqt"]
    for r in doc["results"]:
        assert set(r["services"]) == {"gcn", "sage", "gin"}
        for s in r["services"].values():
            assert s["calls"] >= 20 and s["ok"] + s["errors"] == s["calls"] and 0 <= s["violations"] <= 1
        assert r["peak_reserved"] <= r["budget"]
    assert doc["results"][0]["mean_group_size"] == pytest.approx(1.0)  # serial: one call per group
    assert all(q > 0 for q in doc["qos_s"].values())
    assert "| serial | 0.5 | gcn |" in (out / "colocate.md").read_text()
    with pytest.raises(SystemExit):
        colocate.main(["--configs", "lifo", "--quiet", "--out", str(out)])
