"""test_gnn_calibrate.py: PSGS calibration's pure part (splitrpc.services.gnn.calibrate): curves, the four crossing points on synthetic latency lines (and past a noisy spike), the +inf/0 cases, sample-count errors, bounds, JSON round trip and the plot."""
import json
import math

import numpy as np
import pytest

from splitrpc.services.gnn.calibrate import (MIN_SAMPLES, Calibration, CalibrationError, Measurements,  # noqa: E402
                                             adaptive_edges,
                                             bound, bound_at, calibrate, crossings, curves, plot)

# CPU mean = A + B x, GPU mean = C + D x (x = batch PSGS, latency in s); max = mean * CPU_MAX / GPU_MAX.
A, B, C, D = 0.5e-3, 2e-6, 3e-3, 0.2e-6
CPU_MAX, GPU_MAX = 1.5, 1.2
LO, HI, BINS, PER_BIN = 1.0, 1e4, 24, 40


def synthetic(a=A, b=B, c=C, d=D, per_bin=PER_BIN, bins=BINS):
    """PER_BIN samples per lane in each log bin, PSGS spread over the bin, latency = mean line times
    factors spread evenly over [2 - k, k] (mean 1, max k) so each bin's mean and max follow the lines."""
    edges = np.geomspace(LO, HI, bins + 1)
    lane, psgs, lat = [], [], []
    for i in range(bins):
        xs = np.geomspace(edges[i], edges[i + 1], per_bin + 2)[1:-1]
        for name, (k0, k1), kmax in (("cpu", (a, b), CPU_MAX), ("gpu", (c, d), GPU_MAX)):
            factors = np.linspace(2 - kmax, kmax, per_bin)
            factors = np.roll(factors, i)  # pair factors with PSGS differently per bin
            lane += [name] * per_bin
            psgs += xs.tolist()
            lat += ((k0 + k1 * xs) * factors).tolist()
    return Measurements(lane, psgs, lat), edges


def expected_points(a=A, b=B, c=C, d=D):
    """Where the lines cross (cpu statistic = gpu statistic)."""
    return {"cpu_preferred": (c - CPU_MAX * a) / (CPU_MAX * b - d),
            "gpu_preferred": (GPU_MAX * c - a) / (b - GPU_MAX * d),
            "strict": (GPU_MAX * c - CPU_MAX * a) / (CPU_MAX * b - GPU_MAX * d),
            "loose": (c - a) / (b - d)}


def test_curves_bin_means_maxes_and_counts():
    m = Measurements(["cpu", "cpu", "gpu", "cpu", "gpu", "gpu"], [1, 2, 2, 10, 10, 20], [1.0, 3.0, 5.0, 7.0, 2.0, 4.0])
    cv = curves(m, [0, 5, 20])
    assert cv.count["cpu"].tolist() == [2, 1] and cv.count["gpu"].tolist() == [1, 2]
    assert cv.mean["cpu"].tolist() == [2.0, 7.0] and cv.max["cpu"].tolist() == [3.0, 7.0]
    assert cv.mean["gpu"].tolist() == [5.0, 3.0] and cv.max["gpu"].tolist() == [5.0, 4.0]  # 20 is in the last bin
    assert cv.centres.tolist() == [2.5, math.sqrt(100)]
    cv = curves(m, [0, 5, 8, 9])  # empty bin: NaN; samples above the last edge left out
    assert np.isnan(cv.mean["cpu"][1]) and cv.count["gpu"].tolist() == [1, 0, 0]
    assert cv.used.tolist() == [0]
    cv = curves(m, 3)  # log-spaced over the observed 1 .. 20
    np.testing.assert_allclose(cv.edges, np.geomspace(1, 20, 4))
    assert sum(cv.count["cpu"]) + sum(cv.count["gpu"]) == 6


@pytest.mark.parametrize("bins, msg", [(0, "count >= 1"), ([1.0], "at least two"), ([2.0, 1.0], "increasing"),
                                       ([0.0, np.inf], "finite"), ("x", "count >= 1 or explicit edges")])
def test_bad_bins(bins, msg):
    m = Measurements(["cpu", "gpu"], [1, 2], [1.0, 1.0])
    with pytest.raises(ValueError, match=msg):
        curves(m, bins)


def test_bad_measurements():
    with pytest.raises(ValueError, match="lane must be one of"):
        Measurements(["cpu", "tpu"], [1, 2], [1.0, 1.0])
    with pytest.raises(ValueError, match="differ in length"):
        Measurements(["cpu"], [1, 2], [1.0, 1.0])
    with pytest.raises(ValueError, match="latency_s must be finite and >= 0; row 1"):
        Measurements(["cpu", "gpu"], [1, 2], [1.0, np.nan])
    with pytest.raises(ValueError, match="log-spaced bins need PSGS > 0"):
        curves(Measurements(["cpu", "gpu"], [0, 2], [1.0, 1.0]), 4)
    assert len(Measurements.from_records([("cpu", 1, 0.1), ("gpu", 3, 0.2)])) == 2
    # "bulk" (the serving code's stand-in lane) is the GPU lane.
    assert Measurements(np.array(["cpu", "bulk"]), [1, 2], [1.0, 1.0]).lane.tolist() == ["cpu", "gpu"]


def test_synthetic_lines_recover_the_four_crossings_within_bin_resolution():
    meas, edges = synthetic()
    pts = crossings(curves(meas, edges))
    ratio = edges[1] / edges[0]  # one log bin
    want = expected_points()
    assert len({round(v) for v in want.values()}) == 4  # four distinct points to find
    for name, x in want.items():
        got = pts[name].psgs
        assert x / ratio <= got <= x * ratio, (name, got, x)
        # The curves' common value there is the lines' value within the same resolution.
        stat = {"cpu_preferred": CPU_MAX, "gpu_preferred": 1.0, "strict": CPU_MAX, "loose": 1.0}[name]
        line = (A + B * x) * stat
        assert line / ratio <= pts[name].latency_s <= line * ratio
    # Ordering as in the paper's Fig. 6(b): CPU preferred < strict/loose < GPU preferred.
    assert pts["cpu_preferred"].psgs < min(pts["strict"].psgs, pts["loose"].psgs)
    assert pts["gpu_preferred"].psgs > max(pts["strict"].psgs, pts["loose"].psgs)


def test_bounds_follow_the_routing():
    meas, edges = synthetic()
    cv = curves(meas, edges)
    pts = crossings(cv)
    for name, pt in pts.items():
        # Brute force over the raw samples: each bin's samples of the lane the threshold sends it to.
        worst = 0.0
        for i in cv.used:
            lo, hi = edges[i], edges[i + 1]
            inside = (meas.psgs >= lo) & ((meas.psgs < hi) | (i == len(edges) - 2))
            lanes = ["cpu"] if hi < pt.psgs else ["gpu"] if lo >= pt.psgs else ["cpu", "gpu"]
            for lane in lanes:
                worst = max(worst, meas.latency_s[inside & (meas.lane == lane)].max())
        assert pt.bound_s == pytest.approx(worst, rel=1e-12), name
    assert bound(cv, math.inf) == pytest.approx(np.nanmax(cv.max["cpu"]))
    assert bound(cv, 0.0) == pytest.approx(np.nanmax(cv.max["gpu"]))
    # Per call: strict routes every bin away from the crossing to the lane with the lower max, so
    # its per-PSGS bound is the lower max curve there, and below both single-lane bounds somewhere.
    x = pts["strict"].psgs
    b = bound_at(cv, x, cv.centres)
    far = (edges[1:] < x) | (edges[:-1] >= x)
    np.testing.assert_array_equal(b[far], np.minimum(cv.max["cpu"], cv.max["gpu"])[far])
    assert (b < bound_at(cv, math.inf, cv.centres)).any() and (b < bound_at(cv, 0.0, cv.centres)).any()
    assert (b <= np.maximum(cv.max["cpu"], cv.max["gpu"])).all()
    # Every raw sample of the routed lane is within its PSGS's bound (bins hold their own max).
    cal = calibrate(meas, edges, fanouts=(10, 5), graph="g")
    cpu_side = meas.psgs < x
    routed = np.where(cpu_side, meas.lane == "cpu", meas.lane == "gpu")
    assert (meas.latency_s[routed] <= cal.bound_at(meas.psgs[routed], "strict")).all()
    # Outside the edges: the end bins' bounds.
    assert cal.bound_at([0.01, 1e9], "strict").tolist() == [b[0], b[-1]]


def test_bound_at_fills_empty_bins_from_neighbours():
    n = MIN_SAMPLES
    lane = (["cpu"] * n + ["gpu"] * n) * 2
    psgs = [1.5] * (2 * n) + [14.0] * (2 * n)
    lat = [1.0] * n + [9.0] * n + [4.0] * n + [2.0] * n
    cv = curves(Measurements(lane, psgs, lat), [1, 2, 4, 8, 12, 16])  # bins 1, 2 and 3 empty
    assert cv.used.tolist() == [0, 4]
    # Loose: means go from 1 < 9 to 4 > 2 between the centres sqrt(2) and sqrt(192), crossing 0.8
    # of the way, in empty bin 3; bin 0 -> CPU (max 1), bin 4 -> GPU (max 2); the empty bins take
    # the larger of their nearest used neighbours.
    thr = crossings(cv)["loose"].psgs
    assert thr == pytest.approx(math.sqrt(2) + 0.8 * (math.sqrt(192) - math.sqrt(2)))
    assert bound_at(cv, thr, [1.5, 3.0, 5.0, 10.0, 14.0]).tolist() == [1.0, 2.0, 2.0, 2.0, 2.0]
    assert bound_at(cv, 0.0, [1.5, 10.0]).tolist() == [9.0, 9.0]  # always GPU: its max 9 in bin 0


def test_cpu_always_below_or_above():
    below, edges = synthetic(a=0.1e-3, b=0.1e-6, c=5e-3, d=1e-6)  # CPU cheaper everywhere
    pts = crossings(curves(below, edges))
    assert all(p.psgs == math.inf for p in pts.values())
    assert all(math.isnan(p.latency_s) for p in pts.values())
    above, edges = synthetic(a=6e-3, b=3e-6, c=1e-3, d=0.1e-6)  # CPU dearer everywhere
    pts = crossings(curves(above, edges))
    assert all(p.psgs == 0.0 for p in pts.values())
    cal = calibrate(above, edges, fanouts=(10, 5), graph="t")
    assert cal.threshold("strict") == 0.0


def test_crossing_interpolates_between_bin_centres():
    # Two bins, centres 2 and 8 (edges 1, 4, 16): CPU mean 1 then 5, GPU mean 3 then 3 -> d = -2, +2:
    # the crossing is halfway, at 5, where both curves are 3.
    n = MIN_SAMPLES
    lane = ["cpu"] * n + ["gpu"] * n + ["cpu"] * n + ["gpu"] * n
    psgs = [2.0] * (2 * n) + [8.0] * (2 * n)
    lat = [1.0] * n + [3.0] * n + [5.0] * n + [3.0] * n
    pts = crossings(curves(Measurements(lane, psgs, lat), [1, 4, 16]))
    assert pts["loose"].psgs == pytest.approx(5.0) and pts["loose"].latency_s == pytest.approx(3.0)
    assert pts["loose"].bound_s == 5.0  # both bins straddle/route: max of CPU in bin 0, both lanes in bin 1


def test_a_noisy_spike_at_small_psgs_does_not_move_the_crossing():
    # Four bins (centres 2, 8, 32, 128): CPU 1, 4 (a spike over the GPU's 3), 2, 5; GPU 3 throughout.
    # The CPU goes above the GPU for good only between 32 and 128: the crossing is there, not at the
    # spike (which would send nearly every batch to the GPU lane).
    n = MIN_SAMPLES
    centres, cpu = [2.0, 8.0, 32.0, 128.0], [1.0, 4.0, 2.0, 5.0]
    lane, psgs, lat = [], [], []
    for c, v in zip(centres, cpu):
        lane += ["cpu"] * n + ["gpu"] * n
        psgs += [c] * (2 * n)
        lat += [v] * n + [3.0] * n
    pts = crossings(curves(Measurements(lane, psgs, lat), [1, 4, 16, 64, 256]))
    assert pts["loose"].psgs == pytest.approx(32 + 96 * (1 / 3)) and pts["loose"].latency_s == pytest.approx(3.0)
    # the CPU below in the last bin: always CPU, whatever came before
    lat_end = [v if i < len(lat) - 2 * n else (2.0 if lane[i] == "cpu" else 3.0) for i, v in enumerate(lat)]
    assert crossings(curves(Measurements(lane, psgs, lat_end), [1, 4, 16, 64, 256]))["loose"].psgs == math.inf


def test_too_few_samples_names_the_bin_and_the_count_needed():
    meas, edges = synthetic(per_bin=MIN_SAMPLES)
    crossings(curves(meas, edges))  # exactly enough
    keep = np.ones(len(meas), dtype=bool)
    keep[np.flatnonzero((meas.lane == "gpu") & (meas.psgs > edges[5]) & (meas.psgs < edges[6]))[:3]] = False
    thin = Measurements(meas.lane[keep], meas.psgs[keep], meas.latency_s[keep])
    with pytest.raises(CalibrationError, match=rf"bin 5 .* has {MIN_SAMPLES - 3} samples of the 'gpu' lane; "
                                               rf"at least {MIN_SAMPLES} are needed"):
        crossings(curves(thin, edges))
    with pytest.raises(CalibrationError, match="at least 50 are needed"):
        crossings(curves(meas, edges), min_samples=50)
    cpu_only = Measurements(meas.lane[meas.lane == "cpu"], meas.psgs[meas.lane == "cpu"],
                            meas.latency_s[meas.lane == "cpu"])
    with pytest.raises(CalibrationError, match="no measurements of the 'gpu' lane"):
        crossings(curves(cpu_only, edges))
    assert issubclass(CalibrationError, ValueError)


def test_deterministic_and_json_round_trip(tmp_path):
    meas, edges = synthetic()
    c1 = calibrate(meas, BINS, fanouts=(10, 5), graph="reddit-like", default="loose",
                   labels={"gpu": "bulk (stand-in for GPU)"})
    c2 = calibrate(meas, BINS, fanouts=(10, 5), graph="reddit-like", default="loose",
                   labels={"gpu": "bulk (stand-in for GPU)"})
    assert c1.to_json() == c2.to_json()
    assert {k: v.psgs for k, v in c1.points.items()} == {k: v.psgs for k, v in c2.points.items()}
    p1, p2 = tmp_path / "a.json", tmp_path / "b.json"
    c1.save(p1)
    c2.save(p2)
    assert p1.read_bytes() == p2.read_bytes()
    loaded = Calibration.load(p1)
    assert loaded.to_json() == c1.to_json()
    assert loaded.fanouts == (10, 5) and loaded.graph == "reddit-like" and loaded.default == "loose"
    assert loaded.labels["gpu"] == "bulk (stand-in for GPU)" and loaded.labels["cpu"] == "CPU"
    c3 = calibrate(meas, BINS, fanouts=(10, 5), graph="reddit-like", default="loose",
                   labels={"bulk": "bulk (stand-in for GPU)"})
    assert c3.to_json() == c1.to_json()  # labels keyed "bulk" are the GPU lane's
    with pytest.raises(ValueError, match="got a label for 'tpu'"):
        calibrate(meas, BINS, fanouts=(10, 5), graph="g", labels={"tpu": "x"})
    for policy in ("strict", "loose", "cpu_preferred", "gpu_preferred"):
        assert loaded.threshold(policy) == c1.threshold(policy)
    assert loaded.threshold() == c1.threshold("loose")
    assert loaded.threshold("latency_preferred") == c1.threshold("strict")
    assert loaded.threshold("throughput_preferred") == c1.threshold("loose")
    np.testing.assert_array_equal(loaded.curves.mean["gpu"], c1.curves.mean["gpu"])
    with pytest.raises(ValueError, match="unknown policy 'fastest'"):
        loaded.threshold("fastest")
    # +inf survives the round trip (strict JSON: no Infinity literal in the file).
    below, e = synthetic(a=0.1e-3, b=0.1e-6, c=5e-3, d=1e-6)
    cal = calibrate(below, e, fanouts=(2,), graph="g")
    cal.save(p1)
    assert "Infinity" not in p1.read_text() and "NaN" not in p1.read_text()
    assert Calibration.load(p1).threshold() == math.inf


def test_load_rejects_wrong_and_corrupt_files(tmp_path):
    meas, edges = synthetic()
    good = calibrate(meas, edges, fanouts=(10, 5), graph="g").to_dict()
    p = tmp_path / "c.json"
    p.write_text("{not json")
    with pytest.raises(CalibrationError, match="invalid JSON"):
        Calibration.load(p)
    p.write_text(json.dumps({"format": "something.else"}))
    with pytest.raises(CalibrationError, match="not a splitrpc GNN calibration"):
        Calibration.load(p)
    p.write_text(json.dumps({**good, "version": 99}))
    with pytest.raises(CalibrationError, match="version 99; this code reads version 1"):
        Calibration.load(p)
    broken = dict(good)
    del broken["points"]
    p.write_text(json.dumps(broken))
    with pytest.raises(CalibrationError, match="corrupt calibration file"):
        Calibration.load(p)
    broken = json.loads(json.dumps(good))
    broken["points"]["strict"]["psgs"] = "fast"
    p.write_text(json.dumps(broken))
    with pytest.raises(CalibrationError, match="corrupt"):
        Calibration.load(p)
    with pytest.raises(ValueError, match="unknown policy"):
        calibrate(meas, edges, fanouts=(1,), graph="g", default="fastest")


def test_plot_writes_a_png(tmp_path):
    meas, edges = synthetic()
    cal = calibrate(meas, edges, fanouts=(10, 5), graph="small")
    path = tmp_path / "cal.png"
    plot(cal, path, labels={"gpu": "bulk (stand-in for GPU)"})
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    # The no-crossing case plots too (notes instead of lines).
    below, e = synthetic(a=0.1e-3, b=0.1e-6, c=5e-3, d=1e-6)
    plot(calibrate(below, e, fanouts=(2,), graph="g"), tmp_path / "inf.png")
    assert (tmp_path / "inf.png").read_bytes()[:4] == b"\x89PNG"


def test_adaptive_edges_merge_thin_bins():
    meas, edges = synthetic()
    rng = np.random.default_rng(4)
    keep = rng.random(len(meas)) < 0.3  # about 12 samples per lane and bin: too few
    thin = Measurements(meas.lane[keep], meas.psgs[keep], meas.latency_s[keep])
    with pytest.raises(CalibrationError):
        crossings(curves(thin, edges))
    merged = adaptive_edges(thin, edges)
    assert merged[0] == edges[0] and merged[-1] == edges[-1] and set(merged) <= set(edges)
    assert 2 <= merged.size < edges.size
    cv = curves(thin, merged)
    for lane in ("cpu", "gpu"):
        assert (cv.count[lane] >= MIN_SAMPLES).all()
    pts = crossings(cv)  # now calibrates
    ratio = (merged[1:] / merged[:-1]).max()
    x = expected_points()["loose"]
    assert x / ratio <= pts["loose"].psgs <= x * ratio
    np.testing.assert_array_equal(adaptive_edges(meas, edges), edges)  # enough everywhere: unchanged
    with pytest.raises(CalibrationError, match="at least 5000 are needed"):
        adaptive_edges(meas, edges, min_samples=5000)
