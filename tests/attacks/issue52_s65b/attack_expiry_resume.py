"""ATTACK: a session that reaches its time (180 s) while its line has run calls; the client's 175 s
limit is counted from when it TOOK the ACCEPT, the server's from when it SENT it. An on-path attacker
holds the victim's ACCEPT back for D_ACC s (the client's handshake waits 12.6 s for it, so up to ~12.5
s), so the client's clock for the session runs D_ACC s behind the server's. The victim then follows
the page: its rekey INITs from 120 s are dropped on the path, its call X (sent at client-age 161 s)
ran but its reply and resends are dropped; at client-age 174.5 s (< 175) it makes a session naming
its current A (prev, resume), and its INIT copy delivered after DI s (the page's resend at +3.0 or
+6.2 s; the earlier copies dropped) reaches the server at server-age 174.5 + D_ACC + DI. The resend of
X under the new session must be refused (the line ran it). Does the server still have A's line?

Usage: ATTACK_DIR=DIR python attack_expiry_resume.py PORT D_ACC DI   (fresh count_server.py on PORT
with DIR's keys.json; ~195 s). Control: D_ACC=0 DI=0 (A alive at the resume).
CLK_MS=N: the victim's clock is N ms ahead of the server's (keep N within the key table's skew_s).
Who: on-path, no key (holds one ACCEPT, drops datagrams). Victim: page-following raw client (v5.py)."""
import sys, os, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "issue52_s65"))
from common import *
import common


def stats(port):  # the observer's session is renewed (it would pass 180 s)
    common._obs.clear(); return common.stats(port)


PORT = int(sys.argv[1]); D_ACC = float(sys.argv[2]); DI = float(sys.argv[3])
T_X, T_INIT = float(os.environ.get("T_X", 161)), float(os.environ.get("T_INIT", 174.5))
print("before:", stats(PORT))
v = Client(PORT); A = v.handshake(); ts0 = time.monotonic()        # the server sent A's ACCEPT now
tc0 = ts0 + D_ACC                                                  # the client takes it D_ACC s later
print(f"A={A.sid:#x}; ACCEPT held {D_ACC} s on the path (client's handshake still waiting)")
age = lambda: time.monotonic() - tc0
while age() < T_X: time.sleep(0.2)
X = os.urandom(32); rid = int.from_bytes(os.urandom(5), "big")
v.send(v.req_dgrams(1, rid, X, sess=A)[0]); a = ans(v, A, 0.3)
print(f"client-age {age():.1f} server-age {time.monotonic()-ts0:.1f}: X under A -> {a} (reply dropped on the path); runs={len(runs(X))}")
# X's resends under A (<=1 s apart) and the rekey INITs (from 120 s) are all dropped on the path
while age() < T_INIT: time.sleep(0.05)
hid = int.from_bytes(os.urandom(6), "big") or 1; e = os.urandom(32); tms = int(time.time() * 1000) + int(os.environ.get("CLK_MS", 0))  # the client's clock, ahead by CLK_MS (within the skew)
print(f"client-age {age():.2f}: INIT naming A made (A younger than 175 s by the client's clock); copies dropped until +{DI}")
while age() < T_INIT + DI: time.sleep(0.02)
print(f"server-age {time.monotonic()-ts0:.2f}: stats before the INIT copy arrives: {stats(PORT)}")
try:
    B = v.handshake(prev=A, hid=hid, e_priv=e, t_ms=tms)
except TimeoutError:
    print("no ACCEPT for the resume INIT (refused): availability only"); B = None
if B:
    print(f"server-age {time.monotonic()-ts0:.2f}: took B={B.sid:#x} (prev=A); resends X under B:", end=" ")
    v.send(v.req_dgrams(1, rid, X, sess=B)[0]); print(ans(v, B, 0.4))
    Z = os.urandom(8); v.send(v.req_dgrams(1, rid + 1, Z, sess=B)[0]); print("new call Z under B:", ans(v, B, 0.3))
print("after:", stats(PORT))
n = runs(X); print("X ran", len(n), "times", "<-- RAN TWICE" if len(n) > 1 else "")
