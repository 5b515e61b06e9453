"""Attack 4: reflected replies to the server (its own RESPONSE, v4 and v5, and a reply from another session),
then hostile datagrams to splitrpc's own client: a fake server answering its INIT with forged ACCEPTs/COOKIEs
(made with foreign_v5.py and a WRONG psk), and an on-path proxy injecting a NO_SESSION for every request.
Usage: python reflect.py PORT    (a cs.py server with LEGACY=1 on PORT)"""
import sys, os, time, socket, threading, json
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *
from v4 import V4
import foreign_v5 as F
import splitrpc

PORT = int(sys.argv[1]); SRV = ("127.0.0.1", PORT)
def drops():
    c = Client(PORT, key=load_client(os.path.join(AD, "client2.json"))); c.handshake()
    for d in c.req_dgrams(4, 7, b"s"): c.send(d)
    for x in c.recv_all(0.3):
        k, v = c.classify(x)
        if k == "RESP":
            j = json.loads(v[1]); c.sock.close()
            return {k: v for k, v in j["drops"].items() if v}, {k: j["auth"][k] for k in ("sessions", "sessions_made")}
def tx(sock, d, t=0.3):
    sock.sendto(d, SRV); sock.settimeout(t); out = []
    try:
        while True: out.append(parse_hdr(sock.recv(70000))["typ"])
    except socket.timeout: return out

kid, sec = load_client(os.path.join(AD, "client.json"))
print("drops before:", drops())
c = Client(PORT); A = c.handshake(); X = b"refl-X-" + os.urandom(8)
c.send(c.req_dgrams(1, 1000, X)[0]); R5 = c.recv(0.5); print("v5 call:", c.classify(R5)[0])
c2 = Client(PORT); B = c2.handshake(); Z = b"refl-Z-" + os.urandom(8)
c2.send(c2.req_dgrams(1, 1001, Z)[0]); RB = c2.recv(0.5)
v = V4(kid, sec); s4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s4.bind(("127.0.0.1", 0))
Q = b"refl-Q-" + os.urandom(8); s4.sendto(v.req(1, 55, Q), SRV); s4.settimeout(0.5); R4 = s4.recv(70000); print("v4 call:", v.check(R4)[0])
other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); other.bind(("127.0.0.1", 0))
print("server's own v5 RESPONSE back to it, from the client:", tx(c.sock, R5), "| from elsewhere:", tx(other, R5))
print("session B's RESPONSE sent from A's client socket:", tx(c.sock, RB))
rw = bytearray(R5); rw[1] = (5 << 4) | T_REQ; rw[4:6] = b"\0\0"; import binascii, struct
struct.pack_into(">H", rw, 4, binascii.crc_hqx(bytes(rw[:22]), 0xFFFF))
print("own RESPONSE with type rewritten to REQUEST (tag now wrong):", tx(c.sock, bytes(rw)))
print("server's own v4 RESPONSE back to it:", tx(s4, R4), "| elsewhere:", tx(other, R4))
rw4 = bytearray(R4); rw4[1] = (4 << 4) | T_REQ; struct.pack_into(">H", rw4, 4, binascii.crc_hqx(bytes(rw4[:4]) + b"\0\0" + bytes(rw4[6:22]), 0xFFFF))
print("own v4 RESPONSE rewritten to REQUEST:", tx(s4, bytes(rw4)))
print("runs: X", len(runs(X)), "Z", len(runs(Z)), "Q", len(runs(Q)))
print("drops after:", drops())

# ---- fake server: forged ACCEPT (wrong psk) and forged COOKIE to splitrpc.Client
fk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); fk.bind(("127.0.0.1", 47911)); stop = threading.Event(); seen = []
def fake():
    fk.settimeout(0.1)
    while not stop.is_set():
        try: d, a = fk.recvfrom(70000)
        except socket.timeout: continue
        h = parse_hdr(d); seen.append(h["typ"])
        if h["typ"] == T_INIT:
            acc, _ = F.make_accept(os.urandom(32), d, F.private_key(), 12345, 0)      # wrong psk
            fk.sendto(acc, a)
            ck = hdr(T_COOKIE, 0, h["req_id"], 0, 1, 44, 0) + os.urandom(44)          # COOKIE nobody can open
            fk.sendto(ck, a)
            real = bytearray(acc); fk.sendto(bytes(real[:70]) + os.urandom(16), a)    # bad confirm
threading.Thread(target=fake, daemon=True).start()
vc = splitrpc.Client("127.0.0.1", 47911, timeout=2.0, key=os.path.join(AD, "client.json"))
t = time.time()
try: r = vc.call(1, b"to-fake"); print("FORGED ACCEPT: call RETURNED", bytes(r))
except Exception as e: print(f"forged ACCEPT/COOKIE: client refused, call failed after {time.time()-t:.1f}s: {type(e).__name__}: {str(e)[:100]}")
try: print("  client stats:", {k: v for k, v in vc.stats().items() if v and not isinstance(v, dict)})
except Exception as e: print("  stats:", e)
vc.close(); stop.set(); print("  datagram types the fake server got:", seen[:12], len(seen))

# ---- on-path proxy: forward everything, and answer every REQUEST with a forged NO_SESSION first
ps = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); ps.bind(("127.0.0.1", 47912))
up = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); up.bind(("127.0.0.1", 0)); stop2 = threading.Event(); cl = {}; nforged = [0]
def c2s():
    ps.settimeout(0.1)
    while not stop2.is_set():
        try: d, a = ps.recvfrom(70000)
        except socket.timeout: continue
        cl["a"] = a; h = parse_hdr(d)
        if h and h["typ"] == T_REQ and h["func"] == 1:
            sid = d[-32:-16]
            ns = hdr(T_NOSESS, h["func"], h["req_id"], 0, 1, 8, 0) + sid; ps.sendto(ns, a); nforged[0] += 1
        up.sendto(d, SRV)
def s2c():
    up.settimeout(0.1)
    while not stop2.is_set():
        try: d = up.recv(70000)
        except socket.timeout: continue
        time.sleep(0.15)       # the forged NO_SESSION wins the race
        ps.sendto(d, cl["a"])
for f in (c2s, s2c): threading.Thread(target=f, daemon=True).start()
pc = splitrpc.Client("127.0.0.1", 47912, timeout=3.0, key=os.path.join(AD, "client.json"))
Ys = [b"ns-Y%d-" % i + os.urandom(8) for i in range(5)]; ok = 0
for Y in Ys:
    try: ok += bytes(pc.call(1, Y)) == Y
    except Exception as e: print("  call failed:", type(e).__name__, str(e)[:80])
stop2.set()
print(f"forged NO_SESSION per request ({nforged[0]} sent): {ok}/5 calls right; runs per call {[len(runs(Y)) for Y in Ys]}")
print("  client stats:", {k: v for k, v in pc.stats().items() if v and not isinstance(v, dict) and ('sess' in k or 'auth' in k or 'handshake' in k)})
pc.close()
print("drops end:", drops())
