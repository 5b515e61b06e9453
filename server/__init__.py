"""splitrpc.services (the server/ folder, a top-level folder of the repository's agreed layout, installed under this name; README "Repository layout"): the capabilities that serve: the built-in services served by `splitrpc serve` (docs/PROTOCOL.md table), the model zoo, GNN serving, co-location, the embedding store and the fleet."""
from splitrpc.services.builtin import SERVICES, Service, register_builtin_services

__all__ = ["SERVICES", "Service", "register_builtin_services"]
