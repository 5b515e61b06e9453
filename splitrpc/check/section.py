"""section.py: what a section of `splitrpc check` is (a name, a time cap, a function that passes, fails, skips or is cut), what it gets (Context) and what it gives (Result); registry.py says where sections come from."""
from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

# The verdicts. passed: every check held; failed: one did not (the reason), or it ran past its own
# cap (sized with room: a hang that no deadline of its own caught); skipped: it cannot run here (the
# reason); cut: the check's budget left it less than its cap and that ran out first, with what it
# finished and what not. Only failed makes the check's exit non-zero.
PASSED, FAILED, SKIPPED, CUT = "passed", "failed", "skipped", "cut"
VERDICTS = (PASSED, FAILED, SKIPPED, CUT)
# The order sections run in: by tier (the core path first, then the capabilities' sections), then
# by stage, then the check's own before the plug-ins', each list in its order. Stages: facts, the
# native programs, the device paths, the test suites, the benchmarks (--bench only), the host path
# (no GPU in it: last of the core, which matters where the GPU's minutes are few).
TIERS = ("core", "capability")
STAGES = ("facts", "native", "device", "suites", "bench", "host")
_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")
# What a section cut by the budget adds to its reason
BUDGET_NOTE = " (what the check's budget left it)"
# The file a section's child appends its progress notes to (done()); set by the runner.
PROGRESS_ENV = "SPLITRPC_CHECK_PROGRESS"


class Skipped(Exception):
    """Raised by a section that cannot run here; the message says why (no GPU, no CuPy, ...)."""


class Cut(Exception):
    """Raised by a section that stops because its time is nearly up (Context.left()), when the
    budget shortened it (Context.budget_limited) or by design (a search that measures what its cap
    allows): the message says what it did not get to; `result` keeps what it finished."""

    def __init__(self, why: str, result: "Result | None" = None):
        super().__init__(why)
        self.result = result


def done(what: str) -> None:
    """Notes a finished part of the running section (a benchmark cell, a model, a test file): a
    section cut at its cap says what it had finished. A line appended to the runner's progress
    file; nothing outside `splitrpc check`. Any thread of the section's process."""
    _note(what)


FAILING = "!failing: "  # a progress line that records the error a section is failing with


def failing(why: str) -> None:
    """Records the error the running section is failing with, before it tears down what it started
    (a server, a kernel): if the teardown then hangs and the section is killed at its cap, its
    verdict is failed with this reason, not cut."""
    _note(FAILING + why)


def _note(line: str) -> None:
    path = os.environ.get(PROGRESS_ENV)
    if not path:
        return
    with open(path, "a") as f:
        f.write(line.replace("\n", " ") + "\n")


class Failed(Exception):
    """Raised by a section whose check did not hold; the message says what was wrong. `result`
    keeps what the section measured before it failed (a benchmark table with one bad cell), so
    that the report still shows it."""

    def __init__(self, why: str, result: "Result | None" = None):
        super().__init__(why)
        self.result = result


def expect(cond: bool, what: str) -> None:
    """Raises Failed(what) unless cond holds."""
    if not cond:
        raise Failed(what)


@dataclass
class Context:
    """What every section gets, the same in each child process (it travels as JSON)."""
    device: str = "cuda:0"           # the GPU the device sections use
    tests_dir: str | None = None     # the repository's tests/ (pytest sections), None: not here
    native_dir: str | None = None    # a build tree with the native test programs (-DSPLITRPC_TESTS=ON)
    bench: bool = False              # --bench: the trimmed benchmarks run too
    bench_calls: int = 2000          # recorded calls per benchmark run
    seed: int = 1
    cap_s: float = 60.0              # this section's time cap (set in the child): inner timeouts stay inside it
    deadline: float = 0.0            # time.monotonic() at which the cap ends (set in the child; 0: none)
    budget_limited: bool = False     # the cap is what the check's budget left, less than the section's own:
                                     # running out of it is a cut; running out of its own cap is a failure

    def left(self) -> float:
        """Seconds before this section's cap ends (inf when none is set): a section with parts
        stops starting new ones when too little is left, and raises Cut with what it finished."""
        return self.deadline - time.monotonic() if self.deadline else float("inf")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Context":
        return cls(**d)


@dataclass
class Result:
    """What a section that passed reports: one line for the verdict table, facts for check.json,
    markdown for summary.md, and plots (grouped bars: {"name", "title", "ylabel",
    "categories": [...], "series": {label: [value per category]}, "log": bool})."""
    summary: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
    markdown: list[str] = field(default_factory=list)
    plots: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Section:
    """One part of the check. run(ctx) returns a Result (passed), raises Skipped (with the
    reason), raises Cut (its time nearly up, with what it finished) or raises anything else
    (failed, with the error). It runs in a child process of its own, killed once its cap has
    passed (failed, or cut where the budget shortened the cap; with what it noted done()), so a
    hang or a crash in a driver ends that section alone; a wait that can hang must have a
    deadline of its own that fails it, saying what it waited for."""
    name: str                          # lower-case, digits and '-': what --only takes
    title: str                         # what it exercises, one line
    run: Callable[[Context], Result]  # a module-level function of a module whose SECTIONS lists this section
    cap_s: float = 60.0                # sized to what it needs on a GPU, with room: the plan adds them up
    stage: str = "device"              # where it runs among the others (STAGES); "bench": only with --bench
    tier: str = "capability"           # "core": the SplitRPC path itself, run before every capability's

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"check section name {self.name!r}: lower-case letters, digits and '-', 40 at most")
        if self.stage not in STAGES:
            raise ValueError(f"check section {self.name!r}: stage {self.stage!r} is not one of {STAGES}")
        if self.tier not in TIERS:
            raise ValueError(f"check section {self.name!r}: tier {self.tier!r} is not one of {TIERS}")

    @property
    def bench(self) -> bool:
        return self.stage == "bench"

    @property
    def module(self) -> str:
        """The module that declares it: its run function's, whose SECTIONS list must hold it (the
        child process finds it there)."""
        return self.run.__module__
