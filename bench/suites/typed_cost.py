"""typed_cost.py: what the typed layer (splitrpc/typed.py) adds to a call (issue 53): vecadd and LeNet served by `splitrpc serve` in a process of its own, one client calling one at a time, typed (client.function(name)(array) -> named tuple of arrays) against raw (client.call(func_id, array) -> bytes), in alternated rounds; per round the mean time of a call in each mode, and the typed minus raw difference with a bootstrap 95% interval of its median over the rounds. Target: at most 1 us added per call on vecadd (met only when the interval's top is under it).

    python -m splitrpc.bench.suites.typed_cost --rounds 9 --out bench/results/typed/typed_cost.md

Also the layer alone, no network: the input check and the reply's reading, timed in a loop.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone

import numpy as np

from splitrpc.bench.helpers.intervals import RESAMPLES, round_ratio_interval
from splitrpc.bench.helpers.procs import start_splitrpc

TARGET_US = 1.0      # issue 53: typed adds at most this per call on vecadd at one outstanding call
FUNCS = ("vecadd", "lenet")


def difference_interval(a, b, seed: int = 0) -> dict:
    """{"diff": median of b[i] - a[i], "lo", "hi"} over paired rounds: the 2.5th and 97.5th
    percentiles of that median over RESAMPLES resamples of the rounds."""
    d = np.asarray(b, float) - np.asarray(a, float)
    if len(d) < 2:
        return {"diff": float(np.median(d)) if len(d) else None, "lo": None, "hi": None}
    m = np.median(d[np.random.default_rng(seed).integers(0, len(d), (RESAMPLES, len(d)))], axis=1)
    lo, hi = np.percentile(m, [2.5, 97.5])
    return {"diff": float(np.median(d)), "lo": float(lo), "hi": float(hi)}


def _inputs(c, name: str):
    fn = c.function(name)
    rng = np.random.default_rng(1)
    arrays = [s.random(rng) for s in fn.info.inputs]
    return fn, arrays, np.ascontiguousarray(arrays[0]) if len(arrays) == 1 else b"".join(a.tobytes() for a in arrays)


def _timed(call, n: int) -> float:
    """Mean microseconds of call() over n calls."""
    t0 = time.perf_counter_ns()
    for _ in range(n):
        call()
    return (time.perf_counter_ns() - t0) / n / 1e3


def layer_alone(fn, arrays, reply: bytes, n: int = 200_000) -> dict:
    """The typed layer's own work, no network: checking the inputs (the fast path) and reading
    the reply into the named tuple, in microseconds per call."""
    sig = fn.signature
    a = arrays[0]

    def check():
        return (type(a) is np.ndarray and a.dtype is sig.one_dtype and a.shape == sig.one_shape
                and a.flags.c_contiguous)
    return {"check_us": _timed(check, n), "read_us": _timed(lambda: sig.read(reply), n),
            "general_check_us": _timed(lambda: sig.check(arrays, {}), n // 4)}


def run(a) -> dict:
    import splitrpc
    from splitrpc.machine import describe
    from splitrpc.reporting import command_of

    proc, port = start_splitrpc("poll", ("--models", "lenet", "--small"))
    try:
        proc.wait_line("serving", 300)
        doc: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
                     "machine": describe(), "rounds": a.rounds, "calls": a.calls, "warmup": a.warmup,
                     "client": "splitrpc.Client(busy_poll=True), one call at a time; server: splitrpc serve "
                               "--wait poll --models lenet --small, a process of its own", "functions": {}}
        with splitrpc.Client("127.0.0.1", port, timeout=5.0, busy_poll=True) as c:
            for name in FUNCS:
                fn, arrays, raw_req = _inputs(c, name)
                typed_call = (lambda fn=fn, x=arrays: fn(*x))
                raw_call = (lambda fid=fn.func_id, q=raw_req: c.call(fid, q))
                reply = raw_call()
                assert all(np.array_equal(o, r) for o, r in zip(typed_call(), fn.signature.read(reply)))
                modes = {"raw": raw_call, "typed": typed_call}
                rounds: dict = {m: [] for m in modes}
                for r in range(a.rounds):
                    for m in (("raw", "typed") if r % 2 == 0 else ("typed", "raw")):  # alternated
                        _timed(modes[m], a.warmup)
                        rounds[m].append(_timed(modes[m], a.calls))
                    if not a.quiet:
                        print(f"{name} round {r + 1}/{a.rounds}: raw {rounds['raw'][-1]:.2f} us, typed "
                              f"{rounds['typed'][-1]:.2f} us", file=sys.stderr, flush=True)
                added = difference_interval(rounds["raw"], rounds["typed"])
                doc["functions"][name] = {
                    "func_id": fn.func_id, "request_bytes": fn.info.request_bytes,
                    "raw_us": float(np.median(rounds["raw"])), "typed_us": float(np.median(rounds["typed"])),
                    "added_us": added, "ratio": round_ratio_interval(rounds["raw"], rounds["typed"]),
                    "rounds": rounds, "layer_alone": layer_alone(fn, arrays, reply)}
    finally:
        proc.stop()
    v = doc["functions"]["vecadd"]["added_us"]
    doc["target"] = {"what": f"typed adds at most {TARGET_US:g} us per call on vecadd at one outstanding call",
                     "value": v["diff"], "hi": v["hi"], "met": v["hi"] is not None and v["hi"] <= TARGET_US}
    return doc


def markdown(doc: dict) -> str:
    t = doc["target"]
    lines = [f"# The typed layer's cost per call (issue 53), {doc['date']}", "",
             f"`{doc['command']}` on {doc['machine'].get('cpu', 'this machine')}; {doc['client']}. "
             f"{doc['rounds']} alternated rounds of {doc['calls']:,} calls per mode (after {doc['warmup']:,}); "
             "each round's mean per call; medians over the rounds, the difference's 95% bootstrap interval "
             "over the rounds.", "",
             "| function | request | raw us | typed us | typed - raw, us [95%] | typed / raw [95%] | "
             "layer alone: check / read us |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, f in doc["functions"].items():
        d, r, la = f["added_us"], f["ratio"], f["layer_alone"]
        lines.append(f"| {name} | {f['request_bytes']:,} B | {f['raw_us']:.2f} | {f['typed_us']:.2f} | "
                     f"{d['diff']:+.2f} [{d['lo']:+.2f}, {d['hi']:+.2f}] | {r['ratio']:.3f} "
                     f"[{r['lo']:.3f}, {r['hi']:.3f}] | {la['check_us']:.2f} / {la['read_us']:.2f} |")
    lines += ["", f"- Target: {t['what']}: **{'met' if t['met'] else 'NOT met'}** (median {t['value']:+.2f} us, "
              f"interval top {t['hi']:+.2f} us).",
              "- raw is `client.call(func_id, array)` returning the reply's bytes; typed is "
              "`client.function(name)(array)` returning a named tuple of numpy arrays viewing the reply "
              "(the input check, the call, the reply's reading). 'layer alone' times the fast path's input "
              "check and the reply's reading in a loop, without the network.",
              "- Nothing here is emulated; one machine, loopback, the server in a process of its own."]
    return "\n".join(lines) + "\n"


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=9, help="alternated rounds (default: %(default)s)")
    p.add_argument("--calls", type=int, default=20_000, help="calls per mode per round (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=2_000, help="calls before each timed run (default: %(default)s)")
    p.add_argument("--out", metavar="FILE.md", help="write the report here, and the rounds as FILE.json")
    p.add_argument("--quiet", action="store_true")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m splitrpc.bench.suites.typed_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _arguments(p)
    a = p.parse_args(argv)
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
