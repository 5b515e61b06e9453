"""The `python -m splitrpc` command line: demo, serve, call, and stopping the server with a signal."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import free_udp_port, splitrpc_cmd  # run_env: a conftest fixture


def test_the_installed_package_is_the_one_run(run_env):
    out = subprocess.run([sys.executable, "-c", "import splitrpc, splitrpc._native as n; print(splitrpc.__file__)"],
                         capture_output=True, text=True, timeout=60, **run_env)
    assert out.returncode == 0, out.stderr
    source_pkg = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "splitrpc") + os.sep
    assert not out.stdout.strip().startswith(source_pkg)


def test_demo(run_env):
    p = subprocess.run(splitrpc_cmd("demo", "--calls", "200"), capture_output=True, text=True, timeout=120, **run_env)
    assert p.returncode == 0, p.stdout + p.stderr
    for name in ("vecadd", "matmul", "echo", "head"):
        assert name in p.stdout
    assert "p50" in p.stdout and "p99" in p.stdout
    assert "WRONG REPLY" not in p.stderr
    assert "errors 0" in next(line for line in p.stdout.splitlines() if line.startswith("server:"))


@pytest.fixture
def served(run_env):
    """A `splitrpc serve` subprocess on a free port: (Popen, port). Killed if still running at the end."""
    port = free_udp_port()
    proc = subprocess.Popen(splitrpc_cmd("serve", "--port", str(port), "--wait", "block"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **run_env)
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def call(run_env, port, *args, timeout=60):
    return subprocess.run(splitrpc_cmd("call", *args, "--port", str(port), "--timeout", "1"),
                          capture_output=True, text=True, timeout=timeout, **run_env)


def wait_serving(run_env, proc, port, deadline_s=10.0):
    end = time.monotonic() + deadline_s
    while True:
        p = call(run_env, port, "vecadd")
        if p.returncode == 0 or time.monotonic() > end or proc.poll() is not None:
            return p
        time.sleep(0.2)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_call_and_stop(run_env, served, sig):
    proc, port = served
    p = wait_serving(run_env, proc, port)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "reply matches the expected output: True" in p.stdout

    e = call(run_env, port, "echo", "--text", "hello splitrpc")
    assert e.returncode == 0, e.stderr
    assert "'hello splitrpc'" in e.stdout  # a UTF-8 reply is printed as text

    u = call(run_env, port, "99")
    assert u.returncode == 1
    assert "UNKNOWN_FUNCTION" in u.stderr

    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`splitrpc serve` did not exit within 10 s of {sig.name}")
    assert proc.returncode == 0, err
    assert f":{port}" in out
    m = re.search(r"stopped: (\d+) calls", out)
    assert m, out
    assert int(m.group(1)) >= 2  # vecadd (at least once) and echo; 99 was no call


def test_call_unknown_name_is_a_usage_error(run_env):
    p = call(run_env, free_udp_port(), "nosuchfunction")
    assert p.returncode == 2
    assert "unknown function" in p.stderr


def test_call_without_server_fails(run_env):
    p = call(run_env, free_udp_port(), "vecadd")
    assert p.returncode == 1
    assert "error" in p.stderr.lower()


def test_the_help_fits_a_screen_and_groups_the_benchmarks(monkeypatch, capsys):
    """`splitrpc --help` at 80 columns: at most 40 lines, no `bench-*` command (the suites are
    under `splitrpc bench`, each capability's tools under its name)."""
    from splitrpc.cli import build_parser

    monkeypatch.setenv("COLUMNS", "80")
    text = build_parser().format_help()
    assert len(text.splitlines()) <= 40, text
    assert "bench-" not in text and not re.search(r"^\s+(calibrate|tune|provision)\s", text, re.M), text
    for group in ("bench", "gnn", "plan"):
        assert re.search(rf"^\s+{group}\s", text, re.M), text


def test_every_former_name_runs_a_command_there_is(monkeypatch, capsys):
    """Each capability's renamed(): the new words parse (their -h exits 0), and the rewrite
    keeps the arguments (after `splitrpc -v` too); `bench` alone or with a suite stays the group
    (alone with a line saying where the old run went)."""
    from splitrpc.cli import build_parser, former_names, renamed
    from splitrpc.plugins import capabilities

    monkeypatch.delenv("SPLITRPC_PLUGINS", raising=False)
    caps = capabilities()
    parser = build_parser(caps)
    commands = next(a.choices for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    olds = former_names(caps, commands)
    assert {"bench-indep", "bench-gnn", "bench-colocate-sim", "calibrate", "tune", "provision", "bench"} <= set(olds)
    for old, new in olds.items():
        with pytest.raises(SystemExit) as e:
            parser.parse_args([*new, "-h"])
        assert e.value.code == 0, (old, new)
        assert renamed([old, "--x", "1"], olds) == [*new, "--x", "1"]
        assert renamed(["-v", old, "--x"], olds) == ["-v", *new, "--x"]
        assert f"`splitrpc {old}` is now `splitrpc {' '.join(new)}`" in capsys.readouterr().err
    for args in (["bench", "gnn", "--small"], ["bench", "-h"], ["serve", "--port", "1"], ["-v"], []):
        assert renamed(args, olds) == args
    assert capsys.readouterr().err == ""
    assert renamed(["bench"], olds) == ["bench"]
    assert "what `splitrpc bench` ran is now `splitrpc bench sidebyside`" in capsys.readouterr().err


def test_former_names_that_clash_are_refused_and_a_live_command_wins():
    from splitrpc.cli import former_names
    from splitrpc.plugins import Capability, CapabilityError

    class A(Capability):
        name = "a"

        def renamed(self):
            return {"old": ("x", "old"), "serve": ("x", "serve"), "grp": ("grp", "run")}

    class B(Capability):
        name = "b"

        def renamed(self):
            return {"old": ("y", "old")}
    assert former_names([A()], ["serve", "grp"]) == {"old": ("x", "old"), "grp": ("grp", "run")}  # serve stays
    with pytest.raises(CapabilityError, match="'old'"):
        former_names([A(), B()])
