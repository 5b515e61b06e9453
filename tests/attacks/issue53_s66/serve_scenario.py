"""python serve_scenario.py SCENARIO PORTFILE [PORT]: serve a scenario on 127.0.0.1 for up to 90 s."""
import sys, time, os
sys.path.insert(0, "/tmp/review53")
from common import *
TS = splitrpc.TensorSpec
scen, portfile = sys.argv[1], sys.argv[2]
port = int(sys.argv[3]) if len(sys.argv) > 3 else 0
srv = splitrpc.Server("127.0.0.1", port, wait="block")
def f1(x, y): y[...] = x + 1
def f2(a, b, y): y[...] = a + b
def add(fid, name, ins=("x",), outs=("y",), shape=(2,), dt="<f4"):
    cb = f1 if len(ins) == 1 else f2
    srv.add_function(cb, fid, name, [TS(n, dt, shape) for n in ins], [TS(n, dt, shape) for n in outs])
if scen == "builtin":
    register_builtin_services(srv)
elif scen == "builtin2":   # vecadd gone, matmul at another id
    from splitrpc.services import register_builtin_services as r
    def mm(a, b, c): c[...] = a @ b
    srv.add_function(mm, 7, "matmul", [TS("a", "<f4", (32, 32)), TS("b", "<f4", (32, 32))], [TS("c", "<f4", (32, 32))])
    srv.add_function(lambda req, resp: [len(r) for r in req], 3, "echo", raw=True, max_request=1 << 20, max_response=1 << 20)
elif scen == "vecadd_otherout":  # same id and input, other output shape
    def g(x, y): y[...] = 0
    srv.add_function(g, 1, "vecadd", [TS("x", "<f4", (256,))], [TS("y", "<f4", (128,))])
elif scen == "vecadd_renamed":  # same id, same specs, other name (vecsub)
    def g(x, y): y[...] = x - 1
    srv.add_function(g, 1, "vecsub", [TS("x", "<f4", (256,))], [TS("y", "<f4", (256,))])
elif scen == "vecadd_moved":  # vecadd now id 9, id 1 is vecsub with same specs
    def g(x, y): y[...] = x - 1
    srv.add_function(g, 1, "vecsub", [TS("x", "<f4", (256,))], [TS("y", "<f4", (256,))])
    srv.add_function(f1, 9, "vecadd", [TS("x", "<f4", (256,))], [TS("y", "<f4", (256,))])
elif scen == "quotes":
    add(10, 'a"""b')
elif scen == "backslash":
    add(11, 'back\\N')
elif scen == "superscript":
    add(16, 'x²')
elif scen == "ligature":
    add(17, 'ﬁx'); add(18, 'fix')
elif scen == "lig_inputs":
    add(31, 'f31', ins=('ﬁ', 'fi'))
elif scen == "dup":
    add(14, 'dup'); add(15, 'dup', shape=(3,))
elif scen == "fieldnames":
    add(20, 'fields', outs=("count", "index", "y"))
elif scen == "kwnames":
    add(21, 'class', ins=("lambda", "self"), outs=("for", "out0")); add(22, 'with-dash', ins=("timeout", "cast")); add(23, "check", ins=("client", "digest"))
    add(24, "np", ins=("np", "npt")); add(25, "ArrayIn", ins=("ArrayIn", "NamedTuple")); add(26, "_private"); add(27, "Service"); add(28, "1st")
    add(29, "space name", ins=("a b", "a_b")); add(30, "a_b"); add(31, "a-b"); add(32, "None", ins=("None", "True"))
elif scen == "dtypes":
    srv.add_function(lambda *a: None, 40, "dt", [TS("b", "|b1", (2,)), TS("h", "<f2", ()), TS("c", "<c8", (1, 2, 3))],
                     [TS("u", "|u1", (2,)), TS("d", "<f8", (2,)), TS("s", "<U3", (2,)), TS("t", "<M8[s]", (1,))])
    add(41, "big", shape=(100000,), dt="|u1")
elif scen == "shadow":
    add(10, "float"); srv.add_function(lambda rq, rs: [len(r) for r in rq], 11, "bytes", raw=True, max_request=64, max_response=64)
elif scen == "inject":
    add(10, 'x""";open("/tmp/review53/PWNED","w").write("stub import ran server code");"""')
else:
    raise SystemExit("unknown scenario")
srv.start()
tmp = portfile + ".tmp"; open(tmp, "w").write(str(srv.port)); os.replace(tmp, portfile)
time.sleep(float(os.environ.get("LIFE", "90")))
srv.stop()
