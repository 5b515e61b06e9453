"""PROBE of tombstones within the reply cache's time: can others spend or steal a tombstone, and do
chains of resumes through tombstones hold?
 1. victim's A forgotten with X cached (insider flood; victim's datagrams dropped 2+ s) -> tombstone
 2. insider (same key) INITs naming A with a wrong resume (x50); key 2 INITs naming A (x50);
    the victim's own first INIT replayed from another address
 3. victim resumes naming A from a NEW address (a NAT rebinding) -> B; resends X (must be the cached reply)
 4. B silent, forgotten -> tombstone; victim resumes naming B -> C; resends X; then a new call Z under C,
    Z's late resend under A's and B's ids refused?
Usage: python attack_tomb_probe.py PORT   (fresh count_server.py; ~15 s)"""
import sys, os, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *

PORT = int(sys.argv[1])
ins = Insider(PORT); ins.flood(2200); print("insider holds", len(ins.mine), "sessions")
k2 = load_client(os.path.join(AD, "client2.json"))
v = Client(PORT); A = v.handshake(); INIT_A = v.last_init
X = os.urandom(32); rid = int.from_bytes(os.urandom(5), "big")
v.send(v.req_dgrams(1, rid, X)[0]); print("X under A:", ans(v, A)); t0 = time.time()


def forget(label):
    before = stats(PORT)["tombstones"]; ins.touch_all(); t = time.time()
    while time.time() - t < 2.2: time.sleep(0.05)
    for k in range(6):
        ins.flood(150, keep=False); st = stats(PORT)
        if st["tombstones"] > before: break
    print(f"+{time.time()-t0:.2f}s {label} forgotten?", st)


time.sleep(0.3); forget("A")
# 2. spend or steal attempts
for i in range(50):
    ins.fs.sendto(make_init(ins.psk, ins.kid, int.from_bytes(os.urandom(6), "big") or 1, os.urandom(32), int(time.time() * 1000),
                            prev=A.sid, prev_kc2s=os.urandom(32)), ins.SRV)
o = Client(PORT, key=k2)
for i in range(50):
    o.send(make_init(k2[1], k2[0], int.from_bytes(os.urandom(6), "big") or 1, os.urandom(32), int(time.time() * 1000), prev=A.sid, prev_kc2s=os.urandom(32)))
ins.drain(0.2); o.recv_all(0.2)
r = Client(PORT); r.send(INIT_A); print("victim's INIT of A replayed from another address:", [parse_hdr(x)["typ"] for x in r.recv_all(0.2)])
print(f"+{time.time()-t0:.2f}s after 100 wrong resumes naming A:", stats(PORT))
# 3. the victim, from a new address (NAT rebinding), resumes naming A
v2 = Client(PORT); v2.sess = None
B = v2.handshake(prev=A); v2.send(v2.req_dgrams(1, rid, X, sess=B)[0]); print(f"+{time.time()-t0:.2f}s victim (new address) resumed from A -> B, X resent:", ans(v2, B), stats(PORT))
# 4. chain
time.sleep(0.3); forget("B")
C = v2.handshake(prev=B); v2.send(v2.req_dgrams(1, rid, X, sess=C)[0]); print(f"+{time.time()-t0:.2f}s resumed from B -> C, X resent:", ans(v2, C), stats(PORT))
Z = os.urandom(32); v2.send(v2.req_dgrams(1, rid + 5, Z, sess=C)[0]); print("new call Z under C:", ans(v2, C))
n, nz = runs(X), runs(Z); print("X ran", len(n), "times; Z ran", len(nz), "<-- RAN TWICE" if len(n) > 1 or len(nz) > 1 else "")
