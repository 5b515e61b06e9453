"""keys.py: `splitrpc keys`: make, list and remove the keys of a key table file (docs/security.md); a client's id and secret go to a file of their own, never to the terminal."""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING

from splitrpc.auth import ALL, Key, KeyTable, _expiry_text, _parse_expiry, save_client_key
from splitrpc.errors import KeyFileError, SplitRPCError

if TYPE_CHECKING:
    from splitrpc.plugins import Capability


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               caps: list[Capability]) -> argparse.ArgumentParser:
    k = sub.add_parser("keys", help="make, list and remove the keys of a key table (splitrpc serve --keys FILE)")
    ks = k.add_subparsers(dest="keys_cmd", required=True)
    n = ks.add_parser("new", help="add a key with a fresh random secret to FILE (made if missing, mode 0600)")
    n.add_argument("file", metavar="FILE")
    n.add_argument("--id", type=int, help="its id, 1 .. 2^32-1, never one FILE had before (default: one more than "
                                          "the highest FILE has had, removed keys' too)")
    n.add_argument("--functions", default=ALL, metavar="NAMES",
                   help="what it may call: a comma list of function names or ids, or * for all (default: *)")
    n.add_argument("--expires", metavar="TIME", help="when it stops working: ISO 8601 with a zone (2027-01-01T00:00Z)")
    n.add_argument("--days", type=float, help="or: this many days from now")
    n.add_argument("--client-out", metavar="CFILE", required=True,
                   help="where the client's part (the id and secret) is written, mode 0600: hand it to the client "
                        "(splitrpc.Client(key=CFILE), splitrpc call/load --key CFILE)")
    ls = ks.add_parser("list", help="the keys of FILE: ids, functions, expiry (never the secrets)")
    ls.add_argument("file", metavar="FILE")
    rm = ks.add_parser("remove", help="take key ID out of FILE (a server reads it again on SIGHUP); FILE keeps "
                                      "its id among the removed ones, never given again")
    rm.add_argument("file", metavar="FILE")
    rm.add_argument("--id", type=int, required=True)
    k.set_defaults(func=cmd_keys)
    return k


def _describe(key: Key) -> str:
    funcs = "all functions" if key.functions is None else ", ".join(map(str, key.functions))
    exp = "never expires" if key.expires is None else (
        ("expired " if key.expired() else "expires ") + str(_expiry_text(key.expires)))
    return f"key {key.id}: {funcs}; {exp}"


def cmd_keys(a: argparse.Namespace) -> int:
    try:
        table = KeyTable.load(a.file) if os.path.exists(a.file) else None
        if a.keys_cmd == "list":
            if table is None:
                raise KeyFileError(f"{a.file}: no such file")
            for key in table:
                print(_describe(key))
            print(f"{len(table)} keys; skew {table.skew if table.skew is not None else 'default'}; "
                  f"next id {table.next_id()}")
            return 0
        if a.keys_cmd == "remove":
            if table is None or all(key.id != a.id for key in table):
                raise KeyFileError(f"{a.file}: no key {a.id}")
            table.without(a.id).save(a.file)
            print(f"key {a.id} removed from {a.file}; a server serving it reads it again on SIGHUP")
            return 0
        if table is None:  # not `table or`: a table of no keys still holds its removed ids
            table = KeyTable(source=a.file)
        key_id = a.id if a.id is not None else table.next_id()
        if any(key.id == key_id for key in table):
            raise KeyFileError(f"{a.file}: key {key_id} is there already (splitrpc keys remove, or another --id)")
        if key_id in table.removed_ids:  # a client file of the removed key may still name this id
            raise KeyFileError(f"{a.file}: key id {key_id} was issued before and removed: an id is never given to "
                               f"a second key (leave out --id for {table.next_id()})")
        funcs = None if a.functions.strip() == ALL else tuple(
            int(f) if f.strip().isdigit() else f.strip() for f in a.functions.split(",") if f.strip())
        if a.expires and a.days is not None:
            raise KeyFileError("--expires or --days, not both")
        expires = _parse_expiry(a.expires, "--expires") if a.expires else (
            time.time() + a.days * 86400 if a.days is not None else None)
        key = Key.generate(key_id, funcs, expires)
        new = table.with_key(key)  # checked before the client file is written
        save_client_key(key, a.client_out)  # first: a table never names a key no client file holds
        new.save(a.file)
        print(f"{_describe(key)}; added to {a.file}, the client's id and secret written to {a.client_out}")
        return 0
    except (KeyFileError, SplitRPCError, ValueError) as e:
        print(f"splitrpc keys: {e}", file=sys.stderr)
        return 2
