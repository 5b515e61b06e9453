"""Per-call results (issue 15, item 2): a callback fails some calls of its batch, each with its own code and text, while the batch's other calls get their outputs; a bad return value fails that batch alone with INTERNAL and says why."""
import threading

import numpy as np
import pytest
from conftest import settled

import splitrpc
from splitrpc import TensorSpec

TABLE = np.arange(100, dtype=np.float32) * 2  # an embedding table of 100 rows: keys 0..99


def _lookup_setup(seen: list, gate: threading.Event):
    def setup(srv):
        @srv.function(5, "lookup", inputs=[TensorSpec("key", "int64", (1,))],
                      outputs=[TensorSpec("row", "float32", (1,))], max_batch=16)
        def lookup(key, row):
            gate.wait(5)  # the first batch waits, so the calls behind it batch up
            k = key[:, 0]
            bad = (k < 0) | (k >= len(TABLE))
            row[~bad, 0] = TABLE[k[~bad]]
            seen.append((len(k), int(bad.sum())))
            return {int(i): splitrpc.BadRequest(f"key {int(k[i])} is not in 0..{len(TABLE) - 1}")
                    for i in np.flatnonzero(bad)}
    return setup


def test_one_bad_key_fails_its_call_alone(make_server, make_client):
    seen, gate = [], threading.Event()
    srv = make_server(_lookup_setup(seen, gate))
    c = make_client(srv.port, timeout=10.0)
    keys = [3, -1, 7, 250, 42, 99, 100, 0] * 4
    futs = [c.call_async(5, np.array([k], np.int64)) for k in keys]
    gate.set()
    for k, f in zip(keys, futs):
        if 0 <= k < 100:
            assert np.frombuffer(f.result(), np.float32)[0] == TABLE[k]
        else:
            with pytest.raises(splitrpc.BadRequest, match=f"key {k} is not in 0..99"):
                f.result()
    assert any(n > bad > 0 for n, bad in seen), seen  # a batch with both outcomes
    st = settled(srv, lambda st: st["errors"]["BAD_REQUEST"] == 12)
    assert st["errors"]["BAD_REQUEST"] == 12 and st["errors"]["INTERNAL"] == 0
    # the elements that carried failures serve the next calls normally
    assert np.frombuffer(c.call(5, np.array([5], np.int64)), np.float32)[0] == TABLE[5]


def test_raw_function_fails_one_call_by_its_length_slot(make_server, make_client):
    def setup(srv):
        @srv.function(6, "upper", raw=True, max_request=64, max_response=64, max_batch=8)
        def upper(reqs, resps):
            out = []
            for q, r in zip(reqs, resps):
                b = bytes(q)
                if not b.isascii():
                    out.append(splitrpc.BadRequest("not ASCII"))
                    continue
                r[:len(b)] = b.upper()
                out.append(len(b))
            return out

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    reqs = [b"abc", "é".encode(), b"xyz", b"", "ü!".encode()]
    futs = [c.call_async(6, r) for r in reqs]
    for r, f in zip(reqs, futs):
        if r.isascii():
            assert f.result() == r.upper()
        else:
            with pytest.raises(splitrpc.BadRequest, match="not ASCII"):
                f.result()


@pytest.mark.parametrize("ret, why", [
    (7, "returns None, or a dict"),
    ({99: splitrpc.BadRequest("x")}, "outside the batch"),
    ({0: ValueError("x")}, "RemoteError instance"),
    ({"0": splitrpc.BadRequest("x")}, "outside the batch"),
])
def test_a_bad_return_value_fails_the_batch_with_internal_and_serving_goes_on(make_server, make_client, ret, why):
    state = {"bad": True}

    def setup(srv):
        @srv.function(7, "f", inputs=[TensorSpec("x", "uint8", (1,))], outputs=[TensorSpec("y", "uint8", (1,))])
        def f(x, y):
            y[:] = x
            return ret if state["bad"] else None

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    with pytest.raises(splitrpc.InternalError, match=why):
        c.call(7, b"\x01")
    state["bad"] = False
    assert c.call(7, b"\x02") == b"\x02"


def test_long_error_text_is_cut_between_characters(make_server, make_client):
    def setup(srv):
        @srv.function(8, "f", inputs=[TensorSpec("x", "uint8", (1,))], outputs=[TensorSpec("y", "uint8", (1,))])
        def f(x, y):
            return {0: splitrpc.BadRequest("é" * 300)}

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    with pytest.raises(splitrpc.BadRequest) as ei:
        c.call(8, b"\x00")
    assert ei.value.message == "é" * 128  # 256 bytes of two-byte characters
