"""typed_cost.py: what the typed layer (splitrpc/typed.py) adds to a call (issue 53): one client calling one at a time, typed (client.function(name)(array) -> a named tuple of arrays) against raw (client.call(func_id, array) -> bytes) and against raw with the reply decoded (np.frombuffer: what a raw caller does to get its array), vecadd and LeNet served by `splitrpc serve` in a process of its own. Each round runs in a client process of its own; in it the modes take turns call by call, in a random order per turn, each call timed; a round's figure per mode is its median call. Medians over the rounds, and each difference with a bootstrap 95% interval of its median over the rounds. Target: at most 1 us added per call on vecadd (met only when the interval's top is under it).

    python -m splitrpc.bench.suites.typed_cost --rounds 9 --out bench/results/typed/typed_cost.md

vecadd's server polls (--wait poll), so that no server wake-up depends on the time between calls;
LeNet's blocks (its PyTorch threads need the cores) and its client sleeps on its socket. Also the
layer alone, no network: the fast path's input check and the reply's reading, timed in a loop.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from typing import Any

import numpy as np

from splitrpc.bench.helpers.intervals import round_difference_interval, round_ratio_interval
from splitrpc.bench.helpers.procs import start_splitrpc

TARGET_US = 1.0      # issue 53: typed adds at most this per call on vecadd at one outstanding call
MODES = ("raw", "raw+decode", "typed")


def _inputs(c, name: str):
    fn = c.function(name)
    rng = np.random.default_rng(1)
    arrays = [s.random(rng) for s in fn.info.inputs]
    return fn, arrays, np.ascontiguousarray(arrays[0]) if len(arrays) == 1 else b"".join(a.tobytes() for a in arrays)


def _turns(modes: dict, n: int, seed: int) -> dict[str, float]:
    """Each mode's median microseconds per call over n turns; in each turn every mode is called
    once, in a random order (no mode always first, or always right after another)."""
    import random

    names = list(modes)
    fs = [modes[m] for m in names]
    lat = np.empty((len(fs), n), np.int64)
    order = list(range(len(fs)))
    shuffle, pc = random.Random(seed).shuffle, time.perf_counter_ns
    for i in range(n):
        shuffle(order)
        for k in order:
            f = fs[k]
            t0 = pc()
            f()
            lat[k, i] = pc() - t0
    return {m: float(np.median(lat[k])) / 1e3 for k, m in enumerate(names)}


def _timed(call, n: int) -> float:
    """Mean microseconds of call() over n calls."""
    t0 = time.perf_counter_ns()
    for _ in range(n):
        call()
    return (time.perf_counter_ns() - t0) / n / 1e3


def layer_alone(fn, arrays, reply: bytes, n: int = 200_000) -> dict:
    """The typed layer's own work, no network: checking the inputs (the fast path) and reading
    the reply into the named tuple (where the reply is received straight into its one output's
    array: allocating that array and the tuple), in microseconds per call."""
    sig = fn.signature
    a = arrays[0]

    def check():
        return (type(a) is np.ndarray and a.dtype is sig.one_dtype and a.shape == sig.one_shape
                and a.flags.c_contiguous)
    if fn._b.into is not None:  # the reply is received into a fresh array: its allocation and the tuple
        def read():
            return tuple.__new__(sig.Outputs, (np.empty(*sig.out_one),))
    else:
        def read():
            return sig.read(reply)
    return {"check_us": _timed(check, n), "read_us": _timed(read, n), "read_into": fn._b.into is not None,
            "general_check_us": _timed(lambda: sig.check(arrays, {}), n // 4)}



def _modes(c, name: str) -> tuple[dict, Any]:
    """The three modes' calls on client c, after checking that typed and raw agree."""
    fn, arrays, raw_req = _inputs(c, name)
    out = fn.info.outputs[0]
    typed_call = ((lambda fn=fn, x=arrays[0]: fn(x)) if len(arrays) == 1  # as a caller writes it
                  else (lambda fn=fn, x=arrays: fn(*x)))
    raw_call = (lambda fid=fn.func_id, q=raw_req: c.call(fid, q))
    decode = (lambda fid=fn.func_id, q=raw_req, dt=out.np_dtype, sh=out.shape:
              np.frombuffer(c.call(fid, q), dt).reshape(sh))
    reply = raw_call()
    assert all(np.array_equal(o, r) for o, r in zip(typed_call(), fn.signature.read(reply))), name
    return {"raw": raw_call, "raw+decode": decode, "typed": typed_call}, (fn, arrays, reply)


def one_round(port: int, name: str, busy_poll: bool, calls: int, warmup: int, seed: int) -> dict[str, float]:
    """One round in this process: a client of its own, warmed up, then `calls` turns."""
    import splitrpc

    with splitrpc.Client("127.0.0.1", port, timeout=5.0, busy_poll=busy_poll) as c:
        modes, _ = _modes(c, name)
        _turns(modes, warmup, seed=seed)
        return _turns(modes, calls, seed=1000 + seed)


def _measure(a, name: str, wait: str, busy_poll: bool, calls: int, warmup: int) -> dict:
    """Each round in a client process of its own (code placement and the allocator's state
    differ between processes, and with them a few hundred nanoseconds of a call: rounds in one
    process would show a narrower interval than a user's next process gets)."""
    import subprocess
    import tempfile

    import splitrpc

    extra = ("--models", "lenet", "--small") if name == "lenet" else ()
    proc, port = start_splitrpc(wait, extra)
    try:
        proc.wait_line("serving", 300)
        rounds: dict = {m: [] for m in MODES}
        for r in range(a.rounds):
            cmd = [sys.executable, "-m", "splitrpc.bench.suites.typed_cost", "--one-round",
                   json.dumps([port, name, busy_poll, calls, warmup, r])]
            got = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600,
                                            cwd=tempfile.gettempdir()).stdout)  # not a source tree's splitrpc/
            for m in MODES:
                rounds[m].append(got[m])
            if not a.quiet:
                print(f"{name} round {r + 1}/{a.rounds}: " + ", ".join(f"{m} {rounds[m][-1]:.2f} us" for m in MODES),
                      file=sys.stderr, flush=True)
        with splitrpc.Client("127.0.0.1", port, timeout=5.0, busy_poll=busy_poll) as c:
            _, (fn, arrays, reply) = _modes(c, name)
            alone = layer_alone(fn, arrays, reply)
        return {"func_id": fn.func_id, "request_bytes": fn.info.request_bytes, "calls_per_round": calls,
                "server": f"splitrpc serve --wait {wait}{' ' + ' '.join(extra) if extra else ''}",
                "client_busy_poll": busy_poll,
                **{f"{m}_us": float(np.median(rounds[m])) for m in MODES},
                "added_us": round_difference_interval(rounds["raw"], rounds["typed"]),
                "added_over_decode_us": round_difference_interval(rounds["raw+decode"], rounds["typed"]),
                "ratio": round_ratio_interval(rounds["raw"], rounds["typed"]),
                "rounds": rounds, "layer_alone": alone}
    finally:
        proc.stop()


def run(a) -> dict:
    from splitrpc.machine import describe
    from splitrpc.loadgen.reporting import command_of

    doc: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
                 "machine": describe(), "rounds": a.rounds, "calls": a.calls, "warmup": a.warmup, "functions": {}}
    doc["functions"]["vecadd"] = _measure(a, "vecadd", "poll", True, a.calls, a.warmup)
    if not a.vecadd_only:  # LeNet's call is a model run (~30x vecadd's): a twentieth of the calls
        doc["functions"]["lenet"] = _measure(a, "lenet", "block", False, max(200, a.calls // 20),
                                             max(20, a.warmup // 20))
    v = doc["functions"]["vecadd"]["added_us"]
    doc["target"] = {"what": f"typed adds at most {TARGET_US:g} us per call on vecadd at one outstanding call",
                     "value": v["diff"], "hi": v["hi"], "met": v["hi"] is not None and v["hi"] <= TARGET_US}
    return doc


def markdown(doc: dict) -> str:
    t = doc["target"]
    lines = [f"# The typed layer's cost per call (issue 53), {doc['date']}", "",
             f"`{doc['command']}` on {doc['machine'].get('cpu', 'this machine')}. {doc['rounds']} rounds, each in a client process of its own; in each, "
             "the three modes take turns call by call in a random order per turn, each call timed, and the round's "
             "figure per mode is its median call. Medians over the rounds; differences with the 95% bootstrap "
             "interval of their median over the rounds.", "",
             "| function | server, client | calls a round | raw us | raw + decode us | typed us | typed - raw, us [95%] "
             "| typed - (raw + decode), us [95%] | layer alone: check / read us |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, f in doc["functions"].items():
        d, e, la = f["added_us"], f["added_over_decode_us"], f["layer_alone"]
        lines.append(f"| {name} | `{f['server']}`, busy_poll={f['client_busy_poll']} | {f['calls_per_round']:,} | "
                     f"{f['raw_us']:.2f} | {f['raw+decode_us']:.2f} | {f['typed_us']:.2f} | "
                     f"{d['diff']:+.2f} [{d['lo']:+.2f}, {d['hi']:+.2f}] | {e['diff']:+.2f} [{e['lo']:+.2f}, {e['hi']:+.2f}] "
                     f"| {la['check_us']:.2f} / {la['read_us']:.2f} |")
    lines += ["", f"- Target: {t['what']}: **{'met' if t['met'] else 'NOT met'}** (median {t['value']:+.2f} us, "
              f"interval top {t['hi']:+.2f} us).",
              "- raw: `client.call(func_id, array)`, the reply's bytes. raw + decode: the same and "
              "`np.frombuffer(reply, dtype).reshape(shape)`, what a raw caller does to use the reply. typed: "
              "`client.function(name)(array)`, a named tuple of numpy arrays (the input check, the call, the reading). "
              "The typed fast path hands the checked array to the native call as it is, skipping the raw layer's "
              "buffer conversion, and where the function has one output of 512 bytes or more (vecadd's 1 KiB; not "
              "LeNet's 40-byte logits) the native call copies the reply straight into a fresh array of it: no bytes "
              "object, no np.frombuffer.",
              "- 'layer alone' times the fast path's input check and the reply's reading in a loop, without the "
              "network (reading, where the reply is received into its array: that array's allocation and the "
              "tuple); in a loop they run with hot caches, between network calls they do not.",
              "- Nothing here is emulated; one machine (2 cores), loopback, the server in a process of its own."]
    return "\n".join(lines) + "\n"


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=9, help="alternated rounds (default: %(default)s)")
    p.add_argument("--calls", type=int, default=20_000, help="calls per mode per round (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=2_000, help="calls before each timed run (default: %(default)s)")
    p.add_argument("--out", metavar="FILE.md", help="write the report here, and the rounds as FILE.json")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--vecadd-only", action="store_true", help="leave LeNet out (a quick look; the target is vecadd's)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m splitrpc.bench.suites.typed_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _arguments(p)
    p.add_argument("--one-round", metavar="JSON", help=argparse.SUPPRESS)  # a round's client process (_measure)
    a = p.parse_args(argv)
    if a.one_round:
        print(json.dumps(one_round(*json.loads(a.one_round))))
        return 0
    if a.rounds < 2 or a.calls < 1 or a.warmup < 0:
        p.error("--rounds 2 or more, --calls 1 or more")
    doc = run(a)
    md = markdown(doc)
    print(md)
    if a.out:
        import os

        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(md)
        with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
