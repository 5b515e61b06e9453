"""Python lists/numbers: values that change silently, and integer lists refused for unsigned/narrow specs."""
import sys, time, warnings
sys.path.insert(0, "/tmp/review53")
from common import *
TS = splitrpc.TensorSpec
srv = server(builtin=True)
def ident(x, y): y[...] = x
for fid, dt in [(20, "|i1"), (21, "|u1"), (22, "<i4"), (23, "<u2"), (24, "<f2"), (25, "|b1")]:
    srv.add_function(ident, fid, "id_" + np.dtype(dt).name, [TS("x", dt, (3,))], [TS("y", dt, (3,))])
srv.add_function(ident, 30, "scalar_f4", [TS("x", "<f4", ())], [TS("y", "<f4", ())])
srv.start()
c = splitrpc.Client("127.0.0.1", srv.port, timeout=2.0)
val = lambda f: (lambda: f().y.tolist())
attempt("int8  [300, -200, 1]", val(lambda: c.fn.id_int8([300, -200, 1])), c)
attempt("int32 [2**40, 1, 2]", val(lambda: c.fn.id_int32([2**40, 1, 2])), c)
attempt("uint8 [1, 2, 3]", val(lambda: c.fn.id_uint8([1, 2, 3])), c)
attempt("uint8 [1, 2, 3] cast", val(lambda: c.fn.id_uint8([1, 2, 3], cast=True)), c)
attempt("uint16 [1, 2, 3]", val(lambda: c.fn.id_uint16([1, 2, 3])), c)
attempt("int32 [1, 2, 3]", val(lambda: c.fn.id_int32([1, 2, 3])), c)
attempt("float16 [1e6, 0.1, 1]", val(lambda: c.fn.id_float16([1e6, 0.1, 1.0])), c)
attempt("float32 vecadd [1e300]*256", lambda: c.fn.vecadd([1e300] * 256).y[0], c)
attempt("bool [1, 0, 1]", val(lambda: c.fn.id_bool([1, 0, 1])), c)
attempt("float16 [True, False, True]", val(lambda: c.fn.id_float16([True, False, True])), c)
attempt("scalar_f4 np.float64(0.1)", val(lambda: c.fn.scalar_f4(np.float64(0.1))), c)
attempt("scalar_f4 np.array(0.1) (f8 0-d)", val(lambda: c.fn.scalar_f4(np.array(0.1))), c)
attempt("scalar_f4 np.float64(1e300)", val(lambda: c.fn.scalar_f4(np.float64(1e300))), c)
# options
x = np.ones(256, np.float32)
attempt("timeout='abc'", lambda: c.fn.vecadd([1.0]*256, timeout="abc"), c)
attempt("timeout=-1", lambda: c.fn.vecadd([1.0]*256, timeout=-1), c)
attempt("timeout=0", lambda: c.fn.vecadd([1.0]*256, timeout=0), c)
attempt("deadline past", lambda: c.fn.vecadd([1.0]*256, deadline=time.monotonic() - 1), c)
attempt("idempotent on Client", lambda: c.fn.vecadd([1.0]*256, idempotent=True), c)
attempt("fast path + idempotent", lambda: c.fn.vecadd(x, idempotent=True), c)
attempt("self= input name (see t3)", lambda: None)
attempt("invoke(args, named)", lambda: c.fn.matmul.invoke((), {"a": np.eye(32, dtype=np.float32), "b": np.eye(32, dtype=np.float32)}, timeout=1.0).c.shape, c)
attempt("invoke(dict) as the doc's 'inputs'", lambda: c.fn.matmul.invoke({"a": np.eye(32, dtype=np.float32), "b": np.eye(32, dtype=np.float32)}, timeout=1.0), c)
# batch sizes
t0 = time.monotonic(); attempt("batch N=2000", lambda: c.fn.vecadd(np.ones((2000, 256), np.float32)).y.shape, c); print("   %.2fs" % (time.monotonic() - t0))
attempt("masked array (mask dropped?)", lambda: c.fn.vecadd(np.ma.masked_array(np.ones(256, np.float32), mask=[True]*256)).y[0], c)
c.close(); srv.stop()
