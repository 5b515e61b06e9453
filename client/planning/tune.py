"""tune.py: the measuring side of `splitrpc plan tune`: a zoo model served at one configuration of Hercules's space (o intra-op threads per instance by OMP_NUM_THREADS, m server processes on one port by `serve --processes`, d the batch size by `--max-batch`; or, for sparse-dense pipeline scheduling, the sparse and dense stages' threads by the model's stage options), and its latency-bounded throughput: the native open-loop generator (Poisson arrivals; several clients, since SO_REUSEPORT gives each client address to one process), each trial repeated and its p99 taken as the median, doubling then bisecting the rate (capacity.latency_bounded_qps) (after Hercules, Ke et al., HPCA 2022).

The measured points feed search.gradient_search / grid_search / batch_only_search: every point
a search asks for is served and measured once (cached), so a search's cost is the number of
distinct points it asks for.
"""
from __future__ import annotations

import functools
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from splitrpc.loadgen.planning.capacity import Run, latency_bounded_qps
from splitrpc.loadgen.planning.search import Config

READY_TIMEOUT_S = 120.0
CLIENTS_PER_INSTANCE = 2  # clients of the open loop per server process (spread by SO_REUSEPORT's hash)


class TuneError(RuntimeError):
    """A configuration that could not be served: the message has the server's last lines."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stage_args(model: str, sparse: int, dense: int) -> list:
    """The `serve` options that run model as Hercules's sparse-dense pipeline (its capability's
    Capability.stage_args); TuneError where it has no such split."""
    from splitrpc import plugins

    for cap in plugins.capabilities():
        if cap.claims(model):
            args = cap.stage_args(model, sparse, dense)
            if args:
                return args
    raise TuneError(f"{model!r} has no sparse and dense stages to pipeline (only a model whose capability gives "
                    "them, such as dlrm, can be tuned with --schedules sd)")


class Served:
    """`splitrpc serve --models MODEL` at a Config on 127.0.0.1, for a `with` block."""

    def __init__(self, model: str, config: Config, *, small: bool = True, max_delay_us: int = 2000,
                 device: str = "cpu"):
        self.model, self.config = model, config
        self.port = _free_port()
        argv = [sys.executable, "-m", "splitrpc", "serve", "--models", model, "--host", "127.0.0.1",
                "--port", str(self.port), "--max-batch", str(config.batch), "--max-delay-us", str(max_delay_us),
                "--processes", str(config.instances), "--log-format", "json", "--wait", "block",
                # close() comes after the last trial, every client gone: nothing to answer DRAINING to,
                # so no linger after the drain (its default, 2 x rto_max, was ~2 s of waiting per point)
                "--drain-linger", "0"]
        if small:
            argv.append("--small")
        if device != "cpu":
            argv += ["--device", device]
        intra = config.threads
        if config.sparse:  # each dense thread one operator worker, as Hercules's S-D pipeline has it
            argv += stage_args(model, config.sparse, config.threads)
            intra = 1
        env = {**os.environ, "OMP_NUM_THREADS": str(intra), "MKL_NUM_THREADS": str(intra)}
        self.lines: list = []
        # cwd: not a source checkout, whose splitrpc/ would shadow the installed package
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                     cwd=tempfile.gettempdir(), start_new_session=True)
        ready = threading.Event()
        want = re.compile(r'"event": "ready"' if config.instances == 1 else r"processes serving on")

        def read():
            for line in self.proc.stdout:
                self.lines = (self.lines + [line.rstrip()])[-20:]
                if want.search(line):
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        end = time.monotonic() + READY_TIMEOUT_S
        while not ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > end:
                self.close()
                raise TuneError(f"{model} at {config} did not start: " + " | ".join(self.lines[-5:]))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def __enter__(self) -> "Served":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_loop_native(port: int, func_id: int, request: bytes, rate: float, seconds: float, *, clients: int = 2,
                     seed: int = 1, timeout_s: float = 2.0, busy_retry: bool = True) -> Run:
    """One open-loop trial in native code: `clients` clients, each sending Poisson arrivals at
    rate/clients for `seconds`; latency from each call's due time. busy_retry: the clients resend
    a call answered BUSY after a backoff, as a client does by default (its latency then counts
    the wait); False: a BUSY answer is the call's outcome."""
    from splitrpc import Client
    from splitrpc.errors import Busy, Draining
    from splitrpc.load_run import TIMEOUT, run_load
    from splitrpc.arrivals import arrivals

    n = max(1, int(rate * seconds / clients))
    out: list = [None] * clients
    errs: list = []

    def one(i: int) -> None:
        try:
            with Client("127.0.0.1", port, timeout=timeout_s, busy_retry=busy_retry) as c:
                sched = arrivals("poisson", rate / clients, n, seed=seed * 1000 + i)
                out[i] = (sched, run_load(c, func_id, request, schedule=sched, timeout_s=timeout_s))
        except Exception as e:  # noqa: BLE001 - re-raised below on the caller's thread
            errs.append(e)

    ths = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    if errs:
        raise errs[0]
    due, lat, outc = [], [], []
    for sched, rec in out:
        r = rec.rec
        ok = r["code"] == 0
        due.append(np.asarray(sched, float) / 1e9)
        lat.append(np.where(ok, (r["done_ns"].astype(np.int64) - r["sched_ns"].astype(np.int64)) / 1e9, np.nan))
        code = r["code"].astype(np.int64)
        outc.append(np.select([ok, code == Busy.code, code == Draining.code, code == TIMEOUT], [0, 1, 2, 3], 4)
                    .astype(np.int8))
    return Run(np.concatenate(due), np.concatenate(lat), np.concatenate(outc), seconds, 0.0)


@functools.lru_cache(maxsize=None)
def served_model(model: str, small: bool = True):
    """The Callee of a model `splitrpc serve --models` serves (any capability's: the zoo's, dlrm,
    the GNN models), with an example request; TuneError for a name none serves that way. Found
    once per (model, small): building a callee may build the model (dlrm's does)."""
    from types import SimpleNamespace

    from splitrpc import plugins

    caps = plugins.capabilities()
    if not any(cap.claims(model) for cap in caps):
        raise TuneError(f"no model {model!r}: no capability serves it (`splitrpc serve --models` knows: "
                        f"{', '.join(n for cap in caps for n in cap.callee_names() if cap.claims(n))})")
    callee = plugins.find_callee(caps, model, SimpleNamespace(small=small), checked=True)
    if callee is None or callee.example is None:
        raise TuneError(f"{model!r} has no example request to measure with")
    return callee


def measure_config(model: str, config: Config, sla_s: float, *, trial_s: float = 2.0, repeats: int = 3,
                   small: bool = True, start: float = 100.0, steps: int = 4, log=None, device: str = "cpu") -> dict:
    """Serves model at config (on `device`) and finds its latency-bounded QPS: each trial rate run
    `repeats` times, its p99 the median of theirs (a trial with a failed call fails). On a GPU
    (device "cuda:N") one more trial at that QPS is run with the board's power read
    (power.PowerMeter). Returns {qps, trials, seconds, power_w (None: not read), power_note}."""
    from splitrpc.loadgen.planning.power import PowerMeter

    info = served_model(model, small)
    request = info.example(np.random.default_rng(0))
    t0 = time.monotonic()
    with Served(model, config, small=small, device=device) as srv:
        clients = CLIENTS_PER_INSTANCE * config.instances

        def measure(rate: float) -> Run:
            runs = [open_loop_native(srv.port, info.func_id, request, rate, trial_s, clients=clients, seed=k + 1)
                    for k in range(repeats)]
            median = sorted(runs, key=lambda r: (len(r.outcome) - r.count("ok"), r.p(0.99)))[len(runs) // 2]
            return median

        open_loop_native(srv.port, info.func_id, request, start, 0.5, clients=clients)  # warm-up
        qps, trials = latency_bounded_qps(measure, sla_s, start=start, steps=steps, log=log)
        power_w, note = None, "not read: the model runs on the CPU (the tuples' power is a GPU's board power)"
        if device != "cpu" and qps > 0:
            meter = PowerMeter(int(device.partition(":")[2] or 0)).start()
            open_loop_native(srv.port, info.func_id, request, qps, trial_s, clients=clients, seed=99)
            power_w = meter.stop()
            note = (f"mean board power of {device} over a {trial_s:g} s trial at {qps:.0f} calls/s ({len(meter.samples)} "
                    "readings of nvidia-smi)" if power_w is not None else f"not read: {meter.why}")
    return {"qps": qps, "trials": trials, "seconds": time.monotonic() - t0, "power_w": power_w, "power_note": note}
