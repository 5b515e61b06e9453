"""A description (the server's word) whose one output is huge: the into path allocates the whole
output with np.empty before sending anything, and hands its size to srpc_client_call's uint32_t
cap. The parent commit (and every other path) read the reply first and raised ReplyMismatch.
Here: MemoryError / ValueError / OverflowError (not SplitRPCError), and the call is never made."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import splitrpc
from common import Hostile, desc, tensor, outcome

sizes = {"4 GiB (uint8[2**32])": [1 << 32], "1 TiB (uint8[2**40])": [1 << 40], "2**62 B": [1 << 62],
         "2**124 B (uint8[2**62, 2**62])": [1 << 62, 1 << 62]}
fns = [tensor(i + 1, f"f{i}", [("x", "<f4", [4])], [("y", "|u1", shape)]) for i, shape in enumerate(sizes.values())]
fns.append(tensor(50, "two", [("x", "<f4", [4])], [("y", "|u1", [1 << 40]), ("z", "|u1", [1])]))  # 2 outputs: old path
h = Hostile(desc(fns), lambda fid, data, n, rid: ("reply", b"\0" * 16))
c = splitrpc.Client("127.0.0.1", h.port, timeout=1.0, protocol=1, retries=0)
x = np.ones(4, np.float32)
for i, label in enumerate(sizes):
    fn = c.function(f"f{i}")
    before = len(h.calls)
    st, r = outcome(lambda: fn(x))
    print(f"{label:32s} {st:28s} {str(r)[:90]}  [calls sent: {len(h.calls) - before}]")
st, r = outcome(lambda: c.fn.two(x))
print(f"{'two outputs (old path), 1 TiB':32s} {st:28s} {str(r)[:90]}")
c.close()
h.close()
