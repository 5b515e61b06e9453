"""test_micro.py: pytest-benchmark micro-benchmarks of the native hot paths as seen from Python; each checks what it measured.

Run once as tests with ``--benchmark-disable``; measure with ``pytest bench/micro --benchmark-enable``.
"""
import struct

import numpy as np
import pytest

import splitrpc
from splitrpc._native import ffi, lib

HDR_LEN = lib.SRPC_HDR_LEN
MSG_LEN = 3 * 224 * 224 * 4  # 602112 bytes (588 KiB): the head service's request
HDR = dict(type=lib.SRPC_RESPONSE, func_id=4, req_id=0x0123456789ABCDEF, seq=3, nseg=7, msg_len=MSG_LEN, aux=9)
# docs/PROTOCOL.md: magic, version << 4 | type, func_id, req_id, seq, nseg, msg_len, aux; big-endian.
HDR_BYTES = struct.pack(">BBHQHHIH", 0xA5, 0x10 | HDR["type"], HDR["func_id"], HDR["req_id"], HDR["seq"],
                        HDR["nseg"], HDR["msg_len"], HDR["aux"])


def hdr_fields(h) -> dict:
    return {k: getattr(h, k) for k in HDR}


@pytest.fixture(scope="module")
def message() -> bytes:
    return np.random.default_rng(1).bytes(MSG_LEN)


@pytest.fixture
def reassembler():
    out = ffi.new("srpc_reassembler_t **")
    assert lib.srpc_reassembler_create(MSG_LEN, out) == 0
    try:
        yield out[0]
    finally:
        lib.srpc_reassembler_destroy(out[0])


def segment(message: bytes, seg_size: int, version: int = 1):
    """The datagrams of message at S = seg_size: (out buffer, lengths, cffi tmpl, count)."""
    nseg = -(-len(message) // seg_size)
    cap = len(message) + nseg * HDR_LEN
    out = ffi.new("uint8_t[]", cap)
    lens = ffi.new("uint32_t[]", nseg)
    tmpl = ffi.new("srpc_hdr_t *", dict(type=lib.SRPC_REQUEST, func_id=4, req_id=77, version=version))
    return out, lens, tmpl, nseg, cap


# ------------------------------------------------------------------ control header


def test_hdr_encode(benchmark):
    h = ffi.new("srpc_hdr_t *", HDR)
    out = ffi.new("uint8_t[]", HDR_LEN)
    assert benchmark(lib.srpc_hdr_encode, h, out) == 0
    assert ffi.buffer(out)[:] == HDR_BYTES


def test_hdr_decode(benchmark):
    buf = ffi.new("uint8_t[]", HDR_BYTES)
    h = ffi.new("srpc_hdr_t *")
    assert benchmark(lib.srpc_hdr_decode, buf, HDR_LEN, h) == 0
    assert hdr_fields(h) == HDR


# docs/PROTOCOL-v2.md: the same header with a 48-bit req_id and its CRC-16 in bytes 4..5.
HDR_V2 = dict(HDR, req_id=0x456789ABCDEF)


def test_hdr_encode_v2(benchmark):
    h = ffi.new("srpc_hdr_t *", dict(HDR_V2, version=2))
    out = ffi.new("uint8_t[]", HDR_LEN)
    assert benchmark(lib.srpc_hdr_encode, h, out) == 0
    b = ffi.buffer(out)[:]
    assert b[1] >> 4 == 2 and int.from_bytes(b[4:6], "big") == lib.srpc_hdr_check16(out)


def test_hdr_decode_v2(benchmark):
    h = ffi.new("srpc_hdr_t *", dict(HDR_V2, version=2))
    buf = ffi.new("uint8_t[]", HDR_LEN)
    assert lib.srpc_hdr_encode(h, buf) == 0
    out = ffi.new("srpc_hdr_t *")
    assert benchmark(lib.srpc_hdr_decode, buf, HDR_LEN, out) == 0
    assert hdr_fields(out) == HDR_V2 and out.version == 2


# ------------------------------------------------------------------ message codec


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("seg_size", [1450, 8950, 64000])
def test_segment_588k(benchmark, message, seg_size, version):
    out, lens, tmpl, nseg, cap = segment(message, seg_size, version)
    src = ffi.from_buffer(message)
    n = benchmark(lib.srpc_msg_segment, tmpl, src, MSG_LEN, seg_size, out, cap, lens, nseg)
    assert n == nseg
    raw, off, data = ffi.buffer(out), 0, []
    h = ffi.new("srpc_hdr_t *")
    for i in range(n):
        assert lib.srpc_hdr_decode(out + off, lens[i], h) == 0
        assert (h.seq, h.nseg, h.msg_len, h.req_id, h.func_id) == (i, nseg, MSG_LEN, 77, 4)
        assert lens[i] == HDR_LEN + min(seg_size, MSG_LEN - i * seg_size)
        data.append(raw[off + HDR_LEN:off + lens[i]])
        off += lens[i]
    assert off == cap and b"".join(data) == message


@pytest.mark.parametrize("seg_size", [8950, 64000])
def test_reassemble_588k(benchmark, message, reassembler, seg_size):
    out, lens, tmpl, nseg, cap = segment(message, seg_size)
    assert lib.srpc_msg_segment(tmpl, ffi.from_buffer(message), MSG_LEN, seg_size, out, cap, lens, nseg) == nseg
    dgrams, off = [], 0
    for i in range(nseg):
        dgrams.append((out + off, lens[i]))
        off += lens[i]
    push, reset, r = lib.srpc_reassembler_push, lib.srpc_reassembler_reset, reassembler

    def reassemble():
        reset(r)  # the previous round's message; its buffer is reused
        return [push(r, p, n) for p, n in dgrams]

    rcs = benchmark(reassemble)
    assert rcs == [0] * (nseg - 1) + [1]
    h, n = ffi.new("srpc_hdr_t *"), ffi.new("uint32_t *")
    m = lib.srpc_reassembler_message(r, h, n)
    assert m != ffi.NULL and n[0] == MSG_LEN and ffi.buffer(m, n[0])[:] == message
    assert (h.req_id, h.func_id, h.nseg) == (77, 4, nseg)


# ------------------------------------------------------------------ Tensor Queue batch


def test_tq_batch_formation(benchmark):
    """8 vecadd requests scattered into consecutive elements across the ring end, then the
    (8, 256) float32 batch view the worker hands to the function (as splitrpc/server.py _view)."""
    elem, count = 256 * 4, 8
    out = ffi.new("srpc_tq_t **")
    assert lib.srpc_tq_create(elem, 12, out) == 0
    tq = out[0]
    try:
        slots = lib.srpc_tq_ring_bytes(tq) // elem  # 12 with 4 KiB pages
        first = 5 * slots - count // 2                # the last 4 slots of the ring, then the first 4
        tqs = ffi.new("srpc_tq_t *[1]", [tq])
        sizes = ffi.new("uint32_t[1]", [elem])
        reqs = np.random.default_rng(2).standard_normal((count, 256)).astype(np.float32)
        ptrs = [ffi.from_buffer(reqs[i]) for i in range(count)]
        scatter, tq_elem = lib.srpc_tq_scatter, lib.srpc_tq_elem

        def form_batch():
            for i, p in enumerate(ptrs):
                if scatter(tqs, sizes, 1, first + i, p, elem):
                    raise AssertionError("srpc_tq_scatter failed")
            buf = ffi.buffer(tq_elem(tq, first), count * elem)
            return np.frombuffer(buf, dtype=np.float32).reshape(count, 256)

        batch = benchmark(form_batch)
        assert np.array_equal(batch, reqs)
        # It did wrap: the last element sits at the start of the ring.
        assert tq_elem(tq, first + count - 1) == lib.srpc_tq_base(tq) + (count // 2 - 1) * elem
        del batch
    finally:
        lib.srpc_tq_destroy(tq)


# ------------------------------------------------------------------ one call on loopback


def test_call_vecadd_loopback(benchmark, poll_server):
    req = np.random.default_rng(3).standard_normal(256).astype(np.float32)
    with splitrpc.Client("127.0.0.1", poll_server.port, busy_poll=True) as cl:
        cl.call(1, req)  # warm up the path (first call allocates on both sides)
        reply = benchmark(cl.call, 1, req)
    assert np.array_equal(np.frombuffer(reply, dtype="<f4"), req + np.float32(1))
