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
