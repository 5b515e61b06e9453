"""t1_long_local_error.py's bug with an ordinary host: a key revoked on the server. The client's new handshake goes
unanswered for 12.6 s and its call fails with Unavailable whose text (~500 bytes: "no version 5
session with ... it may not hold this key ...") is longer than the output; the into path raises
NativeError(ENOBUFS) "srpc_client_call: No buffer space available" instead. ~15 s of wall time."""
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import splitrpc
from splitrpc import TensorSpec
from splitrpc.auth import Key, KeyTable
from common import outcome


def server(port, keys):
    srv = splitrpc.Server("127.0.0.1", port, wait="block", keys=KeyTable(keys))

    @srv.function(1, "f", inputs=[TensorSpec("x", "float32", (64,))], outputs=[TensorSpec("y", "float32", (64,))])
    def f(x, y):
        y[:] = x + 1

    @srv.function(2, "g", inputs=[TensorSpec("x", "float32", (64,))],
                  outputs=[TensorSpec("y", "float32", (32,)), TensorSpec("z", "float32", (32,))])
    def g(x, y, z):
        y[:], z[:] = x[:, :32], x[:, 32:]
    srv.start()
    return srv


k1, k2 = Key.generate(1), Key.generate(2)
a = server(0, [k1, k2])
port = a.port
c = splitrpc.Client("127.0.0.1", port, timeout=20.0, key=k1)
fn, gn = c.fn.f, c.fn.g
x = np.ones(64, np.float32)
print("before:", outcome(lambda: fn(x).y[:2]))
a.close()
b = server(port, [k2])  # the same server again, key 1 revoked
import threading
res = {}
t = threading.Thread(target=lambda: res.__setitem__("g (2 outputs, bytes path)", outcome(lambda: gn(x))))
t.start()
t0 = time.monotonic()
st, r = outcome(lambda: fn(x))
t.join()
print(f"f (into path) after {time.monotonic() - t0:.1f} s: {st}: {str(r)[:120]}")
for k, (st, r) in res.items():
    print(f"{k}: {st}: {str(r)[:120]}")
c.close(); b.close()
