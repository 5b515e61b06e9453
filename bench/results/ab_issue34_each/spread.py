import sys, time, numpy as np
from splitrpc import Client
from splitrpc.load_run import run_load
from splitrpc.loadgen import report
port, n, calls, spread = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
x = np.random.default_rng(5).standard_normal(256).astype("<f4")
req, want = x.tobytes(), (x + np.float32(1)).astype("<f4").tobytes()
ids = list(range(1, n + 1)) if spread else [1]
rng = np.random.default_rng(n)
with Client("127.0.0.1", port, timeout=2.0, busy_poll=True, retries=0) as c:
    for m in (max(calls // 10, n * 96), calls):
        idx = rng.integers(0, len(ids), m).astype(np.uint32)
        recs = run_load(c, ids, [req] * len(ids), expect=[want] * len(ids), concurrency=16, n=m, index=idx, spin=True)
    s = report.summarize(recs)
    lat = recs.latency_ns(); lat = lat[lat > 0]
    print(f"{m / s['duration_s']:,.0f} calls/s p50 {np.percentile(lat,50)/1e3:.1f} p99 {np.percentile(lat,99)/1e3:.1f} errors {s['errors']}")
