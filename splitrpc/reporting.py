"""reporting.py: what the report-writing subcommands share (benchmarks, tune, provision): registering with `splitrpc`, running as `python -m splitrpc.bench.suites.X`, and the command line their reports quote."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Callable


def add_subcommand(sub, name: str, help_: str, doc: str, arguments: Callable, func: Callable) -> argparse.ArgumentParser:
    """`splitrpc NAME`: the module's arguments, handled by func(args)."""
    p = sub.add_parser(name, help=help_, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    arguments(p)
    p.set_defaults(func=func)
    return p


def run_as_module(module: str, doc: str, arguments: Callable, func: Callable, argv: list[str] | None) -> int:
    """`python -m MODULE ARGS`: parses argv (default sys.argv[1:]) and runs func with args.command set."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    arguments(p)
    a = p.parse_args(argv)
    a.command = f"python -m {module} " + shlex.join(argv)
    return func(a)


def command_of(a) -> str:
    """The command line a report quotes: the one run_as_module set, else this process's."""
    if getattr(a, "command", None):
        return a.command
    if sys.argv and os.path.basename(sys.argv[0]) == "splitrpc":
        return "splitrpc " + shlex.join(sys.argv[1:])
    return shlex.join(sys.argv)


def write_report(out: str, name: str, doc: dict, markdown: Callable[[dict], str],
                 plot: Callable[[dict, str], str] | None, who: str) -> list[str]:
    """Writes OUT/NAME.json (doc), NAME.md (markdown(doc)) and, where matplotlib is installed,
    NAME.png (plot(doc, path)); returns the paths written. who names the command in the note
    printed when the plotting package is missing."""
    import json

    os.makedirs(out, exist_ok=True)
    paths = [os.path.join(out, f"{name}.json"), os.path.join(out, f"{name}.md")]
    with open(paths[0], "w") as f:
        json.dump(doc, f, indent=1)
    with open(paths[1], "w") as f:
        f.write(markdown(doc))
    if plot is not None:
        try:
            paths.append(plot(doc, os.path.join(out, f"{name}.png")))
        except ImportError:
            print(f"{who}: matplotlib not installed: no plot (pip install 'splitrpc[plot]')", file=sys.stderr)
    return paths


def run_suite(a, *, name: str, who: str, run: Callable[[object], dict], markdown: Callable[[dict], str],
              plot: Callable[[dict, str], str] | None = None, needs: tuple = (), hint: str = "",
              errors: tuple = (), after: Callable[[dict], list] | None = None) -> int:
    """The tail every report-writing command shares: the optional packages it needs (`needs`:
    module names; one missing prints "WHO: needs HINT" and returns 2), doc = run(a) (an exception
    of `errors` is bad input: "splitrpc WHO: message", 2), the report written under a.out as
    NAME.json, NAME.md and NAME.png (write_report), each path printed, then the lines of
    after(doc). Returns 0."""
    from importlib import util

    missing = [m for m in needs if util.find_spec(m) is None]
    if missing:
        print(f"{who}: needs {hint or ', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        doc = run(a)
    except errors as e:
        print(f"splitrpc {who}: {e}", file=sys.stderr)
        return 2
    for path in write_report(a.out, name, doc, markdown, plot, who):
        print(path)
    for line in after(doc) if after else ():
        print(line)
    return 0
