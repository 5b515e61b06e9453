"""test_indep_v5.py: the independent client's version 5 (sessions, docs/PROTOCOL-v5.md): its --selftest-v5 rebuilds the page's worked example byte for byte, and short --v5 runs (authenticating and encrypting, with ChaCha20-Poly1305 and, with --aes, AES-256-GCM) against a real keyed `splitrpc serve` answer every call with no bad_auth. Skipped where libsodium cannot be loaded; the AES runs where libsodium's AES-256-GCM is not available (no AES-NI or PCLMULQDQ)."""
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import free_udp_port, read_until

_SRC = Path(__file__).resolve().parent.parent / "bench" / "clients" / "indep_client.c"
_SODIUM = ("libsodium.so.23", "libsodium.so.26", "libsodium.so")  # what the client dlopen()s


def _sodium_loadable() -> bool:
    for name in _SODIUM:
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            pass
    return False


needs_sodium = pytest.mark.skipif(not _sodium_loadable(),
                                reason="libsodium cannot be loaded (libsodium.so.23/.26/.so): the "
                                       "client's version 5 needs it at run time")


def _sodium_aes_available() -> bool:
    """libsodium's crypto_aead_aes256gcm_is_available(), what --aes needs (AES-NI and PCLMULQDQ)."""
    for name in _SODIUM:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        try:
            return lib.sodium_init() >= 0 and lib.crypto_aead_aes256gcm_is_available() == 1
        except AttributeError:
            return False
    return False


needs_aes = pytest.mark.skipif(not _sodium_aes_available(),
                             reason="libsodium's AES-256-GCM is not available here (no AES-NI or "
                                    "PCLMULQDQ): --aes refuses to run")


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> str:
    """The client binary: $SPLITRPC_INDEP_CLIENT or the installed one (as test_bench_indep.py finds
    it) when it speaks version 5 with --aes, else built here from the source beside the tests."""
    from splitrpc.bench.helpers import indep_client
    try:
        path = indep_client.client_path()
        r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10)
        if "--selftest-v5" in r.stdout and "--aes" in r.stdout and "--v2" in r.stdout:
            return path
    except Exception:  # noqa: BLE001 - none installed: build one
        pass
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc or not _SRC.is_file():
        pytest.skip("no version 5 indep_client installed and no C compiler or source to build one")
    out = tmp_path_factory.mktemp("indep") / "indep_client"
    subprocess.run([cc, "-O2", "-std=gnu11", "-Wall", "-Wextra", "-o", str(out), str(_SRC), "-ldl"],
                   check=True, capture_output=True, timeout=120)
    return str(out)


@contextlib.contextmanager
def _serving(args: list[str], cwd):
    """`splitrpc serve ARGS --port P` on 127.0.0.1 until the block ends: P."""
    port = free_udp_port()
    p = subprocess.Popen([sys.executable, "-m", "splitrpc", "serve", *args, "--port", str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(cwd))
    try:
        read_until(p, lambda line: line.startswith("ready"), timeout=60)
        yield port
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory):
    """`splitrpc serve --keys` on 127.0.0.1 with one key, id 7: (port, key table path)."""
    d = tmp_path_factory.mktemp("keys")
    table = d / "keys.json"
    subprocess.run([sys.executable, "-m", "splitrpc", "keys", "new", str(table), "--id", "7",
                    "--client-out", str(d / "client-7.json")], check=True, capture_output=True,
                   cwd=str(d), timeout=60)
    with _serving(["--keys", str(table)], d) as port:
        yield port, table


@needs_sodium
def test_selftest_reproduces_the_worked_example(client):
    r = subprocess.run([client, "--selftest-v5"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "MISMATCH" not in r.stdout and "every byte matches the page" in r.stdout
    assert "AES-256-GCM: GCM's test cases, then the page's AES example" in r.stdout
    if _sodium_aes_available():  # its AES checks ran (GCM test cases, an AES session's datagrams)
        assert "skipped" not in r.stdout and "AES+ENCRYPT: REQUEST (58 bytes)" in r.stdout, r.stdout


@needs_sodium
@pytest.mark.parametrize("extra", [[], ["--encrypt"]], ids=["auth", "encrypt"])
def test_a_short_v5_run_answers_every_call(client, keyed_server, extra):
    port, table = keyed_server
    r = subprocess.run([client, "--port", str(port), "--v5", f"{table}:7", *extra, "--check", "--calls", "2000",
                        "--warmup", "100", "--outstanding", "4", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["protocol"] == 5 and d["encrypt"] == bool(extra)
    assert d["aead"] == "chacha20-poly1305" and d["aes_offered"] is False, d
    assert d["calls"] == d["ok"] == 2000, d
    assert d["errors"] == 0 and d["lost"] == 0 and d["bad_auth"] == 0 and d["handshakes"] == 1, d


@needs_sodium
@needs_aes
@pytest.mark.parametrize("extra", [
    ["--calls", "2000"],
    ["--encrypt", "--calls", "2000"],
    ["--encrypt", "--func", "3", "--size", "5000", "--seg", "1000", "--calls", "500"],  # 5 segments each way
], ids=["aes-auth", "aes-encrypt", "aes-encrypt-segments"])
def test_a_short_v5_aes_run_uses_aes_256_gcm(client, keyed_server, extra):
    """--aes offers AES in the INIT; this server (on this CPU) grants it: the session is AES-256-GCM."""
    port, table = keyed_server
    r = subprocess.run([client, "--port", str(port), "--v5", f"{table}:7", "--aes", *extra, "--check",
                        "--warmup", "100", "--outstanding", "4", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    calls = int(extra[extra.index("--calls") + 1])
    assert d["protocol"] == 5 and d["encrypt"] == ("--encrypt" in extra)
    assert d["aead"] == "aes-256-gcm" and d["aes_offered"] is True and d["aes_unoffered"] == 0, d
    assert d["calls"] == d["ok"] == calls, d
    assert d["errors"] == 0 and d["lost"] == 0 and d["bad_auth"] == 0 and d["handshakes"] == 1, d


@pytest.fixture(scope="module")
def unkeyed_server(tmp_path_factory):
    """`splitrpc serve` on 127.0.0.1, no keys: its port."""
    with _serving([], tmp_path_factory.mktemp("unkeyed")) as port:
        yield port


@pytest.mark.parametrize("extra", [["--calls", "2000"], ["--func", "3", "--size", "5000", "--seg", "1000",
                                                         "--calls", "300"],
                                   ["--func", "3", "--size", "200000", "--calls", "100"]],
                         ids=["vecadd", "segments", "reply-segments"])
def test_version_2_runs_unkeyed_with_the_header_check(client, unkeyed_server, extra):
    """--v2: version 2 requests (48-bit req_id, the header's CRC-16); a reply counts only when it is
    version 2 with a right check, so every call answered means the server spoke version 2 back."""
    r = subprocess.run([client, "--port", str(unkeyed_server), "--v2", *extra, "--check", "--warmup", "100",
                        "--outstanding", "4", "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    calls = int(extra[extra.index("--calls") + 1])
    assert d["protocol"] == 2 and d["calls"] == d["ok"] == calls, d
    assert d["errors"] == 0 and d["lost"] == 0 and d["malformed"] == 0, d
    if "200000" in extra:  # replies over a datagram: version 2's segments, reassembled and checked
        assert d["multiseg_replies"] >= calls, d
    r = subprocess.run([client, "--port", "9", "--v2", "--v5-key", "1:" + "00" * 32], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 2 and "--v2 and --v5" in r.stderr


def test_version_1_still_runs_without_v5_options(client):
    """Version 1 never loads libsodium: bad usage is still told apart (exit 2)."""
    r = subprocess.run([client, "--port", "9", "--encrypt"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "--encrypt needs --v5" in r.stderr
    r = subprocess.run([client, "--port", "9", "--aes"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "--aes needs --v5" in r.stderr
    if shutil.which("ldd"):
        deps = subprocess.run(["ldd", client], capture_output=True, text=True, timeout=10).stdout
        assert "libsodium" not in deps, deps  # loaded by dlopen for --v5 only


@needs_sodium
def test_libsodium_chosen_by_path_or_refused(client, keyed_server, tmp_path):
    """--libsodium PATH: that library or none (exit 1, saying why); the JSON says which it used.
    With PyNaCl's (a Python extension: libpython preloaded, as sessions_cost does), a session
    with the server goes through."""
    port, table = keyed_server
    run = [client, "--port", str(port), "--v5", f"{table}:7", "--check", "--calls", "300", "--warmup", "10",
           "--json"]
    bad = tmp_path / "libnot.so"
    bad.write_bytes(b"not a library")
    r = subprocess.run(run + ["--libsodium", str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and f"cannot load libsodium from {bad}" in r.stderr, r.stderr
    r = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["libsodium"].startswith("libsodium.so"), r.stdout
    from splitrpc.bench.suites.sessions_cost import client_libsodium

    try:
        path, env = client_libsodium("pynacl")
    except Exception as e:  # no PyNaCl 1.6, or no shared libpython
        pytest.skip(str(e))
    r = subprocess.run(run + ["--libsodium", path, "--encrypt"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, **env))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["libsodium"] == path and d["ok"] == 300 and d["bad_auth"] == 0 and d["encrypt"] is True, d
