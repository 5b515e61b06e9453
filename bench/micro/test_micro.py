"""test_micro.py: pytest-benchmark micro-benchmarks of the native hot paths as seen from Python; each checks what it measured.

Run once as tests with ``--benchmark-disable``; measure with ``pytest bench/micro --benchmark-enable``.
"""
import struct

import numpy as np
import pytest

import splitrpc
from splitrpc import wire

HDR_LEN = wire.HDR_LEN
MSG_LEN = 3 * 224 * 224 * 4  # 602112 bytes (588 KiB): the head service's request
HDR = dict(type=wire.RESPONSE, func_id=4, req_id=0x0123456789ABCDEF, seq=3, nseg=7, msg_len=MSG_LEN, aux=9)
# docs/PROTOCOL.md: magic, version << 4 | type, func_id, req_id, seq, nseg, msg_len, aux; big-endian.
HDR_BYTES = struct.pack(">BBHQHHIH", 0xA5, 0x10 | HDR["type"], HDR["func_id"], HDR["req_id"], HDR["seq"],
                        HDR["nseg"], HDR["msg_len"], HDR["aux"])


@pytest.fixture(scope="module")
def message() -> bytes:
    return np.random.default_rng(1).bytes(MSG_LEN)


@pytest.fixture
def reassembler():
    r = wire.Reassembler(MSG_LEN)
    try:
        yield r
    finally:
        r.close()


def segments(message: bytes, seg_size: int, version: int = 1) -> wire.Segments:
    """The datagrams of message at S = seg_size (cut by calling .segment() or .call)."""
    return wire.Segments(message, seg_size, dict(type=wire.REQUEST, func_id=4, req_id=77, version=version))


# ------------------------------------------------------------------ control header


def test_hdr_encode(benchmark):
    h = wire.Header(HDR)
    assert benchmark(*h.encode_call) == 0
    assert h.wire() == HDR_BYTES


def test_hdr_decode(benchmark):
    h = wire.Header(data=HDR_BYTES)
    assert benchmark(*h.decode_call) == 0
    assert h.fields(HDR) == HDR


# docs/PROTOCOL-v2.md: the same header with a 48-bit req_id and its CRC-16 in bytes 4..5.
HDR_V2 = dict(HDR, req_id=0x456789ABCDEF)


def test_hdr_encode_v2(benchmark):
    h = wire.Header(dict(HDR_V2, version=2))
    assert benchmark(*h.encode_call) == 0
    b = h.wire()
    assert b[1] >> 4 == 2 and int.from_bytes(b[4:6], "big") == h.check16()


def test_hdr_decode_v2(benchmark):
    encoded = wire.Header(dict(HDR_V2, version=2))
    assert encoded.encode() == 0
    h = wire.Header(data=encoded.wire())
    assert benchmark(*h.decode_call) == 0
    assert h.fields(HDR_V2) == HDR_V2 and h.fields()["version"] == 2


# ------------------------------------------------------------------ message codec


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("seg_size", [1450, 8950, 64000])
def test_segment_588k(benchmark, message, seg_size, version):
    segs = segments(message, seg_size, version)
    n = benchmark(*segs.call)
    nseg = segs.count
    assert n == nseg
    check = 4 if version == 3 else 0  # version 3: each datagram ends with its data check
    s = seg_size - check
    data = []
    for i, dgram in enumerate(segs.datagrams()):
        rc, h = wire.decode(dgram)
        assert rc == 0
        assert (h["seq"], h["nseg"], h["msg_len"], h["req_id"], h["func_id"]) == (i, nseg, MSG_LEN, 77, 4)
        assert len(dgram) == HDR_LEN + min(s, MSG_LEN - i * s) + check
        data.append(dgram[HDR_LEN:len(dgram) - check])
    assert sum(segs.lengths()) == segs.cap and b"".join(data) == message


@pytest.mark.parametrize("size", [1024, MSG_LEN])
def test_crc32c(benchmark, message, size):
    """Version 3's data check over a vecadd request (1 KiB) and a head request (588 KiB)."""
    c = wire.Crc32c(message[:size])
    crc = benchmark(*c.call)
    assert crc == c.tables() and crc != 0


@pytest.mark.parametrize("size", [1024, 65000])
def test_auth_tag(benchmark, message, size):
    """Version 4's tag (keyed BLAKE2b, libsodium) of one datagram: a vecadd request (1 KiB) and
    a 65,000-byte segment (a 588 KiB head request is ten of them on loopback, each checked)."""
    from splitrpc import auth

    if not auth.available():
        pytest.skip("libsodium's shared library is not installed")
    hdr = bytes([0xA5, 0x40]) + bytes(20)
    t = auth.TagCheck(bytes(range(32)), hdr + message[:size])
    assert benchmark(*t.call) == 1
    bad = bytearray(t.datagram)
    bad[30] ^= 1
    assert auth.tag_ok(bytes(range(32)), bytes(bad)) is False


@pytest.mark.parametrize("seg_size", [8950, 64000])
def test_reassemble_588k(benchmark, message, reassembler, seg_size):
    segs = segments(message, seg_size)
    nseg = segs.count
    assert segs.segment() == nseg
    rcs = benchmark(reassembler.round(segs))
    assert rcs == [0] * (nseg - 1) + [1]
    m, h = reassembler.message()
    assert m is not None and len(m) == MSG_LEN and m == message
    assert (h["req_id"], h["func_id"], h["nseg"]) == (77, 4, nseg)


# ------------------------------------------------------------------ Tensor Queue batch


def test_tq_batch_formation(benchmark):
    """8 vecadd requests scattered into consecutive elements across the ring end, then the
    (8, 256) float32 batch view the worker hands to the function (as splitrpc/_native/server.py _view)."""
    elem, count = 256 * 4, 8
    tq = wire.HostTensorQueue(elem, 12)
    try:
        slots = tq.ring_bytes // elem  # 12 with 4 KiB pages
        first = 5 * slots - count // 2                # the last 4 slots of the ring, then the first 4
        reqs = np.random.default_rng(2).standard_normal((count, 256)).astype(np.float32)
        batch = benchmark(tq.batch_former(first, reqs))
        assert np.array_equal(batch, reqs)
        # It did wrap: the last element sits at the start of the ring.
        assert tq.elem(first + count - 1) == tq.base + (count // 2 - 1) * elem
        del batch
    finally:
        tq.close()


# ------------------------------------------------------------------ one call on loopback


def test_call_vecadd_loopback(benchmark, poll_server):
    req = np.random.default_rng(3).standard_normal(256).astype(np.float32)
    with splitrpc.Client("127.0.0.1", poll_server.port, busy_poll=True) as cl:
        cl.call(1, req)  # warm up the path (first call allocates on both sides)
        reply = benchmark(cl.call, 1, req)
    assert np.array_equal(np.frombuffer(reply, dtype="<f4"), req + np.float32(1))
