"""plugins.py: capabilities as plug-ins of the core: the interface a capability implements (its subcommands, its benchmark suites under `splitrpc bench`, its sections of `splitrpc check`, its commands' former names, its `serve` options and functions, the functions a client may call by name, its banner and stop lines) and their discovery through the `splitrpc.capabilities` entry points, as pytest, Flask and the Ray CLI find theirs. The core names none of them.

A package adds a capability with one entry point (pyproject.toml):

    [project.entry-points."splitrpc.capabilities"]
    mine = "mypackage.splitrpc_plugin:CAPABILITY"

where CAPABILITY is a Capability (an instance). SPLITRPC_PLUGINS="module:attr,..." adds ones
that are not installed as a package (a test's, a script's), as pytest's PYTEST_PLUGINS does.
Every hook has a default that does nothing, so a capability overrides only what it has. A
capability's module is imported at every `splitrpc` start: it imports only the standard
library, numpy and splitrpc at module level, and what it needs beyond them when a hook runs.

Threads: everything here runs on the thread of the command (the CLI's main thread).
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from importlib import import_module, metadata
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

if TYPE_CHECKING:
    from splitrpc.server import Server

GROUP = "splitrpc.capabilities"  # the entry-point group
ENV = "SPLITRPC_PLUGINS"         # module:attr,... of capabilities that are not installed


class CapabilityError(Exception):
    """A capability cannot do what was asked (a missing extra, a bad option, a build that failed):
    the command prints the message, which says what to do, and exits with `code`."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


@dataclass
class Callee:
    """A function a client may call by name (`splitrpc call NAME`, `splitrpc load --service NAME`,
    `splitrpc demo`): its id, a valid request, and how its reply is checked and shown."""
    name: str
    func_id: int
    example: Callable[[np.random.Generator], bytes] | None = None  # a valid request
    expected: Callable[[bytes], bytes] | None = None  # the exact reply, where there is one
    check: Callable[[bytes, bytes], bool] | None = None  # the reply within tolerance (else: == expected)
    check_label: str = "reply matches the expected output:"
    summary: Callable[[bytes, bytes, float], str] | None = None  # one line for a call (request, reply, us)
    show: Callable[[bytes], list[str]] | None = None  # the reply as lines of text (else: bytes or text)
    strict: bool = False  # `splitrpc call` exits 1 when the reply does not check
    demo_share: float = 0.0  # > 0: `splitrpc demo` loads it with this share of --calls (set it where
    #                          callee(checked=False) answers: the demo asks so)

    def verdict(self, request: bytes, reply: bytes) -> bool | None:
        """Whether reply is right for request (None: this callee cannot tell); ImportError where
        the check needs a package that is missing."""
        if self.check is not None:
            return bool(self.check(request, reply))
        if self.expected is not None:
            return reply == self.expected(request)
        return None


class Serving:
    """What a capability serving on a Server hands back to `splitrpc serve`: the functions it
    registered ("name(id)" each, for the start line), a banner for the start line, lines to print
    once the server stopped, and close() for what it holds beyond the Server."""

    def __init__(self, served: list[str] | None = None, banner: str = ""):
        self.served = list(served or [])
        self.banner = banner

    def close(self) -> None:
        """After the server closed (and on a failed start): frees what the capability holds."""

    def stop_lines(self, args: argparse.Namespace) -> list[str]:
        """Printed after close(): what the capability did while it served."""
        return []


class Capability:
    """Base class of a capability plug-in. `name` is unique; `order` places its subcommands,
    options and functions among the others' (lower first)."""
    name = ""
    order = 100
    models_help = ""  # how `serve --models` names what it serves, for --help ("" when nothing)

    def add_commands(self, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        """Adds its subcommands to the `splitrpc` subparsers (each sets func=handler(args) -> int)."""

    def add_bench_suites(self, suites: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        """Adds its benchmark suites under `splitrpc bench` (`splitrpc bench SUITE`), each with
        suites.add_parser(SUITE, help=...) and func=handler(args) -> int, as add_commands."""

    def check_sections(self) -> list[Any]:
        """Its sections of `splitrpc check` (splitrpc.check.Section each), placed by each one's tier
        and stage; asked only when the check runs, so their modules are imported here, not at
        module level. Each section must also be in a list SECTIONS at the top level of its run
        function's module: the check runs it in a child process, which finds it there by name."""
        return []

    def renamed(self) -> dict[str, tuple[str, ...]]:
        """Its commands' former names, kept for one release: {old: the words now}. `splitrpc OLD
        ARGS` runs `splitrpc NEW... ARGS` after a line on stderr saying so. An old name that is
        a command group now (`bench`) is taken as the old command only where an option other
        than -h follows it (`splitrpc bench --rounds 1`; not `splitrpc bench gnn`, nor `splitrpc
        bench` alone, which lists the group's commands)."""
        return {}

    def add_serve_options(self, parser: argparse.ArgumentParser) -> None:
        """Adds its options to `splitrpc serve` (forwarded to each process of --processes)."""

    def check_serve_args(self, args: argparse.Namespace) -> None:
        """Raises CapabilityError for `serve` options it cannot honour together."""

    def claims(self, name: str) -> bool:
        """Whether `serve --models NAME` is one of its functions."""
        return False

    def serve(self, server: Server, names: list[str], args: argparse.Namespace) -> Serving | None:
        """Registers its functions on server: names are the --models names it claimed (empty when
        none); a capability that serves by default registers those anyway. None: nothing served.
        Raises CapabilityError with the message for the user."""
        return None

    def callee_names(self) -> tuple[str, ...]:
        """The names callee() knows, for messages and --help."""
        return ()

    def stage_args(self, name: str, first: int, second: int) -> list[str] | None:
        """`serve` options that run the model `name` it claims as a two-stage pipeline, `first`
        threads for its first stage and `second` for its second (a recommendation model's
        sparse and dense parts, for `splitrpc plan tune --schedules sd`); None: it has no stages."""
        return None

    def callee(self, name: str, args: argparse.Namespace, checked: bool = True) -> Callee | None:
        """The function `name` (None: not one of its own). checked=False: the request comes from the
        user (--file, --text) and only func_id is needed, so nothing heavy need be built."""
        return None


def _load(spec: str, where: str, entry_point: metadata.EntryPoint | None = None) -> Capability:
    mod, _, attr = spec.strip().partition(":")
    if entry_point is None and (not mod or not attr):
        raise CapabilityError(f"{where}: {spec!r} is not module:attr")
    try:
        cap = entry_point.load() if entry_point is not None else getattr(import_module(mod), attr)
    except Exception as e:  # a module that fails to import, for whatever reason: one line, not a traceback
        raise CapabilityError(f"{where}: cannot load the capability {spec!r}: {type(e).__name__}: {e}") from e
    if not isinstance(cap, Capability) or not cap.name:
        raise CapabilityError(f"{where}: {spec!r} is not a splitrpc.plugins.Capability with a name")
    return cap


def capabilities() -> list[Capability]:
    """Every capability, installed (the entry points) and named in SPLITRPC_PLUGINS, by order then
    name; CapabilityError for one that cannot be loaded or a name given twice."""
    found = [_load(ep.value, f"entry point {ep.name}", ep) for ep in metadata.entry_points(group=GROUP)]
    found += [_load(s, ENV) for s in os.environ.get(ENV, "").split(",") if s.strip()]
    seen: dict[str, Capability] = {}
    for cap in found:
        if cap.name in seen and seen[cap.name] is not cap:
            raise CapabilityError(f"two capabilities are named {cap.name!r}")
        seen[cap.name] = cap
    return sorted(seen.values(), key=lambda c: (c.order, c.name))


def find_callee(caps: Iterable[Capability], name: str, args: argparse.Namespace, checked: bool = True) -> Callee | None:
    """The first capability's callee of that name, or None."""
    for cap in caps:
        c = cap.callee(name, args, checked)
        if c is not None:
            return c
    return None
