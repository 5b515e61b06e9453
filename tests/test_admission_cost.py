"""Admission cost (issue 15, item 4): per-call costs computed by the engine from a table of keys or from the header's aux; hostile keys answer BAD_REQUEST for their call alone; max_batch_cost bounds batches; the callback sees its batch's costs."""
import threading
import time

import numpy as np
import pytest
from conftest import settled

import splitrpc
from splitrpc import CostTable, TensorSpec

ROWS = np.arange(100, dtype=np.uint32) * 3  # key k costs 3k


def _sampler(seen: list, gate: threading.Event, **kw):
    """A function whose request is 4 int64 seed ids and a float, costed by the table."""
    def setup(srv):
        @srv.function(1, "sample", inputs=[TensorSpec("seeds", "int64", (4,)), TensorSpec("w", "float32", (1,))],
                      outputs=[TensorSpec("n", "float32", (1,))], max_batch=16,
                      cost=CostTable(ROWS, key_offset=0, keys=4, key_dtype="int64"), **kw)
        def sample(seeds, w, n, costs):
            gate.wait(5)
            seen.append(costs.tolist())
            n[:, 0] = seeds.sum(axis=1) + w[:, 0]
    return setup


def _req(seeds, w=0.5) -> bytes:
    return np.asarray(seeds, np.int64).tobytes() + np.float32(w).tobytes()


def test_hostile_keys_fail_their_call_alone(make_server, make_client):
    seen, gate = [], threading.Event()
    gate.set()
    srv = make_server(_sampler(seen, gate))
    c = make_client(srv.port, timeout=10.0)
    good = [[1, 2, 3, 4], [0, 0, 0, 99], [10, 20, 30, 40]]
    bad = {(-1, 0, 0, 0): "cost key -1 (key 0, at byte 0)",
           (0, 0, 100, 0): "cost key 100 (key 2, at byte 16) is outside the table of 100 rows",
           (0, 0, 0, 2**63 - 1): "cost key 9223372036854775807",
           (-(2**63), 0, 0, 0): "cost key -9223372036854775808",
           (0, 2**40, 0, 0): "cost key 1099511627776"}
    futs = [(s, c.call_async(1, _req(s))) for s in good + [list(b) for b in bad]]
    for s, f in futs:
        if tuple(s) in bad:
            with pytest.raises(splitrpc.BadRequest, match=bad[tuple(s)].replace("(", r"\(").replace(")", r"\)")):
                f.result()
        else:
            assert np.frombuffer(f.result(), np.float32)[0] == sum(s) + 0.5
    ran = sorted(x for batch in seen for x in batch)
    assert ran == sorted(3 * sum(s) for s in good)  # the hostile calls never reached the callback
    st = settled(srv, lambda st: st["errors"]["BAD_REQUEST"] == len(bad) and st["replies"] == len(good))
    assert st["errors"]["BAD_REQUEST"] == len(bad) and st["replies"] == len(good)


def test_max_batch_cost_bounds_each_batch(make_server, make_client):
    seen, gate = [], threading.Event()
    srv = make_server(_sampler(seen, gate, max_batch_cost=100))
    c = make_client(srv.port, timeout=10.0)
    first = c.call_async(1, _req([0, 0, 0, 1]))  # holds the worker while the others queue
    deadline = time.monotonic() + 5
    while srv.stats()["batches"] < 1 and time.monotonic() < deadline:
        time.sleep(0.002)
    seeds = [[5, 5, 0, 0], [10, 0, 0, 0], [1, 1, 1, 1], [20, 20, 0, 0], [0, 0, 0, 0], [7, 0, 0, 0]]
    futs = [c.call_async(1, _req(s)) for s in seeds]
    deadline = time.monotonic() + 5
    while srv.stats()["queued"] < len(seeds) and time.monotonic() < deadline:
        time.sleep(0.002)  # all queued behind the first batch, so they batch up
    gate.set()
    first.result()
    for s, f in zip(seeds, futs):
        assert np.frombuffer(f.result(), np.float32)[0] == sum(s) + 0.5
    for batch in seen:
        assert len(batch) == 1 or sum(batch) <= 100, seen  # a call over the bound alone runs alone
    assert [120] in seen  # 3 * 40: more than the bound, alone
    assert any(len(b) > 1 for b in seen), seen


def test_aux_is_the_cost_and_a_raw_request_too_short_for_its_keys(make_server, make_client):
    seen = []

    def setup(srv):
        @srv.function(2, "by_aux", inputs=[TensorSpec("x", "float32", (1,))],
                      outputs=[TensorSpec("y", "float32", (1,))], cost="aux", executor=1)
        def by_aux(x, y, costs):
            seen.extend(costs.tolist())
            y[:] = x

        @srv.function(3, "raw_keys", raw=True, max_request=32, max_response=32,
                      cost=CostTable([1, 2, 3], key_offset=4, keys=1))
        def raw_keys(reqs, resps, costs):
            for r, q, k in zip(resps, reqs, costs):
                r[:4] = int(k).to_bytes(4, "little")
            return [4] * len(reqs)

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    x = np.ones(1, np.float32)
    for aux in (0, 1, 777, 65535):
        c.call(2, x, aux=aux)
    assert seen == [0, 1, 777, 65535]
    key2 = b"\0" * 4 + (2).to_bytes(4, "little")
    assert int.from_bytes(c.call(3, key2), "little") == 3
    with pytest.raises(splitrpc.BadRequest, match="request of 6 bytes has no room for its 1 cost keys at byte 4"):
        c.call(3, key2[:6])
    with pytest.raises(ValueError, match="aux"):
        c.call(2, x, aux=70000)


def test_a_raw_function_costs_every_key_of_a_variable_length_list(make_server, make_client):
    """keys=None: a GNN-style request is any number of int64 seed ids; it costs the sum of their
    rows; a bad id or a request not ending on a whole key fails that call alone."""
    seen = []

    def setup(srv):
        @srv.function(4, "seed_list", raw=True, max_request=8 * 64, max_response=8,
                      cost=CostTable(ROWS, keys=None, key_dtype="int64"), max_batch=1)
        def seed_list(reqs, resps, costs):
            for r, q, k in zip(resps, reqs, costs):
                seen.append((len(q) // 8, int(k)))
                r[:8] = int(k).to_bytes(8, "little")
            return [8] * len(reqs)

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    for ids in ([5], [1, 2, 3], list(range(64)), []):
        got = int.from_bytes(c.call(4, np.array(ids, "<i8").tobytes()), "little")
        assert got == int(ROWS[ids].sum())
    assert seen == [(1, 15), (3, 18), (64, int(ROWS[:64].sum())), (0, 0)]
    with pytest.raises(splitrpc.BadRequest, match=r"cost key 100 \(key 2, at byte 16\) is outside the table of 100"):
        c.call(4, np.array([1, 2, 100], "<i8").tobytes())
    with pytest.raises(splitrpc.BadRequest, match="cost key -1"):
        c.call(4, np.array([-1], "<i8").tobytes())
    with pytest.raises(splitrpc.BadRequest, match="does not hold whole 8-byte cost keys after byte 0"):
        c.call(4, np.array([1, 2], "<i8").tobytes()[:12])
    assert int.from_bytes(c.call(4, np.array([7], "<i8").tobytes()), "little") == 21  # the rest still runs


@pytest.mark.parametrize("kw, why", [
    (dict(cost="size"), "cost must be None, 'aux' or a splitrpc.CostTable"),
    (dict(cost=CostTable([1], keys=None)), "keys=None .* is for raw functions"),
    (dict(cost=CostTable([1]), max_batch_cost=0), "max_batch_cost must be a positive integer"),
    (dict(max_batch_cost=10), "max_batch_cost needs a cost"),
    (dict(cost=CostTable([1], key_offset=2, keys=1)), "do not lie within one input tensor"),
])
def test_bad_cost_settings_are_refused(kw, why):
    srv = splitrpc.Server("127.0.0.1", 0)
    try:
        with pytest.raises(ValueError, match=why):
            srv.add_function(lambda x, y: None, 1, inputs=[TensorSpec("x", "float32", (1,))],
                             outputs=[TensorSpec("y", "float32", (1,))], **kw)
        with pytest.raises(ValueError, match="needs cost="):
            srv.add_function(lambda x, y, costs: None, 2, inputs=[TensorSpec("x", "float32", (1,))],
                             outputs=[TensorSpec("y", "float32", (1,))])
    finally:
        srv.close()


@pytest.mark.parametrize("table, why", [([], "non-empty"), ([-1], "integers from 0"), ([2**32], "integers from 0"),
                                        ([[1, 2]], "1-D"), ([0.5], "integers")])
def test_bad_tables_are_refused(table, why):
    with pytest.raises(ValueError, match=why):
        CostTable(table)
