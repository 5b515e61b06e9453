"""ATTACK: a line held only by tombstones, across the first tombstone's end. A (X ran, reply dropped)
is forgotten early (insider flood; the victim's resends under A dropped on the path) -> tombstone TA,
kept until A's ACCEPT + 235 s. At client-age T_B (< 175 s) the victim's resend is let through:
NO_SESSION -> resume naming A -> B follows the line; X resent under B is refused (ran) and stays
outstanding; its resends under B are dropped; B is forgotten (flood) -> tombstone TB. After TA's end
(A + 235 s) the victim's resend under B is let through: NO_SESSION -> resume naming B (its current,
young) -> C; X resent under C. Does the line's record of ran req_ids outlive TA (held by TB)?

Usage: ATTACK_DIR=DIR python attack_tomb_chain.py PORT [T_B] [T_C]   (fresh count_server.py; T_B
default 165, T_C default 240: ~250 s). Who: on-path (drops) + same-key insider (~5000 INITs).
Victim: page-following raw client."""
import sys, os, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "issue52_s65"))
from common import *
import common


def stats(port):  # the observer's session is renewed (it would pass 180 s)
    for i in range(3):
        common._obs.clear(); r = common.stats(port)
        if r: return r
    return {'tombstones': -1}


PORT = int(sys.argv[1]); T_B = float(sys.argv[2]) if len(sys.argv) > 2 else 165; T_C = float(sys.argv[3]) if len(sys.argv) > 3 else 240
v = Client(PORT); A = v.handshake(); t0 = time.monotonic()
X = os.urandom(32); rid = int.from_bytes(os.urandom(5), "big")
v.send(v.req_dgrams(1, rid, X, sess=A)[0]); print("X under A:", ans(v, A, 0.3), "(reply dropped)")
el = lambda: time.monotonic() - t0


def forget(ins, label, before):
    ins.touch_all(); t = time.monotonic()
    while time.monotonic() - t < 2.3: time.sleep(0.05)
    for k in range(8):
        ins.flood(150, keep=False); st = stats(PORT)
        if st["tombstones"] > before: break
    print(f"+{el():.1f}s {label} forgotten?", st, flush=True)
    return st


ins = Insider(PORT); ins.flood(2200); print(f"+{el():.1f}s insider holds {len(ins.mine)}")
forget(ins, "A", 0)
while el() < T_B: time.sleep(0.2)
v.send(v.req_dgrams(1, rid, X, sess=A)[0]); a = ans(v, A, 0.3); print(f"+{el():.1f}s resend under A let through ->", a)
B = v.handshake(prev=A); tB = time.monotonic()
v.send(v.req_dgrams(1, rid, X, sess=B)[0]); print(f"+{el():.1f}s B (prev=A); X resent under B ->", ans(v, B, 0.4), stats(PORT))
ins2 = Insider(PORT); ins2.flood(2200); st = forget(ins2, "B", stats(PORT)["tombstones"])
while el() < T_C: time.sleep(0.2)
print(f"+{el():.1f}s (TA gone? A+235 s) stats:", stats(PORT))
v.send(v.req_dgrams(1, rid, X, sess=B)[0]); a = ans(v, B, 0.3); print(f"+{el():.1f}s resend under B let through ->", a)
C = v.handshake(prev=B)
print(f"B age {time.monotonic()-tB:.0f} s; C (prev=B); X resent under C ->", end=" ")
v.send(v.req_dgrams(1, rid, X, sess=C)[0]); print(ans(v, C, 0.4))
print("after:", stats(PORT))
n = runs(X); print("X ran", len(n), "times", "<-- RAN TWICE" if len(n) > 1 else "")
