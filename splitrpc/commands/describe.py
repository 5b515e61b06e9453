"""describe.py: `splitrpc describe HOST:PORT`: what a server serves (docs/PROTOCOL.md, Amendment 1): its functions, their specs and settings, as a table or JSON."""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Iterable

from splitrpc import describe as describe_
from splitrpc.client import Client, split_address
from splitrpc.client import CLIENT_DEFAULTS
from splitrpc.errors import SplitRPCError

if TYPE_CHECKING:
    from splitrpc.plugins import Capability
    from splitrpc.spec import TensorSpec


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               caps: list[Capability]) -> argparse.ArgumentParser:
    ds = sub.add_parser("describe", help="what a server serves: its functions, their specs and settings")
    ds.add_argument("address", metavar="HOST:PORT", help="the server (HOST alone: --port)")
    ds.add_argument("--port", type=int, help=f"the server's UDP port (default: {CLIENT_DEFAULTS['port']})")
    ds.add_argument("--timeout", type=float, default=2.0, help="seconds (default: %(default)s)")
    ds.add_argument("--json", action="store_true", help="the description as JSON")
    ds.add_argument("--key", metavar="FILE", help="a key file (splitrpc keys new --client-out FILE), or FILE:ID for one key of a table: authenticated calls (docs/security.md)")
    ds.set_defaults(func=cmd_describe)
    return ds


def cmd_describe(a: argparse.Namespace) -> int:
    """`splitrpc describe HOST:PORT`: the server's functions as a table (or its JSON)."""
    try:
        host, port = split_address(a.address)
    except ValueError:
        print(f"splitrpc describe: {a.address!r} is not HOST:PORT", file=sys.stderr)
        return 2
    try:
        with Client(host, port if port is not None else a.port, timeout=a.timeout, key=a.key) as c:
            d = c.describe()
    except (SplitRPCError, describe_.NotDescribed) as e:
        print(f"splitrpc describe: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps({"describe": describe_.LAYOUT, "software": d.software, "max_message": d.max_message,
                          "protocols": list(d.protocols), "digest": d.digest,
                          "functions": [f.to_json() for f in d.functions]}, indent=1))
        return 0
    print(f"{d.software}; protocols {', '.join(map(str, d.protocols))}; messages up to {d.max_message} B; "
          f"{len(d.functions)} functions" + (f"; digest {d.digest}" if d.digest else ""))
    rows = [("id", "name", "version", "inputs", "outputs", "max_batch", "executor", "priority", "device")]

    def specs(fs: Iterable[TensorSpec]) -> str:
        return ", ".join(f"{s.name}:{s.np_dtype.name}{list(s.shape)}" for s in fs)

    for f in d.functions:
        ins, outs = ((f"raw <= {f.max_request} B", f"raw <= {f.max_response} B") if f.raw
                     else (specs(f.inputs), specs(f.outputs)))
        rows.append((str(f.func_id), f.name, f.version or "-", ins, outs, str(f.max_batch), f.executor,
                     str(f.priority), f.device))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    return 0
