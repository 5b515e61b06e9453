"""defaults.py: the old home of SERVER_DEFAULTS, FUNCTION_DEFAULTS and CLIENT_DEFAULTS, kept for one release: each name is found where it now lives (splitrpc.server, splitrpc.function_config, splitrpc.client) with a DeprecationWarning that says so. New code imports them from there."""
from __future__ import annotations

import importlib
import warnings
from typing import Any

_MOVED = {"SERVER_DEFAULTS": "splitrpc.server", "FUNCTION_DEFAULTS": "splitrpc.function_config",
          "CLIENT_DEFAULTS": "splitrpc.client"}


def __getattr__(name: str) -> Any:
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'splitrpc.defaults' has no attribute {name!r}")
    warnings.warn(f"splitrpc.defaults.{name} has moved to {home}.{name}; splitrpc.defaults goes in the next "
                  "release", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(home), name)
