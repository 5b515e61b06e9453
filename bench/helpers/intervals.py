"""intervals.py: the one bootstrap interval of the A/B suites: B's median over A's with its 95% interval, each side's rounds resampled (the project's rule for a claim that one build beats another)."""
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
