"""fleet.py: `splitrpc bench fleet`: the fleet on a local Ray cluster with simulated nodes of two server kinds, end to end: each kind's latency-bounded QPS measured (the efficiency tuples), the provisioner's integer-program plan for a Wikipedia-like day compressed to minutes, the controller following it while an open loop replays the day through a Pool (1-second bins against the SLA, calls lost), SIGKILL of a replica under load (failover), and power-of-two choices against random choice over replicas of unequal capacity (same run, alternated).

EMULATED: the replicas serve splitrpc.services.fleet.stand_in, a timed stand-in model (a
sleep per batch, as on an accelerator), and the two kinds differ only by its settings: this
2-vCPU machine cannot give replicas CPUs of their own. What is measured is the control plane
(placement, plan following, drain, failover, choice), not a model. Every process of the cluster
runs on 127.0.0.1, checked at the end (no socket of it on another address).

Outputs under --out: fleet.json, fleet.md and fleet.png (load against provisioned capacity and
replicas by kind over the day; p99 per second against the SLA).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone

import numpy as np

from splitrpc.loadgen.reporting import add_subcommand, command_of, run_as_module, run_suite

KINDS = {  # the simulated kinds: the stand-in model's settings (EMULATED capacities)
    "small": {"FLEET_APP_BATCH_MS": "10", "FLEET_APP_MAX_BATCH": "2", "FLEET_APP_CAPACITY": "64"},
    "big": {"FLEET_APP_BATCH_MS": "5", "FLEET_APP_MAX_BATCH": "4", "FLEET_APP_CAPACITY": "64"},
}
WORK_ID = 300  # fleet_app's function


def add_parser(sub) -> argparse.ArgumentParser:
    return add_subcommand(sub, "fleet", "the fleet on a local Ray cluster: tuples, a day following the "
                          "provisioner's plan, SIGKILL failover, p2c against random", __doc__, _arguments, cmd_fleet)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", default="small=3,big=1", help="simulated nodes, KIND=SLOTS[xCOUNT],... (kinds: "
                   f"{', '.join(KINDS)}; default: %(default)s)")
    p.add_argument("--sla-ms", type=float, default=50.0, help="p99 SLA (default: %(default)s)")
    p.add_argument("--day-s", type=float, default=180.0, help="the day compressed to this (default: %(default)s)")
    p.add_argument("--steps", type=int, default=36, help="re-plans over the day (default: %(default)s)")
    p.add_argument("--peak-frac", type=float, default=0.85,
                   help="the day's peak as a share of the inventory's latency-bounded capacity (default: %(default)s)")
    p.add_argument("--trial-s", type=float, default=3.0, help="seconds per latency-bounded QPS trial")
    p.add_argument("--choice-rounds", type=int, default=3, help="rounds of p2c and of random (default: %(default)s)")
    p.add_argument("--choice-s", type=float, default=5.0, help="seconds per round")
    p.add_argument("--lead-s", type=float, default=3.0, help="a step's additions are made this early")
    p.add_argument("--headroom", type=float, default=0.1,
                   help="plan with each tuple's QPS less this share: a trial of a few seconds that met the SLA "
                        "at the cliff's edge does not meet it for minutes (default: %(default)s)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="splitrpc-fleet")


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(a) -> dict:
    from splitrpc.arrivals import wikipedia_day
    from splitrpc.services.fleet import cluster, replicas
    from splitrpc.loadgen.planning import capacity
    from splitrpc.loadgen.planning import provision as pv

    nodes = cluster.parse_nodes(a.nodes)
    for n in nodes:
        if n.kind not in KINDS:
            raise ValueError(f"--nodes: kind {n.kind!r}: this benchmark simulates {', '.join(KINDS)}")
    inventory: dict = {}
    for n in nodes:
        inventory[n.kind] = inventory.get(n.kind, 0) + n.slots * n.count
    sla = a.sla_ms / 1e3
    payload = np.zeros(16, np.float32).tobytes()
    doc: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command_of(a),
                 "machine": f"{os.cpu_count()} CPUs, {os.uname().machine}", "emulated": True,
                 "kinds": {k: v for k, v in KINDS.items() if k in inventory}, "inventory": inventory,
                 "sla_ms": a.sla_ms}
    t_start = time.monotonic()
    _say(f"starting a local Ray cluster: {a.nodes}")
    rec = cluster.start_local(nodes)
    try:
        svc = replicas.Service("work", argv=["splitrpc.services.fleet.stand_in:setup"],
                            kinds={k: {"env": v} for k, v in KINDS.items()}, grace_s=5.0)
        ctl = replicas.deploy([svc])
        ray = replicas.ray

        def use(target: dict) -> None:
            ray.get(ctl.set_target.remote({"work": target}))
            replicas.wait_live(ctl, {"work": {k: n for k, n in target.items() if n}})
            time.sleep(2 * replicas.REFRESH_S)  # the pools' directories catch up

        # ---- 1. efficiency tuples: each kind's latency-bounded QPS, one replica
        tuples, trials = [], {}
        for kind in inventory:
            _say(f"latency-bounded QPS of one {kind} replica (SLA p99 {a.sla_ms:g} ms)")
            use({k: int(k == kind) for k in inventory})
            with replicas.fleet_pool("work", timeout=2.0) as pool:
                qps, tr = capacity.latency_bounded_qps(
                    lambda r: capacity.open_loop(pool, WORK_ID, payload, r, a.trial_s, seed=a.seed),
                    sla, start=50.0, log=lambda m: _say("  " + m))
            tuples.append(pv.Tuple("work", kind, qps, None))
            trials[kind] = tr
        doc["tuples"] = [t.__dict__ for t in tuples]
        doc["tuple_trials"] = trials

        # ---- 2. the plan for the day
        planned = [pv.Tuple(t.model, t.kind, t.qps * (1 - a.headroom), None) for t in tuples]
        problem = pv.Problem(planned, inventory)
        capacity = sum(inventory[t.kind] * t.qps for t in planned)
        peak = a.peak_frac * capacity
        times, loads = wikipedia_day(peak, a.day_s, points=a.steps, noise=0.05, seed=a.seed)
        over = pv.over_provision(loads)
        steps = []
        for t, ld in zip(times, loads):
            al = problem.milp({"work": float(ld)}, over)
            steps.append({"at_s": float(t), "load": float(ld), "feasible": al.feasible,
                          "target": {"work": {k: al.servers.get((k, "work"), 0) for k in inventory}},
                          "capacity": sum(al.servers.get((t_.kind, "work"), 0) * t_.qps for t_ in planned)})
        doc["plan"] = {"peak": peak, "over_provision": over, "headroom": a.headroom, "steps": steps}
        _say(f"plan: peak {peak:.0f} calls/s, R {over:.3f}, {len(steps)} steps; replaying the day in {a.day_s:g} s")

        # ---- 3. the day: the controller follows the plan, an open loop replays the load
        use(steps[0]["target"]["work"])
        rate_at = lambda t: float(np.interp(t, times, loads))  # noqa: E731
        with replicas.fleet_pool("work", timeout=2.0) as pool:
            t0 = time.time() + 0.5
            ray.get(ctl.follow.remote([{"at_s": s["at_s"], "target": s["target"]} for s in steps], t0, a.lead_s))
            time.sleep(max(0.0, t0 - time.time()))
            day = capacity.open_loop(pool, WORK_ID, payload, rate_at, a.day_s, seed=a.seed + 1,
                                    progress=lambda t: _say(f"  day: {t:5.0f}/{a.day_s:g} s") if int(t) % 30 == 0
                                    else None)
            day_pool = pool.stats()
        events = ray.get(ctl.events_since.remote(t0 - 1))
        bins = day.bins(sla)
        doc["day"] = {"calls": len(day.outcome), **{o: day.count(o) for o in capacity.OUTCOMES},
                      "p99_ms": day.p(0.99) * 1e3, "p50_ms": day.p(0.5) * 1e3, "late_max_ms": day.late_max_s * 1e3,
                      "bins": len(bins), "bins_met": sum(b["met"] for b in bins),
                      "bins_detail": [{**b, "p99_ms": b["p99_s"] * 1e3} for b in bins],
                      "failovers": day_pool["failovers"],
                      "attempts": day_pool["totals"],
                      "events": [{**e, "t_s": round(e["time"] - t0, 2)} for e in events
                                 if e["event"] in ("add", "live", "drain", "drained", "died", "failed")]}
        status = ray.get(ctl.status.remote())
        doc["day"]["controller_counts"] = status["counts"]
        _say(f"day: {doc['day']['bins_met']}/{len(bins)} bins met, {len(day.outcome) - day.count('ok')} calls lost")

        # ---- 4. SIGKILL of a replica under load: the most capable one, at a rate the others carry
        qps = {t.kind: t.qps for t in tuples}
        victim = max(inventory, key=lambda k: qps[k])
        target = {k: (1 if k == victim else inventory[k]) for k in inventory}
        use(target)
        kill_rate = 0.6 * sum(n * qps[k] for k, n in target.items() if k != victim) if len(inventory) > 1 \
            else 0.3 * qps[victim]
        with replicas.fleet_pool("work", timeout=2.0) as pool:
            killed = {}

            def killer():
                time.sleep(3.0)
                killed["t"], killed["wall"] = time.monotonic(), time.time()
                killed["info"] = ray.get(ctl.kill_server.remote(model="work", kind=victim))

            import threading

            th = threading.Thread(target=killer)
            t_run = time.monotonic()
            th.start()
            kr = capacity.open_loop(pool, WORK_ID, payload, kill_rate, 12.0, seed=a.seed + 2)
            th.join()
            kill_pool = pool.stats()
            attempt_s = pool.attempt_timeout
        t_kill = killed["t"] - t_run
        around = (kr.due >= t_kill - 0.5) & (kr.due < t_kill + 2.0)
        replaced = [{**e, "after_kill_s": round(e["time"] - killed["wall"], 2)}
                    for e in ray.get(ctl.events_since.remote(killed["wall"])) if e["event"] in ("died", "live")]
        doc["kill"] = {"rate": kill_rate, "replicas": target, "victim_kind": victim, "calls": len(kr.outcome), "lost": len(kr.outcome) - kr.count("ok"),
                       "killed": killed["info"]["address"], "t_kill_s": t_kill,
                       "max_latency_around_kill_ms": float(np.nanmax(kr.latency[around])) * 1e3 if around.any() else None,
                       "p99_ms": kr.p(0.99) * 1e3, "failovers": kill_pool["failovers"],
                       "attempt_timeout_ms": attempt_s * 1e3, "events": replaced}
        _say(f"SIGKILL: {doc['kill']['lost']} of {len(kr.outcome)} calls lost, slowest around the kill "
             f"{doc['kill']['max_latency_around_kill_ms']:.0f} ms")

        # ---- 5. p2c against random over unequal replicas
        pair = {k: 1 for k in inventory}
        use(pair)
        cap = sum(t.qps for t in tuples)
        rate = 0.75 * cap
        rounds = []
        for k in range(a.choice_rounds):
            for choice in ("p2c", "random"):
                with replicas.fleet_pool("work", timeout=2.0, choice=choice, seed=a.seed + k) as pool:
                    r = capacity.open_loop(pool, WORK_ID, payload, rate, a.choice_s, seed=a.seed + 10 + k)
                    st = pool.stats()
                busy = st["totals"]["busy"]
                rounds.append({"round": k, "choice": choice, "busy": busy, "p99_ms": r.p(0.99) * 1e3,
                               "p50_ms": r.p(0.5) * 1e3, "calls": len(r.outcome), "lost": len(r.outcome) - r.count("ok"),
                               "share": {v_k: v["calls"] for v_k, v in st["replicas"].items()}})
                _say(f"  {choice} round {k}: {busy} BUSY, p99 {r.p(0.99) * 1e3:.1f} ms")
        doc["choice"] = {"rate": rate, "replicas": pair, "rounds": rounds,
                         **{c: {"busy_median": float(np.median([x["busy"] for x in rounds if x["choice"] == c])),
                                "p99_ms_median": float(np.median([x["p99_ms"] for x in rounds if x["choice"] == c]))}
                            for c in ("p2c", "random")}}

        # ---- loopback: every socket of the cluster's processes and of this driver
        doc["non_loopback_sockets"] = cluster.non_loopback_sockets(cluster.descendants(rec["pid"]) + [os.getpid()])
        doc["teardown"] = replicas.teardown()
    finally:
        cluster.stop_local()
    doc["seconds"] = time.monotonic() - t_start
    return doc


def markdown(doc: dict) -> str:
    d, k, c = doc["day"], doc["kill"], doc["choice"]
    lines = [f"# Fleet on a local Ray cluster ({doc['date']})", "",
             "**EMULATED**: replicas serve a timed stand-in model (a sleep per batch); the kinds differ only by its "
             "settings. This measures the control plane, not a model.", "",
             f"Command: `{doc['command']}`  ", f"Machine: {doc['machine']}; every Ray process on 127.0.0.1 "
             f"(sockets elsewhere: {len(doc['non_loopback_sockets'])}).", "",
             "## Efficiency tuples (measured, one replica per kind)", "",
             "| kind | settings | latency-bounded QPS (p99 <= %g ms) |" % doc["sla_ms"], "|---|---|---|"]
    for t in doc["tuples"]:
        lines.append(f"| {t['kind']} | {doc['kinds'][t['kind']]} | {t['qps']:.0f} |")
    p = doc["plan"]
    lines += ["", f"## The day ({len(p['steps'])} steps, peak {p['peak']:.0f} calls/s, R = {p['over_provision']:.3f} "
              f"from the day's history, planned with the tuples less {100 * p['headroom']:.0f}% headroom)",
              "", f"- 1-second bins meeting the SLA (p99 <= {doc['sla_ms']:g} ms, no failed call): "
              f"**{d['bins_met']}/{d['bins']} ({100 * d['bins_met'] / max(1, d['bins']):.1f}%)**",
              f"- calls: {d['calls']:,}; lost (any outcome but a reply): **{d['calls'] - d['ok']}** "
              f"(busy {d['busy']}, draining {d['draining']}, timeout {d['timeout']}, error {d['error']})",
              f"- p50 {d['p50_ms']:.1f} ms, p99 {d['p99_ms']:.1f} ms; the sender fell behind by at most "
              f"{d['late_max_ms']:.1f} ms", f"- controller: {d['controller_counts']}",
              f"- pool failovers (a call sent to a second replica): {d['failovers']}; attempts' outcomes: "
              f"{d['attempts']}", "",
              "## SIGKILL of a replica under load", "",
              f"- replicas {k['replicas']}; {k['calls']:,} idempotent calls at {k['rate']:.0f}/s (60% of what the "
              f"others carry); lost: **{k['lost']}**; killed the {k['victim_kind']} replica {k['killed']} at "
              f"{k['t_kill_s']:.1f} s", f"- slowest call due within 0.5 s before to 2 s after the kill: "
              f"**{k['max_latency_around_kill_ms']:.0f} ms** (bound: attempt_timeout {k['attempt_timeout_ms']:.0f} ms "
              "plus one call)", f"- failovers: {k['failovers']}; after the kill: "
              + ", ".join(f"{e['event']} at +{e['after_kill_s']} s" for e in k["events"]), "",
              f"## Power of two choices against random ({c['replicas']}, {c['rate']:.0f} calls/s, same run, "
              "alternated)", "", "| round | choice | BUSY answers | p50 ms | p99 ms | calls per replica |",
              "|---|---|---|---|---|---|"]
    for r in c["rounds"]:
        lines.append(f"| {r['round']} | {r['choice']} | {r['busy']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
                     f"{r['share']} |")
    lines += ["", f"Medians: p2c {c['p2c']['busy_median']:.0f} BUSY, p99 {c['p2c']['p99_ms_median']:.1f} ms; random "
              f"{c['random']['busy_median']:.0f} BUSY, p99 {c['random']['p99_ms_median']:.1f} ms.", "",
              f"Run time: {doc['seconds']:.0f} s."]
    return "\n".join(lines) + "\n"


def plot(doc: dict, path: str) -> str:
    from matplotlib import figure

    d, p = doc["day"], doc["plan"]
    fig = figure.Figure(figsize=(12, 4.5))
    ax = fig.subplots(1, 2)
    ts = [s["at_s"] for s in p["steps"]]
    ax[0].plot(ts, [s["load"] for s in p["steps"]], label="load (calls/s)")
    ax[0].step(ts, [s["capacity"] for s in p["steps"]], where="post", label="planned capacity (tuples)")
    ax0b = ax[0].twinx()
    for kind in doc["inventory"]:
        ax0b.step(ts, [s["target"]["work"].get(kind, 0) for s in p["steps"]], where="post", linestyle=":",
                  label=f"{kind} replicas")
    ax0b.set_ylabel("replicas")
    ax0b.legend(loc="lower right", fontsize=7)
    ax[0].set_xlabel("s into the day")
    ax[0].legend(loc="upper left", fontsize=7)
    ax[0].set_title("the plan the controller followed", fontsize=9)
    b = d["bins_detail"]
    ax[1].plot([x["t_s"] for x in b], [x["p99_ms"] for x in b], ".-", label="p99 per second")
    ax[1].axhline(doc["sla_ms"], color="r", linestyle="--", label="SLA")
    for e in d["events"]:
        if e["event"] in ("live", "drained"):
            ax[1].axvline(e["t_s"], color="g" if e["event"] == "live" else "k", alpha=0.3, linewidth=0.8)
    ax[1].set_xlabel("s into the day (green: replica live, black: replica drained)")
    ax[1].set_ylabel("ms")
    ax[1].legend(fontsize=7)
    ax[1].set_title(f"{d['bins_met']}/{d['bins']} seconds met the SLA; {d['calls'] - d['ok']} calls lost", fontsize=9)
    fig.suptitle("Fleet on a local Ray cluster (EMULATED kinds: a timed stand-in model)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def cmd_fleet(a) -> int:
    try:
        from splitrpc.services.fleet.cluster import import_ray

        import_ray()  # with its loopback settings: the first import of ray decides them
    except ImportError:
        print("bench fleet: needs ray and scipy: pip install 'splitrpc[fleet]'", file=sys.stderr)
        return 2
    from splitrpc.services.fleet.cluster import ClusterError

    return run_suite(a, name="fleet", who="bench fleet", run=run, markdown=markdown, plot=plot, needs=("scipy",),
                     hint="ray and scipy: pip install 'splitrpc[fleet]'", errors=(ValueError, ClusterError))


def main(argv: list[str] | None = None) -> int:
    return run_as_module("splitrpc.bench.suites.fleet", __doc__, _arguments, cmd_fleet, argv)


if __name__ == "__main__":
    sys.exit(main())
