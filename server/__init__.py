"""splitrpc.services (the server/ folder, installed under this name): the built-in services served by `splitrpc serve` (docs/PROTOCOL.md table) and the model zoo."""
from splitrpc.services.builtin import SERVICES, Service, register_builtin_services

__all__ = ["SERVICES", "Service", "register_builtin_services"]
