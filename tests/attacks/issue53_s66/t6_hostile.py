import sys, time, resource
sys.path.insert(0, "/tmp/review53")
from common import *
from hostile import Hostile, tensor, desc
VEC = tensor(1, "vecadd", [("x", "<f4", [256])], [("y", "<f4", [256])])
def case(label, d, name="f", call=None, reply=None, timeout=1.0):
    h = Hostile(d, reply=reply)
    c = splitrpc.Client("127.0.0.1", h.port, timeout=timeout, protocol=1)
    t0 = time.monotonic()
    def go():
        fn = c.function(name)
        return fn if call is None else call(fn)
    attempt(label, go, c)
    dt = time.monotonic() - t0
    if dt > 0.8: print(f"   (took {dt:.1f}s)")
    c.close(); h.close()
ones = lambda n: np.ones(n, np.float32)
case("sane", desc([VEC]), "vecadd", lambda f: f(ones(256)), reply=lambda fid, d: d)
case("digest int", desc([VEC], digest=12345), "vecadd")
case("digest list", desc([VEC], digest=["a"]), "vecadd")
case("digest empty", desc([VEC], digest=""), "vecadd")
case("digest 65 chars", desc([VEC], digest="a"*65), "vecadd")
case("digest null", desc([VEC], digest=None), "vecadd")
case("functions dict", desc({"a": 1}), "vecadd")
case("functions null", desc(None), "vecadd")
case("function entry str", desc(["x"]), "vecadd")
case("shape string '12'", desc([tensor(1, "f", [("x", "<f4", "12")], [("y", "<f4", [2])])]), "f")
case("shape floats", desc([tensor(1, "f", [("x", "<f4", [2.9])], [("y", "<f4", [2])])]), "f")
case("shape bools", desc([tensor(1, "f", [("x", "<f4", [True, True])], [("y", "<f4", [2])])]), "f")
case("shape negative", desc([tensor(1, "f", [("x", "<f4", [-2])], [("y", "<f4", [2])])]), "f")
case("shape zero", desc([tensor(1, "f", [("x", "<f4", [0])], [("y", "<f4", [2])])]), "f")
case("name int", desc([{**VEC, "name": 7}]), "7")
case("name null", desc([{**VEC, "name": None}]), "None")
case("id 70000", desc([{**VEC, "id": 70000}]), "vecadd", lambda f: f(ones(256)))
case("id -1", desc([{**VEC, "id": -1}]), "vecadd", lambda f: f(ones(256)))
case("id 65534 (describe)", desc([{**VEC, "id": 65534}]), "vecadd", lambda f: f(ones(256)))
case("id 1.7", desc([{**VEC, "id": 1.7}]), "vecadd")
case("id true", desc([{**VEC, "id": True}]), "vecadd")
case("dtype bogus", desc([tensor(1, "f", [("x", "<q9", [2])], [("y", "<f4", [2])])]), "f")
case("dtype object", desc([tensor(1, "f", [("x", "|O", [2])], [("y", "<f4", [2])])]), "f")
case("dtype struct O", desc([tensor(1, "f", [("x", "O,f4", [2])], [("y", "<f4", [2])])]), "f")
case("dtype subarray", desc([tensor(1, "f", [("x", "(2,)<f4", [2])], [("y", "(3,)<f4", [2])])]), "f",
     lambda f: f(np.ones(2, "(2,)<f4")), reply=lambda fid, d: b"\0"*24)
case("dtype U0 in/out", desc([tensor(1, "f", [("x", "<U0", [2])], [("y", "<U0", [2])])]), "f")
case("dtype V huge", desc([tensor(1, "f", [("x", "<f4", [2])], [("y", "V2147483647", [2])])]), "f",
     lambda f: f(np.ones(2, np.float32)), reply=lambda fid, d: b"\0"*8)
case("dtype >f4", desc([tensor(1, "f", [("x", ">f4", [2])], [("y", ">f4", [2])])]), "f", lambda f: f(np.ones(2, np.float32)).y.tolist(),
     reply=lambda fid, d: np.array([1, 2], ">f4").tobytes())
case("dtype int (not str)", desc([tensor(1, "f", [("x", 5, [2])], [("y", "<f4", [2])])]), "f")
case("dtype float32 name", desc([tensor(1, "f", [("x", "float32", [2])], [("y", "<f4", [2])])]), "f", lambda f: repr(f))
# Outputs with > 64 dims: a 4-byte reply fits the declared size
case("out 65 dims", desc([tensor(1, "f", [("x", "<f4", [2])], [("y", "<f4", [1]*65), ("z", "<f4", [1])])]), "f",
     lambda f: f(np.ones(2, np.float32)), reply=lambda fid, d: b"\0"*8)
case("out 65 dims 1 output", desc([tensor(1, "f", [("x", "<f4", [2])], [("y", "<f4", [1]*65)])]), "f",
     lambda f: f(np.ones(2, np.float32)), reply=lambda fid, d: b"\0"*4)
case("in 65 dims", desc([tensor(1, "f", [("x", "<f4", [1]*65)], [("z", "<f4", [1])])]), "f",
     lambda f: f(np.ones(1, np.float32).reshape([1]*32)), reply=lambda fid, d: b"\0"*4)
case("in huge shape", desc([tensor(1, "f", [("x", "<f4", [2**62, 2**62])], [("z", "<f4", [1])])]), "f",
     lambda f: f(np.ones(2, np.float32)), reply=lambda fid, d: b"\0"*4)
case("many inputs 5000", desc([tensor(1, "f", [(f"x{i}", "<f4", [1]) for i in range(5000)], [("z", "<f4", [1])])]), "f")
# huge output shape + batch: allocation before the reply size check?
case("out huge + single", desc([tensor(1, "f", [("x", "<f4", [2])], [("y", "<f4", [2**40])])]), "f",
     lambda f: f(np.ones(2, np.float32)), reply=lambda fid, d: b"\0"*8)
case("out huge + batch", desc([tensor(1, "f", [("x", "<f4", [2])], [("y", "<f4", [2**40])])]), "f",
     lambda f: f(np.ones((2, 2), np.float32)), reply=lambda fid, d: b"\0"*8)
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
case("out 2 GiB + batch 4 (virtual)", desc([tensor(1, "f", [("x", "<f4", [2])], [("y", "|u1", [2**31])])]), "f",
     lambda f: f(np.ones((4, 2), np.float32)), reply=lambda fid, d: b"\0"*8)
print("   maxrss MiB", rss0 // 1024, "->", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
# same name twice
case("same name twice", desc([VEC, {**VEC, "id": 2, "inputs": [{"name": "x", "dtype": "<f4", "shape": [128]}]}]), "vecadd",
     lambda f: f(ones(128)))
# dup output names
case("dup output names", desc([tensor(1, "f", [("x", "<f4", [2])], [("y", "<f4", [2]), ("y", "<f4", [2])])]), "f")
case("outputs 'out0' + non-ident", desc([tensor(1, "f", [("x", "<f4", [2])], [("a b", "<f4", [2]), ("out0", "<f4", [2])])]), "f")
case("raw max_request str", desc([{"id": 3, "name": "r", "kind": "raw", "max_request": "big", "max_response": None}]), "r", lambda f: (f.info.max_request, repr(f)))
case("kind other", desc([{**VEC, "kind": "stream"}]), "vecadd")
case("not describe", b'{"describe":2,"functions":[]}', "vecadd")
case("describe prefix spaces", b'{ "describe":1,"functions":[]}', "vecadd")
case("deep nest", b'{"describe":1,"x":' + b"[" * 100000 + b"]" * 100000 + b"}", "vecadd")
case("nan", b'{"describe":1,"functions":[],"max_message":NaN}', "vecadd")
case("bignum", b'{"describe":1,"functions":[],"max_message":' + b"9"*5000 + b"}", "vecadd")
case("max_message str", desc([VEC], max_message="x"), "vecadd")
case("software dict", desc([VEC], software={"a": 1}), "vecadd", lambda f: f)
case("invalid utf8", b'{"describe":1,"functions":[],"software":"\xff"}', "vecadd")
case("big desc 1MB", desc([VEC], pad="x" * 1_000_000), "vecadd", timeout=1.0)
