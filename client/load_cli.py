"""load_cli.py: `splitrpc load`: warm-up, validation, then closed-loop, open-loop (rate sweep)
or trace-replay runs against a splitrpc server; writes JSON, CSV and PNG reports."""
from __future__ import annotations

import argparse
import os
import sys
import threading
from datetime import datetime, timezone

import numpy as np

from splitrpc import __version__
from splitrpc.client import CLIENT_DEFAULTS
from splitrpc.wire import PROTOCOLS
from splitrpc.client import Client
from splitrpc.dpdk import DPDKError
from splitrpc.errors import CallTimeout, SplitRPCError, Unavailable
from splitrpc import arrivals, plugins
from splitrpc.loadgen import report
from splitrpc.loadgen.progress import ProgressLine
from splitrpc.loadgen.request_set import RequestSet, load_request_set
from splitrpc.load_run import Records, run_load
from splitrpc.loadgen.reporting import write_json
from splitrpc.loadgen.validate import validate, validate_set


class LoadError(Exception):
    """A load job that cannot run as asked (bad arguments, unreadable files)."""


def comma_list(kind, positive: bool = True):
    """An argparse type: a non-empty comma-separated list of `kind` (> 0 each if positive)."""
    def parse(text: str) -> list:
        try:
            v = [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__} values, got {text!r}") from None
        if not v:
            raise argparse.ArgumentTypeError("expected at least one value")
        if positive and min(v) <= 0:
            raise argparse.ArgumentTypeError("expected positive values")
        return v
    return parse


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("load", help="load a splitrpc server: closed loop, open loop or trace replay",
                       description="Warm-up, validation, then the measured runs. Every timestamp is taken "
                                   "in native code; open-loop latency counts from each call's due time.")
    # --host, --port and --protocol left out take the library's defaults (srpc_client_config_init).
    p.add_argument("--host", help=f"the server's address (default: {CLIENT_DEFAULTS['host']})")
    p.add_argument("--port", type=int, help=f"the server's UDP port (default: {CLIENT_DEFAULTS['port']})")
    p.add_argument("--service", default="vecadd", help="built-in service: vecadd, matmul, echo, head")
    p.add_argument("--func-id", type=int, help="call this function id instead of a built-in service")
    p.add_argument("--func", metavar="NAME", dest="func_name",
                   help="call the server's function of this name: its specs from the server's describe, "
                        "random inputs built from them (tensor functions)")
    p.add_argument("--request-file", help="request bytes (with --func-id)")
    p.add_argument("--expect-file", help="the reply every call must get (with --func-id)")
    p.add_argument("--requests", metavar="FILE.npz",
                   help="a request set (with --func-id, instead of --request-file): each call draws one of its "
                        "requests by its weights (seeded by --seed); latency is also reported per request class. "
                        "npz arrays: data, offsets[, expect_data, expect_offsets, weights, names]")
    p.add_argument("--mode", choices=("closed", "open", "trace"), default="closed")
    p.add_argument("--concurrency", type=comma_list(int), default=[1], help="closed: calls outstanding, e.g. 1,16,32")
    p.add_argument("--calls", type=int, default=20000, help="closed: recorded calls per concurrency")
    p.add_argument("--rates", type=comma_list(float), default=[1000.0], help="open: offered calls/s, e.g. 1000,10000")
    p.add_argument("--duration", type=float, default=5.0, help="open: seconds per rate; trace: the replay's length")
    p.add_argument("--arrival", choices=tuple(arrivals.ARRIVALS), default="poisson")
    p.add_argument("--cv", type=float, default=4.0, help="hyperexp: coefficient of variation (> 1)")
    p.add_argument("--trace", help="trace: CSV of time_s,rate_rps to replay")
    p.add_argument("--wiki-peak", type=float, help="trace: replay a Wikipedia-like day peaking at this rate")
    p.add_argument("--noise", type=float, default=0.1, help="trace: relative Gaussian noise of the generated day")
    p.add_argument("--bin-s", type=float, help="trace: time bin of the series (default: duration/100)")
    p.add_argument("--warmup-s", type=float, default=1.0, help="warm-up seconds, not recorded (0: none)")
    p.add_argument("--validate", type=int, default=32, help="validation calls with varied inputs (0: none)")
    p.add_argument("--timeout-ms", type=float, default=1000.0)
    p.add_argument("--max-outstanding", type=int, default=4096, help="open: calls outstanding at most")
    p.add_argument("--spin", action="store_true", help="busy-poll between sends (most exact send times)")
    p.add_argument("--busy-poll", action="store_true", help="the client spins while waiting for replies")
    p.add_argument("--transport", choices=("udp", "dpdk"), default="udp",
                   help="dpdk: send from a DPDK port (see --dpdk-port, --dpdk-args, --local-ip)")
    p.add_argument("--dpdk-port", help="dpdk: the port's DPDK name, e.g. net_af_packet0")
    p.add_argument("--dpdk-args", default="", help="dpdk: EAL arguments, space-separated, e.g. "
                                                   "'--no-huge --no-shconf -l 0 --vdev=net_af_packet0,iface=eth1'")
    p.add_argument("--local-ip", help="dpdk: this client's IPv4 address on the port")
    p.add_argument("--server-mac", help="dpdk: the server's MAC (else asked by ARP)")
    # The load generator's own default, unlike the library's: no retransmission, so that losses show.
    p.add_argument("--retries", type=int, default=0,
                   help="retransmissions of a call whose reply is late (0: none, so losses show as timeouts)")
    p.add_argument("--protocol", type=int, choices=PROTOCOLS + (4, 5),
                   help="wire protocol version: 2 checks every header (docs/PROTOCOL-v2.md), 3 also every "
                        "datagram's data (docs/PROTOCOL-v3.md), 1 is PROTOCOL.md's "
                        f"(default: {CLIENT_DEFAULTS['protocol']}); with --key: 5 (sessions, the default) or 4 "
                        "(the legacy signed datagrams)")
    p.add_argument("--key", metavar="FILE", help="a key file (splitrpc keys new --client-out FILE), or FILE:ID for one "
                                                 "key of a table: authenticated calls in sessions (docs/security.md)")
    p.add_argument("--encrypt", action="store_true", help="with --key: the sessions encrypt the data")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="splitrpc-load", help="directory for report.json, runs.csv and PNGs")
    p.add_argument("--label", default="splitrpc")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_load)
    return p


FUNC_REQUESTS = 64  # random requests of a --func run (drawn uniformly per call)


def _described(a):
    """--func NAME: (func_id, request set of FUNC_REQUESTS random requests) from the server's
    describe."""
    from splitrpc.describe import NotDescribed

    if a.func_id is not None or a.requests or a.request_file:
        raise LoadError("--func names the function and builds its requests: not with --func-id, --requests or "
                        "--request-file")
    try:
        with Client(a.host, a.port, timeout=max(a.timeout_ms / 1e3, 1.0), key=a.key) as c:
            desc = c.describe()
            info = desc.by_name(a.func_name)
    except (SplitRPCError, NotDescribed) as e:
        raise LoadError(f"--func {a.func_name}: the server did not describe itself ({type(e).__name__}: {e})") from None
    except KeyError as e:
        raise LoadError(f"--func: {e.args[0]}") from None
    rng = np.random.default_rng(a.seed)
    try:
        reqs = [info.example(rng, max_bytes=desc.max_message) for _ in range(FUNC_REQUESTS)]
    except ValueError as e:
        raise LoadError(f"--func: {e} (--func-id {info.func_id} --request-file FILE)") from None
    return info.func_id, RequestSet(reqs)


def _target(a):
    """(func_id, request, expected reply or None, service or None, request set or None); with a
    request set, request and expected reply are None."""
    if a.func_name:
        func_id, rs = _described(a)
        return func_id, None, None, None, rs
    if a.requests:
        if a.func_id is None:
            raise LoadError("--requests needs --func-id (the function its requests call)")
        if a.request_file or a.expect_file:
            raise LoadError("--requests replaces --request-file and --expect-file: give one or the other")
        try:
            rs = load_request_set(a.requests)
        except ValueError as e:
            raise LoadError(f"--requests {e}") from None
        return a.func_id, None, None, None, rs
    if a.func_id is not None:
        if not a.request_file:
            raise LoadError("--func-id needs --request-file (the request bytes) or --requests (a request set)")
        try:
            with open(a.request_file, "rb") as f:
                req = f.read()
            exp = None
            if a.expect_file:
                with open(a.expect_file, "rb") as f:
                    exp = f.read()
        except OSError as e:
            raise LoadError(str(e)) from None
        return a.func_id, req, exp, None, None
    caps = getattr(a, "capabilities", None) or plugins.capabilities()
    svc = plugins.find_callee(caps, a.service, a, checked=False)
    if svc is None or svc.example is None or svc.expected is None:  # a load run checks every reply exactly
        exact = [n for cap in caps for n in cap.callee_names() if (c := cap.callee(n, a, checked=False))
                 and c.example is not None and c.expected is not None]
        raise LoadError(f"unknown service {a.service!r}; built-in: {', '.join(exact)} (or use --func-id)")
    req = svc.example(np.random.default_rng(a.seed))
    return svc.func_id, req, svc.expected(req), svc, None


def _trace(a) -> tuple[np.ndarray, np.ndarray, float]:
    if a.trace and a.wiki_peak:
        raise LoadError("give --trace or --wiki-peak, not both")
    if a.trace:
        t, r = arrivals.read_trace_csv(a.trace)
        return t, r, float(t[-1] + (t[-1] - t[-2] if len(t) > 1 else 1.0))
    if a.wiki_peak:
        t, r = arrivals.wikipedia_day(a.wiki_peak, a.duration, noise=a.noise, seed=a.seed)
        return t, r, a.duration
    raise LoadError("--mode trace needs --trace FILE.csv or --wiki-peak RATE")


class Job:
    """One `splitrpc load` invocation: holds the client, target and options. With a request
    set, each run's calls draw their requests from one generator seeded by --seed."""

    def __init__(self, a, client: Client, func_id: int, req: bytes | None, exp: bytes | None,
                 rs: RequestSet | None = None):
        self.a, self.c, self.func_id, self.req, self.exp, self.rs = a, client, func_id, req, exp, rs
        self.rng = np.random.default_rng(a.seed)

    def run(self, title: str, **kw) -> Records:
        if self.rs is not None:
            n = kw["n"] if kw.get("concurrency") else len(kw["schedule"])
            target = {"request": self.rs.requests, "expect": self.rs.expects, "index": self.rs.draw(n, self.rng)}
        else:
            target = {"request": self.req, "expect": self.exp}
        with ProgressLine(title, enabled=not self.a.quiet) as line:
            return run_load(self.c, self.func_id, timeout_s=self.a.timeout_ms / 1e3, spin=self.a.spin,
                            max_outstanding=self.a.max_outstanding, on_progress=line.update, interval_s=0.25,
                            **target, **kw)

    def summarize(self, r: Records, label: str) -> dict:
        """report.summarize, with the request set's class names (by_request)."""
        return report.summarize(r, label, names=self.rs.class_names() if self.rs is not None else None)

    def warmup(self, concurrency: int = 0, rate: float = 0.0) -> dict | None:
        s = self.a.warmup_s
        if s <= 0:
            return None
        if concurrency:
            stop = threading.Event()
            timer = threading.Timer(s, stop.set)
            timer.start()
            try:
                r = self.run("warm-up", concurrency=concurrency, n=200_000, stop=stop)
            finally:
                timer.cancel()
        else:
            r = self.run("warm-up", schedule=arrivals.arrivals(self.a.arrival, rate, max(1, int(rate * s)),
                                                               cv=self.a.cv, seed=self.a.seed + 1000))
        return self.summarize(r, "warm-up")


def _print_row(s: dict) -> None:
    lat = s["latency_us"]
    key = f"c={s['concurrency']}" if s["mode"] == "closed" else f"{s['offered_rps']:,.0f}/s"
    p = lambda v: "-" if v is None else f"{v:,.1f}"  # noqa: E731
    print(f"{s['label']:>10s} {key:>12s} {s['achieved_rps']:>12,.0f} {p(lat['p50']):>10s} {p(lat['p99']):>10s} "
          f"{p(lat['p99.9']):>10s} {s['errors']:>7,d} {s['invalid']:>7,d}", flush=True)
    for name, c in s.get("by_request", {}).items():  # a request set: one line per request class
        lat = c["latency_us"]
        print(f"{'':>10s} {name[:12]:>12s} {c['calls']:>12,d} {p(lat['p50']):>10s} {p(lat['p99']):>10s} "
              f"{p(lat['p99.9']):>10s} {c['errors']:>7,d} {c['invalid']:>7,d}", flush=True)


def _plots(a, out: str, runs: list[dict], records: list[Records], series: dict | None) -> list[str]:
    from splitrpc.loadgen import plots

    made = []
    cdf = {(f"c={s['concurrency']}" if s["mode"] == "closed" else f"{s['offered_rps']:,.0f}/s"): r.latency_ns() / 1e3
           for s, r in zip(runs, records) if len(r.latency_ns())}
    if cdf:
        made.append(plots.latency_cdf(cdf, os.path.join(out, "latency_cdf.png")))
    if a.mode == "closed":
        made.append(plots.throughput_vs_concurrency(
            {a.label: [(s["concurrency"], s["achieved_rps"]) for s in runs]},
            os.path.join(out, "throughput_vs_concurrency.png")))
    elif a.mode == "open":
        pts = [{"offered_rps": s["offered_rps"], "achieved_rps": s["achieved_rps"],
                "mean_us": s["latency_us"]["mean"] or float("nan"), "p99_us": s["latency_us"]["p99"] or float("nan")}
               for s in runs]
        made.append(plots.latency_vs_load({a.label: pts}, os.path.join(out, "latency_vs_load.png")))
    elif series is not None:
        made.append(plots.latency_over_time(series["t_s"], series["offered_rps"], series["achieved_rps"],
                                            series["p50_us"], series["p99_us"],
                                            os.path.join(out, "latency_over_time.png"),
                                            title=f"{a.label}: trace replay"))
    return made


def _probe(c: Client, a, func_id: int, req) -> None:
    """One call before anything else, so a server that is not there fails fast and clearly
    (a remote error is fine here: validation and the runs count those)."""
    try:
        c.call(func_id, req)
    except CallTimeout:
        raise LoadError(f"no reply from {c.host}:{c.port} within {a.timeout_ms:g} ms: is a server "
                        f"(`splitrpc serve`) running there?") from None
    except Unavailable as e:
        raise LoadError(f"{e}: is a server (`splitrpc serve`) running there?") from None
    except SplitRPCError:
        pass


def _mean_request_bytes(rs: RequestSet) -> int:
    """The request size a call sends on average (by the set's probabilities)."""
    return round(float(np.dot(rs.probabilities, [len(q) for q in rs.requests])))


def cmd_load(a) -> int:
    try:
        return _load(a)
    except (LoadError, arrivals.TraceError, ValueError, OSError, DPDKError) as e:
        print(f"splitrpc load: {e}", file=sys.stderr)
        return 2


def _load(a) -> int:
    func_id, req, exp, svc, rs = _target(a)
    if a.timeout_ms <= 0 or a.calls <= 0 or a.duration <= 0 or a.max_outstanding <= 0:
        raise LoadError("--timeout-ms, --calls, --duration and --max-outstanding must be > 0")
    if a.mode == "trace":
        t, r, end = _trace(a)  # before anything is sent: a bad trace is a usage error
    os.makedirs(a.out, exist_ok=True)
    doc: dict = {"tool": f"splitrpc load {__version__}", "command": " ".join(sys.argv),
                 "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": report.machine(),
                 "target": {"host": None, "port": None, "service": svc.name if svc else None, "func_id": func_id,
                            "request_bytes": len(req) if rs is None else _mean_request_bytes(rs),
                            "checks_replies": (exp if rs is None else rs.expects) is not None,
                            "protocol": a.protocol or (5 if a.key else CLIENT_DEFAULTS["protocol"]),
                            "encrypt": bool(a.encrypt),
                            "retries": a.retries},
                 "mode": a.mode, "arrival": a.arrival if a.mode != "closed" else None}
    if rs is not None:
        sizes = [len(q) for q in rs.requests]
        classes: dict = {}
        for name, pr in zip(rs.class_names(), rs.probabilities.tolist()):
            c = classes.setdefault(name, {"requests": 0, "probability": 0.0})
            c["requests"] += 1
            c["probability"] += pr
        doc["target"]["request_set"] = {
            "file": a.requests, "requests": len(rs), "request_bytes_min": min(sizes), "request_bytes_max": max(sizes),
            "classes": {k: {**c, "probability": round(c["probability"], 6)} for k, c in classes.items()}}
    runs: list[dict] = []
    records: list[Records] = []
    series = None
    dpdk_kw = {} if a.transport == "udp" else {
        "transport": "dpdk", "dpdk_port": a.dpdk_port, "dpdk_args": a.dpdk_args.split(), "local_ip": a.local_ip,
        "server_mac": a.server_mac}
    with Client(a.host, a.port, timeout=a.timeout_ms / 1e3, busy_poll=a.busy_poll, protocol=a.protocol, retries=a.retries,
                key=a.key, encrypt=a.encrypt, **dpdk_kw) as c:
        doc["target"].update(host=c.host, port=c.port)  # where the client sends (the defaults' if not given)
        _probe(c, a, func_id, req if rs is None else rs.requests[0])
        job = Job(a, c, func_id, req, exp, rs)
        if a.mode == "closed":
            doc["warmup"] = job.warmup(concurrency=a.concurrency[0])
        elif a.mode == "open":
            doc["warmup"] = job.warmup(rate=a.rates[0])
        else:
            doc["warmup"] = job.warmup(rate=float(np.mean(r)) or 1.0)
        if svc is not None and a.validate > 0:
            v = validate(c, svc, a.validate, seed=a.seed + 1)
            doc["validation"] = v.as_dict()
            print(f"validation: {v.ok}/{v.calls} replies correct" + (f"; {'; '.join(v.problems)}" if v.problems else ""),
                  flush=True)
        elif rs is not None and rs.expects is not None and a.validate > 0:
            v = validate_set(c, func_id, rs.requests, rs.expects, a.validate)
            doc["validation"] = v.as_dict()
            print(f"validation: {v.ok}/{v.calls} replies correct (the request set's requests in turn)"
                  + (f"; {'; '.join(v.problems)}" if v.problems else ""), flush=True)
        else:
            doc["validation"] = None
        print(f"{'system':>10s} {'load':>12s} {'calls/s':>12s} {'p50 µs':>10s} {'p99 µs':>10s} {'p99.9 µs':>10s} "
              f"{'errors':>7s} {'invalid':>7s}", flush=True)
        if a.mode == "closed":
            for conc in a.concurrency:
                recs = job.run(f"closed c={conc}", concurrency=conc, n=a.calls)
                records.append(recs)
                runs.append(job.summarize(recs, a.label))
                _print_row(runs[-1])
                if recs.interrupted:
                    break
        elif a.mode == "open":
            for i, rate in enumerate(a.rates):
                n = max(1, int(rate * a.duration))
                sched = arrivals.arrivals(a.arrival, rate, n, cv=a.cv, seed=a.seed + i)
                recs = job.run(f"open {rate:,.0f}/s", schedule=sched)
                records.append(recs)
                runs.append(job.summarize(recs, a.label))
                _print_row(runs[-1])
                if recs.interrupted:
                    break
        else:
            sched = arrivals.trace_arrivals(t, r, end, arrival=a.arrival, cv=a.cv, seed=a.seed)
            if len(sched) == 0:
                raise LoadError("the trace asks for no calls at all")
            doc["trace"] = {"source": a.trace or f"wikipedia-like day, peak {a.wiki_peak}/s, noise {a.noise}",
                            "points": len(t), "duration_s": end, "calls": len(sched)}
            recs = job.run("trace", schedule=sched)
            records.append(recs)
            runs.append(job.summarize(recs, a.label))
            _print_row(runs[-1])
            series = report.time_series(recs, a.bin_s or max(end / 100, 0.01))
            report.write_series_csv(os.path.join(a.out, "series.csv"), series)
            doc["series"] = series
    doc["runs"] = runs
    report.write_csv(os.path.join(a.out, "runs.csv"), runs)
    if not a.no_plots:
        try:
            doc["plots"] = [os.path.basename(p) for p in _plots(a, a.out, runs, records, series)]
        except ImportError as e:
            print(f"plots skipped: {e}", file=sys.stderr)
            doc["plots"] = []
    write_json(os.path.join(a.out, "report.json"), doc)
    print(f"wrote {a.out}/report.json, runs.csv" + (", series.csv" if series is not None else "")
          + "".join(f", {p}" for p in doc.get("plots", [])), flush=True)
    bad = sum(s["invalid"] for s in runs)
    v = doc["validation"]
    if bad or (v is not None and not v["passed"]):
        why = [f"{bad} invalid replies in the measured runs"] if bad else []
        if v is not None and not v["passed"]:
            why.append(f"validation: {v['calls'] - v['ok']} of {v['calls']} calls wrong or failed")
        print("FAILED: " + "; ".join(why), file=sys.stderr)
        return 1
    return 0
