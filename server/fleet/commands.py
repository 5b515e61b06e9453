"""commands.py: `splitrpc fleet up|status|down`: a fleet of splitrpc replicas on a Ray cluster (a local one on 127.0.0.1 with simulated nodes of server kinds by default), its controller set to a target or to follow a `splitrpc plan provision` plan, its state, and its teardown (after Hercules, Ke et al., HPCA 2022).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

from splitrpc.errors import SplitRPCError

DEFAULT_NODES = "default=4"


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("fleet", help="replicas on a Ray cluster (local by default): fleet up | status | down",
                       description=__doc__)
    fs = p.add_subparsers(dest="fleet_cmd", required=True)
    up = fs.add_parser("up", help="start a local cluster (unless --address) and deploy replicas",
                       description="Starts a local Ray cluster on 127.0.0.1 with simulated nodes (--nodes), unless "
                                   "--address names a running one; deploys the fleet's controller and directory; "
                                   "sets the target (--replicas) or follows a plan (--plan). The cluster and the "
                                   "replicas keep running after this command: `splitrpc fleet down` stops them.")
    up.add_argument("--address", help="a running Ray cluster's address (default: start a local one)")
    up.add_argument("--nodes", default=DEFAULT_NODES,
                    help="the local cluster's simulated nodes: KIND=SLOTS[xCOUNT],... (default: %(default)s)")
    up.add_argument("--serve", default="", metavar="ARGS",
                    help="what each replica serves: the arguments of `splitrpc serve`, e.g. 'myapp:server "
                         "--max-batch 8' (default: the built-in services)")
    up.add_argument("--name", default="default", help="the model's name in the fleet (default: %(default)s)")
    up.add_argument("--replicas", metavar="KIND=N,...", help="replicas per kind (default: one on the first kind)")
    up.add_argument("--spec", metavar="FILE.json",
                    help='several models: {"services": [{"name", "argv", "env", "kinds": {KIND: {"argv", "env"}}}], '
                         '"target": {MODEL: {KIND: N}}} (instead of --serve/--name/--replicas)')
    up.add_argument("--keys", metavar="FILE",
                    help="the replicas take only calls signed with a key of this table (docs/security.md); it "
                         "reaches them through Ray, not their command lines. With --spec: its \"keys\" (a file or "
                         "a table, for every service; a service's own \"keys\" first)")
    up.add_argument("--plan", metavar="PROVISION.json",
                    help="follow the MILP plan of `splitrpc plan provision` (its models must be the fleet's)")
    up.add_argument("--day-s", type=float, help="with --plan: compress the plan's day into this many seconds")
    up.add_argument("--grace", type=float, default=10.0, help="a removed replica drains for at most S seconds")
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the replicas")
    st = fs.add_parser("status", help="the cluster's nodes, the fleet's target and replicas")
    st.add_argument("--address")
    st.add_argument("--json", action="store_true")
    ky = fs.add_parser("keys", help="a new key table for a model's replicas: the live ones read it again "
                                    "(no call lost), later ones start with it")
    ky.add_argument("file", metavar="FILE")
    ky.add_argument("--name", default="default", help="the model (default: %(default)s)")
    ky.add_argument("--address")
    dn = fs.add_parser("down", help="drain every replica, remove the controller, stop the local cluster")
    dn.add_argument("--address")
    dn.add_argument("--grace", type=float, default=10.0)
    p.set_defaults(func=cmd_fleet)
    return p


def _pairs(text: str, what: str) -> dict:
    out = {}
    for part in filter(None, (x.strip() for x in text.split(","))):
        k, sep, v = part.partition("=")
        if not sep:
            raise ValueError(f"{what}: {part!r} is not KIND=N")
        out[k.strip()] = int(v)
    return out


def _plan_steps(path: str, day_s: float | None) -> list[dict]:
    """The MILP allocations of a provision.json as controller steps ({at_s, target})."""
    with open(path) as f:
        doc = json.load(f)
    steps = doc["steps"]
    span = steps[-1]["time_s"] + (steps[-1]["time_s"] - steps[-2]["time_s"] if len(steps) > 1 else 1.0)
    scale = (day_s / span) if day_s else 1.0
    out = []
    for s in steps:
        target: dict = {}
        for key, n in s["milp"]["servers"].items():
            kind, _, model = key.partition("/")
            target.setdefault(model, {})[kind] = int(n)
        for m in doc["models"]:
            for k in doc["inventory"]:
                target.setdefault(m, {}).setdefault(k, 0)
        out.append({"at_s": s["time_s"] * scale, "target": target})
    return out


def cmd_fleet(a) -> int:
    try:
        from splitrpc.services.fleet.cluster import import_ray

        import_ray()  # with its loopback settings: the first import of ray decides them
    except ImportError:
        print("fleet: needs ray: pip install 'splitrpc[fleet]'", file=sys.stderr)
        return 2
    from splitrpc.services.fleet import cluster

    try:
        return {"up": _up, "status": _status, "down": _down, "keys": _keys}[a.fleet_cmd](a)
    except (ValueError, OSError, cluster.ClusterError, SplitRPCError) as e:
        print(f"splitrpc fleet {a.fleet_cmd}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - FleetError and Ray's errors: one line, not a traceback
        if type(e).__name__ in ("FleetError",) or type(e).__module__.startswith("ray"):
            print(f"splitrpc fleet {a.fleet_cmd}: {e}", file=sys.stderr)
            return 1
        raise


def _up(a) -> int:
    from splitrpc.services.fleet import cluster

    if a.spec:
        with open(a.spec) as f:
            spec_stat = os.fstat(f.fileno())
            spec = json.load(f)
        services_d, target = spec["services"], spec.get("target", {})
        shared = spec.get("keys", a.keys)
        if any(isinstance(k, dict) for k in (spec.get("keys"), *(d.get("keys") for d in services_d))):
            from splitrpc.auth import check_private  # a spec holding a key table inline is a key file

            check_private(spec_stat, a.spec)
        services_d = [dict(d, keys=_table(d.get("keys", shared), os.path.dirname(os.path.abspath(a.spec))))
                      for d in services_d]
    else:
        services_d = [{"name": a.name, "argv": shlex.split(a.serve), "keys": _table(a.keys, os.getcwd())}]
        target = None
    nodes = cluster.parse_nodes(a.nodes)
    if target is None:
        target = {a.name: _pairs(a.replicas, "--replicas") if a.replicas else {nodes[0].kind: 1}}
    steps = _plan_steps(a.plan, a.day_s) if a.plan else None
    if a.address is None:
        t = time.monotonic()
        rec = cluster.start_local(nodes)
        print(f"local Ray cluster on {rec['address']} ({a.nodes}; keeper pid {rec['pid']}) in "
              f"{time.monotonic() - t:.1f} s", flush=True)
    from splitrpc.services.fleet import replicas

    services = [replicas.Service(**{"cwd": os.getcwd(), **d}) for d in services_d]
    ctl = replicas.deploy(services, address=a.address, grace_s=a.grace)
    ray = replicas.ray
    if steps:
        ray.get(ctl.set_target.remote(steps[0]["target"]))
        reps = replicas.wait_live(ctl, steps[0]["target"], a.timeout)
        n = ray.get(ctl.follow.remote(steps))
        print(f"following {a.plan}: {n} steps over {steps[-1]['at_s']:g} s", flush=True)
    else:
        ray.get(ctl.set_target.remote(target))
        reps = replicas.wait_live(ctl, target, a.timeout)
    for r in reps:
        print(f"  {r['model']:<12} {r['kind']:<10} {r['address']}")
    print("calls go to the replicas directly: splitrpc.services.fleet.replicas.fleet_pool(MODEL), or "
          "`splitrpc describe ADDRESS`; `splitrpc fleet status`, `splitrpc fleet down`")
    return 0


def _table(keys, base: str) -> dict | None:
    """A key table's dict form from a file (relative to base) or a table given inline; None: no keys."""
    from splitrpc.auth import KeyTable

    if keys is None:
        return None
    if isinstance(keys, str):
        return KeyTable.load(os.path.join(base, keys)).to_dict()
    return KeyTable.from_dict(keys, "the spec's keys").to_dict()


def _keys(a) -> int:
    from splitrpc.services.fleet import replicas

    ctl = replicas.controller(a.address)
    n = replicas.ray.get(ctl.set_keys.remote(a.name, _table(a.file, os.getcwd())))
    print(f"{a.name}: the key table of {a.file} sent to {n} replicas (each reads it again on SIGHUP); later replicas "
          "start with it")
    return 0


def _status(a) -> int:
    from splitrpc.services.fleet import cluster, replicas

    ray = replicas.ray
    ctl = replicas.controller(a.address)
    st = ray.get(ctl.status.remote())
    nodes = [{"node": n["NodeID"][:8], "alive": n["Alive"],
              "kinds": {k[len(cluster.KIND_PREFIX):]: v for k, v in n["Resources"].items()
                        if k.startswith(cluster.KIND_PREFIX)}} for n in ray.nodes()]
    rec = cluster.read_state() if a.address is None else None
    bad = cluster.non_loopback_sockets(cluster.descendants(rec["pid"])) if rec else None
    if a.json:
        print(json.dumps({"nodes": nodes, **st, "non_loopback_sockets": bad}, indent=1, default=str))
        return 0
    print("nodes:")
    for n in nodes:
        print(f"  {n['node']} {'alive' if n['alive'] else 'DEAD '} {n['kinds'] or '(head)'}")
    print(f"target: {st['target']}" + (f"  (plan: {st['plan_steps_left']} steps left)" if st["plan_steps_left"] else ""))
    print("replicas:")
    for r in st["replicas"]:
        print(f"  {r['model']:<12} {r['kind']:<10} {r['state']:<9} {r['address'] or '-':<22} up {r['age_s']:g} s")
    print(f"counts: {st['counts']}")
    if bad is not None:
        print("every socket of the local cluster on loopback" if not bad else f"NOT on loopback: {bad}")
    return 0


def _down(a) -> int:
    from splitrpc.services.fleet import cluster

    try:
        from splitrpc.services.fleet import replicas

        counts = replicas.teardown(a.address, a.grace)
        print(f"fleet drained: {counts}" if counts is not None else "no fleet controller")
    except cluster.ClusterError:
        print("no fleet cluster")
    if a.address is None:
        print("local cluster stopped" if cluster.stop_local() else "no local cluster")
    return 0
