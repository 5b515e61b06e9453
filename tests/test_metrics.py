"""Prometheus metrics: Server.stats() through prometheus-client (parsed back with its parser), the queue-delay histogram, the /metrics endpoint (text and OpenMetrics), and `splitrpc serve --admin-port` (and its older name --metrics-port)."""
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from conftest import settled

from splitrpc import TensorSpec
from prometheus_client.parser import text_string_to_metric_families

from splitrpc.admin import AdminServer
from splitrpc.metrics import CONTENT_TYPE, prometheus_text
from splitrpc.services import register_builtin_services


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def parse(text: str) -> dict:
    """{(sample name, '{label="value",...}'): value} by prometheus_client's own parser (which
    raises on anything that is not the exposition format)."""
    samples = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            labels = ",".join(f'{k}="{_esc(v)}"' for k, v in smp.labels.items())
            samples[(smp.name, f"{{{labels}}}" if labels else "")] = smp.value
    return samples


def test_text_format_of_stats(make_server, make_client):
    srv = make_server(register_builtin_services)
    c = make_client(srv.port, timeout=2.0)
    x = np.zeros(256, np.float32)
    futs = [c.call_async(1, x) for _ in range(40)]
    for f in futs:
        f.result()
    with pytest.raises(Exception):
        c.call(99, b"")  # UNKNOWN_FUNCTION: counted under errors
    # (errors are counted just after their send: wait for the count)
    st = settled(srv, lambda st: st["errors"]["UNKNOWN_FUNCTION"] == 1 and st["replies"] == 40)
    s = parse(prometheus_text(st))
    assert s[("splitrpc_calls_total", "")] == st["calls"] >= 40
    assert s[("splitrpc_function_calls_total", '{function="vecadd"}')] == 40
    assert s[("splitrpc_errors_total", '{code="UNKNOWN_FUNCTION"}')] == 1
    assert ("splitrpc_drops_total", '{reason="short"}') in s
    # the batch-size histogram: cumulative buckets, +Inf = count, sum = calls in batches
    buckets = [v for (n, lab), v in s.items() if n == "splitrpc_batch_size_bucket"]
    assert buckets == sorted(buckets) and s[("splitrpc_batch_size_bucket", '{le="+Inf"}')] == st["batches"]
    assert s[("splitrpc_batch_size_count", "")] == st["batches"]
    assert s[("splitrpc_batch_size_sum", "")] == sum(k * v for k, v in st["batch_sizes"].items())
    # per function: the engine's own counters of each
    v = st["by_function"]["vecadd"]
    assert v["calls"] == 40 and v["batches"] == sum(v["batch_sizes"].values()) and v["queued"] == 0
    assert sum(k * n for k, n in v["batch_sizes"].items()) == 40 and v["queue_delay"]["count"] == 40
    assert st["by_function"]["matmul"]["calls"] == 0 and not any(v["errors"].values())
    assert s[("splitrpc_function_accepted_calls_total", '{function="vecadd"}')] == 40
    assert s[("splitrpc_function_batch_size_count", '{function="vecadd"}')] == v["batches"]
    assert s[("splitrpc_function_batch_size_sum", '{function="vecadd"}')] == 40
    assert s[("splitrpc_function_queue_delay_seconds_count", '{function="vecadd"}')] == 40
    assert s[("splitrpc_function_errors_total", '{code="BUSY",function="vecadd"}')] == 0
    assert s[("splitrpc_function_queued_calls", '{function="echo"}')] == 0


def test_queue_delay_histogram(make_server, make_client):
    """Every call run is counted once in the native queue-delay histogram (RX_COMPLETE to the start
    of its batch); Prometheus gets it in seconds with cumulative buckets."""
    srv = make_server(register_builtin_services)
    c = make_client(srv.port, timeout=2.0)
    x = np.zeros(256, np.float32)
    for _ in range(3):  # bursts: some calls wait behind a batch
        for f in [c.call_async(1, x) for _ in range(50)]:
            f.result()
    c.call(2, np.zeros(2048, np.float32))
    st = settled(srv, lambda s: s["queue_delay"]["count"] == 151)
    qd = st["queue_delay"]
    run = sum(k * v for k, v in st["batch_sizes"].items())
    assert run == sum(st["functions"].values()) == 151
    assert qd["count"] == sum(qd["counts"]) == run
    assert len(qd["counts"]) == len(qd["le_us"]) and qd["le_us"][-1] is None
    assert qd["le_us"][:-1] == [1 << i for i in range(len(qd["le_us"]) - 1)]
    assert 0 < qd["sum_us"] < 151 * 2e6  # each waited, none for two seconds
    assert st["queued"] == 0
    s = parse(prometheus_text(st))
    buckets = [(lab, v) for (n, lab), v in s.items() if n == "splitrpc_queue_delay_seconds_bucket"]
    les = [lab for lab, _ in buckets]
    values = [v for _, v in buckets]
    assert les[-1] == '{le="+Inf"}' and les[0] == '{le="1e-06"}' and len(les) == len(qd["counts"])
    assert [float(lab[5:-2]) for lab in les[:-1]] == [u / 1e6 for u in qd["le_us"][:-1]]
    assert values == sorted(values), "buckets are cumulative"
    assert values == list(np.cumsum(qd["counts"]))
    assert values[-1] == s[("splitrpc_queue_delay_seconds_count", "")] == run
    assert s[("splitrpc_queue_delay_seconds_sum", "")] == pytest.approx(qd["sum_us"] / 1e6, abs=1e-9)
    assert s[("splitrpc_queued_calls", "")] == 0


def test_service_time_histogram(make_server, make_client):
    """Each call a batch ran is counted once in its function's service-time histogram (fully
    received to its reply handed to the sender), which holds its queue delay and its run: a
    function that sleeps 3 ms per batch puts every call at 3 ms or more, and no queue delay alone
    comes near. Prometheus gets it per function in seconds."""
    def setup(srv):
        @srv.function(9, "slow", [TensorSpec("x", "float32", (4,))], [TensorSpec("y", "float32", (4,))], max_batch=1)
        def slow(x, y):
            time.sleep(0.003)
            y[:] = x

    srv = make_server(setup)
    c = make_client(srv.port, timeout=5.0)
    for _ in range(10):
        c.call(9, np.zeros(4, np.float32))
    st = settled(srv, lambda s: s["by_function"]["slow"]["service"]["count"] == 10)
    sv, qd = st["by_function"]["slow"]["service"], st["by_function"]["slow"]["queue_delay"]
    assert sv["le_us"] == qd["le_us"] and sum(sv["counts"]) == 10
    assert sv["sum_us"] >= 10 * 3000 > qd["sum_us"]  # each ran 3 ms after its wait
    assert sum(n for le, n in zip(sv["le_us"], sv["counts"]) if le is not None and le < 2048) == 0  # none under 2 ms
    s = parse(prometheus_text(st))
    assert s[("splitrpc_function_service_seconds_count", '{function="slow"}')] == 10
    assert s[("splitrpc_function_service_seconds_sum", '{function="slow"}')] == pytest.approx(sv["sum_us"] / 1e6,
                                                                                            abs=1e-9)


def test_queued_gauge_counts_waiting_calls(make_server, make_client):
    """Calls that wait behind a slow batch show in the queued gauge, and their queue delay lands
    in the buckets of that wait."""
    gate = threading.Event()

    def setup(srv):
        def slow(x, y):
            gate.wait(5)
            np.add(x, 1, out=y)
        srv.add_function(slow, 1, "slow", [TensorSpec("x", "float32", (4,))], [TensorSpec("y", "float32", (4,))],
                         max_batch=1)

    srv = make_server(setup)
    c = make_client(srv.port, timeout=5.0)
    futs = [c.call_async(1, np.zeros(4, np.float32)) for _ in range(5)]
    st = settled(srv, lambda s: s["queued"] == 4)  # one runs (blocked), four wait
    assert st["queued"] == 4
    time.sleep(0.05)
    gate.set()
    for f in futs:
        f.result()
    st = settled(srv, lambda s: s["queue_delay"]["count"] == 5)
    qd = st["queue_delay"]
    assert st["queued"] == 0 and qd["count"] == 5
    # four calls waited at least the 50 ms the gate stayed shut: all in buckets above 32 ms
    waited = sum(n for le, n in zip(qd["le_us"], qd["counts"]) if le is None or le > 32768)
    assert waited >= 4


def test_label_values_are_escaped():
    text = prometheus_text({"functions": {'we"ird\\name\n': 3}, "drops": {}, "errors": {}})
    s = parse(text)
    assert s[("splitrpc_function_calls_total", '{function="we\\"ird\\\\name\\n"}')] == 3


def test_endpoint(make_server, make_client):
    srv = make_server(register_builtin_services)
    make_client(srv.port, timeout=2.0).call(1, np.zeros(256, np.float32))
    with AdminServer(srv, 0) as ms:
        with urllib.request.urlopen(f"http://127.0.0.1:{ms.port}/metrics", timeout=5) as r:
            assert r.status == 200 and r.headers["Content-Type"] == CONTENT_TYPE
            assert parse(r.read().decode())[("splitrpc_calls_total", "")] >= 1
        req = urllib.request.Request(f"http://127.0.0.1:{ms.port}/metrics",
                                     headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(req, timeout=5) as r:  # negotiated: OpenMetrics, with its # EOF
            body = r.read().decode()
            assert r.headers["Content-Type"].startswith("application/openmetrics-text")
            assert body.rstrip().endswith("# EOF") and "splitrpc_calls_total" in body
        with pytest.raises(urllib.error.HTTPError) as ei:
            urllib.request.urlopen(f"http://127.0.0.1:{ms.port}/other", timeout=5)
        assert ei.value.code == 404


@pytest.mark.parametrize("flag", ["--admin-port", "--metrics-port"])
def test_serve_metrics_port_cli(flag):
    p = subprocess.Popen([sys.executable, "-m", "splitrpc", "serve", "--port", "0", flag, "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tempfile.gettempdir())
    try:
        url = None
        for _ in range(4):  # start, ready, metrics
            line = p.stdout.readline()
            m = re.search(r"metrics: (http://\S+)", line)
            url = url or (m.group(1) if m else None)
            if url:
                break
        assert url, "no metrics line printed"
        with urllib.request.urlopen(url, timeout=5) as r:
            assert parse(r.read().decode())[("splitrpc_calls_total", "")] == 0
    finally:
        p.terminate()
        assert p.wait(10) == 0
