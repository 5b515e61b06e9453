"""progress.py: the live progress line of a load run (rich), with the current rate and p99."""
from __future__ import annotations

import math

from rich.console import Console
from rich.live import Live
from rich.text import Text

from splitrpc.load_run import Snapshot


class ProgressLine:
    """Context manager whose `update(snapshot)` redraws one status line on a terminal (on a
    non-terminal, nothing is drawn until the end). `enabled=False` draws nothing."""

    def __init__(self, title: str, enabled: bool = True, console: Console | None = None):
        self.title = title
        self.enabled = enabled
        self.console = console or Console(stderr=True)
        self._live: Live | None = None

    def __enter__(self) -> "ProgressLine":
        if self.enabled and self.console.is_terminal:
            self._live = Live(Text(f"{self.title}: starting"), console=self.console, refresh_per_second=4,
                              transient=True)
            self._live.__enter__()
        return self

    def update(self, s: Snapshot) -> None:
        if self._live is None:
            return
        p99 = "-" if math.isnan(s.p99_us) else f"{s.p99_us:,.1f} µs"
        self._live.update(Text(f"{self.title}: {s.elapsed_s:6.1f} s  {s.finished:,}/{s.total:,} done  "
                               f"{s.rate_rps:,.0f} calls/s  p99 {p99}  errors {s.errors:,}"))

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None
