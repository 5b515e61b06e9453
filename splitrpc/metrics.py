"""metrics.py: a server's counters as Prometheus metric families through prometheus-client: a collector over Server.stats() (the admin endpoint, splitrpc.admin, serves it with the process collector and the host's CPU time, in the text or OpenMetrics format the scraper asks for)."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

if TYPE_CHECKING:
    from splitrpc.server import Server

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # the text format's, when the scraper asks for nothing else
PREFIX = "splitrpc"

# stats() key -> (metric name, type, help); counters are named without _total (the family adds it)
_SCALARS = (
    ("rx_datagrams", "rx_datagrams", "counter", "Datagrams received."),
    ("rx_bytes", "rx_bytes", "counter", "UDP payload bytes received."),
    ("tx_datagrams", "tx_datagrams", "counter", "Datagrams sent."),
    ("tx_bytes", "tx_bytes", "counter", "UDP payload bytes sent."),
    ("rx_in_place", "rx_in_place", "counter", "Segments received straight into their message."),
    ("rx_unscattered", "rx_unscattered", "counter",
     "Datagrams received into the place of another segment, then moved back whole (mispredictions)."),
    ("rx_coalesced", "rx_coalesced", "counter",
     "Datagrams received coalesced with others of their sender (UDP receive offload)."),
    ("calls", "calls", "counter", "Calls accepted (complete requests queued)."),
    ("replies", "replies", "counter", "Replies sent."),
    ("tx_sends", "reply_sends", "counter",
     "Transport sends of replies (replies / sends: how many each carried; batches' replies held together)."),
    ("rx_receives", "receives", "counter",
     "Transport receives that returned datagrams (datagrams / receives: how many came in each)."),
    ("batches", "batches", "counter", "Batches handed to the functions."),
    ("cache_hits", "reply_cache_hits", "counter", "Duplicate requests answered from the reply cache."),
    ("cached_replies", "cached_replies", "gauge", "Replies held in the reply cache."),
    ("partial_messages", "partial_messages", "gauge", "Requests being reassembled."),
    ("reassembly_bytes", "reassembly_bytes", "gauge", "Bytes held by requests being reassembled."),
    ("in_flight", "batches_in_flight", "gauge", "Batches handed back before their work finished (GPU)."),
    ("queued", "queued_calls", "gauge", "Calls received and waiting for a batch."),
)


BATCH_HELP = "Calls per batch."
QDELAY_HELP = "Time from a call's last request datagram to the start of the batch that runs it."
SERVICE_HELP = ("Server time of a call, by function: from its last request datagram to its reply handed to the "
                "sender (queue delay, batch, run).")


def _batch_buckets(batch_sizes: dict[Any, Any]) -> tuple[list[tuple[str, int]], int]:
    """(cumulative buckets, sum) of a {batch size: batches} histogram."""
    sizes = {int(k): int(v) for k, v in batch_sizes.items()}
    buckets = [(str(le), sum(v for k, v in sizes.items() if k <= le)) for le in (1, 2, 4, 8, 16, 32, 64, 128)]
    return buckets + [("+Inf", sum(sizes.values()))], sum(k * v for k, v in sizes.items())


def _qdelay_buckets(qd: dict[str, Any]) -> tuple[list[tuple[str, int]], float]:
    """(cumulative buckets in seconds, sum in seconds) of a stats() queue_delay dict."""
    cum, buckets = 0, []
    for le_us, n in zip(qd["le_us"], qd["counts"]):
        cum += int(n)
        buckets.append(("+Inf" if le_us is None else repr(le_us / 1e6), cum))
    return buckets, qd["sum_us"] / 1e6


MetricsOf = Callable[[Any, str], Iterable[Metric]]  # a stats source's families: (its stats, the prefix)


def family(prefix: str, kind: str, name: str, help_: str,
           labels: Sequence[str] = ()) -> CounterMetricFamily | GaugeMetricFamily:
    """An empty counter ("counter") or gauge family named PREFIX_NAME: the core's and a stats
    source's metrics are made alike."""
    cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
    return cls(f"{prefix}_{name}", help_, labels=list(labels))


def families(st: dict[str, Any], prefix: str = PREFIX, extra: Mapping[str, MetricsOf] | None = None) -> Iterator[Metric]:
    """The metric families of a Server.stats() dict (prometheus_client core families), and for
    each key of extra present in it, the families its function makes of st[key] (a capability's
    own metrics, given with Server.add_stats_source: the core names none)."""
    def fam(kind: str, name: str, help_: str, labels: Sequence[str] = ()) -> CounterMetricFamily | GaugeMetricFamily:
        return family(prefix, kind, name, help_, labels)

    for key, name, kind, help_ in _SCALARS:
        if key in st:
            f = fam(kind, name, help_)
            f.add_metric([], int(st[key]))
            yield f
    for key, name, label, help_ in (("drops", "drops", "reason", "Datagrams dropped, by reason."),
                                    ("errors", "errors", "code", "ERROR replies sent, by code."),
                                    ("functions", "function_calls", "function", "Calls run, by function.")):
        f = fam("counter", name, help_, [label])
        for k, v in st.get(key, {}).items():
            f.add_metric([str(k)], int(v))
        yield f
    h = HistogramMetricFamily(f"{prefix}_batch_size", BATCH_HELP)
    h.add_metric([], *_batch_buckets(st.get("batch_sizes", {})))
    yield h
    if st.get("queue_delay"):
        h = HistogramMetricFamily(f"{prefix}_queue_delay_seconds", QDELAY_HELP)
        h.add_metric([], *_qdelay_buckets(st["queue_delay"]))
        yield h
    per = st.get("by_function", {})
    if per:
        acc = fam("counter", "function_accepted_calls", "Calls accepted (complete requests queued), by function.",
                  ["function"])
        err = fam("counter", "function_errors", "ERROR replies sent, by function and code (BUSY and DRAINING "
                  "answers among them).", ["function", "code"])
        queued = fam("gauge", "function_queued_calls", "Calls waiting for a batch, by function.", ["function"])
        bs = HistogramMetricFamily(f"{prefix}_function_batch_size", BATCH_HELP + " By function.", labels=["function"])
        qd = HistogramMetricFamily(f"{prefix}_function_queue_delay_seconds", QDELAY_HELP + " By function.",
                                   labels=["function"])
        sv = HistogramMetricFamily(f"{prefix}_function_service_seconds", SERVICE_HELP, labels=["function"])
        for name, f in per.items():
            acc.add_metric([name], int(f["calls"]))
            for code, n in f["errors"].items():
                err.add_metric([name, code], int(n))
            queued.add_metric([name], int(f["queued"]))
            bs.add_metric([name], *_batch_buckets(f["batch_sizes"]))
            qd.add_metric([name], *_qdelay_buckets(f["queue_delay"]))
            if "service" in f:
                sv.add_metric([name], *_qdelay_buckets(f["service"]))
        yield from (acc, err, queued, bs, qd, sv)
    a = st.get("auth")
    if a and (a["ok"] or a["forbidden"] or a["expired"] or a["reloads"]):  # a server with keys (docs/security.md)
        for name, key, help_ in (("auth_ok", "ok", "Datagrams authenticated (version 5: session, tag, counter; "
                                  "version 4: key, tag, time, replay window)."),
                                 ("auth_forbidden", "forbidden", "Calls refused FORBIDDEN: a function their key may "
                                  "not call."),
                                 ("auth_expired", "expired", "Calls refused FORBIDDEN: their key has expired."),
                                 ("auth_reloads", "reloads", "Key tables taken in while serving.")):
            f = fam("counter", name, help_)
            f.add_metric([], int(a[key]))
            yield f
    if a and (a["sessions"] or a["sessions_made"]):  # a server that has made a version 5 session
        f = fam("gauge", "auth_sessions", "Version 5 sessions held.")
        f.add_metric([], int(a["sessions"]))
        yield f
        f = fam("gauge", "auth_tombstones", "Forgotten version 5 sessions kept while their line has calls.")
        f.add_metric([], int(a["tombstones"]))
        yield f
        for name, key, help_ in (("auth_sessions_made", "sessions_made", "Version 5 sessions made."),
                                 ("auth_sessions_forgotten", "sessions_forgotten", "Version 5 sessions forgotten "
                                  "(past their time, moved on from, their key gone, or making room)."),
                                 ("auth_tomb_resumes", "tomb_resumes", "Version 5 sessions made by a resume "
                                  "naming a forgotten session (its line followed).")):
            f = fam("counter", name, help_)
            f.add_metric([], int(a[key]))
            yield f
    for k, v in st.get("socket_buffers", {}).items():
        f = fam("gauge", f"socket_{k}_bytes", f"Effective socket {k} size.")
        f.add_metric([], int(v))
        yield f
    d = st.get("dpdk")
    if d:
        for name, key, help_ in (("dpdk_rx_frames", "rx_frames", "Frames received by the DPDK port."),
                                 ("dpdk_tx_frames", "tx_frames", "Frames sent by the DPDK port."),
                                 ("dpdk_tx_failed", "tx_failed", "Frames the DPDK port did not take."),
                                 ("dpdk_arp_replies", "arp_replies", "ARP replies sent.")):
            f = fam("counter", name, help_)
            f.add_metric([], int(d[key]))
            yield f
        f = fam("counter", "dpdk_frame_drops", "Frames the DPDK port dropped, by reason.", ["reason"])
        for k, v in d["drops"].items():
            f.add_metric([str(k)], int(v))
        yield f
    yield from _executor_families(st.get("executors", {}), fam)
    for key, more in (extra or {}).items():  # a stats source's own families (Server.add_stats_source)
        if st.get(key):
            yield from more(st[key], prefix)


def executor_parts(load: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(lane, its load) of one executor's load() (Server.stats()["executors"][name]): a LanePool's
    lanes by name, a StagePipeline's stages as stage0, stage1, any other executor as one part ""."""
    if load.get("kind") == "lanes":
        for lane, part in load["lanes"].items():
            yield str(lane), part
    elif load.get("kind") == "stages":
        for i, part in enumerate(load["stages"]):
            yield f"stage{i}", part
    else:
        yield "", load


# an executor part's load() key -> (metric name, type, help)
_EXECUTOR = (("threads", "executor_threads", "gauge", "Threads of a function's executor (by lane or stage)."),
             ("queued", "executor_queued_batches", "gauge", "Batches waiting for a thread of the executor."),
             ("running", "executor_running_batches", "gauge", "Batches running on the executor's threads."),
             ("batches", "executor_batches", "counter", "Batches the executor has run."),
             ("busy_s", "executor_busy_seconds", "counter",
              "Seconds the executor's threads spent running batches (over threads x time: its load)."))


def _executor_families(executors: Mapping[str, Any], fam: Callable[..., Any]) -> Iterator[Metric]:
    """The executors' load (Server.stats()["executors"]: ThreadPool, LanePool, StagePipeline, or
    another executor's load()) by function and lane; a key an executor does not report is left out."""
    if not executors:
        return
    out = {key: fam(kind, name, help_, ["function", "lane"]) for key, name, kind, help_ in _EXECUTOR}
    for function, load in executors.items():
        for lane, part in executor_parts(load):
            for key, f in out.items():
                if isinstance(part.get(key), (int, float)):
                    f.add_metric([function, lane], part[key])
    yield from out.values()


def host_cpu_seconds(path: str = "/proc/stat") -> dict[str, float] | None:
    """The host's CPU seconds since boot by mode (all CPUs summed: user, nice, system, idle, iowait,
    irq, softirq, steal), from Linux's /proc/stat; None where there is none."""
    try:
        with open(path) as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    hz = os.sysconf("SC_CLK_TCK")
    modes = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return {m: int(v) / hz for m, v in zip(modes, first[1:])}


class HostCollector(Collector):
    """The host's CPU time by mode and its CPU count (splitrpc_host_cpu_seconds_total,
    splitrpc_host_cpus): what `splitrpc top` shows as the host's CPU. One read of /proc/stat a scrape."""

    def __init__(self, prefix: str = PREFIX) -> None:
        self._prefix = prefix

    def collect(self) -> Iterator[Metric]:
        secs = host_cpu_seconds()
        if secs is None:
            return
        f = family(self._prefix, "counter", "host_cpu_seconds", "The host's CPU seconds, all CPUs summed, by mode "
                   "(Linux /proc/stat).", ["mode"])
        for mode, v in secs.items():
            f.add_metric([mode], v)
        yield f
        g = family(self._prefix, "gauge", "host_cpus", "CPUs of the host (online).")
        g.add_metric([], os.cpu_count() or 1)
        yield g


class StatsCollector(Collector):
    """A prometheus_client collector over stats(), a callable returning a Server.stats() dict
    (read at each scrape, on the scraping thread)."""

    def __init__(self, stats: Callable[[], dict[str, Any]], prefix: str = PREFIX,
                 extra: Mapping[str, MetricsOf] | None = None) -> None:
        self._stats, self._prefix, self._extra = stats, prefix, extra

    def collect(self) -> Iterator[Metric]:
        yield from families(self._stats(), self._prefix, self._extra)


def registry_for(server: Server, *, process: bool = True) -> CollectorRegistry:
    """A registry with the server's collector and (process=True) prometheus-client's process
    collector (CPU seconds, memory, open files of this process)."""
    from prometheus_client import ProcessCollector

    reg = CollectorRegistry(auto_describe=False)
    reg.register(StatsCollector(server.stats, extra=server.stats_metrics))
    if process:
        ProcessCollector(registry=reg)
        reg.register(HostCollector())
    return reg


def prometheus_text(st: dict[str, Any], prefix: str = PREFIX, extra: Mapping[str, MetricsOf] | None = None) -> str:
    """The Prometheus text exposition (format 0.0.4) of a Server.stats() dict (extra: as families)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StatsCollector(lambda: st, prefix, extra))
    return generate_latest(reg).decode()
