"""conftest.py: for every test under the repository (tests/, bench/micro/): the installed splitrpc, with its compiled extension, is the one imported."""
import os
import sys

_ROOT = os.path.dirname(os.path.abspath(__file__))
_SOURCE_PKG = os.path.join(_ROOT, "splitrpc") + os.sep

# `python -m pytest` puts the working directory (the repository root) first on sys.path, where
# the source folder splitrpc/ has no compiled extension: take it off before anything imports
# splitrpc, and forget any splitrpc module already imported from there. (A virtual
# environment inside the repository, ./.venv, is not the source folder.)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _ROOT]
for _name in [m for m in sys.modules if m == "splitrpc" or m.startswith("splitrpc.")]:
    if os.path.abspath(getattr(sys.modules[_name], "__file__", "") or "").startswith(_SOURCE_PKG):
        del sys.modules[_name]
