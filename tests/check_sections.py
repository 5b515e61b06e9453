"""check_sections.py: sections of `splitrpc check` that pass, fail, skip, raise, crash or hang on purpose, for tests/test_check.py's runner tests (the child process finds them here, in SECTIONS)."""
import os
import signal
import threading
import time

from splitrpc.check import Failed, Result, Section, Skipped


def passes(ctx):
    return Result(summary=f"fine on {ctx.device}", facts={"seed": ctx.seed}, markdown=["- it passed"])


def fails(ctx):
    raise Failed("the reply was wrong")


def fails_with_what_it_measured(ctx):
    raise Failed("one cell broke", result=Result(summary="2 of 3 cells", markdown=["| a | 1.0 |"], facts={"rows": 2}))


def skips(ctx):
    raise Skipped("no such hardware here")


def raises(ctx):
    print("some output before the error")
    return {}["missing"]


def crashes(ctx):
    os.kill(os.getpid(), signal.SIGSEGV)


def hangs(ctx):
    time.sleep(600)


def finishes_then_hangs(ctx):
    threading.Thread(target=time.sleep, args=(600,)).start()  # not a daemon: the interpreter waits at exit
    return Result(summary="done")


SECTIONS = [Section("t-pass", "passes", passes), Section("t-fail", "fails", fails), Section("t-skip", "skips", skips),
            Section("t-partial", "fails, keeping its table", fails_with_what_it_measured),
            Section("t-raise", "raises KeyError", raises), Section("t-crash", "segfaults", crashes),
            Section("t-hang", "sleeps", hangs), Section("t-exit-hang", "passes, then does not exit", finishes_then_hangs)]
