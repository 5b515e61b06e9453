"""http.py: the gateway's HTTP/REST face, an ASGI app (Starlette) of the Open Inference Protocol v2: health, server and model metadata, model readiness, infer with JSON tensors or the binary tensor data extension, and /metrics (Prometheus) on the same port."""
from __future__ import annotations

import contextlib
import json
import time
from typing import Any, AsyncIterator

import numpy as np
from numpy.typing import NDArray
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from splitrpc.gateway.models import DATATYPES, Gateway, InvalidInput, error_text, status_of, tensor_from

HEADER_LENGTH = "Inference-Header-Content-Length"  # the binary tensor data extension's header
MAX_BODY = 256 << 20  # bytes of one request's body (binary tensor data included)
MAX_JSON = 16 << 20   # bytes of its JSON (a JSON number list costs tens of bytes per value once parsed)


def _error(e: BaseException) -> Response:
    status, _, retry = status_of(e)
    return JSONResponse({"error": error_text(e)}, status_code=status,
                        headers={"Retry-After": str(retry)} if retry else None)


def _parse(body: bytes, header_length: str | None) -> tuple[dict[str, Any], memoryview]:
    """The request's JSON and the binary data after it (the extension). InvalidInput when malformed."""
    if header_length is not None:
        try:
            n = int(header_length)
        except ValueError:
            raise InvalidInput(f"{HEADER_LENGTH} is not a number: {header_length!r}") from None
        if not 0 < n <= len(body):
            raise InvalidInput(f"{HEADER_LENGTH} {n} outside the body's {len(body)} bytes")
    else:
        n = len(body)
    if n > MAX_JSON:
        raise InvalidInput(f"a JSON request of {n} bytes, over {MAX_JSON}: send large tensors as binary data")
    try:
        doc = json.loads(bytes(body[:n]))
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidInput(f"the request is not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list):
        raise InvalidInput("an inference request is a JSON object with an 'inputs' list")
    if not isinstance(doc.get("parameters", {}), dict):
        raise InvalidInput("'parameters' is a JSON object")
    return doc, memoryview(body)[n:]


def _requested(doc: dict[str, Any], names: list[str]) -> list[tuple[str, bool]]:
    """The outputs to send, each with whether as binary data (default: all, as binary_data_output
    says). InvalidInput for an unknown name or a malformed entry: before any call."""
    default_binary = bool(doc.get("parameters", {}).get("binary_data_output", False))
    wanted = doc.get("outputs")
    if wanted is None:
        return [(n, default_binary) for n in names]
    out = []
    for w in wanted if isinstance(wanted, list) else [None]:
        if not isinstance(w, dict) or w.get("name") not in names or not isinstance(w.get("parameters", {}), dict):
            raise InvalidInput(f"requested outputs are objects naming the model's outputs {names}")
        out.append((w["name"], bool(w.get("parameters", {}).get("binary_data", default_binary))))
    return out


async def _body(req: Request) -> bytes:
    """The request's body, refused past MAX_BODY before it is all in memory."""
    declared = req.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise InvalidInput(f"a request body of {declared} bytes, over {MAX_BODY}")
    chunks, size = [], 0
    async for chunk in req.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise InvalidInput(f"a request body over {MAX_BODY} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _inputs(doc: dict[str, Any], binary: memoryview) -> dict[str, NDArray[Any]]:
    """The input tensors, JSON data or binary (binary_data_size bytes each, in order)."""
    tensors: dict[str, NDArray[Any]] = {}
    off = 0
    for t in doc["inputs"]:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise InvalidInput("each input is an object with a 'name'")
        params = t.get("parameters") or {}
        size = params.get("binary_data_size") if isinstance(params, dict) else None
        raw = None
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise InvalidInput(f"input {t['name']!r}: binary_data_size must be a non-negative integer")
            if off + size > len(binary):
                raise InvalidInput(f"input {t['name']!r}: binary data truncated ({len(binary) - off} bytes left of "
                                   f"{size})")
            raw, off = binary[off:off + size], off + size
        if t["name"] in tensors:
            raise InvalidInput(f"input {t['name']!r} given twice")
        tensors[t["name"]] = tensor_from(t["name"], t.get("datatype", ""), t.get("shape", []), t.get("data"), raw)
    if off != len(binary):
        raise InvalidInput(f"{len(binary) - off} bytes of binary data that no input claims")
    return tensors


def _reply(doc: dict[str, Any], model: Any, outputs: dict[str, NDArray[Any]],
           wanted: list[tuple[str, bool]]) -> Response:
    """The inference response: each requested output, as JSON data or binary."""
    out, blobs = [], []
    for name, binary in wanted:
        arr = outputs[name]
        entry: dict[str, Any] = {"name": name, "datatype": DATATYPES[arr.dtype.str], "shape": list(arr.shape)}
        if binary:
            data = np.ascontiguousarray(arr).tobytes()
            entry["parameters"] = {"binary_data_size": len(data)}
            blobs.append(data)
        else:
            entry["data"] = arr.ravel().tolist()
        out.append(entry)
    body: dict[str, Any] = {"model_name": model.name, "model_version": model.version, "outputs": out}
    if "id" in doc:
        body["id"] = doc["id"]
    head = json.dumps(body).encode()
    if not blobs:
        return Response(head, media_type="application/json")
    return Response(b"".join([head, *blobs]), media_type="application/octet-stream",
                    headers={HEADER_LENGTH: str(len(head))})


def make_app(gw: Gateway) -> Starlette:
    """The ASGI app; its lifespan starts and stops the gateway (in the server's event loop)."""
    async def live(_: Request) -> Response:
        return Response(status_code=200)

    async def ready(_: Request) -> Response:
        return Response(status_code=200 if gw.ready() else 503)

    async def server_metadata(_: Request) -> Response:
        return JSONResponse(gw.server_metadata())

    async def model_metadata(req: Request) -> Response:
        try:
            return JSONResponse(gw.model(req.path_params["name"], req.path_params.get("version")).metadata())
        except InvalidInput as e:
            return _error(e)

    async def model_ready(req: Request) -> Response:
        try:
            gw.model(req.path_params["name"], req.path_params.get("version"))
        except InvalidInput as e:
            return _error(e)
        return Response(status_code=200 if gw.ready() else 503)

    async def infer(req: Request) -> Response:
        t0 = time.perf_counter()
        name = req.path_params["name"]
        status: int = 200
        try:
            model = gw.model(name, req.path_params.get("version"))
            doc, binary = _parse(await _body(req), req.headers.get(HEADER_LENGTH))
            tensors = _inputs(doc, binary)
            wanted = _requested(doc, [s.name for s in model.outputs])
            tmo = gw.timeout_of(doc.get("parameters", {}).get("timeout"))  # microseconds, as Triton's
            return _reply(doc, model, await gw.infer(model, tensors, tmo), wanted)
        except Exception as e:  # noqa: BLE001 - every failure is the protocol's error reply
            status = status_of(e)[0]
            return _error(e)
        finally:
            gw.observe(name if name in gw.models else "", "http", status, time.perf_counter() - t0)

    async def metrics(_: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(gw.registry), media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await gw.start()
        try:
            yield
        finally:
            await gw.stop()

    routes = [Route("/v2/health/live", live), Route("/v2/health/ready", ready), Route("/v2", server_metadata),
              Route("/v2/models/{name}", model_metadata), Route("/v2/models/{name}/versions/{version}", model_metadata),
              Route("/v2/models/{name}/ready", model_ready),
              Route("/v2/models/{name}/versions/{version}/ready", model_ready),
              Route("/v2/models/{name}/infer", infer, methods=["POST"]),
              Route("/v2/models/{name}/versions/{version}/infer", infer, methods=["POST"]),
              Route("/metrics", metrics)]
    return Starlette(routes=routes, lifespan=lifespan)
