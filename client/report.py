"""report.py: turns the records of load runs into summaries (HDR percentiles, errors by
code, offered and achieved throughput), a time series for trace replay, and JSON/CSV files."""
from __future__ import annotations

import csv
import math

import numpy as np

from splitrpc.latency_histogram import HdrHistogram, percentiles
from splitrpc.machine import describe
from splitrpc.load_run import INVALID, OK, PENDING, SEND_FAILED, TIMEOUT, Records, code_name

LATENCY_KEYS = ("min", "mean", "p50", "p90", "p95", "p99", "p99.9", "max")


def _us(h: HdrHistogram) -> dict:
    d = h.to_dict()
    return {k: (None if d[k] is None else round(d[k] / 1e3, 3)) for k in LATENCY_KEYS}


def by_request(r: Records, names=None) -> dict:
    """Per request class of a run with a request set (Records.req_index): calls, ok, errors,
    invalid, timeouts and latency percentiles (µs, from the due time). names gives each
    request's class (requests sharing a name are one class, listed in "requests"); without
    names each request is its own class, keyed by its index as a string. Classes that no call
    used are listed with 0 calls."""
    if r.req_index is None:
        raise ValueError("these records do not say which request each call sent (req_index)")
    n_reqs = int(r.meta.get("request_set", {}).get("requests", 0)) or int(r.req_index.max(initial=0)) + 1
    keys = [str(k) for k in range(n_reqs)] if names is None else [str(x) for x in names]
    if len(keys) != n_reqs:
        raise ValueError(f"{len(keys)} names for {n_reqs} requests")
    members: dict[str, list[int]] = {}
    for k, key in enumerate(keys):
        members.setdefault(key, []).append(k)
    codes = r.rec["code"]
    out = {}
    for key, ks in members.items():
        mine = np.isin(r.req_index, ks)
        c = codes[mine]
        ok = c == OK
        done = c != PENDING
        okr = r.rec[mine & (codes == OK)]
        h = HdrHistogram()
        h.record((okr["done_ns"] - okr["sched_ns"]).astype(np.int64))
        out[key] = {"requests": ks, "calls": int(mine.sum()), "ok": int(ok.sum()), "errors": int((done & ~ok).sum()),
                    "invalid": int((c == INVALID).sum()), "timeouts": int((c == TIMEOUT).sum()),
                    "latency_us": _us(h)}
    return out


def summarize(r: Records, label: str = "", names=None) -> dict:
    """One run as a flat-ish dict: counts by outcome, throughput and latency percentiles (µs).
    A run with a request set also gets "by_request" (see by_request; names: one per request)."""
    rec = r.rec
    n = len(rec)
    codes = rec["code"]
    ok = codes == OK
    done = codes != PENDING
    by_code: dict[str, int] = {}
    for c, k in zip(*np.unique(codes[done & ~ok], return_counts=True)):
        by_code[code_name(int(c))] = int(k)
    h = HdrHistogram()
    h.record(r.latency_ns())
    lag = HdrHistogram()
    lag.record((rec["sent_ns"][done] - rec["sched_ns"][done]).astype(np.int64))
    fin = rec[done]
    span_s = (int(fin["done_ns"].max()) - int(rec["sched_ns"][0] if r.mode == "open" else fin["sent_ns"].min())) / 1e9 \
        if len(fin) else 0.0
    if r.mode == "open":
        due_span = rec["sched_ns"][-1] / 1e9
        offered = n / due_span if due_span > 0 else math.nan
    else:
        offered = None
    return {
        "label": label, "mode": r.mode, "concurrency": r.concurrency or None,
        "calls": n, "finished": int(done.sum()), "ok": int(ok.sum()),
        "errors": int((done & ~ok).sum()), "errors_by_code": by_code,
        "timeouts": int((codes == TIMEOUT).sum()), "invalid": int((codes == INVALID).sum()),
        "send_failed": int((codes == SEND_FAILED).sum()), "not_finished": int((~done).sum()),
        "interrupted": r.interrupted,
        "duration_s": round(span_s, 6),
        "offered_rps": None if offered is None else round(offered, 1),
        "achieved_rps": round(int(ok.sum()) / span_s, 1) if span_s > 0 else 0.0,
        "latency_us": _us(h),
        "send_lag_us": _us(lag),   # how late the generator sent compared with the schedule
        **r.meta,
        **({"by_request": by_request(r, names)} if "request_set" in r.meta else {}),
    }


def binned_p50_p99(bins: np.ndarray, latency_ns: np.ndarray, nb: int) -> tuple[np.ndarray, np.ndarray]:
    """p50 and p99 in µs (latency_histogram.percentiles) of the latencies (ns) in each of nb bins (bins[i]:
    latency i's bin), NaN where empty."""
    p50, p99 = np.full(nb, np.nan), np.full(nb, np.nan)
    order = np.argsort(bins, kind="stable")
    sb, sv = bins[order], latency_ns[order]
    edges = np.searchsorted(sb, np.arange(nb + 1))
    for b in range(nb):
        seg = sv[edges[b]:edges[b + 1]]
        if len(seg):
            pct = percentiles(seg, (50, 99))
            p50[b], p99[b] = pct[50] / 1e3, pct[99] / 1e3
    return p50, p99


def time_series(r: Records, bin_s: float = 1.0) -> dict:
    """Per time bin (by due time): offered and achieved rate, p50 and p99 latency (µs)."""
    if not bin_s > 0:
        raise ValueError("bin_s must be > 0")
    rec = r.rec
    bins = (rec["sched_ns"] / (bin_s * 1e9)).astype(np.int64)
    nb = int(bins.max()) + 1 if len(bins) else 0
    offered = np.bincount(bins, minlength=nb) / bin_s
    ok = rec["code"] == OK
    okd = rec[ok]
    done_bins = (okd["done_ns"] / (bin_s * 1e9)).astype(np.int64)
    achieved = np.bincount(done_bins, minlength=nb)[:nb] / bin_s
    lat_ns = okd["done_ns"] - okd["sched_ns"]
    errors = np.bincount(bins[~ok & (rec["code"] != PENDING)], minlength=nb)
    p50, p99 = binned_p50_p99(bins[ok], lat_ns, nb)
    return {"t_s": np.arange(nb) * bin_s, "offered_rps": offered, "achieved_rps": achieved,
            "p50_us": p50, "p99_us": p99, "errors": errors}


def machine() -> dict:
    """The machine a run happened on (splitrpc.machine.describe)."""
    return describe()


CSV_FIELDS = ("label", "mode", "concurrency", "offered_rps", "achieved_rps", "calls", "ok", "errors",
              "timeouts", "invalid", "send_failed", "not_finished", "duration_s") + \
             tuple(f"lat_{k}_us" for k in LATENCY_KEYS) + ("send_lag_p99_us",)


def csv_row(s: dict) -> dict:
    row = {k: s.get(k) for k in CSV_FIELDS if not k.startswith(("lat_", "send_lag"))}
    row.update({f"lat_{k}_us": s["latency_us"][k] for k in LATENCY_KEYS})
    row["send_lag_p99_us"] = s["send_lag_us"]["p99"]
    return row


def write_csv(path: str, summaries: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for s in summaries:
            w.writerow(csv_row(s))


def write_series_csv(path: str, ts: dict) -> None:
    keys = ("t_s", "offered_rps", "achieved_rps", "p50_us", "p99_us", "errors")
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(keys)
        for row in zip(*(ts[k] for k in keys)):
            w.writerow([("" if isinstance(v, float) and math.isnan(v) else round(float(v), 3)) for v in row])


