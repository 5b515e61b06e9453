"""Client.close() from one thread while another thread's typed call (the into fast path) waits
for its reply: srpc_client_destroy frees the client (its mutex, condition variable, call table)
under the waiting srpc_client_call. Each try runs in a child process; its exit status is shown."""
import os, subprocess, sys, textwrap

CHILD = textwrap.dedent(r"""
    import sys, threading, time
    sys.path.insert(0, %r)
    import numpy as np, splitrpc
    from common import Hostile, desc, tensor
    mode = sys.argv[1]
    D = desc([tensor(1, "f", [("x", "<f4", [64])], [("y", "<f4", [64])])])
    h = Hostile(D, lambda fid, data, n, rid: None)  # never answers a call
    c = splitrpc.Client("127.0.0.1", h.port, timeout=1.0, protocol=1)
    fn = c.fn.f
    x = np.ones(64, np.float32)
    res = []
    def worker():
        try:
            if mode == "fast": fn(x)
            elif mode == "raw": c.call(1, x)
            res.append("returned")
        except BaseException as e:
            res.append(f"{type(e).__name__}: {e}")
    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts: t.start()
    time.sleep(0.3)
    c.close()
    for t in ts: t.join(5)
    print("threads:", res, "alive:", [t.is_alive() for t in ts], flush=True)
    print("after close:", end=" ")
    try: fn(x)
    except BaseException as e: print(type(e).__name__, e)
""") % os.path.dirname(os.path.abspath(__file__))

for mode in ("fast", "raw"):
    for i in range(3):
        p = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=60)
        print(f"{mode} try {i}: exit {p.returncode}; {p.stdout.strip()[:300]} {p.stderr.strip()[-300:]}")
