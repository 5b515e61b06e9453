"""encsrv.py PORT [segment_size_loopback]: cs.py's functions (1 echo, 4 stats, ...) plus, for the ENCRYPT attack
(refactored gather in session_data.c):
  6 bigecho : raw echo of up to 200,000 bytes; logs "<sha256> <pid>" to $ATTACK_DIR/runs.log like cs.py's echo
  7 pieces  : tensor function, input x uint8 (100000,), EIGHT outputs of odd sizes that are x's consecutive slices,
              so the reply (outputs concatenated) equals x and every reply segment is sealed from several
              data pieces (n > 1 in gather). Logs sha256(x) too.
Server on 127.0.0.1:PORT with $ATTACK_DIR/keys.json, reply cache ttl 2 s."""
import os, sys, signal, threading
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import splitrpc
from splitrpc import TensorSpec
from splitrpc.auth import KeyTable
import cs

AD = os.environ.get("ATTACK_DIR", "/tmp/atk70")
SIZES = [1, 7, 9991, 40000, 1, 25000, 24999, 1]
assert sum(SIZES) == 100000


def pieces(x, *ys):
    for row in range(x.shape[0]):
        cs._log(x[row].tobytes())
        at = 0
        for y in ys:
            n = y.shape[1]
            y[row, :] = x[row, at:at + n]
            at += n


if __name__ == "__main__":
    port = int(sys.argv[1])
    kw = dict(reply_cache_ttl=2.0)
    if len(sys.argv) > 2:
        kw["segment_size_loopback"] = int(sys.argv[2])
    srv = splitrpc.Server("127.0.0.1", port, keys=KeyTable.load(os.path.join(AD, "keys.json")), wait="block", **kw)
    cs.register(srv)
    srv.add_function(cs.echo, 6, "bigecho", raw=True, max_request=200000, max_response=200000)
    srv.add_function(pieces, 7, "pieces", inputs=[TensorSpec("x", "uint8", (100000,))],
                     outputs=[TensorSpec(f"y{i}", "uint8", (n,)) for i, n in enumerate(SIZES)])
    srv.start()
    print(f"serving on 127.0.0.1:{port} pid {os.getpid()} {kw}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    while not stop.wait(0.5):
        pass
    srv.close()
