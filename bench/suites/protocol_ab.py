"""protocol_ab.py: what a wire protocol version costs end to end: `splitrpc load` with each version in turn, the order rotated each round, per service and concurrency; each version's median p50, p99 and calls/s over the rounds, and each one's median p50 and calls/s over the first version's with a bootstrap 95% interval.

    python -m splitrpc.bench.suites.protocol_ab --a 2 --b 3 --services vecadd,head --concurrency 1,16 \\
        --rounds 7 --out bench/results/protocol_v3
    python -m splitrpc.bench.suites.protocol_ab --versions 2,3,4 --services vecadd --concurrency 1,16 \\
        --rounds 7 --out bench/results/auth_cost
    python -m splitrpc.bench.suites.protocol_ab --versions 2,5,5e,4 --services vecadd --concurrency 1 \\
        --rounds 7 --out bench/results/sessions_cost

The keyed versions go to a second server of the same command line with a key table (a server with
keys takes only those): 5 (sessions, authenticated: docs/PROTOCOL-v5.md), 5e (sessions that
encrypt) and 4 (the legacy signed datagrams, docs/PROTOCOL-v4.md: the keyed server then runs
with --legacy-v4), the load's calls made with a key of it; the other versions share the first
server. Client and server share the machine (loopback, the
server in poll mode, the client busy-polling), as in bench/results/protocol_v2.md. A difference is
claimed only where the interval excludes 1.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

from splitrpc.bench.helpers.intervals import RESAMPLES, ratio_interval, round_ratio_interval
from splitrpc.bench.helpers.procs import free_port
from splitrpc.machine import describe
from splitrpc.loadgen.reporting import SuiteFailed, command_of, run_as_module, run_suite


KEYED = {"4": ["--protocol", "4"], "5": [], "5e": ["--encrypt"]}  # version token -> the load's options beside --key


def _load(exe: str, port: int, service: str, conc: int, calls: int, proto: str, out: str,
          key: str | None = None) -> dict:
    how = ["--key", str(key), *KEYED[proto]] if proto in KEYED else ["--protocol", proto]
    cmd = [exe, "load", "--port", str(port), "--service", service, "--concurrency", str(conc), "--calls", str(calls),
           *how, "--busy-poll", "--out", out, "--no-plots", "--quiet"]
    p = subprocess.run(cmd, text=True, capture_output=True)
    if p.returncode:
        raise SuiteFailed(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    with open(os.path.join(out, "report.json")) as f:
        run = json.load(f)["runs"][0]
    if run["errors"] or run["invalid"] or run["timeouts"]:
        raise SuiteFailed(f"{' '.join(cmd)}: {run['errors']} errors, {run['invalid']} invalid, "
                          f"{run['timeouts']} timeouts")
    return {"p50_us": run["latency_us"]["p50"], "p99_us": run["latency_us"]["p99"], "rps": run["achieved_rps"]}


def median(v):
    v = sorted(v)
    n = len(v)
    return (v[n // 2] + v[(n - 1) // 2]) / 2 if n else None


def start_server(exe: str, port: int, extra: list[str]) -> subprocess.Popen:
    """`splitrpc serve` on port, polling, with extra options; raises SuiteFailed when it exits at start."""
    srv = subprocess.Popen([exe, "serve", "--port", str(port), "--wait", "poll", *extra], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    if srv.poll() is not None:
        raise SuiteFailed(f"the server exited: {srv.stderr.read()[-500:]}")
    return srv


def _versions(a) -> list[str]:
    vs = [v.strip() for v in a.versions.split(",")] if a.versions else [str(a.a), str(a.b)]
    if len(vs) < 2 or len(set(vs)) != len(vs) or any(v not in NAMES for v in vs):
        raise SuiteFailed(f"--versions: two or more of {', '.join(NAMES)}, each once; got {vs}")
    return vs


def run(a) -> dict:
    exe = a.splitrpc
    protos = _versions(a)
    runs: list[dict] = []
    servers: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            port = free_port()
            servers.append(start_server(exe, port, []))
            key_port, key = None, None
            if KEYED.keys() & set(protos):  # a second server with a key table: it takes only keyed calls
                from splitrpc.auth import Key, KeyTable, save_client_key

                k = Key.generate(1)
                KeyTable([k]).save(os.path.join(tmp, "keys.json"))
                key = os.path.join(tmp, "client.json")
                save_client_key(k, key)
                key_port = free_port()
                servers.append(start_server(exe, key_port, ["--keys", os.path.join(tmp, "keys.json"),
                                                       *(["--legacy-v4"] if "4" in protos else [])]))
            services, concs = a.services.split(","), [int(c) for c in a.concurrency.split(",")]
            for r in range(a.rounds):
                order = protos[r % len(protos):] + protos[:r % len(protos)]  # rotated: each goes first in turn
                for svc in services:
                    for conc in concs:
                        for proto in order:
                            where = os.path.join(tmp, f"{svc}-{conc}-{proto}-{r}")
                            m = _load(exe, key_port if proto in KEYED else port, svc, conc, a.calls, proto, where,
                                      key)
                            runs.append({"round": r, "service": svc, "concurrency": conc, "protocol": proto, **m})
                print(f"round {r + 1}/{a.rounds} done", flush=True)
        finally:
            for srv in servers:
                srv.terminate()
                srv.wait(10)
    return {"machine": describe(), "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": command_of(a), "a": protos[0], "b": protos[1], "versions": protos, "rounds": a.rounds,
            "calls": a.calls, "runs": runs, "cells": cells(runs, protos), "libsodium": _libsodium(protos)}


def _libsodium(protos: list) -> str | None:
    """The libsodium the keyed versions' processes load (the servers and `splitrpc load` choose it as
    this process does, from the same environment: splitrpc/_native/sodium_pick.py); None unkeyed."""
    if not any(str(p) in ("4", "5", "5e") for p in protos):
        return None
    from splitrpc.auth import sodium_library

    return sodium_library()


def cells(runs: list[dict], protos: list[int]) -> list[dict]:
    """Per (service, concurrency): each version's medians, and each version's over the first's."""
    out = []
    base = protos[0]
    for svc, conc in sorted({(x["service"], x["concurrency"]) for x in runs}, key=lambda k: (k[0], k[1])):
        side = {p: sorted((x for x in runs if x["service"] == svc and x["concurrency"] == conc and x["protocol"] == p),
                          key=lambda x: x["round"]) for p in protos}
        cell: dict = {"service": svc, "concurrency": conc}
        for p, rs in side.items():
            cell[str(p)] = {k: median([x[k] for x in rs]) for k in ("p50_us", "p99_us", "rps")}
            cell[str(p)]["p50_rounds"] = [round(x["p50_us"], 2) for x in rs]
            cell[str(p)]["rps_rounds"] = [round(x["rps"]) for x in rs]
            if p != base:
                cell[str(p)]["p50_ratio"] = ratio_interval([x["p50_us"] for x in side[base]],
                                                           [x["p50_us"] for x in rs])
                cell[str(p)]["rps_ratio"] = ratio_interval([x["rps"] for x in side[base]], [x["rps"] for x in rs])
                if len(rs) == len(side[base]):  # paired: each round's versions ran back to back
                    cell[str(p)]["p50_round_ratio"] = round_ratio_interval([x["p50_us"] for x in side[base]],
                                                                           [x["p50_us"] for x in rs])
        if len(protos) == 2:  # the two-version layout of earlier reports
            cell["p50_ratio"], cell["rps_ratio"] = cell[str(protos[1])]["p50_ratio"], cell[str(protos[1])]["rps_ratio"]
        out.append(cell)
    return out


def _fmt(r: dict) -> str:
    return "n/a" if r["ratio"] is None else f"{r['ratio']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"


def report(doc: dict) -> str:
    if len(doc.get("versions", [])) > 2:
        return report_many(doc)
    pa, pb = doc["a"], doc["b"]
    lines = [f"# Protocol version {pb} against version {pa}: the end-to-end cost", "",
             f"Machine: {doc['machine']}; {doc['started']}. Client and server share it (loopback, server "
             "`--wait poll`, client `--busy-poll`).", "",
             "```sh", doc["command"], "```", "",
             f"{doc['rounds']} rounds of {doc['calls']:,} closed-loop calls per cell, the two versions in alternated "
             f"order each round. Interval: bootstrap 95% of the ratio of medians ({RESAMPLES:,} resamples).", "",
             f"| service | C | v{pa} p50 µs (rounds) | v{pb} p50 µs (rounds) | v{pb}/v{pa} p50 [95%] | "
             f"v{pa} calls/s | v{pb} calls/s | v{pb}/v{pa} calls/s [95%] |",
             "|---|---:|---|---|---|---:|---:|---|"]
    for c in doc["cells"]:
        def fmt(r):
            return "n/a" if r["ratio"] is None else f"{r['ratio']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"
        a, b = c[str(pa)], c[str(pb)]
        ra, rb = ", ".join(map(str, a["p50_rounds"])), ", ".join(map(str, b["p50_rounds"]))
        lines.append(f"| {c['service']} | {c['concurrency']} | {a['p50_us']:.1f} ({ra}) "
                     f"| {b['p50_us']:.1f} ({rb}) | {fmt(c['p50_ratio'])} | "
                     f"{a['rps']:,.0f} | {b['rps']:,.0f} | {fmt(c['rps_ratio'])} |")
    return "\n".join(lines) + "\n"


NAMES = {"1": "v1", "2": "v2 (header check)", "3": "v3 (integrity: CRC-32C)",
         "4": "v4 (legacy: a BLAKE2b MAC per datagram)",
         "5": "v5 (sessions, authenticated: AEGIS-128L where both sides' libsodium has it and the CPU AES-NI, "
              "else AES-256-GCM where the CPU has AES-NI, else ChaCha20-Poly1305)",
         "5e": "v5 (sessions, encrypted: the same AEAD)"}


def report_many(doc: dict) -> str:
    vs = doc["versions"]
    base = vs[0]
    lines = [f"# Protocol versions {', '.join(map(str, vs))}: the end-to-end cost", "",
             f"Machine: {doc['machine']}; {doc['started']}. Client and server share it (loopback, server "
             "`--wait poll`, client `--busy-poll`). Keyed versions (4, 5, 5e) go to a second server with a "
             "key table" + (f"; libsodium: {doc['libsodium']}" if doc.get("libsodium") else "") + ".", "",
             "```sh", doc["command"], "```", "",
             f"{doc['rounds']} rounds of {doc['calls']:,} closed-loop calls per cell, the versions' order rotated "
             f"each round. Ratios over {NAMES.get(str(base), base)}: each version's median over its (unpaired), and "
             "the median of the rounds' ratios (paired: a round's versions ran back to back); bootstrap 95% "
             f"intervals ({RESAMPLES:,} resamples).", "",
             "| service | C | version | p50 µs (rounds) | p99 µs | calls/s | p50 ratio [95%] | p50 ratio, paired [95%] "
             "| calls/s ratio [95%] |",
             "|---|---:|---|---|---:|---:|---|---|---|"]
    for c in doc["cells"]:
        for v in vs:
            m = c[str(v)]
            rounds = ", ".join(map(str, m["p50_rounds"]))
            p50r = _fmt(m["p50_ratio"]) if v != base else "1"
            paired = (_fmt(m["p50_round_ratio"]) if "p50_round_ratio" in m else "n/a") if v != base else "1"
            rpsr = _fmt(m["rps_ratio"]) if v != base else "1"
            lines.append(f"| {c['service']} | {c['concurrency']} | {NAMES.get(str(v), v)} | {m['p50_us']:.1f} ({rounds}) "
                         f"| {m['p99_us']:.1f} | {m['rps']:,.0f} | {p50r} | {paired} | {rpsr} |")
    return "\n".join(lines) + "\n"


def _arguments(p) -> None:
    p.add_argument("--a", default="2", help="the baseline protocol version")
    p.add_argument("--b", default="3", help="the version compared with it")
    p.add_argument("--versions", metavar="V,V,...",
                   help="instead of --a/--b: several versions, the first the baseline (4, 5, 5e: a server with "
                        "keys; 5e: sessions that encrypt)")
    p.add_argument("--services", default="vecadd,head")
    p.add_argument("--concurrency", default="1,16")
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--splitrpc", default=os.path.join(os.path.dirname(sys.executable), "splitrpc"),
                   help="the splitrpc command of the server and the load (default: beside this Python)")
    p.add_argument("--out", required=True, help="the folder of ab.json and ab.md")
    p.add_argument("--from-json", metavar="AB.json", help="no runs: the report again from an earlier ab.json")


def _run_or_load(a) -> dict:
    if a.from_json:
        with open(a.from_json) as f:
            return json.load(f)
    return run(a)


def cmd_protocol_ab(a) -> int:
    return run_suite(a, name="ab", who="protocol_ab", run=_run_or_load, markdown=report, echo=True)


def main(argv: list[str] | None = None) -> int:
    return run_as_module("splitrpc.bench.suites.protocol_ab", __doc__, _arguments, cmd_protocol_ab, argv)


if __name__ == "__main__":
    sys.exit(main())
