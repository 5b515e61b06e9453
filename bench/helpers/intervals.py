"""intervals.py: the bootstrap intervals behind every comparison the suites claim: B's median over A's (unpaired rounds of two builds), the median of per-round ratios (B and A run back to back in each round) or differences, a ratio of sums over paired draws, and a mean, each with its 95% interval (the project's rule: a target is met only when the interval clears it)."""
from __future__ import annotations

import numpy as np

RESAMPLES = 10_000


def ratio_interval(a, b, seed: int = 0) -> dict:
    """{"ratio": median(b) / median(a), "lo", "hi"}: the 2.5th and 97.5th percentiles of that
    ratio over RESAMPLES resamples of each side; None each where a side has fewer than two
    values (None values left out) or A's median is 0."""
    va, vb = (np.array([v for v in vs if v is not None], float) for vs in (a, b))
    if len(va) < 2 or len(vb) < 2 or not np.median(va):
        return {"ratio": None, "lo": None, "hi": None}
    rng = np.random.default_rng(seed)
    ra = np.median(va[rng.integers(0, len(va), (RESAMPLES, len(va)))], axis=1)
    rb = np.median(vb[rng.integers(0, len(vb), (RESAMPLES, len(vb)))], axis=1)
    ok = ra > 0
    lo, hi = np.percentile(rb[ok] / ra[ok], [2.5, 97.5])
    return {"ratio": float(np.median(vb) / np.median(va)), "lo": float(lo), "hi": float(hi)}


def round_ratio_interval(a, b, seed: int = 0) -> dict:
    """{"ratio": median of b[i] / a[i], "lo", "hi"} for rounds in which A and B ran back to back
    (a[i] and b[i] of round i): the machine's drift from round to round, which both share, leaves
    each round's ratio; the 2.5th and 97.5th percentiles of that median over RESAMPLES resamples
    of the rounds. None each with fewer than two rounds (a pair with a None or an a of 0 is left
    out)."""
    if len(a) != len(b):
        raise ValueError(f"rounds need two lists of one length, got {len(a)} and {len(b)}")
    r = np.array([y / x for x, y in zip(a, b) if x and y is not None], float)
    if len(r) < 2:
        return {"ratio": None, "lo": None, "hi": None}
    m = np.median(r[np.random.default_rng(seed).integers(0, len(r), (RESAMPLES, len(r)))], axis=1)
    lo, hi = np.percentile(m, [2.5, 97.5])
    return {"ratio": float(np.median(r)), "lo": float(lo), "hi": float(hi)}


def round_difference_interval(a, b, seed: int = 0) -> dict:
    """{"diff": median of b[i] - a[i], "lo", "hi"} for rounds in which A and B ran together: the
    2.5th and 97.5th percentiles of that median over RESAMPLES resamples of the rounds (an added
    cost in the measure's own unit, where a ratio would hide it). lo and hi None with fewer than
    two rounds."""
    if len(a) != len(b):
        raise ValueError(f"rounds need two lists of one length, got {len(a)} and {len(b)}")
    d = np.asarray(b, float) - np.asarray(a, float)
    if len(d) < 2:
        return {"diff": float(np.median(d)) if len(d) else None, "lo": None, "hi": None}
    m = np.median(d[np.random.default_rng(seed).integers(0, len(d), (RESAMPLES, len(d)))], axis=1)
    lo, hi = np.percentile(m, [2.5, 97.5])
    return {"diff": float(np.median(d)), "lo": float(lo), "hi": float(hi)}


def paired_ratio_interval(a, b, seed: int = 0, stat=None) -> dict:
    """{"ratio": stat(b) / stat(a), "lo", "hi"} for paired values (a[i] and b[i] measured on the
    same draw: one arrival sequence served by two policies, one request's accesses under two
    placements): the 2.5th and 97.5th percentiles of that ratio over RESAMPLES resamples of the
    pairs. stat: of each resample's values, row-wise (default: the sum; e.g. lambda v:
    np.percentile(v, 99, axis=-1)). None each with fewer than two pairs or stat(a) = 0."""
    va, vb = np.asarray(a, float), np.asarray(b, float)
    if va.shape != vb.shape or va.ndim != 1:
        raise ValueError(f"paired values need two lists of one length, got {va.shape} and {vb.shape}")
    stat = stat or (lambda v: v.sum(axis=-1))
    if len(va) < 2 or not stat(va):
        return {"ratio": None, "lo": None, "hi": None}
    idx = np.random.default_rng(seed).integers(0, len(va), (RESAMPLES, len(va)))
    sa, sb = stat(va[idx]), stat(vb[idx])
    ok = sa > 0
    lo, hi = np.percentile(sb[ok] / sa[ok], [2.5, 97.5])
    return {"ratio": float(stat(vb) / stat(va)), "lo": float(lo), "hi": float(hi)}


def mean_interval(x, seed: int = 0) -> dict:
    """{"mean", "lo", "hi"}: x's mean and the 2.5th and 97.5th percentiles of the mean over
    RESAMPLES resamples; lo and hi None with fewer than two values."""
    v = np.asarray(x, float)
    if len(v) < 2:
        return {"mean": float(v.mean()) if len(v) else None, "lo": None, "hi": None}
    m = v[np.random.default_rng(seed).integers(0, len(v), (RESAMPLES, len(v)))].mean(axis=1)
    lo, hi = np.percentile(m, [2.5, 97.5])
    return {"mean": float(v.mean()), "lo": float(lo), "hi": float(hi)}
