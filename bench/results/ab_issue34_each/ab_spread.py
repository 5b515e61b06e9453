"""A/B of two builds on the scale suite's spread cell: fresh server per run, alternated."""
import json, os, subprocess, sys, time
import numpy as np
from splitrpc.bench.helpers.intervals import ratio_interval
from splitrpc.bench.helpers.procs import free_port
PY = "/work/main/.venv/bin/python"
builds = {"before": "/tmp/old_site_A", "this": ""}
cells = [(1024, 0), (1, 1)] if len(sys.argv) < 3 else [tuple(map(int, c.split(":"))) for c in sys.argv[2].split(",")]
rounds = int(sys.argv[1])
res = {}
for r in range(rounds):
    order = list(builds) if r % 2 == 0 else list(builds)[::-1]
    for n, mb in cells:
        for name in order:
            port = free_port()
            env = dict(os.environ, PYTHONPATH=builds[name]) if builds[name] else dict(os.environ)
            srv = subprocess.Popen([PY, "-m", "splitrpc.bench.suites.scale", "--serve", str(n), str(port), str(mb)],
                                   env=env, stdout=subprocess.PIPE, text=True, cwd="/tmp")
            srv.stdout.readline()
            out = subprocess.run([PY, "/tmp/p37/spread.py", str(port), str(n), "200000", "1"], capture_output=True, env=env,
                                 text=True, cwd="/tmp").stdout.split()
            srv.terminate(); srv.wait()
            cps, p50, p99 = float(out[0].replace(",", "")), float(out[3]), float(out[5])
            res.setdefault(f"{n}:{mb}", {}).setdefault(name, []).append((cps, p50, p99))
            print(f"round {r+1} {n} functions mb {mb} {name:7s} {cps:10,.0f} calls/s p50 {p50:6.1f} p99 {p99:6.1f}", flush=True)
for cell, d in res.items():
    for i, m in enumerate(("calls/s", "p50", "p99")):
        a, b = [x[i] for x in d["before"]], [x[i] for x in d["this"]]
        ri = ratio_interval(a, b)
        print(f"{cell} {m}: before {np.median(a):,.1f} this {np.median(b):,.1f} ratio {ri}")
json.dump(res, open(sys.argv[3] if len(sys.argv) > 3 else "/tmp/p37/ab_spread.json", "w"))
