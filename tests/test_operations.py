"""Operations (issue 19): /healthz and /readyz through start, serve, drain and stop; a drain under load loses no call; a second signal stops at once; describe and ping (in-process, from the foreign client, through `splitrpc describe`, `call NAME`, `load --func NAME`); `splitrpc serve MODULE:ATTR` and its errors; /metrics through prometheus_client's parser."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from conftest import read_until, settled
from foreign_client import DRAINING, ForeignClient, RemoteError

import splitrpc
from splitrpc import TensorSpec
from splitrpc import describe as describe_
from splitrpc.admin import AdminServer
from splitrpc.services import register_builtin_services

HERE = os.path.dirname(os.path.abspath(__file__))
X8 = TensorSpec("x", "float32", (8,))


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _user_server(gate: threading.Event | None = None) -> splitrpc.Server:
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")

    @srv.function(7, "double", [X8], [TensorSpec("y", "float32", (8,))], max_batch=8, version="v2", priority=3)
    def double(x, y):
        if gate is not None:
            gate.wait(10)
        np.multiply(x, 2, out=y)

    @srv.function(8, "blob", raw=True, max_request=100, max_response=200, executor=2)
    def blob(reqs, resps):
        return [0 for _ in reqs]

    return srv


def test_health_and_readiness_through_start_serve_drain_stop():
    gate = threading.Event()
    srv = _user_server(gate)
    with AdminServer(srv, 0) as admin:
        assert _get(admin.url("/healthz"))[0] == 503 and _get(admin.url("/readyz"))[0] == 503  # created
        srv.start()
        deadline = time.monotonic() + 5
        while not srv.ready() and time.monotonic() < deadline:
            time.sleep(0.01)
        code, body = _get(admin.url("/readyz"))
        assert code == 200 and json.loads(body) == {"ok": True, "state": "running", "pending": 0}
        assert _get(admin.url("/healthz"))[0] == 200
        with splitrpc.Client("127.0.0.1", srv.port, timeout=5) as c:
            assert c.ping()["ready"] is True
            fut = c.call_async(7, np.ones(8, np.float32))  # held by the gate: pending during the drain
            while srv.pending() == 0:
                time.sleep(0.005)
            stopper = threading.Thread(target=lambda: srv.stop(grace=10))
            stopper.start()
            while srv.state != "draining":
                time.sleep(0.005)
            code, body = _get(admin.url("/readyz"))
            assert code == 503 and json.loads(body)["state"] == "draining" and json.loads(body)["pending"] == 1
            assert _get(admin.url("/healthz"))[0] == 200  # alive while draining
            with pytest.raises(splitrpc.Draining):
                c.ping()
            with pytest.raises(splitrpc.Draining):
                c.call(7, np.ones(8, np.float32))
            # the engine counts an ERROR once it is sent: the client may read it first
            per = settled(srv, lambda s: s["by_function"]["double"]["errors"]["DRAINING"] >= 1)["by_function"]
            assert per["double"]["errors"]["DRAINING"] == 1 and per["blob"]["errors"]["DRAINING"] == 0
            assert per["double"]["calls"] == 1  # the held call; the refused one was never accepted
            import prometheus_client.parser as pp

            samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                       for f in pp.text_string_to_metric_families(_get(admin.url("/metrics"))[1]) for s in f.samples}
            assert samples[("splitrpc_function_errors_total", (("code", "DRAINING"), ("function", "double")))] == 1
            assert samples[("splitrpc_errors_total", (("code", "DRAINING"),))] == 2  # the ping's too
            gate.set()
            assert np.array_equal(np.frombuffer(fut.result(), np.float32), np.full(8, 2, np.float32))
            stopper.join(10)
        assert not stopper.is_alive()
        assert _get(admin.url("/healthz"))[0] == 503 and _get(admin.url("/readyz"))[0] == 503  # stopped
        assert _get(admin.url("/other"))[0] == 404
    srv.close()


def test_stop_with_grace_reports_what_it_could_not_answer():
    gate = threading.Event()
    srv = _user_server(gate)
    srv.start()
    with splitrpc.Client("127.0.0.1", srv.port, timeout=5) as c:
        futs = [c.call_async(7, np.ones(8, np.float32)) for _ in range(3)]
        while srv.pending() < 3:
            time.sleep(0.005)
        t0 = time.monotonic()
        threading.Timer(1.0, gate.set).start()  # after the grace: the stop waits for the worker, not for them
        left = srv.stop(grace=0.2)
        assert 0.2 <= time.monotonic() - t0 and left >= 1
        for f in futs:
            f.cancel()
    srv.close()


def test_a_drained_server_lingers_answering_draining_until_the_calls_stop():
    """stop(grace=, linger=): with nothing pending the port stays open; calls that keep coming
    get Draining (not silence, not Unavailable) and each one restarts the linger; once none has
    come for `linger` seconds the server stops."""
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    register_builtin_services(srv)
    srv.start()
    with pytest.raises(ValueError, match="linger"):
        srv.stop(grace=1.0, linger=-1)
    left, stopped_at = [], []

    def stopper():
        left.append(srv.stop(grace=10.0, linger=0.3))
        stopped_at.append(time.monotonic())

    th = threading.Thread(target=stopper)
    with splitrpc.Client("127.0.0.1", srv.port, timeout=2) as c:
        th.start()
        while srv.state != "draining":
            time.sleep(0.001)
        t0 = time.monotonic()
        seen = []
        for _ in range(8):  # 0.8 s of calls, longer than the linger: each one keeps the port open
            try:
                c.call(1, np.ones(256, np.float32))  # vecadd's 1024 bytes: a call that slipped past the drain is "ok"
                seen.append("ok")
            except splitrpc.Draining:
                seen.append("draining")
            time.sleep(0.1)
        last = time.monotonic()
        th.join(5)
    assert seen == ["draining"] * 8 and left == [0], (seen, left)
    assert stopped_at[0] - t0 > 0.8 and stopped_at[0] - last < 1.5
    srv.close()


def test_stop_with_grace_from_a_callback_is_refused():
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    seen = []

    @srv.function(5, "stopper", [X8], [TensorSpec("y", "float32", (8,))])
    def stopper(x, y):
        try:
            srv.stop(grace=5)
        except splitrpc.SplitRPCError as e:
            seen.append(str(e))
        y[:] = x

    srv.start()
    try:
        with splitrpc.Client("127.0.0.1", srv.port, timeout=5) as c:
            c.call(5, np.ones(8, np.float32))  # answered at once: no wait for itself
        assert seen and "drain()" in seen[0]
    finally:
        srv.close()


def test_reserved_ids_are_refused():
    srv = splitrpc.Server("127.0.0.1", 0)
    with pytest.raises(ValueError, match="reserved"):
        srv.add_function(lambda r, w: [0], describe_.PING_ID, "mine", raw=True)
    with pytest.raises(ValueError, match="reserved"):
        srv.add_function(lambda r, w: [0], describe_.RESERVED_MIN, "mine", raw=True)
    with pytest.raises(ValueError, match="version"):
        srv.add_function(lambda r, w: [0], 5, "mine", raw=True, version=3)
    srv.close()


def test_describe_lists_exactly_the_registered_functions_and_round_trips_their_specs(make_server):
    srv = make_server(register_builtin_services)
    user = _user_server()
    user.start()
    try:
        for s in (srv, user):
            with splitrpc.Client("127.0.0.1", s.port, timeout=5) as c:
                d = c.describe()
            assert [f.func_id for f in d.functions] == sorted(f.func_id for f in s.functions())
            assert set(d.functions) == set(s.functions())  # every field, specs included, round-trips
            assert d.max_message == s.max_message and set(d.protocols) == {1, 2, 3} and d.software.startswith("splitrpc")
        f = d.by_name("double")
        assert (f.func_id, f.version, f.priority, f.max_batch, f.raw) == (7, "v2", 3, 8, False)
        assert f.inputs == (X8,) and f.outputs == (TensorSpec("y", "float32", (8,)),) and f.request_bytes == 32
        b = d.by_name("blob")
        assert (b.raw, b.max_request, b.max_response, b.executor, b.inputs) == (True, 100, 200, "pool:2", ())
    finally:
        user.close()


def test_describe_and_ping_from_the_documentation_alone():
    """tests/foreign_client.py (stdlib only) reads Amendment 1's layouts in both header versions."""
    srv = _user_server()
    srv.start()
    try:
        for version in (1, 2):
            fc = ForeignClient("127.0.0.1", srv.port, version=version)
            try:
                doc = fc.describe()
                assert [f["id"] for f in doc["functions"]] == [7, 8]
                assert doc["functions"][0]["inputs"] == [{"name": "x", "dtype": "<f4", "shape": [8]}]
                p = fc.ping()
                assert p["ready"] is True and p["functions"] == 2 and p["state"] == "running"
            finally:
                fc.close()
    finally:
        srv.close()


def test_server_functions_refuse_malformed_requests():
    srv = _user_server()
    srv.start()
    try:
        with splitrpc.Client("127.0.0.1", srv.port, timeout=5) as c:
            for fid, req in ((describe_.PING_ID, b""), (describe_.PING_ID, b"SRPC-PINGX"),
                             (describe_.DESCRIBE_ID, b"SRPC-PING"), (describe_.DESCRIBE_ID, bytes(64))):
                with pytest.raises(splitrpc.BadRequest):
                    c.call(fid, req)
            with pytest.raises(splitrpc.TooLarge):
                c.call(describe_.DESCRIBE_ID, bytes(65))
            for fid in range(describe_.RESERVED_MIN, describe_.RESERVED_MIN + 3):  # reserved, not defined
                with pytest.raises(splitrpc.UnknownFunction):
                    c.call(fid, b"SRPC-PING")
            assert c.ping()["ready"] is True  # and the server serves on
    finally:
        srv.close()


def test_a_reply_that_is_not_a_description_is_an_error():
    """A server older than Amendment 1 with a function of its own at 0xFFFE: never a description."""
    tensor = '{"id":1,"name":"f","kind":"tensor","outputs":[],"inputs":[{"name":"x","dtype":"<f4","shape":[%s]}]}'
    for reply in (b"SRPC-DESCRIBE", b'{"other":1}', b'{"describe":2,"functions":[]}', b'{"describe":1',
                  b'{"describe":1,"functions":[{"id":1}]}', b'{"describe":1,"functions":5}',
                  b'{"describe":1,"protocols":5}', b'{"describe":1,"max_message":"x"}',
                  b'{"describe":1,"functions":[7]}', b'{"describe":1,"max_message":' + b"9" * 5000 + b"}",
                  b'{"describe":1,"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                  ('{"describe":1,"functions":[%s]}' % (tensor % "Infinity")).encode(),
                  ('{"describe":1,"functions":[%s]}' % (tensor % "-3")).encode(), b'{"describe":NaN}'):
        with pytest.raises(describe_.NotDescribed):
            describe_.decode_description(reply)
    big = describe_.decode_description(('{"describe":1,"max_message":1000,"functions":[%s]}'
                                        % (tensor % "1000000000")).encode())
    with pytest.raises(ValueError, match="over the server's largest message"):
        big.functions[0].example(np.random.default_rng(0), max_bytes=big.max_message)  # no 4 GB allocation
    with pytest.raises(describe_.NotDescribed):
        describe_.decode_ping(b'{"describe":1}')


# ------------------------------------------------------------------ the command line


def _serve(target: str | None, *args, env=None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "splitrpc", "serve", *([target] if target else []), "--port", "0", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE, env=env)


def _wait_ready(p: subprocess.Popen, json_lines: bool = False) -> dict:
    """Reads the start lines until ready: {"port", "admin" (url or None), "lines"}."""
    if json_lines:
        lines = read_until(p, lambda line: json.loads(line)["event"] == "ready")
        events = {e["event"]: e for e in map(json.loads, lines)}
        return {"port": events["start"]["port"], "admin": events["ready"]["admin"], "lines": lines}
    lines = read_until(p, lambda line: line.startswith("ready:"))
    port, admin = re.search(r" on [\d.]+:(\d+) ", "".join(lines)), re.search(r"admin: (http://\S+)/metrics", "".join(lines))
    return {"port": int(port.group(1)) if port else None, "admin": admin.group(1) if admin else None, "lines": lines}


@pytest.fixture()
def served_app(run_env):
    p = _serve("ops_app:server", "--admin-port", "0", "--grace", "20", "--log-format", "json", env=run_env["env"])
    try:
        info = _wait_ready(p, json_lines=True)
        yield p, info
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_serve_module_attr_drain_under_load_loses_no_call(served_app):
    p, info = served_app
    port, admin = info["port"], info["admin"]
    assert _get(admin + "/readyz")[0] == 200
    import prometheus_client.parser as pp

    fams = {f.name: f for f in pp.text_string_to_metric_families(_get(admin + "/metrics")[1])}
    assert "splitrpc_calls" in fams and "process_cpu_seconds" in fams  # ours, and the process collector
    with splitrpc.Client("127.0.0.1", port, timeout=5) as c:
        d = c.describe()
    assert [f.name for f in d.functions] == ["scale", "upper", "stuck"] and d.by_name("scale").version == "2026-11"
    outcomes = {"ok": 0, "draining": 0, "other": []}
    lock = threading.Lock()
    x = np.arange(8, dtype=np.float32).tobytes() + np.array([3, 4], np.int64).tobytes()
    expect = (np.arange(8, dtype=np.float32) * 2).tobytes() + np.array([7], np.int64).tobytes()
    started = threading.Barrier(9)

    def client_loop():
        with splitrpc.Client("127.0.0.1", port, timeout=10) as c:
            started.wait()
            while True:
                try:
                    r = c.call(200, x)
                except splitrpc.Draining:
                    with lock:
                        outcomes["draining"] += 1
                    return
                except Exception as e:  # noqa: BLE001 - anything else is a lost or wrong call
                    with lock:
                        outcomes["other"].append(repr(e))
                    return
                with lock:
                    if r == expect:
                        outcomes["ok"] += 1
                    else:
                        outcomes["other"].append("wrong reply")

    threads = [threading.Thread(target=client_loop) for _ in range(8)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.5)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(30)
    assert p.wait(20) == 0 and time.monotonic() - t0 < 20  # within the grace period
    assert outcomes["other"] == [] and outcomes["draining"] == 8 and outcomes["ok"] > 50, outcomes
    events = [json.loads(line) for line in info["lines"] + p.stdout.read().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[:2] == ["start", "ready"] and "drain" in kinds and kinds[-1] == "stop"
    assert events[-1]["unanswered"] == 0 and events[0]["functions"][0] == {"id": 200, "name": "scale"}


@pytest.mark.parametrize("run", range(3))
def test_a_drain_answers_an_open_burst_of_futures_right_or_draining(run_env, run):
    """Issue 33, item 1: one client with 2,000 futures (its window holds most back) and SIGTERM
    10 ms later. After the last received call is answered, the server lingers answering
    DRAINING; the client fails the calls it still holds with Draining at the first such answer.
    Every call is answered right or Draining: no timeout, no Unavailable; exit 0 within grace."""
    p = _serve("ops_app:server", "--grace", "20", env=run_env["env"])
    try:
        port = _wait_ready(p)["port"]
        x = np.arange(8, dtype=np.float32).tobytes() + np.array([3, 4], np.int64).tobytes()
        expect = (np.arange(8, dtype=np.float32) * 2).tobytes() + np.array([7], np.int64).tobytes()
        with splitrpc.Client("127.0.0.1", port, timeout=15) as c:
            futs = [c.call_async(200, x) for _ in range(2000)]
            time.sleep(0.01)
            t0 = time.monotonic()
            p.send_signal(signal.SIGTERM)
            outcomes: dict = {}
            for f in futs:
                try:
                    k = "ok" if f.result() == expect else "wrong"
                except splitrpc.Draining:
                    k = "draining"
                except Exception as e:  # noqa: BLE001 - a lost or failed call
                    k = type(e).__name__
                outcomes[k] = outcomes.get(k, 0) + 1
            st = c.stats()
        assert set(outcomes) <= {"ok", "draining"} and sum(outcomes.values()) == 2000, outcomes
        assert p.wait(20) == 0 and time.monotonic() - t0 < 20
        assert st["timeouts"] == 0 and st["unavailable"] == 0, st
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_a_second_signal_stops_at_once(run_env):
    p = _serve("ops_app:server", "--grace", "60", env=run_env["env"])
    try:
        info = _wait_ready(p)
        with splitrpc.Client("127.0.0.1", info["port"], timeout=30) as c:
            c.call_async(202, np.zeros(1, np.float32))  # "stuck" holds the worker for 60 s
            time.sleep(0.3)
            p.send_signal(signal.SIGTERM)
            time.sleep(1.0)
            assert p.poll() is None  # draining: waiting for the stuck call, up to 60 s
            t0 = time.monotonic()
            p.send_signal(signal.SIGTERM)
            p.wait(10)
            assert time.monotonic() - t0 < 5
        out = p.stdout.read()
        assert "second SIGTERM: stopping now" in out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.parametrize("target,why", [
    ("ops_app", "expected MODULE:ATTR"),
    ("no_such_module_xyz:server", "no module named 'no_such_module_xyz'"),
    ("ops_app:missing", "module 'ops_app' has no attribute 'missing'"),
    ("ops_app:not_a_server", "is a int, not a splitrpc.Server or a function"),
])
def test_a_bad_module_attr_is_one_clear_line_and_exit_code_2(run_env, target, why):
    p = _serve(target, env=run_env["env"])
    out, err = p.communicate(timeout=60)
    assert p.returncode == 2 and why in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("attr", ["make_server", "setup"])
def test_serve_takes_a_factory_or_a_setup_function(run_env, attr):
    p = _serve(f"ops_app:{attr}", env=run_env["env"])
    try:
        info = _wait_ready(p)
        with splitrpc.Client("127.0.0.1", info["port"], timeout=5) as c:
            assert c.describe().by_name("scale").func_id == 200
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(20) == 0


def test_describe_call_and_load_by_name(served_app, tmp_path, run_env):
    _, info = served_app
    port = str(info["port"])
    cli = [sys.executable, "-m", "splitrpc"]
    r = subprocess.run(cli + ["describe", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60, **run_env)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^200\s+scale\s+2026-11\s+x:float32\[8\], k:int64\[2\]\s+y:float32\[8\], n:int64\[1\]", r.stdout,
                     re.M), r.stdout
    assert re.search(r"^201\s+upper\s+-\s+raw <= 4096 B", r.stdout, re.M)
    r = subprocess.run(cli + ["call", "scale", "--port", port], capture_output=True, text=True, timeout=60, **run_env)
    assert r.returncode == 0 and "scale (function 200): 48 B request -> 40 B reply" in r.stdout, r.stdout + r.stderr
    assert re.search(r"^n int64\[1\]: \[\d+\]", r.stdout, re.M)
    r = subprocess.run(cli + ["call", "upper", "--port", port], capture_output=True, text=True, timeout=60, **run_env)
    assert r.returncode == 2 and "raw function" in r.stderr
    r = subprocess.run(cli + ["call", "upper", "--port", port, "--text", "abc"], capture_output=True, text=True,
                       timeout=60, **run_env)
    assert r.returncode == 0 and "b'ABC'" in r.stdout
    r = subprocess.run(cli + ["call", "nope", "--port", port], capture_output=True, text=True, timeout=60, **run_env)
    assert r.returncode == 2 and "no function named 'nope'" in r.stderr
    out = tmp_path / "load"
    r = subprocess.run(cli + ["load", "--port", port, "--func", "scale", "--calls", "300", "--concurrency", "4",
                              "--warmup-s", "0", "--no-plots", "--quiet", "--out", str(out)],
                       capture_output=True, text=True, timeout=120, **run_env)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "report.json").read_text())
    run = doc["runs"][0]
    assert doc["target"]["func_id"] == 200 and doc["target"]["request_set"]["requests"] == 64
    assert run["ok"] == 300 and run["errors"] == 0, run


def test_serve_module_attr_in_several_processes(run_env):
    """--processes N imports the user's module in each process; every one drains on SIGTERM."""
    p = _serve("ops_app:server", "--processes", "2", "--grace", "10", env=run_env["env"])
    try:
        line = read_until(p, lambda line: "2 processes serving on" in line)[-1]
        port = int(re.search(r"serving on [\d.]+:(\d+)", line).group(1))
        with splitrpc.Client("127.0.0.1", port, timeout=5) as c:
            assert [f.name for f in c.describe().functions] == ["scale", "upper", "stuck"]
            assert c.call(201, b"two") == b"TWO"
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0
        out = p.stdout.read()
        assert out.count("drain") >= 2 and "together: " in out, out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
