"""splitrpc.loadgen.plots: each plot writes a real PNG, bad inputs raise ValueError, find_knee finds the knee."""
import importlib.util
import sys

import numpy as np
import pytest

from splitrpc.loadgen import plots
from splitrpc.loadgen.plots import PlotUnavailable, find_knee

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path, returned):
    assert returned == path
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 5000


def load_points(knee_at: float, capacity: float):
    """A synthetic load sweep: latency grows like an M/M/1 queue, throughput caps at capacity."""
    pts = []
    for offered in np.linspace(10_000, 200_000, 12):
        rho = min(offered / knee_at, 0.99)
        pts.append({"offered_rps": offered, "achieved_rps": min(offered, capacity),
                    "mean_us": 20 / (1 - rho), "p99_us": 60 / (1 - rho) ** 1.5})
    return pts


def test_latency_vs_load(tmp_path):
    pytest.importorskip("matplotlib")
    series = {"splitrpc": load_points(180_000, 190_000), "grpc": load_points(60_000, 70_000),
              "flat": [{"offered_rps": r, "achieved_rps": r, "mean_us": 10, "p99_us": 30} for r in (1e3, 2e3)]}
    out = tmp_path / "load.png"
    assert_png(out, plots.latency_vs_load(series, out, title="test sweep"))


def test_throughput_vs_concurrency(tmp_path):
    pytest.importorskip("matplotlib")
    series = {"splitrpc": [(c, 50_000 * min(c, 16) ** 0.8) for c in (1, 2, 4, 8, 16, 32, 64)],
              "grpc": [(1, 8000.0), (4, 20000.0), (64, 31000.0)]}
    out = tmp_path / "tput.png"
    assert_png(out, plots.throughput_vs_concurrency(series, out))


def test_latency_cdf(tmp_path):
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(1)
    series = {"big": rng.lognormal(3, 0.6, 200_000), "small": rng.lognormal(4, 0.3, 50), "one": np.array([42.0])}
    out = tmp_path / "cdf.png"
    assert_png(out, plots.latency_cdf(series, out))


def test_latency_over_time(tmp_path):
    pytest.importorskip("matplotlib")
    t = np.arange(0, 30, 0.5)
    offered = np.where(t < 15, 50_000.0, 120_000.0)
    achieved = np.minimum(offered, 100_000.0)
    p50 = np.where(t < 15, 25.0, 400.0)
    p99 = p50 * 4
    p50[10:13] = p99[10:13] = achieved[10:13] = np.nan  # empty bins
    out = tmp_path / "time.png"
    assert_png(out, plots.latency_over_time(t, offered, achieved, p50, p99, out, title="step load"))
    single = tmp_path / "single.png"
    assert_png(single, plots.latency_over_time([0.0], [1.0], [1.0], [np.nan], [np.nan], single))


def test_plots_accept_str_paths(tmp_path):
    pytest.importorskip("matplotlib")
    out = str(tmp_path / "cdf.png")
    assert plots.latency_cdf({"x": [1.0, 2.0, 3.0]}, out) == out


@pytest.mark.parametrize("call", [
    lambda p: plots.latency_over_time([0, 1, 2], [1, 1, 1], [1, 1], [1, 1, 1], [1, 1, 1], p),
    lambda p: plots.latency_over_time([], [], [], [], [], p),
    lambda p: plots.latency_over_time([[0, 1]], [[1, 1]], [[1, 1]], [[1, 1]], [[1, 1]], p),
    lambda p: plots.latency_vs_load({}, p),
    lambda p: plots.latency_vs_load({"a": []}, p),
    lambda p: plots.latency_vs_load({"a": [{"offered_rps": 1, "mean_us": 1, "p99_us": 2}]}, p),
    lambda p: plots.throughput_vs_concurrency({}, p),
    lambda p: plots.throughput_vs_concurrency({"a": [(1, 2, 3)]}, p),
    lambda p: plots.throughput_vs_concurrency({"a": [(0, 100.0)]}, p),
    lambda p: plots.latency_cdf({}, p),
    lambda p: plots.latency_cdf({"a": np.array([])}, p),
    lambda p: plots.latency_cdf({"a": np.array([1.0, np.nan])}, p),
    lambda p: plots.latency_cdf({"a": np.array([0.0, 1.0])}, p),
], ids=["mismatched", "empty", "2d", "no-series", "empty-series", "missing-key", "tput-no-series",
        "tput-triples", "tput-zero-concurrency", "cdf-no-series", "cdf-empty", "cdf-nan", "cdf-zero"])
def test_bad_input_raises_value_error(tmp_path, call):
    out = tmp_path / "bad.png"
    with pytest.raises(ValueError):
        call(out)
    assert not out.exists()


def test_find_knee_by_p99():
    offered = [1000, 2000, 4000, 8000, 16000]
    assert find_knee(offered, [10, 12, 29, 31, 100]) == 3  # 31 > 3 * 10, 29 is not
    assert find_knee(offered, [10, 10, 10, 10, 30]) is None  # exactly 3x is not above it
    assert find_knee(offered, [10, 10, 10, 10, 30.01]) == 4


def test_find_knee_by_achieved_rate():
    offered = [1000, 2000, 4000, 8000]
    assert find_knee(offered, [10, 10, 10, 10], achieved=[1000, 1950, 3790, 4000]) == 2  # 3790 < 0.95 * 4000
    assert find_knee(offered, [10, 10, 10, 10], achieved=[1000, 1900, 3800, 7600]) is None
    assert find_knee(offered, [10, 10, 100, 10], achieved=[1000, 1000, 4000, 8000]) == 1  # the first of either


def test_find_knee_orders_by_offered_load_and_skips_nan():
    # unsorted input: the baseline is the lowest offered load, the index is into the input
    assert find_knee([8000, 1000, 4000, 2000], [100, 10, 40, 12]) == 2
    assert find_knee([1000, 2000, 4000], [10, np.nan, 50]) == 2
    assert find_knee([1000, 2000], [np.nan, 1e9]) is None  # no baseline latency
    assert find_knee([1000], [10]) is None
    assert find_knee([1000], [10], achieved=[10]) == 0


def test_find_knee_bad_input():
    with pytest.raises(ValueError):
        find_knee([], [])
    with pytest.raises(ValueError):
        find_knee([1, 2], [1])
    with pytest.raises(ValueError):
        find_knee([1, 2], [1, 2], achieved=[1])


def test_without_matplotlib(monkeypatch, tmp_path):
    """The module imports without matplotlib; drawing then raises PlotUnavailable naming the extra."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib...` fail
    spec = importlib.util.spec_from_file_location("plots_without_matplotlib", plots.__file__)
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    assert fresh.find_knee([1, 2], [1, 4]) == 1
    with pytest.raises(fresh.PlotUnavailable, match=r"pip install 'splitrpc\[plot\]'") as info:
        fresh.latency_cdf({"a": [1.0, 2.0]}, tmp_path / "x.png")
    assert isinstance(info.value, ImportError)
    assert issubclass(PlotUnavailable, ImportError)
