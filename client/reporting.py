"""reporting.py: what the report-writing subcommands share (benchmarks, tune, provision): registering with `splitrpc`, running as `python -m splitrpc.bench.suites.X`, and the command line their reports quote."""
from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from typing import Any, Callable, cast

import numpy as np


def add_subcommand(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_: str, doc: str,
                   arguments: Callable[[argparse.ArgumentParser], object],
                   func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    """`splitrpc NAME`: the module's arguments, handled by func(args)."""
    p = sub.add_parser(name, help=help_, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    arguments(p)
    p.set_defaults(func=func)
    return p


def run_as_module(module: str, doc: str, arguments: Callable[[argparse.ArgumentParser], object],
                  func: Callable[[argparse.Namespace], int], argv: list[str] | None) -> int:
    """`python -m MODULE ARGS`: parses argv (default sys.argv[1:]) and runs func with args.command set."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    arguments(p)
    a = p.parse_args(argv)
    a.command = f"python -m {module} " + shlex.join(argv)
    return func(a)


def command_of(a: argparse.Namespace) -> str:
    """The command line a report quotes: the one run_as_module set, else this process's."""
    if getattr(a, "command", None):
        return cast(str, a.command)  # set by run_as_module: a str
    if sys.argv and os.path.basename(sys.argv[0]) == "splitrpc":
        return "splitrpc " + shlex.join(sys.argv[1:])
    return shlex.join(sys.argv)


def jsonable(x: Any) -> Any:
    """x with numpy arrays and scalars made lists and Python numbers, NaN made None, keys made
    strings: what a report's JSON holds."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return None if math.isnan(x) else float(x)
    return x


def write_json(path: str, doc: dict[str, Any]) -> None:
    """doc as JSON (jsonable) at path."""
    import json

    with open(path, "w") as f:
        json.dump(jsonable(doc), f, indent=1)
        f.write("\n")


def write_report(out: str, name: str, doc: dict[str, Any], markdown: Callable[[dict[str, Any]], str],
                 plot: Callable[[dict[str, Any], str], "str | list[str]"] | None, who: str) -> list[str]:
    """Writes under OUT the plots, where matplotlib is installed (plot(doc, OUT/NAME.png) returns
    the path it wrote, or the paths where it wrote several; their names go in doc["plots"]), then
    NAME.json (doc) and NAME.md (markdown(doc)). Returns the paths written. who names the command
    in the note printed when the plotting package is missing."""
    os.makedirs(out, exist_ok=True)
    plots: list[str] = []
    if plot is not None:
        try:
            made = plot(doc, os.path.join(out, f"{name}.png"))
            plots = [made] if isinstance(made, str) else list(made or ())
        except ImportError:
            print(f"{who}: matplotlib not installed: no plot (pip install 'splitrpc[plot]')", file=sys.stderr)
        doc["plots"] = [os.path.basename(p) for p in plots]
    paths = [os.path.join(out, f"{name}.json"), os.path.join(out, f"{name}.md")]
    write_json(paths[0], doc)
    with open(paths[1], "w") as f:
        f.write(markdown(doc))
    return paths + plots


def rewrite_markdown(json_path: str, markdown: Callable[[dict[str, Any]], str]) -> str:
    """A report's Markdown made again from its JSON (a suite's --report): written beside it (the
    path less .json, plus .md) and printed; returns the path written."""
    import json

    with open(json_path) as f:
        text = markdown(json.load(f))
    md = json_path.removesuffix(".json") + ".md"
    with open(md, "w") as f:
        f.write(text)
    print(text)
    return md


class SuiteFailed(Exception):
    """A suite's run that could not finish (a server that did not start, an interrupted run):
    run_suite prints "splitrpc WHO: message" and returns 1; nothing is written."""


def run_suite(a: argparse.Namespace, *, name: str, who: str, run: Callable[[argparse.Namespace], dict[str, Any]],
              markdown: Callable[[dict[str, Any]], str],
              plot: Callable[[dict[str, Any], str], "str | list[str]"] | None = None, needs: tuple[str, ...] = (),
              hint: str = "", check: Callable[[argparse.Namespace], "str | None"] | None = None,
              errors: tuple[type[BaseException], ...] = (),
              after: Callable[[dict[str, Any]], list[str]] | None = None,
              verdict: Callable[[dict[str, Any]], "str | None"] | None = None,
              echo: bool = False, out: str | None = None, write: bool = True) -> int:
    """The tail every report-writing command shares:
    - the optional packages it needs (`needs`: module names; one missing prints "WHO: needs HINT", 2);
    - check(a): what is wrong with the arguments, or None ("splitrpc WHO: message", 2);
    - doc = run(a): an exception of `errors` is bad input ("splitrpc WHO: message", 2), SuiteFailed
      a run that could not finish ("splitrpc WHO: message", 1);
    - the report written under `out` (default a.out) as NAME.json, NAME.md and its plots (write_report;
      nothing where not write, e.g. a suite whose report is only printed without --out), the
      markdown printed first where echo, then each path, then the lines of after(doc);
    - verdict(doc): why the results fail the suite's own checks, or None ("splitrpc WHO: why" on
      stderr, 1: the report is written all the same).
    Returns 0, 1 or 2 as said."""
    from importlib import util

    missing = [m for m in needs if util.find_spec(m) is None]
    if missing:
        print(f"{who}: needs {hint or ', '.join(missing)}", file=sys.stderr)
        return 2
    bad = check(a) if check else None
    if bad:
        print(f"splitrpc {who}: {bad}", file=sys.stderr)
        return 2
    try:
        doc = run(a)
    except errors as e:
        print(f"splitrpc {who}: {e}", file=sys.stderr)
        return 2
    except SuiteFailed as e:
        print(f"splitrpc {who}: {e}", file=sys.stderr)
        return 1
    paths = write_report(a.out if out is None else out, name, doc, markdown, plot, who) if write else []
    if echo:
        print(markdown(doc))
    for path in paths:
        print(path)
    for line in after(doc) if after else ():
        print(line)
    failure = verdict(doc) if verdict else None
    if failure:
        print(f"splitrpc {who}: {failure}", file=sys.stderr)
        return 1
    return 0
