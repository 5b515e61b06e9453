"""run.py: a Server run as a process (`splitrpc serve`): the user's server from MODULE:ATTR, the admin endpoint, start/ready/drain/stop log lines (text or JSON), and SIGTERM/SIGINT handled as a drain with a grace period, a second signal stopping at once.

Signals: the first SIGTERM or SIGINT starts a drain on a thread of its own (the worker goes on
answering what was received; new calls get DRAINING); the serve loop returns when the drain is
over or `grace` has passed; a second signal ends the drain at once.
"""
from __future__ import annotations

import inspect
import json
import logging
import os
import signal
import sys
import threading
import time
from importlib import import_module
from types import FrameType
from typing import Any, Callable

from splitrpc.server import DRAIN_LINGER, Server

log = logging.getLogger("splitrpc.run")
LOG_FORMATS = ("text", "json")
DEFAULT_GRACE = 30.0  # seconds a drain may take before the calls left are dropped
FORCE_AFTER = 2.0     # seconds after a second signal before serve_until_stopped gives up on a clean stop


class TargetError(Exception):
    """MODULE:ATTR does not name a server: the message says why, in one line."""


def load_target(target: str, server_options: dict[str, Any]) -> Server:
    """The Server named by target, "pkg.module:attr" (the current directory on the import path,
    as uvicorn and gunicorn do). attr is a Server, a function returning one, or a function taking
    a Server to register its functions on (called with a Server built from server_options).
    A Server object from the module is rebuilt with server_options (see Server.rebuild), so the
    command line's address and settings apply. Raises TargetError."""
    mod_name, sep, attr = target.partition(":")
    if not sep or not mod_name or not attr:
        raise TargetError(f"{target!r}: expected MODULE:ATTR, e.g. myapp.serving:server")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        mod = import_module(mod_name)
    except ModuleNotFoundError as e:
        if e.name and (mod_name == e.name or mod_name.startswith(e.name + ".")):
            raise TargetError(f"no module named {e.name!r} (from {target!r}; the current directory is on the "
                              "import path)") from None
        raise TargetError(f"importing {mod_name!r} failed: {type(e).__name__}: {e}") from None
    except Exception as e:  # noqa: BLE001 - the user's module raised at import: say what, in one line
        raise TargetError(f"importing {mod_name!r} failed: {type(e).__name__}: {e}") from None
    obj = mod
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetError(f"module {mod_name!r} has no attribute {attr!r}") from None
        except Exception as e:  # noqa: BLE001 - a property of the user's that raised: one line
            raise TargetError(f"{target}: reading {part!r} raised {type(e).__name__}: {e}") from None
    if isinstance(obj, Server):
        return obj.rebuild(**server_options)
    if not callable(obj):
        raise TargetError(f"{target!r} is a {type(obj).__name__}, not a splitrpc.Server or a function")
    try:
        params = [p for p in inspect.signature(obj).parameters.values()
                  if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    if len(params) == 1:  # a setup function: it registers on the server we make
        srv = Server(**server_options)
        try:
            obj(srv)
        except Exception as e:
            srv.close()
            raise TargetError(f"{target}(server) raised {type(e).__name__}: {e}") from None
        return srv
    try:
        got = obj()
    except Exception as e:  # noqa: BLE001 - the user's factory: one line
        raise TargetError(f"{target}() raised {type(e).__name__}: {e}") from None
    if not isinstance(got, Server):
        raise TargetError(f"{target}() returned a {type(got).__name__}, not a splitrpc.Server")
    return got.rebuild(**server_options)


class EventLog:
    """The process's start, ready, drain and stop lines on stdout: text, or one JSON object per
    line (format "json") with "event", "time" and the event's fields."""

    def __init__(self, fmt: str = "text") -> None:
        if fmt not in LOG_FORMATS:
            raise ValueError(f"log format must be one of {LOG_FORMATS}, got {fmt!r}")
        self.fmt = fmt

    def event(self, name: str, text: str, **fields: Any) -> None:
        line = json.dumps({"event": name, "time": round(time.time(), 3), **fields}, default=str) \
            if self.fmt == "json" else text
        # One write of the line and its newline (print writes them apart): lines of two threads
        # (a SIGHUP reload's beside the ready line) never run together.
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def serve_until_stopped(srv: Server, *, grace: float = DEFAULT_GRACE, linger: float = DRAIN_LINGER,
                        events: EventLog | None = None,
                        on_ready: Callable[[], object] | None = None) -> tuple[int, bool]:
    """Starts srv (its worker on a thread of its own) and waits until a signal (SIGTERM/SIGINT: a
    drain of up to grace seconds, then `linger` seconds with no datagram answering DRAINING
    (Server.stop); a second one: stop now) or srv.stop() from elsewhere; on_ready()
    runs once it serves. Returns (calls left unanswered, forced): forced when a second signal came
    and the server had still not stopped FORCE_AFTER seconds later (a callback that does not
    return): the caller, a process's main program, should then exit without further cleanup.
    The signal handlers are restored on return."""
    events = events or EventLog()
    outcome: dict[str, Any] = {"left": 0, "aborted": None, "early": None}
    drainer: list[threading.Thread] = []
    done = threading.Event()
    started = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if not started.is_set():  # before the server runs: drain once it does (nothing to answer yet)
            outcome["early"] = signum
            return
        if drainer:
            events.event("stop", f"second {name}: stopping now", signal=name)
            outcome["aborted"] = time.monotonic()
            srv.abort_drain()
            return
        pending = srv.pending()
        events.event("drain", f"{name}: draining, {pending} calls pending (grace {grace:g} s; a second signal "
                     "stops at once)", signal=name, grace_s=grace, pending=pending)

        def drain() -> None:
            try:
                outcome["left"] = srv.stop(grace=grace, linger=linger)
            finally:
                done.set()

        t = threading.Thread(target=drain, name="splitrpc-drain", daemon=True)
        drainer.append(t)
        t.start()

    signals = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        srv.start()
        end = time.monotonic() + 5
        while not srv.healthy() and time.monotonic() < end:  # the worker thread is starting
            time.sleep(0.001)
        started.set()
        if outcome["early"] is not None:
            on_signal(outcome["early"], None)
        elif on_ready is not None:
            on_ready()
        while not done.is_set() and (drainer or srv.state in ("running", "draining")):
            done.wait(0.1)
            if outcome["aborted"] is not None and time.monotonic() - outcome["aborted"] > FORCE_AFTER:
                events.event("stop", f"still not stopped {FORCE_AFTER:g} s after the second signal (a callback "
                             "that does not return): giving up on a clean stop", forced=True)
                return srv.pending(), True
    finally:
        for sig, h in signals.items():
            signal.signal(sig, h)
    for t in drainer:
        t.join()
    if not drainer:  # stopped from elsewhere
        outcome["left"] = srv.stop()
    return outcome["left"], False
