"""The installed C client (issue 19): `splitrpc --cflags --libs` (and python -m splitrpc.config, and pkg-config through the installed .pc file) give the flags; examples/c_client.c built with them calls vecadd and echo (1 MiB) on a live server through the installed library."""
import os
import shutil
import subprocess
import sys

import pytest

from splitrpc import config
from splitrpc.services import register_builtin_services

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "c_client.c")
CC = shutil.which("cc") or shutil.which("gcc")
if CC is None:
    pytest.fail("a C compiler is needed (Debian: apt-get install gcc)")


def _flags(run_env, *opts) -> list[str]:
    r = subprocess.run([sys.executable, "-m", "splitrpc", *opts], capture_output=True, text=True, timeout=60,
                       **run_env)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_config_names_the_installed_library(run_env):
    flags = _flags(run_env, "--cflags", "--libs")
    assert flags == config.cflags() + config.libs()
    assert os.path.exists(os.path.join(config.INCLUDEDIR, "splitrpc_client.h"))
    assert os.path.exists(os.path.join(config.INCLUDEDIR, "splitrpc_core.h"))
    r = subprocess.run([sys.executable, "-m", "splitrpc.config", "--libdir"], capture_output=True, text=True,
                       timeout=60, **run_env)
    assert r.returncode == 0 and r.stdout.strip() == config.LIBDIR
    r = subprocess.run([sys.executable, "-m", "splitrpc.config", "--bogus"], capture_output=True, text=True,
                       timeout=60, **run_env)
    assert r.returncode == 2 and "usage" in r.stderr
    exported = subprocess.run(["nm", "-D", "--defined-only", os.path.join(config.LIBDIR, "libsplitrpc_client.so")],
                              capture_output=True, text=True).stdout.split()
    if exported:  # binutils present: only the srpc_ API leaves the library
        names = [w for w in exported if not (len(w) == 1 or w.startswith("0"))]
        assert "srpc_client_call" in names and all(n.startswith("srpc_") or n.startswith("SPLITRPC") for n in names), \
            [n for n in names if not n.startswith("srpc_")][:10]


def _build(tmp_path, flags: list[str]) -> str:
    exe = str(tmp_path / "c_client")
    r = subprocess.run([CC, "-std=c11", "-Wall", "-Wextra", "-Werror", EXAMPLE, *flags, "-o", exe],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return exe


def test_example_client_calls_vecadd_and_echo(make_server, run_env, tmp_path):
    srv = make_server(register_builtin_services)
    exe = _build(tmp_path, _flags(run_env, "--cflags", "--libs"))
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}  # found by its rpath alone
    r = subprocess.run([exe, "127.0.0.1", str(srv.port)], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "vecadd: 1024 B reply, input + 1: ok" in r.stdout
    assert "echo: 1 MiB back, byte for byte: ok" in r.stdout and "async: 9 calls, 0 wrong" in r.stdout
    assert srv.stats()["functions"]["echo"] == 1 and srv.stats()["functions"]["vecadd"] == 9


def test_example_fails_loudly_without_a_server(run_env, tmp_path):
    exe = _build(tmp_path, _flags(run_env, "--cflags", "--libs"))
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # a port nobody serves
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run([exe, "127.0.0.1", str(port)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "vecadd call" in r.stderr


@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="pkg-config is not installed")
def test_pkg_config_file(make_server, tmp_path):
    env = {**os.environ, "PKG_CONFIG_PATH": config.PKGCONFIGDIR}
    r = subprocess.run(["pkg-config", "--cflags", "--libs", "splitrpc_client"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    srv = make_server(register_builtin_services)
    exe = _build(tmp_path, r.stdout.split())
    r = subprocess.run([exe, "127.0.0.1", str(srv.port)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
