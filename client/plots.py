"""plots.py: PNG plots of load-generator results (latency vs load, throughput, CDF, over time), drawn with Agg."""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from splitrpc.latency_histogram import percentiles

__all__ = ["PlotUnavailable", "find_knee", "latency_vs_load", "throughput_vs_concurrency", "latency_cdf",
           "latency_over_time"]

KNEE_P99_FACTOR = 3.0  # p99 this many times its value at the lowest load: the system is saturating
KNEE_ACHIEVED_FRACTION = 0.95  # achieved below this fraction of offered: the system is shedding load
_CDF_POINTS = 4000  # a CDF of more samples is drawn from this many quantiles (body and tail)
_DPI = 120


class PlotUnavailable(ImportError):
    """matplotlib is not installed, so no plot can be drawn."""


def _figure(nrows: int = 1, figsize=(8.0, 5.0)):
    """A new figure and its axes, without pyplot: nothing global is touched or left open. (Its
    savefig(format="png") renders with Agg, as matplotlib's own non-pyplot examples do.)"""
    try:
        from matplotlib import figure
    except ImportError as e:
        raise PlotUnavailable(f"plots need matplotlib ({e}); install it with: pip install 'splitrpc[plot]'") from e
    fig = figure.Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(nrows, 1, sharex=True) if nrows > 1 else fig.subplots()
    return fig, axes


def _save(fig, path):
    """Writes fig as a PNG to path, frees it, and returns path. No "Software" text chunk: the
    file holds the picture and nothing that names the library that drew it."""
    try:
        fig.savefig(path, format="png", dpi=_DPI, metadata={"Software": None})
    finally:
        fig.clear()
    return path


def _ticks(fmt):
    """A tick formatter writing each tick value v as fmt(v) (called after _figure(), so matplotlib is there)."""
    from matplotlib import ticker
    return ticker.FuncFormatter(lambda v, _pos: fmt(v))


def _si(x: float) -> str:
    """A short human number: 1234 -> '1.23k', 2.5e6 -> '2.5M'."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def _vector(name: str, x, n: int | None = None) -> np.ndarray:
    """x as a 1-D float array (of length n when given); ValueError otherwise."""
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be numbers: {e}") from None
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, not of shape {a.shape}")
    if n is not None and a.size != n:
        raise ValueError(f"{name} has {a.size} values where {n} are expected (all arrays need the same length)")
    return a


def _series(series, what: str) -> Mapping:
    """Checks that series is a non-empty mapping of labels to non-empty sequences."""
    if not isinstance(series, Mapping) or not series:
        raise ValueError(f"series must be a non-empty dict of label -> {what}")
    for label, points in series.items():
        if points is None or len(points) == 0:
            raise ValueError(f"series {label!r} is empty")
    return series


def _finish(fig, ax, path, title: str, xlabel: str, ylabel: str, legend_loc: str = "best"):
    """Labels, grid and legend of a one-panel plot; writes it to path and returns path."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc=legend_loc)
    return _save(fig, path)


def _log_y_if_positive(ax, *arrays) -> None:
    """Log-scales the y axis when there is a positive value to show (else matplotlib warns and shows nothing)."""
    if any(np.any(np.isfinite(a) & (a > 0)) for a in arrays):
        ax.set_yscale("log")


def find_knee(offered, p99, achieved=None) -> int | None:
    """The index of the first point, by increasing offered load, past which the system saturates.

    That is the first point whose p99 exceeds KNEE_P99_FACTOR times the p99 at the lowest
    offered load, or (when achieved is given) whose achieved rate is below
    KNEE_ACHIEVED_FRACTION of the offered rate; None when no point is. NaN compares as false.
    """
    offered = _vector("offered", offered)
    if offered.size == 0:
        raise ValueError("find_knee needs at least one point")
    p99 = _vector("p99", p99, offered.size)
    saturated = np.zeros(offered.size, dtype=bool)
    order = np.argsort(offered, kind="stable")
    base = p99[order[0]]
    if not math.isnan(base):
        saturated |= p99 > KNEE_P99_FACTOR * base
    if achieved is not None:
        saturated |= _vector("achieved", achieved, offered.size) < KNEE_ACHIEVED_FRACTION * offered
    hits = order[saturated[order]]
    return int(hits[0]) if hits.size else None


def latency_vs_load(series, path, title: str = "Latency vs offered load"):
    """Mean (dashed) and p99 (solid) latency against offered load, log y, each series' knee marked.

    series: {label: [{"offered_rps", "achieved_rps", "mean_us", "p99_us"}, ...]} (rates in
    requests/s, latencies in µs). Writes a PNG to path and returns path.
    """
    keys = ("offered_rps", "achieved_rps", "mean_us", "p99_us")
    data = {}
    for label, points in _series(series, "list of load points").items():
        cols = {}
        for k in keys:
            try:
                cols[k] = _vector(f"{label!r} {k}", [pt[k] for pt in points])
            except (KeyError, TypeError):
                raise ValueError(f"every point of series {label!r} needs the keys {', '.join(keys)}") from None
        order = np.argsort(cols["offered_rps"], kind="stable")
        data[label] = {k: v[order] for k, v in cols.items()}

    fig, ax = _figure()

    for i, (label, d) in enumerate(data.items()):
        color = f"C{i % 10}"
        x = d["offered_rps"]
        ax.plot(x, d["p99_us"], "-o", color=color, markersize=3, label=f"{label} p99")
        ax.plot(x, d["mean_us"], "--", color=color, label=f"{label} mean")
        knee = find_knee(x, d["p99_us"], d["achieved_rps"])
        if knee is not None:
            ax.axvline(x[knee], linestyle=":", color=color, linewidth=1.2)
            ax.annotate(f"knee ({label})\n{_si(x[knee])} req/s", xy=(x[knee], 1.0), xycoords=("data", "axes fraction"),
                        xytext=(4, -4 - 24 * (i % 4)), textcoords="offset points", va="top", fontsize=8,
                        color=color)
    _log_y_if_positive(ax, *(d[k] for d in data.values() for k in ("mean_us", "p99_us")))
    ax.xaxis.set_major_formatter(_ticks(_si))
    return _finish(fig, ax, path, title, "offered load (requests/s)", "latency (µs)")


def throughput_vs_concurrency(series, path, title: str = "Throughput vs concurrency"):
    """Achieved throughput against the number of outstanding requests, log-2 x axis.

    series: {label: [(concurrency, requests_per_s), ...]}. Writes a PNG to path and returns path.
    """
    data = {}
    for label, points in _series(series, "list of (concurrency, rps)").items():
        try:
            a = np.asarray(points, dtype=np.float64)
        except (TypeError, ValueError):
            a = None
        if a is None or a.ndim != 2 or a.shape[1] != 2:
            raise ValueError(f"series {label!r} must be a list of (concurrency, rps) pairs")
        if not np.all(a[:, 0] > 0):
            raise ValueError(f"series {label!r} has a concurrency <= 0, which a log axis cannot show")
        data[label] = a[np.argsort(a[:, 0], kind="stable")]

    fig, ax = _figure()
    for label, a in data.items():
        ax.plot(a[:, 0], a[:, 1], "-o", markersize=4, label=label)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(_ticks("{:g}".format))
    ax.yaxis.set_major_formatter(_ticks(_si))
    ax.set_ylim(bottom=0)
    return _finish(fig, ax, path, title, "concurrency (outstanding requests)", "throughput (requests/s)")


def latency_cdf(series, path, title: str = "Latency CDF"):
    """The empirical CDF of each series' latencies (µs), log x, p50 and p99 marked (latency_histogram.percentiles,
    as in the tables).

    series: {label: array of latencies in µs, all finite and > 0}. Large arrays are drawn from
    quantiles spaced evenly in the body and logarithmically in the tail. Writes a PNG to path.
    """
    data = {}
    for label, lat in _series(series, "array of latencies (µs)").items():
        a = _vector(f"series {label!r}", lat)
        if not np.all(np.isfinite(a) & (a > 0)):
            raise ValueError(f"series {label!r} has latencies that are not finite and > 0")
        data[label] = np.sort(a)

    fig, ax = _figure()
    for p, name, va in ((0.5, "p50", "bottom"), (0.99, "p99", "top")):
        ax.axhline(p, color="0.6", linewidth=0.6, linestyle=":")
        ax.text(0.005, p, name, transform=ax.get_yaxis_transform(), va=va, fontsize=7, color="0.5")
    for i, (label, s) in enumerate(data.items()):
        color = f"C{i % 10}"
        n = s.size
        if n > _CDF_POINTS:  # ranks evenly spread, plus ranks crowding towards the top for the tail
            tail = n - np.geomspace(1, n, _CDF_POINTS // 2)
            ranks = np.unique(np.r_[np.linspace(1, n, _CDF_POINTS // 2), tail, n].round().astype(np.int64))
            ranks = ranks[(ranks >= 1) & (ranks <= n)]
        else:
            ranks = np.arange(1, n + 1)
        pct = percentiles(np.rint(s * 1e3), (50, 99))  # of the latencies in ns
        p50, p99 = pct[50] / 1e3, pct[99] / 1e3
        ax.step(s[ranks - 1], ranks / n, where="post", color=color,
                label=f"{label} (n={n}, p50 {p50:.3g} µs, p99 {p99:.3g} µs)")
        ax.plot([p50, p99], [0.5, 0.99], "o", color=color, markersize=4, alpha=0.5)
    ax.set_xscale("log")
    ax.set_ylim(0, 1)
    return _finish(fig, ax, path, title, "latency (µs)", "fraction of requests ≤ latency", legend_loc="lower right")


def latency_over_time(t_s, offered_rps, achieved_rps, p50_us, p99_us, path, title: str = "Load and latency over time"):
    """Two panels over time (s): offered and achieved rate (requests/s) on top, p50 and p99 (µs, log) below.

    All arrays have the same length; NaN marks an empty bin (drawn as a gap). Writes a PNG to path.
    """
    t = _vector("t_s", t_s)
    if t.size == 0:
        raise ValueError("latency_over_time needs at least one time bin")
    offered = _vector("offered_rps", offered_rps, t.size)
    achieved = _vector("achieved_rps", achieved_rps, t.size)
    p50 = _vector("p50_us", p50_us, t.size)
    p99 = _vector("p99_us", p99_us, t.size)

    fig, (top, bottom) = _figure(2, figsize=(8.0, 6.0))
    marker = "o" if t.size == 1 else None
    top.plot(t, offered, "--", marker=marker, color="0.4", label="offered")
    top.plot(t, achieved, "-", marker=marker, color="C0", label="achieved")
    top.yaxis.set_major_formatter(_ticks(_si))
    top.set_ylabel("rate (requests/s)")
    top.legend(fontsize=8)
    top.grid(True, alpha=0.3)
    bottom.plot(t, p50, "-", marker=marker, color="C2", label="p50")
    bottom.plot(t, p99, "-", marker=marker, color="C3", label="p99")
    _log_y_if_positive(bottom, p50, p99)
    bottom.set_ylabel("latency (µs)")
    bottom.set_xlabel("time (s)")
    bottom.legend(fontsize=8)
    bottom.grid(True, which="both", alpha=0.3)
    fig.suptitle(title)
    return _save(fig, path)
