"""Held checks: hostile multi-segment replies, replies for other calls, and a description that
changes, against the into path (float32[1024] output, 4096 bytes). Never garbage: an output is
either the exact expected bytes or an exception."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import splitrpc
from common import Hostile, desc, tensor, hdr, outcome, RESPONSE, ERROR

good = (np.arange(1024, dtype=np.float32) * 3).tobytes()
state = {"mode": None, "desc_n": 1024}


def segs(fid, rid, data, S, order=None, mlen=None, nseg=None, extra=()):
    n = nseg or -(-len(data) // S)
    parts = [hdr(RESPONSE, fid, rid, i, n, mlen if mlen is not None else len(data)) + data[i * S:(i + 1) * S]
             for i in range(-(-len(data) // S))]
    if order:
        parts = [parts[i] for i in order]
    return list(extra) + parts


def reply(fid, data, n, rid):
    m = state["mode"]
    if m == "ok":
        return ("raw", segs(fid, rid, good, 1400))
    if m == "reversed":
        return ("raw", segs(fid, rid, good, 1400, order=[2, 1, 0]))
    if m == "dup-missing":  # seg 0 twice, seg 1 never
        return ("raw", segs(fid, rid, good, 1400, order=[0, 0, 2]))
    if m == "mlen-flip":  # seg 0 says 4096, seg 1 and 2 say 4200
        p = segs(fid, rid, good, 1400)
        p[1] = hdr(RESPONSE, fid, rid, 1, 3, 4200) + good[1400:2800]
        return ("raw", p)
    if m == "nseg-lie":  # nseg 4 of 1400 for a 4096 message: seg_check refuses
        return ("raw", segs(fid, rid, good, 1400, nseg=4))
    if m == "longer":
        return ("raw", segs(fid, rid, good + good, 1400))
    if m == "other-rid-first":
        return ("raw", segs(fid, rid + 1, bytes(4096), 1400) + segs(fid ^ 7, rid, bytes(4096), 1400)
                + segs(fid, rid, good, 1400))
    if m == "ok-then-error":
        return ("raw", segs(fid, rid, good, 1400) + [hdr(ERROR, fid, rid, 0, 1, 3, 2) + b"bad"])
    if m == "error-then-ok":
        return ("raw", [hdr(ERROR, fid, rid, 0, 1, 3, 2) + b"bad"] + segs(fid, rid, good, 1400))
    if m == "error-multiseg":
        t = b"E" * 2000
        return ("raw", [hdr(ERROR, fid, rid, i, 2, 2000, 5) + t[i * 1000:(i + 1) * 1000] for i in range(2)])
    if m == "unknown":
        return ("error", 1, b"gone")  # UNKNOWN_FUNCTION
    return None


def description():
    return desc([tensor(1, "f", [("x", "<f4", [4])], [("y", "<f4", [state["desc_n"]])])],
                digest=f"d{state['desc_n']}")


h = Hostile(description, reply)
c = splitrpc.Client("127.0.0.1", h.port, timeout=0.3, protocol=1, retries=0)
fn = c.fn.f
x = np.ones(4, np.float32)
for m in ["ok", "reversed", "dup-missing", "mlen-flip", "nseg-lie", "longer", "other-rid-first", "ok-then-error",
          "error-then-ok", "error-multiseg", "ok"]:
    state["mode"] = m
    st, r = outcome(lambda: fn(x))
    if st == "OK":
        r = "exact" if r.y.tobytes() == good else "GARBAGE " + repr(r.y[:4])
    print(f"{m:18s} {st.split('.')[-1]:16s} {str(r)[:100]}")
# the server's function changes: output 1024 -> 2048 floats, then -> 512, then gone (unknown)
for new, m in [(2048, "longer"), (512, "ok"), (1024, "unknown")]:
    fn = c.fn.f
    state["desc_n"], state["mode"] = new, m
    st, r = outcome(lambda: fn(x))
    print(f"desc -> {new:5d} ({m}) {st.split('.')[-1]:20s} {str(r)[:110]}")
    st, r = outcome(lambda: fn(x))
    print(f"   again           {st.split('.')[-1]:20s} {str(r)[:110]}")
c.close(); h.close()
