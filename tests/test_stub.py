"""`splitrpc stub` (issue 53): a typed module written from a live server's describe or from a server module without starting it; the stub for the built-in services and the zoo passes `mypy --strict` (and mypy finds a wrong use of it); its methods call the server; a server whose description changed is said so on first use."""
import importlib.util
import subprocess
import sys
import textwrap
from importlib import util

import numpy as np
import pytest
from conftest import register_builtin_services, splitrpc_cmd

import splitrpc
from splitrpc.stubs import StubOutOfDate

SETUP = """
from splitrpc.services import register_builtin_services
from splitrpc.services.models import registry


def setup(srv):
    register_builtin_services(srv)
    registry.register_models(srv, "all", small=True)
"""

HOSTILE = r'''
import numpy as np

import splitrpc

F = "float32"
Q3 = '"' * 3


def _copy(x, y):
    np.copyto(y, x)


def setup(srv):
    spec = splitrpc.TensorSpec
    for fid, name, ins, outs in (
        (1, "x" + Q3 + ';open("PWNED", "w").write("ran");' + Q3, ["x"], ["y"]),  # a docstring breaker
        (2, "back\\N{x}", ["x"], ["y"]), (3, "x\u00b2", ["x"], ["y"]), (4, "\ufb01x", ["\ufb01"], ["count"]),
        (5, "fix", ["fi"], ["index"]), (6, "ArrayIn", ["self"], ["y"]), (7, "float", ["timeout"], ["_z"]),
        (8, "class", ["def"], ["y"]), (9, "Service", ["x"], ["y"]), (10, "FloatOutputs", ["x"], ["y"]),
    ):
        srv.add_function(_copy, fid, name, [spec(n, F, (2,)) for n in ins], [spec(n, F, (2,)) for n in outs])
'''

USE = """
import numpy as np
import numpy.typing as npt

import splitrpc
from zoo_stub import BertLikeOutputs, Service


def logits(svc: Service, img: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    return svc.lenet(img).logits


def span(svc: Service, ids: npt.NDArray[np.int64]) -> BertLikeOutputs:
    return svc.bert_like(ids, ids, np.array([3]), timeout=1.0)


def main() -> None:
    with splitrpc.Client("127.0.0.1", 1) as c:
        svc = Service(c)
        y: npt.NDArray[np.float32] = svc.vecadd(np.zeros(256, np.float32)).y
        b: bytes = svc.echo(b"x")
        r: npt.NDArray[np.float32] = svc.resnet50(np.zeros((2, 3, 224, 224), np.float32)).logits
        print(y, b, r)
"""


def stub(*args, cwd):
    return subprocess.run(splitrpc_cmd("stub", *args), capture_output=True, text=True, timeout=300, cwd=cwd)


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_zoo_and_builtins_stub_passes_mypy_strict(tmp_path):
    pytest.importorskip("torch")
    if util.find_spec("mypy") is None:
        pytest.fail("mypy is missing: pip install '.[test]'")
    (tmp_path / "zoo_service.py").write_text(SETUP)
    r = stub("zoo_service:setup", "--module", "zoo_stub", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "wrote zoo_stub.py: 9 functions" in r.stdout, r.stdout
    text = (tmp_path / "zoo_stub.py").read_text()
    assert "def bert_like(self, input_ids: ArrayIn, segment_ids: ArrayIn, valid_length: ArrayIn" in text
    assert "logits: npt.NDArray[np.float32]  # logits: float32[1000]" in text and "best_span: npt.NDArray[np.int64]" in text
    (tmp_path / "use.py").write_text(USE)
    # names a server chose to break the module (a docstring's quotes, escapes, Unicode folding to
    # another name, a tuple's own field names, names of types and keywords): it imports without
    # running anything of theirs, keeps every function, and passes mypy too
    (tmp_path / "hostile_service.py").write_text(HOSTILE)
    r = stub("hostile_service:setup", "--module", "hostile_stub", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    hostile = load(tmp_path / "hostile_stub.py", "hostile_stub")
    assert not (tmp_path / "PWNED").exists()
    assert len(hostile.Service.functions) == 10 and len({m for m in vars(hostile.Service) if not m.startswith("_")}
                                                        - {"digest", "functions"}) == 10

    def mypy():
        return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir",
                               str(tmp_path / ".mypy"), "zoo_stub.py", "hostile_stub.py", "use.py"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=600)
    m = mypy()
    assert m.returncode == 0, m.stdout[-4000:] + m.stderr[-2000:]
    (tmp_path / "use.py").write_text(USE + "\n\ndef wrong(svc: Service) -> int:\n    return svc.lstm(np.zeros((8, 256))).hidden\n")
    m = mypy()
    assert m.returncode == 1 and "use.py:" in m.stdout and "Incompatible return value type" in m.stdout, m.stdout[-3000:]


def test_a_stub_from_a_live_server_calls_it_and_finds_a_changed_one(tmp_path, make_server, make_client):
    srv = make_server(register_builtin_services)
    out = tmp_path / "live_stub.py"
    r = stub(f"127.0.0.1:{srv.port}", "--out", str(out), "--class", "Builtins", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    mod = load(out, "live_stub")
    c = make_client(srv.port, timeout=5.0)
    svc = mod.Builtins(c)
    x = np.arange(256, dtype=np.float32)
    y = svc.vecadd(x)
    assert isinstance(y, mod.VecaddOutputs) and np.array_equal(y.y, x + 1)
    assert np.array_equal(svc.vecadd(np.stack([x, x])).y, np.stack([x, x]) + 1)  # a batch
    assert svc.echo(b"abc") == b"abc"
    assert mod.DIGEST == c.describe().digest

    def fewer(s):  # another version of the service: head gone, a new function
        register_builtin_services(s)
        s.add_function(lambda q, r: [len(x) for x in q], 9, "extra", raw=True, max_request=8, max_response=8)
    other = make_server(fewer)
    with pytest.raises(StubOutOfDate, match="new: extra") as ei:
        mod.Builtins(make_client(other.port, timeout=5.0)).vecadd(x)
    assert "splitrpc stub" in str(ei.value)
    lax = mod.Builtins(make_client(other.port, timeout=5.0), check=False)  # what still matches may be called
    assert np.array_equal(lax.vecadd(x).y, x + 1)
    with splitrpc.Pool([("127.0.0.1", srv.port)], timeout=5.0) as p:  # a pool serves as the stub's client too
        assert np.array_equal(mod.Builtins(p).vecadd(x).y, x + 1)


@pytest.mark.parametrize("args,rc,words", [
    (["127.0.0.1:1", "--timeout", "0.3"], 1, "Unavailable"),
    (["no_such_module_here:setup"], 1, "no module named"),
    (["x:1", "--class", "not-a-name"], 2, "identifiers"),
])
def test_bad_sources_and_names_say_why(tmp_path, args, rc, words):
    r = stub(*args, cwd=tmp_path)
    assert r.returncode == rc and words in r.stderr, (r.returncode, r.stderr)
    assert not list(tmp_path.glob("*.py"))


def test_a_stub_keeps_the_servers_digest_and_names_a_function_gone_since():
    """Amendment 2: a client compares digests and never computes one. A stub written from a server
    whose digest is its own (another implementation's) passes its check there; with check=False, a
    function gone since raises DescriptionChanged, not NoSuchFunction."""
    from splitrpc import describe as describe_
    from splitrpc import stubgen
    from splitrpc.errors import DescriptionChanged

    f32 = splitrpc.TensorSpec("x", "float32", (2,))
    fns = [describe_.FunctionInfo(1, "f", None, False, inputs=(f32,), outputs=(f32,))]
    text = stubgen.render(fns, source="elsewhere:1", software="other 1.0", digest="v1-foreign-digest")
    ns: dict = {}
    exec(compile(text, "foreign_stub.py", "exec"), ns)  # noqa: S102 - our own generated module
    assert ns["DIGEST"] == "v1-foreign-digest"

    class Foreign:  # a client of a server that is not splitrpc's: its own digest
        def __init__(self, functions, digest):
            self.d = describe_.Description(tuple(functions), 1 << 16, (2,), "other 1.0", digest=digest)

        def describe(self):
            return self.d

        def function(self, name):
            from splitrpc import typed
            return typed.directory_of(self).function(name, self)

    ns["Service"](Foreign(fns, "v1-foreign-digest")).check()  # the same description: no complaint
    with pytest.raises(StubOutOfDate):
        ns["Service"](Foreign(fns, "v2-foreign-digest")).check()
    lax = ns["Service"](Foreign([], "v2-foreign-digest"), check=False)
    with pytest.raises(DescriptionChanged, match="'f' is gone"):
        lax.f(np.zeros(2, np.float32))
