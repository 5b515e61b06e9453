"""A hostile/foreign splitrpc server on 127.0.0.1: answers describe (0xFFFE) and ping (0xFFFF) with
crafted JSON, and every other call with `reply(func_id, data)` bytes (or an error code)."""
import json, socket, struct, threading, binascii
HDR = struct.Struct(">BBHQHHIH")
S = 60000

class Hostile:
    def __init__(self, describe, reply=None, ping=None):
        self.describe = describe          # dict, bytes, or callable -> bytes
        self.reply = reply or (lambda fid, data: ("error", 1))
        self.ping = ping
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0)); self.port = self.sock.getsockname()[1]
        self.sock.settimeout(0.2); self.stop_ = False; self.describes = 0; self.calls = []
        self.t = threading.Thread(target=self.loop, daemon=True); self.t.start()
    def send(self, addr, fid, req, typ, data, aux=0, ver=1):
        n = max(1, -(-len(data) // S))
        for i in range(n):
            seg = data[i*S:(i+1)*S]
            h = bytearray(HDR.pack(0xA5, (ver << 4) | typ, fid, req, i, n, len(data), aux))
            if ver == 2:
                h[4:6] = b"\0\0"; h[4:6] = struct.pack(">H", binascii.crc_hqx(bytes(h), 0xFFFF))
            self.sock.sendto(bytes(h) + seg, addr)
    def loop(self):
        parts = {}
        while not self.stop_:
            try: pkt, addr = self.sock.recvfrom(70000)
            except socket.timeout: continue
            except OSError: return
            if len(pkt) < 22: continue
            magic, vt, fid, req, seq, nseg, mlen, aux = HDR.unpack_from(pkt)
            ver = vt >> 4
            if ver == 2: req &= (1 << 48) - 1  # bytes 6..11; bytes 4..5 are the check
            self.ver = ver
            key = (addr, req, fid); p = parts.setdefault(key, {})
            p[seq] = pkt[22:]
            if len(p) < nseg: continue
            data = b"".join(p[i] for i in range(nseg)); del parts[key]
            if fid == 0xFFFE:
                self.describes += 1
                d = self.describe() if callable(self.describe) else self.describe
                if isinstance(d, dict): d = json.dumps(d).encode()
                self.send(addr, fid, req, 1, d, ver=ver)
            elif fid == 0xFFFF and self.ping is not None:
                self.send(addr, fid, req, 1, json.dumps(self.ping).encode(), ver=ver)
            else:
                self.calls.append((fid, len(data)))
                r = self.reply(fid, data)
                if isinstance(r, tuple): self.send(addr, fid, req, 2, b"hostile", r[1], ver=ver)
                else: self.send(addr, fid, req, 1, r, ver=ver)
    def close(self):
        self.stop_ = True; self.sock.close()

def tensor(fid, name, ins, outs):
    return {"id": fid, "name": name, "version": None, "kind": "tensor", "max_batch": 8, "executor": "inline",
            "priority": 0, "device": "cpu",
            "inputs": [{"name": n, "dtype": d, "shape": s} for n, d, s in ins],
            "outputs": [{"name": n, "dtype": d, "shape": s} for n, d, s in outs]}

def desc(functions, **extra):
    d = {"describe": 1, "software": "hostile 0", "max_message": 1 << 20, "protocols": [1], "digest": "0123456789abcdef", "functions": functions}
    d.update(extra); return d
