"""Protocol version 5 (docs/PROTOCOL-v5.md): the page's worked example is what its reference implementation (tests/foreign_v5.py, over the `cryptography` package's OpenSSL and PyNaCl's libsodium for AEGIS-128L) makes, byte for byte, and what that implementation takes: every item of the example, its sessions (ChaCha20-Poly1305, AES-256-GCM and AEGIS-128L, authenticating and encrypting), both directions; a replay and any one-bit change refused. (native/tests/test_session.c holds the C core to the same bytes.)"""
import pathlib
import re

import pytest

pytest.importorskip("cryptography", reason="tests/foreign_v5.py needs the cryptography package ('.[test]')")
import foreign_v5 as v5  # noqa: E402

PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "PROTOCOL-v5.md"
PSK, EC, ES = bytes(range(32)), bytes(range(0x40, 0x60)), bytes(range(0x60, 0x80))
TIME = 1764331200000


def _example() -> tuple[list[bytes], dict[str, bytes]]:
    """The page's worked example: its code blocks (hex bytes, comments dropped) and its inline
    `name = hex` values."""
    text = PAGE.read_text()
    section = text[text.index("## Worked example"):text.index("## What version 5 protects")]
    blocks = []
    for block in re.findall(r"```\n(.*?)```", section, re.S):
        hexes = []
        for line in block.splitlines():
            hexes += re.findall(r"\b[0-9a-f]{2}\b", line.split("   ")[0] if "   " in line else line)
        blocks.append(bytes(int(x, 16) for x in hexes))
    inline = {m.group(1): bytes.fromhex(m.group(2).replace(" ", ""))
              for m in re.finditer(r"^(\w+) = `([0-9a-f ]+)`", section, re.M)}
    return blocks, inline


def test_the_pages_example_is_what_the_reference_makes():
    blocks, inline = _example()
    init = v5.make_init(PSK, 7, EC, 0x010203040506, time_ms=TIME)
    acc, server = v5.make_accept(PSK, init, ES, 0x1122334455667788, 0)
    client = v5.open_accept(PSK, init, EC, acc)
    req = v5.seal(client, v5.header(v5.REQUEST, 1, 1, 4), b"\x01\x02\x03\x04", True)
    resp = v5.seal(server, v5.header(v5.RESPONSE, 1, 1, 4), b"\x02\x03\x04\x05", False)
    init2 = v5.make_init(PSK, 7, EC, 0x010203040507, time_ms=TIME, flags=v5.FLAG_ENCRYPT)
    acc2, server2 = v5.make_accept(PSK, init2, ES, 0x1122334455667789, v5.FLAG_ENCRYPT)
    client2 = v5.open_accept(PSK, init2, EC, acc2)
    enc = v5.seal(client2, v5.header(v5.REQUEST, 1, 1, 4), b"\x01\x02\x03\x04", True)
    resume = v5.make_init(PSK, 7, EC, 0x010203040509, time_ms=TIME, prev=client)
    aes = []  # the AES-256-GCM suite: authenticating (flags 2), then encrypting (flags 3)
    for hs_id, session, flags in ((0x010203040508, 0x112233445566778A, v5.FLAG_AES),
                                  (0x01020304050B, 0x112233445566778B, v5.FLAG_AES | v5.FLAG_ENCRYPT)):
        i = v5.make_init(PSK, 7, EC, hs_id, time_ms=TIME, flags=flags)
        a, srv_side = v5.make_accept(PSK, i, ES, session, flags)
        cl_side = v5.open_accept(PSK, i, EC, a)
        assert cl_side.aes and cl_side.encrypt == bool(flags & v5.FLAG_ENCRYPT)
        q = v5.seal(cl_side, v5.header(v5.REQUEST, 1, 1, 4), b"\x01\x02\x03\x04", True)
        r = v5.seal(srv_side, v5.header(v5.RESPONSE, 1, 1, 4), b"\x02\x03\x04\x05", False)
        assert v5.open_(srv_side, q, True) == b"\x01\x02\x03\x04" and v5.open_(cl_side, r, False) == b"\x02\x03\x04\x05"
        aes += ([i, a] if not flags & v5.FLAG_ENCRYPT else []) + [q, r]
    aegis = []  # the AEGIS-128L suite: authenticating (flags 4), then encrypting (flags 5)
    for hs_id, session, flags in ((0x010203040510, 0x1122334455667790, v5.FLAG_AEGIS),
                                  (0x010203040511, 0x1122334455667791, v5.FLAG_AEGIS | v5.FLAG_ENCRYPT)):
        i = v5.make_init(PSK, 7, EC, hs_id, time_ms=TIME, flags=flags)
        a, srv_side = v5.make_accept(PSK, i, ES, session, flags)
        cl_side = v5.open_accept(PSK, i, EC, a)
        assert cl_side.aegis and not cl_side.aes and cl_side.encrypt == bool(flags & v5.FLAG_ENCRYPT)
        q = v5.seal(cl_side, v5.header(v5.REQUEST, 1, 1, 4), b"\x01\x02\x03\x04", True)
        r = v5.seal(srv_side, v5.header(v5.RESPONSE, 1, 1, 4), b"\x02\x03\x04\x05", False)
        assert len(q) == len(r) == 74
        assert v5.open_(srv_side, q, True) == b"\x01\x02\x03\x04" and v5.open_(cl_side, r, False) == b"\x02\x03\x04\x05"
        for k in range(len(q)):  # any one bit changed, either half of the tag included: refused
            bad = bytearray(q)
            bad[k] ^= 1 << (k % 8)
            assert v5.open_(v5.Session(srv_side.id, srv_side.k_c2s, srv_side.k_s2c, srv_side.encrypt, aegis=True),
                            bytes(bad), True) is None, k
        aegis += ([i, a] if not flags & v5.FLAG_ENCRYPT else []) + [q, r]
    assert blocks == [init, acc, req, resp, enc, resume, *aes, *aegis]
    assert inline["e_c"] == v5.x25519_public(EC) and inline["e_s"] == v5.x25519_public(ES)
    assert inline["k_c2s"] == client.k_c2s == server.k_c2s and inline["k_s2c"] == client.k_s2c == server.k_s2c
    assert len(init) == 126 and len(acc) == 86 and len(req) == 58
    # Taken by the other side once, and only once; any one-bit change refused.
    assert v5.open_(server, req, True) == b"\x01\x02\x03\x04" and v5.open_(server, req, True) is None
    assert v5.open_(server2, enc, True) == b"\x01\x02\x03\x04"
    fresh = v5.Session(server.id, server.k_c2s, server.k_s2c, False)
    for i in range(len(req)):
        for b in range(8):
            bad = bytearray(req)
            bad[i] ^= 1 << b
            assert v5.open_(fresh, bytes(bad), True) is None, (i, b)
    assert v5.open_(fresh, resp, True) is None  # a reply is not a request: the directions have their own keys
