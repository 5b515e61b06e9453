"""gateway: `splitrpc gateway`, an Open Inference Protocol (KServe v2, Triton's) front end over HTTP/REST and gRPC that forwards each inference request to splitrpc functions through splitrpc.aio.Pool: models.py the transport-free part, http.py and grpc_service.py the two faces."""
from splitrpc.gateway.models import Gateway, InvalidInput, Model, ModelNotFound

__all__ = ["Gateway", "InvalidInput", "Model", "ModelNotFound"]
