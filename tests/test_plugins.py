"""Capabilities as plug-ins (splitrpc/plugins.py): the installed ones are found through entry points, one defined in a test (tests/plugin_app.py, named by SPLITRPC_PLUGINS) adds a subcommand, a serve option, a served function, a callable name, a banner and stop lines without touching the core, and a capability that cannot be loaded is a clear error."""
import pathlib
import re
import signal
import subprocess
import sys
import types

import pytest

from conftest import read_until, splitrpc_cmd
from splitrpc import plugins

HERE = pathlib.Path(__file__).resolve().parent
INSTALLED = ("builtin", "models", "gnn", "colocation", "embedding", "planning", "fleet", "loadgen", "bench")


def _env(run_env, spec="plugin_app:CAPABILITY"):
    env = dict(run_env["env"], PYTHONPATH=str(HERE), SPLITRPC_PLUGINS=spec)
    return {"cwd": run_env["cwd"], "env": env}


def test_the_installed_capabilities_are_found_in_their_order(monkeypatch):
    monkeypatch.delenv(plugins.ENV, raising=False)
    caps = plugins.capabilities()
    assert sorted(c.name for c in caps) == sorted(INSTALLED)
    assert [c.order for c in caps] == sorted(c.order for c in caps)
    assert all(isinstance(c, plugins.Capability) for c in caps)


def test_a_plugin_adds_a_command(run_env):
    p = subprocess.run(splitrpc_cmd("hello", "world"), capture_output=True, text=True, timeout=60, **_env(run_env))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"hello world from {len(INSTALLED) + 1} capabilities"
    p = subprocess.run(splitrpc_cmd("hello", "world"), capture_output=True, text=True, timeout=60, **run_env)
    assert p.returncode == 2 and "invalid choice: 'hello'" in p.stderr  # not there without the plug-in


def test_a_plugin_adds_a_bench_suite_and_keeps_its_former_names(run_env):
    env = _env(run_env)
    p = subprocess.run(splitrpc_cmd("bench", "shout", "--times", "3"), capture_output=True, text=True, timeout=60, **env)
    assert p.returncode == 0 and p.stdout.strip() == "shout suite x3", p.stderr
    p = subprocess.run(splitrpc_cmd("bench", "-h"), capture_output=True, text=True, timeout=60, **env)
    assert p.returncode == 0 and re.search(r"^\s+shout\s+the test plug-in's benchmark suite", p.stdout, re.M), p.stdout
    for old, new, out in ((["holler", "world"], "splitrpc hello", "hello world from"),
                          (["bench-shout", "--times", "2"], "splitrpc bench shout", "shout suite x2")):
        p = subprocess.run(splitrpc_cmd(*old), capture_output=True, text=True, timeout=60, **env)
        assert p.returncode == 0 and p.stdout.startswith(out), p.stderr
        assert f"`splitrpc {old[0]}` is now `{new}`; the old name goes in the next release" in p.stderr


def test_a_plugin_serves_its_function_and_the_core_calls_and_loads_it(run_env, tmp_path):
    env = _env(run_env)
    p = subprocess.Popen(splitrpc_cmd("serve", "--port", "0", "--models", "shout", "--shout-suffix", "!"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **env)
    try:
        lines = "".join(read_until(p, lambda line: line.startswith("ready:")))
        assert "vecadd(1) matmul(2) echo(3) head(4) shout(300)" in lines, lines
        assert "shouting with '!'" in lines
        port = re.search(r" on [\d.]+:(\d+) ", lines).group(1)
        c = subprocess.run(splitrpc_cmd("call", "shout", "--port", port, "--seed", "3"), capture_output=True,
                           text=True, timeout=60, **env)
        assert c.returncode == 0, c.stderr
        assert "reply matches the expected output: True" in c.stdout
        c = subprocess.run(splitrpc_cmd("call", "shout", "--port", port, "--text", "abc"), capture_output=True,
                           text=True, timeout=60, **env)
        assert c.returncode == 0 and "'ABC!'" in c.stdout, c.stdout + c.stderr
        out = tmp_path / "load"
        r = subprocess.run(splitrpc_cmd("load", "--port", port, "--service", "shout", "--calls", "200",
                                        "--concurrency", "2", "--warmup-s", "0", "--no-plots", "--quiet",
                                        "--out", str(out)), capture_output=True, text=True, timeout=120, **env)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        p.send_signal(signal.SIGTERM)
        rest, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    calls = int(re.search(r"^shout: (\d+) calls, closed True$", rest, re.M).group(1))
    assert calls >= 2 + 200  # the two `call`s and the load run's recorded calls


def test_a_plugin_refuses_serve_options_it_cannot_honour(run_env):
    p = subprocess.run(splitrpc_cmd("serve", "--port", "0", "--models", "shout", "--shout-suffix", ""),
                       capture_output=True, text=True, timeout=60, **_env(run_env))
    assert p.returncode == 3 and p.stderr.strip() == "--shout-suffix: empty"


def test_unknown_model_names_every_capabilitys(run_env):
    p = subprocess.run(splitrpc_cmd("serve", "--port", "0", "--models", "nope"), capture_output=True, text=True,
                       timeout=60, **_env(run_env))
    assert p.returncode == 2
    assert "unknown model 'nope'" in p.stderr and "lenet" in p.stderr and "graphsage" in p.stderr \
        and "dlrm" in p.stderr and "shout" in p.stderr, p.stderr


@pytest.mark.parametrize("spec, why", [
    ("plugin_app", "is not module:attr"),
    ("no_such_module:CAPABILITY", "cannot load the capability"),
    ("plugin_app:NOPE", "cannot load the capability"),
    ("plugin_app:FUNC_ID", "is not a splitrpc.plugins.Capability"),
    ("plugin_broken:CAPABILITY", "RuntimeError: this plug-in cannot start"),
    ("splitrpc.services.builtin_plugin:CAPABILITY,plugin_app:CAPABILITY", None),  # the same object twice: fine
])
def test_a_bad_plugin_is_a_clear_error(run_env, spec, why):
    p = subprocess.run(splitrpc_cmd("describe", "127.0.0.1:1", "--timeout", "0.2"), capture_output=True, text=True,
                       timeout=60, **_env(run_env, spec))
    if why is None:
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr  # ran: nothing serves there
    else:
        assert p.returncode == 2 and why in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_two_capabilities_of_one_name_are_refused(monkeypatch):
    monkeypatch.setenv(plugins.ENV, "plugin_app:CAPABILITY,plugin_twin:CAPABILITY")
    monkeypatch.syspath_prepend(str(HERE))
    twin = types.ModuleType("plugin_twin")
    import plugin_app

    twin.CAPABILITY = type("Twin", (plugin_app.Shout,), {})()
    monkeypatch.setitem(sys.modules, "plugin_twin", twin)
    with pytest.raises(plugins.CapabilityError, match="two capabilities are named 'shout'"):
        plugins.capabilities()


def test_serve_processes_forwards_every_kind_of_option():
    """--processes children get each serve option back as the parent parsed it: flags only where
    they differ from their default, --x/--no-x, lists, values that start with "-"."""
    import argparse

    from splitrpc.cli import build_parser
    from splitrpc.commands.serve import _child_argv

    class Options(plugins.Capability):
        name = "options"

        def add_serve_options(self, s):
            s.add_argument("--keep", action="store_false")
            s.add_argument("--mode", action="store_const", const="fast")
            s.add_argument("--warm", action=argparse.BooleanOptionalAction, default=True)
            s.add_argument("--tag", action="append")
            s.add_argument("--pair", nargs=2, type=int)
            s.add_argument("--offset", type=float)

    caps = [c for c in plugins.capabilities() if c.name in ("builtin", "gnn")] + [Options()]
    p = build_parser(caps)
    argv = ["serve", "--processes", "2", "--keep", "--mode", "--no-warm", "--tag", "a", "--tag=-b",
            "--pair", "3", "-4", "--offset", "-2.5", "--gnn-threshold", "-1", "--small", "--models", "graphsage"]
    a = p.parse_args(argv)
    child = p.parse_args(["serve", *_child_argv(a)])
    for dest in ("keep", "mode", "warm", "tag", "pair", "offset", "gnn_threshold", "small", "models", "grace",
                 "gnn_policy", "batch_cost_us"):
        assert getattr(child, dest) == getattr(a, dest), dest
    assert child.keep is False and child.warm is False and child.tag == ["a", "-b"] and child.pair == [3, -4]
    plain = p.parse_args(["serve"])
    assert "--keep" not in _child_argv(plain) and not any(x.startswith(("--warm", "--no-warm")) for x in _child_argv(plain))


def test_dlrm_on_several_processes_refuses_one_rocksdb_path(run_env, tmp_path):
    cfg = tmp_path / "store.json"
    cfg.write_text('{"l3": "%s"}' % (tmp_path / "l3"))
    p = subprocess.run(splitrpc_cmd("serve", "--port", "0", "--processes", "2", "--models", "dlrm", "--small",
                                    "--embedding-store", str(cfg)), capture_output=True, text=True, timeout=60,
                       **run_env)
    assert p.returncode == 2 and "one RocksDB directory" in p.stderr and "Traceback" not in p.stderr, p.stderr
