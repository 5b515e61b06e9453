"""common.py: what every benchmark peer shares: the services' computation, the closed-loop measurement, the CLI and the JSON result."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import threading
import time
from typing import Awaitable, Callable, Optional

import numpy as np

from splitrpc.services import SERVICES
from splitrpc.services import builtin

SERVICE_NAMES = ("vecadd", "matmul", "head", "echo")

# Tensor services: (inputs, outputs), each a list of (name, per-item shape), float32, batch first.
# The names and shapes are those register_builtin_services gives splitrpc.
TENSORS = {
    "vecadd": ([("x", (256,))], [("y", (256,))]),
    "matmul": ([("a", (32, 32)), ("b", (32, 32))], [("c", (32, 32))]),
    "head": ([("x", (3, 224, 224))], [("y", (1000,))]),
}
CALLBACKS = {"vecadd": builtin.vecadd, "matmul": builtin.matmul, "head": builtin.head}
F32 = np.dtype("<f4")

DEFAULT_SEED = 0


def request_size(service: str) -> int:
    """Bytes of a request of a tensor service (its inputs, concatenated)."""
    return sum(int(np.prod(shape)) for _, shape in TENSORS[service][0]) * F32.itemsize


def decode(service: str, request) -> list[np.ndarray]:
    """The request's input arrays, batch size 1 (views on the request's bytes, read-only)."""
    if service not in TENSORS:
        raise KeyError(f"{service!r} is not a tensor service")
    size = memoryview(request).nbytes
    if size != request_size(service):
        raise ValueError(f"{service}: request of {size} bytes, expected {request_size(service)}")
    flat = np.frombuffer(request, dtype=F32)
    arrays, at = [], 0
    for _, shape in TENSORS[service][0]:
        n = int(np.prod(shape))
        arrays.append(flat[at:at + n].reshape((1, *shape)))
        at += n
    return arrays


def compute_batch(service: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The builtin callback (the one splitrpc serves) on batch-first input arrays; the output arrays."""
    if service == "echo":
        return [np.array(inputs[0], copy=True)]
    batch = inputs[0].shape[0]
    outputs = [np.empty((batch, *shape), dtype=F32) for _, shape in TENSORS[service][1]]
    CALLBACKS[service](*(np.ascontiguousarray(a, dtype=F32) for a in inputs), *outputs)
    return outputs


def compute(service: str, request) -> bytes:
    """One request's reply bytes, computed by the builtin callback at batch size 1."""
    if service == "echo":
        return bytes(request)
    return b"".join(out.tobytes() for out in compute_batch(service, decode(service, request)))


def fixed_request(service: str, seed: int = DEFAULT_SEED) -> bytes:
    """The one request a client run sends, again and again."""
    return SERVICES[service].example(np.random.default_rng(seed))


def model_request(name: str, seed: int = DEFAULT_SEED) -> bytes:
    """The one request a client run of a model of the zoo sends: its example for `seed`."""
    from splitrpc.services.models import MODELS

    return MODELS[name].example(np.random.default_rng(seed))


class ModelCheck:
    """Whether a reply is a model's answer to one fixed request, within the zoo's tolerance
    (check_reply). A model's reply to the same request is the same bytes again and again (or one
    of a few), so each distinct reply is checked once and remembered: a check in the timed loop
    costs a hash, not a run of the reference model."""

    MAX_REMEMBERED = 64

    def __init__(self, name: str, request: bytes, small: bool = False):
        from splitrpc.services.models import MODELS

        self.name, self.request, self.small = name, bytes(request), small
        self.reply_size = MODELS[name].reply_size
        self._seen: dict[bytes, bool] = {}

    def __call__(self, reply) -> bool:
        reply = bytes(reply)
        ok = self._seen.get(reply)
        if ok is None:
            from splitrpc.services.models import check_reply

            ok = check_reply(self.name, self.request, reply, small=self.small)
            if len(self._seen) < self.MAX_REMEMBERED:
                self._seen[reply] = ok
        return ok

    def describe(self, reply) -> str:
        return (f"invalid reply: {len(reply)} bytes, not {self.name}'s answer within tolerance "
                f"(expected {self.reply_size} bytes)")


# ------------------------------------------------------------------ measurement


class Tally:
    """What the calls of one phase gave: latency per call (0 where it failed), errors, invalid replies.

    `expected`: the reply bytes every call must get, or a check(reply) -> bool (a ModelCheck).
    A call that failed or got a wrong reply keeps latency 0; a call never completed counts as an error."""

    def __init__(self, calls: int, expected, give_up_after: int):
        self.lat_ns = [0] * calls
        self.expected = expected
        self.errors = 0
        self.invalid = 0
        self.error_text: Optional[str] = None
        self.completed = 0
        self._failures_in_a_row = 0
        self._give_up_after = give_up_after

    @property
    def given_up(self) -> bool:
        """True once so many calls in a row failed that issuing more is pointless (server gone)."""
        return self._failures_in_a_row >= self._give_up_after

    def reply(self, i: int, ns: int, reply) -> None:
        self.completed += 1
        if self.expected(reply) if callable(self.expected) else reply == self.expected:
            self.lat_ns[i] = max(int(ns), 1)
            self._failures_in_a_row = 0
        else:
            self.invalid += 1
            if self.error_text is None:
                self.error_text = self.expected.describe(reply) if callable(self.expected) else \
                    f"invalid reply: {len(reply)} bytes, expected {len(self.expected)}"

    def fail(self, i: int, text: str) -> None:
        self.completed += 1
        self.errors += 1
        self._failures_in_a_row += 1
        if self.error_text is None:
            self.error_text = text

    def finish(self) -> None:
        """Calls never issued or never answered (after giving up) are errors."""
        missing = len(self.lat_ns) - self.completed
        if missing > 0:
            self.errors += missing
            self.completed = len(self.lat_ns)
            if self.error_text is None:
                self.error_text = f"{missing} calls never completed"


def measure(args, peer: str, run_phase: Callable[[Tally, bytes, int], None]) -> dict:
    """A client run: a warm-up phase (discarded), then the recorded phase, timed as a whole.

    run_phase(tally, request, concurrency) makes len(tally.lat_ns) calls sending `request`, with
    `concurrency` outstanding, and reports each to the tally."""
    run = _Run(args, peer)
    if run.warm is not None:
        run_phase(run.warm, run.request, args.concurrency)
        if run.warm_failed():
            return run.result(0.0)
    t0 = time.perf_counter()
    run_phase(run.rec, run.request, args.concurrency)
    return run.result(time.perf_counter() - t0)


async def measure_async(args, peer: str, run_phase: Callable[[Tally, bytes, int], Awaitable[None]]) -> dict:
    """measure() for a client whose run_phase is a coroutine function."""
    run = _Run(args, peer)
    if run.warm is not None:
        await run_phase(run.warm, run.request, args.concurrency)
        if run.warm_failed():
            return run.result(0.0)
    t0 = time.perf_counter()
    await run_phase(run.rec, run.request, args.concurrency)
    return run.result(time.perf_counter() - t0)


class _Run:
    """The fixed request of a client run, its expected reply and the tallies of its two phases."""

    def __init__(self, args, peer: str):
        self.args, self.peer = args, peer
        model = getattr(args, "model", None)
        if model:
            self.request = model_request(model, args.seed)
            expected = ModelCheck(model, self.request, args.small)
        else:
            self.request = fixed_request(args.service, args.seed)
            expected = SERVICES[args.service].expected(self.request)
        give_up = args.concurrency + 3  # every call in flight failed, and then some: the server is gone
        self.warm = Tally(args.warmup, expected, give_up) if args.warmup > 0 else None
        self.rec = Tally(args.calls, expected, give_up)

    def warm_failed(self) -> bool:
        """Every warm-up call failed: the recorded phase is not run, all its calls count as errors."""
        self.warm.finish()
        if self.warm.errors < len(self.warm.lat_ns):
            return False
        self.rec.error_text = f"every warm-up call failed: {self.warm.error_text}"
        return True

    def result(self, elapsed_s: float) -> dict:
        self.rec.finish()
        return result(self.args, self.peer, self.rec, elapsed_s)


async def closed_loop_async(call: Callable[[bytes], Awaitable], request: bytes, tally: Tally, concurrency: int,
                            errors: tuple, reply_bytes: Callable = bytes,
                            describe: Callable[[BaseException], str] = lambda e: f"{type(e).__name__}: {e}") -> None:
    """`concurrency` tasks, each with one call outstanding, until the tally's calls are made.

    call(request) awaits one reply; an exception of the types in `errors` is a failed call;
    reply_bytes(reply) turns the reply into the bytes checked against the expected ones;
    describe(exception) is the error_text of a failed call."""
    slots = iter(range(len(tally.lat_ns)))

    async def worker() -> None:
        for i in slots:  # one iterator shared by all the tasks: each slot is taken once
            if tally.given_up:
                return
            t0 = time.perf_counter_ns()
            try:
                reply = await call(request)
            except errors as e:
                tally.fail(i, describe(e)[:500])
                continue
            t1 = time.perf_counter_ns()
            tally.reply(i, t1 - t0, reply_bytes(reply))

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(tally.lat_ns))))))


async def open_loop_async(call: Callable[[bytes], Awaitable], request: bytes, tally: Tally, rate: float, seed: int,
                          errors: tuple, reply_bytes: Callable = bytes,
                          describe: Callable[[BaseException], str] = lambda e: f"{type(e).__name__}: {e}") -> None:
    """Open loop: calls start at Poisson due times (the same native schedule splitrpc's load
    generator uses) whatever is outstanding; each latency counts from its due time, so a
    client or server that falls behind shows up as latency, not as a lower offered load."""
    from splitrpc.arrivals import arrivals

    due = arrivals("poisson", rate, len(tally.lat_ns), seed=seed + 1)

    async def one(i: int, due_abs: int) -> None:
        try:
            reply = await call(request)
        except errors as e:
            tally.fail(i, describe(e)[:500])
            return
        tally.reply(i, time.perf_counter_ns() - due_abs, reply_bytes(reply))

    t0 = time.perf_counter_ns()
    tasks = []
    for i, d in enumerate(due.tolist()):
        target = t0 + d
        delay = (target - time.perf_counter_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(i, target)))
    await asyncio.gather(*tasks)


def result(args, peer: str, tally: Tally, elapsed_s: float) -> dict:
    return {
        "peer": peer,
        "variant": args.variant,
        "service": getattr(args, "model", None) or args.service,  # a model's name in --model mode
        "concurrency": args.concurrency,
        "rate": args.rate or None,
        "lat_ns": tally.lat_ns,
        "elapsed_s": elapsed_s,
        "errors": tally.errors,
        "invalid": tally.invalid,
        "error_text": tally.error_text,
    }


def emit(res: dict) -> None:
    """The client's one line of output."""
    print(json.dumps(res, separators=(",", ":")), flush=True)


# ------------------------------------------------------------------ CLI and serving


def parser(module: str, variants: tuple[str, ...], doc: str,
           models: bool = False) -> tuple[argparse.ArgumentParser, dict]:
    """The CLI every peer has: `serve` and `client`; returns the parser and its two subparsers.
    models=True (a peer that serves the model zoo): --service becomes optional and the client
    takes --model NAME [--small] instead (see check_client_args)."""
    p = argparse.ArgumentParser(prog=f"python -m splitrpc.bench.helpers.peers.{module}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    subs = {}
    for cmd in ("serve", "client"):
        s = sub.add_parser(cmd)
        s.add_argument("--service", required=not models, choices=SERVICE_NAMES)
        s.add_argument("--port", type=int, required=True)
        s.add_argument("--host", default="127.0.0.1")
        s.add_argument("--variant", choices=variants, default=variants[0])
        subs[cmd] = s
    c = subs["client"]
    c.add_argument("--concurrency", type=int, default=1)
    c.add_argument("--calls", type=int, default=1000)
    c.add_argument("--warmup", type=int, default=100)
    c.add_argument("--timeout-s", type=float, default=5.0, help="per-call timeout")
    c.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the fixed request")
    c.add_argument("--rate", type=float, default=0.0,
                   help="open loop: Poisson arrivals at this many calls/s, latency from each due time "
                        "(peers that support it); 0: closed loop")
    if models:
        c.add_argument("--model", metavar="NAME", help="call this model of the zoo (the method named after it) "
                                                       "with its example request; replies checked within tolerance")
        c.add_argument("--small", action="store_true", help="--model: the server runs the small configuration")
    return p, subs


def check_client_args(p: argparse.ArgumentParser, args, open_loop: bool = False) -> None:
    model = getattr(args, "model", None)
    if (args.service is None) == (model is None):
        p.error("client: give exactly one of --service and --model")
    if model is not None:
        from splitrpc.services.models import MODELS

        if model not in MODELS:
            p.error(f"--model: unknown model {model!r}; known: {', '.join(MODELS)}")
    if args.concurrency < 1 or args.calls < 1 or args.warmup < 0 or args.timeout_s <= 0 or args.rate < 0:
        p.error("need --concurrency >= 1, --calls >= 1, --warmup >= 0, --timeout-s > 0, --rate >= 0")
    if args.rate and not open_loop:
        p.error("--rate: this peer has no open-loop client (grpc_peer has)")


def run_cli(p: argparse.ArgumentParser, args, available: Callable[[], tuple], serve: Callable,
            client: Callable, open_loop: bool = False) -> int:
    """A peer's main after parsing: exit 2 when its packages are missing, else serve, or run
    the client (a coroutine is run to completion) and print its JSON line."""
    ok, why = available()
    if not ok:
        print(why, file=sys.stderr)
        return 2
    if args.cmd == "serve":
        return serve(args) or 0
    check_client_args(p, args, open_loop)
    res = client(args)
    emit(asyncio.run(res) if asyncio.iscoroutine(res) else res)
    return 0


def ready(stream=None) -> None:
    """The line the orchestrator waits for: the server accepts requests."""
    print("READY", file=stream or sys.stdout, flush=True)


def keep_stdout_for_ready():
    """A stream on the process's stdout for READY alone; from now on everything else written to
    stdout (sys.stdout and file descriptor 1, which child processes inherit) goes to stderr."""
    sys.stdout.flush()
    ready_stream = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return ready_stream


def stop_event() -> threading.Event:
    """An event set by SIGTERM or SIGINT (installed in the main thread)."""
    ev = threading.Event()

    def handler(signum, frame):
        ev.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})  # as interrupt_on_sigterm
    return ev


def interrupt_on_sigterm() -> None:
    """SIGTERM and SIGINT raise KeyboardInterrupt (for servers blocked in a native receive).
    Both explicitly, and unblocked: a process inherits ignored signals (a background job of a
    non-interactive shell ignores SIGINT, and Python then installs no handler of its own) and
    its parent thread's signal mask."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
