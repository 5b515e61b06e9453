from common import *
import torch
srv = server(); srv.start()
c = splitrpc.Client("127.0.0.1", srv.port, timeout=2.0)
va = c.fn.vecadd; mm = c.fn.matmul
attempt("torch f32", lambda: va(torch.ones(256)), c)
attempt("torch f32 value", lambda: float(va(torch.ones(256)).y[3]), c)
attempt("torch grad", lambda: va(torch.ones(256, requires_grad=True)), c)
attempt("torch grad batch", lambda: va(torch.ones(3, 256, requires_grad=True)), c)
attempt("torch f64", lambda: va(torch.ones(256, dtype=torch.float64)), c)
attempt("torch f16 cast", lambda: va(torch.ones(256, dtype=torch.float16), cast=True), c)
attempt("torch bf16", lambda: va(torch.ones(256, dtype=torch.bfloat16)), c)
attempt("torch bf16 cast", lambda: va(torch.ones(256, dtype=torch.bfloat16), cast=True), c)
attempt("torch int64", lambda: va(torch.ones(256, dtype=torch.int64)), c)
attempt("torch bool", lambda: va(torch.ones(256, dtype=torch.bool)), c)
attempt("torch strided", lambda: va(torch.ones(512)[::2]), c)
attempt("torch strided cast", lambda: va(torch.ones(512)[::2], cast=True), c)
t = torch.arange(1024, dtype=torch.float32).reshape(32,32)
attempt("torch transposed", lambda: mm(t.t(), t), c)
attempt("torch transposed cast", lambda: mm(t.t(), torch.eye(32), cast=True).c[0,:3], c)
attempt("torch expand (stride0)", lambda: va(torch.ones(1).expand(256)), c)
attempt("torch expand cast", lambda: va(torch.ones(1).expand(256), cast=True), c)
attempt("torch neg view", lambda: va(torch.ones(256).neg().conj()), c)
attempt("torch complex", lambda: va(torch.ones(256, dtype=torch.complex64)), c)
attempt("torch scalar 0d", lambda: va(torch.tensor(1.0)), c)
attempt("torch meta", lambda: va(torch.empty(256, device="meta")), c)
class DL:
    def __init__(self, t): self.t = t
    def __dlpack__(self, **kw): return self.t.__dlpack__(**kw)
    def __dlpack_device__(self): return self.t.__dlpack_device__()
attempt("dlpack only", lambda: va(DL(torch.ones(256))), c)
class AA:
    def __array__(self, dtype=None, copy=None): return np.ones(256, np.float32)
attempt("__array__ only", lambda: va(AA()), c)
class CAI:
    __cuda_array_interface__ = {"shape": (256,), "typestr": "<f4", "data": (0, False), "version": 3}
    def get(self): return np.ones(256, np.float32)
attempt("fake cuda array", lambda: va(CAI()), c)
class CAIbad:
    __cuda_array_interface__ = {"shape": (256,), "typestr": "<f4", "data": (0, False), "version": 3}
attempt("cuda-interface without get", lambda: va(CAIbad()), c)
class Explode:
    def __array__(self, *a, **k): raise RuntimeError("boom")
attempt("__array__ raises", lambda: va(Explode()), c)
# memory sharing: numpy input unchanged after call
x = np.ones(256, np.float32); r = va(x); attempt("input unchanged", lambda: float(x[0]))
# outputs aliasing
r1 = va(np.zeros(256, np.float32)); r2 = va(np.full(256, 5, np.float32))
attempt("r1 still 1", lambda: float(r1.y[0]))
attempt("torch from output", lambda: torch.from_numpy(np.array(r1.y)).sum().item())
attempt("torch.from_numpy on readonly", lambda: torch.from_numpy(r1.y))
c.close(); srv.stop()
