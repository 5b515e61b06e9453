"""StubOutOfDate after a restart with other functions; check=False; stub thread race."""
import subprocess, os, time, socket, sys, threading
sys.path.insert(0, "/tmp/review53")
from common import *
PY = "/work/main/.venv/bin/python"; env = {**os.environ, "PYTHONPATH": "/tmp/inst66", "LIFE": "40"}
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); PORT = s.getsockname()[1]; s.close()
def start(scen):
    pf = f"/tmp/review53/p8_{scen}"; 
    if os.path.exists(pf): os.remove(pf)
    p = subprocess.Popen([PY, "/tmp/review53/serve_scenario.py", scen, pf, str(PORT)], env=env)
    for _ in range(100):
        if os.path.exists(pf): return p
        time.sleep(0.1)
D = "/tmp/review53/stub_restart"; os.makedirs(D, exist_ok=True); os.chdir(D); sys.path.insert(0, D)
p = start("builtin")
r = subprocess.run([PY, "-m", "splitrpc", "stub", f"127.0.0.1:{PORT}", "--module", "svc8"], env=env, capture_output=True, text=True, timeout=60)
print(r.stdout.strip(), r.stderr.strip())
import svc8
x = np.ones(256, np.float32); m = np.eye(32, dtype=np.float32)
c = splitrpc.Client("127.0.0.1", PORT, timeout=1.0)
svc = svc8.Service(c)
attempt("stub vecadd", lambda: svc.vecadd(x).y[:2].tolist(), c)
attempt("stub vecadd batch", lambda: svc.vecadd(np.ones((2, 256), np.float32)).y.shape, c)
attempt("stub vecadd wrong dtype", lambda: svc.vecadd(np.ones(256)), c)
attempt("stub echo", lambda: svc.echo(b"abc"), c)
attempt("stub matmul kw", lambda: svc.matmul(a=m, b=m).c.shape, c)
# thread race on a fresh stub + fresh client
c2 = splitrpc.Client("127.0.0.1", PORT, timeout=2.0); svc2 = svc8.Service(c2); errs = []; res = []
def worker():
    try:
        for _ in range(20): res.append(float(svc2.vecadd(x).y[0])); res.append(float(c2.function("matmul")(m, m).c[0, 0]))
    except BaseException as ex: errs.append(repr(ex))
ts = [threading.Thread(target=worker) for _ in range(8)]; [t.start() for t in ts]; [t.join() for t in ts]
print("threads:", len(res), "results, errors:", errs[:3], "describes sent ~", c2.stats()["sent_calls"] - len(res))
p.terminate(); p.wait(); p = start("builtin2")
c3 = splitrpc.Client("127.0.0.1", PORT, timeout=1.0)
attempt("new stub instance after restart: matmul", lambda: svc8.Service(c3).matmul(m, m), c3)
attempt("old stub instance (already checked): matmul", lambda: svc.matmul(m, m), c)
attempt("old stub instance: matmul again", lambda: svc.matmul(m, m), c)
attempt("old stub instance: vecadd", lambda: svc.vecadd(x), c)
svc4 = svc8.Service(c3, check=False)
attempt("check=False: vecadd (gone)", lambda: svc4.vecadd(x), c3)
attempt("check=False: echo", lambda: svc4.echo(b"ab"), c3)
attempt("check=False: matmul (moved to id 7)", lambda: svc4.matmul(m, m).c[0, :2].tolist(), c3)
p.terminate(); p.wait(); p = start("vecadd_renamed")
c5 = splitrpc.Client("127.0.0.1", PORT, timeout=1.0)
attempt("stub on a renamed fn", lambda: svc8.Service(c5).vecadd(x), c5)
attempt("stub check=False on a renamed fn", lambda: svc8.Service(c5, check=False).vecadd(x), c5)
p.terminate(); p.wait()
