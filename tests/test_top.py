"""test_top.py: `splitrpc top` against a real server's admin endpoint under load: --once --json's rows checked against the server's stats(), and the live view in a real terminal (tmux) read back from its pane."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import splitrpc
from splitrpc.admin import AdminServer
from splitrpc.cli import main as cli_main
from splitrpc.errors import UnknownFunction
from splitrpc.scrape import admin_url, quantile_upper
from splitrpc.spec import TensorSpec

from conftest import free_udp_port, settled, wait_for

X8 = TensorSpec("x", "float32", (8,))
BAD = 7  # datagrams with a wrong magic: dropped as bad_header


def _server() -> splitrpc.Server:
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")

    @srv.function(7, "double", [X8], [TensorSpec("y", "float32", (8,))], max_batch=8)
    def double(x, y):
        np.multiply(x, 2, out=y)

    @srv.function(8, "blob", raw=True, max_request=100, max_response=200, executor=2)
    def blob(reqs, resps):
        return [0 for _ in reqs]

    return srv


@pytest.fixture
def served(_heap_frozen):
    srv = _server().start()
    with AdminServer(srv, 0) as admin:
        yield srv, f"127.0.0.1:{admin.port}"
    srv.close()


class Load:
    """Calls double back to back from a thread until stopped."""

    def __init__(self, port: int) -> None:
        self.stop = threading.Event()
        self.calls = 0
        self.t = threading.Thread(target=self._run, args=(port,), daemon=True)
        self.t.start()

    def _run(self, port: int) -> None:
        with splitrpc.Client("127.0.0.1", port, timeout=5) as c:
            while not self.stop.is_set():
                c.call(7, np.ones(8, np.float32))
                self.calls += 1

    def end(self) -> None:
        self.stop.set()
        self.t.join(10)


def _traffic(port: int) -> None:
    """50 double calls, 20 blob calls, 3 calls of a function nobody serves, BAD bad datagrams."""
    with splitrpc.Client("127.0.0.1", port, timeout=5) as c:
        for _ in range(50):
            c.call(7, np.ones(8, np.float32))
        for _ in range(20):
            c.call(8, b"abc")
        for _ in range(3):
            with pytest.raises(UnknownFunction):
                c.call(99, b"")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _ in range(BAD):
            s.sendto(b"\x00" * 30, ("127.0.0.1", port))


def _top_json(capsys, *args: str) -> tuple[int, dict]:
    rc = cli_main(["top", *args, "--once", "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_once_json_rows_match_the_servers_stats(served, capsys):
    srv, target = served
    _traffic(srv.port)
    st = settled(srv, lambda s: s["drops"]["bad_header"] == BAD and s["functions"]["blob"] == 20
                 and s["errors"]["UNKNOWN_FUNCTION"] == 3)
    rc, out = _top_json(capsys, target, "--interval", "0.3")
    assert rc == 0
    (v,) = out["servers"]
    assert v["up"] and v["ready"] and v["state"] == "running" and v["interval_s"] >= 0.3
    fns = {f["name"]: f for f in v["functions"]}
    assert set(fns) == {"double", "blob"}
    for name in fns:
        assert fns[name]["calls_total"] == st["functions"][name]
        assert fns[name]["accepted_total"] == st["by_function"][name]["calls"]
        assert fns[name]["calls_per_s"] == 0 and fns[name]["p50_us"] is None  # idle over the interval
    assert v["drops"] == {"bad_header": {"total": BAD, "per_s": 0.0}}
    assert v["errors"]["UNKNOWN_FUNCTION"]["total"] == 3
    assert v["calls"]["total"] == st["calls"] and v["rx_datagrams"]["total"] >= st["rx_datagrams"]
    (ex,) = v["executors"]
    assert (ex["function"], ex["lane"], ex["threads"], ex["load"]) == ("blob", "", 2, 0.0)
    assert v["cpu"]["host_cpus"] == os.cpu_count() and 0 <= v["cpu"]["host"] <= 1


def test_once_json_rates_under_load(served, capsys):
    srv, target = served
    load = Load(srv.port)
    try:
        wait_for(lambda: load.calls > 50)
        before = srv.stats()["functions"]["double"]
        rc, out = _top_json(capsys, target, "--interval", "0.5")
        after = srv.stats()["functions"]["double"]
    finally:
        load.end()
    (v,) = out["servers"]
    d = next(f for f in v["functions"] if f["name"] == "double")
    # the interval's calls were run between the two stats() readings that bracket top's two scrapes
    assert 0 < d["calls_per_s"] * v["interval_s"] <= after - before + 1
    assert before <= d["calls_total"] <= after
    assert d["mean_batch"] >= 1 and d["queue_p50_us"] is not None and d["queue_p99_us"] >= d["queue_p50_us"]
    # a call's server time holds its queue delay: each quantile's bucket is at least the queue's
    assert d["p50_us"] >= d["queue_p50_us"] and d["p99_us"] >= d["queue_p99_us"] and d["p99_us"] >= d["p50_us"]
    assert v["cpu"]["process"] > 0


def test_unreachable_and_bad_targets(capsys):
    port = free_udp_port()  # nobody listens there on TCP either (or the connection is refused)
    rc, out = _top_json(capsys, f"127.0.0.1:{port}", "--interval", "0.05", "--timeout", "1")
    assert rc == 1 and out["servers"][0]["up"] is False and "127.0.0.1" in out["servers"][0]["error"]
    assert cli_main(["top", "nohostport", "--once"]) == 2
    assert "not HOST:ADMIN_PORT" in capsys.readouterr().err
    assert admin_url("::1:9000") == "http://[::1]:9000" and admin_url("http://h:1/metrics") == "http://h:1"


def test_quantile_is_the_bucket_upper_bound():
    b = {1e-6: 50, 2e-6: 90, 4e-6: 99, 8e-6: 100, float("inf"): 100}
    assert quantile_upper(b, 0.5) == 1e-6 and quantile_upper(b, 0.9) == 2e-6 and quantile_upper(b, 0.99) == 4e-6
    assert quantile_upper(b, 1.0) == 8e-6 and quantile_upper({1e-6: 0, float("inf"): 0}, 0.5) is None
    assert quantile_upper({1e-6: 0, float("inf"): 4}, 0.5) == float("inf")


def _pane(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True,
                          check=True).stdout


def _row(pane: str, name: str) -> list[str]:
    lines = [ln.split() for ln in pane.splitlines() if ln.split()[:1] == [name]]
    assert lines, f"no row {name!r} in the pane:\n{pane}"
    return lines[0]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (Debian: apt-get install tmux; .ci/run installs it)")
def test_live_view_in_a_terminal(served, tmp_path):
    srv, target = served
    session = f"srpc-top-{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    cmd = f"{sys.executable} -m splitrpc top {target} --interval 0.4 2>{tmp_path / 'err'}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "40", cmd],
                   check=True, env=env, cwd=str(tmp_path))
    load = Load(srv.port)
    try:
        # under load: the double row shows calls each second
        wait_for(lambda: "double" in _pane(session) and _row(_pane(session), "double")[1] not in ("0", "-"),
                 timeout=20)
        assert float(_row(_pane(session), "double")[1].replace(",", "")) > 0
        load.end()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _ in range(BAD):
                s.sendto(b"\x00" * 30, ("127.0.0.1", srv.port))
        st = settled(srv, lambda s: s["drops"]["bad_header"] == BAD)
        total = f"{st['functions']['double']:,}"
        # idle again: the row's total is stats()'s, its rate 0, and the drops line counts the bad datagrams
        wait_for(lambda: _row(_pane(session), "double")[1:3] == ["0", total], timeout=10)
        pane = _pane(session)
        assert f"bad_header {BAD}" in pane and "running, ready" in pane
        assert _row(pane, "blob")[1:3] == ["0", "0"]
    finally:
        load.end()
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    assert not (tmp_path / "err").read_text().strip()


def _fake_admin(mode: str):
    """An endpoint that misbehaves on 127.0.0.1 (from the outside attack, tests/attacks/wireshark_top_s70):
    "nothttp" answers bytes that are not HTTP, "drip" a body one byte every 0.2 s, "nan" /metrics whose
    counters are NaN, inf and labels splitrpc never writes. Returns (port, close)."""
    m = b"# TYPE splitrpc_rx_datagrams_total counter\nsplitrpc_rx_datagrams_total 5\n"
    nan = m + (b'splitrpc_calls_total NaN\nsplitrpc_drops_total{reason="x"} +Inf\nsplitrpc_executor_threads'
               b'{function="f"} 2\nsplitrpc_function_calls_total{function="f"} 1e308\nsplitrpc_host_cpus NaN\n')
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    done = threading.Event()

    def one(c):
        with c:
            try:
                c.recv(4096)
                if mode == "nothttp":
                    c.sendall(b"SSH-2.0-OpenSSH_9.0\r\n")
                elif mode == "drip":
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                    while not done.wait(0.2):
                        c.sendall(b"#")
                else:
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(nan) + nan)
            except OSError:
                pass

    def loop():
        while not done.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=one, args=(c,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()

    def close():
        done.set()
        srv.close()
    return srv.getsockname()[1], close


def test_hostile_endpoints_are_down_and_never_hold_the_others(served, capsys):
    srv, target = served
    fakes = [_fake_admin(m) for m in ("nothttp", "drip", "nan")]
    try:
        t0 = time.monotonic()
        rc, out = _top_json(capsys, target, *(f"127.0.0.1:{p}" for p, _ in fakes), "--interval", "0.2",
                            "--timeout", "1.5")
        took = time.monotonic() - t0
    finally:
        for _, close in fakes:
            close()
    good, nothttp, drip, nan = out["servers"]
    assert rc == 1 and good["up"] and good["state"] == "running"
    assert not nothttp["up"] and "BadStatusLine" in nothttp["error"]
    assert not drip["up"] and "no whole answer in 1.5 s" in drip["error"]
    # NaN and inf are no counts: left out; a sample without the labels splitrpc writes is skipped
    assert nan["up"] and nan["calls"]["total"] == 0 and nan["drops"] == {} and nan["executors"] == []
    assert took < 2 * (0.2 + 1.5) + 2  # two readings, each bounded by --timeout in all
    for bad in (["--interval", "nan"], ["--interval", "1e308"], ["--timeout", "0"], ["--count", "0"]):
        assert cli_main(["top", target, *bad]) == 2
    assert cli_main(["top", "127.0.0.1:\u0661\u0669\u0663", "--once"]) == 2  # not ASCII digits
    capsys.readouterr()
