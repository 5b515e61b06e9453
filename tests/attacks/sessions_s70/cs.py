"""count_server.py PORT [reply_cache_ttl] [reply_cache_bytes]: a keyed splitrpc server ($ATTACK_DIR/keys.json,
default ATTACK_DIR=/tmp/attack65) on 127.0.0.1:PORT. Usage: python count_server.py 47701 &

Functions (all raw):
  1 echo   : echoes, and appends "<sha256 of request> <pid>" to $ATTACK_DIR/runs.log (ONE line per RUN;
             a hash twice = a call that ran twice, across processes/restarts/replicas too: one shared file,
             O_APPEND)
  2 count  : this process's run count (8 bytes LE)
  3 slow   : like echo but sleeps first (request's first byte / 10 s), so a call stays "in progress"
  4 stats  : json of srv.stats()["auth"] and ["drops"] (the server's public counters, black-box observer)
  5 big    : a reply of N bytes (N = first 4 bytes of request, LE), logs like echo (for amplification checks)

Also usable as `splitrpc serve --keys K --port P --processes N tests/attacks/issue52_s65/count_server.py`-style
MODULE:ATTR: `count_server:register` (a function taking a Server to register functions on)."""
import hashlib, json, os, sys, threading, signal, time

AD = os.environ.get("ATTACK_DIR", "/tmp/attack65")
_fd = None
_lock = threading.Lock()
_runs = [0]
_srv = [None]


def _log(q):
    global _fd
    if _fd is None:
        _fd = os.open(os.path.join(AD, "runs.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    with _lock:
        _runs[0] += 1
        os.write(_fd, f"{hashlib.sha256(bytes(q)).hexdigest()} {os.getpid()}\n".encode())


def echo(reqs, resps):
    for q in reqs:
        _log(q)
    for q, r in zip(reqs, resps):
        r[:len(q)] = q
    return [len(q) for q in reqs]


def slow(reqs, resps):
    for q in reqs:
        _log(q)
    time.sleep(max(bytes(q)[0] for q in reqs) / 10.0 if reqs else 0)
    for q, r in zip(reqs, resps):
        r[:len(q)] = q
    return [len(q) for q in reqs]


def count(reqs, resps):
    for r in resps:
        r[:8] = _runs[0].to_bytes(8, "little")
    return [8 for _ in reqs]


def stats(reqs, resps):
    out = []
    s = _srv[0].stats() if _srv[0] is not None else {}
    b = json.dumps({"pid": os.getpid(), "auth": s.get("auth"), "drops": s.get("drops")}, default=str).encode()[:60000]
    for r in resps:
        r[:len(b)] = b
        out.append(len(b))
    return out


def big(reqs, resps):
    out = []
    for q, r in zip(reqs, resps):
        _log(q)
        n = min(int.from_bytes(bytes(q)[:4], "little"), 60000)
        r[:n] = b"B" * n
        out.append(n)
    return out


def register(srv):
    _srv[0] = srv
    srv.add_function(echo, 1, "echo", raw=True, max_request=70000, max_response=70000)
    srv.add_function(count, 2, "count", raw=True, max_request=64, max_response=64)
    srv.add_function(slow, 3, "slow", raw=True, max_request=1024, max_response=1024)
    srv.add_function(stats, 4, "stats", raw=True, max_request=64, max_response=65000)
    srv.add_function(big, 5, "big", raw=True, max_request=64, max_response=65000)


if __name__ == "__main__":
    import splitrpc
    from splitrpc.auth import KeyTable
    port = int(sys.argv[1])
    kw = {}
    if len(sys.argv) > 2:
        kw["reply_cache_ttl"] = float(sys.argv[2])
    if len(sys.argv) > 3:
        kw["reply_cache_bytes"] = int(sys.argv[3])
    kw["legacy_v4"] = os.environ.get("LEGACY") == "1"
    kw["reuse_port"] = os.environ.get("REUSE") == "1"
    srv = splitrpc.Server("127.0.0.1", port, keys=KeyTable.load(os.path.join(AD, "keys.json")), wait="block", **kw)
    register(srv)
    srv.start()
    print(f"serving on 127.0.0.1:{port} pid {os.getpid()} {kw}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    while not stop.wait(0.5):
        pass
    srv.close()
