"""registry.py: where the sections of `splitrpc check` come from: the check's own, in the order they run, and the capabilities' (each Capability's check_sections(), splitrpc/plugins.py).

The check names no capability: it runs whatever sections the capabilities bring, placed by each
section's tier and stage (section.TIERS, section.STAGES), then in the capabilities' order
(Capability.order, name) and each one's list.
"""
from __future__ import annotations

from splitrpc.check import auth, device, facts, suites
from splitrpc.check.section import STAGES, TIERS, Section

FORMER_GROUP = "splitrpc.check"  # the entry-point group sections came from until stop 68


def builtin_sections() -> list[Section]:
    """The check's own sections."""
    return [*facts.SECTIONS, *auth.SECTIONS, *device.SECTIONS, *suites.SECTIONS]


def plugin_sections() -> tuple[list[Section], list[tuple[str, str]]]:
    """The capabilities' sections, and (capability, error) for each one whose sections could not
    be had (reported as a failed section by the runner): a capability that fails to load, or
    whose check_sections() raises or gives something other than Sections, fails its own line,
    not the check."""
    from importlib import import_module, metadata

    from splitrpc.plugins import CapabilityError, capabilities

    found: list[Section] = []
    broken: list[tuple[str, str]] = []
    old = sorted(ep.name for ep in metadata.entry_points(group=FORMER_GROUP))
    if old:  # read until stop 68: said, not silently dropped
        broken.append((FORMER_GROUP, f"entry points {', '.join(old)} of the group {FORMER_GROUP!r} are no longer "
                                     "read: give the sections through the capability's check_sections()"))
    try:
        caps = capabilities()
    except CapabilityError as e:
        return found, [*broken, ("capabilities", str(e))]
    for cap in caps:
        try:
            secs = list(cap.check_sections())
            for s in secs:
                if not isinstance(s, Section):
                    raise TypeError(f"{type(cap).__name__}.check_sections() must give splitrpc.check.Section each")
                # the section's child process finds it by name in its module's SECTIONS
                if s.name not in {x.name for x in getattr(import_module(s.module), "SECTIONS", ())}:
                    raise LookupError(f"section {s.name!r} is not in {s.module}.SECTIONS, where the check's child "
                                      "process looks for it")
            found += secs
        except Exception as e:  # noqa: BLE001 - a broken plug-in fails its own line, not the check
            broken.append((cap.name, f"{type(e).__name__}: {e}"))
    return found, broken


def all_sections() -> tuple[list[Section], list[tuple[str, str]]]:
    """Every section in the order it runs: by tier (the core path, then the capabilities'), then
    by stage, the check's own before the capabilities' within one; duplicate names raise
    ValueError."""
    plugs, broken = plugin_sections()
    secs = sorted(builtin_sections() + plugs, key=lambda s: (TIERS.index(s.tier), STAGES.index(s.stage)))  # stable
    seen = set()
    for s in secs:
        if s.name in seen:
            raise ValueError(f"two check sections are named {s.name!r}")
        seen.add(s.name)
    return secs, broken


