"""runner.py: runs the sections of `splitrpc check` one after another, each in a child process under its time cap, prints a line per verdict as it comes, and merges a rerun into an earlier report."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, cast

from splitrpc.check.section import FAILED, PASSED, SKIPPED, Context, Section

TAIL_LINES = 25  # of a failed section's output, kept in its verdict
# The child's entry: the splitrpc this process imported, never a source folder in the working
# directory (which `python -m` and `-c` would put first on the path).
_CHILD = ("import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
          "from splitrpc.check.child import main; sys.exit(main(sys.argv[1:]))")


def _tail(text: str, n: int = TAIL_LINES) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines[-n:])


def _kill_group(p: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


EXIT_GRACE_S = 15.0  # a child that has written its verdict gets this long to exit before it is killed
_POLL_S = 0.05


def _read_verdict(path: str) -> dict[str, Any] | None:
    """The child's verdict file (written whole, by rename), or None when there is none or it cannot
    be read."""
    try:
        with open(path) as f:
            return cast("dict[str, Any]", json.load(f))  # child.main writes a JSON object
    except (OSError, ValueError):
        return None
    finally:
        for leftover in (path, path + ".part"):  # .part: a child killed while writing
            if os.path.exists(leftover):
                os.unlink(leftover)


def run_section(sec: Section, ctx_path: str, cap_s: float, cap_why: str = "the section's cap") -> dict[str, Any]:
    """The section's verdict from a child process (splitrpc.check.child), killed with everything
    it started once cap_s seconds have passed, or EXIT_GRACE_S after its verdict if it has not
    ended by then. Its output goes to a file (no pipe for a stray grandchild to hold open)."""
    fd, result_path = tempfile.mkstemp(prefix=f"splitrpc-check-{sec.name}-", suffix=".json")
    os.close(fd)
    os.unlink(result_path)  # the child writes it when it has a verdict
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+", errors="replace") as log:
        p = subprocess.Popen([sys.executable, "-c", _CHILD, sec.module, sec.name, ctx_path, result_path, f"{cap_s:.1f}"],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        end, verdict_at, timed_out = t0 + cap_s, None, False
        while p.poll() is None:
            now = time.monotonic()
            if verdict_at is None and os.path.exists(result_path):
                verdict_at = now
                if now + EXIT_GRACE_S < end:
                    end, cap_why = now + EXIT_GRACE_S, f"{EXIT_GRACE_S:g} s after its verdict"
            if now >= end:
                timed_out = True
                break
            time.sleep(_POLL_S)
        _kill_group(p)  # whatever the section left running (a server, a pytest child), or the child itself
        p.wait()
        log.seek(0)
        out = log.read()
    seconds = round(time.monotonic() - t0, 2)
    res = _read_verdict(result_path)
    if res is None:
        if timed_out:
            why = f"timed out after {cap_s:g} s ({cap_why}), killed"
        elif p.returncode and p.returncode < 0:
            why = f"crashed: {signal.Signals(-p.returncode).name}"
        else:
            why = f"its process exited with status {p.returncode} without a verdict"
        res = {"verdict": FAILED, "why": why}
    elif timed_out:  # the verdict came, then the process did not end (a stop or an exit that hangs)
        res = {**res, "verdict": FAILED, "why": f"it had finished ({res['verdict']}: {res.get('why') or res.get('summary', '')}) "
                                                f"but its process did not exit ({cap_why})"}
    elif p.returncode:
        how = signal.Signals(-p.returncode).name if p.returncode < 0 else f"status {p.returncode}"
        res = {**res, "verdict": FAILED, "why": f"it had finished ({res['verdict']}) but its process then ended with {how}"}
    res["seconds"] = seconds
    res["cap_s"] = cap_s
    if res["verdict"] == FAILED:
        res["output_tail"] = _tail(out or "")
    return res


def line(name: str, r: dict[str, Any]) -> str:
    """The one-line verdict printed as each section ends."""
    verdict = r["verdict"]
    text = r.get("summary", "") if verdict == PASSED else r.get("why", "")
    return f"{name:22s} {verdict.upper():8s} {r.get('seconds', 0):6.1f} s  {text}"


MIN_SECTION_S = 5.0  # a section is not started with less of the budget left


def run(sections: list[Section], ctx: Context, cap_s: float | None = None, budget_s: float | None = None,
        progress: Callable[..., object] = print,
        after: Callable[[dict[str, dict[str, Any]]], object] | None = None) -> dict[str, dict[str, Any]]:
    """{name: verdict dict} for each section in order; cap_s overrides every section's cap;
    budget_s bounds the whole run: a section gets at most what is left of it, and one that
    would start with less than MIN_SECTION_S left is skipped, saying so. after(results so far)
    is called once each section has its verdict (the report written as the run goes, so that a
    run killed from outside still leaves what it found)."""
    results: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + budget_s if budget_s is not None else None
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="splitrpc-check-ctx-", delete=False) as f:
        json.dump(ctx.to_json(), f)
        ctx_path = f.name
    try:
        for i, sec in enumerate(sections, 1):
            cap, why = (cap_s if cap_s is not None else sec.cap_s), "the section's cap"
            left = deadline - time.monotonic() if deadline is not None else cap
            if left < MIN_SECTION_S:
                r: dict[str, Any] = {"verdict": SKIPPED,
                                     "why": f"the check's time budget ({budget_s:g} s) was spent before it",
                                     "seconds": 0.0, "title": sec.title, "bench": sec.bench}
                results[sec.name] = r
                progress(f"[{i}/{len(sections)}] " + line(sec.name, r), flush=True)
                if after is not None:
                    after(results)
                continue
            if left < cap:
                cap, why = left, f"what was left of the check's {budget_s:g} s budget"
            progress(f"[{i}/{len(sections)}] {sec.name}: {sec.title} (cap {cap:.0f} s) ...", flush=True)
            r = run_section(sec, ctx_path, cap, why)
            r["title"] = sec.title
            r["bench"] = sec.bench
            results[sec.name] = r
            progress("    " + line(sec.name, r), flush=True)
            if r["verdict"] == FAILED and r.get("output_tail"):
                progress("      " + "\n      ".join(r["output_tail"].splitlines()[-8:]), flush=True)
            if after is not None:
                after(results)
    finally:
        os.unlink(ctx_path)
    return results


def merge(previous: dict[str, Any], results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """An earlier check.json's sections with the ones rerun now replacing theirs (marked rerun)."""
    merged = dict(previous.get("sections", {}))
    for name, r in results.items():
        merged[name] = {**r, "rerun": True}
    return merged


def failed_names(results: dict[str, dict[str, Any]]) -> list[str]:
    return [n for n, r in results.items() if r["verdict"] == FAILED]


def counts(results: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {v: sum(1 for r in results.values() if r["verdict"] == v) for v in (PASSED, FAILED, SKIPPED)}
