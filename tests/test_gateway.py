"""test_gateway.py: `splitrpc gateway` in front of a splitrpc server, driven by tritonclient (HTTP and gRPC, from the registry, unchanged): health, readiness, metadata, infer (binary and JSON tensors, a batch dimension, two inputs), and malformed requests (wrong shape, wrong datatype, unknown model, truncated binary data, not JSON) answered with the protocol's error while the function is never called; /metrics on the HTTP port."""
import json
import socket
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

pytest.importorskip("tritonclient.http")
pytest.importorskip("tritonclient.grpc")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import tritonclient.grpc as tgrpc  # noqa: E402
import tritonclient.http as thttp  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from splitrpc.bench.helpers.procs import Proc, free_port  # noqa: E402
from splitrpc.services import register_builtin_services  # noqa: E402


@pytest.fixture(scope="module")
def stack(request):
    """A splitrpc server with the built-in services and a gateway process in front of it."""
    import splitrpc

    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    register_builtin_services(srv)
    srv.start()
    http_port, grpc_port = free_port(socket.SOCK_STREAM), free_port(socket.SOCK_STREAM)
    gw = Proc([sys.executable, "-m", "splitrpc", "gateway", "--replicas", f"127.0.0.1:{srv.port}",
               "--http-port", str(http_port), "--grpc-port", str(grpc_port)])
    try:
        line = gw.wait_line("splitrpc gateway:", 60.0)
        assert "vecadd" in line and "matmul" in line and "echo" not in line  # raw functions are no models
        yield srv, f"127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}"
    finally:
        gw.stop()
        srv.close()


def _calls(srv, name: str) -> int:
    return srv.stats()["functions"][name]


def test_http_health_metadata_and_infer(stack):
    srv, http, _ = stack
    c = thttp.InferenceServerClient(http)
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready("vecadd")
    assert c.get_server_metadata()["name"] == "splitrpc-gateway"
    md = c.get_model_metadata("vecadd")
    assert md["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 256]}]
    assert md["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1, 256]}]
    rng = np.random.default_rng(1)
    for shape, binary in (((256,), True), ((8, 256), True), ((3, 256), False)):
        x = rng.standard_normal(shape).astype(np.float32)
        inp = thttp.InferInput("x", list(shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=binary)
        out = [thttp.InferRequestedOutput("y", binary_data=binary)]
        r = c.infer("vecadd", [inp], outputs=out, request_id="r1")
        assert np.array_equal(r.as_numpy("y"), x + np.float32(1)) and r.get_response()["id"] == "r1"
    a, b = rng.standard_normal((2, 32, 32)).astype(np.float32)
    ia, ib = thttp.InferInput("a", [32, 32], "FP32"), thttp.InferInput("b", [32, 32], "FP32")
    ia.set_data_from_numpy(a)
    ib.set_data_from_numpy(b)
    got = c.infer("matmul", [ia, ib]).as_numpy("c")  # no outputs named: all of them, binary
    assert np.allclose(got, a @ b, rtol=1e-5, atol=1e-5)


def test_http_malformed_requests_get_the_protocols_error_and_make_no_call(stack):
    srv, http, _ = stack
    c = thttp.InferenceServerClient(http)
    before = _calls(srv, "vecadd")
    bad_shape = thttp.InferInput("x", [255], "FP32")
    bad_shape.set_data_from_numpy(np.zeros(255, np.float32))
    bad_type = thttp.InferInput("x", [256], "FP64")
    bad_type.set_data_from_numpy(np.zeros(256, np.float64))
    wrong_name = thttp.InferInput("z", [256], "FP32")
    wrong_name.set_data_from_numpy(np.zeros(256, np.float32))
    for model, inp, msg in (("vecadd", bad_shape, "shape"), ("vecadd", bad_type, "datatype"),
                            ("vecadd", wrong_name, "missing"), ("nosuch", bad_shape, "no model")):
        with pytest.raises(InferenceServerException, match=msg) as e:
            c.infer(model, [inp])
        assert e.value.status() in ("400", "404")

    def post(body: bytes, headers: dict) -> tuple[int, dict]:
        req = urllib.request.Request(f"http://{http}/v2/models/vecadd/infer", data=body, headers=headers,
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    head = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [256],
                                   "parameters": {"binary_data_size": 1024}}]}).encode()
    status, doc = post(head + bytes(1000), {"Inference-Header-Content-Length": str(len(head))})
    assert status == 400 and "truncated" in doc["error"]
    status, doc = post(b"{not json", {})
    assert status == 400 and "not JSON" in doc["error"]
    status, doc = post(head + bytes(1024), {"Inference-Header-Content-Length": "99999"})
    assert status == 400
    good = {"name": "x", "datatype": "FP32", "shape": [256], "data": [0.0] * 256}
    for bad, why in (({"inputs": [good], "outputs": [{"name": "nope"}]}, "outputs"),  # checked before the call
                     ({"inputs": [good], "parameters": [1]}, "parameters"),
                     ({"inputs": [good], "parameters": {"timeout": float("inf")}}, "timeout"),
                     ({"inputs": [{**good, "datatype": "INT8", "data": [300] * 256}]}, "outside -128"),
                     ({"inputs": [{**good, "datatype": ["FP32"]}]}, "not served"),
                     ({"inputs": [{**good, "shape": [0, 10**30], "data": []}]}, "shape")):
        status, doc = post(json.dumps(bad).encode(), {})
        assert status == 400 and why in doc["error"], (bad, status, doc)
    assert _calls(srv, "vecadd") == before  # none of them reached the function
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as r:
        text = r.read().decode()
    assert 'splitrpc_gateway_requests_total{model="vecadd",protocol="http",status="400"}' in text


def test_grpc_health_metadata_infer_and_errors(stack):
    srv, _, grpc_addr = stack
    c = tgrpc.InferenceServerClient(grpc_addr)
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready("vecadd")
    md = c.get_model_metadata("matmul", as_json=True)
    assert [t["name"] for t in md["inputs"]] == ["a", "b"] and md["outputs"][0]["shape"] == ["-1", "32", "32"]
    x = np.random.default_rng(2).standard_normal((4, 256)).astype(np.float32)
    inp = tgrpc.InferInput("x", [4, 256], "FP32")
    inp.set_data_from_numpy(x)
    r = c.infer("vecadd", [inp], outputs=[tgrpc.InferRequestedOutput("y")])
    assert np.array_equal(r.as_numpy("y"), x + np.float32(1))
    before = _calls(srv, "vecadd")
    bad = tgrpc.InferInput("x", [4, 255], "FP32")
    bad.set_data_from_numpy(np.zeros((4, 255), np.float32))
    with pytest.raises(InferenceServerException, match="shape") as e:
        c.infer("vecadd", [bad])
    assert "INVALID_ARGUMENT" in str(e.value.status())
    with pytest.raises(InferenceServerException) as e:
        c.infer("nosuch", [inp])
    assert "NOT_FOUND" in str(e.value.status())
    assert _calls(srv, "vecadd") == before


def test_gateway_with_a_key_in_front_of_a_server_with_keys(tmp_path):
    """A server that takes only authenticated calls: the gateway started with --key describes it
    and infers through it; the server saw only signed datagrams (none dropped)."""
    import splitrpc
    from splitrpc import auth

    if not auth._auth.available():
        pytest.skip("libsodium's shared library is not installed")
    k = auth.Key.generate(7)
    auth.save_client_key(k, tmp_path / "gw.json")
    srv = splitrpc.Server("127.0.0.1", 0, wait="block", keys=auth.KeyTable([k]))
    register_builtin_services(srv)
    srv.start()
    http_port = free_port(socket.SOCK_STREAM)
    gw = Proc([sys.executable, "-m", "splitrpc", "gateway", "--replicas", f"127.0.0.1:{srv.port}",
               "--http-port", str(http_port), "--grpc-port", "-1", "--key", str(tmp_path / "gw.json")])
    try:
        assert "vecadd" in gw.wait_line("splitrpc gateway:", 60.0)
        c = thttp.InferenceServerClient(f"127.0.0.1:{http_port}")
        x = np.arange(256, dtype=np.float32)
        inp = thttp.InferInput("x", [256], "FP32")
        inp.set_data_from_numpy(x)
        assert np.array_equal(c.infer("vecadd", [inp]).as_numpy("y"), x + 1)
        st = srv.stats()
        assert st["auth"]["ok"] >= 2 and not any(v for n, v in st["drops"].items() if n.startswith("auth_"))
    finally:
        gw.stop()
        srv.close()
