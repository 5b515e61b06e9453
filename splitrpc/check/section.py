"""section.py: what a section of `splitrpc check` is (a name, a time cap, a function that passes, fails or skips), what it gets (Context) and gives (Result), and where sections come from: the built-in ones and the plug-ins of the `splitrpc.check` entry point group.

A plug-in (a capability's device section, the trimmed benchmarks of splitrpc.bench) declares in
its package metadata

    [project.entry-points."splitrpc.check"]
    NAME = "package.module:SECTIONS"

where SECTIONS is a list of Section. The check names no plug-in: it runs whatever the group
holds, after its own sections, in the order of each list.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Callable

ENTRY_POINT_GROUP = "splitrpc.check"
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")


class Skipped(Exception):
    """Raised by a section that cannot run here; the message says why (no GPU, no CuPy, ...)."""


class Failed(Exception):
    """Raised by a section whose check did not hold; the message says what was wrong."""


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

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Context":
        return cls(**d)


@dataclass
class Result:
    """What a section that passed reports: one line for the verdict table, facts for check.json,
    markdown for summary.md, and plots (grouped bars: {"name", "title", "ylabel",
    "categories": [...], "series": {label: [value per category]}, "log": bool})."""
    summary: str = ""
    facts: dict = field(default_factory=dict)
    markdown: list = field(default_factory=list)
    plots: list = field(default_factory=list)


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
    bench: bool = False                # runs only with --bench

    def __post_init__(self):
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"check section name {self.name!r}: lower-case letters, digits and '-', 40 at most")

    @property
    def module(self) -> str:
        """The module that declares it: its run function's, whose SECTIONS list must hold it (the
        child process finds it there)."""
        return self.run.__module__


def builtin_sections() -> list[Section]:
    """The check's own sections, in the order they run."""
    from splitrpc.check import device, facts, host, suites

    return [*facts.SECTIONS, *host.SECTIONS, *device.SECTIONS, *suites.SECTIONS]


def plugin_sections() -> tuple[list[Section], list[tuple[str, str]]]:
    """The sections of the `splitrpc.check` entry points, and (entry point, error) for each one
    that could not be loaded (reported as a failed section by the runner)."""
    from importlib.metadata import entry_points

    found, broken = [], []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            secs = list(ep.load())
            if not all(isinstance(s, Section) for s in secs):
                raise TypeError(f"{ep.value} must be a list of splitrpc.check.Section")
            found += secs
        except Exception as e:  # noqa: BLE001 - a broken plug-in fails its own line, not the check
            broken.append((ep.name, f"{type(e).__name__}: {e}"))
    return found, broken


def all_sections() -> tuple[list[Section], list[tuple[str, str]]]:
    """Built-in sections, then plug-ins (the benchmarks last); duplicate names raise ValueError."""
    plugs, broken = plugin_sections()
    secs = builtin_sections() + [s for s in plugs if not s.bench] + [s for s in plugs if s.bench]
    seen = set()
    for s in secs:
        if s.name in seen:
            raise ValueError(f"two check sections are named {s.name!r}")
        seen.add(s.name)
    return secs, broken


