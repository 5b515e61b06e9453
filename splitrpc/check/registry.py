"""registry.py: where the sections of `splitrpc check` come from: the check's own, in the order they run, and the plug-ins of the `splitrpc.check` entry point group.

A plug-in (a capability's device section, the trimmed benchmarks of splitrpc.bench) declares in
its package metadata

    [project.entry-points."splitrpc.check"]
    NAME = "package.module:SECTIONS"

where SECTIONS is a list of Section. The check names no plug-in: it runs whatever the group
holds, placed by each section's tier and stage (section.TIERS, section.STAGES), in the order of
each list.
"""
from __future__ import annotations

from splitrpc.check import auth, device, facts, suites
from splitrpc.check.section import STAGES, TIERS, Section

ENTRY_POINT_GROUP = "splitrpc.check"


def builtin_sections() -> list[Section]:
    """The check's own sections."""
    return [*facts.SECTIONS, *auth.SECTIONS, *device.SECTIONS, *suites.SECTIONS]


def plugin_sections() -> tuple[list[Section], list[tuple[str, str]]]:
    """The sections of the `splitrpc.check` entry points, and (entry point, error) for each one
    that could not be loaded (reported as a failed section by the runner)."""
    from importlib import metadata

    found, broken = [], []
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            secs = list(ep.load())
            if not all(isinstance(s, Section) for s in secs):
                raise TypeError(f"{ep.value} must be a list of splitrpc.check.Section")
            found += secs
        except Exception as e:  # noqa: BLE001 - a broken plug-in fails its own line, not the check
            broken.append((ep.name, f"{type(e).__name__}: {e}"))
    return found, broken


def all_sections() -> tuple[list[Section], list[tuple[str, str]]]:
    """Every section in the order it runs: by tier (the core path, then the capabilities'), then
    by stage, the check's own before the plug-ins' within one; duplicate names raise ValueError."""
    plugs, broken = plugin_sections()
    secs = sorted(builtin_sections() + plugs, key=lambda s: (TIERS.index(s.tier), STAGES.index(s.stage)))  # stable
    seen = set()
    for s in secs:
        if s.name in seen:
            raise ValueError(f"two check sections are named {s.name!r}")
        seen.add(s.name)
    return secs, broken


