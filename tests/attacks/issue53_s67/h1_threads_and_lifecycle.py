"""Held checks: threads sharing one Function on one Client (every output right, no two outputs
sharing memory), use after close, a Function kept after its client is dropped."""
import gc, os, sys, threading, weakref
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import splitrpc
from splitrpc import TensorSpec
from common import outcome

srv = splitrpc.Server("127.0.0.1", 0, wait="block")


@srv.function(1, "f", inputs=[TensorSpec("x", "float32", (256,))], outputs=[TensorSpec("y", "float32", (256,))])
def f(x, y):
    y[:] = x * 2 + 1


@srv.function(2, "h", inputs=[TensorSpec("a", "int32", (4, 16)), TensorSpec("b", "int32", (64,))],
              outputs=[TensorSpec("y", "int64", (8, 8))])
def h(a, b, y):
    y[:] = (a.reshape(len(a), 64) + b).reshape(len(a), 8, 8)


srv.start()
c = splitrpc.Client("127.0.0.1", srv.port, timeout=2.0)
fn = c.fn.f
bad, outs = [], []
lock = threading.Lock()


def worker(k):
    mine = []
    for i in range(300):
        x = np.full(256, k * 1000 + i, np.float32)
        r = fn(x) if i % 3 else fn.invoke([x]) if i % 2 else fn(x=x)
        if not np.array_equal(r.y, x * 2 + 1):
            bad.append((k, i))
        mine.append(r.y)
    with lock:
        outs.extend(mine)


ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
for t in ts: t.start()
for t in ts: t.join()
ptrs = {o.__array_interface__["data"][0] for o in outs}
print("threads: wrong", len(bad), "outputs", len(outs), "distinct buffers", len(ptrs),
      "all writable+own", all(o.flags.writeable and o.flags.owndata for o in outs))
# multi-input, 2-D output: invoke path into
hn = c.fn.h
a, b = np.arange(64, dtype=np.int32).reshape(4, 16), np.ones(64, np.int32)
r1, r2 = hn(a, b), hn(a, b=b)
print("h:", r1.y.shape, r1.y.dtype, np.array_equal(r1.y, (a.reshape(64) + 1).reshape(8, 8)),
      np.shares_memory(r1.y, r2.y), r1.y.flags.owndata)
# use after close
c.close()
print("after close fast:", outcome(lambda: fn(np.ones(256, np.float32))))
print("after close invoke:", outcome(lambda: fn.invoke([np.ones(256, np.float32)])))
print("after close batch:", outcome(lambda: fn(np.ones((2, 256), np.float32))))
print("after close h:", outcome(lambda: hn(a, b)))
# client dropped, function kept
c2 = splitrpc.Client("127.0.0.1", srv.port, timeout=2.0)
fn2 = c2.fn.f
wr = weakref.ref(c2)
del c2
gc.collect()
print("client alive while function held:", wr() is not None, outcome(lambda: fn2(np.ones(256, np.float32)).y[:2]))
del fn2
gc.collect()
print("client freed once function dropped:", wr() is None)
srv.close()
