"""top.py: `splitrpc top HOST:ADMIN_PORT [...]`: a live terminal view of one server or a fleet, refreshed each second from their admin endpoints (per function calls/s, server-time p50/p99, queue delay, mean batch, queued, errors; drops by reason, executors' load, auth counters, CPU); `--once --json` for scripts."""
from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Iterable

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from splitrpc.scrape import ScrapeError, Snapshot, admin_url, snapshot, view

if TYPE_CHECKING:
    from splitrpc.plugins import Capability

INTERVAL_S = 1.0
MAX_INTERVAL_S = 3600.0
MAX_TIMEOUT_S = 600.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               caps: list[Capability]) -> argparse.ArgumentParser:
    t = sub.add_parser("top", help="a live view of servers from their admin endpoints (serve --admin-port)",
                       description="Reads each server's admin endpoint (/metrics and /readyz: one stats() of the "
                                   "server each) every interval and shows rates over it. p50/p99 are the server "
                                   "time of the interval's calls (from a call's last request datagram to its reply "
                                   "sent), queue p99 the part of it spent waiting for a batch; each is the upper "
                                   "bound of its histogram bucket (powers of two microseconds).")
    t.add_argument("targets", nargs="+", metavar="HOST:ADMIN_PORT",
                   help="a server's admin endpoint (`splitrpc serve --admin-port`); several for a fleet "
                        "(serve --processes N: process i on ADMIN_PORT+i)")
    t.add_argument("--interval", type=float, default=INTERVAL_S, help="seconds between readings (default: %(default)s)")
    t.add_argument("--once", action="store_true", help="read twice, one interval apart, print one view and exit")
    t.add_argument("--count", type=int, help="print this many views, then exit")
    t.add_argument("--json", action="store_true", help="print each view as one line of JSON (with --once: one object)")
    t.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for an endpoint (default: %(default)s)")
    t.set_defaults(func=cmd_top)
    return t


def cmd_top(a: argparse.Namespace) -> int:
    """Exit status: 0; 1 when --once or --count ends with a server unreachable; 2 for a bad target."""
    try:
        urls = [admin_url(x) for x in a.targets]
    except ValueError as e:
        print(f"splitrpc top: {e}", file=sys.stderr)
        return 2
    if not 0 < a.interval <= MAX_INTERVAL_S or not 0 < a.timeout <= MAX_TIMEOUT_S or \
            (a.count is not None and a.count < 1):  # NaN fails every comparison
        print(f"splitrpc top: --interval must be in (0, {MAX_INTERVAL_S:g}] s, --timeout in (0, {MAX_TIMEOUT_S:g}] s "
              "and --count >= 1", file=sys.stderr)
        return 2
    count = 1 if a.once else a.count
    reader = Reader(urls, a.timeout)
    reader.read()  # the first reading: totals only; rates need the next one
    console = Console()
    live = count is None and not a.json and console.is_terminal
    shown = 0
    views: list[dict[str, Any]] = []
    try:
        with Live(console=console, screen=True, auto_refresh=False) if live else nullcontext() as lv:
            while count is None or shown < count:
                time.sleep(a.interval)
                views = reader.read()
                shown += 1
                if a.json:
                    print(json.dumps({"time": time.time(), "servers": views}), flush=True)
                elif lv is not None:
                    lv.update(render(views), refresh=True)
                else:
                    console.print(render(views))
    except KeyboardInterrupt:
        return 0
    return 1 if any(not v["up"] for v in views) else 0


class Reader:
    """Reads every target each time, all at once, each on a thread of its own, and waits for them
    at most timeout seconds in all: a target that has not answered whole by then is shown as down
    (and is not asked again until that reading ends), so one slow or hostile endpoint never holds
    the others' view. Keeps the last snapshot of each, for the next rates. One caller thread."""

    def __init__(self, urls: list[str], timeout: float) -> None:
        self.urls, self.timeout = urls, timeout
        self.last: dict[str, Snapshot] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._got: dict[str, Snapshot | ScrapeError] = {}  # written by a reading's thread, taken here

    def _fetch(self, url: str) -> None:
        try:
            self._got[url] = snapshot(url, self.timeout)
        except ScrapeError as e:
            self._got[url] = e

    def read(self) -> list[dict[str, Any]]:
        for url in self.urls:
            t = self._threads.get(url)
            if t is None or not t.is_alive():
                self._got.pop(url, None)  # a late answer of a reading already shown as down
                t = self._threads[url] = threading.Thread(target=self._fetch, args=(url,), daemon=True,
                                                          name=f"splitrpc-top {url}")
                t.start()
        deadline = time.monotonic() + self.timeout
        for url in self.urls:
            self._threads[url].join(max(0.0, deadline - time.monotonic()))
        out = []
        for url in self.urls:
            got = None if self._threads[url].is_alive() else self._got.pop(url, None)
            if not isinstance(got, Snapshot):
                self.last.pop(url, None)
                why = str(got) if got is not None else f"{url}: no whole answer in {self.timeout:g} s"
                out.append({"target": url, "up": False, "error": why})
                continue
            try:
                v = view(self.last.get(url), got)
            except (KeyError, ValueError, TypeError, ArithmeticError) as e:  # numbers no splitrpc server writes
                self.last.pop(url, None)
                out.append({"target": url, "up": False, "error": f"{url}/metrics is not as a splitrpc server "
                            f"writes it: {type(e).__name__}: {e}"})
                continue
            out.append(v)
            self.last[url] = got
        return out


def _n(x: float | None, unit: str = "") -> str:
    """A count or rate for a cell: "-" when unknown, thousands separated."""
    if x is None:
        return "-"
    return f"{x:,.0f}{unit}" if abs(x) >= 10 or x == 0 else f"{x:,.1f}{unit}"


def _us(x: float | str | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return f">{x}"
    return f"{x / 1e3:,.1f} ms" if x >= 10_000 else f"{x:,.0f} µs"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _counts(d: dict[str, dict[str, Any]]) -> str:
    return " · ".join(f"{k} {v['total']:,}" + (f" (+{_n(v['per_s'])}/s)" if v.get("per_s") else "")
                      for k, v in d.items()) or "none"


def render(views: Iterable[dict[str, Any]]) -> RenderableType:
    """The view of every server, one block each, and a fleet line where there are several."""
    views = list(views)
    parts: list[RenderableType] = []
    for v in views:
        parts.extend(render_one(v))
        parts.append(Text(""))
    up = [v for v in views if v["up"]]
    if len(views) > 1:
        calls = sum(v["calls"]["per_s"] or 0 for v in up)
        parts.append(Text(f"fleet: {len(up)}/{len(views)} up · {_n(calls)} calls/s in all", style="bold"))
    return Group(*parts)


def render_one(v: dict[str, Any]) -> list[RenderableType]:
    if not v["up"]:
        return [Text(f"{v['target']}  unreachable: {v['error']}", style="bold red")]
    cpu = v["cpu"]
    target = v["target"].split("://", 1)[-1]
    head = Text.assemble(
        (target, "bold"), "  ", (f"{v['state'] or '?'}{', ready' if v['ready'] else ', not ready'}",
                                 "green" if v["ready"] else "yellow"),
        f" · pending {v['pending'] if v['pending'] is not None else '-'}",
        f" · CPU {_pct(cpu['process'])} of a core, host {_pct(cpu['host'])}"
        + (f" of {cpu['host_cpus']}" if cpu["host_cpus"] else ""))
    rates = Text(" · ".join(f"{label} {_n(v[k]['per_s'])}/s" for k, label in (
        ("rx_datagrams", "rx"), ("tx_datagrams", "tx"), ("calls", "calls"), ("batches", "batches"),
        ("reply_cache_hits", "cached"))) + f" · queued {v['queued_calls']} · reassembling {v['partial_messages']}")
    # fits 80 columns: errors by code per function go on lines of their own, under the table
    fn = Table(box=None, pad_edge=False, header_style="bold cyan")
    for col in ("function", "calls/s", "calls", "batch", "p50", "p99", "wait p99", "queued", "err/s", "errors"):
        fn.add_column(col, justify="left" if col == "function" else "right", no_wrap=True,
                      overflow="ellipsis" if col == "function" else "fold")
    for f in v["functions"]:
        fn.add_row(f["name"], _n(f["calls_per_s"]), f"{f['calls_total']:,}",
                   "-" if f["mean_batch"] is None else f"{f['mean_batch']:.2f}",
                   _us(f["p50_us"]), _us(f["p99_us"]), _us(f["queue_p99_us"]), str(f["queued"]),
                   _n(f["errors_per_s"]), f"{sum(f['errors'].values()):,}")
    out: list[RenderableType] = [head, rates, fn]
    for f in v["functions"]:
        if f["errors"]:
            out.append(Text(f"  {f['name']}: " + " · ".join(f"{k} {n:,}" for k, n in f["errors"].items()),
                            style="yellow"))
    out += [Text.assemble(("drops: ", "bold"), _counts(v["drops"])),
            Text.assemble(("errors: ", "bold"), _counts(v["errors"]))]
    if v["executors"]:
        ex = Table(box=None, pad_edge=False, header_style="bold cyan")
        for col in ("executor", "lane", "threads", "queued", "running", "batches/s", "load"):
            ex.add_column(col, justify="left" if col in ("executor", "lane") else "right")
        for e in v["executors"]:
            ex.add_row(e["function"], e["lane"] or "-", str(e["threads"]), str(e["queued"]), str(e["running"]),
                       _n(e["batches_per_s"]), _pct(e["load"]))
        out.append(ex)
    auth = v["auth"]
    if any(auth.values()):  # a server with keys (its auth_* drops are on the drops line)
        out.append(Text.assemble(("auth: ", "bold"), " · ".join(f"{k} {n:,}" for k, n in auth.items())))
    return out
