"""wire_ref.py: a pure-Python reference of the docs/PROTOCOL.md v1 wire format and its version 2 header check (docs/PROTOCOL-v2.md), written from the specs alone (test helper)."""
from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass

HDR = struct.Struct(">BBHQHHIH")  # magic, ver_type, func_id, req_id, seq, nseg, msg_len, aux
HDR_LEN = 22
MAGIC = 0xA5
VERSION = 1
VERSION_2 = 2
REQ_ID_V2_MAX = (1 << 48) - 1
REQUEST, RESPONSE, ERROR = 0, 1, 2
MAX_SEG = 65485  # 65507 (largest UDP/IPv4 payload) - 22
ERRMSG_MAX = 256

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


def encode(type: int, func_id: int, req_id: int, seq: int, nseg: int, msg_len: int, aux: int = 0, *,
           magic: int = MAGIC, version: int = VERSION) -> bytes:
    """The 22-byte header; magic and version can be overridden to forge bad ones. Version 2
    carries a 48-bit req_id and the header check in bytes 4..5."""
    if version == VERSION_2:
        if not 0 <= req_id <= REQ_ID_V2_MAX:
            raise ValueError("a version 2 req_id has 48 bits")
        b = bytearray(HDR.pack(magic, (version << 4) | type, func_id, req_id, seq, nseg, msg_len, aux))
        b[4:6] = check16(bytes(b)).to_bytes(2, "big")
        return bytes(b)
    return HDR.pack(magic, (version << 4) | type, func_id, req_id, seq, nseg, msg_len, aux)


def encode_hdr(h: Header) -> bytes:
    return encode(h.type, h.func_id, h.req_id, h.seq, h.nseg, h.msg_len, h.aux, version=h.version)


class DecodeError(ValueError):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason  # "short", "bad_check", "bad_header" or "bad_segment"


def decode(buf: bytes) -> Header:
    """Parses and checks the header alone, as docs/PROTOCOL.md says a receiver must."""
    if len(buf) < HDR_LEN:
        raise DecodeError("short")
    magic, vt, func_id, req_id, seq, nseg, msg_len, aux = HDR.unpack_from(buf)
    version = vt >> 4
    if version == VERSION_2:  # the check first: no other field is believed before it
        if int.from_bytes(buf[4:6], "big") != check16(bytes(buf[:HDR_LEN])):
            raise DecodeError("bad_check")
        req_id &= REQ_ID_V2_MAX
    if magic != MAGIC or version not in (VERSION, VERSION_2) or (vt & 0xF) > ERROR:
        raise DecodeError("bad_header")
    if nseg == 0 or seq >= nseg:
        raise DecodeError("bad_segment")
    return Header(vt & 0xF, func_id, req_id, seq, nseg, msg_len, aux, version)


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
    """The datagrams of one message, in seq order."""
    parts = cut(len(data), s)
    return [encode(type, func_id, req_id, seq, len(parts), len(data), aux, version=version) + data[off:off + ln]
            for seq, off, ln in parts]


def classify(dgram: bytes) -> str:
    """What a server does with one datagram seen alone: a drop reason (the counters of
    splitrpc.h, in its order of checks) or "accept" (it may start or continue a call)."""
    try:
        h = decode(dgram)
    except DecodeError as e:
        return e.reason
    if h.type != REQUEST:
        return "not_request"
    if seg_size(h.nseg, h.seq, h.msg_len, len(dgram) - HDR_LEN) is None:
        return "bad_segment"
    return "accept"


def reassemble(dgrams: list[bytes]) -> dict:
    """Groups reply datagrams by (type, func_id, req_id) and puts each message together.

    Returns {(type, func_id, req_id): {"header": first Header, "data": bytes or None if
    incomplete, "datagrams": count, "aux": aux}}."""
    msgs: dict = {}
    for d in dgrams:
        h = decode(d)
        key = (h.type, h.func_id, h.req_id)
        m = msgs.setdefault(key, {"header": h, "parts": {}, "datagrams": 0, "aux": h.aux})
        m["datagrams"] += 1
        assert h.nseg == m["header"].nseg and h.msg_len == m["header"].msg_len
        m["parts"][h.seq] = d[HDR_LEN:]
    for m in msgs.values():
        h = m["header"]
        if len(m["parts"]) == h.nseg:
            data = b"".join(m["parts"][i] for i in range(h.nseg))
            m["data"] = data if len(data) == h.msg_len else None
        else:
            m["data"] = None
    return msgs
