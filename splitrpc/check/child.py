"""child.py: `splitrpc.check.child.main([MODULE, NAME, CONTEXT.json, RESULT.json, CAP_S, DEADLINE, BUDGET_LIMITED])`: runs one section of `splitrpc check` (section NAME of MODULE.SECTIONS) in this process and writes its verdict, so that the parent can cap its time and outlive its crash."""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from dataclasses import asdict
from importlib import import_module
from typing import Any, cast

from splitrpc.check.section import CUT, FAILED, PASSED, SKIPPED, Context, Cut, Failed, Section, Skipped, failing


def find(module: str, name: str) -> Section:
    """Section `name` of the list SECTIONS in `module` (where every section is declared)."""
    for s in cast("list[Section]", import_module(module).SECTIONS):  # a module's SECTIONS: a list of Section
        if s.name == name:
            return s
    raise KeyError(f"no check section {name!r} in {module}.SECTIONS")


def run_one(module: str, name: str, ctx: Context) -> dict[str, Any]:
    """{"verdict", "why", "seconds", and the Result's fields when it passed}."""
    t0 = time.monotonic()
    try:
        res = find(module, name).run(ctx)
        out: dict[str, Any] = {"verdict": PASSED, "why": "", **asdict(res)}
    except Skipped as e:
        out = {"verdict": SKIPPED, "why": str(e)}
    except Cut as e:
        out = {**(asdict(e.result) if e.result is not None else {}), "verdict": CUT, "why": str(e)}
    except Failed as e:
        out = {**(asdict(e.result) if e.result is not None else {}), "verdict": FAILED, "why": str(e)}
    except Exception as e:  # noqa: BLE001 - any error is this section's failure, with where it came from
        tb = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != __file__]
        mine = getattr(sys.modules.get(module), "__file__", None)  # the section's own module, else the check's
        own = [f for f in tb if f.filename == mine] or [f for f in tb if "/check/" in f.filename] or tb
        where = f" (at {own[-1].filename.rsplit('/', 1)[-1]}:{own[-1].lineno})" if own else ""
        first = e.__context__ if not e.__suppress_context__ else None  # the error a teardown's own one followed
        after = f" (raised while handling {type(first).__name__}: {first})" if first is not None else ""
        out = {"verdict": FAILED, "why": f"{type(e).__name__}: {e}{where}{after}"}
        failing(out["why"])  # should writing the verdict not come to pass
        traceback.print_exc()  # the parent keeps the end of stderr
    out["seconds"] = round(time.monotonic() - t0, 2)
    return out


def main(argv: list[str]) -> int:
    module, name, ctx_path, result_path, cap_s, deadline, budget_limited = argv
    with open(ctx_path) as f:
        ctx = Context.from_json(json.load(f))
    ctx.cap_s = float(cap_s)
    ctx.deadline = float(deadline)  # the parent's time.monotonic(): CLOCK_MONOTONIC is the machine's
    ctx.budget_limited = budget_limited == "1"
    out = run_one(module, name, ctx)
    with open(result_path + ".part", "w") as f:  # whole or not at all: the parent may kill us any time
        json.dump(out, f, default=str)
    os.replace(result_path + ".part", result_path)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
