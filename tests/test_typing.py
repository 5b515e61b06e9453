"""test_typing.py: the package is typed: `mypy --strict` (pyproject's [tool.mypy]: splitrpc/, its binding layer splitrpc._native read but not held to it) finds nothing, and py.typed ships with it."""
import os
import subprocess
import sys
from importlib import util

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_mypy_strict_finds_nothing():
    if util.find_spec("mypy") is None:
        pytest.fail("mypy is missing: pip install '.[test]'")
    r = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]


def test_py_typed_is_installed():
    import splitrpc

    assert os.path.exists(os.path.join(os.path.dirname(splitrpc.__file__), "py.typed"))
