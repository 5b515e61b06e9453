"""wire_ref.py: a pure-Python reference of wire versions 1, 2 and 3 (docs/PROTOCOL*.md), from the pages alone, and of how a server without keys treats versions 4 and 5."""
from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass

HDR = struct.Struct(">BBHQHHIH")  # magic, ver_type, func_id, req_id, seq, nseg, msg_len, aux
HDR_LEN = 22
MAGIC = 0xA5
VERSION = 1
VERSION_2 = 2
VERSION_3 = 3
VERSION_4 = 4  # docs/PROTOCOL-v4.md: version 2's header; a server without keys drops it
VERSION_5 = 5  # docs/PROTOCOL-v5.md: version 2's header (types 0-2 here); a server without keys drops it
VERSIONS = (VERSION, VERSION_2, VERSION_3, VERSION_4, VERSION_5)
CHECKED = (VERSION_2, VERSION_3, VERSION_4, VERSION_5)  # the versions whose header carries the CRC-16 check
REQ_ID_V2_MAX = (1 << 48) - 1  # versions 2 to 5
REQUEST, RESPONSE, ERROR = 0, 1, 2
MAX_SEG = 65485  # 65507 (largest UDP/IPv4 payload) - 22
ERRMSG_MAX = 256
CHECK_LEN = 4  # version 3: the CRC-32C after the data
V3_MIN = HDR_LEN + CHECK_LEN  # a version 3 datagram is at least 26 bytes

assert HDR.size == HDR_LEN


@dataclass(frozen=True)
class Header:
    type: int
    func_id: int
    req_id: int
    seq: int
    nseg: int
    msg_len: int
    aux: int = 0
    version: int = VERSION


def check16(hdr: bytes) -> int:
    """docs/PROTOCOL-v2.md: CRC-16/CCITT-FALSE of the 22 header bytes with bytes 4..5 as zero."""
    return binascii.crc_hqx(hdr[:4] + b"\0\0" + hdr[6:HDR_LEN], 0xFFFF)


def _crc32c_table() -> tuple:
    """docs/PROTOCOL-v3.md: CRC-32C, reflected polynomial 0x82F63B78; the register after one byte."""
    table = []
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_CRC32C = _crc32c_table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C (Castagnoli): initial value 0xFFFFFFFF, final XOR 0xFFFFFFFF; the check value of
    b"123456789" is 0xE3069283. `crc` continues an earlier result over the following bytes (0 to
    start). Pure Python, one table lookup per byte."""
    c = crc ^ 0xFFFFFFFF
    t = _CRC32C
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def add_data_check(dgram: bytes) -> bytes:
    """A version 3 datagram from its header and data: the CRC-32C of all of them appended big-endian."""
    return bytes(dgram) + crc32c(dgram).to_bytes(CHECK_LEN, "big")


def data_check_ok(dgram: bytes) -> bool:
    """Whether a version 3 datagram (>= 26 bytes) ends with the CRC-32C of everything before it."""
    return len(dgram) >= V3_MIN and int.from_bytes(dgram[-CHECK_LEN:], "big") == crc32c(dgram[:-CHECK_LEN])


def seg_data_max(version: int, seg_size: int) -> int:
    """The data bytes S of a segment when a sender's budget after the header is seg_size: version 3
    leaves room for its check (at least 1 byte of data all the same)."""
    return max(1, seg_size - CHECK_LEN) if version == VERSION_3 else seg_size


def encode(type: int, func_id: int, req_id: int, seq: int, nseg: int, msg_len: int, aux: int = 0, *,
           magic: int = MAGIC, version: int = VERSION) -> bytes:
    """The 22-byte header; magic and version can be overridden to forge bad ones. Versions 2
    and 3 carry a 48-bit req_id and the header check in bytes 4..5 (version 3's data check is
    not part of the header: see datagram())."""
    if version in CHECKED:
        if not 0 <= req_id <= REQ_ID_V2_MAX:
            raise ValueError(f"a version {version} req_id has 48 bits")
        b = bytearray(HDR.pack(magic, (version << 4) | type, func_id, req_id, seq, nseg, msg_len, aux))
        b[4:6] = check16(bytes(b)).to_bytes(2, "big")
        return bytes(b)
    return HDR.pack(magic, (version << 4) | type, func_id, req_id, seq, nseg, msg_len, aux)


def encode_hdr(h: Header) -> bytes:
    return encode(h.type, h.func_id, h.req_id, h.seq, h.nseg, h.msg_len, h.aux, version=h.version)


def datagram(h: Header, data: bytes = b"") -> bytes:
    """A whole datagram: the header, the data and, for version 3, the data check."""
    d = encode_hdr(h) + bytes(data)
    return add_data_check(d) if h.version == VERSION_3 else d


class DecodeError(ValueError):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason  # "short", "bad_check", "bad_header", "bad_segment" or "bad_data_check"


def decode(buf: bytes) -> Header:
    """Parses and checks the header alone, as docs/PROTOCOL.md says a receiver must."""
    if len(buf) < HDR_LEN:
        raise DecodeError("short")
    magic, vt, func_id, req_id, seq, nseg, msg_len, aux = HDR.unpack_from(buf)
    version = vt >> 4
    if version in CHECKED:  # the check first: no other field is believed before it
        if int.from_bytes(buf[4:6], "big") != check16(bytes(buf[:HDR_LEN])):
            raise DecodeError("bad_check")
        req_id &= REQ_ID_V2_MAX
    if magic != MAGIC or version not in VERSIONS or (vt & 0xF) > ERROR:
        raise DecodeError("bad_header")
    if nseg == 0 or seq >= nseg:
        raise DecodeError("bad_segment")
    return Header(vt & 0xF, func_id, req_id, seq, nseg, msg_len, aux, version)


def data_of(dgram: bytes, h: Header | None = None) -> bytes:
    """The data bytes of a datagram whose header decodes (h: its decode(), if already made):
    after the header, less version 3's check, which must match (docs/PROTOCOL-v3.md: a version 3
    datagram shorter than 26 bytes is "short", a check mismatch "bad_data_check")."""
    h = h or decode(dgram)
    if h.version != VERSION_3:
        return bytes(dgram[HDR_LEN:])
    if len(dgram) < V3_MIN:
        raise DecodeError("short")
    if not data_check_ok(dgram):
        raise DecodeError("bad_data_check")
    return bytes(dgram[HDR_LEN:-CHECK_LEN])


def seg_size(nseg: int, seq: int, msg_len: int, length: int) -> int | None:
    """docs/PROTOCOL.md "Segmentation": the message's S derived from one segment carrying `length`
    data bytes, or None for an impossible combination."""
    if nseg == 0 or seq >= nseg:
        return None
    if nseg == 1:
        return msg_len if length == msg_len else None
    if seq < nseg - 1:  # a non-last segment: its length is S
        s = length
        if s < 1 or s > MAX_SEG:
            return None
    else:  # the last: L = msg_len - (nseg-1)*S with 1 <= L <= S
        if length < 1 or length > msg_len or (msg_len - length) % (nseg - 1):
            return None
        s = (msg_len - length) // (nseg - 1)
        if length > s or s > MAX_SEG:
            return None
    if (nseg - 1) * s >= msg_len or nseg * s < msg_len:
        return None
    return s


def cut(msg_len: int, s: int) -> list[tuple[int, int, int]]:
    """How a sender cuts msg_len bytes at S: [(seq, offset, length)]; nseg = len(result)."""
    if msg_len <= s:
        return [(0, 0, msg_len)]
    n = -(-msg_len // s)
    return [(i, i * s, min(s, msg_len - i * s)) for i in range(n)]


def segments(func_id: int, req_id: int, data: bytes, s: int, type: int = REQUEST, aux: int = 0,
             version: int = VERSION) -> list[bytes]:
    """The datagrams of one message cut at S = s data bytes, in seq order (version 3: each with
    its data check after the data, so s + 26 bytes long; a sender whose budget after the header is
    seg_size cuts at s = seg_data_max(3, seg_size))."""
    parts = cut(len(data), s)
    out = [encode(type, func_id, req_id, seq, len(parts), len(data), aux, version=version) + data[off:off + ln]
           for seq, off, ln in parts]
    return [add_data_check(d) for d in out] if version == VERSION_3 else out


def classify(dgram: bytes) -> str:
    """What a server does with one datagram seen alone: a drop reason (the counters of
    splitrpc.h, in its order of checks) or "accept" (it may start or continue a call).
    Version 3: the header as version 2, then (a REQUEST) "short" under 26 bytes, then the data
    check ("bad_data_check"), then the segmentation rules on L = length - 26. Version 4: the
    header as version 2, then (a REQUEST) "bad_header": this is a server without keys. Version 5:
    the same."""
    try:
        h = decode(dgram)
    except DecodeError as e:
        return e.reason
    if h.type != REQUEST:
        return "not_request"
    if h.version in (VERSION_4, VERSION_5):
        return "bad_header"
    try:
        data = data_of(dgram, h)
    except DecodeError as e:
        return e.reason
    if seg_size(h.nseg, h.seq, h.msg_len, len(data)) is None:
        return "bad_segment"
    return "accept"


def reassemble(dgrams: list[bytes]) -> dict:
    """Groups reply datagrams by (type, func_id, req_id) and puts each message together (a
    version 3 datagram's data check must match: DecodeError otherwise).

    Returns {(type, func_id, req_id): {"header": first Header, "data": bytes or None if
    incomplete, "datagrams": count, "aux": aux}}."""
    msgs: dict = {}
    for d in dgrams:
        h = decode(d)
        key = (h.type, h.func_id, h.req_id)
        m = msgs.setdefault(key, {"header": h, "parts": {}, "datagrams": 0, "aux": h.aux})
        m["datagrams"] += 1
        assert h.nseg == m["header"].nseg and h.msg_len == m["header"].msg_len
        m["parts"][h.seq] = data_of(d, h)
    for m in msgs.values():
        h = m["header"]
        if len(m["parts"]) == h.nseg:
            data = b"".join(m["parts"][i] for i in range(h.nseg))
            m["data"] = data if len(data) == h.msg_len else None
        else:
            m["data"] = None
    return msgs
