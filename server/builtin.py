"""builtin.py: vecadd, matmul, echo and head, with example inputs and reply checks for each."""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from splitrpc.spec import TensorSpec

ECHO_MAX = 1 << 20


_ONE = np.float32(1.0)


def vecadd(x: np.ndarray, y: np.ndarray) -> None:
    np.add(x, _ONE, out=y)


vecadd.o2_kernel = "vecadd"  # orchestration="o2" on a GPU runs the persistent kernel of the same sum


def matmul(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    np.matmul(a, b, out=c)


def echo(requests: list, responses: list) -> list:
    lengths = []
    for req, resp in zip(requests, responses):
        n = len(req)
        resp[:n] = req
        lengths.append(n)
    return lengths


def head(x: np.ndarray, y: np.ndarray) -> None:
    np.copyto(y, x.reshape(x.shape[0], -1)[:, :1000])


@dataclass(frozen=True)
class Service:
    func_id: int
    name: str
    example: Callable[[np.random.Generator], bytes]   # a valid request
    expected: Callable[[bytes], bytes]                 # the reply it must get


def _f32(rng: np.random.Generator, n: int) -> bytes:
    return rng.standard_normal(n).astype("<f4").tobytes()


SERVICES = {
    s.name: s
    for s in (
        Service(1, "vecadd", lambda r: _f32(r, 256),
                lambda q: (np.frombuffer(q, "<f4") + np.float32(1)).astype("<f4").tobytes()),
        Service(2, "matmul", lambda r: _f32(r, 2048),
                lambda q: (np.frombuffer(q, "<f4")[:1024].reshape(32, 32)
                           @ np.frombuffer(q, "<f4")[1024:].reshape(32, 32)).astype("<f4").tobytes()),
        Service(3, "echo", lambda r: r.bytes(int(r.integers(0, 4096))), lambda q: bytes(q)),
        Service(4, "head", lambda r: _f32(r, 3 * 224 * 224), lambda q: bytes(q[:4000])),
    )
}


def with_batch_cost(fn: Callable, cost_us: int) -> Callable:
    """fn that first sleeps cost_us per batch, whatever its size: a fixed service time per batch
    with the CPU left free meanwhile, as while a GPU runs a batch (0: fn itself)."""
    if cost_us <= 0:
        return fn
    seconds = cost_us / 1e6

    @functools.wraps(fn)
    def costly(*args):
        time.sleep(seconds)
        return fn(*args)

    costly.__dict__.pop("o2_kernel", None)  # a persistent kernel would skip the cost
    return costly


def register_builtin_services(server, *, max_batch: int | None = None, max_delay_us: int | None = None,
                              batch_cost_us: int = 0) -> None:
    """Registers the four built-in services on a splitrpc.Server; max_batch and max_delay_us left
    None take the library's defaults. batch_cost_us > 0 adds that fixed service time to every
    batch (with_batch_cost), which bounds the server's capacity at about max_batch * 1e6 /
    batch_cost_us calls/s: a server-bound service for overload tests."""
    f32 = "float32"

    def cb(fn):
        return with_batch_cost(fn, batch_cost_us)

    server.add_function(cb(vecadd), 1, "vecadd", [TensorSpec("x", f32, (256,))], [TensorSpec("y", f32, (256,))],
                        max_batch=max_batch, max_delay_us=max_delay_us)
    server.add_function(cb(matmul), 2, "matmul", [TensorSpec("a", f32, (32, 32)), TensorSpec("b", f32, (32, 32))],
                        [TensorSpec("c", f32, (32, 32))], max_batch=max_batch, max_delay_us=max_delay_us)
    server.add_function(cb(echo), 3, "echo", raw=True, max_request=ECHO_MAX, max_response=ECHO_MAX,
                        capacity=64, max_batch=max_batch)
    server.add_function(cb(head), 4, "head", [TensorSpec("x", f32, (3, 224, 224))], [TensorSpec("y", f32, (1000,))],
                        capacity=64, max_batch=max_batch, max_delay_us=max_delay_us)
