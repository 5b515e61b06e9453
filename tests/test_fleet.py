"""The fleet on a small local Ray cluster (issue 20): simulated nodes of two kinds on 127.0.0.1; replicas placed by kind; the directory; a Pool over the directory; replicas added and drained under load with no call lost; SIGKILL of a replica's server: its calls fail over within the bound and the controller replaces it; a plan followed over time; every socket of the cluster on loopback; `splitrpc fleet up|status|down`."""
import json
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import splitrpc
import splitrpc._native.auth
from splitrpc.services.fleet import cluster

try:
    cluster.import_ray()  # with the loopback settings (conftest also sets them before any test imports ray)
except ImportError:
    pytest.skip("the fleet needs ray: pip install 'splitrpc[fleet]'", allow_module_level=True)

REQ = np.arange(16, dtype=np.float32)
WANT = (REQ + 1).tobytes()
WORK = 300
APP = "splitrpc.services.fleet.stand_in:setup"
AUTH = splitrpc._native.auth.available()
K1, K2 = splitrpc.Key.generate(1), splitrpc.Key.generate(2)  # the "keyed" model's keys (docs/security.md)


@pytest.fixture(scope="module")
def fleet_env(tmp_path_factory):
    state = str(tmp_path_factory.mktemp("fleet") / "fleet.json")
    rec = cluster.start_local(cluster.parse_nodes("small=3,big=2"), state=state)
    from splitrpc.services.fleet import replicas

    cluster.connect(state=state)
    svc = replicas.Service("work", argv=[APP], grace_s=5.0,
                        kinds={"small": {"env": {"FLEET_APP_BATCH_MS": "4"}}, "big": {"env": {"FLEET_APP_BATCH_MS": "1"}}})
    keyed = [replicas.Service("keyed", argv=[APP], grace_s=5.0, keys=splitrpc.KeyTable([K1]).to_dict())] if AUTH else []
    ctl = replicas.deploy([svc, *keyed])
    try:
        yield replicas, ctl, rec
    finally:
        try:
            replicas.teardown()
        finally:
            cluster.stop_local(state)
            try:  # whatever happened above, nothing of the cluster outlives the tests
                os.killpg(rec["pid"], 9)
            except OSError:
                pass


def _use(replicas, ctl, target: dict) -> list:
    replicas.ray.get(ctl.set_target.remote({"work": target}))
    return replicas.wait_live(ctl, {"work": {k: n for k, n in target.items() if n}}, timeout=90)


def _closed_loop(pool, stop: threading.Event, out: dict, idempotent: bool) -> None:
    while not stop.is_set():
        t = time.monotonic()
        try:
            r = pool.call(WORK, REQ, idempotent=idempotent)
            out["ok" if r == WANT else "wrong"] += 1
            out["max_s"] = max(out["max_s"], time.monotonic() - t)
        except Exception as e:  # noqa: BLE001 - every failure is recorded and asserted on
            out["failed"].append(repr(e))


def _load(pool, n: int, idempotent: bool):
    stop = threading.Event()
    out = {"ok": 0, "wrong": 0, "failed": [], "max_s": 0.0}
    ths = [threading.Thread(target=_closed_loop, args=(pool, stop, out, idempotent)) for _ in range(n)]
    for t in ths:
        t.start()
    return stop, ths, out


def test_replicas_by_kind_in_the_directory(fleet_env):
    replicas, ctl, _ = fleet_env
    ray = replicas.ray
    reps = _use(replicas, ctl, {"small": 1, "big": 1})
    assert sorted(r["kind"] for r in reps) == ["big", "small"]
    live = ray.get(replicas.directory().live.remote("work"))
    assert sorted(e["address"] for e in live) == sorted(r["address"] for r in reps)
    nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
    for e in live:  # placed on a node of its kind, serving the stand-in's function
        assert cluster.kind_resource(e["kind"]) in nodes[e["node"]]
        assert [f["name"] for f in e["functions"]] == ["work"]
        assert e["address"].startswith("127.0.0.1:")
    with replicas.fleet_pool("work", timeout=2.0) as pool:
        for _ in range(50):
            assert pool.call(WORK, REQ) == WANT
        assert len(pool.stats()["replicas"]) == 2


def test_add_and_drain_under_load_lose_no_call(fleet_env):
    """Calls NOT marked idempotent: a removed replica is taken out of the directory before its
    server drains, and DRAINING answers (never run) go to another replica: no call fails."""
    replicas, ctl, _ = fleet_env
    ray = replicas.ray
    _use(replicas, ctl, {"small": 1, "big": 1})
    before = ray.get(ctl.status.remote())["counts"]
    with replicas.fleet_pool("work", timeout=3.0) as pool:
        stop, ths, out = _load(pool, 4, idempotent=False)
        try:
            for target in ({"small": 3, "big": 1}, {"small": 0, "big": 2}, {"small": 1, "big": 0},
                           {"small": 1, "big": 1}):
                _use(replicas, ctl, target)
                time.sleep(0.5)
        finally:
            stop.set()
            for t in ths:
                t.join()
    after = ray.get(ctl.status.remote())["counts"]
    assert out["failed"] == [] and out["wrong"] == 0 and out["ok"] > 100, out
    assert after["drained"] - before["drained"] >= 5 and after["started"] - before["started"] >= 5, (before, after)
    assert after["unanswered_at_drain"] == before["unanswered_at_drain"]
    assert after["died"] == before["died"]


def test_sigkill_fails_over_within_the_bound_and_is_replaced(fleet_env):
    replicas, ctl, _ = fleet_env
    ray = replicas.ray
    _use(replicas, ctl, {"small": 1, "big": 1})
    died0 = ray.get(ctl.status.remote())["counts"]["died"]
    with replicas.fleet_pool("work", timeout=3.0) as pool:
        stop, ths, out = _load(pool, 6, idempotent=True)
        try:
            time.sleep(0.5)
            killed = ray.get(ctl.kill_server.remote(model="work"))
            time.sleep(2.0)
        finally:
            stop.set()
            for t in ths:
                t.join()
    assert out["failed"] == [] and out["ok"] > 50, out
    # the bound (docs/fleet.md): attempt_timeout (a quarter of the 3 s timeout) plus one call
    assert out["max_s"] < pool.attempt_timeout + 0.5, out
    reps = replicas.wait_live(ctl, {"work": {"small": 1, "big": 1}}, timeout=60)
    st = ray.get(ctl.status.remote())
    assert st["counts"]["died"] == died0 + 1
    assert killed["address"] not in [r["address"] for r in reps]  # a new replica, a new port


def test_follows_a_plan(fleet_env):
    replicas, ctl, _ = fleet_env
    ray = replicas.ray
    _use(replicas, ctl, {"small": 1, "big": 0})
    t0 = time.time()
    ray.get(ctl.follow.remote([{"at_s": 0, "target": {"work": {"small": 1, "big": 0}}},
                               {"at_s": 3, "target": {"work": {"small": 2, "big": 1}}},
                               {"at_s": 6, "target": {"work": {"small": 0, "big": 1}}}], t0, 0.5))
    replicas.wait_live(ctl, {"work": {"small": 2, "big": 1}}, timeout=60)
    assert time.time() - t0 >= 2.5  # not before its time (less the lead)
    replicas.wait_live(ctl, {"work": {"big": 1}}, timeout=60)
    assert time.time() - t0 >= 6
    events = ray.get(ctl.events_since.remote(t0))
    drained = [e["id"] for e in events if e["event"] == "drained"]
    assert len(drained) == 2 and all(i.startswith("work-small-") for i in drained), events


def test_every_socket_on_loopback(fleet_env):
    replicas, ctl, rec = fleet_env
    _use(replicas, ctl, {"small": 1, "big": 1})
    with replicas.fleet_pool("work", timeout=2.0) as pool:
        assert pool.call(WORK, REQ) == WANT
        pids = cluster.descendants(rec["pid"]) + [os.getpid()]
        names = set()
        for p in pids:
            try:
                names.add(open(f"/proc/{p}/comm").read().strip())
            except OSError:
                pass
        assert {"gcs_server", "raylet"} <= names and len(pids) > 8, names  # the whole cluster was looked at
        assert cluster.non_loopback_sockets(pids) == []
    # and the check does fail: a socket on every interface is reported
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", 0))
    try:
        bad = cluster.non_loopback_sockets([os.getpid()])
        assert any(b["local"] == f"0.0.0.0:{s.getsockname()[1]}" for b in bad), bad
    finally:
        s.close()


@pytest.mark.skipif(not AUTH, reason="libsodium's shared library is not installed")
def test_keyed_replicas_take_only_signed_calls_and_rotate_their_keys(fleet_env):
    """A model deployed with a key table: its replicas take calls signed with its key (through
    fleet_pool), drop unsigned ones, and hold the table in a private file, never in their
    command lines; set_keys hands a new table to the live replica, which reads it without a
    restart: the new key works, the old one no more."""
    replicas, ctl, _ = fleet_env
    ray = replicas.ray
    ray.get(ctl.set_target.remote({"keyed": {"small": 1}}))
    reps = replicas.wait_live(ctl, {"keyed": {"small": 1}}, timeout=90)
    host, port = reps[0]["address"].rsplit(":", 1)
    with replicas.fleet_pool("keyed", key=K1, timeout=2.0) as pool:
        assert all(pool.call(WORK, REQ) == WANT for _ in range(20))
    with pytest.raises(splitrpc.CallTimeout):
        splitrpc.Client(host, int(port), timeout=0.3, retries=0).call(WORK, REQ)
    with open(f"/proc/{reps[0]['pid']}/cmdline", "rb") as f:
        argv = f.read()
    assert b"--keys" in argv and K1.secret.hex().encode() not in argv
    assert ray.get(ctl.set_keys.remote("keyed", splitrpc.KeyTable([K2]).to_dict())) == 1
    new = splitrpc.Client(host, int(port), key=K2, timeout=0.3, retries=0)
    end = time.monotonic() + 10
    while True:
        try:
            assert new.call(WORK, REQ) == WANT
            break
        except splitrpc.CallTimeout:
            assert time.monotonic() < end, "the replica did not take the new key table within 10 s"
    with pytest.raises(splitrpc.CallTimeout):
        splitrpc.Client(host, int(port), key=K1, timeout=0.3, retries=0).call(WORK, REQ)
    with pytest.raises(Exception, match="deployed without keys"):
        ray.get(ctl.set_keys.remote("work", splitrpc.KeyTable([K2]).to_dict()))
    ray.get(ctl.set_target.remote({"keyed": {"small": 0}}))
    replicas.wait_live(ctl, {}, timeout=60)


def test_service_repr_counts_keys_and_a_spec_with_keys_must_be_private(tmp_path):
    """A Service's repr (and str) counts its keys, never shows a secret; `fleet up --spec` refuses a
    spec holding a key table inline when others may read it (before any cluster starts)."""
    import base64

    from splitrpc.services.fleet import replicas

    secret = b"splitrpc-test-secret-0123456789!"
    svc = replicas.Service("keyed", argv=[APP], keys=splitrpc.KeyTable([splitrpc.Key(5, secret), K2]).to_dict())
    for text in (repr(svc), str(svc)):
        assert "keys=<2 keys>" in text and "name='keyed'" in text and "grace_s=" in text
        for form in (secret.hex(), secret.hex().upper(), base64.b64encode(secret).decode(), secret.decode(),
                     K2.secret.hex()):
            assert form not in text
    assert "keys=None" in repr(replicas.Service("open", argv=[APP]))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"services": [{"name": "keyed", "argv": [APP]}],
                                "keys": splitrpc.KeyTable([K1]).to_dict()}))
    spec.chmod(0o644)
    r = _cli(["fleet", "up", "--spec", str(spec)], {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)})
    assert r.returncode == 2 and f"chmod 600 {spec}" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert K1.secret.hex() not in r.stdout + r.stderr
    assert not os.path.exists(tmp_path / "splitrpc" / "fleet.json")  # no cluster was started


def test_bad_targets_are_refused(fleet_env):
    replicas, ctl, _ = fleet_env
    ray = replicas.ray
    with pytest.raises(Exception, match="no service 'nope'"):
        ray.get(ctl.set_target.remote({"nope": {"small": 1}}))
    with pytest.raises(Exception, match="server kind"):
        ray.get(ctl.set_target.remote({"work": {"bad kind!": 1}}))
    with pytest.raises(ValueError):
        cluster.parse_nodes("small=0")
    with pytest.raises(ValueError):
        cluster.parse_nodes("small=x")


def _cli(args, env, timeout=180):
    # cwd: not the checkout, whose splitrpc/ would shadow the installed package (the replicas start there too)
    return subprocess.run([sys.executable, "-m", "splitrpc", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=env["XDG_RUNTIME_DIR"])


def _servers() -> set:
    """pids of the fleet's replica servers running now (`-m splitrpc serve ... --log-format json --grace`)."""
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"serve" in cmd and b"--grace" in cmd and b"splitrpc" in cmd:
                out.add(int(d))
    return out


def test_fleet_up_status_down(tmp_path):
    """The commands a user runs, on a cluster of their own (another state directory)."""
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)}
    before = _servers()
    bad = _cli(["fleet", "up", "--nodes", "a=zero"], env)
    assert bad.returncode == 2 and "KIND=SLOTS" in bad.stderr and "Traceback" not in bad.stderr
    r = _cli(["fleet", "status"], env)
    assert r.returncode == 2 and "no fleet cluster" in r.stderr
    try:
        up = _cli(["fleet", "up", "--nodes", "cpu=2", "--replicas", "cpu=2"], env)
        assert up.returncode == 0, up.stdout + up.stderr
        addrs = [ln.split()[-1] for ln in up.stdout.splitlines() if ln.startswith("  default")]
        assert len(addrs) == 2
        d = _cli(["describe", addrs[0]], env, 30)
        assert d.returncode == 0 and "vecadd" in d.stdout
        st = _cli(["fleet", "status", "--json"], env)
        assert st.returncode == 0, st.stderr
        doc = json.loads(st.stdout)
        assert sorted(r["address"] for r in doc["replicas"]) == sorted(addrs)
        assert all(r["state"] == "live" for r in doc["replicas"])
        assert doc["non_loopback_sockets"] == []
        assert any(n["kinds"] == {"cpu": 2.0} for n in doc["nodes"])
    finally:
        down = _cli(["fleet", "down", "--grace", "2"], env)
    assert down.returncode == 0 and "local cluster stopped" in down.stdout, down.stdout + down.stderr
    assert "drained" in down.stdout
    assert not os.path.exists(tmp_path / "splitrpc" / "fleet.json")
    end = time.monotonic() + 10
    while _servers() - before and time.monotonic() < end:
        time.sleep(0.2)
    assert not _servers() - before  # no replica's server outlives the fleet


def test_plan_steps_from_provision(tmp_path):
    """`fleet up --plan`: the MILP allocations of a provision.json, compressed into --day-s."""
    from splitrpc.services.fleet.commands import _plan_steps

    tuples = tmp_path / "t.json"
    tuples.write_text(json.dumps([{"model": "work", "kind": "small", "qps": 100, "power": None},
                                  {"model": "work", "kind": "big", "qps": 400, "power": None}]))
    r = subprocess.run([sys.executable, "-m", "splitrpc", "plan", "provision", "--tuples", str(tuples), "--inventory",
                        "small=4,big=1", "--peak", "700", "--steps", "8", "--out", str(tmp_path / "p"), "--quiet"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "p" / "provision.json").read_text())
    steps = _plan_steps(str(tmp_path / "p" / "provision.json"), 80.0)
    assert len(steps) == 8 and steps[0]["at_s"] == 0 and steps[1]["at_s"] == pytest.approx(10.0)
    for s, d in zip(steps, doc["steps"]):
        want = {k: 0 for k in ("small", "big")}
        for key, n in d["milp"]["servers"].items():
            want[key.split("/")[0]] = n
        assert s["target"] == {"work": want}
    assert max(s["target"]["work"]["small"] for s in steps) >= 1  # the peak needs more than the big one
