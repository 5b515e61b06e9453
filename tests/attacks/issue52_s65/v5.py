"""v5.py: stop 64's page-only version 5 client (tests/attacks/issue52_s64/v5.py), loaded from there (this folder's scripts import it as v5)."""
import importlib.util as _u
import os as _os

_spec = _u.spec_from_file_location(
    "_v5_s64", _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "issue52_s64", "v5.py"))
_m = _u.module_from_spec(_spec)
_spec.loader.exec_module(_m)
globals().update({k: v for k, v in vars(_m).items() if not k.startswith("__")})
