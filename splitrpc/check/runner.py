"""runner.py: runs the sections of `splitrpc check` one after another, each in a child process under its time cap, prints a line per verdict as it comes, and merges a rerun into an earlier report."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from splitrpc.check.section import FAILED, PASSED, SKIPPED, Context, Section

TAIL_LINES = 25  # of a failed section's output, kept in its verdict
# The child's entry: the splitrpc this process imported, never a source folder in the working
# directory (which `python -m` and `-c` would put first on the path).
_CHILD = ("import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
          "from splitrpc.check.child import main; sys.exit(main(sys.argv[1:]))")


def _tail(text: str, n: int = TAIL_LINES) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines[-n:])


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_section(sec: Section, ctx_path: str, cap_s: float) -> dict:
    """The section's verdict from a child process (splitrpc.check.child), killed with
    everything it started once cap_s seconds have passed."""
    fd, result_path = tempfile.mkstemp(prefix=f"splitrpc-check-{sec.name}-", suffix=".json")
    os.close(fd)
    os.unlink(result_path)  # the child writes it when it has a verdict
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-c", _CHILD, sec.module, sec.name, ctx_path, result_path],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                         start_new_session=True)
    timed_out = False
    try:
        out, _ = p.communicate(timeout=cap_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(p)
        out, _ = p.communicate()
    finally:
        _kill_group(p)  # whatever the section left running (a server process, a pytest child)
    seconds = round(time.monotonic() - t0, 2)
    res = None
    if os.path.exists(result_path):
        with open(result_path) as f:
            res = json.load(f)
        os.unlink(result_path)
    if res is None:
        if timed_out:
            why = f"timed out after {cap_s:g} s (the section's cap), killed"
        elif p.returncode and p.returncode < 0:
            why = f"crashed: {signal.Signals(-p.returncode).name}"
        else:
            why = f"its process exited with status {p.returncode} without a verdict"
        res = {"verdict": FAILED, "why": why}
    elif timed_out:  # the verdict came, then the process did not end (a stop or an exit that hangs)
        res = {**res, "verdict": FAILED, "why": f"it had finished ({res['verdict']}: {res.get('why') or res.get('summary', '')}) "
                                                f"but its process did not exit within the {cap_s:g} s cap"}
    elif p.returncode:
        how = signal.Signals(-p.returncode).name if p.returncode < 0 else f"status {p.returncode}"
        res = {**res, "verdict": FAILED, "why": f"it had finished ({res['verdict']}) but its process then ended with {how}"}
    res["seconds"] = seconds
    res["cap_s"] = cap_s
    if res["verdict"] == FAILED:
        res["output_tail"] = _tail(out or "")
    return res


def line(name: str, r: dict) -> str:
    """The one-line verdict printed as each section ends."""
    verdict = r["verdict"]
    text = r.get("summary", "") if verdict == PASSED else r.get("why", "")
    return f"{name:22s} {verdict.upper():8s} {r.get('seconds', 0):6.1f} s  {text}"


MIN_SECTION_S = 5.0  # a section is not started with less of the budget left


def run(sections: list[Section], ctx: Context, cap_s: float | None = None, budget_s: float | None = None,
        progress=print) -> dict:
    """{name: verdict dict} for each section in order; cap_s overrides every section's cap;
    budget_s bounds the whole run: a section gets at most what is left of it, and one that
    would start with less than MIN_SECTION_S left is skipped, saying so."""
    results = {}
    deadline = time.monotonic() + budget_s if budget_s is not None else None
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="splitrpc-check-ctx-", delete=False) as f:
        json.dump(ctx.to_json(), f)
        ctx_path = f.name
    try:
        for i, sec in enumerate(sections, 1):
            cap = cap_s if cap_s is not None else sec.cap_s
            if deadline is not None:
                left = deadline - time.monotonic()
                if left < MIN_SECTION_S:
                    r = {"verdict": SKIPPED, "why": f"the check's time budget ({budget_s:g} s) was spent before it",
                         "seconds": 0.0, "title": sec.title, "bench": sec.bench}
                    results[sec.name] = r
                    progress(f"[{i}/{len(sections)}] " + line(sec.name, r), flush=True)
                    continue
                cap = min(cap, left)
            progress(f"[{i}/{len(sections)}] {sec.name}: {sec.title} (cap {cap:.0f} s) ...", flush=True)
            r = run_section(sec, ctx_path, cap)
            r["title"] = sec.title
            r["bench"] = sec.bench
            results[sec.name] = r
            progress("    " + line(sec.name, r), flush=True)
            if r["verdict"] == FAILED and r.get("output_tail"):
                progress("      " + "\n      ".join(r["output_tail"].splitlines()[-8:]), flush=True)
    finally:
        os.unlink(ctx_path)
    return results


def merge(previous: dict, results: dict) -> dict:
    """An earlier check.json's sections with the ones rerun now replacing theirs (marked rerun)."""
    merged = dict(previous.get("sections", {}))
    for name, r in results.items():
        merged[name] = {**r, "rerun": True}
    return merged


def failed_names(results: dict) -> list[str]:
    return [n for n, r in results.items() if r["verdict"] == FAILED]


def counts(results: dict) -> dict:
    return {v: sum(1 for r in results.values() if r["verdict"] == v) for v in (PASSED, FAILED, SKIPPED)}
