"""copy.copy(fn) of a typed Function worked before 1b68068 (an ordinary object: a new Function
sharing its client) and now raises TypeError: functools.partial's __reduce__ rebuilds it as
Function(fn.func), and Function.__new__ takes (directory, caller, signature). Also shown:
inspect.signature(fn) now reports the closure's private parameters, a positional-only `a` whose
default is the module's _MISSING sentinel object, for a function whose input is named x.
Compare: PYTHONPATH=<a copy of the package with the parent commit's typed.py> (see FINDINGS.md)."""
import copy, inspect, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import splitrpc
from splitrpc import TensorSpec
from common import outcome

srv = splitrpc.Server("127.0.0.1", 0, wait="block")


@srv.function(1, "f", inputs=[TensorSpec("x", "float32", (64,))], outputs=[TensorSpec("y", "float32", (64,))])
def f(x, y):
    y[:] = x + 1


srv.start()
c = splitrpc.Client("127.0.0.1", srv.port, timeout=2.0)
fn = c.fn.f
print("copy.copy(fn)(x):", outcome(lambda: copy.copy(fn)(np.ones(64, np.float32)).y[:2]))
print("inspect.signature(fn):", inspect.signature(fn))
c.close(); srv.close()
