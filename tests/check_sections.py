"""check_sections.py: sections of `splitrpc check` that pass, fail, skip, raise, crash, hang or are cut on purpose, for tests/test_check.py's runner tests (the child process finds them here, in SECTIONS)."""
import os
import signal
import threading
import time

from splitrpc.check import Cut, Failed, Result, Section, Skipped, done
from splitrpc.check.section import failing


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


def notes_progress_then_hangs(ctx):
    done("cell a")
    done("cell b")
    time.sleep(600)


def notes_failing_then_hangs(ctx):
    failing("the reply was wrong")  # as loopback_server does before a stop that may hang
    time.sleep(600)


def cuts_itself(ctx):
    raise Cut("too little time for cell c", result=Result(summary="2 cells", facts={"cells": 2}))


SECTIONS = [Section("t-pass", "passes", passes), Section("t-fail", "fails", fails), Section("t-skip", "skips", skips),
            Section("t-partial", "fails, keeping its table", fails_with_what_it_measured),
            Section("t-raise", "raises KeyError", raises), Section("t-crash", "segfaults", crashes),
            Section("t-hang", "sleeps", hangs), Section("t-exit-hang", "passes, then does not exit", finishes_then_hangs),
            Section("t-progress-hang", "notes two cells done, then sleeps", notes_progress_then_hangs),
            Section("t-failing-hang", "notes the error it fails with, then its teardown sleeps", notes_failing_then_hangs),
            Section("t-cut", "stops early, keeping what it finished", cuts_itself)]
