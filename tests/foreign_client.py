"""foreign_client.py: a splitrpc client written from docs/PROTOCOL.md, PROTOCOL-v2.md, -v3.md and -v4.md alone (stdlib only)."""
import binascii
import hashlib
import hmac
import json
import os
import random
import socket
import struct
import time

HDR = struct.Struct(">BBHQHHIH")  # magic, ver_type, func_id, req_id, seq, nseg, msg_len, aux
MAGIC = 0xA5
REQUEST, RESPONSE, ERROR = 0, 1, 2
DRAINING = 7                                  # Amendment 1
PING, DESCRIBE = 0xFFFF, 0xFFFE               # Amendment 1: the server functions


def crc16(hdr: bytes) -> int:
    """docs/PROTOCOL-v2.md: CRC-16/CCITT-FALSE of the header with bytes 4..5 zero."""
    return binascii.crc_hqx(hdr[:4] + bytes(2) + hdr[6:22], 0xFFFF)


def _crc32c_table() -> list:
    t = []
    for b in range(256):
        for _ in range(8):
            b = (b >> 1) ^ 0x82F63B78 if b & 1 else b >> 1
        t.append(b)
    return t


CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """docs/PROTOCOL-v3.md: CRC-32C (reflected 0x82F63B78, init and final XOR 0xFFFFFFFF)."""
    c = 0xFFFFFFFF
    for b in data:
        c = CRC32C_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def pack(version: int, typ: int, func_id: int, req_id: int, seq: int, nseg: int, msg_len: int, aux: int) -> bytes:
    h = bytearray(HDR.pack(MAGIC, (version << 4) | typ, func_id, req_id, seq, nseg, msg_len, aux))
    if version >= 2:
        h[4:6] = crc16(bytes(h)).to_bytes(2, "big")
    return bytes(h)


def unpack(dgram: bytes, version: int):
    """The header fields, or None when a version 2 or 3 header check does not match."""
    magic, vt, fid, rid, seq, n, mlen, aux = HDR.unpack_from(dgram)
    if version >= 2:
        if vt >> 4 != version or int.from_bytes(dgram[4:6], "big") != crc16(dgram):
            return None
        rid &= (1 << 48) - 1
    return magic, vt, fid, rid, seq, n, mlen, aux


def seal(dgram: bytes) -> bytes:
    """Version 3: the header and data followed by their CRC-32C, big-endian."""
    return dgram + crc32c(dgram).to_bytes(4, "big")


def data_check_ok(dgram: bytes) -> bool:
    """Version 3: at least 26 bytes, the last 4 the CRC-32C of the others."""
    return len(dgram) >= 26 and int.from_bytes(dgram[-4:], "big") == crc32c(dgram[:-4])


TRAILER = 40  # docs/PROTOCOL-v4.md: key_id 4, sender 8, counter 8, time 4, tag 16


def v4_tag(secret: bytes, signed: bytes) -> bytes:
    """Version 4: BLAKE2b keyed with the secret, 16-byte digest, over the header, data and trailer[:24]."""
    return hashlib.blake2b(signed, key=secret, digest_size=16).digest()


def v4_sign(dgram: bytes, key_id: int, secret: bytes, sender: int, counter: int, time_ms: int | None = None) -> bytes:
    """The datagram (header and data) with its version 4 trailer."""
    t = int(time.time() * 1000) if time_ms is None else time_ms
    head = key_id.to_bytes(4, "big") + sender.to_bytes(8, "big") + counter.to_bytes(8, "big") + \
        (t % (1 << 32)).to_bytes(4, "big")
    return dgram + head + v4_tag(secret, dgram + head)


def v4_open(dgram: bytes, key_id: int, secret: bytes):
    """The datagram less its trailer when it is at least 62 bytes, names key_id and its tag is
    right; else None."""
    if len(dgram) < 22 + TRAILER or int.from_bytes(dgram[-TRAILER:-TRAILER + 4], "big") != key_id:
        return None
    if not hmac.compare_digest(v4_tag(secret, dgram[:-16]), dgram[-16:]):
        return None
    return dgram[:-TRAILER]


class ProtocolError(Exception):
    pass


class RemoteError(Exception):
    def __init__(self, code: int, text: str):
        super().__init__(f"error {code}: {text}")
        self.code, self.text = code, text


class ForeignClient:
    """seg_size: the data budget of a datagram after the header (version 3 carries 4 bytes less
    data, its check taking the rest; version 4, 40 less for its trailer). record: keep every
    datagram received, raw, in `received`, and every one sent in `sent`. bad_data_check counts the
    version 3 replies dropped for their data check, bad_auth the version 4 replies dropped for
    their key or tag. key: (key id, 32-byte secret), version 4 only."""

    def __init__(self, host: str, port: int, seg_size: int = 1450, timeout: float = 2.0, shuffle: bool = False,
                 version: int = 1, record: bool = False, key: tuple | None = None):
        if version not in (1, 2, 3, 4):
            raise ValueError("version 1, 2, 3 or 4")
        if (version == 4) != (key is not None):
            raise ValueError("version 4 and only version 4 takes a key")
        self.version = version
        self.addr = (host, port)
        self.seg = seg_size - {3: 4, 4: TRAILER}.get(version, 0)
        self.key = key
        self.sender = int.from_bytes(os.urandom(8), "big") | 1
        self.counter = 0
        self.sent: list = []
        self.bad_auth = 0
        self.timeout = timeout
        self.shuffle = shuffle
        self.record = record
        self.received: list = []
        self.bad_data_check = 0
        self.id_bits = 64 if version == 1 else 48
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.connect(self.addr)
        self.next_id = int.from_bytes(os.urandom(self.id_bits // 8), "big")

    def close(self):
        self.sock.close()

    def segments(self, func_id: int, req_id: int, data: bytes) -> list:
        n = max(1, -(-len(data) // self.seg))
        out = [pack(self.version, REQUEST, func_id, req_id, i, n, len(data), 0)
               + data[i * self.seg:(i + 1) * self.seg] for i in range(n)]
        if self.version == 3:
            return [seal(d) for d in out]
        if self.version == 4:
            return [self.sign(d) for d in out]
        return out

    def sign(self, dgram: bytes) -> bytes:
        """Version 4: the next counter of this sender (each datagram, a retransmission too)."""
        self.counter += 1
        return v4_sign(dgram, self.key[0], self.key[1], self.sender, self.counter)

    def call(self, func_id: int, data: bytes) -> bytes:
        req_id = self.next_id
        self.next_id = (self.next_id + 1) % (1 << self.id_bits)
        segs = self.segments(func_id, req_id, data)
        if self.shuffle:
            random.Random(req_id).shuffle(segs)
        for s in segs:
            self.sock.send(s)
            if self.record:
                self.sent.append(s)
        return self._reply(func_id, req_id)

    def _reply(self, func_id: int, req_id: int) -> bytes:
        parts, nseg, msg_len, size = {}, None, None, None
        end = time.monotonic() + self.timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply")
            self.sock.settimeout(left)
            dgram = self.sock.recv(65535)
            if self.record:
                self.received.append(dgram)
            if len(dgram) < HDR.size:
                continue
            fields = unpack(dgram, self.version)
            if fields is None:
                continue
            magic, vt, fid, rid, seq, n, mlen, aux = fields
            if magic != MAGIC or vt >> 4 != self.version:
                continue
            if self.version == 3:  # the data check before any data byte is believed
                if not data_check_ok(dgram):
                    self.bad_data_check += 1
                    continue
                dgram = dgram[:-4]
            if self.version == 4:  # key and tag before any data byte is believed
                opened = v4_open(dgram, self.key[0], self.key[1])
                if opened is None:
                    self.bad_auth += 1
                    continue
                dgram = opened
            if rid != req_id or fid != func_id:
                continue
            body = dgram[HDR.size:]
            if vt & 15 == ERROR:
                if (seq, n, mlen) != (0, 1, len(body)) or len(body) > 256:
                    raise ProtocolError("malformed ERROR datagram")
                raise RemoteError(aux, body.decode("utf-8"))
            if vt & 15 != RESPONSE or aux != 0 or not seq < n:
                raise ProtocolError("unexpected datagram")
            if nseg is None:
                nseg, msg_len = n, mlen
            elif (n, mlen) != (nseg, msg_len):
                raise ProtocolError("segments disagree")
            if n > 1 and seq < n - 1:
                size = len(body)
            parts[seq] = body
            if len(parts) == nseg:
                out = b"".join(parts[i] for i in range(nseg))
                if len(out) != msg_len:
                    raise ProtocolError("reassembled length differs from msg_len")
                if size is not None and any(len(parts[i]) != size for i in range(nseg - 1)):
                    raise ProtocolError("non-last segments differ in size")
                return out

    def _server_function(self, func_id: int, request: bytes, key: str) -> dict:
        """Amendment 1: the reply must start with {"KEY": and carry layout 1."""
        reply = self.call(func_id, request)
        if not reply.startswith(b'{"' + key.encode() + b'":'):
            raise ProtocolError(f"not a {key} reply")
        doc = json.loads(reply.decode("utf-8"))
        if doc[key] != 1:
            raise ProtocolError(f"{key} layout {doc[key]}")
        return doc

    def ping(self) -> dict:
        return self._server_function(PING, b"SRPC-PING", "ping")

    def describe(self) -> dict:
        return self._server_function(DESCRIBE, b"SRPC-DESCRIBE", "describe")
