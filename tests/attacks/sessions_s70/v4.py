"""Page-only version 4 (signed) client pieces, from docs/PROTOCOL-v4.md + PROTOCOL-v2.md."""
import hashlib, hmac, os, struct, time, socket, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from v5 import hdr, parse_hdr, T_REQ, T_RESP, T_ERR


def tag(secret, b):
    return hashlib.blake2b(b, key=secret, digest_size=16).digest()


def sign(secret, key_id, sender, counter, t_ms, header, data):
    pre = header + data + struct.pack(">IQQI", key_id, sender, counter, t_ms & 0xFFFFFFFF)
    return pre + tag(secret, pre)


class V4:
    def __init__(self, key_id, secret):
        self.kid, self.sec = key_id, secret
        self.sender = int.from_bytes(os.urandom(8), "big") or 1
        self.ctr = 0

    def req(self, func, rid, data):
        self.ctr += 1
        return sign(self.sec, self.kid, self.sender, self.ctr, int(time.time() * 1000),
                    hdr(T_REQ, func, rid, 0, 1, len(data), 0, ver=4), data)

    def check(self, d):
        """returns ('RESP'|'ERR', data) if a valid v4 reply for our key, else (why, None)"""
        h = parse_hdr(d)
        if not h or h["ver"] != 4:
            return ("notv4", None)
        if len(d) < 62:
            return ("short", None)
        kid = struct.unpack(">I", d[-40:-36])[0]
        if kid != self.kid:
            return ("otherkey", None)
        if not hmac.compare_digest(tag(self.sec, d[:-16]), d[-16:]):
            return ("badtag", None)
        return ({T_RESP: "RESP", T_ERR: "ERR"}.get(h["typ"], "type%d" % h["typ"]), d[22:-40])


if __name__ == "__main__":   # the page's worked example
    d = sign(bytes(range(32)), 7, 0x0102030405060708, 1, 0x12345678, hdr(T_REQ, 1, 1, 0, 1, 4, 0, ver=4), bytes([1, 2, 3, 4]))
    exp = bytes.fromhex("a5400001fc94000000000001000000010000000400000102030400000007010203040506070800000000000000011234567" "86d69a0066c4d2258d77a6ecdc8abc413")
    print("v4 worked example matches:", d == exp, len(d))
