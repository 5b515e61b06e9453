"""conftest.py: makes the installed splitrpc (with its compiled extension) the one the micro-benchmarks import."""
import os
import sys

import pytest

_MICRO = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_MICRO))
_SOURCE_PKG = os.path.join(_ROOT, "splitrpc") + os.sep

# As in tests/conftest.py: the repository root (first on sys.path under `python -m pytest`)
# holds the source folder splitrpc/ without the compiled extension; take it off before
# anything imports splitrpc, and forget any splitrpc module already imported from there.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _ROOT]
for _name in [m for m in sys.modules if m == "splitrpc" or m.startswith("splitrpc.")]:
    if os.path.abspath(getattr(sys.modules[_name], "__file__", "") or "").startswith(_SOURCE_PKG):
        del sys.modules[_name]

import splitrpc  # noqa: E402
from splitrpc.services import register_builtin_services  # noqa: E402


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
