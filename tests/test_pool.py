"""splitrpc.Pool (issue 20) without Ray, against local servers: calls spread over replicas; BUSY and DRAINING answers go to another replica (for any call: it never ran); a silent replica only for idempotent calls, within the documented bound; SIGKILL of a replica process under load loses no idempotent call; with replicas of unequal capacity, power of two choices gets fewer BUSY answers and a lower p99 than random choice (same run)."""
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import read_until

import splitrpc
from splitrpc import TensorSpec
from splitrpc.pool import NoReplica, Pool, resolve

HERE = os.path.dirname(os.path.abspath(__file__))
X = TensorSpec("x", "float32", (16,))
Y = TensorSpec("y", "float32", (16,))
REQ = np.arange(16, dtype=np.float32)
WANT = (REQ + 1).tobytes()


def _server(gate: threading.Event | None = None, capacity: int = 64) -> splitrpc.Server:
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")

    @srv.function(300, "work", [X], [Y], max_batch=4, capacity=capacity)
    def work(x, y):
        if gate is not None:
            gate.wait(10)
        np.add(x, 1, out=y)

    return srv.start()


def _addr(srv) -> str:
    return f"127.0.0.1:{srv.port}"


def test_resolve():
    assert resolve(["127.0.0.1:5", ("127.0.0.1", 6)]) == [("127.0.0.1", 5), ("127.0.0.1", 6)]
    assert resolve("127.0.0.1:5") == [("127.0.0.1", 5)]
    assert ("127.0.0.1", 7) in resolve("localhost:7")  # a DNS name: each address a replica
    with pytest.raises(ValueError):
        Pool([], timeout=1)
    with pytest.raises(ValueError):
        Pool(["127.0.0.1:5"], choice="nearest")


def test_calls_spread_over_every_replica():
    srvs = [_server() for _ in range(3)]
    try:
        with Pool([_addr(s) for s in srvs], timeout=2, seed=1) as pool:
            futs = [pool.call_async(300, REQ) for _ in range(300)]
            assert all(f.result() == WANT for f in futs)
            st = pool.stats()
        served = [s.stats()["functions"]["work"] for s in srvs]
        assert sum(served) == 300 and min(served) >= 30, served
        assert sum(r["ok"] for r in st["replicas"].values()) == 300
    finally:
        for s in srvs:
            s.close()


def test_busy_and_draining_go_to_another_replica():
    gate = threading.Event()
    full, ok, draining = _server(gate, capacity=2), _server(), _server()
    try:
        draining.drain()
        with splitrpc.Client("127.0.0.1", full.port, timeout=5) as c:  # fill the gated replica's queue
            held = [c.call_async(300, REQ) for _ in range(6)]
            time.sleep(0.2)
            with Pool([_addr(full), _addr(ok), _addr(draining)], timeout=2, probe_interval=None, seed=3) as pool:
                for _ in range(40):  # not idempotent: BUSY and DRAINING are safe to resend (never ran)
                    assert pool.call(300, REQ) == WANT
                st = pool.stats()["replicas"]
            gate.set()
            for f in held:
                try:
                    f.result()
                except splitrpc.Busy:
                    pass
        assert st[_addr(ok)]["ok"] == 40 and st[_addr(full)]["ok"] == 0 and st[_addr(draining)]["ok"] == 0
        assert st[_addr(draining)]["draining"] == 1 and st[_addr(full)]["busy"] >= 1
        assert draining.stats()["by_function"]["work"]["errors"]["DRAINING"] == 1  # then left out
    finally:
        gate.set()
        for s in (full, ok, draining):
            s.close()


def _silent_port() -> tuple[socket.socket, int]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    return s, s.getsockname()[1]


def test_a_silent_replica_fails_over_only_idempotent_calls():
    sock, port = _silent_port()  # bound, never answers: a replica gone silent
    srv = _server()
    try:
        addrs = [f"127.0.0.1:{port}", _addr(srv)]
        with Pool(addrs, timeout=1.0, attempt_timeout=0.1, probe_interval=None, choice="random", seed=0) as pool:
            t0 = time.monotonic()
            worst = 0.0
            for _ in range(20):
                t = time.monotonic()
                assert pool.call(300, REQ, idempotent=True) == WANT
                worst = max(worst, time.monotonic() - t)
            assert worst < 0.1 + 0.2  # the documented bound: attempt_timeout, plus a call
            st = pool.stats()
            assert st["replicas"][f"127.0.0.1:{port}"]["silent"] >= 1 and st["failovers"] >= 1
            assert time.monotonic() - t0 < 5
        with Pool([f"127.0.0.1:{port}"], timeout=0.3, probe_interval=None) as pool:
            with pytest.raises(splitrpc.CallTimeout):
                pool.call(300, REQ)  # not idempotent: no second replica, and it may have run
            with pytest.raises((splitrpc.CallTimeout, NoReplica)):
                pool.call(300, REQ, idempotent=True)
    finally:
        sock.close()
        srv.close()


def test_a_replica_without_ping_is_not_left_out():
    """A server older than Amendment 1 answers ping with UNKNOWN_FUNCTION (or something that is
    not a ping reply): the pool stops probing it and keeps choosing it; odd replies do not stop
    the prober."""
    a, b = _server(), _server()
    try:
        with Pool([_addr(a), _addr(b)], timeout=2, probe_interval=None) as pool:
            old, odd = pool.replicas
            old.prober.ping = lambda t: (_ for _ in ()).throw(splitrpc.UnknownFunction("no function 65535"))
            odd.prober.ping = lambda t: {"ping": 1, "pending": "many"}
            pool._probe(old)
            pool._probe(odd)
            st = pool.stats()["replicas"]
            assert not st[_addr(a)]["probed"] and st[_addr(a)]["available"]
            assert not st[_addr(b)]["probed"] and st[_addr(b)]["available"]
            for _ in range(20):
                assert pool.call(300, REQ) == WANT
    finally:
        a.close()
        b.close()


def test_a_closed_pool_refuses_calls():
    srv = _server()
    try:
        pool = Pool([_addr(srv)], timeout=2)
        assert pool.call(300, REQ) == WANT
        pool.close()
        with pytest.raises(splitrpc.SplitRPCError, match="closed"):
            pool.call(300, REQ)
    finally:
        srv.close()


def test_the_prober_takes_a_draining_replica_out():
    a, b = _server(), _server()
    try:
        with Pool([_addr(a), _addr(b)], timeout=2, probe_interval=0.02) as pool:
            a.drain()
            time.sleep(0.2)
            assert not pool.stats()["replicas"][_addr(a)]["available"] or pool.stats()["replicas"][_addr(a)]["draining_now"]
            for _ in range(50):
                assert pool.call(300, REQ) == WANT
            assert pool.stats()["replicas"][_addr(a)]["ok"] == 0 and a.stats()["by_function"]["work"]["errors"]["DRAINING"] == 0
    finally:
        a.close()
        b.close()


def _serve_app(run_env, **env) -> tuple[subprocess.Popen, int]:
    e = {**run_env["env"], **{f"POOL_APP_{k.upper()}": str(v) for k, v in env.items()}}
    p = subprocess.Popen([sys.executable, "-m", "splitrpc", "serve", "pool_app:server", "--port", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE, env=e)
    lines = read_until(p, lambda line: line.startswith("ready:"))
    return p, int(re.search(r" on [\d.]+:(\d+) ", "".join(lines)).group(1))


def test_a_replica_drained_under_an_open_burst_loses_no_call(run_env):
    """Issue 33, item 1: 2,000 futures through a Pool over two replicas and SIGTERM to one 10 ms
    later: the drained replica's Draining answers (and those its client gives the calls it held)
    go to the other replica; every call comes back right, none Draining, none timed out."""
    procs = [_serve_app(run_env, sleep_ms=0) for _ in range(2)]
    try:
        with Pool([f"127.0.0.1:{port}" for _, port in procs], timeout=15.0, seed=9) as pool:
            futs = [pool.call_async(300, REQ) for _ in range(2000)]
            time.sleep(0.01)
            procs[0][0].send_signal(signal.SIGTERM)
            outcomes: dict = {}
            for f in futs:
                try:
                    k = "ok" if f.result() == WANT else "wrong"
                except Exception as e:  # noqa: BLE001 - a lost or failed call
                    k = type(e).__name__
                outcomes[k] = outcomes.get(k, 0) + 1
        assert outcomes == {"ok": 2000}, outcomes
        assert procs[0][0].wait(20) == 0
    finally:
        for p, _ in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def test_sigkill_of_a_replica_under_load_loses_no_idempotent_call(run_env):
    procs = [_serve_app(run_env, sleep_ms=1) for _ in range(3)]
    try:
        addrs = [f"127.0.0.1:{port}" for _, port in procs]
        attempt = 0.2
        with Pool(addrs, timeout=3.0, attempt_timeout=attempt, probe_interval=0.05, seed=5) as pool:
            errors, lat = [], []
            stop = threading.Event()

            def client():
                while not stop.is_set():
                    t = time.monotonic()
                    try:
                        assert pool.call(300, REQ, idempotent=True) == WANT
                        lat.append(time.monotonic() - t)
                    except Exception as e:  # noqa: BLE001 - a lost call
                        errors.append(repr(e))

            ths = [threading.Thread(target=client) for _ in range(8)]
            for t in ths:
                t.start()
            time.sleep(0.5)
            procs[0][0].send_signal(signal.SIGKILL)
            time.sleep(1.0)
            stop.set()
            for t in ths:
                t.join(10)
            st = pool.stats()
        assert errors == [], errors[:5]
        assert len(lat) > 200 and max(lat) < attempt + 0.5, max(lat)  # bound: attempt_timeout + a call on a loaded VM
        # on loopback the killed replica's port answers "unreachable" at once (Unavailable): the
        # failover does not wait for attempt_timeout (a replica on a lost host would be silent)
        dead = st["replicas"][addrs[0]]
        assert dead["silent"] + dead["unavailable"] >= 1 and st["failovers"] >= 1, dead
    finally:
        for p, _ in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(20)


def _open_loop(pool, rate: float, seconds: float, seed: int) -> np.ndarray:
    """Poisson arrivals at rate calls/s for seconds; each call's latency from its scheduled
    send time (no coordinated omission), seconds; inf for a call that failed (every replica
    tried answered BUSY)."""
    rng = np.random.default_rng(seed)
    at = np.cumsum(rng.exponential(1 / rate, int(rate * seconds)))
    lat = np.full(at.size, np.nan)
    t0 = time.monotonic()
    futs = []
    for i, t in enumerate(at):
        delay = t0 + t - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        f = pool.call_async(300, REQ)
        f.add_done_callback(lambda f, i=i, t=t: lat.__setitem__(i, time.monotonic() - (t0 + t)))
        futs.append(f)
    for i, f in enumerate(futs):
        try:
            assert f.result() == WANT
        except splitrpc.Busy:
            lat[i] = np.inf
    return lat


@pytest.mark.skipif(not os.environ.get("SPLITRPC_TIMING_TESTS"),
                    reason="a timing comparison (p99, BUSY counts), which a shared CI VM's stalls decide about one run "
                           "in three: run with SPLITRPC_TIMING_TESTS=1 on a quiet machine (docs/fleet.md has the numbers)")
def test_power_of_two_choices_beats_random_on_unequal_replicas(run_env):
    """One replica eight times slower than the other (batches of 8 every 2 ms vs every 16 ms: at
    most about 4,000 and 500 calls/s) and small queues, under an open loop of 1,200 calls/s
    through a random pool and a p2c pool, alternated three times: random sends half to the slow
    replica, more than it can take, which fills its queue (BUSY answers, long waits); p2c sends
    it what its expected wait allows. (Measured here at 1,500/s: random 545 BUSY, p99 33 ms, 33%
    of calls on the slow replica; p2c 0, 16.5 ms, 1%. The test offers 1,200/s: the fast replica's
    real capacity on a loaded 2-vCPU CI machine leaves 1,500 little headroom.)"""
    fast = _serve_app(run_env, sleep_ms=2, capacity=16, max_batch=8)
    slow = _serve_app(run_env, sleep_ms=16, capacity=16, max_batch=8)
    addrs = [f"127.0.0.1:{fast[1]}", f"127.0.0.1:{slow[1]}"]
    try:
        res = {"p2c": [], "random": []}
        for k in range(3):  # medians of 3: one stalled second on a shared VM does not decide
            for choice in ("random", "p2c"):
                with Pool(addrs, choice=choice, timeout=5.0, probe_interval=0.02, seed=11) as pool:
                    lat = _open_loop(pool, 1200, 2.0, seed=k)
                    st = pool.stats()
                busy = sum(r["busy"] for r in st["replicas"].values())
                p99 = float(np.quantile(lat, 0.99, method="higher"))  # a failed call's inf stays inf, never nan
                res[choice].append((busy, p99, st["replicas"][addrs[1]]["ok"] / lat.size, int(np.isinf(lat).sum())))
        busy = {k: sum(r[0] for r in v) for k, v in res.items()}
        p99 = {k: float(np.median([r[1] for r in v])) for k, v in res.items()}
        slow_share = {k: float(np.mean([r[2] for r in v])) for k, v in res.items()}
        assert busy["p2c"] < busy["random"], res
        assert p99["p2c"] < p99["random"], res
        assert slow_share["p2c"] < slow_share["random"], res
        assert sorted(r[3] for r in res["p2c"])[1] <= sorted(r[3] for r in res["random"])[1], res  # median failures
    finally:
        for p, _ in (fast, slow):
            p.send_signal(signal.SIGTERM)
            p.wait(20)


def test_replicas_from_a_function_follow_its_changes():
    """A pool over a function's addresses (a fleet's directory): a replica that leaves gets no new
    call while its calls in flight finish; one that joins is chosen; an empty answer raises
    NoReplica; a failing source keeps the replicas as they were."""
    gate = threading.Event()
    a, b = _server(gate), _server()
    current = [[_addr(a)]]
    fail = [False]

    def source():
        if fail[0]:
            raise RuntimeError("directory out of reach")
        return list(current[0])

    try:
        with Pool(source, timeout=5, refresh_interval=0.05, seed=2) as pool:
            held = pool.call_async(300, REQ)  # in flight on a (gated) while a leaves
            time.sleep(0.1)
            current[0] = [_addr(b)]
            time.sleep(0.3)
            for _ in range(20):
                assert pool.call(300, REQ) == WANT
            gate.set()
            assert held.result(5) == WANT
            st = pool.stats()
            assert list(st["replicas"]) == [_addr(b)] and st["replicas"][_addr(b)]["ok"] == 20
            assert st["totals"]["ok"] == 21
            fail[0] = True
            time.sleep(0.2)
            assert pool.call(300, REQ) == WANT  # kept
            fail[0] = False
            current[0] = []
            time.sleep(0.3)
            with pytest.raises(NoReplica):
                pool.call(300, REQ)
            current[0] = [_addr(a), _addr(b)]
            time.sleep(0.3)
            for _ in range(40):
                assert pool.call_async(300, REQ).result(5) == WANT
            assert sorted(pool.stats()["replicas"]) == sorted([_addr(a), _addr(b)])
    finally:
        gate.set()
        a.close()
        b.close()
