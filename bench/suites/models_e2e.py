"""models_e2e.py: `splitrpc bench models`: models end to end over splitrpc, in process and over grpcio (md + JSON).

Models of the zoo served by splitrpc (dynamic batching), called in process (splitrpc-local) and
served by grpcio, all on the same device; writes models_e2e.md and models_e2e.json.

    python -m splitrpc.bench.suites.models_e2e --device cuda:0 --out bench/results
    python -m splitrpc.bench.suites.models_e2e --device cpu --small --calls 300 --out /tmp/models_e2e_cpu

Each round measures every system in turn (one server process alive at a time), each model at
each concurrency, closed loop; the tables quote medians over rounds. Before timing, each round
checks replies to varied requests against the model's CPU reference within tolerance
(splitrpc.services.models.check_reply): a wrong reply marks the row invalid.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from splitrpc.function_config import FUNCTION_DEFAULTS
from splitrpc.bench.helpers import model_server, systems
from splitrpc.loadgen.reporting import add_subcommand, command_of, run_as_module, run_suite
from splitrpc.bench.helpers.peers import common
from splitrpc.bench.helpers.procs import ServerDied
from splitrpc.bench.suites.sidebyside import _median_table
from splitrpc.bench.helpers.systems import Result, _fill
from splitrpc.loadgen import report
from splitrpc.loadgen.load_cli import comma_list

SYSTEMS = ("splitrpc", "splitrpc-local", "grpc")
DEFAULT_MODELS = ("lenet", "resnet18", "bert-like")
GRPC_SYSTEMS = {"sync": "grpc-sync", "asyncio": "grpc-asyncio"}  # --grpc-variant -> systems.PEERS entry
GRPC_SERVERS = {"asyncio": "asyncio server (grpc.aio, the calls run one at a time on its event loop; chosen as "
                           "the faster of the two variants at 32 clients on a 2-CPU machine)",
                "sync": "sync server (a thread pool of 16 workers)"}
VALIDATION_CALLS = 32
VALIDATION_SEED = 1000  # of the varied validation requests; the timed runs send common.model_request(name)
# The targets: (key, what, op, bound).
TARGETS = (("local", "splitrpc p50 / splitrpc-local p50 at concurrency 1 (within 10%)", "<=", 1.10),
           ("grpc_p50", "splitrpc p50 / grpcio p50 at concurrency 1 (>= 60% below)", "<=", 0.40),
           ("grpc_tput", "splitrpc calls/s / grpcio calls/s at concurrency {c} (batching)", ">=", 3.0))


@dataclass
class ModelResult(Result):
    """A Result of the model benchmark: `service` is the model's name."""
    mean_batch: float | None = None      # splitrpc: calls / batches of the timed run (server stats)
    batch_sizes: dict | None = None      # splitrpc: {batch size: batches} of the timed run
    validated: int = 0                   # replies checked against the reference before timing


def add_parser(sub) -> argparse.ArgumentParser:
    return add_subcommand(sub, "models", "model zoo end to end: splitrpc vs in-process vs grpcio", __doc__,
                          add_arguments, cmd_bench_models)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", type=comma_list(str, positive=False), default=list(DEFAULT_MODELS),
                   help=f"comma list of the zoo's models (default {','.join(DEFAULT_MODELS)})")
    p.add_argument("--device", default="cpu", help="where every system runs the models: cpu, cuda, cuda:N")
    p.add_argument("--small", action="store_true", help="the models' small configurations (same I/O sizes)")
    p.add_argument("--concurrency", type=comma_list(int), default=[1, 32],
                   help="closed-loop calls outstanding (default 1,32); splitrpc-local always runs one at a time")
    p.add_argument("--max-batch", type=int, default=FUNCTION_DEFAULTS["max_batch"],
                   help="splitrpc's dynamic batching limit (default: the library's, %(default)s)")
    p.add_argument("--calls", type=int, default=2000, help="recorded calls per run (after a tenth as warm-up)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, systems interleaved; tables quote medians")
    p.add_argument("--systems", type=comma_list(str, positive=False), default=list(SYSTEMS),
                   help=f"from {','.join(SYSTEMS)}")
    p.add_argument("--wait", choices=("poll", "adaptive", "block"), default="poll",
                   help="splitrpc server's wait mode (poll: the client spins too)")
    p.add_argument("--grpc-variant", choices=tuple(GRPC_SYSTEMS), default="asyncio",
                   help="grpcio server: asyncio (default: the faster of the two at 32 clients on a 2-CPU "
                        "machine) or sync (thread pool); the client is grpc.aio either way")
    p.add_argument("--timeout-s", type=float, default=10.0, help="per-call timeout")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="PyTorch intra-op threads of every system (OMP_NUM_THREADS of the servers): on a few "
                        "cores, more threads than free cores stall each operator behind the spinning ones")
    p.add_argument("--out", default="splitrpc-bench-models", help="directory for models_e2e.md and .json")


def check_args(a) -> str | None:
    """Why the arguments cannot run (None when they can)."""
    from splitrpc.services.models import MODELS

    a.models = list(dict.fromkeys(m.strip() for m in a.models))
    a.systems = list(dict.fromkeys(s.strip() for s in a.systems))
    unknown_models = [m for m in a.models if m not in MODELS]
    if unknown_models or not a.models:
        return f"unknown model(s) {', '.join(unknown_models) or '(none given)'}; known: {', '.join(MODELS)}"
    unknown_systems = [s for s in a.systems if s not in SYSTEMS]
    if unknown_systems or not a.systems:
        return f"unknown system(s) {', '.join(unknown_systems) or '(none given)'}; known: {', '.join(SYSTEMS)}"
    if not a.concurrency or min(a.concurrency) < 1:
        return "--concurrency: positive integers"
    if a.calls < 1 or a.rounds < 1 or a.max_batch < 1 or a.torch_threads < 1 or not a.timeout_s > 0:
        return "need --calls >= 1, --rounds >= 1, --max-batch >= 1, --torch-threads >= 1 and --timeout-s > 0"
    return None


# ------------------------------------------------------------------ validation


def validation_requests(name: str, n: int = VALIDATION_CALLS, seed: int = VALIDATION_SEED) -> list[bytes]:
    """n varied example requests of the model (different inputs, different BERT lengths)."""
    from splitrpc.services.models import MODELS

    rng = np.random.default_rng(seed)
    return [MODELS[name].example(rng) for _ in range(n)]


def wrong_replies(name: str, requests: list, replies: list, small: bool) -> list[str]:
    """What is wrong with each reply that is not the model's answer to its request within tolerance
    (an exception in place of a reply counts as wrong); empty when all are right."""
    from splitrpc.services.models import check_reply

    if len(replies) != len(requests):
        return [f"{len(replies)} replies to {len(requests)} requests"]
    wrong = []
    for i, (req, rep) in enumerate(zip(requests, replies)):
        if isinstance(rep, BaseException):
            wrong.append(f"call {i}: {type(rep).__name__}: {rep}")
        elif not check_reply(name, req, rep, small=small):
            wrong.append(f"call {i}: reply of {len(rep)} bytes is not the model's answer within tolerance")
    return wrong


def failed(system: str, model: str, conc: int | None, e: BaseException) -> ModelResult:
    """A row saying why there is no measurement, on one line (a server's traceback: its first and last lines)."""
    lines = [ln.strip() for ln in f"{type(e).__name__}: {e}".splitlines() if ln.strip()]
    why = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return ModelResult(system, model, conc, status=f"failed: {why[:300].replace('|', '/')}")


def _mark_validation(r: ModelResult, n: int, wrong: list[str]) -> ModelResult:
    r.validated = n
    if wrong:
        r.invalid += len(wrong)
        r.status = f"invalid: {len(wrong)} of {n} validation replies wrong ({wrong[0][:100]})"
    return r


# ------------------------------------------------------------------ splitrpc (a server process, dynamic batching)


def server_env(a) -> dict:
    """The servers' environment: this one with PyTorch's intra-op threads set."""
    return {**os.environ, "OMP_NUM_THREADS": str(a.torch_threads)}


def splitrpc_validate(client, name: str, small: bool, timeout_s: float) -> tuple[int, list[str]]:
    """VALIDATION_CALLS varied requests sent at once (the server batches them), each reply checked."""
    from splitrpc.errors import SplitRPCError
    from splitrpc.services.models import MODELS

    reqs = validation_requests(name)
    futs = [client.call_async(MODELS[name].func_id, r, timeout=timeout_s) for r in reqs]
    replies = []
    for f in futs:
        try:
            replies.append(f.result(timeout_s + 5.0))
        except (SplitRPCError, TimeoutError) as e:
            replies.append(e)
    return len(reqs), wrong_replies(name, reqs, replies, small)


def splitrpc_run(client, name: str, conc: int, calls: int, timeout_s: float) -> ModelResult:
    """A closed-loop run of the native load generator sending the model's example request; a reply
    of the wrong size counts as invalid; the server's stats give the run's batch sizes."""
    from splitrpc.load_run import OK, run_load
    from splitrpc.services.models import MODELS

    info = MODELS[name]
    req = common.model_request(name)
    run_load(client, info.func_id, req, concurrency=conc, n=max(calls // 10, 10), timeout_s=timeout_s)  # warm-up
    before = model_server.read_stats(client)
    recs = run_load(client, info.func_id, req, concurrency=conc, n=calls, timeout_s=timeout_s)
    after = model_server.read_stats(client)
    rec = recs.rec
    done = rec["code"] == OK
    good = done & (rec["reply_len"] == info.reply_size)
    lat = (rec["done_ns"][good] - rec["sched_ns"][good]).astype(np.int64)
    r = _fill(ModelResult("splitrpc", name, conc), lat, report.summarize(recs)["duration_s"], calls,
              int((~done).sum()), int((done & ~good).sum()))
    r.mean_batch = model_server.mean_batch(before, after)
    r.batch_sizes = model_server.run_batches(before, after)
    return r


def measure_splitrpc(a, say) -> None:
    """One server process with every model; each model validated, then run at each concurrency."""
    from splitrpc import Client
    from splitrpc.errors import SplitRPCError

    pending = [(name, conc) for name in a.models for conc in a.concurrency]
    try:
        proc, port = model_server.start(a.models, a.device, a.small, a.max_batch, a.wait, env=server_env(a))
    except ServerDied as e:
        for name, conc in pending:
            say(failed("splitrpc", name, conc, e))
        return
    try:
        with Client("127.0.0.1", port, timeout=a.timeout_s, busy_poll=a.wait == "poll") as c:
            proc.wait_until(lambda: model_server.read_stats(c, timeout=0.5), "splitrpc model server")
            validation = {}
            while pending:
                name, conc = pending[0]
                if name not in validation:
                    validation[name] = splitrpc_validate(c, name, a.small, a.timeout_s)
                    proc.check_alive()
                try:
                    r = _mark_validation(splitrpc_run(c, name, conc, a.calls, a.timeout_s), *validation[name])
                except (SplitRPCError, OSError, ValueError) as e:
                    r = failed("splitrpc", name, conc, e)
                pending.pop(0)
                say(r)
                proc.check_alive()
    except (ServerDied, SplitRPCError, OSError) as e:  # the server died or never answered: the rest fail
        for name, conc in pending:
            say(failed("splitrpc", name, conc, e))
    finally:
        proc.stop()


# ------------------------------------------------------------------ splitrpc-local (the model's own time)


def _device_kit(device: str):
    """(to_device(numpy) -> array, empty(shape, dtype) -> array, sync(), to_host(array) -> numpy) for
    the arrays a callback on `device` takes: numpy on the CPU, CuPy on a GPU (torch tensors without CuPy)."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return np.array, np.empty, (lambda: None), np.asarray
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    try:
        import cupy
    except ImportError:
        dtype = lambda d: torch.from_numpy(np.empty(0, d)).dtype  # noqa: E731
        return (lambda x: torch.from_numpy(np.array(x)).to(dev), lambda shape, d: torch.empty(shape, dtype=dtype(d),
                device=dev), torch.cuda.current_stream(dev).synchronize, lambda t: t.cpu().numpy())
    gpu = cupy.cuda.Device(index)

    def on_gpu(fn):
        def call(*args):
            with gpu:
                return fn(*args)
        return call

    return (on_gpu(cupy.asarray), on_gpu(cupy.empty), on_gpu(lambda: cupy.cuda.get_current_stream().synchronize()),
            cupy.asnumpy)


class LocalModel:
    """A model's serving callback in process at batch size 1 on ready arrays on its device."""

    def __init__(self, name: str, device: str, small: bool):
        from splitrpc.services.models import MODELS
        from splitrpc.services.models.adapter import usable_device

        self.info = MODELS[name]
        self.device = usable_device(device)  # the CPU where torch sees no CUDA device, as the servers do
        self.callback = self.info.build(self.device, small=small)
        self.to_device, self.empty, self.sync, self.to_host = _device_kit(self.device)

    def load(self, request) -> tuple[list, list]:
        """The (1, ...) input arrays of `request` on the device and empty output arrays."""
        from splitrpc.services.models import split

        ins = [self.to_device(a[None]) for a in split(self.info.inputs, request)]
        outs = [self.empty((1, *s.shape), s.np_dtype) for s in self.info.outputs]
        self.sync()
        return ins, outs

    def once(self, ins: list, outs: list) -> None:
        """One call, finished: the callback launches the work, sync() waits for it on a GPU."""
        self.callback(*ins, *outs)
        self.sync()

    def reply(self, outs: list) -> bytes:
        return b"".join(np.ascontiguousarray(self.to_host(o)).tobytes() for o in outs)


def local_run(model: LocalModel, small: bool, calls: int) -> ModelResult:
    name = model.info.name
    reqs = validation_requests(name)
    replies = []
    for req in reqs:
        ins, outs = model.load(req)
        model.once(ins, outs)
        replies.append(model.reply(outs))
    wrong = wrong_replies(name, reqs, replies, small)
    ins, outs = model.load(common.model_request(name))
    for _ in range(max(calls // 10, 10)):
        model.once(ins, outs)
    lat = np.zeros(calls, np.int64)
    for i in range(calls):
        t0 = time.perf_counter_ns()
        model.once(ins, outs)
        lat[i] = max(time.perf_counter_ns() - t0, 1)
    r = _fill(ModelResult("splitrpc-local", name, 1), lat, float(lat.sum()) / 1e9, calls, 0, 0)
    return _mark_validation(r, len(reqs), wrong)


def measure_local(a, say, cache: dict) -> None:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(a.torch_threads)
    try:
        for name in a.models:
            try:
                if name not in cache:
                    cache[name] = LocalModel(name, a.device, a.small)
                say(local_run(cache[name], a.small, a.calls))
            except (ImportError, RuntimeError, ValueError) as e:
                say(failed("splitrpc-local", name, 1, e))
    finally:
        torch.set_num_threads(threads)


# ------------------------------------------------------------------ grpc (the peer, batch size 1 per call)


def grpc_run(system: str, port: int, name: str, conc: int, calls: int, small: bool, timeout_s: float) -> ModelResult:
    """The peer's grpc.aio client, every reply checked within tolerance (`client --model`)."""
    extra = ["--model", name, "--timeout-s", str(timeout_s)] + (["--small"] if small else [])
    d = systems.peer_client(system, None, port, conc, calls, extra)
    r = _fill(ModelResult("grpc", name, conc), np.asarray(d["lat_ns"], dtype=np.int64), d["elapsed_s"], calls,
              d["errors"], d["invalid"])
    r.validated = d["invalid"] + sum(1 for v in d["lat_ns"] if v > 0)
    if d.get("error_text") and r.status == "ok" and (d["errors"] or d["invalid"]):
        kind = "invalid" if d["invalid"] else "ok"
        r.status = f"{kind} ({d['errors']} errors, {d['invalid']} invalid: {d['error_text'][:120]})"
    return r


def measure_grpc(a, say) -> None:
    system = GRPC_SYSTEMS[a.grpc_variant]

    ok, why = systems.peer_available(system)
    if not ok:
        for name in a.models:
            for conc in a.concurrency:
                say(ModelResult("grpc", name, conc, status=f"unavailable: {why}"))
        return
    extra = ["--models", ",".join(a.models), "--device", a.device] + (["--small"] if a.small else [])
    try:
        proc, port = systems.start_peer(system, None, extra, ready_s=300.0, env=server_env(a))
    except ServerDied as e:
        for name in a.models:
            for conc in a.concurrency:
                say(failed("grpc", name, conc, e))
        return
    try:
        for name in a.models:
            for conc in a.concurrency:
                try:
                    say(grpc_run(system, port, name, conc, a.calls, a.small, a.timeout_s))
                except (ServerDied, OSError, ValueError) as e:
                    say(failed("grpc", name, conc, e))
    finally:
        proc.stop()


# ------------------------------------------------------------------ tables and targets


def median_rows(results: list[ModelResult], models: list[str]) -> list[dict]:
    """One row per (system, model, concurrency), medians over rounds; in model, concurrency, system order."""
    rows = _median_table(results)
    for row in rows:
        row["model"] = row.pop("service")
        mb = [r.mean_batch for r in results if (r.system, r.service, r.concurrency) ==
              (row["system"], row["model"], row["concurrency"]) and r.mean_batch is not None]
        row["mean_batch"] = float(np.median(mb)) if mb else None
    order = lambda r: (models.index(r["model"]) if r["model"] in models else len(models),  # noqa: E731
                       r["concurrency"] or 0, SYSTEMS.index(r["system"]))
    return sorted(rows, key=order)


def _valid_row(rows: list[dict], system: str, model: str, conc: int | None) -> dict | None:
    """The row, if it was measured with every reply right (a fast wrong answer meets no target)."""
    return next((r for r in rows if (r["system"], r["model"], r["concurrency"]) == (system, model, conc)
                 and r["p50_us"] is not None and r["invalid"] == 0 and not r["status"].startswith("invalid")), None)


def batching_concurrency(concurrency: list[int]) -> int | None:
    """The concurrency of the throughput target: 32 (the issue's), else the highest one above 1."""
    return 32 if 32 in concurrency else (max(concurrency) if max(concurrency) > 1 else None)


def targets(rows: list[dict], models: list[str], concurrency: list[int]) -> list[dict]:
    """The issue's three targets for each model: measured ratio, bound, met (None when a number is missing)."""
    hi = batching_concurrency(concurrency)

    def ratio(a, b, key):
        return a[key] / b[key] if a and b and a.get(key) and b.get(key) else None

    out = []
    for m in models:
        sp1, local, g1 = (_valid_row(rows, s, m, 1) for s in ("splitrpc", "splitrpc-local", "grpc"))
        sp_hi, g_hi = (_valid_row(rows, s, m, hi) for s in ("splitrpc", "grpc")) if hi else (None, None)
        values = {"local": ratio(sp1, local, "p50_us"), "grpc_p50": ratio(sp1, g1, "p50_us"),
                  "grpc_tput": ratio(sp_hi, g_hi, "throughput_rps")}
        for key, what, op, bound in TARGETS:
            v = values[key]
            out.append({"model": m, "target": what.format(c=hi if hi else "32"), "value": v, "op": op, "bound": bound,
                        "met": None if v is None else (v <= bound if op == "<=" else v >= bound)})
    return out


def _f(v, d: int = 1) -> str:
    return "-" if v is None else f"{v:,.{d}f}"


def markdown(doc: dict, rows: list[dict]) -> str:
    local = {r["model"]: r["p50_us"] for r in rows if r["system"] == "splitrpc-local" and r["p50_us"]}
    m = doc["machine"]
    gpu = f", GPU {m['gpu']}" if m.get("gpu") else ""
    ran_on = doc.get("ran_on", doc["device"])
    lines = ["# Model inference end to end: splitrpc vs splitrpc-local vs grpcio (loopback, one machine)", "",
             f"- date: {doc['date']}", f"- command: `{doc['command']}`",
             f"- machine: {m['cpu']} ({m['cpus']} CPUs), kernel {m['kernel']}, Python {m['python']}{gpu}",
             f"- device: {doc['device']}{'' if ran_on == doc['device'] else f' (ran on {ran_on}: no CUDA device)'}; "
             f"models: {', '.join(doc['models'])} "
             f"({'small configurations, same I/O sizes' if doc['small'] else 'full size'}); max batch "
             f"{doc['max_batch']}; PyTorch intra-op threads {doc['torch_threads']} in every system; "
             f"{doc['calls']} recorded calls per run after {max(doc['calls'] // 10, 10)} warm-up "
             f"calls; {doc['rounds']} rounds, systems interleaved within each round, the tables quote medians over "
             f"rounds; wall time {doc['wall_s']} s"]
    if ran_on == "cpu":
        lines += ["", f"> **This run was on the CPU** ({m['cpus']} CPUs, no GPU). The targets below are defined for a "
                  "GPU (the models on CUDA, on the GPU machine's loopback); they are computed here the same way, "
                  "but on the CPU the model's own time and the competition for a few cores (busy-polling server, "
                  "spinning client, PyTorch threads) dominate, so these numbers do not say whether the GPU "
                  "targets are met. Rerun with `--device cuda:0` on the GPU machine for that."]
    lines += ["", "Systems (each in its own process; one server alive at a time):", "",
              f"- splitrpc: a server process registering the models as `splitrpc serve --wait {doc['wait']} "
              f"--models ... --max-batch {doc['max_batch']}` does (bench/helpers/model_server.py, plus a stats function "
              "read between runs), dynamic batching; load from the native closed-loop load generator "
              f"(`Client(busy_poll={doc['wait'] == 'poll'})`); mean batch = calls / batches of the timed run "
              "from the server's stats",
              "- splitrpc-local: the same callback in process at batch size 1 on arrays already on the device, "
              "time including the finished work (stream synchronized on a GPU): the model's own time",
              f"- grpc: bench/helpers/peers/grpc_peer.py, grpcio's {GRPC_SERVERS[doc['grpc_server']]}, running the same "
              "callback, one call per model invocation (no batching); the peer's grpc.aio client with "
              "`concurrency` tasks",
              f"- validation: before timing, each round sends {VALIDATION_CALLS} varied requests to splitrpc "
              "(concurrently, so they are batched) and to splitrpc-local and checks each reply against the "
              "model's CPU reference within tolerance (`check_reply`); the grpc client checks every reply the "
              "same way. `invalid` counts wrong replies; a row with one is reported and meets no target.",
              "- latency per call in µs; calls/s = recorded calls / wall time; over local (concurrency 1) = p50 "
              "minus splitrpc-local's p50: the RPC tax", "",
              "| model | system | conc | p50 µs | p99 µs | calls/s | mean batch | over local µs | errors | invalid "
              "| status |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        over = r["p50_us"] - local[r["model"]] if r["p50_us"] is not None and r["model"] in local \
            and r["system"] != "splitrpc-local" and r["concurrency"] == 1 else None
        lines.append(f"| {r['model']} | {r['system']} | {r['concurrency'] or '-'} | {_f(r['p50_us'])} | "
                     f"{_f(r['p99_us'])} | {_f(r['throughput_rps'], 0)} | {_f(r['mean_batch'], 2)} | {_f(over)} | "
                     f"{r['errors']} | {r['invalid']} | {r['status']} |")
    lines += ["", "## Targets", "",
              "The issue's targets, per model: E2E within 10% of splitrpc-local; >= 60% below grpcio; batching "
              "throughput >= 3x grpcio at 32 clients. `-`: a number is missing (not measured, failed or invalid).",
              "", "| model | target | measured | bound | met |", "|---|---|---:|---:|---|"]
    for t in doc["targets"]:
        met = "-" if t["met"] is None else "yes" if t["met"] else "NO"
        lines.append(f"| {t['model']} | {t['target']} | {_f(t['value'], 2)} | {t['op']} {t['bound']:.2f} | {met} |")
    if ran_on == "cpu":
        lines += ["", "(CPU run: the targets are defined for a GPU; see the note at the top.)"]
    return "\n".join(lines) + "\n"


def machine(device: str) -> dict:
    """report.machine(), plus the GPU's name when the models run on CUDA."""
    m = report.machine()
    if device.startswith("cuda"):
        from splitrpc import gpu

        ordinal = int(device.split(":", 1)[1]) if ":" in device else 0
        try:
            m["gpu"] = gpu.device_name(ordinal)
        except (gpu.GPUUnavailable, OSError) as e:
            m["gpu"] = f"unavailable ({e})"
    return m


# ------------------------------------------------------------------ the command


def _say(r: ModelResult) -> None:
    key = f"c={r.concurrency}" if r.concurrency else ""
    head = f"  {r.system:15s} {r.service:10s} {key:>5s}"
    if r.p50_us is None:
        print(f"{head}  {r.status}", flush=True)
        return
    mb = f"  mean batch {r.mean_batch:.2f}" if r.mean_batch is not None else ""
    print(f"{head}  p50 {r.p50_us:10.1f} µs  p99 {r.p99_us:10.1f} µs  {r.throughput_rps or 0:10,.0f} calls/s{mb}  "
          f"errors {r.errors} invalid {r.invalid}" + ("" if r.status == "ok" else f"  [{r.status}]"), flush=True)


def run(a) -> dict:
    """All rounds; the document written as JSON."""
    results: list[ModelResult] = []

    def say(r: ModelResult) -> None:
        results.append(r)
        _say(r)

    t0 = time.monotonic()
    local_models: dict = {}
    for rnd in range(a.rounds):
        print(f"round {rnd + 1}/{a.rounds}", flush=True)
        for system in a.systems:
            if system == "splitrpc":
                measure_splitrpc(a, say)
            elif system == "splitrpc-local":
                measure_local(a, say, local_models)
            else:
                measure_grpc(a, say)
    rows = median_rows(results, a.models)
    from splitrpc.services.models.adapter import usable_device

    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": a.command,
            "machine": machine(a.device), "device": a.device, "ran_on": usable_device(a.device), "small": a.small,
            "models": a.models,
            "systems": a.systems, "concurrency": a.concurrency, "max_batch": a.max_batch, "calls": a.calls,
            "rounds": a.rounds, "wait": a.wait, "grpc_server": a.grpc_variant, "torch_threads": a.torch_threads,
            "wall_s": round(time.monotonic() - t0, 1), "table": rows,
            "targets": targets(rows, a.models, a.concurrency), "runs": [r.as_dict() for r in results]}


def cmd_bench_models(a) -> int:
    a.command = command_of(a)
    return run_suite(a, name="models_e2e", who="bench models", run=run, markdown=lambda doc: markdown(doc, doc["table"]),
                     check=check_args, needs=("torch",), hint="PyTorch for the models: pip install 'splitrpc[models]'",
                     echo=True)


def main(argv: list[str] | None = None) -> int:
    return run_as_module("splitrpc.bench.suites.models_e2e", __doc__, add_arguments, cmd_bench_models, argv)


if __name__ == "__main__":
    sys.exit(main())
