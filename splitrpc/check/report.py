"""report.py: what `splitrpc check --out DIR` writes: summary.md (its first line the device, then a verdict per section, then what each section found), check.json (everything), and a few grouped-bar plots; eight files at most."""
from __future__ import annotations

import json
import os
import re
from typing import Any

from splitrpc.check.section import CUT, FAILED, PASSED, VERDICTS
from splitrpc.machine import describe as machine_facts  # noqa: F401 - the report's host facts

# machine_facts is named here so that it is an explicit export (cli.py calls report.machine_facts)
__all__ = ["MAX_PLOTS", "device_line", "machine_facts", "markdown", "plot_bars", "write"]

MAX_PLOTS = 3          # summary.md + check.json + these: the device tool brings back 8 files at most
_DPI = 110


def device_line(results: dict[str, Any]) -> str:
    """The machine section's device line, or why there is none."""
    m = results.get("machine", {})
    line: str | None = (m.get("facts") or {}).get("line")
    if line:
        return line
    if m.get("verdict") == FAILED:
        return f"Device: unknown (the machine section failed: {m.get('why', '')})"
    return "Device: not looked at (the machine section did not run)"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(doc: dict[str, Any]) -> str:
    res = doc["sections"]
    n = {v: sum(1 for r in res.values() if r["verdict"] == v) for v in VERDICTS}
    lines = [device_line(res), "", "# splitrpc check: " + ", ".join(f"{n[v]} {v}" for v in VERDICTS), "",
             f"- date: {doc['date']}", f"- command: `{doc['command']}`",
             f"- host: {doc['host']['cpu']} ({doc['host']['cpus']} CPUs, {doc['host']['host']}), kernel {doc['host']['kernel']}, "
             f"Python {doc['host']['python']}; splitrpc {doc['version']}",
             f"- wall time: {doc['wall_s']:.0f} s" + (f"; merged with {doc['merged_from']}" if doc.get("merged_from") else ""),
             *([f"- source: {doc['source']}"] if doc.get("source") else []),
             *([f"- UNFINISHED: written while the check ran; not yet run: {', '.join(doc['unfinished'])}"]
               if doc.get("unfinished") else []),
             *([f"- budget: {doc['budget_s']:.0f} s for the sections; the plan (each cap, their running total) is "
                "in check.json"] if doc.get("budget_s") is not None else []),
             "- each section ran in a process of its own under its time cap; passed: every check held; failed: "
             "one did not (the reason); skipped: it cannot run here (the reason); cut: its cap or the budget ran "
             "out first (what it had finished); only failed makes the exit non-zero", "",
             "| section | verdict | seconds | what it found, or why |", "|---|---|---:|---|"]
    for name, r in res.items():
        text = r.get("summary", "") if r["verdict"] == PASSED else r.get("why", "")
        mark = r["verdict"].upper() + (" (rerun)" if r.get("rerun") else "")
        lines.append(f"| {name} | {mark} | {r.get('seconds', 0):.1f} | {_cell(text)} |")
    for name, r in res.items():
        if r["verdict"] == PASSED and r.get("markdown"):
            lines += ["", f"## {name}: {r.get('title', '')}", "", *r["markdown"]]
        elif r["verdict"] in (FAILED, CUT):
            lines += ["", f"## {name}: {r['verdict'].upper()}", "", f"{r.get('title', '')}", "", f"- why: {r.get('why', '')}",
                      *([f"- finished: {'; '.join(r['finished'])}"] if r.get("finished") else []),
                      *r.get("markdown", [])]  # what it measured before it failed or was cut, if anything
            if r.get("output_tail"):
                lines += ["", "```", *r["output_tail"].splitlines()[-15:], "```"]
    return "\n".join(lines) + "\n"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def plot_bars(spec: dict[str, Any], path: str) -> str:
    """Grouped bars: spec {"title", "ylabel", "categories", "series": {label: values}, "log"}."""
    from matplotlib import figure  # no pyplot: nothing global is touched

    cats, series = spec["categories"], spec["series"]
    fig = figure.Figure(figsize=(max(6.0, 1.1 * len(cats) + 2), 4.5), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / max(len(series), 1)
    for i, (label, vals) in enumerate(series.items()):
        xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(cats))]
        ax.bar(xs, [v if v is not None else 0 for v in vals], width, label=label)
    ax.set_xticks(range(len(cats)), cats, rotation=20, ha="right")
    ax.set_ylabel(spec.get("ylabel", ""))
    ax.set_title(spec.get("title", ""))
    if spec.get("log"):
        ax.set_yscale("log")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    try:
        fig.savefig(path, format="png", dpi=_DPI, metadata={"Software": None})
    finally:
        fig.clear()
    return path


def write(out: str, doc: dict[str, Any], plots: bool = True) -> list[str]:
    """summary.md, check.json and (plots=True) up to MAX_PLOTS plots under out; the paths
    written. Each file is written whole and renamed into place: a reader, or a run killed
    while writing, never sees half a report."""
    os.makedirs(out, exist_ok=True)
    paths = [os.path.join(out, "summary.md"), os.path.join(out, "check.json")]
    for path, text in ((paths[0], markdown(doc)), (paths[1], json.dumps(doc, indent=1, default=str))):
        with open(path + ".part", "w") as f:
            f.write(text)
        os.replace(path + ".part", path)
    if not plots:
        return paths
    specs = [p for r in doc["sections"].values() for p in r.get("plots", [])]  # a failed benchmark's too
    for spec in specs[:MAX_PLOTS]:
        try:
            paths.append(plot_bars(spec, os.path.join(out, f"check_{_safe(spec['name'])}.png")))
        except ImportError:
            print("splitrpc check: matplotlib is not installed: no plots (pip install 'splitrpc[plot]')")
            break
    return paths
