"""test_indep_v5.py: the independent client's version 5 (sessions, docs/PROTOCOL-v5.md): its --selftest-v5 rebuilds the page's worked example byte for byte (the AEGIS-128L suite's too, with a libsodium that has AEGIS-128L: the system's from 1.0.19, else PyNaCl 1.6's), and short --v5 runs (authenticating and encrypting, with ChaCha20-Poly1305, with --aes AES-256-GCM and with --aegis AEGIS-128L) against a real keyed `splitrpc serve` answer every call with no bad_auth. Skipped where libsodium cannot be loaded; the AES runs where libsodium's AES-256-GCM is not available (no AES-NI or PCLMULQDQ); the AEGIS checks where no libsodium with AEGIS-128L is found, and the AEGIS runs where the server does not grant AEGIS (its ACCEPT to an INIT offering it says)."""
import binascii
import contextlib
import ctypes
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
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


def _system_sodium_has_aegis() -> bool:
    """The system libsodium (what the client loads without --libsodium) has AEGIS-128L (1.0.19 on)."""
    for name in _SODIUM:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        return hasattr(lib, "crypto_aead_aegis128l_encrypt_detached") and \
            hasattr(lib, "crypto_aead_aegis128l_decrypt_detached")
    return False


def _aegis_libsodium() -> tuple[list[str], dict]:
    """(the client's extra arguments, its extra environment) for a libsodium with AEGIS-128L: the
    system's when it has it, else PyNaCl's (a Python extension: libpython preloaded, as
    sessions_cost does); pytest.skip, saying why, when neither."""
    if _system_sodium_has_aegis():
        return [], {}
    try:
        from splitrpc.bench.suites.sessions_cost import client_libsodium

        path, env = client_libsodium("pynacl")
    except Exception as e:  # noqa: BLE001 - no PyNaCl 1.6, or no shared libpython
        pytest.skip(f"no libsodium with AEGIS-128L: the system's lacks it (before 1.0.19) and PyNaCl's "
                    f"cannot be used ({e})")
    return ["--libsodium", path], env


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> str:
    """The client binary: $SPLITRPC_INDEP_CLIENT or the installed one (as test_bench_indep.py finds
    it) when it speaks version 5 with --aes, else built here from the source beside the tests."""
    from splitrpc.bench.helpers import indep_client
    try:
        path = indep_client.client_path()
        r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10)
        if "--selftest-v5" in r.stdout and "--aes" in r.stdout and "--aegis" in r.stdout and "--v2" in r.stdout:
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
        assert "AES-256-GCM checks" not in r.stdout and "AES+ENCRYPT: REQUEST (58 bytes)" in r.stdout, r.stdout
    assert "AEGIS-128L: the draft's test vectors, then the page's AEGIS-128L example" in r.stdout
    if not _system_sodium_has_aegis():  # said, not silently passed: test_selftest_aegis runs them
        assert "AEGIS-128L checks" in r.stdout and "skipped" in r.stdout and "lacks crypto_aead_aegis128l" in r.stdout


# every AEGIS-128L line of --selftest-v5: the draft's vectors, the page's bytes, and the client's handling
_AEGIS_CHECKS = [
    "AEGIS-128L test vector 1 (16 zero bytes): C, tag", "AEGIS-128L test vector 2 (empty): tag",
    "AEGIS-128L test vector 3 (32 bytes, 8 of AD): C, tag",
    "AEGIS: INIT (flags AEGIS)", "AEGIS: ACCEPT (flags AEGIS)", "AEGIS: client: ACCEPT's confirm verified",
    "AEGIS: REQUEST (74 bytes)", "AEGIS: RESPONSE (74 bytes)", "AEGIS: client: RESPONSE's tag verified (k_s2c)",
    "AEGIS: the key is k_c2s's first 16 bytes", "AEGIS: a flipped bit of T[0..15] is refused",
    "AEGIS: a flipped bit of T[16..31] is refused",
    "AEGIS+ENCRYPT: INIT (flags 5)", "AEGIS+ENCRYPT: ACCEPT (flags 5)", "AEGIS+ENCRYPT: REQUEST (74 bytes)",
    "AEGIS+ENCRYPT: RESPONSE (74 bytes)", "AEGIS+ENCRYPT: client: RESPONSE opened",
    "AEGIS: 1402 bytes (and 0..1000) round trip, flips refused",
    "AEGIS+ENCRYPT: 1402 bytes (and 0..1000) round trip, flips refused",
    "client: AEGIS not offered, ACCEPT sets it: dropped", "client: AES and AEGIS offered, ACCEPT sets both: dropped",
    "client: AES and AEGIS offered, AEGIS granted: AEGIS-128L",
    "client: AEGIS offered and granted: AEGIS session, page's RESPONSE taken",
    "client: AEGIS offered, not granted: ChaCha20-Poly1305",
]


@needs_sodium
def test_selftest_aegis_reproduces_the_worked_example(client):
    """--selftest-v5 with a libsodium that has AEGIS-128L: every AEGIS check runs and passes (the page's
    AEGIS-128L bytes among them), none is skipped."""
    extra, env = _aegis_libsodium()
    r = subprocess.run([client, "--selftest-v5", *extra], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, **env))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "MISMATCH" not in r.stdout and "FAILED" not in r.stdout and "every byte matches the page" in r.stdout
    assert "AEGIS-128L checks" not in r.stdout, r.stdout  # not skipped
    lines = dict(line.rstrip().rsplit(None, 1) for line in r.stdout.splitlines() if line.rstrip().endswith(" ok"))
    for check in _AEGIS_CHECKS:
        assert lines.get(check) == "ok", (check, r.stdout)


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
    r = subprocess.run([client, "--port", "9", "--aegis"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "--aegis needs --v5" in r.stderr
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


@needs_sodium
@pytest.mark.skipif(_system_sodium_has_aegis(), reason="the system libsodium has AEGIS-128L (1.0.19 or later)")
def test_aegis_without_it_in_libsodium_is_refused_at_start(client):
    """--aegis with a libsodium before 1.0.19 (no crypto_aead_aegis128l_*): exit 1 at start, saying why."""
    r = subprocess.run([client, "--port", "9", "--v5-key", "7:" + "00" * 32, "--aegis"], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 1 and "--aegis: AEGIS-128L is not available here" in r.stderr, r.stderr
    assert "lacks crypto_aead_aegis128l" in r.stderr, r.stderr


def _server_grants_aegis(port: int, table: Path) -> tuple[bool, str]:
    """One INIT offering AEGIS (flags 4) to the server, built from the page (hashlib's BLAKE2b, the
    `cryptography` package's X25519): (True, "") when its ACCEPT sets AEGIS, else (False, why). A server
    written before the page's AEGIS change drops such an INIT (a flag it does not know)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    keys = json.loads(Path(table).read_text())["keys"]
    psk = bytes.fromhex(next(k["secret"] for k in keys if k["id"] == 7))
    e_c = X25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    hid = int.from_bytes(os.urandom(6), "big") | 1
    hdr = bytearray(b"\xa5\x53\x00\x00\x00\x00" + hid.to_bytes(6, "big") + bytes([0, 0, 0, 1, 0, 0, 0, 104, 0, 0]))
    hdr[4:6] = binascii.crc_hqx(bytes(hdr), 0xFFFF).to_bytes(2, "big")
    d = bytes(hdr) + (7).to_bytes(4, "big") + e_c + int(time.time() * 1000).to_bytes(8, "big") + \
        (4).to_bytes(4, "big") + bytes(8 + 16)
    mac1_key = hashlib.blake2b(b"splitrpc v5 mac1", key=psk, digest_size=32).digest()
    init = d + hashlib.blake2b(d, key=mac1_key, digest_size=16).digest() + bytes(16)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.5)
        for _ in range(3):
            s.sendto(init, ("127.0.0.1", port))
            try:
                r = s.recv(2048)
            except socket.timeout:
                continue
            if len(r) == 86 and r[1] == 0x54 and r[6:12] == init[6:12]:
                flags = int.from_bytes(r[22 + 44:22 + 48], "big")
                if flags & 4:
                    return True, ""
                return False, f"the server's ACCEPT to an INIT offering AEGIS has flags {flags}: AEGIS not granted"
    return False, ("the server does not answer an INIT offering AEGIS (flags bit 2): written before the page's "
                   "AEGIS-128L suite, or it does not grant it")


@needs_sodium
@pytest.mark.parametrize("extra", [
    ["--calls", "2000"],
    ["--encrypt", "--calls", "2000"],
    ["--encrypt", "--func", "3", "--size", "5000", "--seg", "1000", "--calls", "500"],  # 5 segments each way
    ["--aes", "--encrypt", "--calls", "1000"],  # both offered: the server picks (splitrpc: AEGIS)
], ids=["aegis-auth", "aegis-encrypt", "aegis-encrypt-segments", "aegis-and-aes"])
def test_a_short_v5_aegis_run_uses_aegis_128l(client, keyed_server, extra):
    """--aegis offers AEGIS in the INIT; where the server grants it (its ACCEPT's flags say, probed first) the
    session is AEGIS-128L and every call is answered with no bad_auth. Skipped where the server does not
    grant AEGIS (e.g. one written before the page's AEGIS change) or no libsodium here has AEGIS-128L."""
    port, table = keyed_server
    lib, env = _aegis_libsodium()
    granted, why = _server_grants_aegis(port, table)
    if not granted:
        pytest.skip(why)
    if "--aes" in extra and not _sodium_aes_available():
        pytest.skip("libsodium's AES-256-GCM is not available here: --aes refuses to run")
    r = subprocess.run([client, "--port", str(port), "--v5", f"{table}:7", "--aegis", *lib, *extra, "--check",
                        "--warmup", "100", "--outstanding", "4", "--json"],
                       capture_output=True, text=True, timeout=60, env=dict(os.environ, **env))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    calls = int(extra[extra.index("--calls") + 1])
    assert d["protocol"] == 5 and d["encrypt"] == ("--encrypt" in extra)
    assert d["aead"] == "aegis-128l" and d["aegis_offered"] is True and d["aes_offered"] == ("--aes" in extra), d
    assert d["aegis_unoffered"] == 0 and d["aes_unoffered"] == 0 and d["suites_both"] == 0, d
    assert d["seg"] == (1000 if "--seg" in extra else 1402), d  # 22 + S + 48 = 1472 by default
    assert d["calls"] == d["ok"] == calls, d
    assert d["errors"] == 0 and d["lost"] == 0 and d["bad_auth"] == 0 and d["handshakes"] == 1, d
    assert d["malformed"] == 0, d
