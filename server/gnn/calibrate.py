"""calibrate.py: the pure part of Quiver's PSGS calibration (§4.2.1): latency-vs-PSGS curves per sampling lane from measurements, their four crossing points, the routing thresholds and latency bounds they imply, saving/loading a calibration (JSON) and plotting it (after Quiver, Tan et al., arXiv 2023).

Lanes are named by strings: "cpu" (the lane that samples on CPU cores) and "gpu" (the batched
accelerator lane; "bulk", the serving code's name for its CPU stand-in, is accepted as an alias
and stored as "gpu"; the caller says what the lane really is through ``labels``, e.g.
{"gpu": "bulk (stand-in for GPU)"}, which the plot and the saved file carry). A batch whose
summed seed PSGS is below a threshold goes to the CPU lane, otherwise to the GPU lane (§4.2.2),
so threshold +inf means "always CPU" and 0 means "always GPU".

Curves: measurements are binned by batch PSGS (explicit edges, or a count of log-spaced bins over
the observed range; the last bin includes its right edge, samples outside the edges are left
out); per lane and bin: mean latency, max latency, count. A bin's centre is the geometric mean of
its edges (the arithmetic mean when its left edge is 0). The bins *used* are those with any sample
in either lane; every used bin needs at least ``min_samples`` samples in each lane, else
``CalibrationError`` (``adaptive_edges`` merges adjacent bins until each has enough).

The four points (cpu statistic = gpu statistic):
  "cpu_preferred"  CPU max  = GPU mean   (point 1)
  "gpu_preferred"  CPU mean = GPU max    (point 2)
  "strict"         CPU max  = GPU max    (point 3, latency preferred; alias "latency_preferred")
  "loose"          CPU mean = GPU mean   (point 4, throughput preferred; alias "throughput_preferred")
Crossing rule: with d_i = cpu_i - gpu_i over the used bins in PSGS order, the crossing is where
the CPU curve goes from below the GPU curve to at or above it *for good*: at the i with d_i < 0
and d_j >= 0 for every j > i, linearly interpolated in PSGS between the two bins' centres:
x = c_i + (c_{i+1} - c_i) · (-d_i) / (d_{i+1} - d_i). A max over a few dozen batches is noisy
where both lanes are fast, and the CPU's max can poke above the GPU's in one small bin; the first
sign change would then send nearly everything to the GPU lane, while the lanes' real order
(cheap CPU for small batches, the GPU for large ones) is the one at the top of the range. With no
such i: +inf when the CPU curve is below in the last used bin (always CPU), 0 when it is at or
above in every used bin (always GPU). Both are returned, never raised.

The bounds a point implies:
* ``Crossing.latency_s``: the two curves' common interpolated value at the crossing (NaN at 0 or
  +inf); for "strict" the paper's latency bound at the crossing (both lanes' max there), for
  "loose" the mean latency there.
* ``bound_at(curves, threshold, psgs)`` / ``Calibration.bound_at(psgs, policy)``: per batch PSGS,
  the max latency measured in that PSGS's bin on the lane the threshold routes it to (a bin
  straddling the threshold takes both lanes' max): the per-call bound a serving run under that
  threshold is checked against ("strict keeps >= 99 % of calls under their calibrated bound").
* ``Crossing.bound_s``: the largest of those over the measured range, a single worst-case number.
"""
from __future__ import annotations

import json
import math
import numbers
import os
from dataclasses import dataclass, field

import numpy as np

LANES = ("cpu", "gpu")
LANE_ALIASES = {"bulk": "gpu", "emulated": "gpu"}  # the serving code's stand-ins for the GPU lane
MIN_SAMPLES = 20  # samples per lane in every used bin
# policy -> (CPU statistic, GPU statistic) whose curves cross there
POINTS = {"cpu_preferred": ("max", "mean"), "gpu_preferred": ("mean", "max"),
          "strict": ("max", "max"), "loose": ("mean", "mean")}
ALIASES = {"latency_preferred": "strict", "throughput_preferred": "loose"}
FORMAT = "splitrpc.gnn.calibration"
VERSION = 1
DEFAULT_LABELS = {"cpu": "CPU", "gpu": "GPU"}


# The crossing point a calibration routes by unless told otherwise (saved in the file as "default";
# `splitrpc serve --gnn-calibration` uses the file's): latency first, as a serving system with a
# latency target wants.
DEFAULT_POINT = "strict"


class CalibrationError(ValueError):
    """The measurements cannot calibrate (too few samples, a lane missing) or a calibration file
    is wrong or corrupt."""


def policy_name(policy: str) -> str:
    """The canonical name of a threshold policy (aliases resolved); ValueError if unknown."""
    p = ALIASES.get(policy, policy)
    if p not in POINTS:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(list(POINTS) + list(ALIASES))}")
    return p


@dataclass(frozen=True)
class Measurements:
    """One row per measured batch: its lane ("cpu" or "gpu"), summed PSGS and latency (s)."""

    lane: np.ndarray
    psgs: np.ndarray
    latency_s: np.ndarray

    def __post_init__(self):
        lane = np.array([LANE_ALIASES.get(x, x) if isinstance(x, str) else x
                         for x in np.asarray(self.lane, dtype=object).ravel().tolist()], dtype=object)
        psgs = np.asarray(self.psgs, dtype=np.float64).ravel()
        lat = np.asarray(self.latency_s, dtype=np.float64).ravel()
        if not lane.size == psgs.size == lat.size:
            raise ValueError(f"lane, psgs and latency_s differ in length ({lane.size}, {psgs.size}, {lat.size})")
        bad = [i for i, x in enumerate(lane.tolist()) if x not in LANES]
        if bad:
            raise ValueError(f"lane must be one of {LANES}; row {bad[0]} has {lane[bad[0]]!r}")
        for what, a in (("psgs", psgs), ("latency_s", lat)):
            if not np.all(np.isfinite(a)) or np.any(a < 0):
                i = int(np.flatnonzero(~np.isfinite(a) | (a < 0))[0])
                raise ValueError(f"{what} must be finite and >= 0; row {i} has {a[i]}")
        object.__setattr__(self, "lane", lane.astype(str))
        object.__setattr__(self, "psgs", psgs)
        object.__setattr__(self, "latency_s", lat)

    @classmethod
    def from_records(cls, records) -> "Measurements":
        """From an iterable of (lane, psgs, latency_s)."""
        rows = list(records)
        if any(len(r) != 3 for r in rows):
            raise ValueError("records must be (lane, psgs, latency_s) triples")
        return cls([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])

    def __len__(self):
        return int(self.psgs.size)


@dataclass(frozen=True)
class Curves:
    """Per lane and PSGS bin: mean and max latency (s; NaN for an empty bin) and sample count."""

    edges: np.ndarray    # (b + 1,) increasing
    centres: np.ndarray  # (b,)
    mean: dict           # lane -> (b,)
    max: dict            # lane -> (b,)
    count: dict          # lane -> (b,) int64

    @property
    def used(self) -> np.ndarray:
        """Indices of the bins with any sample."""
        return np.flatnonzero(sum(self.count[l] for l in LANES) > 0)

    def to_dict(self) -> dict:
        return {"edges": _enc_list(self.edges), "centres": _enc_list(self.centres),
                "lanes": {l: {"mean": _enc_list(self.mean[l]), "max": _enc_list(self.max[l]),
                              "count": [int(c) for c in self.count[l]]} for l in LANES}}

    @classmethod
    def from_dict(cls, d: dict) -> "Curves":
        return cls(_dec_array(d["edges"]), _dec_array(d["centres"]),
                   {l: _dec_array(d["lanes"][l]["mean"]) for l in LANES},
                   {l: _dec_array(d["lanes"][l]["max"]) for l in LANES},
                   {l: np.asarray(d["lanes"][l]["count"], dtype=np.int64) for l in LANES})


def _edges(meas: Measurements, bins) -> np.ndarray:
    if isinstance(bins, numbers.Integral) and not isinstance(bins, bool):
        if bins < 1:
            raise ValueError(f"bins must be a count >= 1 or explicit edges, got {bins}")
        if len(meas) == 0:
            raise CalibrationError("no measurements to bin")
        lo, hi = float(meas.psgs.min()), float(meas.psgs.max())
        if lo <= 0 or hi <= lo:
            raise ValueError(f"log-spaced bins need PSGS > 0 spanning a range (observed {lo} .. {hi}); "
                             "pass explicit edges")
        e = np.geomspace(lo, hi, int(bins) + 1)
        e[0], e[-1] = lo, hi
        return e
    try:
        e = np.asarray(bins, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"bins must be a count >= 1 or explicit edges, got {bins!r}") from None
    if e.ndim != 1 or e.size < 2 or not np.all(np.isfinite(e)) or np.any(np.diff(e) <= 0) or e[0] < 0:
        raise ValueError("bins must be a count >= 1 or at least two finite, non-negative, strictly increasing edges")
    return e


def adaptive_edges(meas: Measurements, bins, min_samples: int = MIN_SAMPLES) -> np.ndarray:
    """Bin edges with at least min_samples of each lane in every bin: the edges of ``bins`` (as in
    ``curves``), adjacent bins merged left to right until each holds enough of both lanes (a short
    remainder at the right end joins the bin before it). CalibrationError when even one bin over
    the whole range has too few of a lane."""
    e = _edges(meas, bins)
    b = e.size - 1
    idx = np.searchsorted(e, meas.psgs, side="right") - 1
    idx[meas.psgs == e[-1]] = b - 1
    inside = (idx >= 0) & (idx < b)
    counts = {lane: np.bincount(idx[inside & (meas.lane == lane)], minlength=b) for lane in LANES}
    for lane in LANES:
        if counts[lane].sum() < min_samples:
            raise CalibrationError(f"the {lane!r} lane has {int(counts[lane].sum())} samples inside the bins; "
                                   f"at least {min_samples} are needed")
    keep = [0]  # indices into e of the merged edges
    acc = {lane: 0 for lane in LANES}
    for i in range(b):
        for lane in LANES:
            acc[lane] += int(counts[lane][i])
        if all(acc[lane] >= min_samples for lane in LANES):
            keep.append(i + 1)
            acc = {lane: 0 for lane in LANES}
    if keep[-1] != b:  # the remainder is short: extend the last full bin to the end
        keep[-1] = b
    return e[keep]


def curves(meas: Measurements, bins) -> Curves:
    """Mean/max latency and count per lane and PSGS bin (bins: a count of log-spaced bins over the
    observed PSGS range, or explicit edges)."""
    if not isinstance(meas, Measurements):
        raise ValueError(f"meas must be Measurements, got {type(meas).__name__}")
    e = _edges(meas, bins)
    b = e.size - 1
    centres = np.where(e[:-1] > 0, np.sqrt(e[:-1] * e[1:]), (e[:-1] + e[1:]) / 2)
    idx = np.searchsorted(e, meas.psgs, side="right") - 1
    idx[meas.psgs == e[-1]] = b - 1  # the last bin includes its right edge
    inside = (idx >= 0) & (idx < b)
    mean, mx, count = {}, {}, {}
    for lane in LANES:
        sel = inside & (meas.lane == lane)
        i, lat = idx[sel], meas.latency_s[sel]
        c = np.bincount(i, minlength=b).astype(np.int64)
        s = np.bincount(i, weights=lat, minlength=b)
        m = np.full(b, -np.inf)
        np.maximum.at(m, i, lat)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean[lane] = np.where(c > 0, s / np.maximum(c, 1), np.nan)
        mx[lane] = np.where(c > 0, m, np.nan)
        count[lane] = c
    return Curves(e, centres, mean, mx, count)


@dataclass(frozen=True)
class Crossing:
    """A threshold: batches with PSGS below ``psgs`` go to the CPU lane (inf: always CPU; 0:
    always GPU). ``latency_s``: the crossing curves' value there (NaN at 0/inf); ``bound_s``: the
    worst max latency over the measured bins under this routing."""

    psgs: float
    latency_s: float
    bound_s: float

    def to_dict(self) -> dict:
        return {"psgs": _enc(self.psgs), "latency_s": _enc(self.latency_s), "bound_s": _enc(self.bound_s)}

    @classmethod
    def from_dict(cls, d: dict) -> "Crossing":
        return cls(_dec(d["psgs"]), _dec(d["latency_s"]), _dec(d["bound_s"]))


def check_samples(cv: Curves, min_samples: int = MIN_SAMPLES):
    """CalibrationError unless both lanes have samples and every used bin has at least
    min_samples of each lane."""
    for lane in LANES:
        if cv.count[lane].sum() == 0:
            raise CalibrationError(f"no measurements of the {lane!r} lane inside the bins; every used bin needs "
                                   f"at least {min_samples} samples of each lane")
    used = cv.used
    if used.size == 0:
        raise CalibrationError("no measurements inside the bins")
    for i in used.tolist():
        for lane in LANES:
            c = int(cv.count[lane][i])
            if c < min_samples:
                raise CalibrationError(f"bin {i} (PSGS {cv.edges[i]:.6g} .. {cv.edges[i + 1]:.6g}) has {c} samples "
                                       f"of the {lane!r} lane; at least {min_samples} are needed (measure more "
                                       "batches there or use fewer bins)")


def _crossing(cv: Curves, cpu_stat: str, gpu_stat: str) -> tuple[float, float]:
    used = cv.used
    c = cv.centres[used]
    cpu = getattr(cv, cpu_stat)["cpu"][used]
    gpu = getattr(cv, gpu_stat)["gpu"][used]
    d = cpu - gpu
    if d[-1] < 0:
        return math.inf, math.nan
    below = np.flatnonzero(d < 0)
    if below.size == 0:
        return 0.0, math.nan
    i = int(below[-1])  # the last bin with the CPU below; at or above in every bin after it
    t = -d[i] / (d[i + 1] - d[i])
    return float(c[i] + (c[i + 1] - c[i]) * t), float(cpu[i] + (cpu[i + 1] - cpu[i]) * t)


def routed_max(cv: Curves, threshold: float) -> np.ndarray:
    """Per bin, the max latency of the lane(s) that PSGS < threshold -> CPU, else GPU, routes the
    bin to (a bin straddling the threshold: the larger of both lanes' max); NaN for unused bins."""
    out = np.full(cv.centres.size, np.nan)
    for i in cv.used.tolist():
        lo, hi = cv.edges[i], cv.edges[i + 1]
        lanes = ("cpu",) if hi < threshold else ("gpu",) if lo >= threshold else LANES
        out[i] = max(float(cv.max[lane][i]) for lane in lanes)
    return out


def bound(cv: Curves, threshold: float) -> float:
    """The worst max latency over the used bins under that routing (``routed_max``'s maximum)."""
    r = routed_max(cv, threshold)
    return float(np.nanmax(r)) if np.any(~np.isnan(r)) else math.nan


def bound_at(cv: Curves, threshold: float, psgs) -> np.ndarray:
    """The latency bound for batches of the given PSGS under that routing: the routed max of the
    bin holding each PSGS (an unused bin takes the larger of its nearest used neighbours; PSGS
    outside the edges take the first or last bin's)."""
    r = routed_max(cv, threshold)
    used = cv.used
    if used.size == 0:
        raise CalibrationError("no measurements inside the bins")
    idx = np.arange(r.size)
    left = np.maximum.accumulate(np.where(np.isnan(r), -1, idx))  # nearest used bin at or below
    right = np.minimum.accumulate(np.where(np.isnan(r), r.size, idx)[::-1])[::-1]  # at or above
    filled = np.maximum(np.where(left >= 0, r[np.clip(left, 0, None)], -np.inf),
                        np.where(right < r.size, r[np.clip(right, None, r.size - 1)], -np.inf))
    x = np.asarray(psgs, dtype=np.float64)
    b = np.clip(np.searchsorted(cv.edges, x, side="right") - 1, 0, r.size - 1)
    return filled[b]


def crossings(cv: Curves, min_samples: int = MIN_SAMPLES) -> dict:
    """The four crossing points {name: Crossing} (the rule: this module's docstring)."""
    if not isinstance(cv, Curves):
        raise ValueError(f"crossings needs Curves, got {type(cv).__name__}")
    check_samples(cv, min_samples)
    out = {}
    for name, (cs, gs) in POINTS.items():
        x, lat = _crossing(cv, cs, gs)
        out[name] = Crossing(x, lat, bound(cv, x))
    return out


@dataclass(frozen=True)
class Calibration:
    """A calibrated graph + fan-outs: curves, the four crossing points and the default policy."""

    fanouts: tuple
    graph: str
    points: dict         # name -> Crossing
    curves: Curves
    default: str = DEFAULT_POINT
    min_samples: int = MIN_SAMPLES
    labels: dict = field(default_factory=lambda: dict(DEFAULT_LABELS))

    def __post_init__(self):
        object.__setattr__(self, "default", policy_name(self.default))
        object.__setattr__(self, "fanouts", tuple(int(l) for l in self.fanouts))
        object.__setattr__(self, "labels", _labels(self.labels))
        if set(self.points) != set(POINTS):
            raise ValueError(f"points must hold {sorted(POINTS)}, got {sorted(self.points)}")

    def threshold(self, policy: str | None = None) -> float:
        """The PSGS threshold of a policy (None: the default): below it the CPU lane."""
        return self.points[policy_name(policy or self.default)].psgs

    def point(self, policy: str | None = None) -> Crossing:
        return self.points[policy_name(policy or self.default)]

    def bound_at(self, psgs, policy: str | None = None) -> np.ndarray:
        """Per batch PSGS, the calibrated latency bound (s) under a policy's threshold (the
        module-level ``bound_at``)."""
        return bound_at(self.curves, self.threshold(policy), psgs)

    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "graph": self.graph, "fanouts": list(self.fanouts),
                "default": self.default, "min_samples": int(self.min_samples), "labels": dict(self.labels),
                "points": {k: self.points[k].to_dict() for k in POINTS}, "curves": self.curves.to_dict()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=1, allow_nan=False) + "\n"

    def save(self, path):
        """Write the calibration as JSON (atomically: a temporary file renamed over path)."""
        path = os.fspath(path)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(self.to_json())
        os.replace(tmp, path)

    @classmethod
    def from_dict(cls, d: dict, *, where: str = "calibration") -> "Calibration":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise CalibrationError(f"{where}: not a splitrpc GNN calibration (format field "
                                   f"{d.get('format') if isinstance(d, dict) else None!r}, expected {FORMAT!r})")
        if d.get("version") != VERSION:
            raise CalibrationError(f"{where}: calibration version {d.get('version')!r}; this code reads version "
                                   f"{VERSION} (recalibrate)")
        try:
            return cls(tuple(d["fanouts"]), str(d["graph"]),
                       {k: Crossing.from_dict(d["points"][k]) for k in POINTS},
                       Curves.from_dict(d["curves"]), d["default"], int(d["min_samples"]), d["labels"])
        except (KeyError, TypeError, ValueError) as e:
            raise CalibrationError(f"{where}: corrupt calibration file ({type(e).__name__}: {e})") from None

    @classmethod
    def load(cls, path) -> "Calibration":
        path = os.fspath(path)
        try:
            with open(path) as f:
                d = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CalibrationError(f"{path}: not a calibration file (invalid JSON: {e})") from None
        return cls.from_dict(d, where=path)


def calibrate(meas: Measurements, bins, *, fanouts, graph: str, default: str = DEFAULT_POINT,
              min_samples: int = MIN_SAMPLES, labels: dict | None = None) -> Calibration:
    """Curves, crossing points and a Calibration from measurements in one call."""
    cv = curves(meas, bins)
    return Calibration(tuple(fanouts), graph, crossings(cv, min_samples), cv, default, min_samples,
                       dict(labels or {}))


def plot(calibration: Calibration, path, *, labels: dict | None = None, title: str | None = None):
    """A PNG at path: mean (solid) and max (dashed) latency vs batch PSGS per lane, log x, with the
    four crossing points marked and labelled. labels overrides the lanes' names
    (e.g. {"gpu": "bulk (stand-in for GPU)"})."""
    from matplotlib import figure  # no pyplot: nothing global touched; savefig renders with Agg

    cal = calibration
    names = {**cal.labels, **_labels(labels or {}, defaults={})}
    cv = cal.curves
    used = cv.used
    x = cv.centres[used]
    fig = figure.Figure(figsize=(8, 5), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    colours = {"cpu": "tab:blue", "gpu": "tab:orange"}
    for lane in LANES:
        ax.plot(x, cv.mean[lane][used] * 1e3, "-o", ms=3, color=colours[lane], label=f"{names[lane]} mean")
        ax.plot(x, cv.max[lane][used] * 1e3, "--", color=colours[lane], label=f"{names[lane]} max")
    ax.set_xscale("log" if x.size and x.min() > 0 else "symlog")
    titles = {"cpu_preferred": "1 CPU preferred", "gpu_preferred": "2 GPU preferred",
              "strict": "3 strict (latency)", "loose": "4 loose (throughput)"}
    notes = []
    for k, (name, pt) in enumerate(cal.points.items()):
        label = titles[name]
        if math.isfinite(pt.psgs) and pt.psgs > 0:
            ax.axvline(pt.psgs, color="0.4", lw=0.8, ls=":")
            if math.isfinite(pt.latency_s):
                ax.plot([pt.psgs], [pt.latency_s * 1e3], "kx", ms=7)
            ax.annotate(f"{label}\n{pt.psgs:.3g}", xy=(pt.psgs, 1 - 0.1 * k), xycoords=("data", "axes fraction"),
                        fontsize=7, ha="left", va="top")
        else:
            notes.append(f"{label}: {'always ' + names['cpu'] if pt.psgs == math.inf else 'always ' + names['gpu']}"
                         " (no crossing)")
    if notes:
        ax.text(0.01, 0.01, "\n".join(notes), transform=ax.transAxes, fontsize=7, va="bottom")
    ax.set_xlabel("batch PSGS (sum over seeds)")
    ax.set_ylabel("latency (ms)")
    ax.set_title(title or f"PSGS calibration: {cal.graph}, fan-outs {list(cal.fanouts)} (default {cal.default})",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.fspath(path), format="png")


def _labels(labels: dict, defaults: dict = DEFAULT_LABELS) -> dict:
    """Lane labels keyed by canonical lane names ("bulk" -> "gpu"); ValueError for other keys."""
    out = dict(defaults)
    for k, v in dict(labels).items():
        lane = LANE_ALIASES.get(k, k)
        if lane not in LANES:
            raise ValueError(f"labels are per lane ({', '.join(LANES)}); got a label for {k!r}")
        out[lane] = str(v)
    return out


def _enc(x) -> float | str | None:
    """A float as strict JSON: inf as "inf"/"-inf", NaN as null."""
    x = float(x)
    if math.isnan(x):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _dec(x) -> float:
    if x is None:
        return math.nan
    if x in ("inf", "-inf"):
        return math.inf if x == "inf" else -math.inf
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"expected a number, got {x!r}")
    return float(x)


def _enc_list(a) -> list:
    return [_enc(v) for v in np.asarray(a, dtype=np.float64).tolist()]


def _dec_array(a) -> np.ndarray:
    if not isinstance(a, list):
        raise ValueError(f"expected a list, got {type(a).__name__}")
    return np.array([_dec(v) for v in a], dtype=np.float64)
