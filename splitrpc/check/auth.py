"""auth.py: the `splitrpc check` section `auth`: a loopback server with a key table proves that authenticated calls are served and that forged, changed, replayed, unknown-key and unsigned datagrams are dropped unanswered and counted, with no function reached (docs/PROTOCOL-v4.md)."""
from __future__ import annotations

import binascii
import hashlib
import socket
import struct
import time

import splitrpc
from splitrpc._native import auth as _auth
from splitrpc.check.section import Context, Result, Section, Skipped, expect
from splitrpc.check.serving import LOOPBACK, loopback_server, settled

ECHO, OTHER = 1, 2
HDR = struct.Struct(">BBHQHHIH")  # the header as docs/PROTOCOL.md lays it out


def _v4(func_id: int, req_id: int, data: bytes, key: splitrpc.Key, sender: int, counter: int) -> bytes:
    """A version 4 request made from docs/PROTOCOL-v4.md with hashlib, not with splitrpc's C code."""
    h = bytearray(HDR.pack(0xA5, 0x40, func_id, req_id, 0, 1, len(data), 0))
    h[4:6] = binascii.crc_hqx(bytes(h[:4]) + b"\0\0" + bytes(h[6:]), 0xFFFF).to_bytes(2, "big")
    head = struct.pack(">IQQI", key.id, sender, counter, int(time.time() * 1000) % (1 << 32))
    signed = bytes(h) + data + head
    return signed + hashlib.blake2b(signed, key=key.secret, digest_size=16).digest()


def run_auth(ctx: Context) -> Result:
    if not _auth.available():
        raise Skipped("libsodium's shared library is not installed (Debian: libsodium23)")
    runs = {"echo": 0, "other": 0}

    def setup(srv: splitrpc.Server) -> None:
        def fn(name: str):  # type: ignore[no-untyped-def]
            def run(reqs, resps):  # type: ignore[no-untyped-def]
                runs[name] += len(reqs)
                for q, r in zip(reqs, resps):
                    r[:len(q)] = q
                return [len(q) for q in reqs]
            return run
        srv.add_function(fn("echo"), ECHO, "echo", raw=True, max_request=4096, max_response=4096)
        srv.add_function(fn("other"), OTHER, "other", raw=True, max_request=64, max_response=64)

    good, narrow, outsider = (splitrpc.Key.generate(1), splitrpc.Key.generate(2, functions=["echo"]),
                              splitrpc.Key.generate(3))
    with loopback_server(setup, keys=splitrpc.KeyTable([good, narrow]), legacy_v4=True) as srv:  # (its probe: version 4)
        with splitrpc.Client(LOOPBACK, srv.port, key=good, timeout=5.0) as c:
            for n in (1, 1000, 4000):
                expect(c.call(ECHO, bytes(range(256)) * (n // 256) + bytes(n % 256)) ==
                       bytes(range(256)) * (n // 256) + bytes(n % 256), f"an authenticated {n} B call came back wrong")
        with splitrpc.Client(LOOPBACK, srv.port, key=narrow, timeout=5.0) as c:
            try:
                c.call(OTHER, b"x")
                forbidden = "answered"
            except splitrpc.Forbidden:
                forbidden = "FORBIDDEN"
            expect(forbidden == "FORBIDDEN", f"a call its key may not make was {forbidden}, not FORBIDDEN")
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect((LOOPBACK, srv.port))
        s.settimeout(2.0)
        try:
            genuine = _v4(ECHO, 77, b"made from the page", good, 0xC0FFEE, 1)
            s.send(genuine)
            reply = s.recv(65535)
            expect(_auth.tag_ok(good.secret, reply) and reply[22:-40] == b"made from the page",
                   "a request signed with hashlib from docs/PROTOCOL-v4.md was not answered with a reply signed "
                   "with its key")
            before = dict(runs)
            hostile = {
                "auth_bad_tag": [genuine[:-1] + bytes([genuine[-1] ^ 1]),                     # forged tag
                                 genuine[:30] + bytes([genuine[30] ^ 1]) + genuine[31:]],      # changed payload
                "auth_replay": [genuine],                                                     # captured, sent again
                "auth_unknown_key": [_v4(ECHO, 78, b"x", outsider, 0xC0FFEE, 1)],             # not in the table
                "auth_missing": [HDR.pack(0xA5, 0x10, ECHO, 79, 0, 1, 1, 0) + b"x"],          # unsigned (version 1)
            }
            st0 = srv.stats()["drops"]
            for dgrams in hostile.values():
                for d in dgrams:
                    s.send(d)
            want = {k: len(v) for k, v in hostile.items()}
            st = settled(srv, lambda st: all(st["drops"][k] - st0[k] >= n for k, n in want.items()), timeout=5.0)
            got = {k: st["drops"][k] - st0[k] for k in want}
            s.settimeout(0.2)
            try:
                s.recv(65535)
                answered = True
            except socket.timeout:
                answered = False
        finally:
            s.close()
    expect(got == want, f"drops by reason {got}, expected {want}")
    expect(not answered, "a hostile datagram was answered")
    expect(runs == before, f"a hostile datagram reached a function: runs {before} -> {runs}")
    return Result(summary=f"authenticated calls served (1, 1000, 4000 B; a request signed from the page with hashlib "
                          f"answered with a signed reply); a call its key may not make refused FORBIDDEN; "
                          f"{sum(want.values())} hostile datagrams (forged tag, changed payload, replay, unknown "
                          f"key, unsigned) dropped unanswered, counted by reason, no function reached",
                  facts={"drops": got, "auth": st["auth"]},
                  markdown=[f"- authentication (docs/PROTOCOL-v4.md): hostile datagrams dropped by reason {got}, none "
                            f"answered, none reached a function; FORBIDDEN for a call outside its key's functions"])


SECTIONS = [
    Section("auth", "authenticated calls: served and signed; forged, changed, replayed, unknown-key and unsigned "
            "datagrams dropped unanswered and counted, no function reached", run_auth, cap_s=10, stage="host", tier="core"),
]
