"""Native wire code (header, segmentation, v3 data check, codec) against the pure-Python docs/PROTOCOL*.md reference."""
import binascii
import errno
import os
import random
import re
import sys

import pytest
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
import wire_ref as ref  # noqa: E402

from splitrpc._native import ffi, lib  # noqa: E402

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 0xFFFFFFFFFFFFFFFF)


@st.composite
def headers(draw, types=st.integers(0, 2), versions=st.sampled_from([1, 2, 3])):
    nseg = draw(st.one_of(st.integers(1, 4), st.integers(1, 0xFFFF)))
    seq = draw(st.one_of(st.just(0), st.just(nseg - 1), st.integers(0, nseg - 1)))
    version = draw(versions)
    req_id = draw(u64 if version == 1 else st.integers(0, ref.REQ_ID_V2_MAX))
    return ref.Header(draw(types), draw(u16), req_id, seq, nseg, draw(u32), draw(u16), version)


def c_hdr(h: ref.Header):
    c = ffi.new("srpc_hdr_t *")
    c.type, c.version, c.func_id, c.req_id = h.type, h.version, h.func_id, h.req_id
    c.seq, c.nseg, c.msg_len, c.aux = h.seq, h.nseg, h.msg_len, h.aux
    return c


def native_encode(h: ref.Header) -> bytes:
    out = ffi.new("uint8_t[]", lib.SRPC_HDR_LEN)
    rc = lib.srpc_hdr_encode(c_hdr(h), out)
    assert rc == 0
    return bytes(ffi.buffer(out, lib.SRPC_HDR_LEN))


def native_decode(buf: bytes):
    """(rc, Header or None). The bytes are copied into a buffer of exactly len(buf) bytes."""
    src = ffi.new("uint8_t[]", max(len(buf), 1))
    ffi.memmove(src, buf, len(buf))
    out = ffi.new("srpc_hdr_t *")
    rc = lib.srpc_hdr_decode(src, len(buf), out)
    if rc:
        return rc, None
    return rc, ref.Header(out.type, out.func_id, out.req_id, out.seq, out.nseg, out.msg_len, out.aux, out.version)


def native_seg(nseg: int, seq: int, msg_len: int, length: int):
    """(rc, S) of srpc_seg_check for one REQUEST segment carrying `length` bytes."""
    h = ffi.new("srpc_hdr_t *")
    h.type, h.seq, h.nseg, h.msg_len = 0, seq, nseg, msg_len
    s = ffi.new("uint32_t *", 0xDEADBEEF)
    rc = lib.srpc_seg_check(h, length, s)
    return rc, (s[0] if rc == 0 else None)


# ------------------------------------------------------------------ the reference itself


def test_reference_layout_matches_protocol_table():
    b = ref.encode(ref.ERROR, 0x0102, 0x030405060708090A, 0x0B0C, 0x0D0E, 0x0F101112, 0x1314)
    assert len(b) == 22
    assert b[0] == 0xA5 and b[1] == 0x12  # version 1 high nibble, type 2 low nibble
    assert b[2:4] == bytes([1, 2])
    assert b[4:12] == bytes(range(3, 11))
    assert b[12:14] == bytes([11, 12]) and b[14:16] == bytes([13, 14])
    assert b[16:20] == bytes(range(15, 19)) and b[20:22] == bytes([19, 20])
    assert lib.SRPC_HDR_LEN == 22 and lib.SRPC_VERSION == 1
    assert lib.SRPC_MAX_SEG_DATA == 65485 and lib.SRPC_ERRMSG_MAX == 256
    assert (lib.SRPC_REQUEST, lib.SRPC_RESPONSE, lib.SRPC_ERROR) == (0, 1, 2)
    codes = (lib.SRPC_E_UNKNOWN_FUNCTION, lib.SRPC_E_BAD_REQUEST, lib.SRPC_E_BUSY, lib.SRPC_E_DEADLINE,
             lib.SRPC_E_INTERNAL, lib.SRPC_E_TOO_LARGE)
    assert codes == (1, 2, 3, 4, 5, 6)  # docs/PROTOCOL.md, Calls
    names = [ffi.string(lib.srpc_strerror(c)).decode() for c in codes]
    assert names == ["UNKNOWN_FUNCTION", "BAD_REQUEST", "BUSY", "DEADLINE", "INTERNAL", "TOO_LARGE"]


# ------------------------------------------------------------------ encode / decode


@SETTINGS
@given(headers())
@example(ref.Header(0, 0, 0, 0, 1, 0, 0))
@example(ref.Header(2, 0xFFFF, 2**64 - 1, 0xFFFE, 0xFFFF, 2**32 - 1, 0xFFFF))
@example(ref.Header(2, 0xFFFF, 2**48 - 1, 0xFFFE, 0xFFFF, 2**32 - 1, 0xFFFF, 2))
def test_native_encode_equals_reference(h):
    assert native_encode(h) == ref.encode_hdr(h)


@SETTINGS
@given(headers())
def test_decode_of_encode_is_identity(h):
    wire = native_encode(h)
    rc, got = native_decode(wire)
    assert rc == 0
    assert got == h
    assert ref.decode(wire) == h


@SETTINGS
@given(headers(), st.binary(min_size=1, max_size=64))
def test_decode_ignores_trailing_data(h, tail):
    rc, got = native_decode(ref.encode_hdr(h) + tail)
    assert rc == 0 and got == h


@SETTINGS
@given(headers(), st.integers(3, 255))
def test_encode_rejects_type_above_2(h, bad_type):
    c = c_hdr(h)
    c.type = bad_type
    out = ffi.new("uint8_t[]", 22)
    assert lib.srpc_hdr_encode(c, out) == -errno.EINVAL


@SETTINGS
@given(headers(), st.integers(0, 21))
def test_decode_rejects_short(h, n):
    rc, _ = native_decode(ref.encode_hdr(h)[:n])
    assert rc == -errno.EMSGSIZE


@SETTINGS
@given(headers(), u8.filter(lambda m: m != 0xA5))
def test_decode_rejects_wrong_magic(h, magic):
    wire = ref.encode(h.type, h.func_id, h.req_id, h.seq, h.nseg, h.msg_len, h.aux, magic=magic, version=h.version)
    assert native_decode(wire)[0] == -errno.EBADMSG


@SETTINGS
@given(headers(), st.integers(0, 15).filter(lambda v: v not in (1, 2, 3, 4, 5)))  # 4, 5: docs/PROTOCOL-v4.md, -v5.md
def test_decode_rejects_wrong_version(h, version):
    wire = ref.encode(h.type, h.func_id, h.req_id, h.seq, h.nseg, h.msg_len, h.aux, version=version)
    assert native_decode(wire)[0] == -errno.EBADMSG


@SETTINGS
@given(headers(), st.integers(3, 15))
def test_decode_rejects_unknown_type(h, t):
    wire = ref.encode(t, h.func_id, h.req_id, h.seq, h.nseg, h.msg_len, h.aux, version=h.version)
    assert native_decode(wire)[0] == -errno.EBADMSG


@SETTINGS
@given(headers(types=st.integers(0, 2)), u16)
def test_decode_rejects_nseg_zero(h, seq):
    wire = ref.encode(h.type, h.func_id, h.req_id, seq, 0, h.msg_len, h.aux, version=h.version)
    assert native_decode(wire)[0] == -errno.EPROTO


@SETTINGS
@given(st.data())
def test_decode_rejects_seq_not_below_nseg(data):
    nseg = data.draw(st.integers(1, 0xFFFF))
    seq = data.draw(st.one_of(st.just(nseg), st.integers(nseg, 0xFFFF)))
    wire = ref.encode(data.draw(st.integers(0, 2)), data.draw(u16), data.draw(u64), seq, nseg,
                      data.draw(u32), data.draw(u16))
    assert native_decode(wire)[0] == -errno.EPROTO


@SETTINGS
@given(st.binary(min_size=0, max_size=40))
def test_decode_agrees_with_reference_on_arbitrary_bytes(buf):
    rc, got = native_decode(buf)
    want = {"short": -errno.EMSGSIZE, "bad_check": -errno.EILSEQ, "bad_header": -errno.EBADMSG,
            "bad_segment": -errno.EPROTO}
    try:
        h = ref.decode(buf)
    except ref.DecodeError as e:
        assert rc == want[e.reason]
    else:
        assert rc == 0 and got == h


# ------------------------------------------------------------------ version 2: the header check


def test_version_2_example_of_the_protocol_page():
    """docs/PROTOCOL-v2.md's example header, byte for byte, and its stated CRC parameters."""
    assert binascii.crc_hqx(b"123456789", 0xFFFF) == 0x29B1  # CRC-16/CCITT-FALSE's check value
    want = bytes.fromhex("a5 20 00 01 fc 68 00 00 00 00 00 01 00 00 00 01 00 00 04 00 00 00")
    assert ref.encode(ref.REQUEST, 1, 1, 0, 1, 1024, version=2) == want
    assert native_encode(ref.Header(0, 1, 1, 0, 1, 1024, 0, 2)) == want
    assert lib.SRPC_VERSION_2 == 2


@SETTINGS
@given(headers(versions=st.sampled_from([2, 3])), st.integers(0, 21), st.integers(1, 255))
def test_every_one_byte_change_of_a_version_2_or_3_header_is_caught(h, i, x):
    wire = bytearray(ref.encode_hdr(h))
    wire[i] ^= x
    rc, got = native_decode(bytes(wire))
    if i == 1 and (wire[1] >> 4) not in (2, 3):  # the version nibble changed to one without a header check
        assert rc != 0 or got.version == 1
    else:
        assert rc == -errno.EILSEQ
        with pytest.raises(ref.DecodeError, match="bad_check"):
            ref.decode(bytes(wire))


@SETTINGS
@given(headers(versions=st.sampled_from([2, 3])))
def test_version_2_req_id_over_48_bits_is_refused(h):
    c = c_hdr(h)
    c.req_id = h.req_id | (1 << 48)
    assert lib.srpc_hdr_encode(c, ffi.new("uint8_t[]", 22)) == -errno.EINVAL


# ------------------------------------------------------------------ version 3: the data check

V3_DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "docs", "PROTOCOL-v3.md")
V3_EXAMPLE = bytes.fromhex("a5 30 00 01 64 94 00 00 00 00 00 01 00 00 00 01 00 00 00 04 00 00 01 02 03 04 ed 99 10 44")


def native_crc32c(data: bytes, crc: int = 0, offset: int = 0, tables: bool = False) -> int:
    """srpc_crc32c (or srpc_crc32c_tables) of data, placed `offset` bytes into a buffer (alignment)."""
    buf = ffi.new("uint8_t[]", len(data) + offset + 1)
    ffi.memmove(buf + offset, data, len(data))
    fn = lib.srpc_crc32c_tables if tables else lib.srpc_crc32c
    return fn(crc, buf + offset, len(data))


def native_segment(h: ref.Header, data: bytes, seg_size: int) -> list[bytes]:
    """srpc_msg_segment's datagrams for message `data` with h's type, version, func_id, req_id, aux."""
    n = lib.srpc_seg_count(len(data), lib.srpc_seg_data_max(h.version, seg_size))
    cap = len(data) + n * (ref.HDR_LEN + ref.CHECK_LEN)
    out, lens = ffi.new("uint8_t[]", max(cap, 1)), ffi.new("uint32_t[]", max(n, 1))
    src = ffi.new("uint8_t[]", max(len(data), 1))
    ffi.memmove(src, data, len(data))
    rc = lib.srpc_msg_segment(c_hdr(h), src, len(data), seg_size, out, cap, lens, n)
    assert rc == n, (rc, n)
    raw, off, dgrams = ffi.buffer(out, cap)[:], 0, []
    for i in range(n):
        dgrams.append(raw[off:off + lens[i]])
        off += lens[i]
    assert off <= cap
    return dgrams


class NativeReassembler:
    def __init__(self, max_msg: int = 1 << 21):
        p = ffi.new("srpc_reassembler_t **")
        assert lib.srpc_reassembler_create(max_msg, p) == 0
        self.r = ffi.gc(p[0], lib.srpc_reassembler_destroy)

    def push(self, dgram: bytes) -> int:
        buf = ffi.new("uint8_t[]", max(len(dgram), 1))  # exactly the datagram: no read past it goes unseen by ASan
        ffi.memmove(buf, dgram, len(dgram))
        return lib.srpc_reassembler_push(self.r, buf, len(dgram))

    def message(self):
        """(bytes or None, Header)."""
        h, n = ffi.new("srpc_hdr_t *"), ffi.new("uint32_t *")
        m = lib.srpc_reassembler_message(self.r, h, n)
        hdr = ref.Header(h.type, h.func_id, h.req_id, h.seq, h.nseg, h.msg_len, h.aux, h.version)
        return (None if m == ffi.NULL else ffi.buffer(m, n[0])[:]), hdr


# RFC 3720 (iSCSI) appendix B.4: CRC-32C examples, independent of any implementation here
RFC3720 = [(bytes(32), 0x8A9136AA), (b"\xff" * 32, 0x62A8AB43), (bytes(range(32)), 0x46DD794E),
           (bytes(range(31, -1, -1)), 0x113FDB5C)]


def test_reference_crc32c_check_values():
    """The pure-Python CRC-32C against the page's check value, RFC 3720's examples, google_crc32c
    where installed, and the native one."""
    assert ref.crc32c(b"123456789") == 0xE3069283 == native_crc32c(b"123456789")
    assert ref.crc32c(b"") == 0 == native_crc32c(b"")
    for data, want in RFC3720:
        assert ref.crc32c(data) == want, data.hex()
        assert native_crc32c(data) == native_crc32c(data, tables=True) == want
    try:
        import google_crc32c
    except ImportError:  # not installed here: the RFC's examples and the native code stand in for it
        google_crc32c = None
    rng = random.Random(33)
    for n in (1, 7, 8, 9, 255, 256, 257, 1450, 8192 * 3 + 5):
        data = rng.randbytes(n)
        want = ref.crc32c(data)
        if google_crc32c is not None:
            assert google_crc32c.value(data) == want, n
        assert native_crc32c(data) == native_crc32c(data, tables=True) == want, n


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.integers(0, 300), st.integers(0, 30_000)), st.integers(0, 2**32 - 1), st.integers(0, 7),
       st.integers(0, 2**32 - 1), st.data())
def test_native_crc32c_equals_reference(n, seed, offset, start, data):
    """Any length (the native code has 8-byte, 256- and 8192-byte three-stream paths), any
    alignment, continued from any value, and split anywhere: the CRC of the whole."""
    buf = random.Random(seed).randbytes(n)
    want = ref.crc32c(buf, start)
    assert native_crc32c(buf, start, offset) == native_crc32c(buf, start, offset, tables=True) == want
    k = data.draw(st.integers(0, n))
    assert ref.crc32c(buf[k:], ref.crc32c(buf[:k])) == ref.crc32c(buf) == native_crc32c(buf[k:], native_crc32c(buf[:k]))


def test_seg_data_max_leaves_room_for_the_check():
    for seg in [*range(1, 40), 1450, 8950, 65481, 65485]:
        for v in (1, 2, 3):
            assert lib.srpc_seg_data_max(v, seg) == ref.seg_data_max(v, seg), (v, seg)
    assert ref.seg_data_max(3, 1450) == 1446 and ref.seg_data_max(3, 65485) == 65481  # the page's S


def test_version_3_example_of_the_protocol_page():
    """docs/PROTOCOL-v3.md's example datagram, byte for byte, from the page itself: the reference
    and srpc_msg_segment build it, its stated CRCs are right, and the reassembler takes it."""
    page = open(V3_DOC, encoding="utf-8").read()
    m = re.search(r"Example:.*?`((?:[0-9a-f]{2} ){25,}[0-9a-f]{2})`", page, re.S)  # the datagram: >= 26 bytes
    assert m, "no example datagram on docs/PROTOCOL-v3.md"
    assert bytes.fromhex(m.group(1)) == V3_EXAMPLE
    assert lib.SRPC_VERSION_3 == 3 and lib.SRPC_DATA_CHECK_LEN == 4
    h = ref.Header(ref.REQUEST, 1, 1, 0, 1, 4, 0, 3)
    data = bytes([1, 2, 3, 4])
    assert ref.datagram(h, data) == V3_EXAMPLE
    assert ref.segments(1, 1, data, 1446, version=3) == [V3_EXAMPLE]
    assert native_segment(h, data, 1450) == [V3_EXAMPLE]
    assert ref.check16(V3_EXAMPLE[:22]) == 0x6494 == lib.srpc_hdr_check16(V3_EXAMPLE[:22])
    assert ref.crc32c(V3_EXAMPLE[:26]) == 0xED991044 == native_crc32c(V3_EXAMPLE[:26])
    assert ref.classify(V3_EXAMPLE) == "accept" and ref.data_of(V3_EXAMPLE) == data
    r = NativeReassembler()
    assert r.push(V3_EXAMPLE) == 1
    assert r.message() == (data, h)


@st.composite
def v3_messages(draw, max_nseg=300):
    """(Header template, message bytes, seg_size) of version 3, at most max_nseg datagrams."""
    n = draw(st.one_of(st.integers(0, 64), st.integers(0, 5000), st.integers(0, 150_000)))
    seg_size = draw(st.one_of(st.integers(1, 64), st.integers(1, ref.MAX_SEG), st.sampled_from([1446, 1450, 65485])))
    assume(-(-n // ref.seg_data_max(3, seg_size)) <= max_nseg)
    h = ref.Header(draw(st.integers(0, 2)), draw(u16), draw(st.integers(0, ref.REQ_ID_V2_MAX)), 0, 1, 0,
                   draw(u16), 3)
    return h, random.Random(draw(u32)).randbytes(n), seg_size


@SETTINGS
@given(v3_messages())
@example((ref.Header(0, 1, 1, 0, 1, 0, 0, 3), b"", 1450))
@example((ref.Header(1, 3, 2**48 - 1, 0, 1, 0, 0, 3), bytes(2893), 1450))  # 1446 + 1446 + 1
@example((ref.Header(0, 3, 7, 0, 1, 0, 0, 3), bytes(10), 5))  # S = 1: ten 27-byte datagrams
@example((ref.Header(0, 3, 7, 0, 1, 0, 0, 3), bytes(10), 4))  # a budget under 1 + 4: S is 1 all the same
def test_native_version_3_segmenting_equals_reference(m):
    """srpc_msg_segment with version 3 writes exactly the reference's datagrams: header, data cut
    at S = seg_size - 4, and each datagram's CRC-32C, byte for byte."""
    h, data, seg_size = m
    s = ref.seg_data_max(3, seg_size)
    want = ref.segments(h.func_id, h.req_id, data, s, type=h.type, aux=h.aux, version=3)
    got = native_segment(h, data, seg_size)
    event(f"{'1' if len(got) == 1 else '2..9' if len(got) < 10 else '10+'} datagrams")
    event(f"message {'< 1 kB' if len(data) < 1000 else '< 10 kB' if len(data) < 10_000 else '>= 10 kB'}")
    assert got == want
    for i, d in enumerate(got):
        assert ref.data_check_ok(d) and d[1] >> 4 == 3
        assert len(d) == ref.HDR_LEN + len(ref.data_of(d)) + 4
        assert len(d) <= ref.HDR_LEN + max(seg_size, s + 4)
        assert ref.classify(d) == ("accept" if h.type == ref.REQUEST else "not_request")
    assert b"".join(ref.data_of(d) for d in got) == data


@SETTINGS
@given(v3_messages(max_nseg=40), st.integers(0, 2**32 - 1))
def test_native_reassembler_takes_the_reference_version_3_datagrams(m, seed):
    """In any order, every datagram sent twice: the message, with a version 3 header."""
    h, data, seg_size = m
    dgrams = ref.segments(h.func_id, h.req_id, data, ref.seg_data_max(3, seg_size), type=h.type, aux=h.aux,
                          version=3)
    order = list(range(len(dgrams))) * 2
    random.Random(seed).shuffle(order)
    r = NativeReassembler()
    seen, rcs = set(), []
    for i in order:
        rcs.append(r.push(dgrams[i]))
        want = -errno.EALREADY if i in seen else (1 if len(seen) == len(dgrams) - 1 else 0)
        seen.add(i)
        assert rcs[-1] == want, (i, rcs)
    got, hdr = r.message()
    assert got == data
    assert hdr == ref.Header(h.type, h.func_id, h.req_id, 0, len(dgrams), len(data), h.aux, 3)


@SETTINGS
@given(v3_messages(max_nseg=40), st.data())
def test_any_one_byte_change_of_a_version_3_datagram_is_rejected(m, data):
    """One byte of one datagram changed (header, data or check): the reassembler refuses it with
    -EILSEQ (the header's CRC-16 or the data's CRC-32C), with the message in progress and alone,
    and the undamaged datagram then completes the right message. The one exception is a version
    nibble changed to one without a header check (byte 1, 3 -> 0, 1, 6..15): no longer a version 3
    datagram, it never joins the version 3 message. Versions 2, 4 and 5 carry the same header
    check, so a nibble changed to them fails it (-EILSEQ) like any other header byte."""
    h, msg, seg_size = m
    h = ref.Header(ref.REQUEST, h.func_id, h.req_id, 0, 1, 0, h.aux, 3)
    dgrams = ref.segments(h.func_id, h.req_id, msg, ref.seg_data_max(3, seg_size), version=3)
    k = data.draw(st.integers(0, len(dgrams) - 1), label="datagram")
    i = data.draw(st.one_of(st.integers(0, len(dgrams[k]) - 1), st.sampled_from([1, 4, 5, 21, 22, len(dgrams[k]) - 1])),
                  label="byte")
    x = data.draw(st.integers(1, 255), label="xor")
    bad = bytearray(dgrams[k])
    bad[i] ^= x
    bad = bytes(bad)
    relabelled = i == 1 and bad[1] >> 4 not in (2, 3, 4, 5)  # 2..5: the header check catches it
    event("relabelled" if relabelled else "header" if i < 22 else "data or check")
    assert ref.classify(bad) != "accept" or relabelled
    alone = NativeReassembler().push(bad)
    if relabelled:
        assert alone in (0, -errno.EBADMSG, -errno.EPROTO), alone  # v1 (no checks) or no version at all
    else:
        assert alone == -errno.EILSEQ
    r = NativeReassembler()
    for j, d in enumerate(dgrams):
        if j != k:
            assert r.push(d) == 0
    rc = r.push(bad)
    assert rc < 0 and (relabelled or rc == -errno.EILSEQ), rc
    assert r.message()[0] is None
    assert r.push(dgrams[k]) == 1
    assert r.message()[0] == msg


# ------------------------------------------------------------------ segmentation


@st.composite
def messages(draw, max_nseg=4096):
    """(msg_len, S) with at most max_nseg segments (and never more than 65535)."""
    msg_len = draw(st.one_of(st.integers(0, 4096), st.integers(0, 1 << 20)))
    lo = max(1, -(-msg_len // min(max_nseg, 0xFFFF)))
    s = draw(st.one_of(st.integers(lo, max(lo, min(65485, 2 * lo + 64))), st.integers(lo, 65485)))
    return msg_len, s


@SETTINGS
@given(messages())
@example((0, 1))
@example((1 << 20, 65485))
@example((1 << 20, (1 << 20) // 4096))
@example((1450, 1450))
@example((1451, 1450))
@example((2900, 1450))
def test_every_segment_of_a_cut_message_passes(m):
    msg_len, s = m
    parts = ref.cut(msg_len, s)
    nseg = len(parts)
    assert lib.srpc_seg_count(msg_len, s) == nseg
    want = msg_len if nseg == 1 else s
    for seq, _off, length in parts:
        assert native_seg(nseg, seq, msg_len, length) == (0, want), (seq, length)


def test_segments_at_the_65535_limit_pass():
    s = 17
    for msg_len in (65535 * s, 65534 * s + 1):
        parts = ref.cut(msg_len, s)
        assert len(parts) == 65535 == lib.srpc_seg_count(msg_len, s)
        h = ffi.new("srpc_hdr_t *")
        h.nseg, h.msg_len = 65535, msg_len
        out = ffi.new("uint32_t *")
        for seq, _off, length in parts:
            h.seq = seq
            assert lib.srpc_seg_check(h, length, out) == 0 and out[0] == s, seq


@SETTINGS
@given(st.integers(2, 0xFFFF), st.data())
def test_non_last_segment_of_length_zero_is_rejected(nseg, data):
    seq = data.draw(st.integers(0, nseg - 2))
    msg_len = data.draw(u32)
    assert native_seg(nseg, seq, msg_len, 0)[0] == -errno.EPROTO


@SETTINGS
@given(st.integers(2, 200), st.integers(1, 65484), st.data())
def test_last_segment_longer_than_s_is_rejected(nseg, s, data):
    last = data.draw(st.integers(s + 1, 65485))
    msg_len = (nseg - 1) * s + last
    assume(msg_len < 2**32)
    assert native_seg(nseg, nseg - 1, msg_len, last)[0] == -errno.EPROTO
    # and a non-last segment of such a message, carrying S, is impossible too (nseg*S < msg_len)
    assert native_seg(nseg, 0, msg_len, s)[0] == -errno.EPROTO


@SETTINGS
@given(u32, st.integers(0, 70000))
def test_single_segment_must_carry_msg_len(msg_len, length):
    rc, s = native_seg(1, 0, msg_len, length)
    if length == msg_len:
        assert (rc, s) == (0, msg_len)
    else:
        assert rc == -errno.EPROTO


def test_single_segment_of_zero_bytes_is_valid():
    assert native_seg(1, 0, 0, 0) == (0, 0)
    assert native_seg(1, 0, 1, 0)[0] == -errno.EPROTO


def test_seg_check_rejects_nseg_zero_and_seq_not_below_nseg():
    assert native_seg(0, 0, 0, 0)[0] == -errno.EPROTO
    assert native_seg(3, 3, 1024, 224)[0] == -errno.EPROTO
    assert native_seg(3, 0xFFFF, 1024, 400)[0] == -errno.EPROTO


def test_last_segment_whose_implied_s_is_not_whole_is_rejected():
    # msg_len 1025, nseg 3, last carries 224: (1025-224)/2 is not an integer
    assert native_seg(3, 2, 1025, 224)[0] == -errno.EPROTO
    assert native_seg(3, 2, 1024, 224) == (0, 400)


def test_segment_larger_than_the_largest_udp_payload_is_rejected():
    assert native_seg(2, 0, 65486 + 1, 65486)[0] == -errno.EPROTO
    assert native_seg(2, 0, 65485 + 1, 65485) == (0, 65485)


@st.composite
def segment_claims(draw):
    """Arbitrary (nseg, seq, msg_len, length), biased towards the interesting boundaries."""
    nseg = draw(st.one_of(st.integers(0, 5), st.integers(0, 0xFFFF)))
    seq = draw(st.one_of(st.integers(0, max(nseg, 1)), st.just(max(nseg - 1, 0)), u16))
    s = draw(st.integers(1, 65490))
    msg_len = draw(st.one_of(
        u32,
        st.integers(0, 3 * 65490),
        st.just(max(nseg - 1, 0) * s + draw(st.integers(0, s + 1))) if nseg else st.just(0),
    ))
    length = draw(st.one_of(st.just(s), st.integers(0, 70000), st.just(msg_len % 70001),
                            st.just(max(0, msg_len - max(nseg - 1, 0) * s))))
    return nseg, seq, min(msg_len, 2**32 - 1), length


@settings(max_examples=1000, deadline=None)
@given(segment_claims())
def test_seg_check_agrees_with_reference(claim):
    nseg, seq, msg_len, length = claim
    assume(seq <= 0xFFFF)
    want = ref.seg_size(nseg, seq, msg_len, length)
    event("valid" if want is not None else "impossible")
    rc, s = native_seg(nseg, seq, msg_len, length)
    if want is None:
        assert rc == -errno.EPROTO
    else:
        assert (rc, s) == (0, want)


@SETTINGS
@given(u32, st.integers(1, 0xFFFFFFFF))
def test_seg_count_is_ceiling_with_minimum_one(msg_len, s):
    want = 1 if msg_len <= s else -(-msg_len // s)
    assert lib.srpc_seg_count(msg_len, s) == want


@pytest.mark.parametrize("null", ["hdr", "out"])
def test_null_arguments_are_rejected(null):
    h = ffi.new("srpc_hdr_t *")
    h.nseg = 1
    buf = ffi.new("uint8_t[]", 22)
    s = ffi.new("uint32_t *")
    if null == "hdr":
        assert lib.srpc_hdr_encode(ffi.NULL, buf) < 0
        assert lib.srpc_seg_check(ffi.NULL, 0, s) < 0
    else:
        assert lib.srpc_hdr_encode(h, ffi.NULL) < 0
        assert lib.srpc_seg_check(h, 0, ffi.NULL) < 0
        assert lib.srpc_hdr_decode(buf, 22, ffi.NULL) < 0
