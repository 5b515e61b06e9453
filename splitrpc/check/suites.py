"""suites.py: the test-suite sections of `splitrpc check`: the repository's GPU tests (tests/test_gpu.py) run by pytest against the installed package (run_test_file, which a capability's section uses for its own test file), and the native test programs with a GPU half (test_gpu, test_embed_gpu) of a build tree."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from splitrpc.check.probes import EMULATED_LABEL, driver_emulated, need_cupy, need_gpu
from splitrpc.check.section import BUDGET_NOTE, Context, Cut, Failed, Result, Section, Skipped

MARGIN_S = 10.0  # an inner timeout ends this long before the section's cap, so the section can still say why
MIN_RUN_S = 5.0  # a test program is not started with less than this left of the cap (cut instead)
_GPU_SKIP = re.compile(r"needs a CUDA GPU|no CUDA device", re.I)


def _tests_dir(ctx: Context, wanted: str) -> str:
    """The tests folder holding `wanted`; Skipped when the repository's tests are not here."""
    d = ctx.tests_dir
    if d is None:
        raise Skipped("the repository's tests are not here: run from a checkout (./tests) or pass --tests DIR")
    if not os.path.isfile(os.path.join(d, wanted)):
        raise Skipped(f"{wanted} is not in {d}")
    return os.path.abspath(d)


def _counts(out: str) -> dict[str, int]:
    """pytest's closing counts: {"passed": n, "failed": n, "skipped": n, "error": n, ...}."""
    tail = next((ln for ln in reversed(out.splitlines()) if re.search(r"\d+ (passed|failed|skipped|error)", ln)), "")
    return {k.rstrip("s"): int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", tail)}


def _skip_reasons(out: str) -> list[str]:
    return [ln.split(": ", 1)[-1].strip() for ln in out.splitlines() if ln.startswith("SKIPPED")]


def _label() -> str:
    return f"{EMULATED_LABEL}: " if driver_emulated() else ""


def _inner_timeout(ctx: Context, what: str, share: int = 1) -> float:
    """What the test program may take: its share of the cap's time left less MARGIN_S; under
    MIN_RUN_S, Cut when the budget shortened the cap, else Failed (the cap is too small)."""
    t = (min(ctx.cap_s, ctx.left()) - MARGIN_S) / share
    if t < MIN_RUN_S:
        why = (f"{max(min(ctx.cap_s, ctx.left()), 0):.0f} s of its cap left"
               f"{BUDGET_NOTE if ctx.budget_limited else ''}: too little to run {what}")
        raise Cut(why) if ctx.budget_limited else Failed(why)
    return t


def _ran_out(ctx: Context, what: str) -> type[Exception]:
    """The verdict of a test program stopped at its time, having shown no failure: cut where the
    budget shortened the cap, else failed (its own cap is sized with room: it hung)."""
    return Cut if ctx.budget_limited else Failed


def _out_of(e: subprocess.TimeoutExpired) -> str:
    out = e.stdout or b""
    return out.decode(errors="replace") if isinstance(out, bytes) else out


def _pytest(ctx: Context, tests: str, args: list[str]) -> tuple[int, str]:
    """pytest over the installed package, from the repository root (its conftest.py takes the
    source folder off the path); (exit status, output). Its output is echoed, so that a failed
    section's report keeps its end."""
    root = os.path.dirname(tests)
    # -rfEs: the short summary names failures, errors and skips (-r replaces pyproject's -ra)
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", *args]
    timeout = _inner_timeout(ctx, "pytest")
    try:
        r = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:  # its time ran out: how far it got, and whether anything failed
        out = _out_of(e)
        print(out[-6000:])
        marks = "".join(ln.split("[")[0].strip() for ln in out.splitlines()
                        if ln and set(ln.split("[")[0].strip()) <= set(".sFEx"))
        so_far = (f"{marks.count('.')} passed, {marks.count('F')} failed, {marks.count('E')} errors so far; "
                  f"last lines: {out.strip()[-400:]}")
        if "F" in marks or "E" in marks:  # a failure already shown is a failure, however the time ran out
            raise Failed(f"pytest had not finished after {timeout:.0f} s and had failures: {so_far}") from None
        raise _ran_out(ctx, "pytest")(f"pytest had not finished after {timeout:.0f} s (its cap less "
                                      f"{MARGIN_S:g} s): {so_far}") from None
    out = r.stdout + r.stderr
    print(out[-6000:])
    return r.returncode, out


def _verdict(rc: int, out: str, what: str, gpu_skips_fail: bool) -> Result:
    n = _counts(out)
    failures = [ln for ln in out.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    if rc != 0 or n.get("failed") or n.get("error"):
        raise Failed(f"{what}: pytest exit {rc}, {n}; " + ("; ".join(failures[:5]) or out.strip()[-800:]))
    reasons = _skip_reasons(out)
    gpu_skipped = [r for r in reasons if _GPU_SKIP.search(r)]
    if gpu_skips_fail and gpu_skipped:
        raise Failed(f"{what}: {len(gpu_skipped)} GPU test(s) skipped on a machine with a usable GPU: {gpu_skipped[0]}")
    if not n.get("passed"):
        raise Skipped(f"{what}: no test ran ({n}; {reasons[0] if reasons else 'no reason given'})")
    summary = f"{_label()}{what}: {n.get('passed', 0)} passed" + (f", {n['skipped']} skipped" if n.get("skipped") else "")
    return Result(summary=summary, facts={"counts": n, "skip_reasons": reasons},
                  markdown=[f"- {summary}" + (f" ({'; '.join(sorted(set(reasons)))})" if reasons else "")])


def run_test_file(ctx: Context, file: str, args: tuple[str, ...] = (), what: str = "") -> Result:
    """tests/FILE of the repository (with pytest's ARGS) by pytest against the installed package:
    the verdict of a section that runs a test file, the check's or a capability's (a GPU test
    skipped on a machine with a usable GPU fails it); Skipped where the repository's tests are not
    here."""
    tests = _tests_dir(ctx, file)
    rc, out = _pytest(ctx, tests, [os.path.join(tests, file), *args])
    return _verdict(rc, out, what or f"tests/{file}", gpu_skips_fail=True)


def run_tests_gpu(ctx: Context) -> Result:
    need_gpu(ctx.device)
    need_cupy()
    return run_test_file(ctx, "test_gpu.py")


NATIVE_PROGRAMS = ("test_gpu", "test_embed_gpu")  # the native test programs with a GPU half


def _run_native_program(ctx: Context, name: str, timeout: float) -> tuple[str, str, int]:
    """(its last line, its GPU line, checks passed); Failed unless it ran, within timeout seconds,
    and nothing failed."""
    exe = os.path.join(ctx.native_dir or "", name)
    try:
        r = subprocess.run([exe], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = _out_of(e)
        fails = [ln for ln in out.splitlines() if "FAIL" in ln]
        why = f"{name} had not finished after {timeout:.0f} s (its share of the cap); last lines: {out.strip()[-600:]}"
        raise (Failed if fails else _ran_out(ctx, name))(why) from None
    print((r.stdout + r.stderr)[-6000:])
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    m = re.fullmatch(r"(\d+) passed, (\d+) failed", last)
    fails = [ln for ln in (r.stdout + r.stderr).splitlines() if "FAIL" in ln]
    if r.returncode != 0 or not m or int(m.group(2)):
        why = "; ".join(fails[:5]) or (r.stdout + r.stderr).strip()[-800:]
        raise Failed(f"native {name}: exit {r.returncode}, {last or 'no count'}: {why}")
    gpu_line = next((ln for ln in lines if ln.startswith(("GPU 0:", "no GPU:", "no GPU cache here", "EMULATED driver",
                                                          "a CUDA driver"))), "")
    return last, gpu_line, int(m.group(1))


def run_native(ctx: Context) -> Result:
    if not ctx.native_dir:
        raise Skipped("no build tree given: --native BUILD_DIR (cmake -DSPLITRPC_TESTS=ON)")
    missing = [n for n in NATIVE_PROGRAMS if not os.access(os.path.join(ctx.native_dir, n), os.X_OK)]
    if len(missing) == len(NATIVE_PROGRAMS):
        raise Skipped(f"{', '.join(missing)} not built in {ctx.native_dir} "
                      f"(cmake --build BUILD_DIR --target {' '.join(NATIVE_PROGRAMS)})")
    present = [n for n in NATIVE_PROGRAMS if n not in missing]
    each = _inner_timeout(ctx, "the native programs", len(present))  # their shares, fixed before the first runs
    got = {n: _run_native_program(ctx, n, each) for n in present}
    gpu_line = got.get("test_gpu", ("", "", 0))[1]
    label = f"{EMULATED_LABEL}: " if "fake GPU" in gpu_line or "EMULATED" in "".join(g[1] for g in got.values()) else ""
    runs = "; ".join(f"{n} {last}" + (f" ({line})" if line else "") for n, (last, line, _) in got.items())
    if missing:
        runs += f"; not built: {', '.join(missing)}"
    return Result(summary=f"{label}native {runs}",
                  facts={n: {"passed": p, "last": last, "line": line} for n, (last, line, p) in got.items()},
                  markdown=[f"- {label}native programs of {ctx.native_dir}: {runs}"])


SECTIONS = [
    Section("tests-gpu", "tests/test_gpu.py (O1, graph, O2 many batches in flight; a callback's error) by pytest",
            run_tests_gpu, cap_s=50, stage="suites", tier="core"),
    Section("native", "the native test_gpu and test_embed_gpu programs of a build tree (device TQs, copies, flags, O2, "
            "the embedding cache's kernels against the host cache, in C)",
            run_native, cap_s=30, stage="native", tier="core"),
]
