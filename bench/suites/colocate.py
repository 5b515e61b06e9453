"""colocate.py: `splitrpc bench colocate`: three GNN services on this machine's CPU under one memory budget, co-located (fifo, sqtf, bqt) against one call at a time (serial), through the real server and the native open-loop load generator.

Services (server/colocation): GCN on pubmed-shaped subgraphs (F = 500), SAGE and GIN on
artist-shaped ones (F = 100), LAYERS layers of HIDDEN; requests are each dataset's 25 2-hop
subgraphs (workload.py) at --scale. Each QoS target is 2x the service's mean standalone time as
a client sees it (each request called alone, after a warm-up round, on a serial server using every
core), measured once, so every configuration is judged by the same targets.

Configurations, each its own server process: "serial" runs one call at a time with PyTorch's
intra-op threads on every core (the fair one-at-a-time baseline: it uses the whole machine for
each call); "fifo", "sqtf", "bqt" run a group's calls at once, one intra-op thread each. The
memory budget (--budget-mib, default twice the largest request's PMC) binds every configuration.

Load: the three services at equal call rates, open-loop Poisson, at --loads fractions of what
serial service can carry (1 / the sum of the services' mean standalone times, per service);
each run --duration seconds or --min-calls calls per service, whichever is longer; latency from
each call's due time. Reported per configuration, load and service: p50, p99, QoS violations
(client-side: latency over the target; errors count as violations), achieved rate; and the
server's groups, mean group size and peak reservation.

On 2 cores the room for co-location is small (PyTorch's intra-op threads already use both cores
for one call): reported as measured.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from datetime import datetime, timezone

import numpy as np

from splitrpc.loadgen.reporting import add_subcommand, command_of, run_as_module, run_suite
from splitrpc.bench.helpers import model_server
from splitrpc.bench.helpers.procs import Forked, free_port

SERVICES = (("gcn", "pubmed", 1), ("sage", "artist", 2), ("gin", "artist", 3))  # model, dataset, func_id
CONFIGS = ("serial", "fifo", "sqtf", "bqt")
LAYERS, HIDDEN = 3, 64
LOADS = (0.5, 0.8, 1.1)


def add_parser(sub) -> argparse.ArgumentParser:
    return add_subcommand(sub, "colocate", "GNN services co-located on the CPU vs one call at a time",
                          __doc__, _arguments, cmd_bench_colocate)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma list of serial, fifo, sqtf, bqt")
    p.add_argument("--loads", default=",".join(map(str, LOADS)), help="offered loads, x serial capacity")
    p.add_argument("--scale", type=float, default=0.05, help="graphs at this fraction of their nodes")
    p.add_argument("--budget-mib", type=float, default=None, help="memory budget (default: 2x the largest PMC)")
    p.add_argument("--duration", type=float, default=6.0, help="seconds per run at least")
    p.add_argument("--min-calls", type=int, default=200, help="calls per service and run at least")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--out", default="splitrpc-bench-colocate")
    # the server side as a command (the benchmark forks it instead, procs.Forked): python -m splitrpc.bench.suites.colocate --serve ...
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--policy", default="bqt", help=argparse.SUPPRESS)
    p.add_argument("--budget", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--qos", default="", help=argparse.SUPPRESS)
    p.add_argument("--torch-threads", type=int, default=1, help=argparse.SUPPRESS)


def _say(a, msg: str) -> None:
    if not a.quiet:
        print(msg, file=sys.stderr, flush=True)


def build(scale: float, seed: int):
    """{model: (torch model, features, classes, [(x, edge_index) tensors of each subgraph], limits)}:
    the same in the benchmark and in its servers (weights from the seed)."""
    from splitrpc.services.colocation import op_models, workload

    out = {}
    for kind, ds, _ in SERVICES:
        _, _, feats, classes = workload.DATASETS[ds]
        m = op_models.build(kind, feats, hidden=HIDDEN, layers=LAYERS, classes=classes, seed=seed)
        reqs = []
        for i in range(workload.SUBGRAPHS):
            ei, nn = workload.subgraph_edges(ds, i, scale=scale, seed=seed)
            if ei.shape[1] == 0:
                continue
            x, _ = op_models.random_request(nn, 1, feats, seed=seed * 1000 + i)
            reqs.append((x, ei.contiguous()))
        limits = (max(x.shape[0] for x, _ in reqs), max(ei.shape[1] for _, ei in reqs))
        out[kind] = (m, feats, classes, reqs, limits)
    return out


def serve(a, ready=None) -> int:
    """The benchmark's server: the three services co-located under a.policy and a.budget, until
    SIGTERM; ready.set() once it serves (without ready: prints READY). The benchmark runs it
    forked (procs.Forked); `--serve` runs it as a command."""
    import signal

    import splitrpc
    from splitrpc.services.colocation import colocate

    services = build(a.scale, a.seed)
    qos = dict(kv.split("=") for kv in a.qos.split(",") if kv)
    need = max(colocate.request_size(lim[0], lim[1], f) for _, f, _, _, lim in services.values())
    srv = splitrpc.Server("127.0.0.1", a.port, wait="block", max_message=max(need, 1 << 20))
    co = colocate.CoLocation(a.budget, policy=a.policy, torch_threads=a.torch_threads)
    for kind, _, fid in SERVICES:
        m, feats, classes, _, (mn, me) = services[kind]
        co.add(srv, fid, kind, m, features=feats, classes=classes, max_nodes=mn, max_edges=me, qos=float(qos[kind]))

    srv.add_function(model_server.stats_function(srv, keys=("colocation",)), model_server.STATS_FUNC_ID, "stats",
                     raw=True, max_response=model_server.STATS_MAX_REPLY)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    srv.start()
    if ready is not None:
        ready.set()
    else:
        print("READY", flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    srv.stop()
    srv.close()
    return 0


def run(a) -> dict:
    import torch

    from splitrpc import arrivals, load_run
    from splitrpc.loadgen.report import machine
    from splitrpc.services.colocation import colocate, pmc
    import splitrpc

    t_start = time.monotonic()
    configs = a.configs.split(",")
    for c in configs:
        if c not in CONFIGS:
            raise SystemExit(f"bench colocate: unknown configuration {c!r}; known: {', '.join(CONFIGS)}")
    loads = [float(x) for x in a.loads.split(",")]
    _say(a, f"services and their requests (scale {a.scale}) ...")
    services = build(a.scale, a.seed)
    cores = os.cpu_count() or 1
    pmcs, packed = {}, {}
    for kind, (m, feats, classes, reqs, _) in services.items():
        est = pmc.Estimator(m)
        pmcs[kind] = [est.estimate(x.shape[0], ei.shape[1]).pmc for x, ei in reqs]
        packed[kind] = [colocate.pack_request(x.numpy(), ei.numpy()) for x, ei in reqs]
    budget = int(a.budget_mib * 2**20) if a.budget_mib else 2 * max(max(v) for v in pmcs.values())

    def server(cfg, qos):
        port = free_port()
        threads = cores if cfg == "serial" else 1
        sa = argparse.Namespace(port=port, policy=cfg, budget=budget, torch_threads=threads, scale=a.scale, seed=a.seed,
                                qos=",".join(f"{k}={v!r}" for k, v in qos.items()))
        _say(a, f"{cfg}: server with {threads} intra-op thread(s) ...")
        # forked from a fork server that imported PyTorch and PyG once for every configuration's server
        proc = Forked(serve, (sa,))
        proc.wait_ready(120)
        return proc, port

    # Standalone time as a client sees it: each request alone (one call at a time, after a warm-up
    # round) to a serial server using every core; the QoS target is twice its mean per service.
    proc, port = server("serial", {k: 1.0 for k in services})
    standalone = {}
    with proc, splitrpc.Client("127.0.0.1", port, timeout=30.0) as cl:
        for kind, _, fid in SERVICES:
            times = []
            for rnd in range(2):
                for req in packed[kind]:
                    t0 = time.perf_counter()
                    cl.call(fid, req)
                    if rnd:
                        times.append(time.perf_counter() - t0)
            standalone[kind] = float(np.mean(times))
            _say(a, f"  {kind}: {len(packed[kind])} requests of {min(map(len, packed[kind])) / 1e3:.0f}.."
                    f"{max(map(len, packed[kind])) / 1e3:.0f} kB, mean standalone call {standalone[kind] * 1e3:.1f} ms, "
                    f"PMC up to {max(pmcs[kind]) / 2**20:.1f} MiB")
    qos = {k: 2.0 * v for k, v in standalone.items()}
    per_service_capacity = 1.0 / sum(standalone.values())
    results = []
    for cfg in configs:
        proc, port = server(cfg, qos)
        with proc:
            with splitrpc.Client("127.0.0.1", port, timeout=30.0) as cl:
                for kind, _, fid in SERVICES:  # every request once: replies are the model's; warms the
                    m, _, classes, reqs, _ = services[kind]  # server (PMC estimates cached by shape)
                    for (x, ei), req in zip(reqs, packed[kind]):
                        got = np.frombuffer(cl.call(fid, req), np.float32).reshape(x.shape[0], classes)
                        with torch.inference_mode():
                            want = m(x, ei).numpy()
                        if not np.allclose(got, want, atol=1e-4, rtol=1e-4):
                            raise SystemExit(f"bench colocate: {cfg} server's {kind} reply differs from the model's")
            for f in loads:
                rate = f * per_service_capacity
                n = max(a.min_calls, int(rate * a.duration))
                before = _read_stats(port)
                recs = {}

                def drive(kind, fid, seed):
                    with splitrpc.Client("127.0.0.1", port, timeout=max(10.0, 50 * qos[kind])) as c:
                        sched = arrivals.arrivals("poisson", rate, n, seed=seed)
                        recs[kind] = load_run.run_load(c, fid, packed[kind], schedule=sched, timeout_s=max(10.0, 50 * qos[kind]),
                                                     index=np.random.default_rng(seed).integers(0, len(packed[kind]), n))

                ths = [threading.Thread(target=drive, args=(k, fid, a.seed * 100 + fid)) for k, _, fid in SERVICES]
                for t in ths:
                    t.start()
                for t in ths:
                    t.join()
                after = _read_stats(port)
                row = {"config": cfg, "load": f, "rate_per_service": rate, "services": {},
                       "groups": after["groups"] - before["groups"], "peak_reserved": after["peak_reserved"],
                       "budget": budget}
                for kind, _, _ in SERVICES:
                    r = recs[kind]
                    lat = r.latency_ns() / 1e9
                    ok = lat.size
                    total = len(r.rec)
                    dur = (r.rec["done_ns"].max() - r.rec["sched_ns"].min()) / 1e9 if total else float("nan")
                    row["services"][kind] = {
                        "calls": int(total), "ok": int(ok), "errors": int(total - ok),
                        "p50_ms": float(np.quantile(lat, 0.5) * 1e3) if ok else None,
                        "p99_ms": float(np.quantile(lat, 0.99) * 1e3) if ok else None,
                        "violations": float(((lat > qos[kind]).sum() + (total - ok)) / total) if total else None,
                        "achieved_rps": float(ok / dur) if total else None}
                # calls the groups ran, counted with the groups (a call the client gave up on still ran)
                ran = after["grouped_calls"] - before["grouped_calls"]
                row["mean_group_size"] = ran / row["groups"] if row["groups"] else None
                results.append(row)
                _say(a, f"  load {f:g} ({rate:.1f}/s per service): " + "  ".join(
                    f"{k} p99 {v['p99_ms'] or float('nan'):.0f} ms viol {v['violations']:.0%}" for k, v in row["services"].items())
                    + f"  groups {row['groups']} (mean size {row['mean_group_size'] or 0:.2f})")
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
            "machine": machine(), "scale": a.scale, "layers": LAYERS, "hidden": HIDDEN, "budget": budget,
            "standalone_s": standalone, "qos_s": qos, "pmc_max": {k: max(v) for k, v in pmcs.items()},
            "results": results, "seconds": time.monotonic() - t_start}


def _read_stats(port: int) -> dict:
    """The co-location counters of the server on port (its stats function)."""
    import splitrpc
    with splitrpc.Client("127.0.0.1", port, timeout=10.0) as c:
        return model_server.read_stats(c, timeout=10.0)["colocation"]


def markdown(doc: dict) -> str:
    m = doc["machine"]
    lines = ["# GNN services co-located on the CPU vs one call at a time (issue 17)", "",
             f"Command: `{doc['command']}`  ", f"Date: {doc['date']}; machine: {m.get('cpu', '?')}, {m.get('cpus', '?')} CPUs; "
             f"{doc['seconds']:.0f} s.", "",
             f"Services: GCN (pubmed-shaped), SAGE and GIN (artist-shaped), {doc['layers']} layers of {doc['hidden']}, "
             f"graphs at scale {doc['scale']}; memory budget {doc['budget'] / 2**20:.1f} MiB (PMC up to " +
             ", ".join(f"{k} {v / 2**20:.1f}" for k, v in doc["pmc_max"].items()) + " MiB). QoS targets (2x mean "
             "standalone call, alone, all cores): " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in doc["qos_s"].items()) + ".", "",
             "serial: one call at a time, PyTorch intra-op threads on every core; fifo/sqtf/bqt: a group's calls at "
             "once, one intra-op thread each. Loads are fractions of serial capacity, equal rates per service.", "",
             "| config | load | service | p50 (ms) | p99 (ms) | QoS violations | achieved calls/s | groups (mean size) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in doc["results"]:
        for k, s in r["services"].items():
            p50 = f"{s['p50_ms']:.1f}" if s["p50_ms"] is not None else "-"
            p99 = f"{s['p99_ms']:.1f}" if s["p99_ms"] is not None else "-"
            lines.append(f"| {r['config']} | {r['load']:g} | {k} | {p50} | {p99} | {s['violations']:.0%} | "
                         f"{s['achieved_rps']:.1f} | {r['groups']} ({r['mean_group_size'] or 0:.2f}) |")
    return "\n".join(lines) + "\n"


def plot(doc: dict, path: str) -> str:
    from matplotlib import figure  # no pyplot: nothing global touched; savefig renders with Agg

    kinds = [k for k, _, _ in SERVICES]
    configs = list(dict.fromkeys(r["config"] for r in doc["results"]))
    fig = figure.Figure(figsize=(4 * len(kinds), 6.4))
    axes = fig.subplots(2, len(kinds), squeeze=False)
    for j, k in enumerate(kinds):
        for cfg in configs:
            rows = [r for r in doc["results"] if r["config"] == cfg]
            x = [r["load"] for r in rows]
            axes[0][j].plot(x, [r["services"][k]["p99_ms"] or np.nan for r in rows], marker="o", label=cfg)
            axes[1][j].plot(x, [100 * r["services"][k]["violations"] for r in rows], marker="o", label=cfg)
        axes[0][j].set_title(f"{k}: p99 (ms)", fontsize=9)
        axes[0][j].set_yscale("log")
        axes[1][j].set_title(f"{k}: QoS violations (%)", fontsize=9)
        axes[1][j].set_xlabel("offered load (x serial capacity)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Co-located GNN services on this CPU vs one at a time (measured)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def cmd_bench_colocate(a) -> int:
    if a.serve:
        return serve(a)
    return run_suite(a, name="colocate", who="bench colocate", run=run, markdown=markdown, plot=plot,
                     needs=("torch", "torch_geometric"),
                     hint="PyTorch and torch-geometric: pip install 'splitrpc[gnn]'")


def main(argv: list[str] | None = None) -> int:
    return run_as_module("splitrpc.bench.suites.colocate", __doc__, _arguments, cmd_bench_colocate, argv)


if __name__ == "__main__":
    sys.exit(main())
