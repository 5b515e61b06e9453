"""End to end through the Python API: built-in services, errors, futures, timeouts, counters, dynamic batching, server life cycle."""
import errno
import os
import socket
import threading
import time

import numpy as np
import pytest

import splitrpc
from splitrpc import TensorSpec
from splitrpc._native import ffi, lib
from splitrpc.services import SERVICES, register_builtin_services

from conftest import free_udp_port as dead_port, settled, wait_for

PAGE = os.sysconf("SC_PAGE_SIZE")



def f32(a) -> bytes:
    return np.asarray(a, dtype="<f4").tobytes()


# ------------------------------------------------------------------ built-in services


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_builtin_service_returns_expected_reply(builtin_server, make_client, name):
    svc = SERVICES[name]
    c = make_client(builtin_server.port, timeout=5.0)
    rng = np.random.default_rng(hash(name) & 0xFFFF)
    for _ in range(3):
        data = svc.example(rng)
        reply = c.call(svc.func_id, data)
        assert reply == svc.expected(data)
    assert builtin_server.stats()["functions"][name] == 3


def test_builtin_replies_are_computed_not_copied(builtin_server, make_client):
    c = make_client(builtin_server.port, timeout=5.0)
    x = np.arange(256, dtype="<f4")
    assert np.array_equal(np.frombuffer(c.call(1, x), "<f4"), x + 1)
    a = np.arange(1024, dtype="<f4").reshape(32, 32) / 100
    b = np.eye(32, dtype="<f4") * 2
    got = np.frombuffer(c.call(2, np.concatenate([a.ravel(), b.ravel()])), "<f4").reshape(32, 32)
    assert np.allclose(got, a @ b)
    img = np.random.default_rng(3).standard_normal((3, 224, 224)).astype("<f4")
    assert np.array_equal(np.frombuffer(c.call(4, img), "<f4"), img.ravel()[:1000])


ECHO_SIZES = [0, 1, 1449, 1450, 1451, 65000, 65001, 1 << 20]


@pytest.mark.parametrize("segment_size", [1450, 0], ids=["S1450", "default"])
def test_echo_sizes_byte_exact(builtin_server, make_client, segment_size):
    c = make_client(builtin_server.port, timeout=10.0, segment_size=segment_size)
    rng = np.random.default_rng(segment_size)
    for n in ECHO_SIZES:
        data = rng.bytes(n)
        reply = c.call(3, data)
        assert len(reply) == n and reply == data, n
    st = builtin_server.stats()
    assert st["functions"]["echo"] == len(ECHO_SIZES)
    assert st["drops"]["inconsistent"] == 0 and st["drops"]["bad_segment"] == 0


def test_echo_over_one_mib_is_too_large(builtin_server, make_client):
    c = make_client(builtin_server.port, timeout=5.0)
    with pytest.raises(splitrpc.TooLarge) as ei:
        c.call(3, bytes((1 << 20) + 1))
    assert ei.value.code == 6 and isinstance(ei.value, splitrpc.RemoteError)
    assert c.call(3, b"still fine") == b"still fine"


def test_unknown_function(builtin_server, make_client):
    c = make_client(builtin_server.port, timeout=5.0)
    with pytest.raises(splitrpc.UnknownFunction) as ei:
        c.call(99, b"abc")
    assert ei.value.code == 1 and "99" in str(ei.value)


def test_wrong_request_size_is_bad_request(builtin_server, make_client):
    c = make_client(builtin_server.port, timeout=5.0)
    with pytest.raises(splitrpc.BadRequest) as ei:
        c.call(1, bytes(1000))
    assert ei.value.code == 2
    assert builtin_server.stats()["functions"]["vecadd"] == 0


# ------------------------------------------------------------------ user functions


def test_user_function_with_two_inputs_and_two_outputs(make_server, make_client):
    seen = []

    def setup(srv):
        @srv.function(20, "pair", inputs=[TensorSpec("x", "float32", (8,)), TensorSpec("y", "int16", (2, 3))],
                      outputs=[TensorSpec("s", "float64", (1,)), TensorSpec("t", "int16", (2, 3))])
        def pair(x, y, s, t):
            seen.append((x.shape, y.shape, s.shape, t.shape, x.dtype.str, y.dtype.str))
            s[:, 0] = x.sum(axis=1) + y.reshape(len(y), -1).sum(axis=1)
            t[:] = y * 2 - 1

    srv = make_server(setup)
    c = make_client(srv.port, timeout=5.0)
    x = np.linspace(-1, 1, 8, dtype="<f4")
    y = np.array([[1, -2, 3], [400, 5, -6]], dtype="<i2")
    reply = c.call(20, x.tobytes() + y.tobytes())
    assert len(reply) == 8 + 12  # reply = concatenation of the outputs
    s = np.frombuffer(reply[:8], "<f8")
    t = np.frombuffer(reply[8:], "<i2").reshape(2, 3)
    assert s[0] == pytest.approx(float(x.astype(np.float64).sum()) + 401)
    assert np.array_equal(t, y * 2 - 1)
    B = seen[0][0][0]
    assert seen[0] == ((B, 8), (B, 2, 3), (B, 1), (B, 2, 3), "<f4", "<i2")
    with pytest.raises(splitrpc.BadRequest):
        c.call(20, x.tobytes())  # only the first input


def test_numpy_arrays_are_accepted_as_requests(builtin_server, make_client):
    c = make_client(builtin_server.port, timeout=5.0)
    x = np.arange(256, dtype=np.float32)
    assert c.call(1, x) == f32(x + 1)
    strided = np.arange(512, dtype=np.float32)[::2]  # not contiguous: sent as its values
    assert not strided.flags.c_contiguous
    assert c.call(1, strided) == f32(strided + 1)
    two_d = np.arange(256, dtype=np.float32).reshape(16, 16).T  # Fortran order
    assert c.call(1, two_d) == f32(np.ascontiguousarray(two_d).ravel() + 1)
    assert c.call(3, np.arange(10, dtype=np.uint8)) == bytes(range(10))


def test_raising_callback_gives_internal_error_and_serving_goes_on(make_server, make_client):
    runs = []

    def setup(srv):
        register_builtin_services(srv)

        @srv.function(10, "boom", inputs=[TensorSpec("x", "float32", (4,))],
                      outputs=[TensorSpec("y", "float32", (4,))])
        def boom(x, y):
            runs.append(x.shape[0])
            raise ValueError("boom")

    srv = make_server(setup)
    c = make_client(srv.port, timeout=5.0)
    req = f32([1, 2, 3, 4])
    with pytest.raises(splitrpc.InternalError) as ei:
        c.call(10, req)
    assert "boom" in ei.value.message and "boom" in str(ei.value)
    assert ei.value.code == 5
    x = np.ones(256, dtype="<f4")
    assert c.call(1, x) == f32(x + 1)  # the server keeps serving
    with pytest.raises(splitrpc.InternalError, match="boom"):
        c.call(10, req)  # a new req_id runs the function again: not cached across calls
    assert sum(runs) == 2
    st = settled(srv, lambda st: st["errors"]["INTERNAL"] == 2 and st["replies"] == 1)
    assert st["errors"]["INTERNAL"] == 2 and st["replies"] == 1


# Replies are held back (gate) until every call_async has returned: a reply received and released
# while its request is still being sent hits the client bug of the last test in this file.


def test_call_async_200_concurrent(make_server, make_client):
    gate = threading.Event()

    def setup(srv):
        @srv.function(11, "inc", inputs=[TensorSpec("x", "float32", (256,))], outputs=[TensorSpec("y", "float32", (256,))],
                      capacity=256)
        def inc(x, y):
            gate.wait(5)
            np.add(x, 1, out=y)

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    reqs = [np.full(256, i, dtype="<f4") for i in range(200)]
    futs = [c.call_async(11, r) for r in reqs]
    gate.set()
    for i, f in enumerate(futs):
        assert f.result(timeout=20) == f32(reqs[i] + 1), i
    # a request the client sent again while the gate held its batch is answered from the reply
    # cache (a reply too, but no second run): each call ran once and got one fresh reply
    st = settled(srv, lambda st: st["replies"] - st["cache_hits"] >= 200)
    assert st["functions"]["inc"] == 200 and st["calls"] == 200 and st["replies"] - st["cache_hits"] == 200, st


def test_call_async_mixed_raw_functions_and_errors(make_server, make_client):
    gate = threading.Event()
    batches = []

    def setup(srv):
        @srv.function(12, "recho", raw=True, max_request=4096, max_response=4096)
        def recho(requests, responses):
            gate.wait(5)
            batches.append(len(requests))
            for q, r in zip(requests, responses):
                r[:len(q)] = q
            return [len(q) for q in requests]

        @srv.function(13, "fails", inputs=[TensorSpec("x", "uint8", (1,))], outputs=[TensorSpec("y", "uint8", (1,))])
        def fails(x, y):
            gate.wait(5)
            raise RuntimeError("no luck")

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    futs = [(c.call_async(12, bytes([i]) * (i * 100)), bytes([i]) * (i * 100)) for i in range(30)]
    bad = c.call_async(13, b"\x00")
    gate.set()
    for f, want in futs:
        assert f.result(timeout=20) == want
    with pytest.raises(splitrpc.InternalError, match="no luck"):
        bad.result(timeout=20)
    assert sum(batches) == 30


def test_future_times_out_when_no_server_answers(silent_port):
    with splitrpc.Client("127.0.0.1", silent_port, timeout=0.2) as c:
        fut = c.call_async(1, bytes(1024), timeout=0.2)
        with pytest.raises(splitrpc.CallTimeout):
            fut.result(timeout=2.0)


def test_future_times_out_while_other_calls_are_pending(make_server, make_client):
    """A Future expiring while a later call is still pending does resolve with CallTimeout."""
    gate = threading.Event()

    def setup(srv):
        @srv.function(7, "held", inputs=[TensorSpec("x", "uint8", (4,))], outputs=[TensorSpec("y", "uint8", (4,))],
                      max_batch=1)
        def held(x, y):
            gate.wait(5)
            y[:] = x

    srv = make_server(setup)
    c = make_client(srv.port, timeout=5.0)
    short = c.call_async(7, b"abcd", timeout=0.1)
    long = c.call_async(7, b"efgh", timeout=10.0)
    with pytest.raises(splitrpc.CallTimeout):
        short.result(timeout=5.0)
    gate.set()
    assert long.result(timeout=10.0) == b"efgh"


def test_deadline_cuts_the_timeout_and_a_past_one_sends_nothing(make_client, silent_port):
    c = make_client(silent_port, timeout=5.0)
    t0 = time.monotonic()
    with pytest.raises(splitrpc.CallTimeout):
        c.call(1, bytes(1024), deadline=t0 + 0.1)
    assert 0.09 < time.monotonic() - t0 < 2.0  # the deadline, not the 5 s timeout
    with pytest.raises(splitrpc.CallTimeout):
        c.call_async(1, bytes(1024), deadline=t0 + 0.15).result(timeout=3)
    sent = c.stats()["sent_calls"]
    with pytest.raises(splitrpc.CallTimeout, match="deadline"):
        c.call(1, bytes(1024), deadline=time.monotonic() - 1)
    with pytest.raises(splitrpc.CallTimeout, match="deadline"):
        c.call_async(1, bytes(1024), deadline=time.monotonic())
    assert c.stats()["sent_calls"] == sent  # nothing sent past the deadline


def test_call_timeout_when_no_server_answers(make_client, silent_port):
    c = make_client(silent_port, timeout=0.2)
    with pytest.raises(splitrpc.CallTimeout):
        c.call(1, bytes(1024))
    with pytest.raises(TimeoutError):  # CallTimeout is a TimeoutError too
        c.call(1, bytes(1024), timeout=0.05)
    assert c.stats()["timeouts"] == 2


def test_call_timeout_on_slow_function_then_recovery(make_server, make_client):
    def setup(srv):
        @srv.function(8, "slow", inputs=[TensorSpec("x", "uint8", (1,))], outputs=[TensorSpec("y", "uint8", (1,))])
        def slow(x, y):
            time.sleep(0.4)
            y[:] = x + 1

    srv = make_server(setup)
    c = make_client(srv.port, timeout=5.0)
    with pytest.raises(splitrpc.CallTimeout):
        c.call(8, b"\x01", timeout=0.05)
    assert c.call(8, b"\x05") == b"\x06"  # the late reply of the first call is not taken for this one


def test_stats_count_exactly(make_server, make_client):
    srv = make_server(register_builtin_services)
    c = make_client(srv.port, timeout=5.0, segment_size=65000)
    rng = np.random.default_rng(5)
    for _ in range(5):
        d = SERVICES["vecadd"].example(rng)
        assert c.call(1, d) == SERVICES["vecadd"].expected(d)
    for _ in range(2):
        d = SERVICES["matmul"].example(rng)
        assert c.call(2, d) == SERVICES["matmul"].expected(d)
    for n in (0, 7, 70000):
        assert c.call(3, bytes(n)) == bytes(n)
    with pytest.raises(splitrpc.UnknownFunction):
        c.call(99, b"")
    for n in (4, 1028):
        with pytest.raises(splitrpc.BadRequest):
            c.call(1, bytes(n))
    with pytest.raises(splitrpc.TooLarge):
        c.call(3, bytes((1 << 20) + 1))  # 17 segments of 65000: one error, 16 ignored

    # the error came back on the first segment: let the engine take in the other 16 first.
    # datagrams in: 10 single-segment calls but the 70000-byte echo (2), 3 errors of one, the TOO_LARGE 17
    st = settled(srv, lambda st: st["rx_datagrams"] == 9 + 2 + 3 + 17 and st["replies"] == 10
                 and sum(st["errors"].values()) == 4)
    assert st["rx_datagrams"] == 9 + 2 + 3 + 17
    assert st["calls"] == 10
    assert st["replies"] == 10
    assert st["errors"] == {"UNKNOWN_FUNCTION": 1, "BAD_REQUEST": 2, "BUSY": 0, "DEADLINE": 0, "INTERNAL": 0,
                            "TOO_LARGE": 1, "DRAINING": 0, "FORBIDDEN": 0}
    assert st["functions"] == {"vecadd": 5, "matmul": 2, "echo": 3, "head": 0}
    assert sum(k * v for k, v in st["batch_sizes"].items()) == 10
    assert sum(st["batch_sizes"].values()) == st["batches"]
    assert st["drops"]["rejected"] == 16
    assert sum(v for k, v in st["drops"].items() if k != "rejected") == 0
    assert st["cache_hits"] == 0 and st["partial_messages"] == 0 and st["reassembly_bytes"] == 0
    # datagrams out: one per reply or error, but the 70000-byte echo reply has 2 (S=65000)
    assert st["tx_datagrams"] == 9 + 2 + 4
    assert wait_for(lambda: srv.stats()["cached_replies"] == 10)
    cs = c.stats()
    assert cs["sent_calls"] == 14 and cs["replies"] == 10 and cs["errors"] == 4 and cs["timeouts"] == 0


# ------------------------------------------------------------------ dynamic batching


def test_batches_larger_than_one_form(make_server, make_client):
    sizes = []
    gate = threading.Event()

    def setup(srv):
        @srv.function(30, "inc", inputs=[TensorSpec("x", "float32", (16,))], outputs=[TensorSpec("y", "float32", (16,))])
        def inc(x, y):
            sizes.append(x.shape[0])
            gate.wait(5)  # the first batch holds the worker until every call is queued
            time.sleep(0.005)
            y[:] = x + 1

    srv = make_server(setup)
    c = make_client(srv.port, timeout=20.0)
    reqs = [np.full(16, i, dtype="<f4") for i in range(64)]
    futs = [c.call_async(30, r) for r in reqs]
    assert wait_for(lambda: srv.stats()["calls"] == 64, timeout=10)
    gate.set()
    for r, f in zip(reqs, futs):
        assert f.result(timeout=20) == f32(r + 1)
    assert sum(sizes) == 64
    assert max(sizes) > 1
    assert max(sizes) == 8  # max_batch (default 8): everything was queued when the worker came back
    st = srv.stats()
    assert st["mean_batch"] > 1
    assert st["batches"] == len(sizes)
    assert st["batch_sizes"] == {b: sizes.count(b) for b in set(sizes)}


def test_a_batch_wrapping_the_ring_end_is_one_view(make_server, make_client):
    cap, n = 5, PAGE // 4  # float32[n] is one page: element k lives exactly at base + (k % cap) * PAGE
    elem = n * 4
    batches = []  # (B, x.ctypes.data, copy of x)
    round_sent = threading.Event()

    def setup(srv):
        @srv.function(40, "wrap", inputs=[TensorSpec("x", "float32", (n,))], outputs=[TensorSpec("y", "float32", (n,))],
                      capacity=cap, max_batch=4)
        def wrap(x, y):
            batches.append((x.shape[0], x.ctypes.data, x.copy()))
            round_sent.wait(5)
            time.sleep(0.003)
            np.add(x, 1, out=y)

    srv = make_server(setup)
    c = make_client(srv.port, timeout=20.0)
    sent = 0
    round_sizes = [3, 4, 2, 5, 4, 3, 5, 1]
    for r in range(24):
        k = round_sizes[r % len(round_sizes)]
        round_sent.clear()
        futs = [(c.call_async(40, np.full(n, sent + i, dtype="<f4")), sent + i) for i in range(k)]
        round_sent.set()  # no reply goes out while a round is being sent
        sent += k
        for f, idx in futs:
            assert f.result(timeout=20) == f32(np.full(n, idx + 1)), idx
        # the ring slot is recycled once the reply is cached: never more than `cap` in flight
        assert wait_for(lambda: srv.stats()["cached_replies"] == sent, timeout=10)

    assert sum(b for b, _, _ in batches) == sent
    rows = np.concatenate([x for _, _, x in batches])
    assert rows.shape == (sent, n)
    assert np.array_equal(rows, np.repeat(np.arange(sent, dtype="<f4")[:, None], n, axis=1))
    # Element k of the ring lives at base + k * elem. A batch starts where the one before it ended,
    # or, when the ring had gone empty, in the element of the call before (callring.c's rewind).
    base = min(ptr for _, ptr, _ in batches)
    at = [(ptr - base) // elem for _, ptr, _ in batches]
    assert all((ptr - base) % elem == 0 for _, ptr, _ in batches)
    assert sorted(set(at)) == list(range(cap)), at  # every element starts a batch: base is element 0
    for (b, _, _), k, k_next in zip(batches, at, at[1:]):
        assert k_next in ((k + b) % cap, (k + b - 1) % cap), (at, [b for b, _, _ in batches])
    wrapped, start = 0, 0
    for (b, _, x), k in zip(batches, at):
        assert x.shape == (b, n) and b <= 4
        if k + b > cap:  # one view across the end of the ring (its second mapping)
            wrapped += 1
            assert np.array_equal(x[:, 0], np.arange(start, start + b, dtype="<f4"))
        start += b
    assert wrapped >= 1, [b for b, _, _ in batches]


def test_max_delay_gathers_a_batch(make_server, make_client):
    sizes = []
    sent = threading.Event()

    def setup(srv):
        @srv.function(50, "gather", inputs=[TensorSpec("x", "int32", (2,))], outputs=[TensorSpec("y", "int32", (2,))],
                      max_batch=8, max_delay_us=20000)
        def gather(x, y):
            sizes.append(x.shape[0])  # the batch is formed before this runs
            sent.wait(5)  # no reply goes out while calls are still being sent
            y[:] = x * 3

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    reqs = [np.array([i, -i], dtype="<i4") for i in range(8)]
    futs = [c.call_async(50, r) for r in reqs]
    sent.set()
    for r, f in zip(reqs, futs):
        assert f.result(timeout=10) == (r * 3).astype("<i4").tobytes()
    assert sum(sizes) == 8
    assert max(sizes) >= 4


def test_max_delay_holds_a_partial_batch_until_due(make_server, make_client):
    sizes = []

    def setup(srv):
        @srv.function(51, "hold", inputs=[TensorSpec("x", "uint8", (1,))], outputs=[TensorSpec("y", "uint8", (1,))],
                      max_batch=8, max_delay_us=300000)
        def hold(x, y):
            sizes.append(x.shape[0])
            y[:] = x

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0)
    futs = [c.call_async(51, bytes([i])) for i in range(3)]
    assert [f.result(timeout=10) for f in futs] == [b"\x00", b"\x01", b"\x02"]
    assert sizes == [3]  # fewer than max_batch: held, then handed over together


# ------------------------------------------------------------------ server life cycle


def test_context_manager_starts_and_closes(make_client):
    with splitrpc.Server("127.0.0.1", 0, wait="block") as srv:
        port = srv.port
        assert port > 0
        with pytest.raises(splitrpc.SplitRPCError):  # __enter__ started it
            srv.add_function(lambda x, y: None, 1, "late", [TensorSpec("x", "f4", (1,))], [TensorSpec("y", "f4", (1,))])
        with pytest.raises(splitrpc.SplitRPCError):
            srv.start()  # already running
    # the port is released on exit: it can be bound again
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(("127.0.0.1", port))
    finally:
        s.close()


def test_context_manager_serves(make_client):
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    register_builtin_services(srv)
    with srv:
        c = make_client(srv.port, timeout=5.0)
        assert c.call(3, b"ctx") == b"ctx"


def test_register_after_start_raises(builtin_server):
    with pytest.raises(splitrpc.SplitRPCError):
        @builtin_server.function(60, "late", inputs=[TensorSpec("x", "f4", (1,))], outputs=[TensorSpec("y", "f4", (1,))])
        def late(x, y):
            pass


def test_duplicate_func_id_raises_value_error():
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    try:
        register_builtin_services(srv)
        with pytest.raises(ValueError):
            srv.add_function(lambda a, b: None, 1, "again", [TensorSpec("x", "f4", (1,))], [TensorSpec("y", "f4", (1,))])
    finally:
        srv.close()


def test_invalid_wait_mode_raises_value_error():
    with pytest.raises(ValueError):
        splitrpc.Server("127.0.0.1", 0, wait="sometimes")


def test_port_in_use_raises_native_error(builtin_server):
    with pytest.raises(splitrpc.NativeError) as ei:
        splitrpc.Server("127.0.0.1", builtin_server.port, wait="block")
    assert isinstance(ei.value, OSError)
    assert ei.value.errno == errno.EADDRINUSE


def test_stop_then_close_twice_is_safe(make_client):
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    register_builtin_services(srv)
    srv.start()
    c = make_client(srv.port, timeout=5.0)
    assert c.call(3, b"x") == b"x"
    srv.stop()
    srv.stop()
    with pytest.raises(splitrpc.CallTimeout):  # stopped: nobody answers
        c.call(3, b"y", timeout=0.1)
    srv.close()
    srv.close()


def test_close_without_start_is_safe():
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    register_builtin_services(srv)
    srv.close()
    srv.close()


def test_error_arriving_while_the_request_is_still_being_sent_resolves_the_future(make_server, make_client):
    gate = threading.Event()

    def setup(srv):
        register_builtin_services(srv)

        @srv.function(9, "held", inputs=[TensorSpec("x", "uint8", (1,))], outputs=[TensorSpec("y", "uint8", (1,))])
        def held(x, y):
            gate.wait(5)
            y[:] = x

    srv = make_server(setup)
    c = make_client(srv.port, timeout=10.0, segment_size=1)
    try:
        keep = c.call_async(9, b"\x01")  # a pending call: the client's receiving thread is running
        # 65535 one-byte segments: UNKNOWN_FUNCTION comes back on the first while the rest are still going out
        fut = c.call_async(99, bytes(65535))
        with pytest.raises(splitrpc.UnknownFunction):
            fut.result(timeout=3)
    finally:
        gate.set()
    assert keep.result(timeout=10) == b"\x01"


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback on this machine")
@pytest.mark.parametrize("server_host,client_host", [("::1", "::1"), ("::", "127.0.0.1")])
def test_ipv6_and_dual_stack(server_host, client_host):
    srv = splitrpc.Server(server_host, 0, wait="block")
    try:
        register_builtin_services(srv)
        srv.start()
        with splitrpc.Client(client_host, srv.port, timeout=2.0) as c:
            x = np.arange(256, dtype="<f4")
            assert np.array_equal(np.frombuffer(c.call(1, x), "<f4"), x + 1)
            blob = os.urandom(200_000)  # several segments each way
            assert c.call(3, blob) == blob
    finally:
        srv.close()


def test_allow_list_drops_other_sources(make_server, make_client):
    """A server that serves 10.0.0.0/8 only drops loopback datagrams unread and counts them;
    one that allows 127.0.0.0/8 answers."""
    import numpy as np

    from splitrpc.services import register_builtin_services

    x = np.zeros(256, np.float32)
    closed = make_server(register_builtin_services, allow="10.0.0.0/8, fd00::/8")
    with pytest.raises(splitrpc.CallTimeout):
        make_client(closed.port, timeout=0.3).call(1, x)
    st = closed.stats()
    assert st["drops"]["not_allowed"] >= 1 and st["calls"] == 0
    open_ = make_server(register_builtin_services, allow=["10.0.0.0/8", "127.0.0.0/8"])
    assert make_client(open_.port, timeout=2.0).call(1, x) == (x + 1).tobytes()
    assert open_.stats()["drops"]["not_allowed"] == 0


@pytest.mark.parametrize("allow", ["10.0.0.0/33", "example.com", ",".join(["10.0.0.1"] * 33)])
def test_allow_list_refuses_garbage(allow):
    with pytest.raises(ValueError, match="allow"):
        splitrpc.Server("127.0.0.1", 0, allow=allow)


def test_serve_cli_refuses_a_bad_allow_list():
    import subprocess
    import sys
    import tempfile

    r = subprocess.run([sys.executable, "-m", "splitrpc", "serve", "--port", "0", "--allow", "10.0.0.0/40"],
                       capture_output=True, text=True, timeout=30, cwd=tempfile.gettempdir())
    assert r.returncode == 2 and "not an IPv4 or IPv6 network" in r.stderr


def test_queueing_deadline_answers_deadline_without_running(make_server, make_client):
    """max_batch 1, a 60 ms callback and a 20 ms queueing deadline: of 6 calls sent at once,
    those that waited past 20 ms get DEADLINE and never reach the callback."""
    import time

    import numpy as np

    ran = []

    def slow(x, y):
        ran.append(int(x[0, 0]))
        time.sleep(0.06)
        y[...] = x

    srv = make_server(lambda s: s.add_function(slow, 1, "slow", [splitrpc.TensorSpec("x", "float32", (4,))],
                                               [splitrpc.TensorSpec("y", "float32", (4,))], max_batch=1,
                                               deadline=0.02))
    c = make_client(srv.port, timeout=5.0)
    futs = [c.call_async(1, np.full(4, i, np.float32)) for i in range(6)]
    ok, late = [], []
    for i, f in enumerate(futs):
        try:
            f.result()
            ok.append(i)
        except splitrpc.DeadlineExceeded as e:
            assert "deadline" in str(e)
            late.append(i)
    # (the first normally runs; on a starved machine even it may wait past 20 ms)
    assert late and sorted(ok + late) == list(range(6))
    assert sorted(ran) == ok  # the late ones never ran
    st = settled(srv, lambda st: st["errors"]["DEADLINE"] == len(late))
    assert st["errors"]["DEADLINE"] == len(late) and st["functions"]["slow"] == len(ok)
    with pytest.raises(ValueError, match="deadline"):
        splitrpc.Server("127.0.0.1", 0).add_function(slow, 2, "x", [splitrpc.TensorSpec("x", "float32", (4,))],
                                                     [splitrpc.TensorSpec("y", "float32", (4,))], deadline=-1)


def test_features_tell_whether_fault_injection_is_built_in(make_server):
    """The Python package is built without fault injection (testing builds only): features()
    says so, and the native setter agrees."""
    srv = make_server()
    cfg = ffi.new("srpc_faults_cfg_t *", {"drop": 0.5})
    rc = lib.srpc_server_set_faults(srv._srv, cfg, ffi.NULL, 1)
    assert splitrpc.features()["fault_injection"] == (rc != -errno.ENOTSUP)
    assert not splitrpc.features()["fault_injection"]


def test_reply_hold_us_zero_sends_every_batch_alone(make_server, make_client):
    """reply_hold_us=0: no batch's replies wait to go with a later batch's (one send per batch,
    stat tx_sends); a value past the limit (1 s) is refused."""
    with pytest.raises(splitrpc.NativeError):
        splitrpc.Server("127.0.0.1", 0, reply_hold_us=2_000_000)

    def setup(srv):
        @srv.function(60, "one", inputs=[TensorSpec("x", "float32", (4,))], outputs=[TensorSpec("y", "float32", (4,))],
                      max_batch=1)
        def one(x, y):
            np.add(x, 1, out=y)

    srv = make_server(setup, wait="poll", reply_hold_us=0)
    c = make_client(srv.port, timeout=10.0)
    futs = [c.call_async(60, np.full(4, i, dtype="<f4")) for i in range(64)]
    for i, f in enumerate(futs):
        assert f.result(timeout=20) == f32(np.full(4, i + 1)), i
    st = srv.stats()
    assert st["replies"] >= 64 and st["tx_sends"] == st["batches"], st


def test_close_while_calls_are_in_flight_on_other_threads():
    """Client.close() from one thread while others wait in calls (a server that never answers):
    each call ends at once with "client is closed" (srpc_client_shutdown), a future too, later
    calls are refused, and nothing is freed under a waiting thread (the client is freed when it
    is dropped). Before: SIGSEGV, the client freed under the waiters."""
    import threading

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))  # takes requests, never answers
    try:
        c = splitrpc.Client("127.0.0.1", s.getsockname()[1], timeout=30.0)
        outcomes: list = []

        def call(_i):
            try:
                c.call(1, bytes(64))
                outcomes.append("answered")
            except splitrpc.SplitRPCError as e:
                outcomes.append(str(e))
        threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        fut = c.call_async(1, bytes(8))
        time.sleep(0.3)
        t0 = time.monotonic()
        c.close()
        for t in threads:
            t.join(5)
        assert time.monotonic() - t0 < 3 and not any(t.is_alive() for t in threads)
        assert outcomes == ["client is closed"] * 4, outcomes
        with pytest.raises(splitrpc.SplitRPCError, match="client (is )?closed"):
            fut.result(timeout=5)
        with pytest.raises(splitrpc.SplitRPCError, match="client is closed"):
            c.call(1, b"x")
        c.close()  # again: nothing
        del c
    finally:
        s.close()
