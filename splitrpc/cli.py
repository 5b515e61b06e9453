"""cli.py: the `splitrpc` command: a dispatcher over the core's commands (serve, call, describe, stub, demo, gateway, keys, top, check), those of every capability plug-in (splitrpc.plugins), which it names none of, and `splitrpc bench SUITE` over the suites the capabilities bring; former command names run with a line saying the new one."""
from __future__ import annotations

import argparse
import logging
import shlex
import sys
from typing import Iterable

from splitrpc import __version__
from splitrpc.check import cli as check_cli
from splitrpc.commands import call, demo, describe, gateway, keys, serve, stub, top
from splitrpc.plugins import Capability, CapabilityError, capabilities

# modules with add_parser(sub, caps); check_cli.add_parser(sub) after them
CORE = (serve, call, describe, stub, demo, gateway, keys, top)


def build_parser(caps: list[Capability] | None = None) -> argparse.ArgumentParser:
    """The whole command line: the core's commands, then each capability's, in their order."""
    caps = capabilities() if caps is None else caps
    p = argparse.ArgumentParser(prog="splitrpc", description="splitrpc: low-latency RPC for ML inference",
                                epilog="splitrpc --cflags --libs: the flags to build a C program against the installed C client "
                                       "(python -m splitrpc.config; examples/c_client.c)")
    p.add_argument("--version", action="version", version=f"splitrpc {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log what the server does")
    p.set_defaults(capabilities=caps)  # what the commands hand their work to
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for mod in CORE:
        mod.add_parser(sub, caps)
    check_cli.add_parser(sub)
    for cap in caps:
        cap.add_commands(sub)
    b = sub.add_parser("bench", help="benchmark suites: splitrpc bench SUITE (splitrpc bench -h lists them)",
                       description="Each capability's benchmark suites; splitrpc bench SUITE -h for one's options.")
    b.set_defaults(func=lambda _a: _help(b))  # `splitrpc bench` alone: the suites
    suites = b.add_subparsers(dest="suite", metavar="SUITE")
    for cap in caps:
        cap.add_bench_suites(suites)
    return p


def _help(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


TOP_OPTIONS = ("-v", "--verbose")  # the options of `splitrpc` itself that may come before a command


def former_names(caps: list[Capability], commands: Iterable[str] = ()) -> dict[str, tuple[str, ...]]:
    """Every capability's former command names (Capability.renamed): {old: the words now}.
    CapabilityError where two claim one; an old name that is a command now is left to it, unless
    it became that command's group (`bench`)."""
    out: dict[str, tuple[str, ...]] = {}
    live = set(commands)
    for cap in caps:
        for old, new in cap.renamed().items():
            if old in out and out[old] != tuple(new):
                raise CapabilityError(f"two capabilities give the former command name {old!r} new words: "
                                      f"{' '.join(out[old])!r} and {' '.join(new)!r}")
            if old not in live or new[0] == old:
                out[old] = tuple(new)
    return out


def renamed(args: list[str], renames: dict[str, tuple[str, ...]]) -> list[str]:
    """args with a command's former name replaced by its words now (after `splitrpc`'s own
    options), and a line on stderr saying so; args as they are otherwise."""
    i = 0
    while i < len(args) and args[i] in TOP_OPTIONS:
        i += 1
    new = renames.get(args[i]) if i < len(args) else None
    if new is None:
        return args
    old, rest = args[i], args[i + 1:]
    if new[0] == old and (not rest or not rest[0].startswith("-") or rest[0] in ("-h", "--help")):
        if not rest:  # a group now, given alone: it lists its commands, and says where the old one went
            print(f"splitrpc: what `splitrpc {old}` ran is now `splitrpc {' '.join(new)}`; `splitrpc {old}` "
                  "alone lists its commands", file=sys.stderr)
        return args  # a group now: its old command only where an option (not help) follows
    print(f"splitrpc: `splitrpc {old}` is now `splitrpc {' '.join(new)}`; the old name goes in the next "
          "release", file=sys.stderr)
    return [*args[:i], *new, *rest]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    from splitrpc import config

    if args and args[0] in config.OPTIONS:  # `splitrpc --cflags --libs`: the C client's build flags
        return config.main(args)
    try:
        caps = capabilities()
    except CapabilityError as e:
        print(f"splitrpc: {e}", file=sys.stderr)
        return e.code
    parser = build_parser(caps)
    commands = next(x.choices for x in parser._actions if isinstance(x, argparse._SubParsersAction))
    try:
        now = renamed(list(args), former_names(caps, commands))
    except CapabilityError as e:
        print(f"splitrpc: {e}", file=sys.stderr)
        return e.code
    a = parser.parse_args(now)
    if now != list(args):  # what a report quotes: the command as it is now (reporting.command_of)
        a.command = "splitrpc " + shlex.join(now)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="%(name)s: %(message)s")
    try:
        rc: int = a.func(a)  # each command's cmd_* function
        return rc
    except CapabilityError as e:
        print(e, file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
