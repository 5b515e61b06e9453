"""splitrpc.latency_histogram: HDR histogram percentiles against a sorted-array reference, layout, merge and errors."""
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from splitrpc.latency_histogram import EmptyHistogramError, HdrHistogram

HOUR_NS = 3_600_000_000_000
PS = (0, 0.1, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 99.99, 100)


def reference(sorted_values: np.ndarray, p: float) -> int:
    """The value at percentile p of a sorted array: index ceil(p/100 * n) - 1, p read as its decimal."""
    rank = math.ceil(Fraction(repr(float(p))) * len(sorted_values) / 100)
    return int(sorted_values[max(rank, 1) - 1])


def check_percentiles(h: HdrHistogram, values, ps=PS) -> None:
    """Each percentile lies in the slot of the reference value, within 10^-sf relative (plus one unit)."""
    s = np.sort(np.asarray(values, dtype=np.int64))
    unit = 1 << (h.lowest_discernible.bit_length() - 1)
    got = h.percentiles(ps)
    for p in ps:
        ref = reference(s, p)
        v = got[p]
        assert v == h.value_at_percentile(p)
        assert ref <= v <= int(s[-1]), (p, ref, v)
        assert h.lowest_equivalent_value(v) == h.lowest_equivalent_value(ref), (p, ref, v)
        assert v - ref <= ref * 10.0 ** -h.significant_figures + unit, (p, ref, v)
    if 0 in ps:
        assert got[0] == s[0]
    if 100 in ps:
        assert got[100] == s[-1]


def recorded(values, **kw) -> HdrHistogram:
    h = HdrHistogram(**kw)
    h.record(values)
    return h


rng = np.random.default_rng(20240601)
DISTRIBUTIONS = {
    "uniform": rng.integers(0, 10_000_000, 50_000),
    "lognormal-long-tail": np.minimum(rng.lognormal(11, 2.5, 50_000), HOUR_NS).astype(np.int64),
    "constant": np.full(1000, 123_456_789, dtype=np.int64),
    "1ns-to-1e12ns": (10.0 ** rng.uniform(0, 12, 50_000)).astype(np.int64),
    "single": np.array([987_654_321]),
    "small": rng.integers(0, 50, 5000),
}


@pytest.mark.parametrize("sf", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_percentiles_match_sorted_reference(name, sf):
    values = DISTRIBUTIONS[name]
    h = recorded(values, significant_figures=sf)
    check_percentiles(h, values)
    assert h.count == len(h) == values.size
    assert h.min == values.min() and h.max == values.max()
    assert h.mean == pytest.approx(values.mean(), rel=1e-12)
    assert h.stddev == pytest.approx(values.std(), rel=1e-9, abs=1e-9)


def test_percentiles_with_coarse_lowest_discernible():
    values = DISTRIBUTIONS["lognormal-long-tail"]
    check_percentiles(recorded(values, lowest_discernible=1000), values)


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
magnitudes = st.one_of(st.integers(0, 100), st.integers(0, 10**6), st.integers(0, 10**9), st.integers(0, HOUR_NS))


@SETTINGS
@given(values=st.lists(magnitudes, min_size=1, max_size=300), sf=st.integers(1, 5),
       lowest=st.sampled_from([1, 2, 1000]),
       ps=st.lists(st.one_of(st.floats(0, 100), st.sampled_from(PS)), min_size=1, max_size=8))
def test_percentiles_property(values, sf, lowest, ps):
    h = recorded(np.array(values, dtype=np.int64), significant_figures=sf, lowest_discernible=lowest)
    check_percentiles(h, values, tuple(ps) + (0, 100))
    assert (h.min, h.max, h.count) == (min(values), max(values), len(values))


@SETTINGS
@given(a=st.lists(magnitudes, max_size=200), b=st.lists(magnitudes, max_size=200), sf=st.integers(1, 5))
def test_merge_equals_recording_both(a, b, sf):
    ha, hb = recorded(np.array(a, dtype=np.int64), significant_figures=sf), HdrHistogram(significant_figures=sf)
    hb.record(np.array(b, dtype=np.int64))
    both = recorded(np.array(a + b, dtype=np.int64), significant_figures=sf)
    ha.merge(hb)
    assert np.array_equal(ha.counts, both.counts)
    assert ha.count == both.count == len(a) + len(b)
    if a or b:
        assert (ha.min, ha.max, ha.mean) == (both.min, both.max, both.mean)
        assert ha.stddev == pytest.approx(both.stddev, rel=1e-9, abs=1e-6)
        assert ha.percentiles(PS) == both.percentiles(PS)


def test_hdrhistogram_c_layout_and_known_values():
    # hdr_histogram_test.c: hdr_init(1, an hour in us, 3) has 22 buckets of 2048 and 23552 counts
    h = HdrHistogram(1, 3_600_000_000, 3)
    assert (h.bucket_count, h.sub_bucket_count, h.counts.size) == (22, 2048, 23552)
    # hdr_init(20000000, 100000000, 5): a unit of 2**24, so 20000000 and 30000000 share a slot
    h = recorded([100_000_000, 20_000_000, 30_000_000], lowest_discernible=20_000_000,
                 highest_trackable=100_000_000, significant_figures=5)
    assert h.lowest_equivalent_value(20_000_000) == h.lowest_equivalent_value(30_000_000) == 2**24
    assert h.percentiles((0, 50, 66.66, 66.67, 100)) == {0: 20_000_000, 50: 2**25 - 1, 66.66: 2**25 - 1,
                                                         66.67: 100_000_000, 100: 100_000_000}
    # HdrHistogram's classic case: 10000 values of 1000 and one of 100000000
    h = recorded(np.r_[np.full(10_000, 1000), 100_000_000], highest_trackable=3_600_000_000)
    assert h.percentiles((50, 99.99, 99.999)) == {50: 1000, 99.99: 1000, 99.999: 100_000_000}


def test_equivalent_values_and_bucket_edges():
    h = HdrHistogram()
    assert [h.highest_equivalent_value(v) for v in (0, 1, 2047, 2048, 2049, 4096)] == [0, 1, 2047, 2049, 2049, 4099]
    assert h.lowest_equivalent_value(1_000_000) == 999_936
    assert h.highest_equivalent_value(1_000_000) == 1_000_447
    assert h.highest_equivalent_value(HOUR_NS) >= HOUR_NS


def test_percentile_uses_the_decimal_value_of_p():
    h = recorded(np.arange(1, 1001))
    # 99.9/100*1000 is 999.0000000000001 in floating point; the 99.9th percentile of 1..1000 is 999
    assert h.value_at_percentile(99.9) == 999
    assert h.value_at_percentile(0) == 1 and h.value_at_percentile(100) == 1000
    assert h.value_at_percentile(0.05) == 1 and h.value_at_percentile(0.1) == 1 and h.value_at_percentile(0.11) == 2


def test_percentile_never_exceeds_exact_max():
    h = recorded([1_000_001])
    assert h.highest_equivalent_value(1_000_001) > 1_000_001
    assert h.percentiles() == dict.fromkeys((50, 90, 95, 99, 99.9, 100), 1_000_001)


def test_to_dict():
    h = recorded([1000, 3000, 5000, 9000])
    assert h.to_dict() == {"count": 4, "min": 1000, "mean": 4500.0, "p50": 3001, "p90": 9000, "p95": 9000,
                           "p99": 9000, "p99.9": 9000, "max": 9000}
    assert HdrHistogram().to_dict() == {"count": 0, "min": None, "mean": None, "p50": None, "p90": None,
                                        "p95": None, "p99": None, "p99.9": None, "max": None}


def test_record_inputs():
    h = HdrHistogram()
    h.record(5)
    h.record(np.uint64(7))
    h.record([[3, 4]])
    h.record(np.array([], dtype=np.int64))
    h.record(np.array([1.4, 8.6]))  # floats are rounded
    assert (h.count, h.min, h.max) == (6, 1, 9)
    h.record(np.array([2**62], dtype=np.uint64), clamp=True)
    assert (h.max, h.clamped) == (HOUR_NS, 1)


def test_record_rejects_bad_values_and_records_nothing():
    h = recorded([10, 20])
    with pytest.raises(ValueError, match="-3"):
        h.record(np.array([5, -3, 7]))
    with pytest.raises(ValueError, match=str(HOUR_NS + 1)):
        h.record(np.array([5, HOUR_NS + 1]))
    with pytest.raises(ValueError, match=str(2**70)):
        h.record([1, 2**70])
    with pytest.raises(ValueError, match="-1"):
        h.record(-1)
    with pytest.raises(ValueError, match="finite"):
        h.record(np.array([1.0, np.nan]))
    with pytest.raises(TypeError):
        h.record(np.array(["1"]))
    assert (h.count, h.min, h.max, h.clamped) == (2, 10, 20, 0)
    assert h.counts.sum() == 2


def test_clamp_counts_values_above_highest_trackable():
    h = HdrHistogram(highest_trackable=1_000_000)
    h.record(np.array([5, 2_000_000, 3_000_000, 1_000_000]), clamp=True)
    h.record([2**70], clamp=True)
    assert (h.count, h.clamped, h.max) == (5, 3, 1_000_000)
    with pytest.raises(ValueError, match="-1"):
        h.record([-1, 2_000_000], clamp=True)
    assert h.clamped == 3


def test_empty_histogram():
    h = HdrHistogram()
    assert len(h) == h.count == 0
    for stat in (lambda: h.value_at_percentile(50), h.percentiles, lambda: h.min, lambda: h.max,
                 lambda: h.mean, lambda: h.stddev):
        with pytest.raises(EmptyHistogramError):
            stat()
    assert issubclass(EmptyHistogramError, ValueError)


def test_reset():
    h = recorded([1, 2, 3])
    h.record([HOUR_NS * 2], clamp=True)
    h.reset()
    assert (len(h), h.clamped, int(h.counts.sum())) == (0, 0, 0)
    h.record([42])
    assert h.percentiles((0, 50, 100)) == {0: 42, 50: 42, 100: 42}


def test_bad_percentiles():
    h = recorded([1])
    for p in (-0.1, 100.01, float("nan")):
        with pytest.raises(ValueError):
            h.value_at_percentile(p)
    with pytest.raises(TypeError):
        h.value_at_percentile("p50")


@pytest.mark.parametrize("kw", [dict(significant_figures=0), dict(significant_figures=6), dict(lowest_discernible=0),
                                dict(lowest_discernible=10, highest_trackable=19), dict(highest_trackable=2**63)])
def test_bad_parameters(kw):
    with pytest.raises(ValueError):
        HdrHistogram(**kw)


def test_bad_parameter_types():
    with pytest.raises(TypeError):
        HdrHistogram(significant_figures=3.0)


def test_merge_needs_same_parameters():
    with pytest.raises(ValueError, match="significant_figures"):
        HdrHistogram().merge(HdrHistogram(significant_figures=2))
    with pytest.raises(ValueError):
        HdrHistogram().merge(HdrHistogram(highest_trackable=10**9))
    with pytest.raises(TypeError):
        HdrHistogram().merge([1, 2])


def test_merge_carries_clamped_and_empty():
    a, b = HdrHistogram(), HdrHistogram()
    b.record([HOUR_NS + 5, 3], clamp=True)
    a.merge(b)
    a.merge(HdrHistogram())
    assert (a.count, a.clamped, a.min, a.max) == (2, 1, 3, HOUR_NS)


def test_records_millions_of_values_in_chunks():
    # More values than one recording chunk; its speed is a benchmark's business, not a test's.
    values = np.minimum(rng.lognormal(11, 2, 3_000_000), HOUR_NS).astype(np.int64)
    h = HdrHistogram()
    h.record(values)
    assert h.count == 3_000_000 and int(h.counts.sum()) == 3_000_000
    check_percentiles(h, values, (50, 99, 99.99, 100))


def test_exact_sum_of_huge_values():
    h = HdrHistogram(highest_trackable=2**63 - 1)
    big = np.full(100_000, 2**62 + 1, dtype=np.int64)
    h.record(big)
    assert h.mean == float(2**62 + 1) and h.stddev == 0.0
    assert h.max == 2**62 + 1 and h.value_at_percentile(50) == 2**62 + 1
