"""splitrpc.bench.helpers.peers: the benchmark services served by other RPC stacks (grpcio, pyzmq, Triton), each with a closed-loop client.

Each module runs as `python -m splitrpc.bench.helpers.peers.<module> serve|client ...` (see its docstring)
and has PEER, VARIANTS and available() -> (ok, reason); importing one never needs its RPC stack.
"""

# peer name (the "peer" field of a client's JSON result) -> module in this package
PEER_MODULES = {"grpcio": "grpc_peer", "pyzmq": "zmq_peer", "triton": "triton_peer"}
