"""test_bench.py: `splitrpc bench` end to end on a tiny configuration: every system it was
asked for appears in the table (measured, or reported unavailable), targets and plots."""
import importlib.util
import json

from splitrpc.bench.helpers import systems
from splitrpc.cli import main


def test_bench_small_run(tmp_path, capsys):
    out = tmp_path / "b"
    rc = main(["bench", "--systems", "raw-udp-busy,splitrpc-poll,splitrpc-block,splitrpc-local,grpc-asyncio",
               "--services", "vecadd,echo", "--concurrency", "1,4", "--calls", "300", "--rounds", "1",
               "--rates", "300", "--sweep-s", "0.3", "--out", str(out)])
    assert rc == 0, capsys.readouterr()
    doc = json.loads((out / "sidebyside.json").read_text())
    rows = {(r["system"], r["service"], r["concurrency"]): r for r in doc["table"]}
    for system in ("raw-udp-busy", "splitrpc-poll", "splitrpc-block"):
        for svc in ("vecadd", "echo"):
            for conc in (1, 4):
                r = rows[(system, svc, conc)]
                assert r["status"] == "ok" and r["p50_us"] > 0 and r["p99_us"] >= r["p50_us"], r
                assert r["throughput_rps"] > 0 and r["errors"] == 0 and r["invalid"] == 0
    assert rows[("splitrpc-local", "vecadd", 1)]["p50_us"] > 0
    grpc = [r for r in doc["table"] if r["system"] == "grpc-asyncio"]
    if importlib.util.find_spec("grpc") is None:  # not installed: reported, not dropped
        assert grpc and all(r["status"].startswith("unavailable: ") and "grpc" in r["status"] for r in grpc)
    else:
        assert {r["concurrency"] for r in grpc} == {1, 4} and all(r["status"] == "ok" for r in grpc)
    names = [t["target"] for t in doc["targets"]]
    assert len(names) == 4 and doc["targets"][0]["value"] > 0
    sweep = [r for r in doc["open_loop"] if r["system"] == "splitrpc-poll"]
    assert len(sweep) == 1 and sweep[0]["ok"] > 0
    md = (out / "sidebyside.md").read_text()
    assert "| vecadd | splitrpc-poll | 1 |" in md and "## Targets" in md
    for png in doc["plots"]:
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert "throughput_vs_concurrency.png" in doc["plots"]


def test_bench_reports_a_peer_that_cannot_start(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(systems, "peer_available", lambda system: (False, "pyzmq not installed (test)"))
    rc = main(["bench", "--systems", "zmq", "--services", "vecadd", "--rounds", "1", "--out", str(tmp_path)])
    assert rc == 0
    doc = json.loads((tmp_path / "sidebyside.json").read_text())
    assert doc["table"][0]["status"] == "unavailable: pyzmq not installed (test)"
    assert "unavailable: pyzmq not installed (test)" in (tmp_path / "sidebyside.md").read_text()


def test_bench_rejects_unknown_names(tmp_path, capsys):
    assert main(["bench", "--systems", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown" in capsys.readouterr().err
