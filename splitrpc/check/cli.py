"""cli.py: `splitrpc check [--bench] [--out DIR] [--only SECTION,...] [--budget-s S]`: the self-test a user runs after installing; exit 0 when no section failed (passed, skipped or cut), 1 naming those that did, 2 for bad arguments."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, cast

from splitrpc.check import report, runner
from splitrpc.check.section import FAILED, Context

if TYPE_CHECKING:
    from splitrpc.check.section import Section

DEFAULT_TESTS = "tests"  # the repository's tests, when the check runs from a checkout
ALWAYS = ("build", "machine")  # run with any --only: the report's device line and build facts
SOURCE_ENV = "SPLITRPC_CHECK_SOURCE"  # what was checked (a commit), for the report: bench/gpu/run.sh sets it


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("check", help="self-test: what was built, what the machine offers, and every path it can "
                                     "exercise (host, device Tensor Queues, O1/graph/O2), each passed/failed/skipped",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", action="store_true", help="also the trimmed benchmarks (seconds per cell): "
                                                        "O1/O1+CG/O2, device vs host callbacks, batching on the GPU")
    p.add_argument("--out", metavar="DIR", help="write summary.md, check.json and a few plots here")
    p.add_argument("--only", metavar="SECTION,...", help="run these sections only (e.g. the ones that failed), "
                                                        f"in the order given, after {' and '.join(ALWAYS)}")
    p.add_argument("--merge", metavar="CHECK.json", help="an earlier run's check.json: its other sections are kept, "
                                                        "the ones run now replace theirs (with --only)")
    p.add_argument("--device", default="cuda:0", help="the GPU to check (default: %(default)s)")
    p.add_argument("--tests", metavar="DIR", help=f"the repository's tests folder for the pytest sections "
                                                  f"(default: ./{DEFAULT_TESTS} when it holds test_gpu.py)")
    p.add_argument("--native", metavar="BUILD_DIR", help="a CMake build tree with the native test programs "
                                                         "(-DSPLITRPC_TESTS=ON): runs its test_gpu")
    p.add_argument("--bench-calls", type=int, default=Context.bench_calls, metavar="N",
                   help="recorded calls per benchmark run (default: %(default)s)")
    p.add_argument("--cap-s", type=float, metavar="S", help="every section's time cap, instead of its own")
    p.add_argument("--budget-s", type=float, metavar="S", help="the whole check's time: a section gets at most "
                                                               "what is left, and is cut when too little is")
    p.add_argument("--list", action="store_true", help="list the sections and exit")
    p.set_defaults(func=cmd_check)
    return p


def _select(a: argparse.Namespace, secs: list[Section]) -> list[Section]:
    """The sections to run, in their order; ValueError naming an unknown one."""
    if a.only:
        wanted = [n.strip() for n in a.only.split(",") if n.strip()]
        known = {s.name for s in secs}
        unknown = [n for n in wanted if n not in known]
        if unknown:
            raise ValueError(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(s.name for s in secs)}")
        by_name = {s.name: s for s in secs}
        first = [n for n in ALWAYS if n in known and n not in wanted]  # a rerun still says what it ran on
        return [by_name[n] for n in dict.fromkeys(first + wanted)]  # in the order given
    return [s for s in secs if a.bench or not s.bench]


def _bad_input(a: argparse.Namespace) -> str | None:
    from splitrpc import gpu

    try:
        gpu.parse_device(a.device)
    except ValueError as e:
        return str(e)
    if a.bench_calls < 1:
        return "--bench-calls must be at least 1"
    if a.cap_s is not None and a.cap_s <= 0:
        return "--cap-s must be positive"
    if a.budget_s is not None and a.budget_s <= 0:
        return "--budget-s must be positive"
    if a.merge and not os.path.isfile(a.merge):
        return f"--merge {a.merge}: no such file"
    if a.tests and not os.path.isdir(a.tests):
        return f"--tests {a.tests}: no such folder"
    return None


def _tests_dir(a: argparse.Namespace) -> str | None:
    """--tests, else ./tests when it is splitrpc's (a checkout's root is the working directory)."""
    if a.tests:
        return os.path.abspath(cast(str, a.tests))  # --tests: a str option
    probe = os.path.join(DEFAULT_TESTS, "test_gpu.py")
    try:
        with open(probe) as f:
            return os.path.abspath(DEFAULT_TESTS) if "import splitrpc" in f.read() else None
    except OSError:
        return None


def cmd_check(a: argparse.Namespace) -> int:
    bad = _bad_input(a)
    if bad:
        print(f"splitrpc check: {bad}", file=sys.stderr)
        return 2
    from splitrpc.check.registry import all_sections  # the sections' modules: only when the check runs

    secs, broken = all_sections()
    if a.list:
        for s in secs:
            print(f"{s.name:22s} {'(--bench) ' if s.bench else ''}{s.title} [cap {s.cap_s:g} s]")
        return 0
    try:
        chosen = _select(a, secs)
    except ValueError as e:
        print(f"splitrpc check: --only: {e}", file=sys.stderr)
        return 2
    from splitrpc import __version__

    ctx = Context(device=a.device, tests_dir=_tests_dir(a), native_dir=os.path.abspath(a.native) if a.native else None,
                  bench=a.bench, bench_calls=a.bench_calls)
    print(f"splitrpc {__version__} check: {len(chosen)} sections, each in its own process under a time cap", flush=True)
    t0 = time.monotonic()
    previous: dict[str, Any] | None = None
    if a.merge:
        with open(a.merge) as f:
            previous = json.load(f)
    host = report.machine_facts()
    the_plan = runner.plan(chosen, a.cap_s, a.budget_s)

    def document(results: dict[str, dict[str, Any]], pending: list[str]) -> dict[str, Any]:
        d: dict[str, Any] = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "command": "splitrpc check " + shlex.join(sys.argv[2:] if sys.argv[1:2] == ["check"] else sys.argv[1:]),
             "version": __version__, "host": host, "context": ctx.to_json(),
             "wall_s": round(time.monotonic() - t0, 1), "budget_s": a.budget_s, "plan": the_plan, "sections": results}
        if os.environ.get(SOURCE_ENV):  # bench/gpu/run.sh: the commit checked
            d["source"] = os.environ[SOURCE_ENV]
        if pending:  # written while the run goes on: what has not run yet
            d["unfinished"] = pending
        if previous is not None:
            d["sections"] = runner.merge(previous, results)
            d["merged_from"] = a.merge
        return d

    def progress_report(results: dict[str, dict[str, Any]]) -> None:
        if a.out:  # summary.md and check.json after each section: a run killed later still leaves them
            report.write(a.out, document(results, [s.name for s in chosen if s.name not in results]), plots=False)

    runner.install_stop_handlers()  # a TERM from outside still leaves a whole report
    results = runner.run(chosen, ctx, cap_s=a.cap_s, budget_s=a.budget_s, after=progress_report)
    runner.ignore_stop_signals()  # the report below is written whole
    for name, why in broken:  # a capability whose sections could not be had
        results[f"plugin-{name}"] = {"verdict": FAILED, "why": f"the capability {name!r} gave no check sections: {why}",
                                     "seconds": 0.0, "title": "a capability's check sections"}
    doc = document(results, [])
    print(report.device_line(doc["sections"]), flush=True)
    if a.out:
        paths = report.write(a.out, doc)
        print(f"wrote {', '.join(paths)}", flush=True)
    c = runner.counts(doc["sections"])
    failed = runner.failed_names(doc["sections"])
    print(f"splitrpc check: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped, {c['cut']} cut "
          f"in {doc['wall_s']:.0f} s", flush=True)
    if failed:
        print(f"splitrpc check: FAILED: {', '.join(failed)} (rerun: splitrpc check --only {','.join(failed)})",
              file=sys.stderr)
        return 1
    return 0
