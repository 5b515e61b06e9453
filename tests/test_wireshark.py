"""The Wireshark dissector tools/wireshark/splitrpc.lua on real loopback captures (dumpcap) of splitrpc servers and clients, decoded by tshark -2: calls of versions 1 to 5, a damaged header and payload, signed and forged version 4 datagrams with and without the key file, version 5 handshakes and AEGIS-128L / ChaCha20-Poly1305 sessions, a lost and retransmitted segment, describe's names, request-reply links and times, the port preference; and its BLAKE2b, CRC-16 and CRC-32C against Python's."""
import binascii
import calendar
import hashlib
import json
import os
import re
import select
import shutil
import socket
import struct
import subprocess
import time

import pytest

pytest.importorskip("cryptography", reason="tests/foreign_v5.py needs the cryptography package ('.[test]')")
pytest.importorskip("nacl", reason="tests/foreign_v5.py needs PyNaCl ('.[test]')")
import foreign_v5 as v5  # noqa: E402
import wire_ref  # noqa: E402
from foreign_client import ForeignClient, RemoteError, crc32c, pack, seal, v4_sign  # noqa: E402

import splitrpc  # noqa: E402
from splitrpc import Key, KeyTable  # noqa: E402
from splitrpc._native import auth as _auth  # noqa: E402
from splitrpc.auth import save_client_key  # noqa: E402
from splitrpc.services import register_builtin_services  # noqa: E402

LUA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "wireshark", "splitrpc.lua")
TSHARK, DUMPCAP = shutil.which("tshark"), shutil.which("dumpcap")
pytestmark = [pytest.mark.skipif(TSHARK is None or DUMPCAP is None,
                                 reason="Wireshark's tshark and dumpcap are not installed"),
              pytest.mark.skipif(not _auth.available(), reason="libsodium's shared library is not installed")]

VECADD, ECHO, DESCRIBE, PING = 1, 3, 0xFFFE, 0xFFFF
VEC = struct.pack("<256f", *[i / 8 for i in range(256)])
FIELDS = ["frame.number", "frame.time_epoch", "udp.srcport", "udp.dstport", "_ws.col.Info", "_ws.expert.message",
          "splitrpc.magic", "splitrpc.version", "splitrpc.type", "splitrpc.func_id", "splitrpc.func_name",
          "splitrpc.req_id", "splitrpc.seq", "splitrpc.nseg", "splitrpc.msg_len", "splitrpc.aux", "splitrpc.error",
          "splitrpc.error.name", "splitrpc.error.text", "splitrpc.data", "splitrpc.data_len", "splitrpc.check16",
          "splitrpc.check16.status", "splitrpc.check32", "splitrpc.check32.status", "splitrpc.v4.key_id",
          "splitrpc.v4.sender", "splitrpc.v4.counter", "splitrpc.v4.time", "splitrpc.v4.time_abs", "splitrpc.v4.tag",
          "splitrpc.v4.tag.status", "splitrpc.v4.tag.note", "splitrpc.v5.key_id", "splitrpc.v5.e_c", "splitrpc.v5.time",
          "splitrpc.v5.flags", "splitrpc.v5.flags.aegis", "splitrpc.v5.prev", "splitrpc.v5.mac1",
          "splitrpc.v5.mac1.status", "splitrpc.v5.mac1.note", "splitrpc.v5.session", "splitrpc.v5.e_s",
          "splitrpc.v5.counter", "splitrpc.v5.tag", "splitrpc.v5.tag_head", "splitrpc.v5.tag.status",
          "splitrpc.v5.tag.note", "splitrpc.v5.suite", "splitrpc.v5.encrypted", "splitrpc.v5.nonce",
          "splitrpc.v5.cookie", "splitrpc.response_in", "splitrpc.request_in", "splitrpc.time",
          "splitrpc.retransmission", "splitrpc.reassembled_in", "splitrpc.reassembled",
          "splitrpc.reassembled.length", "splitrpc.segment", "splitrpc.reassembled.data"]


def _start_capture(path, ports):
    """dumpcap on lo for the given UDP ports, once a probe sent to the first is in its file (dumpcap
    says "Capturing on" a moment before it captures); skips the module when it may not capture."""
    flt = " or ".join(f"udp port {p}" for p in ports)
    p = subprocess.Popen([DUMPCAP, "-i", "lo", "-f", flt, "-w", str(path)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    said, end = "", time.monotonic() + 10
    while "Capturing on" not in said:
        if p.poll() is not None or time.monotonic() > end:
            p.kill()
            why = said.strip() or p.stderr.read().strip() or f"it exited with status {p.returncode}"
            pytest.skip(f"dumpcap cannot capture on lo here: {why}")
        if select.select([p.stderr], [], [], 0.1)[0]:
            said += p.stderr.readline()
    probe = b"wireshark-test-probe-" + os.urandom(8).hex().encode()  # not splitrpc: no magic
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        while time.monotonic() < end:
            s.sendto(probe, ("127.0.0.1", ports[0]))
            time.sleep(0.05)
            if path.exists() and probe in path.read_bytes():
                return p
    p.kill()
    pytest.fail("dumpcap captured nothing in 10 s")


def _recv_all(s, timeout=0.5):
    """Every datagram arriving on s until it is quiet for timeout seconds."""
    out = []
    s.settimeout(timeout)
    try:
        while True:
            out.append(s.recv(65535))
    except OSError:
        return out


def _traffic(plain, keyed, k1, k2):
    """Every scenario, sent while dumpcap captures; what the test expects of each, by name."""
    exp = {}
    host = "127.0.0.1"
    # versions 1, 2 and 3 with the page's own client: describe, a call, ping, an error
    c1 = ForeignClient(host, plain.port, version=1)
    exp["v1"] = c1.next_id
    assert c1.call(VECADD, VEC) == struct.pack("<256f", *[i / 8 + 1 for i in range(256)])
    c2 = ForeignClient(host, plain.port, version=2, seg_size=65485)
    exp["describe"] = c2.next_id
    assert {f["name"] for f in c2.describe()["functions"]} >= {"vecadd", "echo"}
    exp["v2"] = c2.next_id
    c2.call(VECADD, VEC)
    exp["ping"] = c2.next_id
    c2.ping()
    exp["unknown"] = c2.next_id
    with pytest.raises(RemoteError) as err:
        c2.call(99, b"x")
    assert err.value.code == 1
    exp["unknown_text"] = err.value.text
    big = os.urandom(100000)  # 2 segments each way at 65485
    exp["big"] = c2.next_id
    assert c2.call(ECHO, big) == big
    c3 = ForeignClient(host, plain.port, version=3)
    exp["v3"] = c3.next_id
    c3.call(VECADD, VEC)
    # a lost segment, sent again: segments 0 and 2, then all three (version 2, S = 1000)
    s = c2.sock
    rid = exp["lost"] = 0x0000BEEF0001
    data = exp["lost_data"] = os.urandom(2500)
    segs = wire_ref.segments(ECHO, rid, data, 1000, version=2)
    for x in (segs[0], segs[2]):
        s.send(x)
    time.sleep(0.05)
    for x in segs:
        s.send(x)
    replies = _recv_all(s, 0.3)
    assert [r[22:] for r in replies] == [data]
    # damaged: a header byte changed after its CRC-16; a version 3 data byte changed after its CRC-32C
    h = bytearray(pack(2, 0, VECADD, 0x0000BAD00001, 0, 1, 4, 0) + b"abcd")
    exp["bad16_check"] = int.from_bytes(h[4:6], "big")
    h[11] ^= 0x01
    exp["bad16_rid"] = int.from_bytes(h[6:12], "big")
    s.send(bytes(h))
    g = bytearray(seal(pack(3, 0, ECHO, 0x0000BAD00002, 0, 1, 4, 0) + b"wxyz"))
    exp["bad32_check"] = int.from_bytes(g[-4:], "big")
    g[23] ^= 0x40
    s.send(bytes(g))
    for c in (c1, c3):
        c.close()

    # version 4 (legacy mode) signed by keys 1 and 2, and one forged (a wrong secret)
    c4 = ForeignClient(host, keyed.port, version=4, key=(k1.id, k1.secret))
    exp["v4"], exp["v4_sender"] = c4.next_id, c4.sender
    t_sent = int(time.time() * 1000)
    c4.call(VECADD, VEC)
    exp["v4_time"] = t_sent
    c4b = ForeignClient(host, keyed.port, version=4, key=(k2.id, k2.secret))
    c4b.call(ECHO, b"key two")
    exp["forged"] = 0x0000F0F00001
    c4.sock.send(v4_sign(pack(4, 0, ECHO, exp["forged"], 0, 1, 4, 0) + b"evil", k1.id, bytes(32), 7, 1))
    assert _recv_all(c4.sock, 0.2) == []
    c4.close()
    c4b.close()

    # version 5: splitrpc's own client (AEGIS-128L where this process's libsodium has it; describe, then vecadd)
    ca = splitrpc.Client(host, keyed.port, key=k1)
    ca.describe()
    ca.call(VECADD, VEC)
    exp["aegis"] = "aegis-128l" in _auth.suites()
    cc = splitrpc.Client(host, keyed.port, key=k1, encrypt=True, suites=["chacha20-poly1305"])
    cc.call(ECHO, b"secret words")
    for c in (ca, cc):
        c.close()
    # version 5 from the page's client: a handshake with known fields, a call; a forged INIT; a session never made
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((host, keyed.port))
    e = v5.private_key()
    hs = exp["hs"] = v5.random_id()
    t5 = exp["v5_time"] = int(time.time() * 1000)
    init = v5.make_init(k2.secret, k2.id, e, hs, time_ms=t5)
    exp["e_c"] = init[26:58]
    exp["mac1"] = init[94:110]
    s.send(init)
    s.settimeout(2)
    acc = s.recv(100)
    sess = v5.open_accept(k2.secret, init, e, acc)
    assert sess is not None
    exp["session"] = sess.id
    exp["e_s"] = acc[34:66]
    exp["v5"] = 0x000000005501
    s.send(v5.seal(sess, v5.header(v5.REQUEST, ECHO, exp["v5"], 11), b"hello again", True))
    r = s.recv(100)
    assert v5.open_(sess, r, False) == b"hello again"
    exp["v5_reply_counter"] = int.from_bytes(r[-24:-16], "big")
    exp["bad_init"] = v5.random_id()
    s.send(v5.make_init(bytes(32), k2.id, v5.private_key(), exp["bad_init"]))
    exp["ghost"] = 0x0123456789ABCDEF
    ghost = v5.Session(exp["ghost"], bytes(32), bytes(32), False)
    exp["ghost_rid"] = 0x000000005502
    time.sleep(0.12)  # a NO_SESSION per 100 ms per address
    s.send(v5.seal(ghost, v5.header(v5.REQUEST, ECHO, exp["ghost_rid"], 3), b"boo", True))
    nos = _recv_all(s, 0.3)
    assert [len(x) for x in nos] == [30], "one NO_SESSION"
    exp["cookie"] = v5.random_id()
    s.send(v5.header(v5.COOKIE, 0, exp["cookie"], 44) + bytes(range(44)))  # crafted, the wrong way: dropped
    s.close()
    return exp


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """One capture of every scenario: (its path, the expectations, the key files)."""
    d = tmp_path_factory.mktemp("wireshark")
    k1, k2 = Key.generate(1), Key.generate(2)
    keys = KeyTable([k1, k2], skew=30.0)
    table, client_key = d / "keys.json", d / "client.json"
    keys.save(table)  # the files `splitrpc keys new FILE --client-out CLIENT` writes
    save_client_key(k1, client_key)
    plain = splitrpc.Server("127.0.0.1", 0, wait="block")
    keyed = splitrpc.Server("127.0.0.1", 0, wait="block", keys=keys, legacy_v4=True)
    for srv in (plain, keyed):
        register_builtin_services(srv)
        srv.start()
    cap = d / "all.pcapng"
    ports = {"plain_port": plain.port, "keyed_port": keyed.port}
    try:
        dump = _start_capture(cap, [plain.port, keyed.port])
        try:
            exp = _traffic(plain, keyed, k1, k2)
            time.sleep(0.3)
        finally:
            dump.terminate()
            dump.wait(10)
    finally:
        plain.close()
        keyed.close()
    exp.update(ports, k1=k1, k2=k2)
    return cap, exp, table, client_key


def _tshark(cap, *opts):
    """tshark -2 with the dissector: one dict per frame (fields present only; several values joined by ';')."""
    cmd = [TSHARK, "-2", "-n", "-r", str(cap), "-X", f"lua_script:{LUA}", *opts, "-T", "fields", "-E", "separator=/t",
           "-E", "occurrence=a", "-E", "aggregator=;"]
    for f in FIELDS:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Lua" not in out.stderr, out.stderr
    rows = [dict((f, v) for f, v in zip(FIELDS, line.split("\t")) if v) for line in out.stdout.splitlines()]
    lua_errors = [r for r in rows if "Lua Error" in r.get("_ws.expert.message", "")]
    assert not lua_errors, lua_errors[0]
    return rows


@pytest.fixture(scope="module")
def keyed_rows(captured):
    cap, _, table, _ = captured
    return _tshark(cap, "-o", f"splitrpc.key_file:{table}")


@pytest.fixture(scope="module")
def keyless_rows(captured):
    return _tshark(captured[0])


def _one(rows, **want):
    """The one frame whose fields have these values (keys with '.' written as '__')."""
    got = _all(rows, **want)
    assert len(got) == 1, (want, [r.get("_ws.col.Info") for r in got])
    return got[0]


def _all(rows, **want):
    want = {k.replace("__", "."): v for k, v in want.items()}
    return [r for r in rows if all(r.get(k) == v for k, v in want.items())]


def _rid(rid):
    return f"0x{rid:016x}"


def _frame(r):
    return int(r["frame.number"])


def _check16(version, typ, func_id, rid, msg_len):
    return f"0x{int.from_bytes(pack(version, typ, func_id, rid, 0, 1, msg_len, 0)[4:6], 'big'):04x}"


def test_every_version_call_and_its_reply(captured, keyed_rows):
    """Versions 1 to 4 from the page's client: every header field, the checks, names, the Info column,
    and the reply linked to its request with its time."""
    _, exp, _, _ = captured
    out = struct.pack("<256f", *[i / 8 + 1 for i in range(256)])
    for name, version in (("v1", 1), ("v2", 2), ("v3", 3), ("v4", 4)):
        rid = exp[name]
        q = _one(keyed_rows, splitrpc__req_id=_rid(rid), splitrpc__type="0")
        r = _one(keyed_rows, splitrpc__req_id=_rid(rid), splitrpc__type="1")
        for row, typ, data in ((q, 0, VEC), (r, 1, out)):
            assert row["splitrpc.magic"] == "0xa5"
            assert (row["splitrpc.version"], row["splitrpc.func_id"], row["splitrpc.func_name"]) == \
                (str(version), "1", "vecadd")
            assert (row["splitrpc.seq"], row["splitrpc.nseg"], row["splitrpc.msg_len"], row["splitrpc.aux"]) == \
                ("0", "1", "1024", "0")
            assert row["splitrpc.data"] == data.hex() and row["splitrpc.data_len"] == "1024"
            width = 16 if version == 1 else 12
            assert row["_ws.col.Info"].startswith(
                f"{('REQUEST', 'RESPONSE')[typ]} vecadd(1) req=0x{rid:0{width}x} v{version}"), row["_ws.col.Info"]
            if version == 1:
                assert "splitrpc.check16" not in row
            else:
                assert row["splitrpc.check16"] == _check16(version, typ, 1, rid, 1024)
                assert row["splitrpc.check16.status"] == "1"
            if version == 3:
                want = int.from_bytes(seal(pack(3, typ, 1, rid, 0, 1, 1024, 0) + data)[-4:], "big")
                assert (row["splitrpc.check32"], row["splitrpc.check32.status"]) == (f"0x{want:08x}", "1")
            else:
                assert "splitrpc.check32" not in row
        assert q["splitrpc.response_in"] == r["frame.number"] and r["splitrpc.request_in"] == q["frame.number"]
        t = float(r["splitrpc.time"])
        assert 0 < t < 1 and abs(t - (float(r["frame.time_epoch"]) - float(q["frame.time_epoch"]))) < 2e-6


def test_ping_describe_and_an_error(captured, keyed_rows):
    _, exp, _, _ = captured
    for name, fid, fname in (("ping", PING, "ping"), ("describe", DESCRIBE, "describe")):
        for typ in ("0", "1"):
            row = _one(keyed_rows, splitrpc__req_id=_rid(exp[name]), splitrpc__type=typ)
            assert (row["splitrpc.func_id"], row["splitrpc.func_name"]) == (str(fid), fname)
            assert f" {fname}({fid}) " in row["_ws.col.Info"]
    e = _one(keyed_rows, splitrpc__req_id=_rid(exp["unknown"]), splitrpc__type="2")
    assert (e["splitrpc.error"], e["splitrpc.error.name"], e["splitrpc.error.text"]) == \
        ("1", "UNKNOWN_FUNCTION", exp["unknown_text"])
    assert e["_ws.col.Info"].startswith("ERROR UNKNOWN_FUNCTION func(99) ")
    assert "splitrpc.func_name" not in e
    q = _one(keyed_rows, splitrpc__req_id=_rid(exp["unknown"]), splitrpc__type="0")
    assert q["splitrpc.response_in"] == e["frame.number"] and e["splitrpc.request_in"] == q["frame.number"]


def test_names_from_describe(captured, keyed_rows):
    """Each server's describe reply names its functions in every call to it (the keyed server's came in
    a version 5 session, so its data was found at the suite's offset), and only to it."""
    _, exp, _, _ = captured
    for port in (exp["plain_port"], exp["keyed_port"]):
        to = [r for r in keyed_rows if r.get("udp.dstport") == str(port) and r.get("splitrpc.func_id") in ("1", "3")
              and r.get("splitrpc.check16.status", "1") == "1" and r.get("splitrpc.type") == "0"]
        assert len(to) >= 3
        assert {(r["splitrpc.func_id"], r.get("splitrpc.func_name")) for r in to} == {("1", "vecadd"), ("3", "echo")}


def test_damaged_header_and_payload(captured, keyed_rows):
    _, exp, _, _ = captured
    h = _one(keyed_rows, splitrpc__req_id=_rid(exp["bad16_rid"]))
    assert (h["splitrpc.check16"], h["splitrpc.check16.status"]) == (f"0x{exp['bad16_check']:04x}", "0")
    assert "Bad header check (CRC-16)" in h["_ws.expert.message"] and h["_ws.col.Info"].endswith("[BAD]")
    d = _one(keyed_rows, splitrpc__req_id=_rid(0xBAD00002))
    assert d["splitrpc.check16.status"] == "1"
    assert (d["splitrpc.check32"], d["splitrpc.check32.status"]) == (f"0x{exp['bad32_check']:08x}", "0")
    assert "Bad data check (CRC-32C)" in d["_ws.expert.message"]
    for row in (h, d):  # nothing is believed of them: no call, no reply
        assert "splitrpc.response_in" not in row and "splitrpc.retransmission" not in row


def test_v4_trailer_and_tags(captured, keyed_rows, keyless_rows):
    """With the server's key table every signed datagram's tag is Good and the forged one Bad; without a
    key file none is verified; with the client's key file (key 1 alone) key 2's are not verified."""
    cap, exp, _, client_key = captured
    q = _one(keyed_rows, splitrpc__req_id=_rid(exp["v4"]), splitrpc__type="0")
    assert (q["splitrpc.v4.key_id"], q["splitrpc.v4.sender"], q["splitrpc.v4.counter"]) == \
        ("1", f"0x{exp['v4_sender']:016x}", "1")
    t32 = int(q["splitrpc.v4.time"])
    assert 0 <= (t32 - exp["v4_time"]) % (1 << 32) < 2000
    when = calendar.timegm(time.strptime(q["splitrpc.v4.time_abs"].split(".")[0], "%b %d, %Y %H:%M:%S"))
    assert abs(when - exp["v4_time"] / 1000) < 3, q["splitrpc.v4.time_abs"]
    signed = [r for r in keyed_rows if r.get("splitrpc.version") == "4"]
    assert len(signed) == 5
    forged = _one(signed, splitrpc__req_id=_rid(exp["forged"]))
    assert forged["splitrpc.v4.tag.status"] == "0" and "Bad version 4 tag" in forged["_ws.expert.message"]
    assert [r["splitrpc.v4.tag.status"] for r in signed if r is not forged] == ["1"] * 4
    assert {r["splitrpc.v4.key_id"] for r in signed} == {"1", "2"}
    unkeyed = [r for r in keyless_rows if r.get("splitrpc.version") == "4"]
    assert [(r["splitrpc.v4.tag.status"], r["splitrpc.v4.tag.note"]) for r in unkeyed] == \
        [("2", "not verified: no key")] * 5
    one_key = [r for r in _tshark(cap, "-o", f"splitrpc.key_file:{client_key}") if r.get("splitrpc.version") == "4"]
    assert [(r["splitrpc.v4.key_id"], r["splitrpc.v4.tag.status"], r.get("splitrpc.v4.tag.note"))
            for r in one_key] == [("1", "1", None), ("1", "1", None), ("2", "2", "not verified: no key for key id 2"),
                                  ("2", "2", "not verified: no key for key id 2"), ("1", "0", None)]


def test_v5_handshake_and_data(captured, keyed_rows, keyless_rows):
    _, exp, _, _ = captured
    hs = _rid(exp["hs"])
    init = _one(keyed_rows, splitrpc__req_id=hs, splitrpc__type="3")
    acc = _one(keyed_rows, splitrpc__req_id=hs, splitrpc__type="4")
    assert (init["splitrpc.v5.key_id"], init["splitrpc.v5.e_c"], init["splitrpc.v5.time"]) == \
        ("2", exp["e_c"].hex(), str(exp["v5_time"]))
    assert (init["splitrpc.v5.flags"], init["splitrpc.v5.prev"], init["splitrpc.msg_len"]) == \
        ("0x00000000", "0x0000000000000000", "104")
    assert (init["splitrpc.v5.mac1"], init["splitrpc.v5.mac1.status"]) == (exp["mac1"].hex(), "1")
    session = f"0x{exp['session']:016x}"
    assert (acc["splitrpc.v5.key_id"], acc["splitrpc.v5.session"], acc["splitrpc.v5.e_s"]) == \
        ("2", session, exp["e_s"].hex())
    assert init["splitrpc.response_in"] == acc["frame.number"] and acc["splitrpc.request_in"] == init["frame.number"]
    q = _one(keyed_rows, splitrpc__req_id=_rid(exp["v5"]), splitrpc__type="0")
    r = _one(keyed_rows, splitrpc__req_id=_rid(exp["v5"]), splitrpc__type="1")
    for row, counter in ((q, "1"), (r, str(exp["v5_reply_counter"]))):
        assert (row["splitrpc.v5.session"], row["splitrpc.v5.counter"]) == (session, counter)
        assert (row["splitrpc.data"], row["splitrpc.v5.suite"], row["splitrpc.v5.encrypted"]) == \
            (b"hello again".hex(), "ChaCha20-Poly1305", "0")
        assert (row["splitrpc.v5.tag.status"], row["splitrpc.v5.tag.note"]) == \
            ("2", "not verified: session keys are not in the capture")
        assert "splitrpc.v5.tag_head" not in row
    assert q["splitrpc.response_in"] == r["frame.number"] and 0 < float(r["splitrpc.time"]) < 1
    assert sorted(r["splitrpc.v5.mac1.status"] for r in keyed_rows if r.get("splitrpc.type") == "3") == \
        ["0", "1", "1", "1"]  # splitrpc's client's two INITs verify too
    bad = _one(keyed_rows, splitrpc__req_id=_rid(exp["bad_init"]))
    assert bad["splitrpc.v5.mac1.status"] == "0" and "Bad INIT mac1" in bad["_ws.expert.message"]
    assert [(r["splitrpc.v5.mac1.status"], r["splitrpc.v5.mac1.note"]) for r in keyless_rows
            if r.get("splitrpc.type") == "3"] == [("2", "not verified: no key")] * 4
    ghost = _one(keyed_rows, splitrpc__req_id=_rid(exp["ghost_rid"]), splitrpc__type="0")
    assert ghost["splitrpc.v5.suite"].startswith("unknown") and ghost["splitrpc.data"] == b"boo".hex()
    nos = _one(keyed_rows, splitrpc__req_id=_rid(exp["ghost_rid"]), splitrpc__type="6")
    assert nos["splitrpc.v5.session"] == ghost["splitrpc.v5.session"] == f"0x{exp['ghost']:016x}"
    assert nos["splitrpc.request_in"] == ghost["frame.number"]
    cookie = _one(keyed_rows, splitrpc__req_id=_rid(exp["cookie"]))
    assert (cookie["splitrpc.v5.nonce"], cookie["splitrpc.v5.cookie"]) == (bytes(range(12)).hex(),
                                                                          bytes(range(12, 44)).hex())


def test_v5_sessions_of_splitrpc_client(captured, keyed_rows):
    """splitrpc's own client: the suite each ACCEPT granted names its session's data datagrams (AEGIS-128L's
    16 more tag bytes before the trailer), and an encrypting session's data is not the plaintext."""
    _, exp, _, _ = captured
    accepts = [r for r in keyed_rows if r.get("splitrpc.type") == "4"]
    assert len(accepts) == 3
    data = [r for r in keyed_rows if r.get("splitrpc.version") == "5" and r.get("splitrpc.type") in ("0", "1")
            and r["splitrpc.v5.session"] in {a["splitrpc.v5.session"] for a in accepts[:2]}]
    assert len(data) == 6
    for r in data:
        assert r["splitrpc.data_len"] == r["splitrpc.msg_len"] and r["splitrpc.v5.tag.status"] == "2"
    vec = _one(data, splitrpc__func_id="1", splitrpc__type="0")
    assert vec["splitrpc.data"] == VEC.hex()
    if exp["aegis"]:
        assert accepts[0]["splitrpc.v5.flags.aegis"] == "1"
        assert {r["splitrpc.v5.suite"] for r in data[:4]} == {"AEGIS-128L"}
        assert all(len(r["splitrpc.v5.tag_head"]) == 32 for r in data[:4])
    secret = _one(data, splitrpc__func_id="3", splitrpc__type="0")
    assert (secret["splitrpc.v5.suite"], secret["splitrpc.v5.encrypted"]) == ("ChaCha20-Poly1305", "1")
    assert secret["splitrpc.data_len"] == "12" and secret["splitrpc.data"] != b"secret words".hex()


def test_lost_segment_retransmitted_and_reassembled(captured, keyed_rows):
    _, exp, _, _ = captured
    segs = _all(keyed_rows, splitrpc__req_id=_rid(exp["lost"]), splitrpc__type="0")
    assert [r["splitrpc.seq"] for r in segs] == ["0", "2", "0", "1", "2"]
    f = [_frame(r) for r in segs]
    assert [r.get("splitrpc.retransmission") for r in segs] == [None, None, str(f[0]), None, str(f[1])]
    done = segs[3]
    assert done["splitrpc.reassembled"] == f"2500 bytes in 3 segments, frames {f[0]},{f[1]},{f[3]}"
    assert done["splitrpc.segment"] == f"{f[0]};{f[1]};{f[3]}" and done["splitrpc.reassembled.length"] == "2500"
    assert done["splitrpc.reassembled.data"] == exp["lost_data"].hex()
    assert [r.get("splitrpc.reassembled_in") for r in segs] == [str(f[3]), str(f[3]), None, None, None]
    assert "[retransmission of" in segs[2]["_ws.col.Info"] and " seg 2/3 v2 [reassembled 2500 bytes]" in \
        done["_ws.col.Info"]
    reply = _one(keyed_rows, splitrpc__req_id=_rid(exp["lost"]), splitrpc__type="1")
    assert reply["splitrpc.request_in"] == str(f[0]) and segs[0]["splitrpc.response_in"] == reply["frame.number"]
    assert 0.05 <= float(reply["splitrpc.time"]) < 1
    big = _all(keyed_rows, splitrpc__req_id=_rid(exp["big"]))
    assert [(r["splitrpc.type"], r["splitrpc.seq"]) for r in big] == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]
    assert big[1]["splitrpc.reassembled.length"] == big[3]["splitrpc.reassembled.length"] == "100000"
    assert big[1]["splitrpc.reassembled.data"] == big[3]["splitrpc.reassembled.data"]
    assert big[2]["splitrpc.reassembled_in"] == big[3]["frame.number"]
    assert big[0]["splitrpc.response_in"] == big[1]["splitrpc.response_in"] == big[2]["frame.number"]


def test_every_reply_linked(keyed_rows):
    """Every reply (RESPONSE, ERROR, ACCEPT, NO_SESSION) names its request, which names it back."""
    by_frame = {r["frame.number"]: r for r in keyed_rows}
    replies = [r for r in keyed_rows if r.get("splitrpc.type") in ("1", "2", "4", "6")]
    assert len(replies) >= 15
    for r in replies:
        q = by_frame[r["splitrpc.request_in"]]
        assert (q["splitrpc.req_id"], q["splitrpc.func_id"]) == (r["splitrpc.req_id"], r["splitrpc.func_id"])
        first = min(_frame(x) for x in replies if x["splitrpc.request_in"] == q["frame.number"])
        assert q["splitrpc.response_in"] == str(first)  # the reply's first datagram
        assert 0 < float(r["splitrpc.time"]) < 1


def test_port_preference_without_the_heuristic(captured, keyed_rows):
    """With the heuristic off, the port preference alone decodes: every frame the heuristic found on the plain
    server's port, none on the keyed server's."""
    _, exp, _, _ = captured
    rows = _tshark(captured[0], "-o", "splitrpc.heuristic:FALSE", "-o", f"splitrpc.port:{exp['plain_port']}")
    plain, keyed = str(exp["plain_port"]), str(exp["keyed_port"])

    def decoded(rs, port):
        return [r["frame.number"] for r in rs
                if port in (r["udp.srcport"], r["udp.dstport"]) and "splitrpc.version" in r]
    assert len(decoded(keyed_rows, plain)) >= 20 and decoded(rows, plain) == decoded(keyed_rows, plain)
    assert len(decoded(keyed_rows, keyed)) >= 20 and decoded(rows, keyed) == []


DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


def _page_examples(name):
    """The example datagrams of a protocol page: each code block's leading hex bytes, and each `a5 ...` in
    backquotes."""
    with open(os.path.join(DOCS, name)) as f:
        text = f.read()
    out = [bytes.fromhex(m) for m in re.findall(r"`(a5(?: [0-9a-f]{2}){21,})`", text)]
    for block in re.findall(r"```\n(.*?)```", text, re.S):
        hexes = [re.match(r"((?:[0-9a-f]{2} )*[0-9a-f]{2})(?:\s|$)", ln) for ln in block.splitlines()]
        if all(hexes) and hexes:
            out.append(bytes.fromhex(" ".join(m.group(1) for m in hexes)))
    return out


def _pcap(path, datagrams, t0=1764331200.0):
    """A pcap (raw IPv4) of UDP datagrams between 127.0.0.1:40000 and :9230; a reply (type 1, 2, 4, 5, 6) from
    the server."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101)]
    for i, d in enumerate(datagrams):
        sport, dport = (9230, 40000) if d[1] & 0xF in (1, 2, 4, 5, 6) else (40000, 9230)
        udp = struct.pack(">HHHH", sport, dport, 8 + len(d), 0) + d
        ip = bytearray(struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i, 0, 64, 17, 0, b"\x7f\0\0\1",
                                   b"\x7f\0\0\1"))
        c = sum(struct.unpack(">10H", ip))
        c = (c & 0xFFFF) + (c >> 16)
        ip[10:12] = (~((c & 0xFFFF) + (c >> 16)) & 0xFFFF).to_bytes(2, "big")
        pkt = bytes(ip) + udp
        t = t0 + i / 1000
        out.append(struct.pack("<IIII", int(t), round((t % 1) * 1e6), len(pkt), len(pkt)) + pkt)
    path.write_bytes(b"".join(out))


def test_the_pages_worked_examples(tmp_path):
    """The examples of PROTOCOL-v2.md to -v5.md, on the default port with the heuristic off: their checks Good,
    the version 4 tag and every INIT's mac1 Good with the pages' key 7, each session's suite from its ACCEPT
    (AEGIS-128L's tag split around the trailer), and a session whose ACCEPT is not there: suite unknown."""
    v2, v3 = _page_examples("PROTOCOL-v2.md")[0], _page_examples("PROTOCOL-v3.md")[0]
    (v4,) = _page_examples("PROTOCOL-v4.md")
    v5s = _page_examples("PROTOCOL-v5.md")
    assert (len(v2), len(v3), len(v4), len(v5s)) == (22, 30, 66, 18)
    _pcap(tmp_path / "pages.pcap", [v2 + bytes(1024), v3, v4, *v5s])
    (tmp_path / "key7.json").write_text(json.dumps({"id": 7, "secret": bytes(range(32)).hex()}))
    rows = _tshark(tmp_path / "pages.pcap", "-o", "splitrpc.heuristic:FALSE", "-o",
                   f"splitrpc.key_file:{tmp_path / 'key7.json'}")
    assert len(rows) == 21 and all(r.get("splitrpc.check16.status") == "1" for r in rows)
    assert (rows[0]["splitrpc.check16"], rows[0]["splitrpc.req_id"], rows[0]["splitrpc.msg_len"]) == \
        ("0xfc68", "0x0000000000000001", "1024")
    assert (rows[1]["splitrpc.check32"], rows[1]["splitrpc.check32.status"], rows[1]["splitrpc.data"]) == \
        ("0xed991044", "1", "01020304")
    assert (rows[2]["splitrpc.v4.key_id"], rows[2]["splitrpc.v4.sender"], rows[2]["splitrpc.v4.counter"],
            rows[2]["splitrpc.v4.time"], rows[2]["splitrpc.v4.tag.status"]) == \
        ("7", "0x0102030405060708", "1", str(0x12345678), "1")
    v5 = rows[3:]
    inits = [r for r in v5 if r["splitrpc.type"] == "3"]
    assert [(r["splitrpc.v5.mac1.status"], r["splitrpc.v5.flags"], r["splitrpc.v5.prev"]) for r in inits] == \
        [("1", "0x00000000", "0x0000000000000000"), ("1", "0x00000000", "0x1122334455667788"),
         ("1", "0x00000002", "0x0000000000000000"), ("1", "0x00000004", "0x0000000000000000")]
    assert {r["splitrpc.v5.time"] for r in inits} == {"1764331200000"}
    data = [r for r in v5 if r["splitrpc.type"] in ("0", "1")]
    assert [(r["splitrpc.v5.session"][-2:], r["splitrpc.v5.suite"].split(" ")[0], r["splitrpc.data_len"])
            for r in data] == [("88", "ChaCha20-Poly1305", "4"), ("88", "ChaCha20-Poly1305", "4"),
                               ("89", "unknown", "4"), ("8a", "AES-256-GCM", "4"), ("8a", "AES-256-GCM", "4"),
                               ("8b", "unknown", "4"), ("8b", "unknown", "4"), ("90", "AEGIS-128L", "4"),
                               ("90", "AEGIS-128L", "4"), ("91", "unknown", "20"), ("91", "unknown", "20")]
    aegis_q = data[7]
    assert (aegis_q["splitrpc.data"], aegis_q["splitrpc.v5.tag_head"], aegis_q["splitrpc.v5.tag"]) == \
        ("01020304", "041f9c9c891536729e2a29f1ab46d361", "65fb9b733d51c01c3211b40a1e7ae751")
    assert data[1]["splitrpc.request_in"] == data[0]["frame.number"] and \
        data[8]["splitrpc.request_in"] == data[7]["frame.number"]


LUA_TEST = """
local M = package.loaded.splitrpc_dissector
local function unhex(h) return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end)) end
local function hex(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end
for line in io.lines(os.getenv("SPLITRPC_LUA_VECTORS")) do
    local key, msg, n = line:match("^(%x*)-(%x*)-(%d+)$")
    key, msg = unhex(key), unhex(msg)
    print(string.format("VEC %s %04x %08x", hex(M.blake2b(key, msg, tonumber(n))), M.crc16(msg), M.crc32c(msg)))
end
"""


def test_lua_blake2b_and_crcs_match_python(tmp_path):
    """The dissector's pure-Lua BLAKE2b (keyed and not, every block boundary, digests 1 to 64) and CRCs
    against hashlib, binascii.crc_hqx and the pages' CRC-32C."""
    rnd = __import__("random").Random(5)
    vectors = [(b"", b"123456789", 64)]
    for length in (0, 1, 3, 111, 127, 128, 129, 255, 256, 257, 1000, 3000):
        for key_len, n in ((0, 64), (32, 16), (64, 32), (1, 1), (32, 64)):
            vectors.append((rnd.randbytes(key_len), rnd.randbytes(length), n))
    (tmp_path / "vectors").write_text("".join(f"{k.hex()}-{m.hex()}-{n}\n" for k, m, n in vectors))
    (tmp_path / "test.lua").write_text(LUA_TEST)
    out = subprocess.run([TSHARK, "-X", f"lua_script:{LUA}", "-X", f"lua_script:{tmp_path / 'test.lua'}", "-G",
                          "heuristic-decodes"], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, SPLITRPC_LUA_VECTORS=str(tmp_path / "vectors")))
    got = [ln.split()[1:] for ln in out.stdout.splitlines() if ln.startswith("VEC ")]
    want = [[hashlib.blake2b(m, key=k, digest_size=n).hexdigest(), f"{binascii.crc_hqx(m, 0xFFFF):04x}",
             f"{crc32c(m):08x}"] for k, m, n in vectors]
    assert got == want, out.stderr
    assert got[0][1:] == ["29b1", "e3069283"]  # the pages' check values of "123456789"


def test_json_output_of_a_call(captured):
    """tshark -T json (the form the issue names): a version 3 request's tree carries its fields by
    name, the checks' verdicts by name, and the link to its reply."""
    cap, exp, _, _ = captured
    out = subprocess.run([TSHARK, "-2", "-n", "-r", str(cap), "-X", f"lua_script:{LUA}", "-T", "json",
                          "-J", "frame splitrpc", "-Y", f"splitrpc.req_id == {_rid(exp['v3'])}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    pkts = [p["_source"]["layers"] for p in json.loads(out.stdout)]
    assert len(pkts) == 2

    def flat(tree, acc):
        for k, v in tree.items():
            if isinstance(v, dict):
                flat(v, acc)
            else:
                acc.setdefault(k, v)
        return acc
    q, r = (flat(p["splitrpc"], {}) for p in pkts)
    assert (q["splitrpc.version"], q["splitrpc.type"], q["splitrpc.func_id"], q["splitrpc.msg_len"]) == \
        ("3", "0", "1", "1024")
    assert q["splitrpc.check16.status"] == q["splitrpc.check32.status"] == "1"  # Good (Wireshark's numbering)
    assert r["splitrpc.request_in"] == pkts[0]["frame"]["frame.number"]
    assert q["splitrpc.response_in"] == pkts[1]["frame"]["frame.number"] and 0 < float(r["splitrpc.time"]) < 1


def test_hostile_datagrams_are_shown_bad_never_believed(tmp_path):
    """From the outside attack (tests/attacks/wireshark_top_s70): a version 5 type 7 and a version 6
    datagram with a right CRC-16 are marked malformed and [BAD] (no Lua error); a function name with
    terminal escapes from a describe reply is printed escaped; segments whose sizes break the rules
    as a whole are marked when the message completes; a segment repeated with other bytes is flagged."""
    def h(ver, typ, rid, seq=0, nseg=1, msg_len=0, func=1):
        return pack(ver, typ, func, rid, seq, nseg, msg_len, 0)
    name = "\x1b[2J\x1b[31mPWNED\x07"
    desc = json.dumps({"describe": 1, "functions": [{"id": 1, "name": name}]}).encode()
    dgrams = [h(5, 7, 0x11), h(6, 0, 0x12),
              h(2, 0, 0x13, func=DESCRIBE, msg_len=13) + b"SRPC-DESCRIBE",
              h(2, 1, 0x13, func=DESCRIBE, msg_len=len(desc)) + desc,
              h(2, 0, 0x14, msg_len=4) + b"abcd",
              # 10 + 9 + 5 bytes for a msg_len of 25: each datagram alone is possible, the whole is not
              h(2, 0, 0x15, 0, 3, 25) + b"a" * 10, h(2, 0, 0x15, 1, 3, 25) + b"b" * 9, h(2, 0, 0x15, 2, 3, 25) + b"c" * 5,
              # segment 0 twice with other bytes, then the last
              h(2, 0, 0x16, 0, 2, 15) + b"A" * 10, h(2, 0, 0x16, 0, 2, 15) + b"B" * 10, h(2, 0, 0x16, 1, 2, 15) + b"z" * 5]
    _pcap(tmp_path / "hostile.pcap", dgrams)
    rows = _tshark(tmp_path / "hostile.pcap")
    assert len(rows) == len(dgrams)
    for r in rows[:2]:
        assert "not a datagram of the protocol" in r["_ws.expert.message"] and r["_ws.col.Info"].endswith("[BAD]")
    info = rows[4]["_ws.col.Info"]
    assert info.startswith("REQUEST \\x1b[2J\\x1b[31mPWNED\\x07(1) ") and "\x1b" not in info
    assert rows[7]["_ws.col.Info"].endswith("[reassembled 24 bytes] [BAD]")
    assert "the segments hold 24 bytes, msg_len says 25" in rows[7]["_ws.expert.message"]
    assert "other bytes than frame 9's" in rows[9]["_ws.expert.message"]
    assert rows[10]["splitrpc.reassembled.data"] == (b"A" * 10 + b"z" * 5).hex()  # the first copy kept
