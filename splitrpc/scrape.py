"""scrape.py: a server's admin endpoint read as `splitrpc top` shows it: /metrics and /readyz fetched (Snapshot), and two snapshots made into rates, quantiles and loads per function, executor lane and reason (view)."""
from __future__ import annotations

import http.client
import json
import math
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Iterable

from prometheus_client.parser import text_string_to_metric_families

from splitrpc.metrics import PREFIX

Labels = tuple[tuple[str, str], ...]  # a sample's labels, sorted
MAX_BODY = 32 << 20  # the most of an answer read: a splitrpc /metrics is tens of KiB


class ScrapeError(Exception):
    """An admin endpoint that could not be read, or answered what is not splitrpc's /metrics."""


def admin_url(target: str) -> str:
    """http://HOST:PORT of TARGET: HOST:PORT, [V6]:PORT or an http:// URL (its path dropped).
    ValueError for anything else."""
    t = target.strip()
    if t.startswith(("http://", "https://")):
        scheme, rest = t.split("://", 1)
        return f"{scheme}://{rest.split('/', 1)[0]}"
    host, sep, port = t.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError(f"{target!r} is not HOST:ADMIN_PORT (the port of `splitrpc serve --admin-port`)")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


@dataclass
class Snapshot:
    """One reading of an admin endpoint: every /metrics sample by (name, labels), /readyz's body
    ({} where it gave none), and when (time.monotonic())."""

    url: str
    t: float
    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)
    ready: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str, **labels: str) -> float:
        """The sample name with exactly these labels; 0 where there is none."""
        return self.samples.get((name, tuple(sorted(labels.items()))), 0.0)

    def series(self, name: str, label: str) -> dict[str, float]:
        """{value of label: sample} of a family's samples named name (other labels must be absent)."""
        out = {}
        for (n, labels), v in self.samples.items():
            if n == name and len(labels) == 1 and labels[0][0] == label:
                out[labels[0][1]] = v
        return out

    def labelled(self, name: str) -> Iterable[tuple[dict[str, str], float]]:
        for (n, labels), v in self.samples.items():
            if n == name:
                yield dict(labels), v


def _get(url: str, timeout: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - an operator's own endpoint
            return r.status, _body(r)
    except urllib.error.HTTPError as e:  # /readyz answers 503 with its body when not ready
        return e.code, _body(e)


def _body(r: Any) -> bytes:
    body: bytes = r.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        raise ValueError(f"an answer over {MAX_BODY >> 20} MiB")
    return body


def snapshot(url: str, timeout: float = 2.0) -> Snapshot:
    """Reads url's /metrics and /readyz (each costs the server one stats() at most). ScrapeError
    when the endpoint cannot be reached or /metrics is not a splitrpc server's."""
    t = time.monotonic()
    try:
        code, body = _get(url + "/metrics", timeout)
        rcode, rbody = _get(url + "/readyz", timeout)
    except (OSError, ValueError, http.client.HTTPException) as e:  # not HTTP, reset, too long...
        raise ScrapeError(f"{url}: {getattr(e, 'reason', None) or type(e).__name__ + ': ' + str(e)[:200]}") from e
    if code != 200:
        raise ScrapeError(f"{url}/metrics answered HTTP {code}: {body[:200].decode(errors='replace').strip()}")
    snap = Snapshot(url, t)
    try:
        for fam in text_string_to_metric_families(body.decode()):
            for s in fam.samples:
                if math.isfinite(s.value):  # a splitrpc server writes none other; NaN or inf would be no count
                    snap.samples[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    except ValueError as e:
        raise ScrapeError(f"{url}/metrics is not Prometheus text: {e}") from e
    if (f"{PREFIX}_rx_datagrams_total", ()) not in snap.samples:
        raise ScrapeError(f"{url}/metrics has no {PREFIX}_rx_datagrams_total: not a splitrpc server's admin endpoint")
    try:
        ready = json.loads(rbody) if len(rbody) < 4096 else None  # one line of JSON
        snap.ready = ready if isinstance(ready, dict) else {}
    except (ValueError, RecursionError):
        snap.ready = {}
    snap.ready.setdefault("ok", rcode == 200)
    return snap


def quantile_upper(buckets: dict[float, float], q: float) -> float | None:
    """The upper bound of the histogram bucket holding quantile q (0..1) of the counts in buckets
    ({upper bound: cumulative count}, +Inf included): "at most this". None when it holds no count;
    inf when the quantile is past the last finite bound."""
    if not buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    for b in bounds:
        if buckets[b] >= rank and buckets[b] > 0:
            return b
    return bounds[-1]


def _hist_delta(prev: Snapshot | None, cur: Snapshot, name: str, **labels: str) -> dict[float, float]:
    """{upper bound: cumulative count over the interval} of histogram name's buckets (labels besides le)."""
    out = {}
    for lab, v in cur.labelled(name + "_bucket"):
        le = lab.pop("le")
        if lab != labels:
            continue
        before = prev.get(name + "_bucket", le=le, **labels) if prev else 0.0
        out[float(le)] = v - before
    return out


def _rate(prev: Snapshot | None, cur: Snapshot, dt: float, name: str, **labels: str) -> float | None:
    if prev is None or dt <= 0:
        return None
    return max(0.0, cur.get(name, **labels) - prev.get(name, **labels)) / dt


def view(prev: Snapshot | None, cur: Snapshot) -> dict[str, Any]:
    """What `splitrpc top` shows of one server (and prints with --json): totals since the server
    started, and rates, quantiles and loads over the interval since prev (None where there is no
    prev: the first reading). Quantiles are upper bounds of the histograms' buckets: p50/p99 of the
    server time (a call fully received to its reply sent), queue_p50/p99 of the queue delay."""
    p = f"{PREFIX}_"
    dt = cur.t - prev.t if prev else 0.0

    def rate(name: str, **labels: str) -> float | None:
        return _rate(prev, cur, dt, p + name, **labels)

    out: dict[str, Any] = {"target": cur.url, "up": True, "interval_s": round(dt, 3) if prev else None,
                           "state": cur.ready.get("state"), "ready": bool(cur.ready.get("ok")),
                           "pending": cur.ready.get("pending")}
    for key in ("rx_datagrams", "tx_datagrams", "rx_bytes", "tx_bytes", "calls", "replies", "batches",
                "reply_cache_hits"):
        out[key] = {"total": int(cur.get(p + key + "_total")), "per_s": rate(key + "_total")}
    out["queued_calls"] = int(cur.get(p + "queued_calls"))
    out["partial_messages"] = int(cur.get(p + "partial_messages"))
    # functions: calls run and accepted, errors, batch sizes, queue delay, queued now
    functions = []
    for name, run in sorted(cur.series(p + "function_calls_total", "function").items()):
        acc = cur.get(p + "function_accepted_calls_total", function=name)
        nb = cur.get(p + "function_batch_size_count", function=name)
        sb = cur.get(p + "function_batch_size_sum", function=name)
        if prev:
            nb, sb = nb - prev.get(p + "function_batch_size_count", function=name), \
                sb - prev.get(p + "function_batch_size_sum", function=name)
        qd = _hist_delta(prev, cur, p + "function_queue_delay_seconds", function=name)
        sv = _hist_delta(prev, cur, p + "function_service_seconds", function=name)
        errors = {lab["code"]: v for lab, v in cur.labelled(p + "function_errors_total")
                  if lab.get("function") == name and v}
        functions.append({
            "name": name, "calls_total": int(run), "accepted_total": int(acc),
            "calls_per_s": rate("function_calls_total", function=name),
            "mean_batch": round(sb / nb, 2) if nb > 0 else None,
            "p50_us": _us(quantile_upper(sv, 0.50)), "p99_us": _us(quantile_upper(sv, 0.99)),
            "queue_p50_us": _us(quantile_upper(qd, 0.50)), "queue_p99_us": _us(quantile_upper(qd, 0.99)),
            "queued": int(cur.get(p + "function_queued_calls", function=name)),
            "errors": {k: int(v) for k, v in sorted(errors.items())},
            "errors_per_s": rate_sum(prev, cur, dt, p + "function_errors_total", function=name),
        })
    out["functions"] = functions
    for key, label in (("drops", "reason"), ("errors", "code")):
        out[key] = {k: {"total": int(v), "per_s": rate(key + "_total", **{label: k})}
                    for k, v in sorted(cur.series(p + key + "_total", label).items()) if v}
    # executors: by function and lane; load = busy seconds over threads x interval
    execs = []
    for lab, threads in sorted(cur.labelled(p + "executor_threads"),
                               key=lambda x: (x[0].get("function", ""), x[0].get("lane", ""))):
        if set(lab) != {"function", "lane"}:
            continue
        busy = rate("executor_busy_seconds_total", **lab)
        execs.append({"function": lab["function"], "lane": lab["lane"], "threads": int(threads),
                      "queued": int(cur.get(p + "executor_queued_batches", **lab)),
                      "running": int(cur.get(p + "executor_running_batches", **lab)),
                      "batches_per_s": rate("executor_batches_total", **lab),
                      "load": round(busy / threads, 3) if busy is not None and threads > 0 else None})
    out["executors"] = execs
    out["auth"] = {k.removeprefix(p + "auth_").removesuffix("_total"): int(v) for (k, lab), v in cur.samples.items()
                   if k.startswith(p + "auth_") and k.endswith("_total") and not lab}
    sessions = cur.samples.get((p + "auth_sessions", ()))
    if sessions is not None:
        out["auth"]["sessions"] = int(sessions)
    # CPU: the server process's (of one core) and the host's (of all its CPUs), over the interval
    cpu: dict[str, Any] = {"process": None, "host": None, "host_cpus": int(cur.get(p + "host_cpus")) or None}
    proc = _rate(prev, cur, dt, "process_cpu_seconds_total")  # prometheus-client's process collector
    cpu["process"] = round(proc, 3) if proc is not None else None
    if prev:
        now, before = cur.series(p + "host_cpu_seconds_total", "mode"), prev.series(p + "host_cpu_seconds_total", "mode")
        spent = {m: now[m] - before.get(m, now[m]) for m in now}
        total = sum(spent.values())
        if total > 0:
            cpu["host"] = round(1 - (spent.get("idle", 0) + spent.get("iowait", 0)) / total, 3)
    out["cpu"] = cpu
    return out


def rate_sum(prev: Snapshot | None, cur: Snapshot, dt: float, name: str, **labels: str) -> float | None:
    """The rate of the sum of name's samples that carry labels (and any others)."""
    if prev is None or dt <= 0:
        return None

    def total(s: Snapshot) -> float:
        return sum(v for lab, v in s.labelled(name) if all(lab.get(k) == x for k, x in labels.items()))
    return max(0.0, total(cur) - total(prev)) / dt


def _us(seconds: float | None) -> float | str | None:
    """Seconds as microseconds; past the histogram's last bound, "+Inf" (JSON has no infinity)."""
    if seconds is None:
        return None
    return "+Inf" if seconds == float("inf") else round(seconds * 1e6, 3)
