"""call.py: `splitrpc call NAME`: one call and its reply: a function a capability knows by name (an example request, the reply checked), a numeric func_id, or any function the server describes (random inputs from its specs)."""
from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Iterable, cast

import numpy as np

from splitrpc.client import Client
from splitrpc.client import CLIENT_DEFAULTS
from splitrpc.errors import SplitRPCError
from splitrpc.plugins import CapabilityError, find_callee

if TYPE_CHECKING:
    from splitrpc.plugins import Callee, Capability


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               caps: list[Capability]) -> argparse.ArgumentParser:
    names = [n for cap in caps for n in cap.callee_names()]
    c = sub.add_parser("call", help="make one call and print the reply")
    c.add_argument("function", help=f"{', '.join(names)}, a numeric func_id, or the name of any function the "
                                    "server describes (random inputs from its specs)")
    c.add_argument("--host", help=f"the server's address (default: {CLIENT_DEFAULTS['host']})")
    c.add_argument("--port", type=int, help=f"the server's UDP port (default: {CLIENT_DEFAULTS['port']})")
    c.add_argument("--file", help="request bytes from this file")
    c.add_argument("--text", help="request bytes: this UTF-8 text")
    c.add_argument("--output", help="write the reply bytes to this file")
    c.add_argument("--timeout", type=float, default=2.0, help="seconds (default: %(default)s)")
    c.add_argument("--key", metavar="FILE", help="a key file (splitrpc keys new --client-out FILE), or FILE:ID for one key of a table: authenticated calls (docs/security.md)")
    c.add_argument("--seed", type=int, default=0, help="seed of the example input")
    c.add_argument("--small", action="store_true", help="a model's reply is checked against its small configuration")
    c.set_defaults(func=cmd_call)
    return c


def timed_call(a: argparse.Namespace, func_id: int, data: bytes) -> tuple[bytes, float] | tuple[None, None]:
    """One call to --host/--port: (reply, microseconds), or (None, None) after printing the error."""
    with Client(a.host, a.port, timeout=a.timeout, key=a.key) as c:
        t0 = time.perf_counter()
        try:
            reply = c.call(func_id, data)
        except SplitRPCError as e:
            print(f"error: {e}", file=sys.stderr)
            return None, None
        return reply, (time.perf_counter() - t0) * 1e6


def _user_request(a: argparse.Namespace) -> bytes | None:
    if a.file:
        with open(a.file, "rb") as f:
            return f.read()
    if a.text is not None:
        return cast(str, a.text).encode()  # --text: a str option
    return None


def _write(path: str, reply: bytes) -> None:
    with open(path, "wb") as f:
        f.write(reply)


def show_bytes(reply: bytes) -> list[str]:
    """A reply of no known layout: its text, else its bytes in hex (the first 256 either way)."""
    try:
        return [repr(reply[:256].decode("utf-8")) + (" ..." if len(reply) > 256 else "")]
    except UnicodeDecodeError:
        return [reply[:256].hex() + (" ..." if len(reply) > 256 else "")]


def cmd_call(a: argparse.Namespace) -> int:
    user = _user_request(a)
    numeric = False
    try:
        callee = find_callee(a.capabilities, a.function, a, checked=user is None)
    except CapabilityError as e:
        print(e, file=sys.stderr)
        return e.code
    if callee is None:
        try:
            func_id = int(a.function, 0)
        except ValueError:  # not a name this command knows: ask the server
            return _call_described(a, user)
        data = user if user is not None else b""
        callee = _by_id(a.capabilities, func_id, a)  # shows the reply, if a capability knows the id
        numeric = True
    else:
        func_id = callee.func_id
        data = user if user is not None else (callee.example(np.random.default_rng(a.seed)) if callee.example else b"")
    reply, dt = timed_call(a, func_id, data)
    if reply is None:
        return 1
    assert dt is not None  # timed_call gives the reply and its time together
    checked = callee is not None and user is None and not numeric
    if checked and cast("Callee", callee).summary is not None:  # checked: callee is not None
        assert callee is not None and callee.summary is not None
        print(callee.summary(data, reply, dt))
    else:
        print(f"function {func_id}: {len(data)} B request -> {len(reply)} B reply in {dt:.0f} us (one cold call)")
    ok = None
    if checked:
        assert callee is not None  # checked: callee is not None
        try:
            ok = callee.verdict(data, reply)
        except ImportError as e:
            print(f"reply not checked: {e}")
        else:
            if ok is not None:
                print(callee.check_label, ok)
    if a.output:
        _write(a.output, reply)
    else:
        lines = callee.show(reply) if callee is not None and callee.show is not None else None
        for line in lines if lines is not None else show_bytes(reply):
            print(line)
    return 1 if checked and cast("Callee", callee).strict and ok is False else 0  # checked: callee is not None


def _by_id(caps: Iterable[Capability], func_id: int, a: argparse.Namespace) -> Callee | None:
    for cap in caps:
        for name in cap.callee_names():
            c = cap.callee(name, a, checked=False)
            if c is not None and c.func_id == func_id:
                return c
    return None


def _call_described(a: argparse.Namespace, user: bytes | None) -> int:
    """`splitrpc call NAME` for a function no capability knows: the server's describe gives its
    specs; random inputs (or --file/--text); the reply shown by its output specs."""
    from splitrpc.describe import NotDescribed

    try:
        with Client(a.host, a.port, timeout=a.timeout, key=a.key) as c:
            d = c.describe()
    except (SplitRPCError, NotDescribed) as e:
        known = ", ".join(n for cap in a.capabilities for n in cap.callee_names())
        print(f"splitrpc call: unknown function {a.function!r}: not a name of this command ({known}, or a number), "
              f"and the server did not describe itself ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    try:
        info = d.by_name(a.function)
    except KeyError as e:
        print(f"splitrpc call: {e.args[0]}", file=sys.stderr)
        return 2
    data = user
    if data is None:
        try:
            data = info.example(np.random.default_rng(a.seed), max_bytes=d.max_message)
        except ValueError as e:
            print(f"splitrpc call: {e} (--file or --text)", file=sys.stderr)
            return 2
    reply, dt = timed_call(a, info.func_id, data)
    if reply is None:
        return 1
    print(f"{info.name} (function {info.func_id}): {len(data)} B request -> {len(reply)} B reply in {dt:.0f} us")
    if a.output:
        _write(a.output, reply)
    elif not info.raw and len(reply) == sum(s.nbytes for s in info.outputs):
        at = 0
        for s in info.outputs:
            v = np.frombuffer(reply, s.np_dtype, count=int(np.prod(s.shape)), offset=at)
            at += s.nbytes
            print(f"{s.name} {s.np_dtype.name}{list(s.shape)}: {np.array2string(v[:8], precision=4)}"
                  + (" ..." if v.size > 8 else ""))
    else:
        print(repr(reply[:256]) + (" ..." if len(reply) > 256 else ""))
    return 0
