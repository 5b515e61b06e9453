"""procs.py: server child processes for the benchmarks: started outside the source tree (Proc), or
forked from a fork server that imported PyTorch once and was started there (Forked); wait until
ready, always stop; plus the raw-UDP limit server (`python -m splitrpc.bench.helpers.procs raw`)."""
from __future__ import annotations

import atexit
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref


class ServerDied(RuntimeError):
    """A benchmark server exited or never became ready."""


def free_port(kind: int = socket.SOCK_DGRAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A server child process. It runs in a temporary directory, so `python -m splitrpc`
    imports the installed package (with its compiled extension), never a source tree."""

    def __init__(self, args: list[str], env: dict | None = None):
        self.args = args
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tempfile.gettempdir(),
                                  env=env, text=True)

    def check_alive(self) -> None:
        if self.p.poll() is not None:
            err = self.p.stderr.read()[-3000:] if self.p.stderr else ""
            raise ServerDied(f"{' '.join(self.args[:4])} exited with {self.p.returncode}: {err.strip()}")

    def wait_line(self, word: str, timeout: float) -> str:
        """Waits for a stdout line containing `word` (peers print READY) and returns it."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.check_alive()
            r, _, _ = select.select([self.p.stdout], [], [], 0.2)
            if r:
                line = self.p.stdout.readline()
                if word in line:
                    return line
        self.stop()
        raise ServerDied(f"{' '.join(self.args[:4])} not ready after {timeout:.0f} s")

    def wait_until(self, probe, what: str, timeout: float = 20.0):
        """Calls probe() until it stops raising (the server may still be binding)."""
        end = time.monotonic() + timeout
        while True:
            try:
                return probe()
            except Exception as e:  # noqa: BLE001 - any failure means "not yet"
                self.check_alive()
                if time.monotonic() > end:
                    self.stop()
                    raise ServerDied(f"{what} did not come up: {e}") from e
                time.sleep(0.05)

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()

    def __enter__(self) -> "Proc":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# What the fork server imports once for every benchmark server forked from it: one list for the
# process (its first Forked starts the fork server), each entry best effort (a missing extra: the
# server imports what it needs itself, as a Proc's would).
FORK_PRELOAD = ("torch", "torch_geometric", "splitrpc.cli", "splitrpc.services.embedding.dlrm",
                "splitrpc.services.colocation.colocate", "splitrpc.services.gnn.serve")
_live: "weakref.WeakSet[Forked]" = weakref.WeakSet()
_fork_server_started = False


def _start_fork_server() -> None:
    """Starts this process's fork server, from the temporary directory (as Proc's children run):
    it imports FORK_PRELOAD with '' first on its path, so in a source checkout its splitrpc.*
    would be the unbuilt source folder, and fail."""
    import multiprocessing as mp
    from multiprocessing import forkserver

    mp.set_forkserver_preload(list(FORK_PRELOAD))
    here = os.getcwd()
    os.chdir(tempfile.gettempdir())
    try:
        forkserver.ensure_running()
    finally:
        os.chdir(here)


def _forked(target, args: tuple, log: str, ready) -> None:
    """In the forked process: its stdout and stderr into log (as a Proc's pipes took them), then
    target(*args, ready)."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    target(*args, ready)


@atexit.register
def _stop_all() -> None:
    """At exit, every Forked server still running is stopped (multiprocessing's own exit handler
    would wait for it, and it ends only at SIGTERM)."""
    for f in list(_live):
        f.stop()


class Forked:
    """A benchmark server run as target(*args, ready) in a process of its own, forked from
    multiprocessing's fork server, which imported FORK_PRELOAD (PyTorch: 2 to 4 s a process here)
    once for every server a run starts: each server is still a fresh process, forked from the same
    state. target sets ready (an Event) once it serves and returns after SIGTERM. Its stdout and
    stderr go to a log whose end ServerDied quotes. Stopping it, leaving a `with` block, or the
    process's exit ends it. Only module-level functions and picklable arguments travel; the
    environment is the one the process had at its first Forked (pass what a server needs as an
    argument)."""

    def __init__(self, target, args: tuple = ()):
        import multiprocessing as mp

        global _fork_server_started
        if not _fork_server_started:  # started once, from the temporary directory
            _start_fork_server()
            _fork_server_started = True
        ctx = mp.get_context("forkserver")
        self.name = getattr(target, "__qualname__", str(target))
        fd, self.log = tempfile.mkstemp(prefix="splitrpc-forked-", suffix=".log")
        os.close(fd)
        self.ready = ctx.Event()
        self.p = ctx.Process(target=_forked, args=(target, tuple(args), self.log, self.ready), name=self.name)
        self.stopped = False
        self.p.start()
        _live.add(self)

    def _tail(self) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-3000:].strip()
        except OSError:
            return ""

    def check_alive(self) -> None:
        if self.p.exitcode is not None:
            raise ServerDied(f"{self.name} exited with {self.p.exitcode}: {self._tail()}")

    def wait_ready(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while not self.ready.wait(0.2):
            self.check_alive()
            if time.monotonic() > end:
                tail = self._tail()
                self.stop()
                raise ServerDied(f"{self.name} not ready after {timeout:.0f} s: {tail}")

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        if self.p.exitcode is None:
            self.p.terminate()  # SIGTERM
            self.p.join(10)
            if self.p.exitcode is None:
                self.p.kill()
                self.p.join()
        self.p.close()
        try:
            os.unlink(self.log)
        except OSError:
            pass

    def __enter__(self) -> "Forked":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class _SayWhen:
    """sys.stdout in a forked CLI: sets ready at the first text holding word; the text goes
    nowhere (a server's event lines, which a Proc's pipe took and dropped too)."""

    def __init__(self, word: str, ready):
        self.word, self.ready = word, ready

    def write(self, text: str) -> int:
        if self.word in text:
            self.ready.set()
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _cli(argv: list[str], word: str, ready) -> None:
    """`splitrpc ARGV` in this (forked) process, ready set at the first stdout text holding word."""
    from splitrpc.cli import main

    sys.stdout = _SayWhen(word, ready)
    rc = main(argv)
    if rc:
        sys.exit(rc)


def forked_splitrpc(argv: list[str], word: str) -> Forked:
    """`splitrpc ARGV` (e.g. serve ...) forked from the fork server (Forked), ready once its stdout
    says word (`splitrpc serve` says "serving" in its start event); its stdout dropped, its stderr
    in the log; stopped by SIGTERM, as a served process is. For servers whose every start would
    import PyTorch again."""
    return Forked(_cli, (list(argv), word))


def start_splitrpc(wait: str, extra: tuple[str, ...] = (), env: dict | None = None) -> tuple[Proc, int]:
    """`splitrpc serve --wait WAIT` (plus extra arguments, e.g. a MODULE:ATTR) in a child process.
    With --drain-linger 0: it is stopped after the benchmark's own clients are done, so no call can
    still be in flight to answer DRAINING to (the default linger, 2 s, was spent on every stop)."""
    port = free_port()
    return Proc([sys.executable, "-m", "splitrpc", "serve", "--port", str(port), "--wait", wait, "--drain-linger", "0",
                 *extra], env=env), port


def start_raw(busy: bool, req: int, resp: int) -> tuple[Proc, int]:
    port = free_port()
    return Proc([sys.executable, "-m", "splitrpc.bench.helpers.procs", "raw", str(port), str(int(busy)), str(req),
                 str(resp)]), port


def _serve_until_sigterm(serve) -> int:
    """Runs serve(stop) on a thread until SIGTERM sets stop: a Python signal handler runs only
    between bytecodes of the main thread, never while a native server loop holds it; 1 when
    the server failed."""
    import threading

    from splitrpc import raw_udp

    stop, rc = raw_udp.StopFlag(), []
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    th = threading.Thread(target=lambda: rc.append(serve(stop)), daemon=True)
    th.start()
    while th.is_alive():
        th.join(0.1)
    return 1 if rc != [0] else 0


def raw_server_main(port: int, busy: int, req: int, resp: int) -> int:
    """The raw UDP server until SIGTERM (runs in the child process)."""
    from splitrpc import raw_udp

    return _serve_until_sigterm(lambda stop: raw_udp.echo_serve("127.0.0.1", port, bool(busy), req, resp, stop))


def start_min(busy: bool, env: dict | None = None) -> tuple[Proc, int]:
    """The minimal C server of the protocol (splitrpc.raw_udp.min_serve) in a child process."""
    port = free_port()
    return Proc([sys.executable, "-m", "splitrpc.bench.helpers.procs", "min", str(port), str(int(busy))], env=env), port


def min_server_main(port: int, busy: int) -> int:
    """The minimal protocol server until SIGTERM (runs in the child process)."""
    from splitrpc import raw_udp

    return _serve_until_sigterm(lambda stop: raw_udp.min_serve("127.0.0.1", port, bool(busy), stop))


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "raw":
        sys.exit(raw_server_main(*map(int, sys.argv[2:6])))
    if len(sys.argv) == 4 and sys.argv[1] == "min":
        sys.exit(min_server_main(*map(int, sys.argv[2:4])))
    sys.exit("usage: python -m splitrpc.bench.helpers.procs raw PORT BUSY REQ RESP | min PORT BUSY")
