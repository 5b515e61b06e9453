"""accuracy.py UDP_PORT ADMIN_PORT: top's numbers against /metrics read here and the client's own counts.
Runs `splitrpc top --json --count 1 --interval 6` while sending: N vecadd calls, U unknown-function calls,
B datagrams with a bad CRC-16 (v2) and S short datagrams; then compares."""
import json, os, socket, struct, subprocess, sys, time, urllib.request
sys.path.insert(0, "/work/main/tests")
from foreign_client import ForeignClient, RemoteError, pack
import splitrpc
from prometheus_client.parser import text_string_to_metric_families
port, admin = int(sys.argv[1]), int(sys.argv[2])
N, U, B, S = 3000, 40, 25, 15
def metrics():
    out = {}
    for fam in text_string_to_metric_families(urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics").read().decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out
a = metrics()
top = subprocess.Popen([sys.executable, "-m", "splitrpc", "top", f"127.0.0.1:{admin}", "--json", "--count", "1", "--interval", "6"],
                       stdout=subprocess.PIPE, text=True)
time.sleep(1.0)
t0 = time.monotonic()
c = splitrpc.Client("127.0.0.1", port)
VEC = bytes(1024)
ok = 0
for _ in range(N):
    c.call(1, VEC); ok += 1
fc = ForeignClient("127.0.0.1", port, version=2)
unk = 0
for _ in range(U):
    try: fc.call(99, b"x")
    except RemoteError as e: unk += e.code == 1
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(B):
    h = bytearray(pack(2, 0, 1, 0xBAD000 + i, 0, 1, 4, 0) + b"abcd"); h[11] ^= 1; s.sendto(bytes(h), ("127.0.0.1", port))
for i in range(S):
    s.sendto(b"\xa5\x20" + bytes(5), ("127.0.0.1", port))
t1 = time.monotonic()
out, _ = top.communicate(timeout=30)
b = metrics()
v = json.loads(out)["servers"][0]
d = lambda name, **lab: b.get((name, tuple(sorted(lab.items()))), 0) - a.get((name, tuple(sorted(lab.items()))), 0)
print(f"client: {ok} vecadd calls ok, {unk} UNKNOWN_FUNCTION errors, {B} bad-CRC and {S} short datagrams sent in {t1 - t0:.2f} s")
print(f"/metrics delta (curl before/after): calls {d('splitrpc_calls_total'):.0f}, vecadd {d('splitrpc_function_calls_total', function='vecadd'):.0f}, "
      f"UNKNOWN_FUNCTION {d('splitrpc_errors_total', code='UNKNOWN_FUNCTION'):.0f}, drops " +
      ", ".join(f"{dict(k[1])['reason']} {b[k] - a.get(k, 0):.0f}" for k in b if k[0] == 'splitrpc_drops_total' and b[k] - a.get(k, 0)))
iv = v["interval_s"]
print(f"top: interval_s {iv}; calls total {v['calls']['total']} (curl after {b[('splitrpc_calls_total', ())]:.0f}); calls/s {v['calls']['per_s']:.1f} -> x interval = {v['calls']['per_s'] * iv:.0f}")
for f in v["functions"]:
    if f["name"] == "vecadd":
        print(f"top vecadd: calls_total {f['calls_total']} calls/s {f['calls_per_s']:.1f} (x interval {f['calls_per_s'] * iv:.0f}) errors {f['errors']} "
              f"mean_batch {f['mean_batch']} queue p50/p99 {f['queue_p50_us']}/{f['queue_p99_us']} us")
print("top drops:", v["drops"]); print("top errors:", v["errors"])
print("top executors:", v["executors"]); print("top cpu:", v["cpu"])
print("top functions (errors):", [(f["name"], f["errors"], f["errors_per_s"]) for f in v["functions"]])
