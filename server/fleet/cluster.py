"""cluster.py: a local Ray cluster for the fleet, every node and driver on 127.0.0.1: simulated nodes of several server kinds (custom resources), kept by a detached process that `splitrpc fleet up` starts and `fleet down` stops; and the check that no process of it listens on or connects to an address other than loopback (after Hercules, Ke et al., HPCA 2022).

Why the environment below. Ray (2.60) turns a node address of 127.0.0.1 into the machine's
routable address (services.resolve_ip_for_localhost), and otherwise finds that address by
"connecting" a UDP socket towards 8.8.8.8. With RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 it takes the
loopback address instead, and since Ray binds its gRPC servers to the node address, every server
of the cluster listens on 127.0.0.1. That setting also makes `ray start` refuse to add a second
node, so the nodes are started by ray.cluster_utils.Cluster (Ray's own multi-node-on-one-machine
harness) in the keeper process. Usage statistics are off (no connection out). These variables are
set before ray is first imported, by import_ray(): every module of the fleet imports ray through it.

Kinds: a node simulating kind K has the custom resource `kind_resource(K)` with one unit per
server slot; a replica of kind K asks for one unit, and no CPU (the node's CPUs are this
machine's, shared; the replicas' capacity is the server's own, see docs/fleet.md).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # node address = loopback (see above)
                "RAY_USAGE_STATS_ENABLED": "0"}             # no usage report to the internet
KIND_PREFIX = "splitrpc-kind-"
NAMESPACE = "splitrpc"
START_TIMEOUT_S = 120.0


class ClusterError(RuntimeError):
    """The local cluster could not be started, found or stopped: the message says why."""


def import_ray():
    """ray, imported with LOOPBACK_ENV set (unless the caller set those variables itself)."""
    for k, v in LOOPBACK_ENV.items():
        os.environ.setdefault(k, v)
    import ray  # noqa: PLC0415 - optional dependency (splitrpc[fleet]), imported on use

    return ray


def kind_resource(kind: str) -> str:
    """The Ray custom resource of a server kind."""
    if not kind or not all(c.isalnum() or c in "-_+." for c in kind):
        raise ValueError(f"server kind {kind!r}: use letters, digits and - _ + . only")
    return KIND_PREFIX + kind


def state_path() -> str:
    """Where `fleet up` records the local cluster (address, keeper pid): one per user."""
    base = os.environ.get("XDG_RUNTIME_DIR") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "splitrpc", "fleet.json")


@dataclass(frozen=True)
class NodeSpec:
    """count simulated nodes of a server kind, each with `slots` server slots."""
    kind: str
    slots: int = 4
    count: int = 1


def parse_nodes(text: str) -> list[NodeSpec]:
    """"KIND=SLOTS[xCOUNT],...", e.g. "small=4x2,big=2": two nodes of kind small with 4 slots each
    and one of kind big with 2."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, sep, rest = part.partition("=")
        try:
            slots, _, count = rest.partition("x")
            spec = NodeSpec(kind.strip(), int(slots) if sep else 4, int(count) if count else 1)
        except ValueError:
            raise ValueError(f"--nodes: {part!r} is not KIND=SLOTS[xCOUNT]") from None
        kind_resource(spec.kind)
        if spec.slots < 1 or spec.count < 1:
            raise ValueError(f"--nodes: {part!r}: slots and count must be >= 1")
        out.append(spec)
    if not out:
        raise ValueError("--nodes: at least one KIND=SLOTS")
    return out


# ---------------------------------------------------------------------- the keeper process

def _keep(nodes: list[NodeSpec], state: str) -> int:
    """The keeper's main: a head node (no kind, no replica slots) and the simulated nodes, all on
    127.0.0.1; writes {address, pid, nodes} to `state`; stops the cluster on SIGTERM/SIGINT."""
    import_ray()
    from ray.cluster_utils import Cluster

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    common = {"node_ip_address": "127.0.0.1", "num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
    c = Cluster(initialize_head=True, head_node_args={**common, "include_dashboard": False},
                shutdown_at_exit=True)
    try:
        for n in nodes:
            for _ in range(n.count):
                c.add_node(**common, resources={kind_resource(n.kind): n.slots})
        os.makedirs(os.path.dirname(state), exist_ok=True)
        tmp = state + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"address": c.address, "pid": os.getpid(), "nodes": [n.__dict__ for n in nodes],
                       "started": time.time()}, f)
        os.replace(tmp, state)
        while not stop:
            time.sleep(0.2)
    finally:
        c.shutdown()
        try:
            with open(state) as f:
                if json.load(f).get("pid") == os.getpid():
                    os.unlink(state)
        except (OSError, ValueError):
            pass
    return 0


def start_local(nodes: list[NodeSpec], state: str | None = None, log: str | None = None) -> dict:
    """Starts the keeper (a detached process: the cluster outlives the command) and waits for it
    to record the cluster. Returns the record ({address, pid, nodes}). Raises ClusterError when a
    cluster is already recorded there and running, or the keeper fails."""
    state = state or state_path()
    rec = read_state(state)
    if rec is not None:
        raise ClusterError(f"a local fleet cluster is already running (pid {rec['pid']}, {rec['address']}); "
                           "`splitrpc fleet down` stops it")
    spec = ",".join(f"{n.kind}={n.slots}x{n.count}" for n in nodes)
    env = {**os.environ, **LOOPBACK_ENV}
    os.makedirs(os.path.dirname(state), exist_ok=True)
    log = log or state + ".log"
    with open(log, "ab") as lf:
        p = subprocess.Popen([sys.executable, "-m", "splitrpc.services.fleet.cluster", "--nodes", spec,
                              "--state", state], stdout=lf, stderr=lf, stdin=subprocess.DEVNULL, env=env,
                             cwd=os.path.dirname(state),  # not a source checkout: its splitrpc/ would shadow ours
                             start_new_session=True)
    end = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < end:
        rec = read_state(state)
        if rec is not None and rec["pid"] == p.pid:
            return rec
        if p.poll() is not None:
            raise ClusterError(f"the cluster keeper exited with {p.returncode}; its log: {log}")
        time.sleep(0.1)
    p.kill()
    raise ClusterError(f"no cluster within {START_TIMEOUT_S:g} s; the keeper's log: {log}")


def read_state(state: str | None = None) -> dict | None:
    """The recorded local cluster, None if there is none or its keeper is gone (a stale record
    is removed)."""
    state = state or state_path()
    try:
        with open(state) as f:
            rec = json.load(f)
        if not _alive(int(rec["pid"])):
            raise ProcessLookupError(rec["pid"])
        return rec
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        try:
            os.unlink(state)
        except OSError:
            pass
        return None


def stop_local(state: str | None = None, timeout: float = 60.0) -> bool:
    """Stops the recorded local cluster (SIGTERM to its keeper, SIGKILL to its process group
    after timeout). False when there was none."""
    state = state or state_path()
    rec = read_state(state)
    if rec is None:
        return False
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()  # this process's driver first: else it outlives the cluster and aborts
    pid = int(rec["pid"])
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not _alive(pid):
            break
        time.sleep(0.1)
    else:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        _alive(pid)  # reaps it if it is our child
    try:
        os.unlink(state)
    except OSError:
        pass
    return True


def _alive(pid: int) -> bool:
    """Whether pid runs (a child of ours that exited is reaped, not taken for alive)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def connect(address: str | None = None, state: str | None = None):
    """ray, initialised as a driver of the cluster at address (default: the recorded local one)
    on 127.0.0.1, in the fleet's namespace. Raises ClusterError when there is no cluster."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    if address is None:
        rec = read_state(state)
        if rec is None:
            raise ClusterError("no fleet cluster: `splitrpc fleet up` starts a local one, or give --address")
        address = rec["address"]
    local = address.split(":")[0] in ("127.0.0.1", "localhost")
    from ray._private import ray_constants

    if local and ray_constants.ENABLE_RAY_CLUSTER:  # it would look for the cluster on the routable address, forever
        raise ClusterError("ray was imported before its loopback settings were made: import it through "
                           "splitrpc.services.fleet.cluster.import_ray(), or set "
                           + " ".join(f"{k}={v}" for k, v in LOOPBACK_ENV.items()))
    # Ray puts the driver's working directory on its workers' import path. The fleet's actors need
    # only the installed splitrpc, which a source checkout there would shadow (the project's own
    # tests run from one): the driver joins from a neutral directory. Not thread-safe (chdir).
    here = os.getcwd()
    os.chdir(tempfile.gettempdir())
    try:
        ray.init(address=address, namespace=NAMESPACE, logging_level="warning", log_to_driver=False,
                 **({"_node_ip_address": "127.0.0.1"} if local else {}))
    finally:
        os.chdir(here)
    return ray


# ---------------------------------------------------------------------- loopback check

def _proc_sockets() -> dict:
    """{inode: (proto, local (ip, port), remote (ip, port), state)} of this network namespace."""
    out = {}
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        try:
            with open(f"/proc/net/{proto}") as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for ln in lines:
            parts = ln.split()
            if len(parts) < 10:
                continue
            out[int(parts[9])] = (proto, _addr(parts[1]), _addr(parts[2]), parts[3])
    return out


def _addr(hexpair: str) -> tuple[str, int]:
    ip_hex, port_hex = hexpair.split(":")
    raw = bytes.fromhex(ip_hex)
    if len(raw) == 4:
        ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:  # four little-endian 32-bit words
        ip = socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
    return ip, int(port_hex, 16)


def is_loopback(ip: str) -> bool:
    if ip.startswith("::ffff:"):
        ip = ip[7:]
    return ip.startswith("127.") or ip == "::1"


def descendants(pid: int) -> list[int]:
    """pid and every process below it (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def non_loopback_sockets(pids) -> list[dict]:
    """Sockets of the given processes bound to, listening on or connected to an address other
    than loopback (the unspecified address 0.0.0.0/:: counts: it listens on every interface; an
    unconnected socket's remote 0.0.0.0 does not). Empty when all is on loopback."""
    table = _proc_sockets()
    bad = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if not link.startswith("socket:["):
                continue
            s = table.get(int(link[8:-1]))
            if s is None:  # a Unix socket, or another namespace's
                continue
            proto, local, remote, _ = s
            connected = remote[1] != 0
            if local[1] == 0 and not connected:  # created, never bound: no address yet
                continue
            if not is_loopback(local[0]) or (connected and not is_loopback(remote[0])):
                bad.append({"pid": pid, "comm": comm, "proto": proto, "local": f"{local[0]}:{local[1]}",
                            "remote": f"{remote[0]}:{remote[1]}" if connected else None})
    return bad


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m splitrpc.services.fleet.cluster",
                                description="the local fleet cluster's keeper (started by `splitrpc fleet up`)")
    p.add_argument("--nodes", required=True)
    p.add_argument("--state", default=state_path())
    a = p.parse_args(argv)
    return _keep(parse_nodes(a.nodes), a.state)


if __name__ == "__main__":
    sys.exit(main())
