import sys, subprocess, os, json
sys.path.insert(0, "/tmp/review53")
from common import *
D = "/tmp/review53/keys"; os.makedirs(D, exist_ok=True); os.chdir(D)
PY = "/work/main/.venv/bin/python"; env = {**os.environ, "PYTHONPATH": "/tmp/inst66"}
r = subprocess.run([PY, "-m", "splitrpc", "keys", "new", "keys.json", "--functions", "vecadd", "--client-out", "client.json"], env=env, capture_output=True, text=True)
print("keys new:", r.returncode, (r.stdout + r.stderr).strip()[-300:])
try:
    srv = splitrpc.Server("127.0.0.1", 0, wait="block", keys="keys.json"); register_builtin_services(srv); srv.start()
except BaseException as ex:
    print("keyed server:", type(ex).__name__, ex); raise SystemExit
c = splitrpc.Client("127.0.0.1", srv.port, timeout=2.0, key="client.json")
d = c.describe(); print("keyed describe:", [f.name for f in d.functions], d.digest)
attempt("ping digest", lambda: c.ping().get("digest") if isinstance(c.ping(), dict) else c.ping())
attempt("keyed vecadd", lambda: c.fn.vecadd(np.ones(256, np.float32)).y[0], c)
attempt("keyed matmul (not allowed)", lambda: c.fn.matmul, c)
r = subprocess.run([PY, "-m", "splitrpc", "stub", f"127.0.0.1:{srv.port}", "--key", "client.json", "--module", "ksvc"], env=env, capture_output=True, text=True, timeout=60)
print("stub --key:", r.returncode, (r.stdout + r.stderr).strip()[-300:])
if r.returncode == 0:
    sys.path.insert(0, D); import ksvc
    attempt("keyed stub", lambda: ksvc.Service(c).vecadd(np.ones(256, np.float32)).y[0], c)
c0 = splitrpc.Client("127.0.0.1", srv.port, timeout=1.0)
attempt("unkeyed describe on keyed server", lambda: [f.name for f in c0.describe().functions], c0)
c.close(); c0.close(); srv.stop()
# unkeyed: ping digest == describe digest
srv = server(); srv.start(); c = splitrpc.Client("127.0.0.1", srv.port, timeout=2.0)
print("unkeyed ping:", c.ping(), "describe digest:", c.describe().digest)
srv.stop()
