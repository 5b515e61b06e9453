"""What a user could do with a Function that the functools.partial base changes. Run it with the
current build, and (for comparison) with the parent commit's typed.py/client.py on PYTHONPATH."""
import copy, functools, inspect, os, pickle, sys, warnings
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
x = np.ones(64, np.float32)


def show(label, thunk):
    st, r = outcome(thunk)
    print(f"{label:38s} {st:35s} {str(r)[:110]!s}")


show("repr", lambda: repr(fn))
show("callable", lambda: callable(fn))
show("inspect.signature", lambda: str(inspect.signature(fn)))
show("copy.copy(fn)(x)", lambda: copy.copy(fn)(x).y[:2])
show("copy.deepcopy(fn) type", lambda: type(copy.deepcopy(fn)))
show("pickle.dumps", lambda: len(pickle.dumps(fn)))
show("functools.partial(fn, x)()", lambda: functools.partial(fn, x)().y[:2])
show("functools.partial(fn)(x=x)", lambda: functools.partial(fn)(x=x).y[:2])
show("hash/eq", lambda: (hash(fn) == hash(fn), fn == fn, fn == c.fn.f))
show("fn.name / func_id / Outputs", lambda: (fn.name, fn.func_id, fn.Outputs.__name__))
show("getattr(fn, '__name__')", lambda: fn.__name__)
show("fn.__doc__[:30]", lambda: fn.__doc__[:30])
show("fn.__module__", lambda: fn.__module__)


class Model:  # a Function kept as a class attribute, called through an instance
    infer = fn


show("Model().infer(x)", lambda: Model().infer(x).y[:2])


class Wrapped:
    pass


show("functools.update_wrapper(w, fn)", lambda: functools.update_wrapper(lambda *a: fn(*a), fn).__wrapped__ is fn)
show("functools.wraps(fn)", lambda: functools.wraps(fn)(lambda *a: fn(*a))(x).y[:2])
show("fn.func/args/keywords", lambda: (type(fn.func).__name__, fn.args, fn.keywords))
show("setattr(fn, 'info', None)", lambda: setattr(fn, "name", "renamed"))
show("vars(fn) keys", lambda: sorted(vars(fn)))
show("fn(x) after vars change", lambda: fn(x).y[:2])
show("isinstance(fn, typed.Function)", lambda: isinstance(fn, splitrpc.typed.Function))
show("Function subclass call", lambda: type("F2", (splitrpc.typed.Function,), {})(fn._b.dir if hasattr(fn, '_b') else fn._dir,
                                                                               c, fn.signature)(x).y[:2])
show("__reduce__", lambda: fn.__reduce__()[0])
import weakref
show("weakref.ref(fn)() is fn", lambda: weakref.ref(fn)() is fn)
c.close()
srv.close()
