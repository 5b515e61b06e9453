"""Attack 5b: while a flood keeps the server under load, a COOKIE obtained at address A is used from address B
(expected: COOKIE again, no ACCEPT), and from A (expected: ACCEPT). Usage: python cookie_addr.py PORT"""
import sys, os, time, socket, threading
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *
import foreign_v5 as F
PORT = int(sys.argv[1]); SRV = ("127.0.0.1", PORT); kid, psk = load_client(os.path.join(AD, "client.json"))
stop = threading.Event()
def flood():
    fl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); fl.bind(("127.0.0.1", 0)); i = 0
    while not stop.is_set():
        i += 1; fl.sendto(make_init(psk, kid, 10**9 + i, os.urandom(32), int(time.time() * 1000)), SRV)
threading.Thread(target=flood, daemon=True).start(); time.sleep(0.5)
def ask(sock, hid, cookie=None, t=0.5):
    e = os.urandom(32); ini = make_init(psk, kid, hid, e, int(time.time() * 1000), cookie=cookie); sock.sendto(ini, SRV); sock.settimeout(t)
    end = time.time() + t
    while time.time() < end:
        try: d = sock.recv(70000)
        except socket.timeout: break
        h = parse_hdr(d)
        if h["req_id"] == hid: return ini, d, {4: "ACCEPT", 5: "COOKIE"}.get(h["typ"], h["typ"])
    return ini, None, "none"
a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); a.bind(("127.0.0.1", 0)); b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); b.bind(("127.0.0.1", 0))
res = []
for trial in range(5):
    ini, d, k = ask(a, 500 + trial)
    if k != "COOKIE": res.append(("A plain INIT", k)); continue
    cookie = F.open_cookie(psk, ini, d)
    _, _, kb = ask(b, 600 + trial, cookie)
    _, _, ka = ask(a, 500 + trial, cookie)
    res.append(("A plain INIT: COOKIE", "B with A's cookie: " + kb, "A with its cookie: " + ka))
stop.set()
for r in res: print(r)
