"""section.py: what a section of `splitrpc check` is (a name, a time cap, a function that passes, fails or skips), what it gets (Context) and what it gives (Result); registry.py says where sections come from."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
# The order sections run in, by stage (within one: the check's own first, then the plug-ins'):
# facts, the host path, the device paths, the test suites, and the benchmarks (--bench only).
STAGES = ("facts", "host", "device", "suites", "bench")
_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")


class Skipped(Exception):
    """Raised by a section that cannot run here; the message says why (no GPU, no CuPy, ...)."""


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
    reason) or raises anything else (failed, with the error). It runs in a child process of its
    own, killed after cap_s seconds (failed: timed out), so a hang or a crash in a driver ends
    that section alone."""
    name: str                          # lower-case, digits and '-': what --only takes
    title: str                         # what it exercises, one line
    run: Callable[[Context], Result]  # a module-level function of a module whose SECTIONS lists this section
    cap_s: float = 60.0
    stage: str = "device"              # where it runs among the others (STAGES); "bench": only with --bench

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"check section name {self.name!r}: lower-case letters, digits and '-', 40 at most")
        if self.stage not in STAGES:
            raise ValueError(f"check section {self.name!r}: stage {self.stage!r} is not one of {STAGES}")

    @property
    def bench(self) -> bool:
        return self.stage == "bench"

    @property
    def module(self) -> str:
        """The module that declares it: its run function's, whose SECTIONS list must hold it (the
        child process finds it there)."""
        return self.run.__module__
