"""Held check: no growth of memory over many into-path calls, ReplyMismatch and ERROR replies."""
import os, resource, sys, tracemalloc
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import splitrpc
from common import Hostile, desc, tensor

good = bytes(4096)
h = Hostile(desc([tensor(1, "f", [("x", "<f4", [4])], [("y", "<f4", [1024])])]),
            lambda fid, data, n, rid: [("reply", good), ("reply", good[:100]), ("error", 2, b"no" * 100)][n % 3])
c = splitrpc.Client("127.0.0.1", h.port, timeout=1.0, protocol=1, retries=0)
fn, x = c.fn.f, np.ones(4, np.float32)


def run(n):
    for _ in range(n):
        try:
            fn(x)
        except splitrpc.SplitRPCError:
            pass


run(600)
import splitrpc.typed as t
t.RECHECK_S = 1e9  # (ReplyMismatch reads the description again each time; fine, but keep the run short)
h.calls = type("NoList", (list,), {"append": lambda self, v: None})()  # keep nothing


def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4


rs = [rss()]
for _ in range(3):
    run(2000)
    rs.append(rss())
print("RSS KiB after each 2000 calls (1/3 OK, 1/3 short, 1/3 ERROR):", rs)
c.close(); h.close()
