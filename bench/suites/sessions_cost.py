"""sessions_cost.py: what version 5's sessions cost, measured with the independent client (bench/clients/indep_client.c, written from the protocol pages): vecadd calls unkeyed (version 1, an unkeyed `splitrpc serve`; `unkeyed-v2`: version 2, whose header check version 5 keeps) against calls in sessions, authenticated and encrypted, with ChaCha20-Poly1305, AES-256-GCM and AEGIS-128L (`--v5`, `--encrypt`, `--aes`, `--aegis`; a `splitrpc serve --keys` of the same command line), the variants run back to back in each round in an order rotated each round; each one's p50 and calls/s over the unkeyed one's (the median of the rounds' ratios, and the ratio of the medians, each with a bootstrap 95% interval), and the handshake's time as the client saw it.

    python -m splitrpc.bench.suites.sessions_cost --rounds 15 --calls 40000 --out bench/results/sessions_cost/indep

ChaCha20-Poly1305 is the suite a client without AES-NI gets; `--aes` offers AES-256-GCM, which a
server with AES-NI grants. splitrpc's own client (offering AES-256-GCM where the CPU has it) is
measured by protocol_ab (--versions 2,5,5e,4). Client and server share the machine (loopback; the
servers poll, the client spins or blocks as its mode says).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

from splitrpc.auth import pynacl_sodium, sodium_library
from splitrpc.bench.helpers import indep_client
from splitrpc.bench.helpers.intervals import RESAMPLES, ratio_interval, round_ratio_interval
from splitrpc.bench.helpers.procs import free_port
from splitrpc.bench.suites.protocol_ab import median, start_server
from splitrpc.machine import describe
from splitrpc.loadgen.reporting import SuiteFailed, command_of, run_as_module, run_suite

# variant -> (keyed server, the independent client's options: beside --v5 KEY when keyed). unkeyed is
# version 1 (no header check), unkeyed-v2 version 2 (the header's CRC-16, which version 5 keeps, and
# splitrpc's own client's unkeyed default)
BASE, BASE_V2 = "unkeyed", "unkeyed-v2"
VARIANTS = {BASE: (False, []), BASE_V2: (False, ["--v2"]), "v5": (True, []), "v5-encrypt": (True, ["--encrypt"]),
            "v5-aes": (True, ["--aes"]), "v5-aes-encrypt": (True, ["--aes", "--encrypt"]),
            "v5-aegis": (True, ["--aegis"]), "v5-aegis-encrypt": (True, ["--aegis", "--encrypt"])}


def aead_of(opts: list[str]) -> str:
    """The suite a session with these client options must have (what the client's JSON says it used)."""
    return "aegis-128l" if "--aegis" in opts else "aes-256-gcm" if "--aes" in opts else "chacha20-poly1305"


def client_libsodium(choice: str) -> tuple[str | None, dict[str, str]]:
    """The independent client's libsodium (its --libsodium) and its environment's additions, for
    --client-libsodium: "system" (its own search: None), "pynacl" (the newer libsodium inside
    PyNaCl's wheel, which splitrpc's processes load where the system's is older:
    splitrpc/_native/sodium_pick.py), or a path. A library that is a Python extension module (PyNaCl's)
    needs libpython in the process to load: it is preloaded (the client runs no Python)."""
    import importlib.machinery
    import sysconfig

    if choice == "system":
        return None, {}
    path = pynacl_sodium() if choice == "pynacl" else choice
    if not path:
        raise SuiteFailed("--client-libsodium pynacl: PyNaCl 1.6 or later is not installed")
    env = {}
    if path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
        lib = os.path.join(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("INSTSONAME") or "")
        if not os.path.isfile(lib):
            raise SuiteFailed(f"{path} is a Python extension, and this Python has no shared libpython to preload")
        env["LD_PRELOAD"] = lib
    return path, env


def _one(client: str, port: int, mode: str, outstanding: int, calls: int, key: str | None, keyed: bool,
         opts: list[str], libsodium: str | None = None, env: dict[str, str] | None = None):
    extra = [*opts] if not keyed else ["--v5", key or "", *opts, *(["--libsodium", libsodium] if libsodium else [])]
    r = subprocess.run([client, "--port", str(port), "--mode", mode, "--outstanding", str(outstanding), "--calls",
                        str(calls), "--warmup", str(max(calls // 20, 500)), "--func", "1", "--check", "--json",
                        *extra], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, **env) if env else None)
    if r.returncode != 0:
        raise SuiteFailed(f"the client exited {r.returncode}: {r.stderr.strip()[-500:]}")
    d = json.loads(r.stdout)
    if d.get("lost") or d.get("errors") or d.get("bad_auth") or d.get("encrypt") != ("--encrypt" in opts):
        raise SuiteFailed(f"{mode}/{outstanding} {opts}: lost {d.get('lost')}, errors {d.get('errors')}, "
                          f"bad_auth {d.get('bad_auth')}")
    want = 5 if keyed else 2 if "--v2" in opts else 1
    if d.get("protocol") != want:
        raise SuiteFailed(f"{opts}: the client spoke version {d.get('protocol')}, not {want} (a client older than --v2?)")
    if keyed and d.get("aead") != aead_of(opts):
        raise SuiteFailed(f"{opts}: the session's AEAD was {d.get('aead')}, not {aead_of(opts)} "
                          "(a server or CPU without AES-NI grants neither AES-256-GCM nor AEGIS-128L, and a "
                          "libsodium before 1.0.19 no AEGIS-128L)")
    return {"p50_us": d["p50_us"], "p99_us": d["p99_us"], "rps": d["calls_per_s"],
            "handshake_us": d.get("handshake_us"), "libsodium": d.get("libsodium")}


def run(a) -> dict:
    client = indep_client.client_path(a.client)
    libsodium, env = client_libsodium(a.client_libsodium)
    cells = [(c.split(":")[0], int(c.split(":")[1])) for c in a.cells.split(",")]
    runs: list[dict] = []
    servers: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp:
        from splitrpc.auth import Key, KeyTable, save_client_key

        k = Key.generate(1)
        KeyTable([k]).save(os.path.join(tmp, "keys.json"))
        key = os.path.join(tmp, "client.json")
        save_client_key(k, key)
        try:
            port, key_port = free_port(), free_port()
            servers.append(start_server(a.splitrpc, port, []))
            servers.append(start_server(a.splitrpc, key_port, ["--keys", os.path.join(tmp, "keys.json")]))
            hs = handshakes(key_port, k, a.handshakes)
            names = a.variants
            for r in range(a.rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for mode, outstanding in cells:
                    for v in order:
                        keyed, opts = VARIANTS[v]
                        m = _one(client, key_port if keyed else port, mode, outstanding, a.calls, key, keyed, opts,
                                 libsodium, env)
                        runs.append({"round": r, "mode": mode, "outstanding": outstanding, "variant": v, **m})
                print(f"round {r + 1}/{a.rounds} done", flush=True)
        finally:
            for srv in servers:
                srv.terminate()
                srv.wait(10)
    return {"machine": describe(), "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": command_of(a), "rounds": a.rounds, "calls": a.calls, "client": client, "runs": runs,
            "libsodium": {"servers": sodium_library(),
                          "client": next((x["libsodium"] for x in runs if x.get("libsodium")), None)},
            "variants": a.variants, "cells": summarise(runs, a.variants), "handshakes": hs}


def handshakes(port: int, key, n: int) -> dict:
    """A handshake's cost as splitrpc's own client sees it: n fresh clients, each timing its first
    ping (the handshake's round trip, then the call's) and then three more (the call's alone);
    the handshake is the difference. Median and 90th percentile, µs."""
    import numpy as np

    import splitrpc

    first, steady = [], []
    for _ in range(n):
        with splitrpc.Client("127.0.0.1", port, key=key, timeout=5, busy_poll=True) as c:
            t0 = time.perf_counter()
            c.ping()
            t1 = time.perf_counter()
            for _ in range(3):
                c.ping()
            t2 = time.perf_counter()
            if c.stats()["handshakes"] != 1:
                raise SuiteFailed(f"a client made {c.stats()['handshakes']} handshakes for four calls")
        first.append((t1 - t0) * 1e6)
        steady.append((t2 - t1) / 3 * 1e6)
    d = np.array(first) - np.array(steady)
    return {"clients": n, "round_trips": 1, "first_call_p50_us": float(np.median(first)),
            "call_p50_us": float(np.median(steady)), "handshake_p50_us": float(np.median(d)),
            "handshake_p90_us": float(np.percentile(d, 90))}


def summarise(runs: list[dict], variants: list[str]) -> list[dict]:
    """Per (mode, outstanding): each variant's medians, and its p50 and calls/s over the unkeyed
    one's (version 1): the median of the rounds' ratios (paired: the variants of a round ran back to
    back) and the ratio of the medians (unpaired), each with its bootstrap 95% interval; where
    unkeyed-v2 ran too, the keyed variants' paired p50 ratio over it as well."""
    out = []
    for mode, outstanding in sorted({(x["mode"], x["outstanding"]) for x in runs}):
        side = {v: sorted((x for x in runs if (x["mode"], x["outstanding"], x["variant"]) == (mode, outstanding, v)),
                          key=lambda x: x["round"]) for v in variants}
        cell: dict = {"mode": mode, "outstanding": outstanding}
        for v, rs in side.items():
            c = {k: median([x[k] for x in rs if x[k] is not None]) for k in ("p50_us", "p99_us", "rps", "handshake_us")}
            c["p50_rounds"] = [round(x["p50_us"], 2) for x in rs]
            if v != BASE:
                base = side[BASE]
                c["p50_ratio"] = ratio_interval([x["p50_us"] for x in base], [x["p50_us"] for x in rs])
                c["rps_ratio"] = ratio_interval([x["rps"] for x in base], [x["rps"] for x in rs])
                c["p50_round_ratio"] = round_ratio_interval([x["p50_us"] for x in base], [x["p50_us"] for x in rs])
                c["rps_round_ratio"] = round_ratio_interval([x["rps"] for x in base], [x["rps"] for x in rs])
            if VARIANTS[v][0] and side.get(BASE_V2):
                c["p50_round_ratio_v2"] = round_ratio_interval([x["p50_us"] for x in side[BASE_V2]],
                                                               [x["p50_us"] for x in rs])
            cell[v] = c
        out.append(cell)
    return out


def _fmt(r: dict | None) -> str:
    return "n/a" if r is None else "n/a" if r["ratio"] is None else f"{r['ratio']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"


def report(doc: dict) -> str:
    variants = doc["variants"]
    lines = ["# What sessions cost, measured with the independent client", "",
             f"Machine: {doc['machine']}; {doc['started']}. Client: `{os.path.basename(doc['client'])}` "
             "(bench/clients/indep_client.c, written from the protocol pages; `v5*` are its sessions with "
             "ChaCha20-Poly1305, `v5-aes*` with AES-256-GCM, `v5-aegis*` with AEGIS-128L, `*-encrypt` encrypting the data). Loopback, servers "
             "`--wait poll`. Nothing emulated.", "",
             f"libsodium: the servers' {doc.get('libsodium', {}).get('servers')}; the independent client's "
             f"{doc.get('libsodium', {}).get('client')}.", "",
             "```sh", doc["command"], "```", "",
             f"{doc['rounds']} rounds of {doc['calls']:,} closed-loop vecadd calls per cell and variant, the variants "
             "run back to back in each round, their order rotated from round to round. Ratios over the unkeyed "
             "calls (version 1; where `unkeyed-v2` ran, the keyed ones over it too, paired): **paired**, the median of the rounds' ratios (each round's variants ran back to back, so the "
             "machine's drift from round to round cancels); **unpaired**, the ratio of the medians. Each with a "
             f"bootstrap 95% interval ({RESAMPLES:,} resamples of the rounds).", "",
             "| mode | outstanding | variant | p50 µs (rounds) | p99 µs | calls/s | p50 ratio, paired [95%] "
             "| p50 ratio, unpaired [95%] | calls/s ratio, paired [95%] | handshake µs |"
             + (" p50 ratio over unkeyed-v2, paired [95%] |" if BASE_V2 in variants else ""),
             "|---|---:|---|---|---:|---:|---|---|---|---:|" + ("---|" if BASE_V2 in variants else "")]
    for c in doc["cells"]:
        for v in variants:
            m = c[v]
            hs = "" if not m.get("handshake_us") else f"{m['handshake_us']:.0f}"
            unkeyed = v == BASE
            v2 = "1" if v == BASE_V2 else _fmt(m["p50_round_ratio_v2"]) if "p50_round_ratio_v2" in m else ""
            lines.append(f"| {c['mode']} | {c['outstanding']} | {v} | {m['p50_us']:.1f} "
                         f"({', '.join(map(str, m['p50_rounds']))}) | {m['p99_us']:.1f} | {m['rps']:,.0f} | "
                         f"{'1' if unkeyed else _fmt(m.get('p50_round_ratio'))} | {'1' if unkeyed else _fmt(m.get('p50_ratio'))} | "
                         f"{'1' if unkeyed else _fmt(m.get('rps_round_ratio'))} | {hs} |"
                         + (f" {v2} |" if BASE_V2 in variants else ""))
    h = doc.get("handshakes")
    if h:
        lines += ["", f"**A handshake** (splitrpc's own client, {h['clients']} fresh clients, busy-polling): one round "
                  f"trip (INIT, ACCEPT) before the first call; the first ping took {h['first_call_p50_us']:.0f} µs "
                  f"(median), the next ones {h['call_p50_us']:.0f} µs: the handshake costs "
                  f"{h['handshake_p50_us']:.0f} µs (median; 90th percentile {h['handshake_p90_us']:.0f} µs), two "
                  "X25519 operations on each side and the key schedule's hashes. The independent client's "
                  "`handshake_us` column is its first handshake, from its INIT to its taking the ACCEPT."]
    return "\n".join(lines) + "\n"


def _variants(text: str) -> list[str]:
    names = [v for v in text.split(",") if v]
    bad = [v for v in names if v not in VARIANTS]
    if bad or not names or names[0] != BASE or len(set(names)) != len(names):
        raise ValueError(f"variants: {','.join(VARIANTS)}, each once, unkeyed first (got {text!r})")
    return names


def _arguments(p) -> None:
    p.add_argument("--cells", default="spin:1,block:1,spin:16", help="MODE:OUTSTANDING,... (modes spin, block)")
    p.add_argument("--calls", type=int, default=40000)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--variants", type=_variants, default=list(VARIANTS),
                   help=f"which, comma-separated, unkeyed first (default: all: {','.join(VARIANTS)})")
    p.add_argument("--handshakes", type=int, default=200, help="fresh clients timing a handshake")
    p.add_argument("--client", help="the independent client's binary (default: the installed one)")
    p.add_argument("--client-libsodium", default="system",
                   help="the independent client's libsodium: system (its own search), pynacl (the one inside "
                        "PyNaCl, which the servers load where the system's is older), or a path")
    p.add_argument("--splitrpc", default=os.path.join(os.path.dirname(sys.executable), "splitrpc"),
                   help="the splitrpc command of the servers (default: beside this Python)")
    p.add_argument("--out", required=True, help="the folder of sessions.json and sessions.md")
    p.add_argument("--from-json", metavar="JSON", help="no runs: the report again from an earlier sessions.json")


def _run_or_load(a) -> dict:
    if a.from_json:  # the runs summarised again (an earlier file's too: its variants, its rounds)
        with open(a.from_json) as f:
            doc = json.load(f)
        doc.setdefault("variants", [v for v in VARIANTS if any(x["variant"] == v for x in doc["runs"])])
        doc["cells"] = summarise(doc["runs"], doc["variants"])
        return doc
    return run(a)


def cmd_sessions_cost(a) -> int:
    return run_suite(a, name="sessions", who="sessions_cost", run=_run_or_load, markdown=report, echo=True)


def main(argv: list[str] | None = None) -> int:
    return run_as_module("splitrpc.bench.suites.sessions_cost", __doc__, _arguments, cmd_sessions_cost, argv)


if __name__ == "__main__":
    sys.exit(main())
