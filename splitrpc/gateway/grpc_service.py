"""grpc_service.py: the gateway's gRPC face: KServe v2's GRPCInferenceService (the definitions tritonclient ships) on grpcio's asyncio server: liveness, readiness, server and model metadata, ModelInfer with typed contents or raw_input_contents, errors as the protocol's status codes."""
from __future__ import annotations

import time
from typing import Any

import grpc
import numpy as np
from numpy.typing import NDArray
from tritonclient.grpc import service_pb2, service_pb2_grpc

from splitrpc.gateway.models import DATATYPES, Gateway, InvalidInput, error_text, status_of, tensor_from

# the datatype's field of InferTensorContents (FP16 travels raw only)
CONTENTS = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
            "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
            "UINT32": "uint_contents", "UINT64": "uint64_contents", "FP32": "fp32_contents",
            "FP64": "fp64_contents"}


def _inputs(req: Any) -> dict[str, NDArray[Any]]:
    """The request's input tensors: raw_input_contents (one per input, in order) or typed contents."""
    raw = list(req.raw_input_contents)
    if raw and len(raw) != len(req.inputs):
        raise InvalidInput(f"{len(raw)} raw_input_contents for {len(req.inputs)} inputs")
    tensors: dict[str, NDArray[Any]] = {}
    for i, t in enumerate(req.inputs):
        if t.name in tensors:
            raise InvalidInput(f"input {t.name!r} given twice")
        field = CONTENTS.get(t.datatype)
        data = list(getattr(t.contents, field)) if (not raw and field) else None
        tensors[t.name] = tensor_from(t.name, t.datatype, list(t.shape), data, raw[i] if raw else None)
    return tensors


class Service(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]  # generated, untyped
    """GRPCInferenceService over a Gateway."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw

    async def _fail(self, context: Any, e: BaseException) -> None:
        await context.abort(getattr(grpc.StatusCode, status_of(e)[1]), error_text(e))

    async def ServerLive(self, request: Any, context: Any) -> Any:  # noqa: N802 - the protocol's names
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> Any:  # noqa: N802
        return service_pb2.ServerReadyResponse(ready=self.gw.ready())

    async def ModelReady(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            self.gw.model(request.name, request.version)
        except InvalidInput as e:
            await self._fail(context, e)
        return service_pb2.ModelReadyResponse(ready=self.gw.ready())

    async def ServerMetadata(self, request: Any, context: Any) -> Any:  # noqa: N802
        return service_pb2.ServerMetadataResponse(**self.gw.server_metadata())

    async def ModelMetadata(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            m = self.gw.model(request.name, request.version).metadata()
        except InvalidInput as e:
            await self._fail(context, e)
        tm = service_pb2.ModelMetadataResponse.TensorMetadata
        return service_pb2.ModelMetadataResponse(
            name=m["name"], versions=m["versions"], platform=m["platform"],
            inputs=[tm(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in m["inputs"]],
            outputs=[tm(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in m["outputs"]])

    async def ModelInfer(self, request: Any, context: Any) -> Any:  # noqa: N802
        t0 = time.perf_counter()
        status = "OK"
        try:
            model = self.gw.model(request.model_name, request.model_version)
            tensors = _inputs(request)
            known = [s.name for s in model.outputs]
            names = [o.name for o in request.outputs] or known
            if any(n not in known for n in names):
                raise InvalidInput(f"requested outputs must name the model's outputs {known}")
            tmo = self.gw.timeout_of(request.parameters["timeout"].int64_param
                                     if "timeout" in request.parameters else None)
            outputs = await self.gw.infer(model, tensors, tmo)
            resp = service_pb2.ModelInferResponse(model_name=model.name, model_version=model.version, id=request.id)
            for n in names:
                arr = outputs[n]
                resp.outputs.add(name=n, datatype=DATATYPES[arr.dtype.str], shape=list(arr.shape))
                resp.raw_output_contents.append(np.ascontiguousarray(arr).tobytes())
            return resp
        except Exception as e:  # noqa: BLE001 - every failure is the protocol's error status
            status = status_of(e)[1]
            await self._fail(context, e)
        finally:
            name = request.model_name
            self.gw.observe(name if name in self.gw.models else "", "grpc", status, time.perf_counter() - t0)


async def start_server(gw: Gateway, host: str, port: int) -> tuple[Any, int]:
    """A started grpc.aio server of the service on host:port, and its port (port 0: any free one)."""
    server = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Service(gw), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if not bound:
        raise OSError(f"cannot listen on {host}:{port} for gRPC")
    await server.start()
    return server, bound
