"""Which libsodium the C core loads (native/src/core/sodium.c, splitrpc/_native/sodium_pick.py): the one $SPLITRPC_LIBSODIUM names, else a newer one than the system's from PyNaCl, else the system's; one that does not load is passed over; and calls between processes on different libsodium builds interoperate."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from splitrpc._native import auth as _auth
from splitrpc._native import sodium_pick

ENV = "SPLITRPC_LIBSODIUM"

PROBE = """
import json, os, splitrpc
from splitrpc._native import auth
print(json.dumps({"env": os.environ.get("SPLITRPC_LIBSODIUM"), "library": auth.library()}))
"""


def _probe(env_value):
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if env_value is not None:
        env[ENV] = env_value
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd="/", timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def _system_library():
    return _probe("libsodium.so.23")["library"]


@pytest.fixture(scope="module")
def have_sodium():
    if not _auth.available():
        pytest.skip("libsodium's shared library is not installed")


def test_the_variable_names_the_library(have_sodium):
    if _system_library() != "libsodium.so.23":
        pytest.skip("this system has no libsodium.so.23")
    assert _probe("libsodium.so.23") == {"env": "libsodium.so.23", "library": "libsodium.so.23"}


def test_a_library_that_does_not_load_is_passed_over(have_sodium, tmp_path):
    bogus = tmp_path / "libnot-sodium.so"
    bogus.write_bytes(b"not a shared object")
    got = _probe(str(bogus))
    assert got["env"] == str(bogus)
    assert got["library"] in ("libsodium.so.26", "libsodium.so.23", "libsodium.so"), got  # the system's


def test_pynacl_s_newer_libsodium_is_picked_where_the_system_s_is_older(have_sodium):
    got = _probe(None)
    nacl = sodium_pick.pynacl_library()
    if sodium_pick._system_has_newer():
        assert got == {"env": None, "library": "libsodium.so.26"}, got  # the system's is as new: kept
    elif nacl is None:
        pytest.skip("PyNaCl 1.6 or later is not installed (a dependency of the package: pyproject.toml)")
    else:
        assert got == {"env": nacl, "library": nacl}, got


SERVER = """
import sys, splitrpc
from splitrpc._native import auth
srv = splitrpc.Server("127.0.0.1", 0, keys=sys.argv[1])
def echo(requests, responses):
    for q, r in zip(requests, responses):
        r[:len(q)] = q
    return [len(q) for q in requests]
srv.add_function(echo, 3, "echo", raw=True, max_request=70000, max_response=70000)
srv.start()
print(srv.port, auth.library(), flush=True)
sys.stdin.readline()
srv.close()
"""


def test_sessions_between_two_libsodium_builds(have_sodium, tmp_path):
    """A server on the system's libsodium and a client on PyNaCl's (or the other way round where
    the system's is the newer one): AES-256-GCM and ChaCha20-Poly1305 are the same algorithms in
    both, so every call, authenticated and encrypted, goes through."""
    import splitrpc
    from splitrpc import auth

    nacl = sodium_pick.pynacl_library()
    if nacl is None or _auth.library() != nacl:
        pytest.skip("this process does not run on PyNaCl's libsodium")
    k = auth.Key.generate(1)
    auth.KeyTable([k]).save(tmp_path / "keys.json")
    auth.save_client_key(k, tmp_path / "client.json")
    env = dict(os.environ, **{ENV: "libsodium.so.23"})
    srv = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SERVER), str(tmp_path / "keys.json")], env=env,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        port, lib = srv.stdout.readline().split()
        assert lib != nacl, lib
        for encrypt in (False, True):
            with splitrpc.Client("127.0.0.1", int(port), key=str(tmp_path / "client.json"), encrypt=encrypt,
                                 timeout=5) as c:
                for n in (0, 1000, 70000):
                    data = os.urandom(n)
                    assert c.call(3, data) == data
                st = c.stats()
                assert st["handshakes"] == 1 and st["bad_auth"] == 0, st
    finally:
        srv.communicate("\n", timeout=30)


def test_a_broken_pynacl_leaves_the_system_s_library(have_sodium, tmp_path):
    """A PyNaCl whose package cannot be imported (here a stand-in `nacl` that raises) is passed over:
    importing splitrpc never fails for it, and the core loads the system's libsodium."""
    (tmp_path / "nacl").mkdir()
    (tmp_path / "nacl" / "__init__.py").write_text("raise RuntimeError('a broken PyNaCl')\n")
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd="/", timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    assert got["env"] is None and got["library"] in ("libsodium.so.26", "libsodium.so.23", "libsodium.so"), got
