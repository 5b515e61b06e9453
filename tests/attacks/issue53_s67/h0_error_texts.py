"""Probe: the into path against a hand-written v1 server (one float32[64] output = 256 bytes)."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import splitrpc
from common import Hostile, desc, tensor, outcome

D = desc([tensor(1, "f", [("x", "<f4", [64])], [("y", "<f4", [64])])])
script = []
h = Hostile(D, lambda fid, data, n, rid: script.pop(0) if script else None)
c = splitrpc.Client("127.0.0.1", h.port, timeout=0.5, protocol=1, retries=0)
fn = c.fn.f
print("into:", fn._b.into)
x = np.arange(64, dtype=np.float32)
cases = [
    ("exact", ("reply", (x + 1).tobytes())),
    ("short", ("reply", b"\1" * 100)),
    ("long", ("reply", b"\1" * 300)),
    ("empty", ("reply", b"")),
    ("error-empty", ("error", 2, b"")),
    ("error-nonutf8", ("error", 2, b"\xff\xfe\x80abc")),
    ("error-300", ("error", 5, b"Z" * 300)),
    ("error-code0", ("error", 0, b"zero code")),
    ("error-code-big", ("error", 999, b"big code")),
    ("error-65535", ("error", 65535, b"max code")),
]
for label, ans in cases:
    script.append(ans)
    st, r = outcome(lambda: fn(x))
    print(label, st, (r.y[:4], r.y.flags.owndata) if st == "OK" else str(r)[:150])
c.close(); h.close()
