"""Held checks: inputs (positional/keyword mixes, option-like names, None, wrong dtypes, strided,
F-order, subclasses, read-only) on the into path: the right InputError before anything is sent."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import splitrpc
from common import Hostile, desc, tensor, outcome


def echo_plus(fid, data, n, rid):  # y = x + 1 for float32 requests; 2-D specs too
    if fid in (1, 3, 4):
        return ("reply", (np.frombuffer(data[:256], np.float32) + 1).tobytes())
    if fid == 2:
        return ("reply", (np.frombuffer(data, np.float32).reshape(8, 8).T.copy() * 1).tobytes())
    return ("reply", bytes(256))


fns = [tensor(1, "one", [("x", "<f4", [64])], [("y", "<f4", [64])]),
       tensor(2, "mat", [("m", "<f4", [8, 8])], [("y", "<f4", [8, 8])]),
       tensor(3, "opt", [("timeout", "<f4", [64])], [("y", "<f4", [64])]),
       tensor(4, "names", [("a", "<f4", [64]), ("self", "<i1", [1]), ("args", "<i1", [1]), ("kwargs", "<i1", [1]),
                           ("cast", "<i1", [1])], [("y", "<f4", [64])])]
h = Hostile(desc(fns), echo_plus)
c = splitrpc.Client("127.0.0.1", h.port, timeout=1.0, protocol=1, retries=0)
one, mat, opt, names = c.fn.one, c.fn.mat, c.fn.opt, c.fn.names
x = np.arange(64, dtype=np.float32)
i1 = np.zeros(1, np.int8)


class Sub(np.ndarray):
    pass


ro = x.copy(); ro.flags.writeable = False
F = np.asfortranarray(np.arange(64, dtype=np.float32).reshape(8, 8))
cases = [
    ("one()", lambda: one()), ("one(None)", lambda: one(None)), ("one(x, x)", lambda: one(x, x)),
    ("one(x, x=x)", lambda: one(x, x=x)), ("one(a=x)", lambda: one(a=x)), ("one(self=x)", lambda: one(self=x)),
    ("one(float64)", lambda: one(x.astype(np.float64))), ("one(>f4)", lambda: one(x.astype(">f4"))),
    ("one(x[::2] twice)", lambda: one(np.repeat(x, 2)[::2])), ("one(scalar)", lambda: one(np.float32(1))),
    ("one([0,64])", lambda: one(np.zeros((0, 64), np.float32))), ("one('str')", lambda: one("abc")),
    ("one(x, timeout=0.5)", lambda: one(x, timeout=0.5).y[:2]), ("one(x, cast=True)", lambda: one(x, cast=True).y[:2]),
    ("one(Sub)", lambda: one(x.view(Sub)).y[:2]), ("one(read-only)", lambda: one(ro).y[:2]),
    ("one(x=x)", lambda: one(x=x).y[:2]), ("one(list)", lambda: one(list(range(64))).y[:2]),
    ("one(x[None]) batch 1", lambda: one(x[None]).y.shape), ("one(bool)", lambda: one(np.ones(64, bool))),
    ("one(x, bogus=1)", lambda: one(x, bogus=1)),
    ("mat(F-order)", lambda: mat(F)), ("mat(F, cast=True)", lambda: mat(F, cast=True).y[0, :3]),
    ("mat(F.T c-order)", lambda: mat(F.T).y[0, :3]),
    ("opt(timeout=x)", lambda: opt(timeout=x).y[:2]), ("opt(x, timeout=x)", lambda: opt(x, timeout=x)),
    ("opt.invoke([x], timeout=.5)", lambda: opt.invoke([x], timeout=0.5).y[:2]),
    ("names(x, i1, i1, i1, i1)", lambda: names(x, i1, i1, i1, i1).y[:2]),
    ("names(a=x, self=i1, args=i1, kwargs=i1, cast=i1)",
     lambda: names(a=x, self=i1, args=i1, kwargs=i1, cast=i1).y[:2]),
    ("names(x, self=i1, args=i1, kwargs=i1, cast=i1)", lambda: names(x, self=i1, args=i1, kwargs=i1, cast=i1).y[:2]),
    ("names(x, a=x, ...)", lambda: names(x, a=x, self=i1, args=i1, kwargs=i1, cast=i1)),
    ("names(a=x) missing", lambda: names(a=x)),
]
for label, f in cases:
    before = len(h.calls)
    st, r = outcome(f)
    print(f"{label:52s} {st.split('.')[-1]:18s} {str(r)[:70]!s:72s} sent={len(h.calls) - before}")
c.close(); h.close()
