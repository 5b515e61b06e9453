"""cli.py: the `splitrpc` command: a dispatcher over the core's commands (serve, call, describe, stub, demo, gateway, keys, check) and those of every capability plug-in (splitrpc.plugins), which it names none of."""
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
    sub = p.add_subparsers(dest="cmd", required=True)
    for mod in CORE:
        mod.add_parser(sub, caps)
    check_cli.add_parser(sub)
    for cap in caps:
        cap.add_commands(sub)
    return p


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
    a = build_parser(caps).parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="%(name)s: %(message)s")
    try:
        rc: int = a.func(a)  # each command's cmd_* function
        return rc
    except CapabilityError as e:
        print(e, file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
