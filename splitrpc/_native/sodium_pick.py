"""sodium_pick.py (binding layer): which libsodium the C core loads. Before the core's first use of it, a newer one than the system's is named to it (its environment variable, native/src/core/sodium.h) when PyNaCl carries one and the system has no libsodium 1.0.19 or later."""
from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import os

# PyNaCl 1.6 carries libsodium 1.0.19 or later (with AEGIS); 1.5 carried 1.0.18, no faster than Debian 12's.
_PYNACL_MIN = (1, 6)


def _system_has_newer() -> bool:
    """Whether the system has libsodium.so.26 (1.0.19 on), which the core tries before .so.23 itself."""
    try:
        ctypes.CDLL("libsodium.so.26")
    except OSError:
        return False
    return True


def pynacl_library() -> str | None:
    """The path of the libsodium inside PyNaCl (its extension module exports libsodium's functions),
    when a PyNaCl new enough is installed; else None."""
    try:
        version = tuple(int(x) for x in importlib.metadata.version("pynacl").split(".")[:2])
        spec = importlib.util.find_spec("nacl._sodium")
    except Exception:  # not installed, or broken: the system's libsodium then (importing splitrpc never fails here)
        return None
    if version < _PYNACL_MIN or spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    return spec.origin


def pick(env_name: str) -> str | None:
    """Sets env_name to PyNaCl's libsodium unless it is set already or the system's is as new; returns
    what it set (None: nothing). Why: a keyed vecadd call's four AES-256-GCM operations cost 2.66 us
    encrypted and 1.13 authenticated with libsodium 1.0.18 (Debian 12's) on this project's AES-NI
    VM, 1.1-1.3 and 0.5-0.6 with PyNaCl 1.6.2's (bench/results/sessions_cost/aead_speed*.out.txt). The core falls back to the system's library when
    the one named does not load (outside a Python process, PyNaCl's module lacks libpython)."""
    if os.environ.get(env_name) or _system_has_newer():
        return None
    path = pynacl_library()
    if path:
        os.environ[env_name] = path
    return path
