"""metrics.py: a server's counters in the Prometheus text format, and a small HTTP endpoint that serves them (`splitrpc serve --metrics-port`)."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# stats() key -> (metric name, type, help)
_SCALARS = (
    ("rx_datagrams", "rx_datagrams_total", "counter", "Datagrams received."),
    ("rx_bytes", "rx_bytes_total", "counter", "UDP payload bytes received."),
    ("tx_datagrams", "tx_datagrams_total", "counter", "Datagrams sent."),
    ("tx_bytes", "tx_bytes_total", "counter", "UDP payload bytes sent."),
    ("rx_in_place", "rx_in_place_total", "counter", "Segments received straight into their message."),
    ("calls", "calls_total", "counter", "Calls accepted (complete requests queued)."),
    ("replies", "replies_total", "counter", "Replies sent."),
    ("batches", "batches_total", "counter", "Batches handed to the functions."),
    ("cache_hits", "reply_cache_hits_total", "counter", "Duplicate requests answered from the reply cache."),
    ("cached_replies", "cached_replies", "gauge", "Replies held in the reply cache."),
    ("partial_messages", "partial_messages", "gauge", "Requests being reassembled."),
    ("reassembly_bytes", "reassembly_bytes", "gauge", "Bytes held by requests being reassembled."),
    ("in_flight", "batches_in_flight", "gauge", "Batches handed back before their work finished (GPU)."),
    ("queued", "queued_calls", "gauge", "Calls received and waiting for a batch."),
)


def _esc(v) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus_text(st: dict, prefix: str = "splitrpc") -> str:
    """The Prometheus exposition (text format 0.0.4) of a Server.stats() dict."""
    out: list[str] = []

    def metric(name: str, kind: str, help_: str, samples: list[tuple[str, object]]) -> None:
        full = f"{prefix}_{name}"
        out.append(f"# HELP {full} {help_}")
        out.append(f"# TYPE {full} {kind}")
        for labels, value in samples:
            out.append(f"{full}{labels} {value}")

    for key, name, kind, help_ in _SCALARS:
        if key in st:
            metric(name, kind, help_, [("", int(st[key]))])
    metric("drops_total", "counter", "Datagrams dropped, by reason.",
           [(f'{{reason="{_esc(k)}"}}', int(v)) for k, v in st.get("drops", {}).items()])
    metric("errors_total", "counter", "ERROR replies sent, by code.",
           [(f'{{code="{_esc(k)}"}}', int(v)) for k, v in st.get("errors", {}).items()])
    metric("function_calls_total", "counter", "Calls run, by function.",
           [(f'{{function="{_esc(k)}"}}', int(v)) for k, v in st.get("functions", {}).items()])
    sizes = {int(k): int(v) for k, v in st.get("batch_sizes", {}).items()}
    buckets, cum = [], 0
    for le in (1, 2, 4, 8, 16, 32, 64, 128):
        cum = sum(v for k, v in sizes.items() if k <= le)
        buckets.append((f'_bucket{{le="{le}"}}', cum))
    count = sum(sizes.values())
    buckets += [('_bucket{le="+Inf"}', count), ("_sum", sum(k * v for k, v in sizes.items())), ("_count", count)]
    full = f"{prefix}_batch_size"
    out += [f"# HELP {full} Calls per batch.", f"# TYPE {full} histogram"]
    out += [f"{full}{suffix} {v}" for suffix, v in buckets]
    qd = st.get("queue_delay")
    if qd:
        full = f"{prefix}_queue_delay_seconds"
        out += [f"# HELP {full} Time from a call's last request datagram to the start of the batch that runs it.",
                f"# TYPE {full} histogram"]
        cum = 0
        for le_us, n in zip(qd["le_us"], qd["counts"]):
            cum += int(n)
            le = "+Inf" if le_us is None else repr(le_us / 1e6)
            out.append(f'{full}_bucket{{le="{le}"}} {cum}')
        out += [f"{full}_sum {qd['sum_us'] / 1e6:.9f}", f"{full}_count {cum}"]
    for k, v in st.get("socket_buffers", {}).items():
        metric(f"socket_{k}_bytes", "gauge", f"Effective socket {k} size.", [("", int(v))])
    d = st.get("dpdk")
    if d:
        metric("dpdk_rx_frames_total", "counter", "Frames received by the DPDK port.", [("", int(d["rx_frames"]))])
        metric("dpdk_tx_frames_total", "counter", "Frames sent by the DPDK port.", [("", int(d["tx_frames"]))])
        metric("dpdk_frame_drops_total", "counter", "Frames the DPDK port dropped, by reason.",
               [(f'{{reason="{_esc(k)}"}}', int(v)) for k, v in d["drops"].items()])
        metric("dpdk_tx_failed_total", "counter", "Frames the DPDK port did not take.", [("", int(d["tx_failed"]))])
        metric("dpdk_arp_replies_total", "counter", "ARP replies sent.", [("", int(d["arp_replies"]))])
    c = st.get("colocation")
    if c:
        svcs = c["services"]
        lab = lambda n: f'{{service="{_esc(n)}"}}'  # noqa: E731
        metric("colocation_calls_total", "counter", "Calls that reached a co-located service, by service.",
               [(lab(n), int(v["calls"])) for n, v in svcs.items()])
        metric("colocation_qos_violations_total", "counter", "Calls answered after their service's QoS target.",
               [(lab(n), int(v["violations"])) for n, v in svcs.items()])
        metric("colocation_too_large_total", "counter", "Calls refused: their PMC estimate exceeds the budget.",
               [(lab(n), int(v["too_large"])) for n, v in svcs.items()])
        metric("colocation_groups_total", "counter", "Groups of co-located calls run.", [("", int(c["groups"]))])
        metric("colocation_budget_bytes", "gauge", "Memory budget of the co-located services.", [("", int(c["budget"]))])
        metric("colocation_reserved_bytes", "gauge", "Memory reserved by the running group.", [("", int(c["reserved"]))])
        metric("colocation_queued_calls", "gauge", "Calls waiting for a group.", [("", int(c["queued"]))])
    return "\n".join(out) + "\n"


class MetricsServer:
    """Serves GET /metrics for a splitrpc.Server on host:port (a thread of its own; port 0 picks
    one, see .port). Anything else is 404. Use as a context manager or call close()."""

    def __init__(self, server, port: int, host: str = "127.0.0.1"):
        source = server

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server API
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404, "only /metrics is served")
                    return
                try:
                    body = prometheus_text(source.stats()).encode()
                except Exception as e:  # noqa: BLE001 - a closed server: say so, keep serving
                    self.send_error(503, f"no stats: {type(e).__name__}")
                    return
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # quiet: the access log is not ours to print
                pass

        self._http = ThreadingHTTPServer((host, port), Handler)
        self._http.daemon_threads = True
        self.host, self.port = host, self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, name="splitrpc-metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()

    def __enter__(self) -> "MetricsServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
