"""foreign_client.py: a splitrpc client written from PROTOCOL.md alone (stdlib only, no splitrpc code)."""
import os
import random
import socket
import struct
import time

HDR = struct.Struct(">BBHQHHIH")  # magic, ver_type, func_id, req_id, seq, nseg, msg_len, aux
MAGIC, VERSION = 0xA5, 1
REQUEST, RESPONSE, ERROR = 0, 1, 2


class ProtocolError(Exception):
    pass


class RemoteError(Exception):
    def __init__(self, code: int, text: str):
        super().__init__(f"error {code}: {text}")
        self.code, self.text = code, text


class ForeignClient:
    def __init__(self, host: str, port: int, seg_size: int = 1450, timeout: float = 2.0, shuffle: bool = False):
        self.addr = (host, port)
        self.seg = seg_size
        self.timeout = timeout
        self.shuffle = shuffle
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.connect(self.addr)
        self.next_id = int.from_bytes(os.urandom(8), "big")

    def close(self):
        self.sock.close()

    def segments(self, func_id: int, req_id: int, data: bytes) -> list:
        n = max(1, -(-len(data) // self.seg))
        return [HDR.pack(MAGIC, (VERSION << 4) | REQUEST, func_id, req_id, i, n, len(data), 0)
                + data[i * self.seg:(i + 1) * self.seg] for i in range(n)]

    def call(self, func_id: int, data: bytes) -> bytes:
        req_id = self.next_id
        self.next_id = (self.next_id + 1) % (1 << 64)
        segs = self.segments(func_id, req_id, data)
        if self.shuffle:
            random.Random(req_id).shuffle(segs)
        for s in segs:
            self.sock.send(s)
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
            if len(dgram) < HDR.size:
                continue
            magic, vt, fid, rid, seq, n, mlen, aux = HDR.unpack_from(dgram)
            if magic != MAGIC or vt >> 4 != VERSION or rid != req_id or fid != func_id:
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
