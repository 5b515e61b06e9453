"""runner.py: runs the sections of `splitrpc check` one after another, each in a child process under its time cap and inside the check's budget, prints the plan first and a line per verdict as it comes, and merges a rerun into an earlier report."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, cast

from splitrpc.check.section import CUT, FAILED, FAILING, PASSED, PROGRESS_ENV, VERDICTS, Context, Section

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


def _progress(path: str) -> tuple[list[str], str | None]:
    """(the parts the child noted done, the error it noted it was failing with, if any)."""
    try:
        with open(path, errors="replace") as f:
            lines = [ln.rstrip("\n") for ln in f if ln.strip()]
    except OSError:
        return [], None
    finally:
        if os.path.exists(path):
            os.unlink(path)
    failing = [ln[len(FAILING):] for ln in lines if ln.startswith(FAILING)]
    return [ln for ln in lines if not ln.startswith(FAILING)], (failing[0] if failing else None)


class Stopped(Exception):
    """Raised in the check's main thread by its SIGTERM or SIGINT handler (install_stop_handlers):
    the section running is killed and cut, the rest cut, and the report still written."""


_KILL_WAIT_S = 10.0  # a killed child that has not gone after this long (stuck in a driver) is left behind


def run_section(sec: Section, ctx_path: str, cap_s: float, cap_why: str = "its cap",
                budget_limited: bool = False) -> dict[str, Any]:
    """The section's verdict from a child process (splitrpc.check.child), killed with everything
    it started once cap_s seconds have passed, or EXIT_GRACE_S after its verdict if it has not
    ended by then. Killed at cap_s with no verdict: failed, naming the parts it noted done(),
    and the error it noted failing() if it had (its teardown then hung); but cut where the cap
    is what the check's budget left it (budget_limited), less than its own. A verdict that came
    before a budget kill stands. Its output goes to a file (no pipe for a stray grandchild to
    hold open). Stopped (the check told to stop) kills it first and propagates."""
    fd, result_path = tempfile.mkstemp(prefix=f"splitrpc-check-{sec.name}-", suffix=".json")
    os.close(fd)
    os.unlink(result_path)  # the child writes it when it has a verdict
    fd, progress_path = tempfile.mkstemp(prefix=f"splitrpc-check-{sec.name}-", suffix=".progress")
    os.close(fd)
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+", errors="replace") as log:
        p = subprocess.Popen([sys.executable, "-c", _CHILD, sec.module, sec.name, ctx_path, result_path, f"{cap_s:.1f}",
                              f"{t0 + cap_s:.3f}", "1" if budget_limited else "0"],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                             env={**os.environ, PROGRESS_ENV: progress_path})
        end, verdict_at, timed_out, why_end = t0 + cap_s, None, False, cap_why
        try:
            while p.poll() is None:
                now = time.monotonic()
                if verdict_at is None and os.path.exists(result_path):
                    verdict_at = now
                    if now + EXIT_GRACE_S < end:
                        end, why_end = now + EXIT_GRACE_S, f"{EXIT_GRACE_S:g} s after its verdict"
                if now >= end:
                    timed_out = True
                    break
                time.sleep(_POLL_S)
        finally:  # also when Stopped: nothing the section started outlives the check
            _kill_group(p)  # whatever the section left running (a server, a pytest child), or the child itself
            try:
                p.wait(timeout=_KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                pass  # uninterruptible (a driver call): left behind, said below
        log.seek(0)
        out = log.read()
    seconds = round(time.monotonic() - t0, 2)
    finished, failing = _progress(progress_path)
    res = _read_verdict(result_path)
    done_text = f"it had finished: {'; '.join(finished)}" if finished else "it had noted nothing finished"
    if res is None:
        if timed_out and failing:
            res = {"verdict": FAILED, "why": f"{failing}; then it did not end within {cap_s:g} s ({why_end}): killed"}
        elif timed_out and budget_limited:
            res = {"verdict": CUT, "why": f"{cap_s:g} s ({why_end}) ran out before it finished; {done_text}"}
        elif timed_out:
            res = {"verdict": FAILED, "why": f"no verdict within its own cap of {cap_s:g} s (a hang that no deadline "
                                             f"of its own caught, or a cap too small for this machine); {done_text}"}
        elif p.returncode is None:
            res = {"verdict": FAILED, "why": "its process could not be killed (stuck in the driver?)"}
        elif p.returncode < 0:
            res = {"verdict": FAILED, "why": f"crashed: {signal.Signals(-p.returncode).name}"}
        else:
            res = {"verdict": FAILED, "why": f"its process exited with status {p.returncode} without a verdict"}
    elif timed_out and budget_limited and why_end == cap_why:  # the budget ended it while it exited
        res = {**res, "exit": "its process was still exiting when the check's budget ran out: killed"}
    elif timed_out:  # the verdict came, then the process did not end (a stop or an exit that hangs)
        res = {**res, "verdict": FAILED, "why": f"it had finished ({res['verdict']}: {res.get('why') or res.get('summary', '')}) "
                                                f"but its process did not exit ({why_end})"}
    elif p.returncode:
        how = signal.Signals(-p.returncode).name if p.returncode < 0 else f"status {p.returncode}"
        res = {**res, "verdict": FAILED, "why": f"it had finished ({res['verdict']}) but its process then ended with {how}"}
    res["seconds"] = seconds
    res["cap_s"] = cap_s
    if finished:
        res["finished"] = finished
    if res["verdict"] in (FAILED, CUT):
        res["output_tail"] = _tail(out or "")
    return res


def install_stop_handlers() -> None:
    """SIGTERM and SIGINT raise Stopped in the main thread (a `timeout` around the check, the device
    tool's limit): run() then kills the running section and cuts the rest, and the report is
    written. Main thread only."""
    def handler(signum: int, frame: object) -> None:
        ignore_stop_signals()  # once: a second signal must not break the report being written
        raise Stopped(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


def ignore_stop_signals() -> None:
    """From here on SIGTERM and SIGINT are ignored (the final report is being written; a KILL
    still ends the process). Main thread only."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


def line(name: str, r: dict[str, Any]) -> str:
    """The one-line verdict printed as each section ends."""
    verdict = r["verdict"]
    text = r.get("summary", "") if verdict == PASSED else r.get("why", "")
    return f"{name:22s} {verdict.upper():8s} {r.get('seconds', 0):6.1f} s  {text}"


MIN_SECTION_S = 5.0  # a section is not started with less of the budget left


def plan(sections: list[Section], cap_s: float | None = None, budget_s: float | None = None) -> list[dict[str, Any]]:
    """The run ahead, before anything runs: each section's cap, the caps' running total, and
    whether it fits the budget whole ("fits"), may be cut ("may be cut": the budget ends inside
    its cap) or starts past it if those before use their whole caps ("past the budget at full caps")."""
    rows, total = [], 0.0
    for sec in sections:
        cap = cap_s if cap_s is not None else sec.cap_s
        start, total = total, total + cap
        if budget_s is None or total <= budget_s:
            fit = "fits"
        elif start + MIN_SECTION_S <= budget_s:
            fit = "may be cut"
        else:
            fit = "past the budget at full caps"
        rows.append({"section": sec.name, "tier": sec.tier, "cap_s": cap, "total_s": total, "fit": fit})
    return rows


def plan_lines(rows: list[dict[str, Any]], budget_s: float | None) -> list[str]:
    head = f"plan: {len(rows)} sections" + (f", budget {budget_s:.0f} s" if budget_s is not None else ", no budget")
    return [head, f"  {'section':22s} {'tier':10s} {'cap s':>6s} {'total s':>8s}  fits the budget?",
            *(f"  {r['section']:22s} {r['tier']:10s} {r['cap_s']:6.0f} {r['total_s']:8.0f}  {r['fit']}" for r in rows)]


def run(sections: list[Section], ctx: Context, cap_s: float | None = None, budget_s: float | None = None,
        progress: Callable[..., object] = print,
        after: Callable[[dict[str, dict[str, Any]]], object] | None = None) -> dict[str, dict[str, Any]]:
    """{name: verdict dict} for each section in order; cap_s overrides every section's cap;
    budget_s bounds the whole run: a section gets at most what is left of it, and one that
    would start with less than MIN_SECTION_S left is cut without starting, saying so. The plan
    is printed first. after(results so far) is called once each section has its verdict (the
    report written as the run goes, so that a run killed from outside still leaves what it
    found)."""
    results: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + budget_s if budget_s is not None else None
    for ln in plan_lines(plan(sections, cap_s, budget_s), budget_s):
        progress(ln, flush=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="splitrpc-check-ctx-", delete=False) as f:
        json.dump(ctx.to_json(), f)
        ctx_path = f.name
    running: Section | None = None
    try:
        for i, sec in enumerate(sections, 1):
            cap, why = (cap_s if cap_s is not None else sec.cap_s), "its cap"
            left = deadline - time.monotonic() if deadline is not None else cap
            if left < MIN_SECTION_S:
                r: dict[str, Any] = {"verdict": CUT, "why": f"not started: the check's budget ({budget_s:g} s) was "
                                                            f"spent before it ({max(left, 0):.1f} s left)",
                                     "seconds": 0.0, "cap_s": cap, "title": sec.title, "bench": sec.bench}
                results[sec.name] = r
                progress(f"[{i}/{len(sections)}] " + line(sec.name, r), flush=True)
                if after is not None:
                    after(results)
                continue
            limited = left < cap
            if limited:
                cap, why = left, f"what was left of the check's {budget_s:g} s budget"
            progress(f"[{i}/{len(sections)}] {sec.name}: {sec.title} (cap {cap:.0f} s) ...", flush=True)
            running = sec
            r = run_section(sec, ctx_path, cap, why, budget_limited=limited)
            running = None
            r["title"] = sec.title
            r["bench"] = sec.bench
            results[sec.name] = r
            progress("    " + line(sec.name, r), flush=True)
            if r["verdict"] in (FAILED, CUT) and r.get("output_tail"):
                progress("      " + "\n      ".join(r["output_tail"].splitlines()[-8:]), flush=True)
            if after is not None:
                after(results)
    except Stopped as e:  # told to stop (run_section has killed what it ran): what is left is cut
        stopped = f"the check was stopped from outside ({e})"
        for sec in sections:
            if sec.name not in results:
                how = "while it ran: killed" if sec is running else "not started"
                results[sec.name] = {"verdict": CUT, "why": f"{stopped} {how}", "seconds": 0.0, "cap_s": sec.cap_s,
                                     "title": sec.title, "bench": sec.bench}
        progress(f"splitrpc check: {stopped}: the sections not finished are cut", flush=True)
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
    return {v: sum(1 for r in results.values() if r["verdict"] == v) for v in VERDICTS}
