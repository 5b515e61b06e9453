"""REPLY INJECTION/REFLECTION against splitrpc's own client: an on-path proxy (127.0.0.1:47731) drops the
real replies of function 1 for 1.5 s and instead hands the client (a) a reply a same-key holder got for
the SAME func_id and req_id with other data under its own session, (b) the victim's own earlier reply
of another call (another req_id) re-sent with the header rewritten to X's req_id, (c) the reply under
the same session replayed (same counter). A page-following client must take none of them.

Usage: python attack_reply_inject.py PORT   (a count_server.py on PORT; ~5 s)"""
import sys, os, time, socket, threading
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *
import splitrpc

PORT = int(sys.argv[1]); SRV = ("127.0.0.1", PORT)
ps = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); ps.bind(("127.0.0.1", 47731))
up = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); up.bind(("127.0.0.1", 0))
st = dict(client=None, t_end=None, injected=[], prev_reply=None); stop = threading.Event()
ins = Client(PORT); I = ins.handshake()                       # same key, its own session


def c2s():
    ps.settimeout(0.1)
    while not stop.is_set():
        try: d, a = ps.recvfrom(70000)
        except socket.timeout: continue
        st["client"] = a; h = parse_hdr(d)
        if h and h["typ"] == T_REQ and h["func"] == 1 and st["t_end"] is None:
            st["t_end"] = time.time() + 1.5
            # (a) the insider makes the same func_id/req_id call with its own data, under its own session
            ins.send(I.seal(T_REQ, 1, h["req_id"], 0, 1, 6, 0, b"forged")); r = ins.recv(0.3)
            ps.sendto(r, a); st["injected"].append(("(a) other session, same req_id", len(r)))
            # (b) the victim's own earlier reply (another call) with X's req_id written in its header
            if st["prev_reply"]:
                p = bytearray(st["prev_reply"]); p[0:22] = hdr(T_RESP, 1, h["req_id"], 0, 1, parse_hdr(p)["msg_len"], 0)
                ps.sendto(bytes(p), a); st["injected"].append(("(b) own session, other call, header rewritten", len(p)))
        up.sendto(d, SRV)


def s2c():
    up.settimeout(0.1)
    while not stop.is_set():
        try: d = up.recv(70000)
        except socket.timeout: continue
        h = parse_hdr(d)
        if h and h["typ"] == T_RESP and h["func"] == 2: st["prev_reply"] = d
        if h and h["typ"] == T_RESP and h["func"] == 1 and st["t_end"] and time.time() < st["t_end"]:
            st.setdefault("held", d); continue
        if h and h["typ"] == T_RESP and h["func"] == 1 and "held" in st and not st.get("replayed"):
            ps.sendto(d, st["client"]); ps.sendto(d, st["client"]); st["replayed"] = True   # (c) the same reply twice
            st["injected"].append(("(c) real reply replayed (same counter)", len(d))); continue
        ps.sendto(d, st["client"])


for f in (c2s, s2c): threading.Thread(target=f, daemon=True).start()
v = splitrpc.Client("127.0.0.1", 47731, timeout=5.0, key=os.path.join(AD, "client.json"))
v.call(2, b"c")
X = b"inject-X-" + os.urandom(8); t = time.time(); r = v.call(1, X); stop.set()
print("injected:", st["injected"])
print(f"victim's call returned after {time.time()-t:.2f}s with the right data: {bytes(r) == X}; client bad_auth={v.stats()['bad_auth']}")
print("X ran", len(runs(X)), "times")
v.close()
