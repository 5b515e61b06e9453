"""test_scale_work.py: no step of the per-call path grows with the functions registered (issue 34): with 1,024 functions registered, the batcher looks only at the queues that hold calls (it counts its looks: work, not time), whether the load goes to one function or is spread over all."""
import numpy as np

from splitrpc import TensorSpec
from splitrpc._native import lib

SPEC = [TensorSpec("x", "float32", (1,))]
N_FUNCS = 1024  # issue 34's largest count of functions (a server takes up to lib.SRPC_MAX_FUNCS queues)


def _many(srv):
    for fid in range(1, N_FUNCS + 1):
        @srv.function(fid, f"f{fid}", inputs=SPEC, outputs=SPEC, capacity=4, max_batch=4)
        def add_one(x, y):
            np.add(x, 1, out=y)


def test_a_thousand_functions_register_and_each_answers(make_server, make_client):
    assert lib.SRPC_MAX_FUNCS >= N_FUNCS + 16  # room for the server's own (describe, ...)
    srv = make_server(_many)
    c = make_client(srv.port, timeout=5.0)
    x = np.ones(1, np.float32)
    for fid in (1, N_FUNCS // 2, N_FUNCS):
        assert np.frombuffer(c.call(fid, x), np.float32)[0] == 2.0


def test_batcher_looks_at_busy_queues_only(make_server, make_client):
    srv = make_server(_many)
    c = make_client(srv.port, timeout=5.0)
    x = np.ones(1, np.float32)
    before = srv.stats()
    for _ in range(300):  # one function of N_FUNCS busy
        c.call(7, x)
    mid = srv.stats()
    looks, batches = mid["sched_looks"] - before["sched_looks"], mid["batches"] - before["batches"]
    assert batches >= 300
    # each batch: the one busy queue, and a look or two that finds it empty while waiting
    assert looks <= 3 * batches, (looks, batches)

    # 16 calls outstanding at a time, spread over every function
    rng = np.random.default_rng(3)
    fids = rng.integers(1, N_FUNCS + 1, size=2000)
    for i in range(0, len(fids), 16):
        futs = [c.call_async(int(f), x) for f in fids[i:i + 16]]
        assert all(np.frombuffer(f.result(), np.float32)[0] == 2.0 for f in futs)
    end = srv.stats()
    looks, batches = end["sched_looks"] - mid["sched_looks"], end["batches"] - mid["batches"]
    assert batches >= 2000 // 4
    # at most the 16 queues that can hold a call at once, per batch (a walk of every registered
    # queue would be N_FUNCS per batch)
    assert looks <= 17 * batches, (looks, batches)
