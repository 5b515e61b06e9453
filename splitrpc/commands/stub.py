"""stub.py: `splitrpc stub HOST:PORT | MODULE:ATTR`: writes a typed Python module for a service (stubgen.py), from a running server's describe or from a server module's Server without starting it."""
from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from splitrpc import describe as describe_
from splitrpc.client import Client, split_address
from splitrpc.client import CLIENT_DEFAULTS
from splitrpc.errors import SplitRPCError

if TYPE_CHECKING:
    from splitrpc.plugins import Capability


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               caps: list[Capability]) -> argparse.ArgumentParser:
    st = sub.add_parser("stub", help="write a typed Python module for a service: a method per function (docs/client.md)")
    st.add_argument("source", metavar="HOST:PORT|MODULE:ATTR",
                    help="a running server, or a server module's Server (or setup function) as `splitrpc serve` takes "
                         "it, read without starting it")
    st.add_argument("--module", default="splitrpc_stub", metavar="NAME",
                    help="the module's name: NAME.py in the current directory (default: %(default)s)")
    st.add_argument("--out", metavar="FILE", help="write to FILE instead (- for standard output)")
    st.add_argument("--class", dest="class_name", default="Service", metavar="NAME",
                    help="the stub class's name (default: %(default)s)")
    st.add_argument("--port", type=int, help=f"the server's UDP port for HOST alone (default: {CLIENT_DEFAULTS['port']})")
    st.add_argument("--timeout", type=float, default=2.0, help="seconds for describe (default: %(default)s)")
    st.add_argument("--key", metavar="FILE", help="a key file (or FILE:ID): the functions that key may call")
    st.set_defaults(func=cmd_stub)
    return st


def _is_address(source: str) -> bool:
    head, sep, tail = source.rpartition(":")
    return not sep or tail.isdigit() or source.startswith("[")


def _functions(a: argparse.Namespace) -> tuple[list[describe_.FunctionInfo], str, str | None]:
    """(the functions, the software that describes them, the server's digest or None);
    SplitRPCError, TargetError or NotDescribed."""
    from splitrpc import __version__

    if _is_address(a.source):
        host, port = split_address(a.source)
        with Client(host, port if port is not None else a.port, timeout=a.timeout, key=a.key) as c:
            d = c.describe()
        return list(d.functions), d.software, d.digest
    from splitrpc.run import load_target

    srv = load_target(a.source, {"host": "127.0.0.1", "port": 0})
    try:
        return srv.functions(), f"splitrpc {__version__}", None
    finally:
        srv.close()


def cmd_stub(a: argparse.Namespace) -> int:
    from splitrpc import stubgen
    from splitrpc.run import TargetError

    if not a.class_name.isidentifier() or not a.module.replace(".", "_").isidentifier():
        print("splitrpc stub: --module and --class must be Python identifiers", file=sys.stderr)
        return 2
    try:
        funcs, software, digest = _functions(a)
    except ValueError as e:
        print(f"splitrpc stub: {a.source!r} is not HOST:PORT or MODULE:ATTR ({e})", file=sys.stderr)
        return 2
    except (SplitRPCError, TargetError, describe_.NotDescribed) as e:
        print(f"splitrpc stub: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    text = stubgen.render(funcs, source=a.source, software=software, class_name=a.class_name, digest=digest)
    if a.out == "-":
        sys.stdout.write(text)
        return 0
    path = a.out or f"{a.module}.py"
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)  # whole or not at all: an IDE may be reading the old one
    print(f"wrote {path}: {len(funcs)} functions ({', '.join(repr(f.name) for f in funcs)}), description "
          f"{digest or describe_.digest(funcs)}")
    return 0
