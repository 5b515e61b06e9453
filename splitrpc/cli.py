"""cli.py: the `splitrpc` command: a dispatcher over the core's commands (serve, call, describe, stub, demo, gateway, keys, check), those of every capability plug-in (splitrpc.plugins), which it names none of, and `splitrpc bench SUITE` over the suites the capabilities bring; former command names run with a line saying the new one."""
from __future__ import annotations

import argparse
import logging
import sys

from splitrpc import __version__
from splitrpc.check import cli as check_cli
from splitrpc.commands import call, demo, describe, gateway, keys, serve, stub
from splitrpc.plugins import Capability, CapabilityError, capabilities

# modules with add_parser(sub, caps); check_cli.add_parser(sub) after them
CORE = (serve, call, describe, stub, demo, gateway, keys)


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


def renamed(args: list[str], caps: list[Capability]) -> list[str]:
    """args with a command's former name (Capability.renamed) replaced by its words now, and a
    line on stderr saying so; args as they are otherwise."""
    if not args:
        return args
    renames = {old: new for cap in caps for old, new in cap.renamed().items()}
    new = renames.get(args[0])
    if new is None:
        return args
    if new[0] == args[0] and (len(args) == 1 or not args[1].startswith("-") or args[1] in ("-h", "--help")):
        return args  # a group now: its old command only where an option (not help) follows
    print(f"splitrpc: `splitrpc {args[0]}` is now `splitrpc {' '.join(new)}`; the old name goes in the next "
          "release", file=sys.stderr)
    return [*new, *args[1:]]


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
    a = build_parser(caps).parse_args(renamed(args, caps))
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="%(name)s: %(message)s")
    try:
        rc: int = a.func(a)  # each command's cmd_* function
        return rc
    except CapabilityError as e:
        print(e, file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
