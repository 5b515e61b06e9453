"""latency_histogram.py: an HDR (High Dynamic Range) latency histogram in numpy, bucketed as HdrHistogram_c, recorded vectorised."""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["HdrHistogram", "EmptyHistogramError", "DEFAULT_PERCENTILES", "percentiles"]

DEFAULT_PERCENTILES = (50, 90, 95, 99, 99.9, 100)

_CHUNK = 1 << 16  # values recorded per numpy pass: keeps temporaries in cache and bounds memory
_INT64_MAX = (1 << 63) - 1


class EmptyHistogramError(ValueError):
    """A statistic (percentile, min, max, mean) was asked of a histogram holding no values."""


class HdrHistogram:
    """Counts of non-negative integer values (e.g. latencies in ns) with `significant_figures` of precision.

    Values v and w share a count slot only when they agree to `significant_figures` decimal digits:
    a value is reported back as the highest value of its slot (its "highest equivalent value"),
    which is at most v * (1 + 10**-significant_figures) (plus `lowest_discernible` - 1). The
    count, min, max and sum are kept exactly beside the buckets.
    """

    def __init__(self, lowest_discernible: int = 1, highest_trackable: int = 3_600_000_000_000,
                 significant_figures: int = 3):
        for name, v in (("lowest_discernible", lowest_discernible), ("highest_trackable", highest_trackable),
                        ("significant_figures", significant_figures)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name} must be an int, not {type(v).__name__}")
        lowest_discernible, highest_trackable = int(lowest_discernible), int(highest_trackable)
        significant_figures = int(significant_figures)
        if lowest_discernible < 1:
            raise ValueError(f"lowest_discernible must be >= 1, not {lowest_discernible}")
        if not 1 <= significant_figures <= 5:
            raise ValueError(f"significant_figures must be in 1..5, not {significant_figures}")
        if not 2 * lowest_discernible <= highest_trackable <= _INT64_MAX:
            raise ValueError(f"highest_trackable must be in 2 * lowest_discernible ({2 * lowest_discernible})"
                             f"..2**63-1, not {highest_trackable}")
        self.lowest_discernible = lowest_discernible
        self.highest_trackable = highest_trackable
        self.significant_figures = significant_figures

        # The layout of hdr_calculate_bucket_config() in HdrHistogram_c.
        self._unit_magnitude = lowest_discernible.bit_length() - 1  # floor(log2(lowest_discernible))
        sub_bucket_count_magnitude: int = (2 * 10 ** significant_figures - 1).bit_length()  # ceil(log2(2*10^sf))
        self._half_magnitude = max(sub_bucket_count_magnitude, 1) - 1
        self.sub_bucket_count = 1 << (self._half_magnitude + 1)
        self._half_count = self.sub_bucket_count // 2
        self._mask = (self.sub_bucket_count - 1) << self._unit_magnitude
        if self._unit_magnitude + self._half_magnitude > 61:
            raise ValueError("lowest_discernible too large for this many significant_figures")
        smallest_untrackable, buckets = self.sub_bucket_count << self._unit_magnitude, 1
        while smallest_untrackable <= highest_trackable:
            if smallest_untrackable > _INT64_MAX // 2:
                buckets += 1
                break
            smallest_untrackable <<= 1
            buckets += 1
        self.bucket_count = buckets
        self.counts = np.zeros((buckets + 1) * self._half_count, dtype=np.int64)
        self.reset()

    # -- recording ---------------------------------------------------------------------------

    def reset(self) -> None:
        """Forgets every recorded value (the layout stays)."""
        self.counts[:] = 0
        self._count = 0
        self._min: int | None = None
        self._max: int | None = None
        self._sum = 0  # exact, a Python int
        self._m2 = 0.0  # sum of squared deviations from the mean (Chan et al.), for stddev
        self.clamped = 0  # values above highest_trackable recorded as highest_trackable (clamp=True)

    def record(self, values: ArrayLike, clamp: bool = False) -> None:
        """Records one value or an array of them (ints; floats are rounded to the nearest int).

        Negative or non-finite values raise ValueError, and so do values above highest_trackable
        unless clamp is true: then they are recorded as highest_trackable and counted in
        `self.clamped`. Nothing is recorded when a ValueError is raised.
        """
        v, clamped = self._checked(values, clamp)
        self.clamped += clamped
        chunk = max(_CHUNK, self.counts.size // 4)  # so a chunk's bincount costs no more than its values
        for start in range(0, v.size, chunk):
            self._record_chunk(v[start:start + chunk])

    def _checked(self, values: ArrayLike, clamp: bool) -> tuple[NDArray[np.int64], int]:
        """The values as a flat int64 array (clamped if asked) and how many were clamped; raises if one is bad."""
        a = np.asarray(values)
        if a.dtype.kind == "O":  # Python ints beyond 64 bits (or not numbers at all): the rare slow path
            try:
                ints = [int(x) for x in a.ravel()]
            except (TypeError, ValueError):
                raise TypeError("expected integer values") from None
            if ints and min(ints) < 0:
                raise ValueError(f"value {min(ints)} is negative; only non-negative values can be recorded")
            big = [x for x in ints if x > self.highest_trackable]
            if big and not clamp:
                raise ValueError(f"value {max(big)} exceeds highest_trackable {self.highest_trackable} "
                                 f"(record(..., clamp=True) clamps it)")
            return np.array([min(x, self.highest_trackable) for x in ints], dtype=np.int64), len(big)
        if a.dtype.kind not in "iuf":
            raise TypeError(f"expected integer values, got {a.dtype} array")
        a = a.ravel()
        if a.size == 0:
            return a.astype(np.int64), 0
        if a.dtype.kind == "f":
            if not np.isfinite(a).all():
                raise ValueError(f"value {float(a[~np.isfinite(a)][0])!r} is not finite")
            a = np.rint(a)
        lo, hi = a.min(), a.max()
        if lo < 0:
            raise ValueError(f"value {_show(lo)} is negative; only non-negative values can be recorded")
        over = 0
        if hi > self.highest_trackable:
            if not clamp:
                raise ValueError(f"value {_show(hi)} exceeds highest_trackable {self.highest_trackable} "
                                 f"(record(..., clamp=True) clamps it)")
            above = a > self.highest_trackable
            over = int(np.count_nonzero(above))
            a = np.where(above, a.dtype.type(self.highest_trackable), a)
        return a.astype(np.int64, copy=False), over

    def _record_chunk(self, v: NDArray[np.int64]) -> None:
        """Adds a checked int64 chunk to the counts and the exact statistics."""
        n = int(v.size)
        if n == 0:
            return
        idx = self._indices(v)
        first = int(idx.min())
        added = np.bincount(idx - first)
        self.counts[first:first + added.size] += added
        lo, hi = int(v.min()), int(v.max())
        if hi * n <= _INT64_MAX:
            s = int(v.sum())
        else:  # exact sum of large values: add the high and low 32 bits apart, each far from overflow
            s = (int((v >> 32).sum()) << 32) + int((v & 0xFFFFFFFF).sum())
        f = v.astype(np.float64)
        d = f - s / n
        m2 = float(np.square(d).sum())  # not d @ d: BLAS's dot wakes its threads, which then spin (a load
        #                                 generator's core, on a small machine)
        if self._count:
            delta = s / n - self._sum / self._count
            self._m2 += m2 + delta * delta * self._count * n / (self._count + n)
            assert self._min is not None and self._max is not None  # set with the first values (self._count > 0)
            self._min, self._max = min(self._min, lo), max(self._max, hi)
        else:
            self._m2, self._min, self._max = m2, lo, hi
        self._count += n
        self._sum += s

    def _indices(self, v: NDArray[np.int64]) -> NDArray[np.int64]:
        """The counts index of each value (counts_index_for() of HdrHistogram_c, on an array)."""
        m = v | self._mask
        # Bit length of m, from the float exponent; the int64 -> float64 rounding can only carry
        # up to the next power of two, which the shift test detects and takes back.
        e = np.frexp(m.astype(np.float64))[1].astype(np.int64)
        e -= (m >> (e - 1)) == 0
        bucket = e - (self._unit_magnitude + self._half_magnitude + 1)
        sub = v >> (bucket + self._unit_magnitude)
        return ((bucket + 1) << self._half_magnitude) + sub - self._half_count

    def merge(self, other: HdrHistogram) -> None:
        """Adds every value recorded in other (a histogram with the same three parameters) to this one."""
        if not isinstance(other, HdrHistogram):
            raise TypeError(f"can only merge an HdrHistogram, not {type(other).__name__}")
        mine = (self.lowest_discernible, self.highest_trackable, self.significant_figures)
        theirs = (other.lowest_discernible, other.highest_trackable, other.significant_figures)
        if mine != theirs:
            raise ValueError(f"cannot merge histograms with different (lowest_discernible, highest_trackable, "
                             f"significant_figures): {mine} != {theirs}")
        if not other._count:
            self.clamped += other.clamped
            return
        if self._count:
            n, m = self._count, other._count
            delta = other._sum / m - self._sum / n
            self._m2 += other._m2 + delta * delta * n * m / (n + m)
            assert self._min is not None and self._max is not None  # both hold values (self._count > 0)
            assert other._min is not None and other._max is not None
            self._min, self._max = min(self._min, other._min), max(self._max, other._max)
        else:
            self._m2, self._min, self._max = other._m2, other._min, other._max
        self.counts += other.counts
        self._count += other._count
        self._sum += other._sum
        self.clamped += other.clamped

    # -- statistics --------------------------------------------------------------------------

    @property
    def count(self) -> int:
        """How many values were recorded."""
        return self._count

    def __len__(self) -> int:
        return self._count

    def _need_values(self) -> None:
        if not self._count:
            raise EmptyHistogramError("the histogram holds no values")

    @property
    def min(self) -> int:
        """The smallest recorded value, exactly."""
        self._need_values()
        assert self._min is not None  # set with the first value
        return self._min

    @property
    def max(self) -> int:
        """The largest recorded value, exactly."""
        self._need_values()
        assert self._max is not None  # set with the first value
        return self._max

    @property
    def mean(self) -> float:
        """The mean of the recorded values (from their exact sum)."""
        self._need_values()
        return self._sum / self._count

    @property
    def stddev(self) -> float:
        """The population standard deviation of the recorded values (streamed, in float64)."""
        self._need_values()
        return math.sqrt(max(self._m2, 0.0) / self._count)

    def lowest_equivalent_value(self, value: int) -> int:
        """The smallest value sharing value's count slot."""
        return self._value_at_index(int(self._indices(np.array([value], dtype=np.int64))[0]))

    def highest_equivalent_value(self, value: int) -> int:
        """The largest value sharing value's count slot (how a percentile in that slot is reported)."""
        return self._highest_at_index(int(self._indices(np.array([value], dtype=np.int64))[0]))

    def _value_at_index(self, index: int) -> int:
        bucket = (index >> self._half_magnitude) - 1
        sub = (index & (self._half_count - 1)) + self._half_count
        if bucket < 0:
            sub -= self._half_count
            bucket = 0
        return sub << (bucket + self._unit_magnitude)

    def _highest_at_index(self, index: int) -> int:
        bucket = max((index >> self._half_magnitude) - 1, 0)
        return self._value_at_index(index) + (1 << (bucket + self._unit_magnitude)) - 1

    def value_at_percentile(self, p: float) -> int:
        """The value below or at which p percent of the recorded values lie (0 <= p <= 100).

        The highest equivalent value of the first slot at which ceil(p/100 * count) values have
        been counted (p read as the decimal it prints as, so 99.9 is exactly 999/10), but never
        above the exact max; p=0 gives the exact min.
        """
        return self.percentiles((p,))[p]

    def percentiles(self, ps: Sequence[float] = DEFAULT_PERCENTILES) -> dict[float, int]:
        """{p: value_at_percentile(p)} for each p in ps, from one pass over the counts."""
        self._need_values()
        assert self._min is not None and self._max is not None  # set with the first value
        ranks = [_rank(p, self._count) for p in ps]
        cumulative = np.cumsum(self.counts)
        indices = np.searchsorted(cumulative, [max(r, 1) for r in ranks], side="left")
        out: dict[float, int] = {}
        for p, r, i in zip(ps, ranks, indices):
            out[p] = self._min if r == 0 else min(self._highest_at_index(int(i)), self._max)
        return out

    def to_dict(self) -> dict[str, float | None]:
        """count, min, mean, p50, p90, p95, p99, p99.9 and max, in the recorded unit (None but count when empty)."""
        keys = ("min", "mean", "p50", "p90", "p95", "p99", "p99.9", "max")
        if not self._count:
            return {"count": 0, **dict.fromkeys(keys)}
        pct = self.percentiles((50, 90, 95, 99, 99.9))
        return {"count": self._count, "min": self._min, "mean": self.mean, "p50": pct[50], "p90": pct[90],
                "p95": pct[95], "p99": pct[99], "p99.9": pct[99.9], "max": self._max}

    def __repr__(self) -> str:
        return (f"HdrHistogram(lowest_discernible={self.lowest_discernible}, highest_trackable="
                f"{self.highest_trackable}, significant_figures={self.significant_figures}, count={self._count})")


def percentiles(values: ArrayLike, ps: Sequence[float] = (50, 99)) -> dict[float, int] | dict[float, None]:
    """{p: value at percentile p} of values (non-negative integers, e.g. latencies in ns) from an
    HdrHistogram with its default precision (3 significant figures, never above the exact max):
    the one way every report, table and command-line line of splitrpc computes percentiles, so
    that they compare. {p: None} for each p when there are no values."""
    h = HdrHistogram()
    h.record(values)
    if not h.count:
        return dict.fromkeys(ps)
    return h.percentiles(ps)


def _rank(p: float, count: int) -> int:
    """ceil(p/100 * count), exactly, with p taken as the decimal it prints as; checks 0 <= p <= 100."""
    try:
        pf = float(p)
    except (TypeError, ValueError):
        raise TypeError(f"percentile must be a number, not {type(p).__name__}") from None
    if not 0.0 <= pf <= 100.0:  # NaN fails too
        raise ValueError(f"percentile must be in 0..100, not {p!r}")
    q = Fraction(repr(pf)) * count / 100
    return -(-q.numerator // q.denominator)


def _show(x: np.integer[Any] | np.floating[Any]) -> str:
    """A value for an error message: an int when it is one."""
    xf = float(x)
    return str(int(x)) if xf.is_integer() else repr(xf)
