"""Attack 6 (new at stop 70): the refactored code (session_data.c's gather, the copy of a datagram's data pieces
before an encrypting seal). For each suite splitrpc.Client offers (AEGIS-128L, AES-256-GCM, ChaCha20-Poly1305),
a v5 ENCRYPT session (splitrpc.Client(key=..., encrypt=True, suites=[...])) through an on-path proxy:
  - 100 kB calls to function 6 (raw echo) and 7 (8 tensor outputs: every reply segment sealed from several pieces):
    replies right, each ran once, the ACCEPT sets ENCRYPT and the suite's bit, no 32-byte run of the plaintext
    is seen on the wire either way;
  - the proxy flips one ciphertext byte of one REQUEST segment in flight (the original never arrives): the server
    drops it (auth_bad_tag), the client sends again, the call is right and ran once;
  - the proxy flips one ciphertext byte of one RESPONSE segment in flight: the client drops it (its bad_auth), asks
    again, the reply (from the server's reply cache) is right, the call ran once;
  - afterwards the attacker re-sends every captured REQUEST segment (from the proxy's upstream socket, i.e. the
    client's address as the server sees it): auth_replay, nothing runs; each with one ciphertext byte flipped:
    auth_bad_tag; the same from another socket: NO_SESSION at most, nothing runs.
Then a page-only client (v5.py, flags ENCRYPT|suite, segments of 1400) checks the wire against docs/PROTOCOL-v5.md:
it encrypts 100 kB requests itself and decrypts the server's reply segments (sealed from 8 pieces for function 7).
Usage: python enc.py SERVER_PORT PROXY_PORT [client segment_size]   (an encsrv.py server on SERVER_PORT)"""
import sys, os, time, socket, threading, select, json, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *
import splitrpc

SP, PP = int(sys.argv[1]), int(sys.argv[2]); CSEG = int(sys.argv[3]) if len(sys.argv) > 3 else None
SRV = ("127.0.0.1", SP)
NAMES = {0: "REQ", 1: "RESP", 2: "ERR", 3: "INIT", 4: "ACCEPT", 5: "COOKIE", 6: "NO_SESSION"}


def drops():
    c = Client(SP, key=load_client(os.path.join(AD, "client2.json"))); c.handshake()
    for d in c.req_dgrams(4, 7, b"s"): c.send(d)
    for x in c.recv_all(0.3):
        k, v = c.classify(x)
        if k == "RESP":
            j = json.loads(v[1]); c.sock.close()
            return {k: v for k, v in j["drops"].items() if v}
    c.sock.close()


class Proxy:
    """UDP relay client <-> server on PP; logs every datagram; tamper rules flip one body byte once."""
    def __init__(self):
        self.ps = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); self.ps.bind(("127.0.0.1", PP))
        self.up = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); self.up.bind(("127.0.0.1", 0))
        for s in (self.ps, self.up): s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.c2s, self.s2c, self.cl, self.rules, self.flipped = [], [], None, [], []
        self.aegis = False; self.stop = threading.Event()
        threading.Thread(target=self.loop, daemon=True).start()

    def body(self, d):
        return 22, len(d) - (70 if self.aegis else 54)     # body = d[22:22+L]

    def flip(self, d):
        o, L = self.body(d); b = bytearray(d); b[o + L // 2] ^= 0x01; return bytes(b)

    def loop(self):
        while not self.stop.is_set():
            r, _, _ = select.select([self.ps, self.up], [], [], 0.1)
            for s in r:
                d, a = s.recvfrom(70000); h = parse_hdr(d)
                if s is self.ps:
                    self.cl = a; self.c2s.append(d); dst, out = SRV, self.up
                else:
                    self.s2c.append(d); dst, out = self.cl, self.ps
                    if h and h["typ"] == T_ACCEPT: self.aegis = bool(struct.unpack(">I", d[66:70])[0] & F_AEGIS)
                for rule in list(self.rules):
                    if h and rule(s is self.ps, h):
                        self.rules.remove(rule); d = self.flip(d); self.flipped.append((s is self.ps, h["func"], h["seq"], h["nseg"]))
                out.sendto(d, dst)


def has_plain(dgrams, X):
    return any(X[i:i + 32] in d for d in dgrams for i in range(0, len(X) - 32, 4099))


def expect_flags(suites):
    return F_ENC | (F_AEGIS if "aegis-128l" in suites else F_AES if "aes-256-gcm" in suites else 0)


px = Proxy(); verdicts = []
print(f"server {SP}, proxy {PP}, client segment_size {CSEG}; splitrpc suites here: "
      f"{__import__('splitrpc._native.auth', fromlist=['x']).suites()}")
print("drops before:", drops())
for suites in (["aegis-128l", "aes-256-gcm", "chacha20-poly1305"], ["aes-256-gcm", "chacha20-poly1305"], ["chacha20-poly1305"]):
    px.c2s.clear(); px.s2c.clear(); px.flipped.clear()
    kw = dict(segment_size=CSEG) if CSEG else {}
    cl = splitrpc.Client("127.0.0.1", PP, timeout=5.0, key=os.path.join(AD, "client.json"), encrypt=True, suites=suites, **kw)
    X6, X7 = os.urandom(100000), os.urandom(100000)
    ok6 = bytes(cl.call(6, X6)) == X6; ok7 = bytes(cl.call(7, X7)) == X7
    acc = [d for d in px.s2c if parse_hdr(d)["typ"] == T_ACCEPT][-1]; af = struct.unpack(">I", acc[66:70])[0]
    reqsegs = collections.Counter((parse_hdr(d)["func"], parse_hdr(d)["nseg"]) for d in px.c2s if parse_hdr(d)["typ"] == T_REQ)
    respsegs = collections.Counter((parse_hdr(d)["func"], parse_hdr(d)["nseg"]) for d in px.s2c if parse_hdr(d)["typ"] == T_RESP)
    leak = has_plain(px.c2s + px.s2c, X6) or has_plain(px.c2s + px.s2c, X7)
    print(f"\n== suites offered {suites}: ACCEPT flags {af} (expected {expect_flags(suites)})")
    print(f"   100 kB calls: f6 right {ok6}, f7 (8 pieces) right {ok7}; ran {len(runs(X6))}x, {len(runs(X7))}x; "
          f"REQ segs (func,nseg): {dict(reqsegs)}; RESP segs: {dict(respsegs)}; plaintext on the wire: {leak}")
    d0 = drops()
    # in-flight flip of one REQUEST segment (seq 1) of a new f6 call, and of one RESPONSE segment (seq 1) of a new f7 call
    Y6, Y7 = os.urandom(100000), os.urandom(100000)
    px.rules.append(lambda c2s, h: c2s and h["typ"] == T_REQ and h["func"] == 6 and h["seq"] == 1)
    t = time.time(); okY6 = bytes(cl.call(6, Y6)) == Y6; dt6 = time.time() - t
    px.rules.append(lambda c2s, h: (not c2s) and h["typ"] == T_RESP and h["func"] == 7 and h["seq"] == min(1, h["nseg"] - 1))
    t = time.time(); okY7 = bytes(cl.call(7, Y7)) == Y7; dt7 = time.time() - t
    time.sleep(0.5)   # let the client's retransmitted segments (counted 'duplicate' by the server) land first
    d1 = drops(); cst = {k: v for k, v in cl.stats().items() if v}
    print(f"   flipped in flight {px.flipped}: f6 call right {okY6} in {dt6:.2f}s ran {len(runs(Y6))}x; "
          f"f7 call right {okY7} in {dt7:.2f}s ran {len(runs(Y7))}x")
    print(f"   server auth_bad_tag {d0.get('auth_bad_tag', 0)} -> {d1.get('auth_bad_tag', 0)}; client stats {cst}")
    # (The one never-delivered segment, flipped, is auth_bad_tag or, once the window's top noted every 2.5 s has
    # passed its counter, auth_stale: refused either way. The in-flight flip above is the tag check proper.)
    # after the fact: every captured REQUEST segment (one of them, the original of the segment flipped in flight,
    # never reached the server) sent again from the proxy's upstream socket (the client's address as the server
    # sees it): first each with one ciphertext byte flipped, then unmodified; then unmodified from another socket
    cap = [d for d in px.c2s if parse_hdr(d)["typ"] == T_REQ]
    px.rules.clear()
    def delta(a, b): return {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b) if b.get(k, 0) != a.get(k, 0)}
    before = len(px.s2c)
    for d in cap: px.up.sendto(px.flip(d), SRV)
    time.sleep(0.4); d2 = drops(); ans_flip = [NAMES[parse_hdr(d)["typ"]] for d in px.s2c[before:]]
    before = len(px.s2c)
    for d in cap: px.up.sendto(d, SRV)
    time.sleep(0.4); d3 = drops(); ans_rep = [NAMES[parse_hdr(d)["typ"]] for d in px.s2c[before:]]
    o = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); o.bind(("127.0.0.1", 0)); o.settimeout(0.3); ans_o = []
    for d in cap: o.sendto(d, SRV)
    try:
        while True: ans_o.append(NAMES[parse_hdr(o.recv(70000))["typ"]])
    except socket.timeout: pass
    d4 = drops(); o.close()
    runs_after = [len(runs(x)) for x in (X6, X7, Y6, Y7)]
    df, dr, do = delta(d1, d2), delta(d2, d3), delta(d3, d4)
    lateness = {k: x.pop('duplicate') for k, x in (('flip', df), ('rep', dr)) if 'duplicate' in x}   # legit retransmissions still landing
    print(f"   {len(cap)} captured REQ segments, one ciphertext byte flipped each, client's address: "
          f"answers {dict(collections.Counter(ans_flip))}; drops {df}")
    print(f"   the same unmodified, client's address: answers {dict(collections.Counter(ans_rep))}; drops {dr}")
    print(f"   the same unmodified, another socket: answers {dict(collections.Counter(ans_o))}; drops {do}"
          + (f" (left out above: 'duplicate' of the client's own retransmissions still landing: {lateness})" if lateness else ""))
    good = (ok6 and ok7 and okY6 and okY7 and af == expect_flags(suites) and not leak and len(px.flipped) == 2
            and runs_after == [1, 1, 1, 1] and d1.get("auth_bad_tag", 0) - d0.get("auth_bad_tag", 0) == 1
            and cst.get("bad_auth", 0) >= 1 and not ans_rep and not ans_flip and ans_o.count("NO_SESSION") <= 1
            and set(ans_o) <= {"NO_SESSION"} and sum(df.values()) == len(cap)
            and set(df) <= {"auth_bad_tag", "auth_replay", "auth_stale"} and sum(dr.values()) >= len(cap) - 1
            and set(dr) <= {"auth_replay", "duplicate", "auth_stale"} and do == {"auth_address": len(cap)})
    print(f"   runs X6 X7 Y6 Y7: {runs_after} -> {'PASS' if good else 'CHECK'}"); verdicts.append((suites[0], good))
    cl.close()
px.stop.set()

# page-only client, ENCRYPT with each suite, requests in 1400-byte segments, replies as the server segments them
print("\n== page-only client (v5.py from docs/PROTOCOL-v5.md), ENCRYPT, requests in 1400-byte segments")
for fl, nm in ((F_ENC | F_AEGIS, "aegis"), (F_ENC | F_AES, "aes"), (F_ENC, "chacha")):
    c = Client(SP, flags=fl); s = c.handshake(); res = []; rid = int.from_bytes(os.urandom(4), "big")
    for func in (6, 7):
        X = os.urandom(100000); rid += 1      # a line's calls take increasing req_ids (PROTOCOL-v5.md)
        for d in c.req_dgrams(func, rid, X, S=1400): c.send(d)
        segs = {}; bad = 0
        for d in c.recv_all(1.0):
            r = s.open(d)
            if r is None: bad += 1; continue
            hh, data, ctr = r
            if hh["req_id"] == rid and hh["typ"] == T_RESP: segs[hh["seq"]] = (hh["nseg"], data)
        n = next(iter(segs.values()))[0] if segs else 0
        got = b"".join(segs[i][1] for i in range(n)) if n and len(segs) == n else None
        res.append((func, s.flags, n, got == X, bad, len(runs(X))))
    print(f"   {nm}: (func, session flags, reply segments, reply right, undecryptable, runs) {res}")
    verdicts.append(("page-" + nm, all(r[3] and r[4] == 0 and r[5] == 1 and r[1] == fl for r in res)))
print("\ndrops end:", drops())
print("VERDICTS", verdicts)
