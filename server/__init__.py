"""splitrpc.services: the built-in services served by `splitrpc serve` (PROTOCOL.md table)."""
from splitrpc.services.builtin import SERVICES, Service, register_builtin_services

__all__ = ["SERVICES", "Service", "register_builtin_services"]
