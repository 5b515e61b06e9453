"""A Function kept as a class attribute and called through an instance (class Model: infer =
client.fn.lenet; Model().infer(x)). Function is now a functools.partial: from Python 3.13
partial.__get__ warns (FutureWarning "functools.partial will be a method descriptor in future
Python versions"), and from 3.14 a partial is a method descriptor, so the instance becomes the
first input: UnexpectedInput / DtypeMismatch. pyproject says requires-python >= 3.10, no cap.
The splitrpc build here is for 3.11 only, so the 3.13 half runs an equivalent partial subclass
(same __new__ shape and closure as typed.Function) under /root/.pyenv/versions/3.13.0."""
import os, subprocess, sys, warnings
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MIMIC = r'''
import functools, warnings
warnings.simplefilter("always")
_MISSING = object()
def _call_of(b):
    def call(a=_MISSING, /, *args, **kwargs):
        return ("inputs by position:", (args if a is _MISSING else (a, *args)))
    return call
class Function(functools.partial):       # typed.Function's shape
    def __new__(cls, b):
        self = super().__new__(cls, _call_of(b)); self._b = b; return self
class Model:
    infer = Function(None)
print(Model().infer("x"))
'''
print("python 3.11 (this build):")
import numpy as np
import splitrpc
from splitrpc import TensorSpec
srv = splitrpc.Server("127.0.0.1", 0, wait="block")


@srv.function(1, "f", inputs=[TensorSpec("x", "float32", (4,))], outputs=[TensorSpec("y", "float32", (4,))])
def f(x, y):
    y[:] = x + 1


srv.start()
c = splitrpc.Client("127.0.0.1", srv.port, timeout=2.0)


class Model:
    infer = c.fn.f


with warnings.catch_warnings():
    warnings.simplefilter("error")
    print("  Model().infer(x).y =", Model().infer(np.ones(4, np.float32)).y)
c.close(); srv.close()
py313 = "/root/.pyenv/versions/3.13.0/bin/python"
if os.path.exists(py313):
    p = subprocess.run([py313, "-c", MIMIC], capture_output=True, text=True)
    print("python 3.13, the same shape of class:\n ", p.stdout.strip(), "\n ", p.stderr.strip())
    p = subprocess.run([py313, "-W", "error::FutureWarning", "-c", MIMIC.replace("warnings.simplefilter(\"always\")", "")], capture_output=True, text=True)
    print("python 3.13 -W error::FutureWarning (as pytest -W error runs):", [l for l in p.stderr.splitlines() if "Warning" in l][-1], "exit", p.returncode)
