"""A local outcome whose text is longer than the output's array (> 256 bytes) is reported as
NativeError ENOBUFS instead of its own exception (here Unavailable) on the into path.

The C client's own texts are not capped at SRPC_ERRMSG_MAX: fail_unreachable's "the server HOST
port P is unreachable (...)" is up to 399 bytes with a long host name (a numeric host written with
leading zeros, 0...0177.0.0.1, is 127.0.0.1), and v5_fail_waiting's (a handshake unanswered for
12.6 s) is ~500 bytes whatever the host. call_into treats rc == -ENOBUFS with a non-zero code as
a native failure."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import splitrpc
from splitrpc import TensorSpec
from common import outcome

srv = splitrpc.Server("127.0.0.1", 0, wait="block")


@srv.function(1, "f", inputs=[TensorSpec("x", "float32", (64,))], outputs=[TensorSpec("y", "float32", (64,))])
def f(x, y):  # 256-byte output: the into path
    y[:] = x + 1


@srv.function(2, "g", inputs=[TensorSpec("x", "float32", (64,))], outputs=[TensorSpec("y", "float32", (32,)),
                                                                          TensorSpec("z", "float32", (32,))])
def g(x, y, z):  # the same 256 bytes as two outputs: the old (bytes) path, for comparison
    y[:] = x[:32]
    z[:] = x[32:]


srv.start()
port = srv.port
host = "0" * 300 + "177.0.0.1"  # 127.0.0.1 (inet_aton: octal 0177), a 309-character host name
c = splitrpc.Client(host, port, timeout=2.0)
x = np.ones(64, np.float32)
fn, gn = c.fn.f, c.fn.g
print("before:", outcome(lambda: fn(x).y[:3]))
srv.close()  # nothing listens now: the kernel answers "port unreachable"
for label, call in [("raw call()        ", lambda: c.call(1, x)),
                    ("typed, 2 outputs  ", lambda: gn(x)),
                    ("typed fast path   ", lambda: fn(x)),
                    ("typed invoke      ", lambda: fn.invoke([x])),
                    ("typed via kwargs  ", lambda: fn(x=x))]:
    st, r = outcome(call)
    print(label, st, str(r)[:90])
c.close()
