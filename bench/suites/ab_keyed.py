"""ab_keyed.py: the keyed datapath of two builds in one run (issue 52: one stop's changes against the previous main): each build's `splitrpc serve --keys` on its own port, the independent client (bench/clients/indep_client.c, `--v5` with `--aes` or `--aegis`, authenticated and `--encrypt`) alternating between them, the order rotated each round; per kind, the median of the rounds' B/A p50 ratios with a bootstrap 95% interval.

    python -m splitrpc.bench.suites.ab_keyed --a /tmp/base60/run-splitrpc --b .venv/bin/splitrpc --rounds 15 \\
        --out bench/results/ab_sessions_keyed
    python -m splitrpc.bench.suites.ab_keyed --suite aegis --client-libsodium pynacl --a ... --b ... --out ...
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from splitrpc.auth import Key, KeyTable, save_client_key
from splitrpc.bench.helpers import indep_client
from splitrpc.bench.helpers.intervals import round_ratio_interval
from splitrpc.bench.helpers.procs import free_port
from splitrpc.bench.suites.protocol_ab import start_server
from splitrpc.bench.suites.sessions_cost import aead_of, client_libsodium
from splitrpc.machine import describe


def one(client, port, key, opts, calls, libsodium=None, env=None):
    lib = ["--libsodium", libsodium] if libsodium else []
    r = subprocess.run([client, "--port", str(port), "--mode", "spin", "--outstanding", "1", "--calls", str(calls),
                        "--warmup", "2000", "--func", "1", "--check", "--json", "--v5", key, *lib, *opts],
                       capture_output=True, text=True, timeout=300, check=True,
                       env=dict(os.environ, **env) if env else None)
    d = json.loads(r.stdout)
    assert d["aead"] == aead_of(opts) and not d["lost"] and not d["errors"] and not d["bad_auth"], d
    return d["p50_us"]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=40000)
    p.add_argument("--out", required=True)
    p.add_argument("--suite", choices=("aes", "aegis"), default="aes", help="the AEAD the client offers")
    p.add_argument("--client-libsodium", default="system",
                   help="the client's libsodium: system, pynacl (1.0.19 on: AEGIS-128L), or a path")
    a = p.parse_args()
    client = indep_client.client_path()
    libsodium, env = client_libsodium(a.client_libsodium)
    suite = [f"--{a.suite}"]
    kinds = {"authenticated": suite, "encrypted": [*suite, "--encrypt"]}
    runs = {f"{b}/{k}": [] for b in "AB" for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        k = Key.generate(1)
        KeyTable([k]).save(os.path.join(tmp, "keys.json"))
        key = os.path.join(tmp, "client.json")
        save_client_key(k, key)
        ports = {"A": free_port(), "B": free_port()}
        srvs = [start_server(exe, ports[b], ["--keys", os.path.join(tmp, "keys.json")])
                for b, exe in (("A", a.a), ("B", a.b))]
        try:
            for r in range(a.rounds):
                order = [(b, kd) for kd in kinds for b in ("AB" if r % 2 == 0 else "BA")]
                for b, kd in order:
                    runs[f"{b}/{kd}"].append(one(client, ports[b], key, kinds[kd], a.calls, libsodium, env))
                print(f"round {r + 1}/{a.rounds}", flush=True)
        finally:
            for s in srvs:
                s.terminate()
                s.wait(10)
    res = {kd: round_ratio_interval(runs[f"A/{kd}"], runs[f"B/{kd}"]) for kd in kinds}
    doc = {"machine": describe(), "command": " ".join(sys.argv), "a": a.a, "b": a.b, "rounds": a.rounds,
           "suite": a.suite,
           "calls": a.calls, "runs": runs, "ratios": res}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "ab.json"), "w") as f:
        json.dump(doc, f, indent=1)
    for kd, x in res.items():
        print(f"{kd}: B/A p50 {x['ratio']:.3f} [{x['lo']:.3f}, {x['hi']:.3f}]; A median "
              f"{sorted(runs['A/' + kd])[a.rounds // 2]:.2f} us, B {sorted(runs['B/' + kd])[a.rounds // 2]:.2f} us")


if __name__ == "__main__":
    main()
