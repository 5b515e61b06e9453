import sys, traceback, numpy as np
sys.path.insert(0, "/tmp/inst66")
import splitrpc
from splitrpc.services import register_builtin_services
from splitrpc import errors as E

def server(builtin=True, port=0):
    srv = splitrpc.Server("127.0.0.1", port, wait="block")
    if builtin: register_builtin_services(srv)
    return srv

def sent(c): return c.stats()["sent_calls"]

def attempt(label, f, c=None):
    before = sent(c) if c is not None else None
    try:
        r = f()
        out = f"OK -> {summ(r)}"
    except BaseException as ex:
        out = f"{type(ex).__module__}.{type(ex).__name__}: {str(ex)[:300]}"
    if c is not None:
        out += f"   [sent +{sent(c)-before}]"
    print(f"{label}: {out}", flush=True)

def summ(r):
    if isinstance(r, tuple):
        return type(r).__name__ + "(" + ", ".join(f"{k}={summ(v)}" for k, v in zip(getattr(r, "_fields", range(len(r))), r)) + ")"
    if isinstance(r, np.ndarray):
        return f"ndarray{r.dtype}{list(r.shape)} writeable={r.flags.writeable}"
    return repr(r)[:200]
