"""replicas.py: replicas of splitrpc servers on Ray: a replica actor owns one `splitrpc serve` process on its own UDP port, placed on a node of its server kind (a custom resource); a controller (a named actor) keeps the number of replicas per model and kind at a target, or follows a provisioning plan over time, adding replicas and draining the ones it removes; a directory (a named actor) lists the live replicas with their functions, for splitrpc.Pool (after Hercules, Ke et al., HPCA 2022).

Calls never go through Ray: clients call the replicas' addresses directly. Ray places, starts,
watches and stops processes.

Removing a replica loses no call: the controller first marks it draining in the directory (pools
refreshing from the directory stop choosing it within their refresh interval), waits
DRAIN_NOTICE_S, then sends its server SIGTERM: the server answers the calls it has and DRAINING
to new ones (which a Pool sends to another replica: they never ran), and exits within its grace.
Make before break: while a model has a replica starting, none of its live ones is removed.
A replica whose server dies is removed and replaced at the next reconcile.

Threads: the controller's reconcile loop runs on a thread of its own; its methods (set_target,
follow, status, ...) run on the actor's other threads and share state under one lock. A replica
actor's wait_exit() blocks one of its threads for the server's life.
"""
from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field, fields

from splitrpc.services.fleet.cluster import NAMESPACE, connect, import_ray, kind_resource

ray = import_ray()

DIRECTORY = "splitrpc-directory"     # the named actors, in the fleet's namespace
CONTROLLER = "splitrpc-controller"
READY_TIMEOUT_S = 60.0               # a replica's server must say "ready" within this
DRAIN_NOTICE_S = 1.0                 # draining in the directory this long before SIGTERM
DEFAULT_GRACE_S = 10.0               # a removed replica's server drains for at most this
RECONCILE_S = 0.2                    # the controller's loop period
START_HOLD_S = READY_TIMEOUT_S + 30  # a starting replica holds its model's removals at most this long
REFRESH_S = 0.25                     # how often fleet_pool() re-reads the directory
EVENTS_KEPT = 2000


class FleetError(RuntimeError):
    """A fleet operation that cannot be done: the message says why."""


@dataclass(repr=False)  # __repr__ below: never a secret
class Service:
    """A model served by the fleet: the arguments of `splitrpc serve` (a target MODULE:ATTR and
    options; address, port, log format and grace are the fleet's), per server kind extra
    arguments and environment, the directory the server starts in, and its key table (a
    splitrpc.KeyTable's dict form, docs/security.md; None: calls are not authenticated), which
    reaches each replica through Ray and a private file, never its command line's arguments."""
    name: str
    argv: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    kinds: dict = field(default_factory=dict)   # {kind: {"argv": [...], "env": {...}}}
    cwd: str | None = None
    grace_s: float = DEFAULT_GRACE_S
    keys: dict | None = None

    def __post_init__(self) -> None:
        if self.keys is not None:  # a bad table fails here, in the driver, with the entry at fault
            from splitrpc.auth import KeyTable

            KeyTable.from_dict(self.keys, f"the key table of service {self.name}")

    def __repr__(self) -> str:
        # the dataclass's repr would print the key table's secrets (hex): its keys are counted instead
        shown = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.name != "keys"]
        keys = None if self.keys is None else f"<{len(self.keys['keys'])} keys>"
        return f"Service({', '.join(shown)}, keys={keys})"

    def command(self, kind: str) -> tuple[list, dict]:
        k = self.kinds.get(kind, {})
        argv = [sys.executable, "-m", "splitrpc", "serve", *self.argv, *k.get("argv", []),
                "--host", "127.0.0.1", "--port", "0", "--log-format", "json", "--grace", f"{self.grace_s:g}"]
        return argv, {**self.env, **k.get("env", {})}


# ---------------------------------------------------------------------- a replica

@ray.remote(num_cpus=0, max_concurrency=4, max_restarts=0)
class ReplicaActor:
    """One splitrpc server process and what is known of it."""

    def __init__(self, replica_id: str, service: dict, kind: str):
        self.id, self.kind = replica_id, kind
        self.service = Service(**service)
        self.keys_file: str | None = None  # the key table, mode 0600, for the server's --keys
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        self.lines: list = []
        self.start_done = threading.Event()  # start() returned (either way): drain() waits for it

    def start(self) -> dict:
        try:
            return self._start()
        finally:
            self.start_done.set()

    def _start(self) -> dict:
        """Starts the server and waits for its ready line; returns {id, model, kind, address,
        pid, node, functions}. Raises FleetError with the server's last lines if it does not
        become ready."""
        import json

        import splitrpc

        argv, env = self.service.command(self.kind)
        key = None
        if self.service.keys is not None:
            from splitrpc.auth import KeyTable

            table = KeyTable.from_dict(self.service.keys, f"service {self.service.name}")
            fd, self.keys_file = tempfile.mkstemp(prefix=f"splitrpc-keys-{self.id}-", suffix=".json")
            os.close(fd)
            table.save(self.keys_file)
            argv += ["--keys", self.keys_file]
            key = next((k for k in table if not k.expired()), None)  # describe is open to every key
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     cwd=self.service.cwd or tempfile.gettempdir(), env={**os.environ, **env},
                                     bufsize=1)
        port = None
        watchdog = threading.Timer(READY_TIMEOUT_S, self.proc.kill)  # a server that never says ready
        watchdog.start()
        for line in self.proc.stdout:
            self.lines = (self.lines + [line.rstrip()])[-20:]
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("event") == "start":
                port = int(ev["port"])
            elif ev.get("event") == "ready":
                break
        watchdog.cancel()
        if port is None or self.proc.poll() is not None:
            self.proc.kill()
            raise FleetError(f"replica {self.id} ({self.service.name} on {self.kind}) did not start: "
                             + " | ".join(self.lines[-5:]))
        threading.Thread(target=self._drain_output, daemon=True).start()
        with splitrpc.Client("127.0.0.1", port, timeout=2.0, key=key) as c:
            funcs = [{"id": f.func_id, "name": f.name, "version": f.version} for f in c.describe().functions]
        self.info = {"id": self.id, "model": self.service.name, "kind": self.kind, "address": f"127.0.0.1:{port}",
                     "pid": self.proc.pid, "node": ray.get_runtime_context().get_node_id(), "functions": funcs}
        return self.info

    def _drain_output(self) -> None:
        for line in self.proc.stdout:  # keep the pipe from filling; keep the last lines (the stop line)
            self.lines = (self.lines + [line.rstrip()])[-20:]

    def wait_exit(self) -> int:
        """Blocks until the server process exits; its exit code."""
        return self.proc.wait() if self.proc else 0

    def drain(self, grace_s: float | None = None) -> dict:
        """SIGTERM to the server (it drains for its grace), then waits for it to exit: {exit,
        unanswered} (unanswered: from its stop line, None if it printed none)."""
        import json

        self.start_done.wait(READY_TIMEOUT_S + 5)  # a replica removed while it starts: drain what started
        if self.proc is None or self.proc.poll() is not None:
            return {"exit": None if self.proc is None else self.proc.returncode, "unanswered": None}
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait((grace_s or self.service.grace_s) + 5.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.forget_keys()
        left = None
        time.sleep(0.05)  # the output thread reads the last lines
        for line in reversed(self.lines):
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("event") == "stop" and "unanswered" in ev:
                left = ev["unanswered"]
                break
        return {"exit": code, "unanswered": left}

    def reload_keys(self, keys: dict) -> bool:
        """The server's key table replaced by keys (a KeyTable's dict form): the file rewritten,
        then SIGHUP (the server reads it again, keeping every call in flight). False when the
        replica has no server running or was started without keys."""
        if self.keys_file is None or self.proc is None or self.proc.poll() is not None:
            return False
        from splitrpc.auth import KeyTable

        KeyTable.from_dict(keys, f"service {self.service.name}").save(self.keys_file)
        self.service.keys = keys
        self.proc.send_signal(signal.SIGHUP)
        return True

    def forget_keys(self) -> None:
        """Removes the key file once the server is gone (it reads it at start and on SIGHUP only)."""
        if self.keys_file:
            try:
                os.unlink(self.keys_file)
            except OSError:
                pass

    def kill_server(self) -> int | None:
        """SIGKILL to the server process (a crash, for tests and the failover benchmark; and
        before the actor is killed, so that no server outlives its replica)."""
        if self.proc is None:
            return None
        self.proc.kill()
        code = self.proc.wait()
        self.forget_keys()
        return code

    def server_pid(self) -> int:
        return self.proc.pid if self.proc else 0


# ---------------------------------------------------------------------- the directory

@ray.remote(num_cpus=0, max_concurrency=8)
class Directory:
    """The replicas the controller knows, {id: info + state}; state is starting, live or
    draining. Written by the controller only; read by anyone (pools, `fleet status`)."""

    def __init__(self):
        self.replicas: dict = {}
        self.version = 0

    def put(self, replica_id: str, entry: dict) -> None:
        self.replicas[replica_id] = entry
        self.version += 1

    def remove(self, replica_id: str) -> None:
        if self.replicas.pop(replica_id, None) is not None:
            self.version += 1

    def live(self, model: str | None = None) -> list[dict]:
        """The live replicas (of model), each {id, model, kind, address, functions, ...}."""
        return [e for e in self.replicas.values() if e["state"] == "live" and (model is None or e["model"] == model)]

    def all(self) -> dict:
        return {"version": self.version, "replicas": list(self.replicas.values())}


# ---------------------------------------------------------------------- the controller

@dataclass
class _Rep:
    id: str
    model: str
    kind: str
    actor: object
    state: str                     # starting, live, draining, gone
    born: float
    start_ref: object = None
    exit_ref: object = None
    drain_ref: object = None
    drain_at: float = 0.0
    info: dict = field(default_factory=dict)


@ray.remote(num_cpus=0, max_concurrency=8)
class Controller:
    """Keeps replicas per (model, kind) at the target: set_target() for a fixed one, follow()
    for a plan of targets over time."""

    def __init__(self, services: list[dict], grace_s: float = DEFAULT_GRACE_S):
        self.services = {s["name"]: dict(s, grace_s=s.get("grace_s", grace_s)) for s in services}
        self.target: dict = {}        # {model: {kind: n}}
        self.reps: dict[str, _Rep] = {}
        self.events: list = []
        self.counts = {"started": 0, "drained": 0, "died": 0, "failed_starts": 0, "unanswered_at_drain": 0}
        self.lock = threading.Lock()
        self.plan: list = []
        self.plan_t0 = 0.0
        self.stopping = False
        self.directory = Directory.options(name=DIRECTORY, namespace=NAMESPACE, lifetime="detached",
                                           get_if_exists=True).remote()
        self.thread = threading.Thread(target=self._loop, name="splitrpc-fleet-reconcile", daemon=True)
        self.thread.start()

    # -------------------------------------------------------------- the API

    def set_target(self, target: dict) -> dict:
        """{model: {kind: n}}; kinds left out keep 0 replicas. Ends any plan being followed."""
        target = self._check(target)
        with self.lock:
            self.plan = []
            self.target = target
            self._event("target", target=target)
        return target

    def follow(self, steps: list[dict], t0: float | None = None, lead_s: float = 0.0) -> int:
        """Follows a plan: steps [{"at_s": seconds after t0 (wall clock, default now), "target":
        {model: {kind: n}}}], in time order. A step's additions are made lead_s early (a replica
        takes a while to start), its removals at its time."""
        steps = sorted(({"at_s": float(s["at_s"]), "target": self._check(s["target"])} for s in steps),
                       key=lambda s: s["at_s"])
        with self.lock:
            self.plan, self.plan_t0, self.plan_lead = steps, time.time() if t0 is None else t0, lead_s
            self._event("follow", steps=len(steps), lead_s=lead_s)
        return len(steps)

    def status(self) -> dict:
        with self.lock:
            reps = [{"id": r.id, "model": r.model, "kind": r.kind, "state": r.state,
                     "address": r.info.get("address"), "pid": r.info.get("pid"), "age_s": round(time.time() - r.born, 1)}
                    for r in self.reps.values()]
            return {"target": copy.deepcopy(self.target), "replicas": reps, "counts": dict(self.counts),
                    "plan_steps_left": sum(1 for s in self.plan if self.plan_t0 + s["at_s"] > time.time()),
                    "events": self.events[-50:]}

    def events_since(self, t: float) -> list:
        with self.lock:
            return [e for e in self.events if e["time"] >= t]

    def set_keys(self, model: str, keys: dict | None) -> int:
        """Model's key table from now on (a KeyTable's dict form): its replicas started later get
        it, the live ones read it again (SIGHUP: no call in flight is lost). A model served without
        keys cannot be given some (its replicas' servers were made without). Returns the replicas
        reloaded."""
        from splitrpc.auth import KeyTable

        with self.lock:
            if model not in self.services:
                raise FleetError(f"no service {model!r}; the fleet serves {sorted(self.services)}")
            if self.services[model].get("keys") is None:
                raise FleetError(f"service {model!r} was deployed without keys: redeploy it with a key table")
            KeyTable.from_dict(keys, f"the new key table of {model}")  # a bad one changes nothing
            self.services[model]["keys"] = keys
            reps = [r for r in self.reps.values() if r.model == model and r.state in ("starting", "live")]
            self._event("keys", model=model, keys=len(keys["keys"]))
        return sum(bool(ray.get(r.actor.reload_keys.remote(keys), timeout=30)) for r in reps)

    def kill_server(self, replica_id: str | None = None, model: str | None = None, kind: str | None = None) -> dict:
        """SIGKILLs the server of a live replica (the given one, else the oldest live one of
        model and kind): a crash, for failover tests. The controller notices and replaces it."""
        with self.lock:
            live = [r for r in self.reps.values() if r.state == "live" and (model is None or r.model == model)
                    and (kind is None or r.kind == kind) and (replica_id is None or r.id == replica_id)]
            if not live:
                raise FleetError("no live replica to kill")
            r = min(live, key=lambda r: r.born)
        ray.get(r.actor.kill_server.remote())
        return dict(r.info)

    def shutdown(self, grace_s: float | None = None) -> dict:
        """Drains every replica (in parallel) and stops the loop; the counts."""
        with self.lock:
            self.plan, self.target, self.stopping = [], {}, True
            reps = list(self.reps.values())
        for r in reps:
            self._retire(r, now=True)
        refs = [r.drain_ref for r in reps if r.drain_ref is not None]
        try:
            ray.get(refs, timeout=(grace_s or DEFAULT_GRACE_S) + 15)
        except Exception:  # noqa: BLE001 - a replica that does not drain in time is killed below
            pass
        for r in reps:
            if r.drain_ref is not None:
                try:
                    out = ray.get(r.drain_ref, timeout=0)
                    self.counts["drained"] += 1
                    self.counts["unanswered_at_drain"] += int(out.get("unanswered") or 0)
                except Exception:  # noqa: BLE001 - not drained in time, or its actor died: killed below
                    pass
            try:  # no server outlives its replica
                ray.get(r.actor.kill_server.remote(), timeout=5)
            except Exception:  # noqa: BLE001 - the actor is gone already
                pass
            ray.kill(r.actor)
            self.directory.remove.remote(r.id)
        with self.lock:
            self.reps.clear()
            return dict(self.counts)

    # -------------------------------------------------------------- the loop

    def _check(self, target: dict) -> dict:
        out = {}
        for model, kinds in target.items():
            if model not in self.services:
                raise FleetError(f"no service {model!r}; the fleet serves {sorted(self.services)}")
            out[model] = {}
            for kind, n in kinds.items():
                kind_resource(kind)
                if int(n) < 0:
                    raise FleetError(f"{model}/{kind}: {n} replicas")
                out[model][kind] = int(n)
        return out

    def _event(self, what: str, **kw) -> None:
        self.events.append({"time": time.time(), "event": what, **kw})
        del self.events[:-EVENTS_KEPT]

    def _desired(self, now: float) -> dict:
        """The target now: the plan's current step, with the next step's additions made lead_s early."""
        if not self.plan:
            return self.target
        cur, nxt = None, None
        for s in self.plan:
            if self.plan_t0 + s["at_s"] <= now:
                cur = s
            elif nxt is None:
                nxt = s
        base = cur["target"] if cur else {}
        if nxt is not None and self.plan_t0 + nxt["at_s"] - self.plan_lead <= now:
            merged = copy.deepcopy(base)
            for m, kinds in nxt["target"].items():
                for k, n in kinds.items():
                    merged.setdefault(m, {})[k] = max(n, merged.get(m, {}).get(k, 0))
            base = merged
        if base != self.target:
            self.target = base
            self._event("target", target=base)
        return base

    def _loop(self) -> None:
        while True:
            try:
                self._reconcile()
            except Exception as e:  # noqa: BLE001 - one failed round must not end the controller
                with self.lock:
                    self._event("error", error=f"{type(e).__name__}: {e}")
            time.sleep(RECONCILE_S)

    def _reconcile(self) -> None:
        now = time.time()
        with self.lock:
            if self.stopping:
                return
            desired = self._desired(now)
            reps = list(self.reps.values())
        for r in reps:
            self._advance(r)
        with self.lock:
            active: dict = {}
            for r in self.reps.values():
                if r.state in ("starting", "live"):
                    active.setdefault((r.model, r.kind), []).append(r)
            keys = set(active) | {(m, k) for m, ks in desired.items() for k in ks}
        added = set()
        for key in keys:
            want = desired.get(key[0], {}).get(key[1], 0)
            for _ in range(want - len(active.get(key, []))):
                self._add(*key)
                added.add(key[0])
        # make before break: a model's live replicas are removed only once none of its replicas is
        # starting (else, replacing kind A by kind B, the pools would briefly have no replica);
        # a replica that cannot start (no slot of its kind) holds removals for START_HOLD_S at most
        with self.lock:
            starting = {r.model for r in self.reps.values()
                        if r.state == "starting" and now - r.born < START_HOLD_S} | added
        for key in keys:
            want = desired.get(key[0], {}).get(key[1], 0)
            have = active.get(key, [])
            if len(have) > want:  # those still starting first, then the youngest
                order = sorted(have, key=lambda r: (r.state == "live", -r.born))
                for r in order[:len(have) - want]:
                    if r.state == "starting" or key[0] not in starting or not sum(desired.get(key[0], {}).values()):
                        self._retire(r)

    def _add(self, model: str, kind: str) -> None:
        rid = f"{model}-{kind}-{uuid.uuid4().hex[:6]}"
        # owned by the controller (not detached): if the controller goes, its replicas go with it
        actor = ReplicaActor.options(resources={kind_resource(kind): 1}).remote(rid, self.services[model], kind)
        r = _Rep(rid, model, kind, actor, "starting", time.time())
        r.start_ref = actor.start.remote()
        with self.lock:
            self.reps[rid] = r
            self._event("add", id=rid, model=model, kind=kind)
        self.directory.put.remote(rid, {"id": rid, "model": model, "kind": kind, "state": "starting",
                                        "address": None, "functions": []})

    def _retire(self, r: _Rep, now: bool = False) -> None:
        with self.lock:
            if r.state in ("draining", "gone"):
                return
            was = r.state
            r.state = "draining"
            r.drain_at = time.time() + (0 if now or was == "starting" else DRAIN_NOTICE_S)
            self._event("drain", id=r.id, model=r.model, kind=r.kind, was=was)
        self.directory.put.remote(r.id, {**r.info, "id": r.id, "model": r.model, "kind": r.kind, "state": "draining"})
        if now:
            r.drain_ref = r.actor.drain.remote()

    def _advance(self, r: _Rep) -> None:
        """Moves one replica along: started, died, drain due, drained."""
        if r.state == "starting" or (r.state == "draining" and r.start_ref is not None):
            ready, _ = ray.wait([r.start_ref], timeout=0)
            if ready:
                ref, r.start_ref = r.start_ref, None
                try:
                    info = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - the replica failed to start: gone, replaced next round
                    with self.lock:
                        self.counts["failed_starts"] += 1
                        self._event("failed", id=r.id, error=str(e)[-300:])
                    self._gone(r)
                    return
                r.info = info
                r.exit_ref = r.actor.wait_exit.remote()
                if r.state == "starting":
                    with self.lock:
                        r.state = "live"
                        self.counts["started"] += 1
                        self._event("live", id=r.id, address=info["address"], kind=r.kind,
                                    start_s=round(time.time() - r.born, 2))
                    self.directory.put.remote(r.id, {**info, "state": "live"})
        if r.state == "live" and r.exit_ref is not None:
            ready, _ = ray.wait([r.exit_ref], timeout=0)
            if ready:
                try:
                    code = ray.get(r.exit_ref)
                except Exception as e:  # noqa: BLE001 - the actor itself died
                    code = f"actor: {type(e).__name__}"
                with self.lock:
                    self.counts["died"] += 1
                    self._event("died", id=r.id, address=r.info.get("address"), exit=code)
                self._gone(r)
                return
        if r.state == "draining":
            if r.drain_ref is None and r.start_ref is None and time.time() >= r.drain_at:
                r.drain_ref = r.actor.drain.remote()
            if r.drain_ref is not None:
                ready, _ = ray.wait([r.drain_ref], timeout=0)
                if ready:
                    try:
                        out = ray.get(r.drain_ref)
                    except Exception as e:  # noqa: BLE001
                        out = {"exit": f"actor: {type(e).__name__}", "unanswered": None}
                    with self.lock:
                        self.counts["drained"] += 1
                        self.counts["unanswered_at_drain"] += int(out.get("unanswered") or 0)
                        self._event("drained", id=r.id, **out)
                    self._gone(r)

    def _gone(self, r: _Rep) -> None:
        with self.lock:
            r.state = "gone"
            self.reps.pop(r.id, None)
        self.directory.remove.remote(r.id)
        ray.kill(r.actor)


# ---------------------------------------------------------------------- drivers' side

def deploy(services: list[Service], *, address: str | None = None, grace_s: float = DEFAULT_GRACE_S):
    """The controller of the fleet (created if there is none; detached: it outlives the driver)."""
    connect(address)
    return Controller.options(name=CONTROLLER, namespace=NAMESPACE, lifetime="detached",
                              get_if_exists=True).remote([s.__dict__ for s in services], grace_s)


def controller(address: str | None = None):
    connect(address)
    try:
        return ray.get_actor(CONTROLLER, namespace=NAMESPACE)
    except ValueError:
        raise FleetError("no fleet controller in this cluster: `splitrpc fleet up` deploys one") from None


def directory(address: str | None = None):
    connect(address)
    try:
        return ray.get_actor(DIRECTORY, namespace=NAMESPACE)
    except ValueError:
        raise FleetError("no fleet directory in this cluster: `splitrpc fleet up` deploys one") from None


def wait_live(ctl, target: dict, timeout: float = 120.0) -> list[dict]:
    """Waits until the controller has exactly target's live replicas and none starting or draining."""
    end = time.monotonic() + timeout
    want = sorted((m, k) for m, ks in target.items() for k, n in ks.items() for _ in range(n))
    st = None
    while time.monotonic() < end:
        st = ray.get(ctl.status.remote())
        reps = st["replicas"]
        if all(r["state"] == "live" for r in reps) and sorted((r["model"], r["kind"]) for r in reps) == want:
            return reps
        time.sleep(0.2)
    raise FleetError(f"the fleet did not reach {target} within {timeout:g} s: {st and st['replicas']}; "
                     f"events: {st and st['events'][-5:]}")


def fleet_pool(model: str, *, address: str | None = None, refresh_s: float = REFRESH_S, **pool_kw):
    """A splitrpc.Pool over model's live replicas, re-read from the directory every refresh_s;
    pool_kw go to the Pool (key=: a key of a model deployed with keys, docs/security.md)."""
    from splitrpc.pool import Pool

    d = directory(address)

    def source():
        return [e["address"] for e in ray.get(d.live.remote(model), timeout=5)]

    return Pool(source, refresh_interval=refresh_s, **pool_kw)


def teardown(address: str | None = None, grace_s: float | None = None) -> dict | None:
    """Drains every replica and removes the controller and the directory; the controller's counts
    (None when there was no controller)."""
    connect(address)
    try:
        ctl = ray.get_actor(CONTROLLER, namespace=NAMESPACE)
    except ValueError:
        ctl = None
    counts = ray.get(ctl.shutdown.remote(grace_s)) if ctl is not None else None
    for name in (CONTROLLER, DIRECTORY):
        try:
            ray.kill(ray.get_actor(name, namespace=NAMESPACE))
        except ValueError:
            pass
    return counts
