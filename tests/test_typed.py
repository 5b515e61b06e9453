"""Functions by name (issue 53, splitrpc/typed.py): the built-in services and the zoo called by name with numpy and PyTorch inputs, outputs against the server-side reference; every mismatch (unknown name, missing or extra input, wrong dtype, wrong shape, not C-ordered) raises its own error before any datagram is sent; batches; raw functions; the asyncio client, the pools and keyed clients; the description's digest, and a server whose functions changed under a client (EMULATED CuPy inputs: tests/test_gpu_emulation_cases.py)."""
import asyncio
import socket

import numpy as np
import pytest
from conftest import register_builtin_services

import splitrpc
from splitrpc import aio, describe as describe_
from splitrpc.errors import (DescriptionChanged, DtypeMismatch, InputError, MissingInput, NoSuchFunction,
                             NotContiguous, ReplyMismatch, ShapeMismatch, UnexpectedInput)

RNG = np.random.default_rng(53)


def vec():
    return RNG.standard_normal(256).astype(np.float32)


def mat():
    return RNG.standard_normal((32, 32)).astype(np.float32)


@pytest.fixture
def served(make_server, make_client):
    srv = make_server(register_builtin_services)
    return srv, make_client(srv.port, timeout=5.0)


def test_builtin_functions_by_name_and_by_attribute(served):
    srv, c = served
    x, a, b = vec(), mat(), mat()
    out = c.function("vecadd")(x)
    assert type(out).__name__ == "vecadd_outputs" and len(out) == 1, out
    assert np.array_equal(out[0], x + 1) and out[0].shape == (256,) and out[0].dtype == np.float32
    assert out[0].flags.writeable and out[0].flags.owndata  # one output: the reply received straight into it
    m = c.fn.matmul(a, b)[0]
    assert np.allclose(m, a @ b, rtol=1e-5, atol=1e-5) and m.shape == (32, 32)
    names = [s.name for s in c.function("matmul").info.inputs]
    assert np.array_equal(c.fn.matmul(**dict(zip(names, (a, b))))[0], m)  # by name
    assert np.array_equal(c.fn.matmul(a, **{names[1]: b})[0], m)  # by position, then by name
    img = RNG.standard_normal((3, 224, 224)).astype(np.float32)
    head = c.fn["head"](img)[0]
    assert np.array_equal(head, img.reshape(-1)[:1000])
    echo = c.fn.echo
    assert echo(b"hello") == b"hello" and echo(np.arange(4, dtype=np.uint8)) == bytes(range(4))  # raw: bytes
    assert "vecadd" in repr(c.function("vecadd")) and "float32[256]" in repr(c.function("vecadd"))


def test_torch_and_array_likes(served):
    torch = pytest.importorskip("torch")
    srv, c = served
    x = vec()
    assert np.array_equal(c.fn.vecadd(torch.from_numpy(x))[0], x + 1)
    t = torch.from_numpy(x).requires_grad_(False)
    assert np.array_equal(c.fn.vecadd(t * 2)[0], 2 * x + 1)
    a, b = mat(), mat()
    assert np.allclose(c.fn.matmul(torch.from_numpy(a), b)[0], a @ b, rtol=1e-5, atol=1e-5)

    class ArrayLike:  # anything with __array__
        def __array__(self, dtype=None, copy=None):
            return x

    assert np.array_equal(c.fn.vecadd(ArrayLike())[0], x + 1)
    # Python numbers have no dtype of their own: they take the spec's where they are of its kind
    assert np.allclose(c.fn.vecadd(x.tolist())[0], x + 1)
    with pytest.raises(DtypeMismatch, match="input 'x'|input"):
        c.fn.vecadd([1 + 2j] * 256)


def test_a_batch_is_n_calls_with_n_outputs(served):
    srv, c = served
    xs = RNG.standard_normal((7, 256)).astype(np.float32)
    fn = c.fn.vecadd  # the description read first
    before = c.stats()["sent_calls"]
    y = fn(xs)[0]
    assert y.shape == (7, 256) and np.array_equal(y, xs + 1)
    assert c.stats()["sent_calls"] - before == 7
    a, b = RNG.standard_normal((3, 32, 32)).astype(np.float32), RNG.standard_normal((3, 32, 32)).astype(np.float32)
    assert np.allclose(c.fn.matmul(a, b)[0], a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(ShapeMismatch, match="a batch of 3"):
        c.fn.matmul(a, b[0])  # one batched, one not


@pytest.mark.parametrize("case,exc,words", [
    ("unknown name", NoSuchFunction, "no function 'nosuch'"),
    ("missing", MissingInput, "was not given"),
    ("too many", UnexpectedInput, "takes 2 inputs"),
    ("extra name", UnexpectedInput, "has no input 'bias'"),
    ("twice", UnexpectedInput, "given twice"),
    ("dtype", DtypeMismatch, "float64"),
    ("dtype cast unsafe", DtypeMismatch, "not without changing values"),
    ("shape", ShapeMismatch, "[32, 31]"),
    ("strided", NotContiguous, "not in C order"),
    ("not an array", DtypeMismatch, "not an array"),
])
def test_every_mismatch_raises_before_anything_is_sent(served, case, exc, words):
    srv, c = served
    a, b = mat(), mat()
    names = [s.name for s in c.function("matmul").info.inputs]
    sent, received = c.stats()["sent_calls"], srv.stats()["rx_datagrams"]
    calls = {
        "unknown name": lambda: c.function("nosuch"),
        "missing": lambda: c.fn.matmul(a),
        "too many": lambda: c.fn.matmul(a, b, a),
        "extra name": lambda: c.fn.matmul(a, b, bias=a),
        "twice": lambda: c.fn.matmul(a, **{names[0]: b}),
        "dtype": lambda: c.fn.matmul(a.astype(np.float64), b),
        "dtype cast unsafe": lambda: c.fn.matmul(a.astype(np.float64), b, cast=True),
        "shape": lambda: c.fn.matmul(a[:, :31].copy(), b),
        "strided": lambda: c.fn.matmul(np.asfortranarray(a), b),
        "not an array": lambda: c.fn.matmul(object(), b),
    }
    with pytest.raises(exc, match=words.replace("[", r"\[").replace("]", r"\]")) as ei:
        calls[case]()
    if isinstance(ei.value, InputError):
        assert ei.value.function == "matmul"
        if case not in ("too many",):
            assert ei.value.input is not None
    assert (c.stats()["sent_calls"], srv.stats()["rx_datagrams"]) == (sent, received)  # nothing was sent


def test_cast_casts_only_where_no_value_changes_and_orders_strided_inputs(served):
    srv, c = served
    x = vec()
    assert np.array_equal(c.fn.vecadd(x.astype(np.float16), cast=True)[0], x.astype(np.float16).astype(np.float32) + 1)
    with pytest.raises(DtypeMismatch, match="cast=True"):
        c.fn.vecadd(x.astype(np.float16))
    big = x.astype(">f4")  # the wire is little-endian: a big-endian array is another dtype, cast where asked
    with pytest.raises(DtypeMismatch):
        c.fn.vecadd(big)
    assert np.array_equal(c.fn.vecadd(big, cast=True)[0], x + 1)
    a, b = mat(), mat()
    assert np.allclose(c.fn.matmul(np.asfortranarray(a), b, cast=True)[0], a @ b, rtol=1e-5, atol=1e-5)


def test_the_zoo_by_name_against_the_server_side_reference(make_server, make_client):
    """Every zoo model by name, with numpy inputs and with PyTorch tensors (one call and a batch of
    two), each reply checked against the zoo's own CPU reference."""
    torch = pytest.importorskip("torch")
    from splitrpc.services.models import registry as zoo

    names = list(zoo.MODELS)
    srv = make_server(lambda s: zoo.register_models(s, names, small=True, max_batch=8))
    c = make_client(srv.port, timeout=60.0)
    rng = np.random.default_rng(7)
    for name in names:
        info = zoo.MODELS[name]
        reqs = [info.example(rng) for _ in range(2)]
        arrays = [zoo.split(info.inputs, r) for r in reqs]
        fn = c.function(name)
        out = fn(*arrays[0])  # numpy
        assert out._fields == tuple(s.name for s in info.outputs)
        for o, s in zip(out, info.outputs):
            assert o.shape == s.shape and o.dtype == s.np_dtype
        assert zoo.check_reply(name, reqs[0], b"".join(o.tobytes() for o in out), small=True), name
        t = fn(*(torch.from_numpy(np.array(a)) for a in arrays[1]))  # torch
        assert zoo.check_reply(name, reqs[1], b"".join(o.tobytes() for o in t), small=True), name
        both = fn(*(torch.from_numpy(np.stack([x, y])) for x, y in zip(*arrays)))  # a torch batch of two
        for i in range(2):
            assert zoo.check_reply(name, reqs[i], b"".join(o[i].tobytes() for o in both), small=True), (name, i)


def test_a_reply_of_the_wrong_size_is_an_error():
    from splitrpc.typed import Signature

    info = describe_.FunctionInfo(5, "two", None, False, inputs=(splitrpc.TensorSpec("x", "float32", (8,)),),
                                  outputs=(splitrpc.TensorSpec("y", "float32", (8,)),
                                           splitrpc.TensorSpec("n", "int16", (3,))))
    sig = Signature(info)
    y, n = sig.read(np.arange(8, dtype=np.float32).tobytes() + np.array([1, 2, 3], "<i2").tobytes())
    assert y.tolist() == list(range(8)) and n.tolist() == [1, 2, 3]
    with pytest.raises(ReplyMismatch, match="replied 28 bytes"):
        sig.read(b"\0" * 28)
    with pytest.raises(ReplyMismatch, match="call 1 of a batch of 2"):
        sig.read_batch([b"\0" * 38, b"\0" * 37])
    odd = Signature(describe_.FunctionInfo(6, "odd", None, False, inputs=(),
                                           outputs=(splitrpc.TensorSpec("a", "uint8", (3,)),
                                                    splitrpc.TensorSpec("b", "float32", (2,)))))
    a, b = odd.read(bytes([1, 2, 3]) + np.array([0.5, 2], "<f4").tobytes())
    assert b.tolist() == [0.5, 2.0] and b.flags.aligned  # at offset 3: copied, not a misaligned view


def test_the_digest_follows_the_functions(make_server, make_client):
    one = make_server(register_builtin_services)
    two = make_server(register_builtin_services)
    d1, d2 = make_client(one.port).describe(), make_client(two.port).describe()
    assert d1.digest and d1.digest == d2.digest and len(d1.digest) == describe_.DIGEST_HEX
    assert make_client(one.port).ping()["digest"] == d1.digest
    three = make_server(lambda s: s.add_function(lambda q, r: [len(x) for x in q], 3, "echo", raw=True,
                                                 max_request=8, max_response=8))
    assert make_client(three.port).describe().digest != d1.digest
    # a server older than Amendment 2 sends none: None, and the reply still reads
    old = b'{"describe":1,"software":"x","max_message":9,"protocols":[2],"functions":[]}'
    assert describe_.decode_description(old).digest is None
    for bad in (b'{"describe":1,"digest":5,"functions":[]}', b'{"describe":1,"digest":"","functions":[]}',
                b'{"describe":1,"digest":"' + b"a" * 65 + b'","functions":[]}'):
        with pytest.raises(describe_.NotDescribed, match="digest"):
            describe_.decode_description(bad)


def _free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_server_whose_functions_changed_is_said_so(_heap_frozen, make_client):
    port = _free_port()
    srv = splitrpc.Server("127.0.0.1", port, wait="block")
    register_builtin_services(srv)
    srv.start()
    c = make_client(port, timeout=2.0)
    fn = c.function("vecadd")
    x = vec()
    assert np.array_equal(fn(x)[0], x + 1)
    srv.close()
    # the same port, another server: vecadd is gone (matmul moved to its id)
    srv = splitrpc.Server("127.0.0.1", port, wait="block")

    def mm(a, b, out):
        np.matmul(a, b, out=out)
    srv.add_function(mm, 21, "matmul", [splitrpc.TensorSpec("a", "float32", (32, 32)),
                                        splitrpc.TensorSpec("b", "float32", (32, 32))],
                     [splitrpc.TensorSpec("c", "float32", (32, 32))])
    srv.start()
    try:
        with pytest.raises(DescriptionChanged, match="'vecadd' is gone") as ei:
            fn(x)
        assert ei.value.function == "vecadd"
        with pytest.raises(NoSuchFunction):
            c.function("vecadd")
        a, b = mat(), mat()
        assert np.allclose(c.fn.matmul(a, b)[0], a @ b, rtol=1e-5, atol=1e-5)  # read again: its new id
        assert c.function("matmul").func_id == 21
    finally:
        srv.close()


def test_asyncio_client_and_pool(served):
    srv, _ = served
    x, xs = vec(), RNG.standard_normal((5, 256)).astype(np.float32)

    async def main():
        async with aio.Client("127.0.0.1", srv.port, timeout=5.0) as c:
            fn = await c.function("vecadd")
            one, batch = await asyncio.gather(fn(x), c.fn.vecadd(xs))
            assert np.array_equal(one[0], x + 1) and np.array_equal(batch[0], xs + 1)
            assert await c.fn.echo(b"abc") == b"abc"
            with pytest.raises(MissingInput):
                await c.fn.matmul(mat())
            with pytest.raises(NoSuchFunction):
                await c.function("nosuch")
        async with aio.Pool([("127.0.0.1", srv.port)], timeout=5.0) as p:
            y = await p.fn.vecadd(x, idempotent=True)
            assert np.array_equal(y[0], x + 1)
            assert np.array_equal((await (await p.function("vecadd"))(xs))[0], xs + 1)
    asyncio.run(main())


def test_blocking_pool(served):
    srv, _ = served
    x = vec()
    with splitrpc.Pool([("127.0.0.1", srv.port)], timeout=5.0) as p:
        assert np.array_equal(p.fn.vecadd(x, idempotent=True)[0], x + 1)
        assert np.array_equal(p.function("vecadd")(np.stack([x, x]))[0], np.stack([x, x]) + 1)
        assert p.describe().digest == splitrpc.Client("127.0.0.1", srv.port).describe().digest


def test_keyed_client_calls_by_name(make_server, make_client):
    pytest.importorskip("nacl")
    from splitrpc import Key, KeyTable
    from splitrpc._native import auth as _auth

    if not _auth.available():
        pytest.skip("no libsodium")
    k_all, k_echo = Key.generate(1), Key.generate(2, functions=["echo"])
    srv = make_server(register_builtin_services, keys=KeyTable([k_all, k_echo]))
    c = make_client(srv.port, key=k_all, timeout=5.0)
    x = vec()
    assert np.array_equal(c.fn.vecadd(x)[0], x + 1)
    e = make_client(srv.port, key=k_echo, timeout=5.0)
    assert e.fn.echo(b"k") == b"k"
    with pytest.raises(NoSuchFunction, match="it has: echo"):  # a key sees only what it may call
        e.function("vecadd")


def test_a_callback_refusing_values_does_not_cost_a_describe_each_time(make_server, make_client):
    """BAD_REQUEST may be the function's own answer (a value it refuses): the description is read
    again at most once a second for it, so refused calls do not each cost a describe."""
    def setup(s):
        def positive(x, y):
            np.copyto(y, x)
            return {i: splitrpc.BadRequest("negative") for i in range(len(x)) if x[i, 0] < 0}
        s.add_function(positive, 5, "positive", [splitrpc.TensorSpec("x", "float32", (4,))],
                       [splitrpc.TensorSpec("y", "float32", (4,))])
    srv = make_server(setup)
    c = make_client(srv.port, timeout=5.0)
    fn = c.function("positive")
    before = c.stats()["sent_calls"]
    for _ in range(5):
        with pytest.raises(splitrpc.BadRequest, match="negative"):
            fn(-np.ones(4, np.float32))
    assert c.stats()["sent_calls"] - before == 5 + 1  # five calls, one describe
    assert fn(np.ones(4, np.float32)).y.tolist() == [1.0] * 4


def test_every_stale_function_is_said_so_and_a_reply_of_another_size_too(_heap_frozen, make_client):
    """Each function made before the server changed says so on each call (not once per client),
    and a function whose outputs changed under the same id (a reply of another size) too."""
    port = _free_port()

    def serve(setup):
        s = splitrpc.Server("127.0.0.1", port, wait="block")
        setup(s)
        s.start()
        return s
    srv = serve(register_builtin_services)
    c = make_client(port, timeout=2.0)
    va, mm = c.function("vecadd"), c.function("matmul")
    x, a = vec(), mat()
    assert np.array_equal(va(x).y, x + 1)
    srv.close()

    def mm7(a, b, out):
        np.matmul(a, b, out=out)

    def half(x, y):
        np.copyto(y, x[:, :128])

    def other(s):
        s.add_function(mm7, 7, "matmul",
                       [splitrpc.TensorSpec("a", "float32", (32, 32)), splitrpc.TensorSpec("b", "float32", (32, 32))],
                       [splitrpc.TensorSpec("c", "float32", (32, 32))])
        s.add_function(half, 1, "vecadd", [splitrpc.TensorSpec("x", "float32", (256,))],
                       [splitrpc.TensorSpec("y", "float32", (128,))])  # the same id and input, half the output
    srv = serve(other)
    try:
        for _ in range(2):
            with pytest.raises(DescriptionChanged, match="'matmul' is now id 7"):
                mm(a, a)
        with pytest.raises(DescriptionChanged, match=r"'vecadd' is now id 1: \(x: float32\[256\]\) -> \(y: float32\[128\]\)"):
            va(x)  # the server runs it: its reply is 512 bytes, not 1024
        assert c.fn.vecadd(x).y.shape == (128,) and np.allclose(c.fn.matmul(a, a).c, a @ a, rtol=1e-5, atol=1e-5)
    finally:
        srv.close()


def test_python_numbers_take_the_spec_only_where_no_value_changes():
    from splitrpc.typed import Signature

    def sig(dtype):
        return Signature(describe_.FunctionInfo(9, "f", None, False, inputs=(splitrpc.TensorSpec("v", dtype, (3,)),),
                                                outputs=(splitrpc.TensorSpec("w", dtype, (3,)),)))
    arrays, _ = sig("uint8").check([[1, 2, 3]], {})
    assert arrays[0].dtype == np.uint8 and arrays[0].tolist() == [1, 2, 3]
    for dtype, vals in (("int8", [300, -200, 1]), ("int32", [2 ** 40, 1, 2]), ("uint8", [-1, 2, 3]),
                        ("float32", [1e300, 1.0, 2.0]), ("int64", [1.5, 2.0, 3.0])):
        with pytest.raises(DtypeMismatch, match="input 'v'"):
            sig(dtype).check([vals], {})
    arrays, _ = sig("float32").check([[0.1, 2, 3]], {})  # rounding is not a change of kind: taken
    assert arrays[0].dtype == np.float32
    for bad in ("hello", b"abc", {"a": 1}):
        with pytest.raises(DtypeMismatch, match="not an array"):
            sig("float32").check([bad], {})


def test_odd_names_and_hostile_descriptions():
    from splitrpc.typed import Signature

    f32 = "float32"
    odd = Signature(describe_.FunctionInfo(9, "f", None, False, inputs=(splitrpc.TensorSpec("self", f32, (2,)),),
                                           outputs=(splitrpc.TensorSpec("a", f32, (1,)), splitrpc.TensorSpec("a", f32, (1,)),
                                                    splitrpc.TensorSpec("count", f32, (1,)),
                                                    splitrpc.TensorSpec("a b", f32, (1,)))))
    assert odd.Outputs._fields == ("a", "out1", "out2", "out3")
    big = Signature(describe_.FunctionInfo(9, "g", None, False, inputs=(), outputs=(splitrpc.TensorSpec("y", f32, (2 ** 40,)),)))
    with pytest.raises(ReplyMismatch):  # checked before anything is allocated (8 TiB)
        big.read_batch([b"\0" * 8, b"\0" * 8])
    tensor = '{"describe":1,"functions":[{"id":%s,"name":%s,"kind":"tensor","inputs":[{"name":"x","dtype":"%s","shape":%s}],"outputs":[]}]}'
    for args in (("1", '"f"', "<U0", "[1]"), ("1", '"f"', "<f4", "[" + ",".join(["1"] * 65) + "]"),
                 ("70000", '"f"', "<f4", "[1]"), ("-1", '"f"', "<f4", "[1]"), ("1.7", '"f"', "<f4", "[1]"),
                 ("true", '"f"', "<f4", "[1]"), ("1", '"f"', "<f4", '"12"'), ("1", "7", "<f4", "[1]"),
                 ("1", '"f"', ">f4", "[1]"), ("1", '"f"', "|V8", "[1]"), ("1", '"f"', "<f4", "[2.0]")):
        with pytest.raises(describe_.NotDescribed):
            describe_.decode_description((tensor % args).encode())
    ok = describe_.decode_description((tensor % ("1", '"f"', "<f4", "[2]")).encode())
    assert ok.functions[0].inputs[0].shape == (2,)


def test_an_input_named_self_and_names_that_are_not_there(make_server, make_client):
    def setup(s):
        s.add_function(lambda x, y: np.copyto(y, x), 5, "selfish", [splitrpc.TensorSpec("self", "float32", (2,))],
                       [splitrpc.TensorSpec("y", "float32", (2,))])
        for fid in (6, 7):  # one name twice: ambiguous, never the first one silently
            s.add_function(lambda x, y: np.copyto(y, x), fid, "twice", [splitrpc.TensorSpec("x", "float32", (2,))],
                           [splitrpc.TensorSpec("y", "float32", (2,))])
    srv = make_server(setup)
    c = make_client(srv.port, timeout=5.0)
    assert c.fn.selfish(self=np.ones(2, np.float32)).y.tolist() == [1.0, 1.0]
    with pytest.raises(NoSuchFunction, match="2 functions named 'twice'"):
        c.function("twice")
    with pytest.raises(NoSuchFunction):
        c.fn.nope
    with pytest.raises(AttributeError):  # getattr and hasattr work as for any attribute
        c.fn.nope
    assert not hasattr(c.fn, "nope")


def _by_hand(describe_reply: bytes, answers: list):
    """A version-1 server written by hand on loopback: DESCRIBE gets describe_reply; each other
    call the next of answers, (type, aux, data) as one message in 1400-byte segments."""
    import threading

    from foreign_client import DESCRIBE, ERROR, RESPONSE, HDR, pack

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(0.2)
    stop = threading.Event()

    def reply(peer, typ, fid, rid, aux, data):
        n = max(1, -(-len(data) // 1400))
        for i in range(n):
            s.sendto(pack(1, typ, fid, rid, i, n, len(data), aux) + data[i * 1400:(i + 1) * 1400], peer)

    def loop():
        while not stop.is_set():
            try:
                d, peer = s.recvfrom(65535)
            except socket.timeout:
                continue
            _, vt, fid, rid, seq, nseg, mlen, aux = HDR.unpack_from(d)
            if seq != 0:
                continue
            if fid == DESCRIBE:
                reply(peer, RESPONSE, fid, rid, 0, describe_reply)
            elif answers:
                typ, code, data = answers.pop(0)
                reply(peer, {"reply": RESPONSE, "error": ERROR}[typ], fid, rid, code, data)
    t = threading.Thread(target=loop, daemon=True)
    t.start()

    def close():
        stop.set()
        t.join()
        s.close()
    return s.getsockname()[1], close


def test_a_reply_read_straight_into_its_array_is_checked(make_server, make_client):
    """A blocking Client's call of a function with one output receives the reply straight into
    the output's array: a reply longer or shorter than it is ReplyMismatch, an ERROR's text
    (in the array's memory) is read out, up to the protocol's 256 bytes."""
    srv = make_server(register_builtin_services)
    real = make_client(srv.port, timeout=5.0)
    desc = real.call(describe_.DESCRIBE_ID, describe_.DESCRIBE_REQUEST)  # the built-in services' description, served by hand below
    answers: list = []
    port, close = _by_hand(desc, answers)
    try:
        c = make_client(port, timeout=2.0, protocol=1, retries=0)
        fn, x = c.function("vecadd"), vec()
        assert fn._b.into is not None  # the path under test
        answers.append(("reply", 0, (x + 1).tobytes()))
        y = fn(x).y
        assert np.array_equal(y, x + 1) and y.flags.writeable and y.flags.owndata  # its own array
        for size in (1028, 1020, 4096):
            answers.append(("reply", 0, bytes(size)))
            with pytest.raises(ReplyMismatch, match=f"replied {size} bytes"):
                fn(x)
        answers.append(("error", 2, b"x must be finite"))
        with pytest.raises(splitrpc.BadRequest, match="x must be finite"):
            fn(x)
        answers.append(("error", 5, b"E" * 1500))  # longer than the protocol allows: its first 256 bytes
        with pytest.raises(splitrpc.InternalError) as ei:
            fn(x)
        assert str(ei.value).endswith(": " + "E" * 256), str(ei.value)
        answers.append(("reply", 0, (x * 2).tobytes()))
        assert np.array_equal(fn(x).y, x * 2)  # the client goes on
    finally:
        close()


class _FakeClient:
    """What a Function needs of a blocking Client, for what is decided before any call."""
    _into_min, max_reply = 512, 1 << 20

    def _call_into(self, func_id, a, out):
        out[...] = 7
        return out.nbytes

    def call(self, func_id, data=b"", timeout=None):
        raise AssertionError("not on this path")

    call_async = call


def _function(outputs, inputs=(splitrpc.TensorSpec("x", "float32", (4,)),), name="f"):
    from splitrpc.typed import Function, Signature

    return Function(None, _FakeClient(), Signature(describe_.FunctionInfo(9, name, None, False, inputs=inputs,
                                                                          outputs=outputs)))


def test_the_into_path_only_for_an_output_a_reply_can_be():
    """The output's array is allocated before anything is sent, from the server's word: only
    from the client's _into_min bytes (an error's whole text fits) to its max_reply."""
    assert _function((splitrpc.TensorSpec("y", "float32", (256,)),))._b.into is not None  # 1 KiB
    assert _function((splitrpc.TensorSpec("y", "float32", (64,)),))._b.into is None  # 256 B: under 512
    for shape in ((1 << 40,), (1 << 62, 1 << 62)):  # 1 TiB, 2**124 B: the bytes path, which sends and checks
        assert _function((splitrpc.TensorSpec("y", "uint8", shape),))._b.into is None
    fn = _function((splitrpc.TensorSpec("y", "float32", (256,)),))
    assert fn(np.zeros(4, np.float32)).y.tolist() == [7.0] * 256


def test_a_function_is_no_method_copies_as_itself_and_shows_its_inputs():
    """Function is a functools.partial: kept as a class attribute it is not bound to the
    instance (Python 3.13 warns a partial will be; 3.14 binds it), copy.copy gives it back, and
    inspect.signature shows its inputs and options, not the closure's parameters."""
    import copy
    import inspect

    fn = _function((splitrpc.TensorSpec("y", "float32", (256,)),),
                   inputs=(splitrpc.TensorSpec("image", "float32", (2,)), splitrpc.TensorSpec("self", "int8", (1,))))

    class Model:
        infer = fn
    assert Model().infer is fn and Model.infer is fn
    assert copy.copy(fn) is fn and copy.deepcopy(fn) is fn
    assert str(inspect.signature(fn)) == "(image, self, *, timeout=None, cast=False, deadline=None, idempotent=None)"
    odd = _function((splitrpc.TensorSpec("y", "float32", (256,)),), inputs=(splitrpc.TensorSpec("in.1", "float32", (2,)),))
    assert str(inspect.signature(odd)) == "(*inputs, **options)"


def test_an_error_text_longer_than_the_reply_buffer_is_cut_not_lost():
    """srpc_client_call cuts an error's text to the buffer (the code is the outcome): the
    client's own texts reach SRPC_CLIENT_MSG_MAX (an unreachable server with a long host name)."""
    from splitrpc._native import client as _client

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens: the kernel answers "port unreachable"
    host = "0" * 300 + "177.0.0.1"  # 127.0.0.1, spelled long: the text is ~380 bytes
    c = splitrpc.Client(host, port, timeout=2.0, retries=0)
    try:
        out = np.empty(256, np.uint8)
        with pytest.raises(splitrpc.Unavailable) as ei:
            _client.call_into(c._cl, c._buffers(), 1, np.zeros(4, np.uint8), 4, out, 256, 2.0)
        assert len(str(ei.value).encode()) == 256 and str(ei.value).startswith("the server 000"), str(ei.value)
        with pytest.raises(splitrpc.Unavailable, match=r"is unreachable \("):  # the whole text where it fits
            c.call(1, b"abcd")
    finally:
        c.close()
