"""ACCEPTANCE: a captured INIT and a captured request (X) replayed to: the same server (same and other
source address), that server after a restart, a replica (second server, same key table), and every
process of `splitrpc serve --processes 3` (many source ports, so the kernel spreads them).
Starts and stops its own servers on ports 47720-47722. Runs counted in $ATTACK_DIR/runs.log.

Usage: python acceptance_replay.py     (~25 s)"""
import sys, os, time, socket, subprocess, signal, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *

HERE = os.path.dirname(os.path.abspath(__file__)); PY = "/work/main/.venv/bin/python"
SPL = "/work/main/.venv/bin/splitrpc"; env = dict(os.environ, ATTACK_DIR=AD)
procs = []


def start_single(port):
    p = subprocess.Popen([PY, os.path.join(HERE, "count_server.py"), str(port)], cwd="/tmp", env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(p); time.sleep(1.5); return p


def start_multi(port, n):
    subprocess.run(["cp", os.path.join(HERE, "count_server.py"), os.path.join(AD, "count_server.py")])
    p = subprocess.Popen([SPL, "serve", "--keys", os.path.join(AD, "keys.json"), "--port", str(port), "--processes", str(n),
                          "--grace", "0", "--drain-linger", "0", "count_server:register"], cwd=AD, env=env,
                         stdout=open(os.path.join(AD, f"multi{port}.out"), "w"), stderr=subprocess.STDOUT)
    procs.append(p); time.sleep(4); return p


def stop(p):
    p.send_signal(signal.SIGTERM)
    try: p.wait(10)
    except subprocess.TimeoutExpired: p.kill(); p.wait()


def replay(port, dgrams, sock=None):
    s = sock or socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if sock is None: s.bind(("127.0.0.1", 0))
    s.settimeout(0.15); got = []
    for d in dgrams:
        s.sendto(d, ("127.0.0.1", port))
        try:
            while True:
                r = s.recv(70000); got.append(({0: "REQ", 1: "RESP", 2: "ERR", 4: "ACCEPT", 5: "COOKIE", 6: "NO_SESSION"}.get(parse_hdr(r)["typ"]), len(r)))
        except socket.timeout: pass
    return got


try:
    s1 = start_single(47720); s2 = start_single(47721); mp = start_multi(47722, 3)
    c = Client(47720); A = c.handshake(); INIT = c.last_init
    X = b"acceptance-" + os.urandom(16); rid = int.from_bytes(os.urandom(5), "big")
    REQ = c.req_dgrams(1, rid, X)[0]; c.send(REQ); print("X on server 1:", ans(c, A))
    print("replay REQ, same socket:", replay(47720, [REQ], c.sock), "| other socket:", replay(47720, [REQ]))
    print("replay INIT+REQ, same socket:", replay(47720, [INIT, REQ], c.sock), "| other socket:", replay(47720, [INIT, REQ]))
    print("replica (47721), INIT+REQ from 5 sockets:", [replay(47721, [INIT, REQ]) for _ in range(5)])
    print("serve --processes 3 (47722), INIT+REQ from 30 sockets:", collections.Counter(str(replay(47722, [INIT, REQ])) for _ in range(30)))
    stop(s1); s1 = start_single(47720)
    print("server 1 restarted, INIT+REQ from the client's socket and 5 others:", replay(47720, [INIT, REQ], c.sock), [replay(47720, [INIT, REQ]) for _ in range(5)])
    # a call made on the multi-process server, captured, replayed to every process
    m = Client(47722); M = m.handshake(); Y = b"multi-" + os.urandom(16); r2 = int.from_bytes(os.urandom(5), "big")
    REQ2 = m.req_dgrams(1, r2, Y)[0]; m.send(REQ2); print("Y on --processes 3:", ans(m, M))
    print("Y's INIT+REQ replayed from 40 sockets:", collections.Counter(str(replay(47722, [m.last_init, REQ2])) for _ in range(40)))
    print("pids that served the multi-process port:", sorted(set(l.split()[1] for l in open(os.path.join(AD, "runs.log")))))
    nx, ny = runs(X), runs(Y)
    print("X ran", len(nx), "times", nx, "| Y ran", len(ny), "times", ny, "<-- RAN TWICE" if len(nx) > 1 or len(ny) > 1 else "(once each)")
finally:
    for p in procs:
        if p.poll() is None: stop(p)
