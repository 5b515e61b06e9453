from common import *
TS = splitrpc.TensorSpec
srv = server(builtin=False)
def cb(x, y): y[...] = x + 1
for fid, name in [(10, 'a"""b'), (11, 'back\\N'), (12, 'nl\nname'), (13, ''), (14, 'dup'), (15, 'dup'), (16, 'x²'), (17, 'ﬁx'), (18, 'fix'), (19, 'a' * 300), (20, 'space name')]:
    try:
        srv.add_function(cb, fid, name, [TS("x", "<f4", (2,))], [TS("y", "<f4", (2,))]); print("ok", fid, repr(name))
    except BaseException as ex: print("FAIL", fid, repr(name)[:40], type(ex).__name__, ex)
for fid, ins in [(30, ['in"""', 'b']), (31, ['ﬁ', 'fi']), (32, ['x²', 'y']), (33, ['back\\N', 'z'])]:
    def cb2(a, b, y): y[...] = 1
    try:
        srv.add_function(cb2, fid, f"f{fid}", [TS(n, "<f4", (2,)) for n in ins], [TS("y", "<f4", (2,))]); print("ok", fid, ins)
    except BaseException as ex: print("FAIL", fid, ins, type(ex).__name__, ex)
