"""forked_targets.py: targets for tests/test_procs.py's forked processes (a module of their own: a test module, imported by path, cannot be found by name in a forked child)."""
import os
import signal
import threading


def serves_until_sigterm(path, ready):
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    ready.set()
    stop.wait()
    with open(path, "a") as f:
        f.write(" stopped")


def fails_at_start(ready):
    raise RuntimeError("no such model")


def reports_what_was_preloaded(path, ready):
    """Writes which of the fork server's preload modules were imported before it ran."""
    import json
    import sys

    from splitrpc.bench.helpers.procs import FORK_PRELOAD

    with open(path, "w") as f:
        json.dump({"preloaded": {m: m in sys.modules for m in FORK_PRELOAD}}, f)
    ready.set()
