"""ATTACK: a tombstone lives only while its line's calls are in the call table; after the reply cache
forgets the call, the line's memory of "calls it ran" is gone with it, and a resume naming the
forgotten session starts a new line, in which the call's resend runs again.

Usage: python attack_tomb_expiry.py PORT [WAIT] [control]   (fresh count_server.py on PORT; ~15-20 s)
  WAIT (default 11.5): seconds after the call was answered at which the victim's datagram is let through.
  control: no insider flood (A is never forgotten) -> the late resend must be refused (auth_stale).

Who: on-path attacker (drops the victim's retransmissions for WAIT s: the victim keeps sending under A
at least once a second, as the page asks, but none arrives) + a holder of the same key (or ordinary
load of that key past its quota) whose INITs make the server forget A (silent 2 s, calls answered).
Victim: follows the page: resends X under its current session A, acts on the NO_SESSION for A (its
current session), resumes naming A, resends X with the same req_id."""
import sys, os, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *

PORT = int(sys.argv[1])
WAIT = float(sys.argv[2]) if len(sys.argv) > 2 else 11.5
CONTROL = "control" in sys.argv
ins = Insider(PORT)
if not CONTROL:
    ins.flood(2200)
    print("insider holds", len(ins.mine), "sessions;", stats(PORT))
v = Client(PORT); A = v.handshake(); X = os.urandom(32); rid = int.from_bytes(os.urandom(5), "big")
v.send(v.req_dgrams(1, rid, X)[0]); print("X under A:", ans(v, A), "(reply dropped on the path)"); t0 = time.time()
if not CONTROL:
    ins.touch_all(); print(f"+{time.time()-t0:.2f}s insider touched its sessions")
    while time.time() - t0 < 2.2: time.sleep(0.05)
    for k in range(6):
        ins.flood(150, keep=False)
        st = stats(PORT); print(f"+{time.time()-t0:.2f}s INIT batch {k}:", st)
        if st["tombstones"]: break
# the victim's retransmissions of X under A (one a second) are all dropped on the path until WAIT
while time.time() - t0 < WAIT: time.sleep(0.1)
print(f"+{time.time()-t0:.2f}s before delivery:", stats(PORT))
v.send(v.req_dgrams(1, rid, X)[0]); a = ans(v, A, 0.4)
print(f"+{time.time()-t0:.2f}s victim's retransmission of X under A arrives:", a)
if "NO_SESSION" in a:
    B = v.handshake(prev=A)                      # A is the victim's current session: the page's rule
    v.send(v.req_dgrams(1, rid, X, sess=B)[0]); print("victim resumed (prev=A), X resent under B:", ans(v, B, 0.4))
print("after:", stats(PORT))
n = runs(X); print("X ran", len(n), "times", n, "<-- RAN TWICE" if len(n) > 1 else "")
