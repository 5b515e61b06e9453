"""Attacks 1-3: replay of a captured signed (v4) and sealed (v5) request: same server (at once, and after
the reply cache has expired), after a restart (same keys, same port), on a replica (other port), on
`serve --processes 2`. Servers: cs.py (count server, LEGACY=1 -> legacy_v4) on 47901/47902, CLI on 47903.
Usage: python replay.py   (env ATTACK_DIR=/tmp/atk70; the servers run the installed /work/main/.venv build, no PYTHONPATH)"""
import sys, os, time, socket, subprocess, signal, collections, json
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *
from v4 import V4

HERE = os.path.dirname(os.path.abspath(__file__)); PY = "/work/main/.venv/bin/python"
env = {k: v for k, v in dict(os.environ, ATTACK_DIR=AD).items() if k != "PYTHONPATH"}
procs = []; TTL = 2.0
P1, P2, P3 = 47901, 47902, 47903
NAMES = {0: "REQ", 1: "RESP", 2: "ERR", 3: "INIT", 4: "ACCEPT", 5: "COOKIE", 6: "NO_SESSION"}


def start_single(port, legacy=True):
    p = subprocess.Popen([PY, os.path.join(HERE, "cs.py"), str(port), str(TTL)], cwd="/tmp",
                         env=dict(env, LEGACY="1" if legacy else "0"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(p); wait_up(port); return p


def start_multi(port, n):
    p = subprocess.Popen([PY, "-m", "splitrpc", "serve", "--keys", os.path.join(AD, "keys.json"), "--legacy-v4", "--port", str(port),
                          "--processes", str(n), "--grace", "0", "--drain-linger", "0", "cs:register"], cwd=HERE, env=env,
                         stdout=open(os.path.join(AD, f"multi{port}.out"), "w"), stderr=subprocess.STDOUT, start_new_session=True)
    procs.append(p); wait_up(port, 20); time.sleep(1.0); return p


def wait_up(port, t=15):
    end = time.time() + t
    while time.time() < end:
        try:
            c = Client(port, key=load_client(os.path.join(AD, "client2.json"))); c.handshake(timeout=0.3); c.sock.close(); return
        except Exception: time.sleep(0.3)
    raise RuntimeError(f"server on {port} not up")


def stop(p):
    try: os.killpg(p.pid, signal.SIGTERM) if p.args[1] == "-m" else p.send_signal(signal.SIGTERM)
    except ProcessLookupError: pass
    try: p.wait(10)
    except subprocess.TimeoutExpired: p.kill(); p.wait()


def replay(port, dgrams, sock=None, t=0.25):
    s = sock or socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if sock is None: s.bind(("127.0.0.1", 0))
    got = []
    for d in dgrams:
        s.sendto(d, ("127.0.0.1", port)); s.settimeout(t)
        try:
            while True:
                r = s.recv(70000); h = parse_hdr(r); got.append((f"v{h['ver']}-" + NAMES.get(h["typ"], "?"), len(r)))
        except socket.timeout: pass
    if sock is None: s.close()
    return got


def st(port):
    s = stats(port)
    return s if s is None else {k: s[k] for k in ("sessions", "made", "stale", "addr")}


def drops(port):
    """a few auth drop counters through function 4 (key 2)"""
    c = Client(port, key=load_client(os.path.join(AD, "client2.json"))); c.handshake()
    for d in c.req_dgrams(4, 7, b"s"): c.send(d)
    for x in c.recv_all(0.3):
        k, v = c.classify(x)
        if k == "RESP":
            j = json.loads(v[1]); dr = j["drops"]
            c.sock.close()
            return {"pid": j["pid"], **{k: dr.get(k) for k in ("auth_replay", "auth_stale", "auth_address", "auth_v4_off", "auth_no_session", "no_session") if k in dr}}
    c.sock.close()


def rep(label, port, res, X):
    print(f"  {label:60s} -> answers {res} | X ran {len(runs(X))}x")


try:
    open(os.path.join(AD, "runs.log"), "a").close()
    s1 = start_single(P1); s2 = start_single(P2); mp = start_multi(P3, 2)
    kid, sec = load_client(os.path.join(AD, "client.json"))
    print("drops before, P1:", drops(P1))
    # ---- v4 capture
    v = V4(kid, sec); sk4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); sk4.bind(("127.0.0.1", 0))
    X4 = b"v4-X-" + os.urandom(12); r4 = int.from_bytes(os.urandom(5), "big")
    REQ4 = v.req(1, r4, X4); t_cap4 = time.time()
    sk4.sendto(REQ4, ("127.0.0.1", P1)); sk4.settimeout(0.5); R4 = sk4.recv(70000)
    print("[v4] legit call:", v.check(R4)[0], v.check(R4)[1] == X4, "| X4 ran", len(runs(X4)))
    print("[1] v4 replay, same server")
    rep("captured REQ4 again at once, same socket", P1, replay(P1, [REQ4], sk4), X4)
    rep("captured REQ4 again at once, other socket", P1, replay(P1, [REQ4]), X4)
    RT = v.req(1, r4, X4)   # a legit retransmission (new counter) -> cached reply
    rep("legit retransmission (new counter) while cached", P1, replay(P1, [RT], sk4), X4)
    # ---- v5 capture
    c = Client(P1); A = c.handshake(); INIT5 = c.last_init
    X5 = b"v5-X-" + os.urandom(12); r5 = int.from_bytes(os.urandom(5), "big")
    REQ5 = c.req_dgrams(1, r5, X5)[0]; c.send(REQ5); print("[v5] legit call:", ans(c, A), "| X5 ran", len(runs(X5)))
    print("[1] v5 replay, same server")
    rep("captured REQ5 at once, same socket", P1, replay(P1, [REQ5], c.sock), X5)
    rep("captured REQ5 at once, other socket", P1, replay(P1, [REQ5]), X5)
    rep("captured INIT5+REQ5 at once, same socket", P1, replay(P1, [INIT5, REQ5], c.sock), X5)
    print("  drops P1:", drops(P1), st(P1))
    time.sleep(TTL * 2 + 1.5)   # reply cache (TTL s) expired
    print(f"[1] after the reply cache expired ({TTL*2+1.5:.1f} s, ttl {TTL} s)")
    rep("captured REQ4 again, same socket", P1, replay(P1, [REQ4], sk4), X4)
    rep("captured REQ4 again, other socket", P1, replay(P1, [REQ4]), X4)
    rep("captured REQ5 again, same socket", P1, replay(P1, [REQ5], c.sock), X5)
    rep("captured INIT5+REQ5 again, other socket", P1, replay(P1, [INIT5, REQ5]), X5)
    RT2 = v.req(1, r4, X4)
    rep("v4 re-signed retransmission (new counter) after cache expiry", P1, replay(P1, [RT2], sk4), X4)
    print("  drops P1:", drops(P1), st(P1))
    # ---- 2: restart
    stop(s1); s1 = start_single(P1)
    print(f"[2] server on {P1} restarted (same keys, same port), {time.time()-t_cap4:.1f} s after capture")
    rep("captured INIT5+REQ5, client's socket", P1, replay(P1, [INIT5, REQ5], c.sock), X5)
    rep("captured INIT5+REQ5, other socket", P1, replay(P1, [INIT5, REQ5]), X5)
    rep("captured REQ4, client's socket (legacy-v4 on)", P1, replay(P1, [REQ4], sk4), X4)
    rep("captured REQ4 again (2nd copy after restart)", P1, replay(P1, [REQ4]), X4)
    print("  drops P1:", drops(P1))
    # restart without legacy v4: v4 must be dropped
    stop(s1); s1 = start_single(P1, legacy=False)
    rep("[2b] restarted WITHOUT --legacy-v4: captured REQ4", P1, replay(P1, [REQ4], sk4), X4)
    print("  drops P1:", drops(P1))
    # ---- 3: replica and --processes 2
    print(f"[3] replica on {P2} (same keys), {time.time()-t_cap4:.1f} s after capture")
    rep("captured INIT5+REQ5, 5 sockets", P2, [replay(P2, [INIT5, REQ5]) for _ in range(5)], X5)
    rep("captured REQ4 (legacy-v4 on)", P2, replay(P2, [REQ4]), X4)
    print(f"[3] serve --processes 2 --legacy-v4 on {P3}")
    rep("captured INIT5+REQ5 from 20 sockets", P3, collections.Counter(str(replay(P3, [INIT5, REQ5], t=0.1)) for _ in range(20)), X5)
    rep("captured REQ4 from 20 sockets", P3, collections.Counter(str(replay(P3, [REQ4], t=0.1)) for _ in range(20)), X4)
    # a call made on the multi-process server itself, replayed to both processes
    m = Client(P3); M = m.handshake(); Y = b"multi-" + os.urandom(12); ry = int.from_bytes(os.urandom(5), "big")
    REQY = m.req_dgrams(1, ry, Y)[0]; m.send(REQY); print("  Y (v5) on --processes 2:", ans(m, M))
    rep("Y's INIT+REQ from 20 sockets", P3, collections.Counter(str(replay(P3, [m.last_init, REQY], t=0.1)) for _ in range(20)), Y)
    v2 = V4(kid, sec); W = b"multi4-" + os.urandom(12); W4 = v2.req(1, 99, W)
    rep("W (v4) legit on --processes 2", P3, replay(P3, [W4]), W)
    rep("W4 captured, from 20 sockets", P3, collections.Counter(str(replay(P3, [W4], t=0.1)) for _ in range(20)), W)
    for nm, X in (("X4", X4), ("X5", X5), ("Y", Y), ("W", W)):
        print(f"RESULT {nm} ran {len(runs(X))} times in pids {runs(X)}")
finally:
    for p in procs:
        if p.poll() is None: stop(p)
