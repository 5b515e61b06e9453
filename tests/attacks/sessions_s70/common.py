"""Shared helpers for the stop-65 attacks (not a script). Written from docs/PROTOCOL-v5.md only.

- Insider: a holder of the victim's key (client.json) that makes many sessions from one socket,
  keeps them non-silent, and floods INITs so the server must forget silent sessions (per-key quota).
- stats(port): the server's public counters through count_server's function 4, called with
  ANOTHER key (client2.json) so it does not touch key 1's quota (an observer, not an attack step).
- runs(X): how many times request bytes X ran, from $ATTACK_DIR/runs.log (one line per run)."""
import hashlib, json, os, socket, struct, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from v5 import *

AD = os.environ.get("ATTACK_DIR", "/tmp/atk70")


def runs(X):
    h = hashlib.sha256(X).hexdigest()
    try:
        return [l.split()[1] for l in open(os.path.join(AD, "runs.log")) if l.startswith(h)]
    except FileNotFoundError:
        return []


_obs = {}


def stats(port):
    c = _obs.get(port)
    if c is None:
        c = Client(port, key=load_client(os.path.join(AD, "client2.json")))
        c.handshake()
        _obs[port] = c
    c.rid = getattr(c, "rid", int.from_bytes(os.urandom(4), "big")) + 1
    for d in c.req_dgrams(4, c.rid, b"s"):
        c.send(d)
    for x in c.recv_all(0.3):
        k, v = c.classify(x)
        if k == "RESP":
            j = json.loads(v[1])
            a = j["auth"]
            return dict(sessions=a["sessions"], made=a["sessions_made"], forgotten=a["sessions_forgotten"],
                        tombstones=a.get("tombstones"), tomb_resumes=a.get("tomb_resumes"),
                        table_full=j["drops"]["table_full"], stale=j["drops"]["auth_stale"],
                        unknown=j["drops"]["auth_unknown_key"], addr=j["drops"]["auth_address"])
    return None


def ans(c, s, t=0.25):
    return [c.classify(x, s)[0] for x in c.recv_all(t)]


class Insider:
    """Same-key holder. Sessions it keeps are 'mine'; it can touch them (a datagram each) so they
    are not silent, give each a call (so each has a cached reply), and flood throw-away INITs."""

    def __init__(self, port, key=None, bind=("127.0.0.1", 0)):
        self.SRV = ("127.0.0.1", port)
        self.kid, self.psk = key or load_client()
        self.fs = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.fs.bind(bind)
        self.fs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.mine = []
        self.rid = int.from_bytes(os.urandom(4), "big")

    def drain(self, t=0.2, cb=None):
        self.fs.settimeout(t if t > 0 else 0.0)
        n = 0
        try:
            while True:
                d = self.fs.recv(70000)
                n += 1
                if cb:
                    cb(d)
        except (socket.timeout, BlockingIOError):
            pass
        return n

    def flood(self, n, keep=True, gap=0.0018, prev=None):
        pend = {}
        got = []
        for i in range(n):
            hid = int.from_bytes(os.urandom(6), "big") or 1
            e = os.urandom(32)
            ini = make_init(self.psk, self.kid, hid, e, int(time.time() * 1000),
                            prev=prev.sid if prev else 0, prev_kc2s=prev.kc if prev else None)
            pend[hid] = (ini, e)
            self.fs.sendto(ini, self.SRV)
            time.sleep(gap)
            if i % 64 == 63:
                self.drain(0.0, lambda d: self._acc(d, pend, got, keep))

        self.drain(0.2, lambda d: self._acc(d, pend, got, keep))
        return got

    def _acc(self, d, pend, got, keep):
        h = parse_hdr(d)
        if h and h["typ"] == T_ACCEPT and h["req_id"] in pend:
            ini, e = pend.pop(h["req_id"])
            kc, ks, _, _ = derive(self.psk, ini, d, nb.crypto_scalarmult(e, d[34:66]))
            s = Sess(struct.unpack(">Q", d[26:34])[0], kc, ks, 0)
            got.append(s)
            if keep:
                self.mine.append(s)

    def touch_all(self, sessions=None):
        for i, s in enumerate(self.mine if sessions is None else sessions):
            s.ctr += 1
            self.fs.sendto(s.seal(T_REQ, 99, 1, 0, 1, 1, 0, b"x"), self.SRV)   # func 99: UNKNOWN_FUNCTION, never runs
            if i % 8 == 0:
                time.sleep(0.0005)
        self.drain(0.15)

    def call_each(self, sessions, func=1, payload=lambda i: b"insider" + os.urandom(8)):
        """one call per session (each session then has a cached reply)"""
        for i, s in enumerate(sessions):
            self.rid += 1
            q = payload(i)
            self.fs.sendto(s.seal(T_REQ, func, self.rid, 0, 1, len(q), 0, q), self.SRV)
            if i % 8 == 0:
                time.sleep(0.0008)
        return self.drain(0.2)
