"""AMPLIFICATION: every kind of datagram sent from addresses that never completed a handshake
(sockets bound to other loopback addresses 127.0.0.9x, which is what a spoofed source looks like to the
server; their answers are caught there), compared byte for byte with what triggered it.

Usage: python amplification.py PORT   (a count_server.py on PORT; ~10 s)"""
import sys, os, time, socket, struct
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *

PORT = int(sys.argv[1]); SRV = ("127.0.0.1", PORT)
kid, psk = load_client(); kid2, psk2 = load_client(os.path.join(AD, "client2.json"))
rows = []


def victim(ip, port=47790):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port)); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20); return s


def trial(name, dgrams, ip, settle=0.4):
    s = victim(ip); sent = 0
    for d in dgrams:
        s.sendto(d, SRV); sent += len(d)
    s.settimeout(settle); got = []
    try:
        while True: got.append(len(s.recv(70000)))
    except socket.timeout: pass
    s.close()
    mx = max(got) if got else 0
    rows.append((name, len(dgrams), sent, len(got), sum(got), mx, min(len(d) for d in dgrams)))
    print(f"{name:58s} sent {len(dgrams):5d} dgrams/{sent:8d} B  got {len(got):4d}/{sum(got):7d} B  largest {mx}  "
          f"{'AMPLIFIED' if sum(got) > sent or mx > min(len(d) for d in dgrams) else 'ok'}")


now = lambda: int(time.time() * 1000)
ri = lambda: int.from_bytes(os.urandom(6), "big") or 1
# a live session of the victim (the real client), to capture its datagrams
c = Client(PORT); A = c.handshake(); rid = int.from_bytes(os.urandom(5), "big")
big_req = c.req_dgrams(5, rid, (60000).to_bytes(4, "little") + b"spoof")[0]; c.send(big_req)
print("captured request for a 60000-byte reply, its own answer:", [len(x) for x in c.recv_all(0.3)])
trial("forged INIT (wrong mac1)", [make_init(os.urandom(32), kid, ri(), os.urandom(32), now())], "127.0.0.91")
trial("valid INIT by a key holder, spoofed source", [make_init(psk, kid, ri(), os.urandom(32), now())], "127.0.0.92")
I = make_init(psk, kid, ri(), os.urandom(32), now())
trial("same INIT x10 (seen before)", [I] * 10, "127.0.0.93")
trial("captured INIT of the client, from another address", [c.last_init], "127.0.0.93")
trial("captured request (60000-byte reply) replayed x20", [big_req] * 20, "127.0.0.94")
fresh = A.seal(T_REQ, 5, rid + 1, 0, 1, 9, 0, (60000).to_bytes(4, "little") + b"spoof")   # an unseen counter
trial("fresh captured request (unseen counter) from spoofed", [fresh], "127.0.0.95")
trial("54-byte data dgram, unknown session x100", [hdr(T_REQ, 1, i + 1, 0, 1, 0, 0) + os.urandom(32) for i in range(100)], "127.0.0.96")
trial("v2 unsigned REQUEST (ping/describe ids 0xFFF0..)", [hdr(T_REQ, f, 1, 0, 1, 0, 0, ver=2) for f in (0, 1, 0xFFFE, 0xFFFF)], "127.0.0.97")
trial("v1 unsigned REQUEST", [hdr(T_REQ, f, 1, 0, 1, 0, 0, ver=1) for f in (0, 1, 0xFFFE, 0xFFFF)], "127.0.0.97")
trial("v4-looking datagram", [hdr(T_REQ, 1, 1, 0, 1, 4, 0, ver=4) + b"abcd" + os.urandom(40)], "127.0.0.97")
trial("ACCEPT/COOKIE/NO_SESSION types sent to the server", [hdr(t, 0, 1, 0, 1, n, 0) + os.urandom(n) for t, n in ((4, 64), (5, 44), (6, 8))], "127.0.0.98")
# under load: a burst of valid INITs from a key-2 holder, then spoofed valid INITs -> COOKIE?
fl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); fl.bind(("127.0.0.1", 0)); fl.setblocking(False)
for i in range(1500):
    fl.sendto(make_init(psk2, kid2, ri(), os.urandom(32), now()), SRV)
trial("valid INIT x20 during a 1500-INIT burst (COOKIE?)", [make_init(psk, kid, ri(), os.urandom(32), now()) for _ in range(20)], "127.0.0.99")
worst = max(r[4] / r[2] for r in rows)
print("worst bytes-out/bytes-in to an unvalidated address:", round(worst, 3), "| any single answer larger than its trigger:",
      any(r[5] > r[6] for r in rows))
