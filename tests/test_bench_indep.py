"""test_bench_indep.py: `splitrpc bench indep`, the independent client's suite: the client is installed with the package and checks every reply; one short run of the minimal C server and a native splitrpc server writes a report whose targets are computed; bad arguments exit 2."""
import argparse
import json
import subprocess

from splitrpc.bench.helpers import indep_client
from splitrpc.bench.suites import indep


def _args(tmp_path, **kw) -> argparse.Namespace:
    a = dict(systems=["c-min-busy", "native-poll"], cells=["block1"], rounds=2, calls=400, base=None, client=None,
             out=str(tmp_path / "r"), command="test")
    a.update(kw)
    return argparse.Namespace(**a)


def test_the_client_is_installed_and_refuses_bad_usage():
    path = indep_client.client_path()
    r = subprocess.run([path, "--port", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr
    r = subprocess.run([path, "--port", "9", "--mode", "sideways"], capture_output=True, text=True)
    assert r.returncode == 2


def test_a_short_run_reports_both_servers_and_the_target(tmp_path):
    assert indep.cmd_indep(_args(tmp_path)) == 0
    doc = json.loads((tmp_path / "r" / "indep.json").read_text())
    for s in ("c-min-busy", "native-poll"):
        assert len(doc["runs"][s]) == 2 and all("failed" not in r for r in doc["runs"][s]), doc["runs"][s]
        m = doc["medians"][s]["block1"]
        assert m["calls_per_s"] > 0 and 0 < m["p50_us"] <= m["p99_us"] and m["server_cpu_us"] >= 0
        assert all(r["block1"]["errors"] == 0 and r["block1"]["lost"] == 0 for r in doc["runs"][s])
    assert "| native-poll | block1 |" in (tmp_path / "r" / "indep.md").read_text()


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert indep.cmd_indep(_args(tmp_path, systems=["grpc"])) == 2
    assert indep.cmd_indep(_args(tmp_path, rounds=0)) == 2
    assert capsys.readouterr().err.startswith("splitrpc bench indep: ")
    assert not (tmp_path / "r").exists()
