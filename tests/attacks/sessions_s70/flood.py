"""Attack 5: floods. (a) valid INITs (key 1) from ONE address as fast as one process can; count ACCEPT/COOKIE;
open a COOKIE (foreign_v5.open_cookie) and retry with cookie_mac; (b) INITs with a bad mac1; (c) random garbage
and bad-tag v5 data datagrams and v4 datagrams; then legitimate clients (splitrpc.Client v5, raw v4) must be served.
Usage: python flood.py PORT N_INIT N_GARBAGE   (a cs.py server with LEGACY=1 on PORT)"""
import sys, os, time, socket, json, collections, struct
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *
from v4 import V4
import foreign_v5 as F
import splitrpc

PORT = int(sys.argv[1]); SRV = ("127.0.0.1", PORT); N = int(sys.argv[2]); G = int(sys.argv[3])
kid, psk = load_client(os.path.join(AD, "client.json"))
def drops():
    c = Client(PORT, key=load_client(os.path.join(AD, "client2.json")))
    try: c.handshake(timeout=1.0)
    except Exception as e: return f"observer got no session: {e}"
    for d in c.req_dgrams(4, 7, b"s"): c.send(d)
    for x in c.recv_all(0.5):
        k, v = c.classify(x)
        if k == "RESP":
            j = json.loads(v[1]); c.sock.close()
            return {k: v for k, v in j["drops"].items() if v}, {k: v for k, v in j["auth"].items() if isinstance(v, int) and v}
print("before:", drops())
fs = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); fs.bind(("127.0.0.1", 0)); fs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
got = collections.Counter(); bytes_in = bytes_out = 0; inits = {}; cookie_ans = []
def drain(t):
    global bytes_out
    fs.settimeout(t) if t else fs.setblocking(False)
    try:
        while True:
            d = fs.recv(70000); h = parse_hdr(d); got[h["typ"]] += 1; bytes_out += len(d)
            if h["typ"] == T_COOKIE and len(cookie_ans) < 5: cookie_ans.append(d)
    except (socket.timeout, BlockingIOError): pass
t0 = time.time()
for i in range(N):
    hid = i + 1; e = os.urandom(32); ini = make_init(psk, kid, hid, e, int(time.time() * 1000)); inits[hid] = (ini, e)
    fs.sendto(ini, SRV); bytes_in += len(ini)
    if i % 200 == 199: drain(0)
drain(0.5); dt = time.time() - t0
print(f"(a) {N} valid INITs from one address in {dt:.2f}s ({N/dt:.0f}/s): ACCEPT {got[T_ACCEPT]}, COOKIE {got[T_COOKIE]}, other {dict(got)}; bytes out/in {bytes_out}/{bytes_in} = {bytes_out/bytes_in:.2f}")
if cookie_ans:
    ck = cookie_ans[-1]; hid = parse_hdr(ck)["req_id"]; ini, e = inits[hid]
    cookie = F.open_cookie(psk, ini, ck); print("    COOKIE opened with the key:", cookie is not None)
    e2 = os.urandom(32); ini2 = make_init(psk, kid, hid, e2, int(time.time() * 1000), cookie=cookie)
    fs.sendto(ini2, SRV); fs.settimeout(1.0)
    try:
        while True:
            d = fs.recv(70000); h = parse_hdr(d)
            if h["req_id"] == hid: print("    INIT with cookie_mac ->", {4: "ACCEPT", 5: "COOKIE"}.get(h["typ"], h["typ"]), len(d)); break
    except socket.timeout: print("    INIT with cookie_mac -> no answer")
    # another address using the same cookie
    o = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); o.bind(("127.0.0.1", 0)); o.settimeout(0.5)
    ini3 = make_init(psk, kid, hid + 10**6, os.urandom(32), int(time.time() * 1000), cookie=cookie); o.sendto(ini3, SRV)
    try: print("    cookie used from ANOTHER address ->", parse_hdr(o.recv(70000))["typ"], "(4=ACCEPT,5=COOKIE)")
    except socket.timeout: print("    cookie used from ANOTHER address -> no answer")
print("after (a):", drops())
# (b) bad mac1 INITs, (c) garbage
got.clear(); bytes_out = 0; t0 = time.time()
for i in range(G):
    k = i % 4
    if k == 0: d = make_init(os.urandom(32), kid, i + 1, os.urandom(32), int(time.time() * 1000))     # bad mac1
    elif k == 1: d = os.urandom(1 + (i % 1400))                                                       # random bytes
    elif k == 2: d = hdr(T_REQ, 1, i, 0, 1, 8, 0) + b"garbage!" + struct.pack(">QQ", i + 7, 1) + os.urandom(16)   # v5 data, unknown session
    else: d = hdr(T_REQ, 1, i, 0, 1, 8, 0, ver=4) + b"garbage!" + struct.pack(">IQQI", kid, 5, i + 1, int(time.time() * 1000) & 0xFFFFFFFF) + os.urandom(16)  # v4 bad tag
    fs.sendto(d, SRV)
    if i % 200 == 199: drain(0)
drain(0.5); dt = time.time() - t0
print(f"(b,c) {G} garbage datagrams in {dt:.2f}s: answers {dict(got)} ({bytes_out} bytes)")
print("after (b,c):", drops())
# legit clients
vc = splitrpc.Client("127.0.0.1", PORT, timeout=2.0, key=os.path.join(AD, "client.json"))
Xs = [b"legit-%d-" % i + os.urandom(6) for i in range(5)]; ok = 0; t = time.time()
for X in Xs:
    try: ok += bytes(vc.call(1, X)) == X
    except Exception as e: print("  legit v5 call failed:", type(e).__name__, str(e)[:80])
print(f"legit splitrpc.Client (v5) after floods: {ok}/5 right in {time.time()-t:.2f}s, runs {[len(runs(X)) for X in Xs]}")
vc.close()
v = V4(kid, psk); s4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s4.bind(("127.0.0.1", 0)); s4.settimeout(1.0)
W = b"legit4-" + os.urandom(6); s4.sendto(v.req(1, 9, W), SRV)
try: print("legit v4 call after floods:", v.check(s4.recv(70000))[0], "runs", len(runs(W)))
except socket.timeout: print("legit v4 call after floods: NO ANSWER")
print("end:", drops())
