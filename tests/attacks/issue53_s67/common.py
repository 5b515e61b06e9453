"""Helpers for the issue53_s67 attacks: a hand-written protocol-version-1 server on 127.0.0.1 that
answers DESCRIBE with a crafted description and every other call as `reply(fid, data, n)` says.
Run the scripts from a folder outside the repository (so the installed splitrpc is imported)."""
import json
import socket
import struct
import threading

import numpy as np

HDR = struct.Struct(">BBHQHHIH")  # magic, ver_type, func_id, req_id, seq, nseg, msg_len, aux
REQUEST, RESPONSE, ERROR = 0, 1, 2
DESCRIBE, PING = 0xFFFE, 0xFFFF


def hdr(typ, fid, rid, seq, nseg, mlen, aux=0, ver=1):
    return HDR.pack(0xA5, (ver << 4) | typ, fid, rid, seq, nseg, mlen, aux)


class Hostile:
    """reply(fid, data, n) -> list of raw datagrams to send, given a helper `mk`, or one of:
    ("reply", bytes) / ("error", code, bytes) / None (no answer). n: how many calls so far."""

    def __init__(self, describe, reply, seg=1400):
        self.describe, self.reply, self.seg = describe, reply, seg
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.sock.settimeout(0.1)
        self.stop_ = False
        self.n = 0
        self.describes = 0
        self.calls = []
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def message(self, typ, fid, rid, data, aux=0):
        n = max(1, -(-len(data) // self.seg))
        return [hdr(typ, fid, rid, i, n, len(data), aux) + data[i * self.seg:(i + 1) * self.seg] for i in range(n)]

    def loop(self):
        while not self.stop_:
            try:
                d, peer = self.sock.recvfrom(70000)
            except socket.timeout:
                continue
            except OSError:
                return
            if len(d) < 22:
                continue
            _, vt, fid, rid, seq, nseg, mlen, aux = HDR.unpack_from(d)
            if seq != 0:
                continue
            if fid == DESCRIBE:
                self.describes += 1
                dd = self.describe() if callable(self.describe) else self.describe
                if isinstance(dd, dict):
                    dd = json.dumps(dd).encode()
                out = self.message(RESPONSE, fid, rid, dd)
            else:
                self.calls.append((fid, rid, d[22:]))
                self.n += 1
                r = self.reply(fid, d[22:], self.n, rid)
                if r is None:
                    continue
                if r[0] == "reply":
                    out = self.message(RESPONSE, fid, rid, r[1])
                elif r[0] == "error":
                    out = self.message(ERROR, fid, rid, r[2], r[1])
                elif r[0] == "raw":
                    out = r[1]
                else:
                    raise ValueError(r)
            for p in out:
                try:
                    self.sock.sendto(p, peer)
                except OSError:
                    pass

    def close(self):
        self.stop_ = True
        self.t.join()
        self.sock.close()


def tensor(fid, name, ins, outs):
    return {"id": fid, "name": name, "version": None, "kind": "tensor", "max_batch": 8, "executor": "inline",
            "priority": 0, "device": "cpu",
            "inputs": [{"name": n, "dtype": d, "shape": s} for n, d, s in ins],
            "outputs": [{"name": n, "dtype": d, "shape": s} for n, d, s in outs]}


def desc(functions, digest="0123456789abcdef", **extra):
    d = {"describe": 1, "software": "hostile 0", "max_message": 1 << 20, "protocols": [1], "digest": digest,
         "functions": functions}
    d.update(extra)
    return d


def outcome(f):
    try:
        r = f()
        return "OK", r
    except BaseException as e:  # noqa: BLE001
        return f"{type(e).__module__}.{type(e).__name__}", e
