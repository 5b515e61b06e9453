"""The libFuzzer harnesses over the server's datagram path (native/fuzz/fuzz_datagrams.c), the same with authentication on (native/fuzz/fuzz_auth.c), the client's reply path (native/fuzz/fuzz_replies.c) and protocol version 5's handshake and data datagrams (native/fuzz/fuzz_session.c), built with clang under ASan+UBSan and run for a bounded number of inputs from the seed corpus in tests/fuzz_corpus; skips, saying why, without clang's libFuzzer."""
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Inputs per harness: a smoke run in every suite (CI included: 40,000 took 2 min of its 30, 20,000
# about 50 s; 10,000 since stop 66, CI being near its 30 minutes); a
# deeper run: SPLITRPC_FUZZ_RUNS=400000 .venv/bin/pytest tests/test_fuzz.py
RUNS = int(os.environ.get("SPLITRPC_FUZZ_RUNS", "10000"))


def _clang() -> str | None:
    for name in ("clang", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14"):
        cc = shutil.which(name)
        if not cc:
            continue
        with tempfile.TemporaryDirectory() as d:
            src = pathlib.Path(d, "probe.c")
            src.write_text("int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n")
            r = subprocess.run([cc, "-fsanitize=fuzzer,address", str(src), "-o", str(pathlib.Path(d, "probe"))],
                               capture_output=True, text=True)
            if r.returncode == 0:
                return cc
    return None


@pytest.fixture(scope="module")
def fuzz_build(tmp_path_factory):
    """The harnesses, built once with clang under ASan+UBSan."""
    cc = _clang()
    if cc is None:
        pytest.skip("no clang with libFuzzer (apt-get install clang-14 libclang-rt-14-dev, as .ci/run does)")
    cmake = shutil.which("cmake")
    build = tmp_path_factory.mktemp("fuzz-build")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    cfg = subprocess.run([cmake, "-S", str(ROOT), "-B", str(build), *gen, f"-DCMAKE_C_COMPILER={cc}",
                          "-DSPLITRPC_FUZZ=ON", "-DSPLITRPC_PYTHON=OFF", "-DSPLITRPC_CUDA=OFF", "-DSPLITRPC_DPDK=OFF"],
                         capture_output=True, text=True)
    assert cfg.returncode == 0, cfg.stdout[-3000:] + cfg.stderr[-3000:]
    bld = subprocess.run([cmake, "--build", str(build), "-j", "2", "--target", "fuzz_datagrams", "fuzz_replies",
                          "fuzz_auth", "fuzz_session"],
                         capture_output=True, text=True)
    assert bld.returncode == 0, bld.stdout[-3000:] + bld.stderr[-3000:]
    return build


def _fuzz(harness: pathlib.Path, corpus: pathlib.Path, tmp_path: pathlib.Path, max_len: int,
          env_extra: dict[str, str] | None = None) -> str:
    seeds = len(list(corpus.iterdir()))
    r = subprocess.run([str(harness), f"-runs={RUNS}", "-seed=1", f"-max_len={max_len}",
                        "-rss_limit_mb=2048", "-max_total_time=120", f"-artifact_prefix={tmp_path}/", str(corpus)],
                       capture_output=True, text=True, timeout=300, env={**os.environ, **(env_extra or {})})
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "ERROR: AddressSanitizer" not in out and "runtime error" not in out, out[-6000:]
    assert f"Done {RUNS} runs" in out, out[-3000:]
    assert len(list(corpus.iterdir())) > seeds, "the fuzzer found no new coverage at all"
    return out


def test_fuzz_datagram_path(fuzz_build, tmp_path):
    corpus = tmp_path / "corpus"  # a copy: the fuzzer adds what it finds, the repository's stays as is
    shutil.copytree(ROOT / "tests" / "fuzz_corpus", corpus)
    assert len(list(corpus.iterdir())) >= 10
    _fuzz(fuzz_build / "fuzz_datagrams", corpus, tmp_path, 300000)


def _record(op: int, body: bytes) -> bytes:
    return bytes([op]) + len(body).to_bytes(2, "big") + body


def _reply(call: int, typ: int, seq: int, nseg: int, msg_len: int, aux: int, data: bytes, release: bool = False,
           v3: bool = False, damaged: bool = False) -> bytes:
    """A record of fuzz_replies.c: a reply with a valid header to call `call` (of the version 3
    client where v3, its data check damaged where damaged)."""
    fields = bytes([typ]) + seq.to_bytes(2, "big") + nseg.to_bytes(2, "big") + msg_len.to_bytes(4, "big") + bytes([aux])
    op = (call << 1) | (16 if release else 0) | (32 if v3 else 0) | (64 if damaged else 0)
    return _record(op, fields + bytes(2) + data)


def test_fuzz_client_reply_path(fuzz_build, tmp_path):
    """Seeds: right replies, BUSY and other errors, a two-segment reply, releases while calls wait,
    a damaged header, garbage."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    seeds = {
        "ok": _reply(0, 1, 0, 1, 4, 0, b"abcd"),
        "busy_then_ok": _reply(1, 2, 0, 1, 4, 3, b"full") + _reply(1, 1, 0, 1, 4, 0, b"abcd"),
        "errors": b"".join(_reply(i, 2, 0, 1, 3, code, b"err") for i, code in enumerate((1, 2, 4, 5, 6, 7))),
        "two_segments": _reply(2, 1, 0, 2, 3000, 0, bytes(1500)) + _reply(2, 1, 1, 2, 3000, 0, bytes(1500)),
        "release_waiting": _reply(5, 1, 0, 1, 4, 0, b"abcd", release=True) + _reply(4, 1, 0, 1, 4, 0, b"abcd", True),
        "window_turns": b"".join(_reply(i, 1, 0, 1, 4, 0, b"abcd") for i in range(6)),
        "raw_garbage": _record(1, bytes(range(40))),
        "too_large": _reply(3, 1, 0, 1, 1 << 30, 0, b"x"),
        "bad_seq": _reply(0, 1, 5, 2, 10, 0, b"0123456789"),
        "busy_storm": b"".join(_reply(i % 6, 2, 0, 1, 1, 3, b"b") for i in range(24)),
        # version 3 (docs/PROTOCOL-v3.md): right replies, a damaged check then the right one, two segments
        "v3_ok": _reply(0, 1, 0, 1, 4, 0, b"abcd", v3=True) + _reply(1, 2, 0, 1, 3, 5, b"err", v3=True),
        "v3_damaged_then_ok": _reply(2, 1, 0, 1, 4, 0, b"abcd", v3=True, damaged=True)
        + _reply(2, 1, 0, 1, 4, 0, b"abcd", v3=True),
        "v3_two_segments": _reply(3, 1, 1, 2, 3000, 0, bytes(1500), v3=True)
        + _reply(3, 1, 0, 2, 3000, 0, bytes(1500), v3=True, damaged=True)
        + _reply(3, 1, 0, 2, 3000, 0, bytes(1500), v3=True),
        "v3_raw_short": _record(1 | 32, bytes([0xA5, 0x31]) + bytes(22)),
    }
    for name, body in seeds.items():
        (corpus / name).write_bytes(body)
    _fuzz(fuzz_build / "fuzz_replies", corpus, tmp_path, 70000)


def _signed(op: int, key: int, sender: int, counter: int, func: int, req: int, data: bytes, seq: int = 0,
            nseg: int = 1, msg_len: int | None = None) -> bytes:
    """A record of fuzz_auth.c that the harness signs (op | 2): key selector, sender, counter, then
    a version 4 header and data (docs/PROTOCOL-v4.md)."""
    import wire_ref as ref

    h = ref.encode(0, func, req, seq, nseg, len(data) if msg_len is None else msg_len, version=4)
    return _record(op | 2, bytes([key, sender]) + counter.to_bytes(2, "big") + h + data)


def test_fuzz_datagram_path_with_authentication_on(fuzz_build, tmp_path):
    """Seeds: signed calls of each key (served, FORBIDDEN, expired, unknown), replays, a stale and a
    forged tag, a signed multi-segment message in and out of order with a replayed segment,
    unsigned and raw datagrams, reloads between datagrams."""
    from splitrpc._native import auth as _auth

    if not _auth.available():
        pytest.skip("libsodium's shared library is not installed (apt-get install libsodium23, as .ci/run does)")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    big = bytes(i & 0xFF for i in range(5000))
    segs = [_signed(0, 0, 9, 10 + i, 5, 40, big[i * 1200:(i + 1) * 1200], i, 5, 5000) for i in range(5)]
    seeds = {
        "served": _signed(4, 0, 1, 1, 1, 1, b"hello") + _signed(4, 1, 2, 1, 1, 2, b"narrow echo"),
        "forbidden_and_expired": _signed(4, 1, 2, 2, 2, 3, b"x") + _signed(4, 2, 3, 1, 1, 4, b"y")
        + _signed(4, 1, 2, 3, 0x4242, 5, b"z"),
        "unknown_stale_forged": _signed(4, 3, 4, 1, 1, 6, b"a") + _signed(4, 4, 5, 1, 1, 7, b"b")
        + _signed(4, 8, 6, 1, 1, 8, b"c"),
        "replays": _signed(0, 0, 7, 5, 1, 9, b"once") + _signed(4, 0, 7, 5, 1, 9, b"once")
        + _signed(4, 0, 7, 6, 1, 9, b"once") + _signed(4, 0, 7, 1, 1, 10, b"old"),
        "segments_in_order": b"".join(segs) + _record(4, b""),
        "segments_reversed_with_replay": b"".join(reversed(segs)) + segs[2] + _record(4, b""),
        "unsigned_and_raw": _record(4, bytes([0xA5, 0x20]) + bytes(30)) + _record(0, bytes(70))
        + _record(1, bytes([0xA5, 0x40]) + bytes(80)),
        "reload_between": _signed(4, 1, 8, 1, 1, 11, b"before") + _record(32, b"")
        + _signed(4, 1, 8, 2, 1, 12, b"after") + _record(32 | 4, b"") + _signed(4, 1, 8, 3, 1, 13, b"back"),
        "ping": _signed(4, 1, 9, 1, 0xFFFF, 14, b"SRPC-PING"),
    }
    try:  # version 5 (docs/PROTOCOL-v5.md): an INIT of key 1 now (answered), again (its ACCEPT again), a
        # stale one, and requests of sessions the server does not have (NO_SESSION), as raw records
        import foreign_v5 as v5

        key1 = bytes([1]) + bytes(31)
        init = v5.make_init(key1, 1, v5.private_key(), 77)
        stray = v5.Session(0x1234, bytes(32), bytes(32), False)
        seeds["v5_handshake"] = _record(4, init) + _record(4, init) + _record(
            4, v5.make_init(key1, 1, v5.private_key(), 78, time_ms=int(time.time() * 1000) - 120000))
        seeds["v5_no_session"] = _record(4, v5.seal(stray, v5.header(v5.REQUEST, 1, 5, 3), b"abc", True)) + _record(
            5, v5.seal(stray, v5.header(v5.REQUEST, 1, 6, 3), b"def", True))
    except ImportError:  # the cryptography package ('.[test]'): the version 5 seeds are left out
        pass
    for name, body in seeds.items():
        (corpus / name).write_bytes(body)
    _fuzz(fuzz_build / "fuzz_auth", corpus, tmp_path, 20000)


def test_fuzz_session_handshake_and_datagrams(fuzz_build, tmp_path):
    """Seeds: docs/PROTOCOL-v5.md's worked example (as tests/foreign_v5.py makes it) under each
    reader: its INIT for the server, its ACCEPT, a COOKIE and a NO_SESSION for the client, and its
    REQUEST and RESPONSE for both sides of the harness's two sessions (whose keys are the
    example's: the harness makes the same handshake). Where PyNaCl carries a libsodium with
    AEGIS-128L, the harness runs on it, with the AEGIS sessions' datagrams as seeds too (the system's
    1.0.18 has no AEGIS-128L: those inputs then open nothing)."""
    from splitrpc._native import auth as _auth

    if not _auth.available():
        pytest.skip("libsodium's shared library is not installed (apt-get install libsodium23, as .ci/run does)")
    pytest.importorskip("cryptography", reason="tests/foreign_v5.py needs the cryptography package ('.[test]')")
    import foreign_v5 as v5

    psk, ec, es = bytes(range(32)), bytes(range(0x40, 0x60)), bytes(range(0x60, 0x80))
    init = v5.make_init(psk, 7, ec, 0x010203040506, time_ms=1764331200000)
    acc, server = v5.make_accept(psk, init, es, 0x1122334455667788, 0)
    client = v5.open_accept(psk, init, ec, acc)
    enc_acc, enc_server = v5.make_accept(psk, init, es, 0x1122334455667789, v5.FLAG_ENCRYPT)
    enc_client = v5.open_accept(psk, init, ec, enc_acc)
    req = v5.seal(client, v5.header(v5.REQUEST, 1, 1, 4), b"\x01\x02\x03\x04", True)
    resp = v5.seal(server, v5.header(v5.RESPONSE, 1, 1, 4), b"\x02\x03\x04\x05", False)
    enc_req = v5.seal(enc_client, v5.header(v5.REQUEST, 1, 1, 5), b"hello", True)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    seeds = {"init": bytes([0]) + init, "init_forced": bytes([8]) + init, "accept": bytes([1]) + acc,
             "init_at_sessions": bytes([5]) + init,
             "cookie": bytes([2]) + v5.header(v5.COOKIE, 0, 0x010203040506, 44) + bytes(44),
             "no_session": bytes([3]) + v5.header(v5.NO_SESSION, 1, 1, 8) + bytes(8),
             "request": bytes([4 | 16]) + req, "response": bytes([4]) + resp,
             "encrypted_request": bytes([4 | 8 | 16]) + enc_req}
    # The harness's AEGIS-128L sessions: its first two sessions' keys, ids 4 higher, the AEGIS flag.
    for base, bits in ((server, 0x40), (enc_server, 0x40 | 8)):
        a = v5.Session(base.id + 4, base.k_c2s, base.k_s2c, base.encrypt, aegis=True)
        seeds[f"aegis_request_{bits}"] = bytes([4 | 16 | bits]) + v5.seal(a, v5.header(v5.REQUEST, 1, 1, 4),
                                                                          b"\x01\x02\x03\x04", True)
        seeds[f"aegis_response_{bits}"] = bytes([4 | bits]) + v5.seal(a, v5.header(v5.RESPONSE, 1, 1, 4),
                                                                      b"\x02\x03\x04\x05", False)
    for name, body in seeds.items():
        (corpus / name).write_bytes(body)
    from test_native_sanitized import _pynacl_libsodium_env
    env = _pynacl_libsodium_env()
    out = _fuzz(fuzz_build / "fuzz_session", corpus, tmp_path, 2000, env)
    if env is not None and "aes" in pathlib.Path("/proc/cpuinfo").read_text().split():
        assert "fuzz_session: AEGIS-128L sessions on" in out, out[-2000:]
