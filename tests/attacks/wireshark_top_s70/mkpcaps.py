"""mkpcaps.py OUTDIR: malformed splitrpc pcaps for the Lua dissector (stdlib + tests/foreign_client.py)."""
import json, os, random, struct, sys, hashlib
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from foreign_client import crc16, crc32c, pack, v4_sign

def pcap(path, dgrams, t0=1764331200.0):
    """dgrams: list of bytes or (bytes, sport, dport)."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, d in enumerate(dgrams):
            if isinstance(d, bytes):
                d = (d, 40000, 9230)
            data, sp, dp = d
            udp = struct.pack(">HHHH", sp, dp, 8 + len(data), 0) + data
            ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i & 0xFFFF, 0, 64, 17, 0,
                             bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1]))
            frame = b"\0" * 12 + b"\x08\x00" + ip + udp
            t = t0 + i * 0.001
            f.write(struct.pack("<IIII", int(t), int((t % 1) * 1e6), len(frame), len(frame)) + frame)

def hdr(ver, typ, fid=1, rid=0x1234, seq=0, nseg=1, mlen=0, aux=0, good=True):
    h = bytearray(struct.pack(">BBHQHHIH", 0xA5, (ver << 4) | typ, fid, rid, seq, nseg, mlen, aux))
    if ver >= 2 and good:
        h[4:6] = crc16(bytes(h)).to_bytes(2, "big")
    return bytes(h)

def main(out):
    os.makedirs(out, exist_ok=True)
    # 1 truncated: magic + 0..21 bytes
    base = hdr(2, 0, mlen=4) + b"abcd"
    pcap(f"{out}/trunc.pcap", [b"\xa5" + base[1:1 + k] for k in range(0, 22)] +
         [(b"\xa5" + base[1:1 + k], 40001, 50000 + k) for k in range(0, 22)])
    # 2 every version x type, port and heuristic, with 0, 4 and 60 data bytes
    L = []
    for v in range(16):
        for t in range(16):
            for dl in (0, 4, 60, 130):
                d = hdr(v, t, mlen=dl) + os.urandom(dl)
                L.append(d); L.append((d, 40002, 41000 + v * 16 + t))
    pcap(f"{out}/vertype.pcap", L)
    # 3 segmentation nonsense, v1..v5 (v3 sealed, v4 unsigned trailer)
    L = []
    def body(v, h, data):
        d = h + data
        if v == 3: d = d + crc32c(d).to_bytes(4, "big")
        if v == 4: d = d + bytes(40)
        if v == 5: d = d + bytes(32)
        return d
    for v in range(1, 6):
        for (seq, nseg, mlen, dl) in [(0, 0, 4, 4), (5, 3, 12, 4), (0xFFFF, 0xFFFF, 4, 4), (0, 1, 0xFFFFFFFF, 4),
                                       (0, 65000, 0xFFFFFFFF, 1400), (64999, 65000, 0xFFFFFFFF, 1400),
                                       (1, 65000, 65000 * 100, 100), (0, 2, 0, 0), (0, 1, 5, 4)]:
            d = body(v, hdr(v, 0, rid=1000 + v, seq=seq, nseg=nseg, mlen=mlen), os.urandom(dl))
            L.append(d); L.append((d, 40003, 42000 + v))
    # inconsistent segment sizes for one req_id, v2: segs of 10, 7, 3 for msg_len 20 nseg 3 -> wrong
    for v in (2, 3):
        for seq, dl in ((0, 10), (1, 7), (2, 3)):
            L.append(body(v, hdr(v, 0, rid=0x777, seq=seq, nseg=3, mlen=20), bytes([65 + seq]) * dl))
    # overlapping/duplicated with different bytes: seq 0 twice, different bytes, then seq 1
    for seq, fill in ((0, b"A"), (0, b"B"), (1, b"C")):
        L.append(body(2, hdr(2, 0, rid=0x888, seq=seq, nseg=2, mlen=20), fill * 10))
    pcap(f"{out}/segments.pcap", L)
    # 4 65000 segments claimed, 3000 frames of one message (different req ids too)
    L = []
    for i in range(3000):
        L.append(hdr(2, 0, rid=0x999, seq=i, nseg=65000, mlen=0xFFFFFFFF) + os.urandom(1000))
    pcap(f"{out}/many_segments.pcap", L)
    # 5 v4/v5 shorter than trailers; v5 handshakes with wrong lengths
    L = []
    for v in (3, 4, 5):
        for extra in range(0, 70, 3):
            L.append(hdr(v, 0, mlen=0) + os.urandom(extra))
            L.append(hdr(v, 1, mlen=extra) + os.urandom(extra))
    for t in range(3, 16):
        for blen in (0, 1, 7, 8, 9, 43, 44, 45, 63, 64, 65, 103, 104, 105, 200):
            for mlen in (blen, 104, 0xFFFFFFFF):
                d = hdr(5, t, fid=0, mlen=mlen) + os.urandom(blen)
                L.append(d); L.append((d, 40005, 43000 + t))
    pcap(f"{out}/short_v45.pcap", L)
    # 6 describe replies: malformed/huge/nested JSON, names with control chars / format strings
    docs = [b'{"describe":', b'{"describe": 1, "functions": [', b'{"describe":1,"functions":' + b"[" * 50000 + b"]" * 50000 + b"}",
            b'{"describe":1,"functions":{"a":1}}', b'{"describe":1,"functions":[{"id":"x","name":1}]}',
            b'{"describe":1,"functions":[{"id":1,"name":"%s%s%s%n%d\\u0000\\u001b[31mRED\\n\\r\\t"}]}',
            b'{"describe":1,"functions":[{"id":2,"name":"' + b"N" * 60000 + b'"}]}',
            b'{"describe":1,"functions":[{"id":3,"name":"\\ud800\\udfff"}]}',
            b'{"describe":1,"functions":[{"id":1e999,"name":"inf"},{"id":-1,"name":"neg"},{"id":1.5,"name":"frac"}]}',
            b'{"describe":1,"functions":[{"id":4,"name":"' + b"\xff\xfe\x00\x01" + b'"}]}',
            b'{"describe":1,"functions":[{"id":5,"name":"\\uZZZZ"}]}',
            b'{"describe":1,"functions":[{"id":6,"name":"\\u12"}]}',
            b'{"describe":' + b"1" * 100000 + b'}',
            b'{"describe":1,"functions":[{"id":7,"name":"' + b'\\"' * 20000 + b'"}]}',
            ]
    L = []
    for i, doc in enumerate(docs):
        rid = 0x5000 + i
        L.append((hdr(2, 0, fid=0xFFFE, rid=rid, mlen=0), 40006, 9230))
        S = 1400
        segs = [doc[k:k + S] for k in range(0, len(doc), S)] or [b""]
        for s, part in enumerate(segs):
            L.append((hdr(2, 1, fid=0xFFFE, rid=rid, seq=s, nseg=len(segs), mlen=len(doc)) + part, 9230, 40006))
    # then calls to the named ids
    for fid in range(0, 8):
        L.append((hdr(2, 0, fid=fid, rid=0x6000 + fid, mlen=0), 40006, 9230))
    pcap(f"{out}/describe.pcap", L)
    # 7 bad CRCs / forged v4 tags (key in keys.json)
    secret = bytes(range(32))
    json.dump({"id": 7, "secret": secret.hex()}, open(f"{out}/keys.json", "w"))
    L = []
    good2 = hdr(2, 0, mlen=4) + b"abcd"
    L.append(good2); L.append(bytes([good2[0], good2[1], good2[2], good2[3], good2[4] ^ 1]) + good2[5:])
    g3 = hdr(3, 0, mlen=4) + b"abcd"; g3 = g3 + crc32c(g3).to_bytes(4, "big")
    L.append(g3); L.append(g3[:-1] + bytes([g3[-1] ^ 1]))
    g4 = v4_sign(hdr(4, 0, rid=0x4444, mlen=4) + b"abcd", 7, secret, 1, 1)
    L.append(g4); L.append(g4[:-1] + bytes([g4[-1] ^ 1]))
    L.append(g4[:22] + b"abce" + g4[26:])  # data changed, tag kept
    L.append(v4_sign(hdr(4, 0, rid=0x4445, mlen=4) + b"abcd", 7, b"\x01" * 32, 1, 2))  # wrong key
    L.append(v4_sign(hdr(4, 0, rid=0x4446, mlen=4) + b"abcd", 8, secret, 1, 3))  # unknown key id
    pcap(f"{out}/checks.pcap", L)
    for name, text in [("k_badjson", "{not json"), ("k_badhex", '{"id":7,"secret":"' + "zz" * 32 + '"}'),
                       ("k_short", '{"id":7,"secret":"abcd"}'), ("k_empty", ""), ("k_list", "[1,2,3]"),
                       ("k_nested", "[" * 100000 + "]" * 100000), ("k_table", '{"keys":[{"id":7,"secret":"' + secret.hex() + '"},{"id":"x"}]}'),
                       ("k_str", '"hello"'), ("k_num", "42"), ("k_null", "null"), ("k_idstr", '{"id":"7","secret":"' + secret.hex() + '"}'),
                       ("k_bin", "\x00\xff")]:
        open(f"{out}/{name}.json", "w", encoding="latin-1").write(text)
    # 8 random fuzz
    rnd = random.Random(70)
    L = []
    for i in range(5000):
        n = rnd.choice([rnd.randrange(1, 30), rnd.randrange(22, 200), rnd.randrange(22, 1500)])
        d = bytearray(rnd.randbytes(n)); d[0] = 0xA5
        if n > 1:
            d[1] = rnd.choice([rnd.randrange(256), 0x10, 0x20, 0x30, 0x40, 0x50, 0x51, 0x53, 0x54, 0x55, 0x56, 0x57])
        if n >= 22 and rnd.random() < 0.5:
            d[12:14] = (0).to_bytes(2, "big"); d[14:16] = rnd.choice([1, 1, 2, 65000]).to_bytes(2, "big")
            d[16:20] = (n - 22 - rnd.choice([0, 4, 32, 40, 48])).to_bytes(4, "big", signed=True)[-4:] if n >= 70 else d[16:20]
            if rnd.random() < 0.5 and (d[1] >> 4) >= 2:
                d[4:6] = crc16(bytes(d[:22])).to_bytes(2, "big")
        d = bytes(d)
        L.append(d if rnd.random() < 0.5 else (d, rnd.randrange(1024, 65535), rnd.randrange(1024, 65535)))
    pcap(f"{out}/fuzz.pcap", L)

if __name__ == "__main__":
    main(sys.argv[1])
