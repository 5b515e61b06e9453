"""DescriptionChanged / StubOutOfDate across a restart on the same port (servers in subprocesses)."""
import subprocess, os, time, socket, sys
sys.path.insert(0, "/tmp/review53")
from common import *
PY = "/work/main/.venv/bin/python"
def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
PORT = free_port()
def start(scen):
    pf = f"/tmp/review53/port_{scen}_{os.getpid()}"
    if os.path.exists(pf): os.remove(pf)
    p = subprocess.Popen([PY, "/tmp/review53/serve_scenario.py", scen, pf, str(PORT)], env={**os.environ, "PYTHONPATH": "/tmp/inst66", "LIFE": "40"})
    for _ in range(100):
        if os.path.exists(pf): return p
        time.sleep(0.1)
    raise SystemExit("server did not start")
def restart(p, scen):
    p.terminate(); p.wait(); return start(scen)

x = np.ones(256, np.float32); m = np.eye(32, dtype=np.float32)
for new in ["builtin2", "vecadd_otherout", "vecadd_renamed", "vecadd_moved"]:
    print(f"===== builtin -> {new}")
    p = start("builtin")
    c = splitrpc.Client("127.0.0.1", PORT, timeout=1.0)
    va = c.fn.vecadd; mm = c.function("matmul"); echo = c.fn.echo
    attempt("before", lambda: float(va(x).y[0]), c)
    p = restart(p, new)
    attempt("vecadd fast path", lambda: va(x), c)
    attempt("vecadd again", lambda: va(x), c)
    attempt("vecadd list (slow path)", lambda: va([1.0]*256), c)
    attempt("batch", lambda: va(np.ones((2, 256), np.float32)), c)
    attempt("new c.fn.vecadd", lambda: c.fn.vecadd(x).y[:2].tolist(), c)
    attempt("new c.fn.vecadd again", lambda: c.fn.vecadd(x).y[:2].tolist(), c)
    attempt("old matmul", lambda: mm(m, m), c)
    attempt("new matmul", lambda: c.fn.matmul(m, m).c[0, :2].tolist(), c)
    attempt("old echo", lambda: echo(b"hi"), c)
    c.close(); p.terminate(); p.wait()
