"""Stubs from a foreign (not splitrpc) server: its digest is opaque (Amendment 2: 'A client compares
digests and never computes one'), and its software string goes into the stub."""
import sys, os, subprocess, importlib
sys.path.insert(0, "/tmp/review53")
from common import *
from hostile import Hostile, tensor, desc
VEC = tensor(1, "vecadd", [("x", "<f4", [256])], [("y", "<f4", [256])])
D = "/tmp/review53/stub_hostile"; os.makedirs(D, exist_ok=True); os.chdir(D); sys.path.insert(0, D)
PY = "/work/main/.venv/bin/python"; env = {**os.environ, "PYTHONPATH": "/tmp/inst66"}
for mod, d in [("foreign", desc([VEC], digest="v1-foreign-digest")),
               ("inject_sw", desc([VEC], software='x"""\nopen("/tmp/review53/PWNED_SW", "w").write("software field ran")\n"""')),
               ("inject_raw", desc([{"id": 3, "name": "r", "kind": "raw", "max_request": '1"""; open("/tmp/review53/PWNED_RAW", "w").write("max_request ran"); """', "max_response": 1}]))]:
    h = Hostile(d, reply=lambda fid, data: data)
    r = subprocess.run([PY, "-m", "splitrpc", "stub", f"127.0.0.1:{h.port}", "--module", mod], env=env, capture_output=True, text=True, timeout=60)
    print(mod, "stub:", r.returncode, (r.stdout + r.stderr).strip()[-200:])
    try:
        m = importlib.import_module(mod)
        print(mod, "imported; DIGEST in stub:", m.DIGEST, "; server's:", d.get("digest"))
        c = splitrpc.Client("127.0.0.1", h.port, timeout=1.0)
        svc = m.Service(c)
        if hasattr(m.Service, "vecadd"):
            attempt(mod + " svc.vecadd on the unchanged server", lambda: svc.vecadd(np.ones(256, np.float32)), c)
        c.close()
    except BaseException as ex:
        print(mod, "import/use:", type(ex).__name__, str(ex)[:300])
    h.close()
for f in ["/tmp/review53/PWNED_SW", "/tmp/review53/PWNED_RAW"]:
    print(f, "exists:", os.path.exists(f))
