"""conftest.py: the micro-benchmarks' server fixture (the root conftest.py makes the installed splitrpc the one imported)."""
import pytest

import splitrpc
from splitrpc.services import register_builtin_services


@pytest.fixture
def poll_server():
    """A running server with the built-in services whose worker busy-polls (lowest latency)."""
    srv = splitrpc.Server("127.0.0.1", 0, wait="poll")
    register_builtin_services(srv)
    srv.start()
    try:
        yield srv
    finally:
        srv.close()
