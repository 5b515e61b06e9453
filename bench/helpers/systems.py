"""systems.py: how the side-by-side benchmark measures each system (splitrpc, the raw-UDP
limit, the minimal C server of the protocol, the in-process callback, and the peers in
bench/peers) with closed- and open-loop runs."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import import_module

import numpy as np

from splitrpc import Client
from splitrpc import raw_udp
from splitrpc.bench.helpers.peers import common
from splitrpc.bench.helpers.procs import Proc, ServerDied, free_port
from splitrpc.errors import NativeError
from splitrpc import arrivals
from splitrpc.loadgen import report
from splitrpc.latency_histogram import percentiles
from splitrpc.load_run import run_load
from splitrpc.services import SERVICES

PEERS = {  # system name -> (module, variant)
    "grpc-sync": ("grpc_peer", "sync"),
    "grpc-asyncio": ("grpc_peer", "asyncio"),
    "zmq": ("zmq_peer", "router-dealer"),
    "triton": ("triton_peer", "grpc"),
}
SYSTEMS = ("raw-udp-busy", "raw-udp-block", "c-min-busy", "c-min-block", "splitrpc-poll", "splitrpc-block",
           "splitrpc-local", *PEERS)
# The minimal C server of the protocol (c-min-*, splitrpc.raw_udp.min_serve) serves these; matmul's sum
# order would differ from numpy's BLAS, so the reply check could not be exact.
MIN_SERVICES = ("vecadd", "echo", "head")


@dataclass
class Result:
    """One (system, service, concurrency or rate) measurement, or why there is none."""
    system: str
    service: str
    concurrency: int | None = None
    offered_rps: float | None = None
    status: str = "ok"             # "ok", "unavailable: ...", "failed: ..."
    calls: int = 0
    ok: int = 0
    errors: int = 0
    invalid: int = 0
    p50_us: float | None = None
    p99_us: float | None = None
    mean_us: float | None = None
    throughput_rps: float | None = None
    lat_us: np.ndarray | None = field(default=None, repr=False)  # kept for CDF plots, not saved

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "lat_us"}
        return d


def _fill(r: Result, lat_ns: np.ndarray, elapsed_s: float | None, calls: int, errors: int, invalid: int) -> Result:
    ok = lat_ns[lat_ns > 0].astype(np.int64)
    r.calls, r.ok, r.errors, r.invalid = calls, int(ok.size), errors, invalid
    if ok.size:
        pct = percentiles(ok, (50, 99))
        r.p50_us = pct[50] / 1e3
        r.p99_us = pct[99] / 1e3
        r.mean_us = int(ok.sum()) / ok.size / 1e3  # exact sum, as HdrHistogram.mean
        r.throughput_rps = ok.size / elapsed_s if elapsed_s else None
        r.lat_us = ok / 1e3
    if r.ok == 0:
        r.status = "failed: no call succeeded"
    return r


def request_for(service: str) -> tuple[bytes, bytes]:
    req = common.fixed_request(service)
    return req, SERVICES[service].expected(req)


# ------------------------------------------------------------------ in-process callback (§6.1's ideal)

def local_callback(service: str, calls: int) -> Result:
    """The service's callback invoked in-process at batch size 1 on ready arrays: no network,
    no serialization. Its p50 is the callback's own time, subtracted for the RPC tax."""
    req, want = request_for(service)
    if service == "echo":
        inputs = [np.frombuffer(req, np.uint8).reshape(1, -1)]
        out = [np.empty_like(inputs[0])]

        def once():  # what splitrpc's raw echo callback does: copy the request into the reply
            out[0][:] = inputs[0]
    else:
        inputs = [np.ascontiguousarray(a) for a in common.decode(service, req)]
        out = [np.empty((1, *shape), np.float32) for _, shape in common.TENSORS[service][1]]
        fn = common.CALLBACKS[service]

        def once():
            fn(*inputs, *out)
    once()
    got = b"".join(o.tobytes() for o in out)
    lat = np.zeros(calls, np.uint64)
    for i in range(calls):
        t0 = time.perf_counter_ns()
        once()
        lat[i] = max(time.perf_counter_ns() - t0, 1)
    r = _fill(Result("splitrpc-local", service, 1), lat, float(lat.sum()) / 1e9, calls, 0, int(got != want))
    return r


# ------------------------------------------------------------------ raw UDP limit

def raw_sizes(service: str) -> tuple[int, int]:
    """The raw server's (req_size, resp_size) for the service's bytes: echo mode (resp_size 0)
    when the reply is as long as the request and fits one datagram."""
    req, want = request_for(service)
    echo = len(want) == len(req) and len(req) <= 65507
    return len(req), 0 if echo else len(want)


def raw_run(proc: Proc, port: int, service: str, busy: bool, conc: int, calls: int) -> Result:
    req_size, resp_size = raw_sizes(service)
    proc.wait_until(lambda: raw_udp.pingpong("127.0.0.1", port, req_size, resp_size, False, 0, 1), "raw UDP server")
    r = Result(f"raw-udp-{'busy' if busy else 'block'}", service, conc)
    try:
        lat, elapsed_ns = raw_udp.closed_loop("127.0.0.1", port, req_size, resp_size, busy, conc, max(calls // 10, 10),
                                           calls)
    except NativeError as e:
        r.status = f"failed: {os.strerror(e.errno)}"
        return r
    return _fill(r, lat, elapsed_ns / 1e9, calls, 0, 0)


# ------------------------------------------------------------------ splitrpc through its native load generator

def splitrpc_client(port: int, busy: bool, segment_size: int | None = None) -> Client:
    """The load generator's client: no retransmission, so that a lost call shows as one (load runs
    are exact measurements: never held back by the window, never retried after BUSY); its requests
    cut at segment_size (None: by destination, 65000 on loopback)."""
    return Client("127.0.0.1", port, timeout=2.0, busy_poll=busy, retries=0, segment_size=segment_size)


def splitrpc_run(c: Client, system: str, service: str, conc: int, calls: int) -> Result:
    req, want = request_for(service)
    svc = SERVICES[service]
    run_load(c, svc.func_id, req, expect=want, concurrency=conc, n=max(calls // 10, 10))  # warm-up
    recs = run_load(c, svc.func_id, req, expect=want, concurrency=conc, n=calls)
    s = report.summarize(recs)
    return _fill(Result(system, service, conc), recs.latency_ns(), s["duration_s"], calls, s["errors"] - s["invalid"],
                 s["invalid"])


def splitrpc_open(c: Client, system: str, service: str, rate: float, duration_s: float) -> Result:
    req, want = request_for(service)
    svc = SERVICES[service]
    sched = arrivals.arrivals("poisson", rate, max(int(rate * duration_s), 1), seed=int(rate))
    recs = run_load(c, svc.func_id, req, expect=want, schedule=sched, timeout_s=2.0, spin=True)
    s = report.summarize(recs)
    return _fill(Result(system, service, None, s["offered_rps"]), recs.latency_ns(), s["duration_s"], len(sched),
                 s["errors"] - s["invalid"], s["invalid"])


# ------------------------------------------------------------------ peers (their own client stacks)

def peer_available(system: str) -> tuple[bool, str]:
    module, _ = PEERS[system]
    mod = import_module(f"splitrpc.bench.helpers.peers.{module}")
    return mod.available()


def _tcp_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def start_peer(system: str, service: str | None, extra: list[str] | None = None,
               ready_s: float | None = None, env: dict | None = None) -> tuple[Proc, int]:
    """A peer's server; service None (grpc with `--models` in extra) serves no built-in service;
    env: the server's environment (None: this process's)."""
    module, variant = PEERS[system]
    port = free_port(socket.SOCK_STREAM)
    while system == "triton" and not _tcp_free(port + 1):  # PyTriton's HTTP endpoint is port + 1
        port = free_port(socket.SOCK_STREAM)
    proc = Proc([sys.executable, "-m", f"splitrpc.bench.helpers.peers.{module}", "serve",
                 *(["--service", service] if service else []), "--port", str(port), "--variant", variant,
                 *(extra or [])], env=env)
    proc.wait_line("READY", ready_s or (180.0 if system == "triton" else 30.0))
    return proc, port


def peer_client(system: str, service: str | None, port: int, conc: int, calls: int, extra: list[str] | None = None,
                timeout_s: float = 600.0) -> dict:
    """One run of a peer's own client (its JSON line); service None: `--model NAME` is in extra."""
    module, variant = PEERS[system]
    cmd = [sys.executable, "-m", f"splitrpc.bench.helpers.peers.{module}", "client",
           *(["--service", service] if service else []), "--port", str(port), "--variant", variant,
           "--concurrency", str(conc), "--calls", str(calls), "--warmup", str(max(calls // 10, 10)), *(extra or [])]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tempfile.gettempdir())
    if p.returncode != 0 or not p.stdout.strip():
        raise ServerDied(f"{system} client exited with {p.returncode}: {p.stderr.strip()[-1500:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def peer_open(system: str, service: str, port: int, rate: float, duration_s: float) -> Result:
    """An open-loop run of a peer's own client at `rate` Poisson arrivals per second."""
    calls = max(int(rate * duration_s), 10)
    d = peer_client(system, service, port, 1, calls, ["--rate", str(rate)])
    r = _fill(Result(system, service, None, rate), np.asarray(d["lat_ns"], dtype=np.uint64), d["elapsed_s"], calls,
              d["errors"], d["invalid"])
    return r


def peer_run(system: str, service: str, port: int, conc: int, calls: int) -> Result:
    d = peer_client(system, service, port, conc, calls)
    r = _fill(Result(system, service, conc), np.asarray(d["lat_ns"], dtype=np.uint64), d["elapsed_s"], calls,
              d["errors"], d["invalid"])
    if d.get("error_text") and r.status == "ok" and (d["errors"] or d["invalid"]):
        r.status = f"ok ({d['errors']} errors, {d['invalid']} invalid: {d['error_text'][:120]})"
    return r
