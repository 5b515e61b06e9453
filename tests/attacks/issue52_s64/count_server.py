"""count_server.py PORT: a splitrpc server with keys (/tmp/attack/keys.json), on 127.0.0.1:PORT, whose
function 1 ("echo", raw) echoes its request and logs every run: one line per run in
/tmp/attack/runs.PORT.log with the request's sha256 (so a request that ran twice shows twice).
Function 2 ("count") returns the number of runs so far as 8 little-endian bytes."""
import hashlib, os, sys, threading, signal
import splitrpc
from splitrpc.auth import KeyTable

port = int(sys.argv[1])
log = open(os.path.join(os.environ.get("ATTACK_DIR", "/tmp/attack"), f"runs.{port}.log"), "a", buffering=1)
lock = threading.Lock()
runs = [0]

def echo(reqs, resps):
    with lock:
        for q in reqs:
            runs[0] += 1
            log.write(hashlib.sha256(bytes(q)).hexdigest() + "\n")
    for q, r in zip(reqs, resps):
        r[:len(q)] = q
    return [len(q) for q in reqs]

def count(reqs, resps):
    for r in resps:
        r[:8] = runs[0].to_bytes(8, "little")
    return [8 for _ in reqs]

srv = splitrpc.Server("127.0.0.1", port, keys=KeyTable.load(os.path.join(os.environ.get("ATTACK_DIR", "/tmp/attack"), "keys.json")), wait="block")
srv.add_function(echo, 1, "echo", raw=True, max_request=70000, max_response=70000)
srv.add_function(count, 2, "count", raw=True, max_request=64, max_response=64)
srv.start()
print(f"serving on 127.0.0.1:{port}", flush=True)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: stop.set())
signal.signal(signal.SIGINT, lambda *a: stop.set())
while not stop.wait(0.5):
    pass
srv.close()
