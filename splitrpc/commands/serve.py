"""serve.py: `splitrpc serve`: what every capability serves by default and the --models it claims (or your own server, MODULE:ATTR), until a signal drains it; --processes N runs N of them on one port."""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

from splitrpc import Server, __version__, run
from splitrpc.function_config import FUNCTION_DEFAULTS
from splitrpc.server import SERVER_DEFAULTS
from splitrpc.errors import SplitRPCError
from splitrpc.plugins import CapabilityError
from splitrpc.server import DRAIN_LINGER, SCHED_POLICIES, WAIT_MODES

if TYPE_CHECKING:
    from splitrpc.plugins import Capability, Serving

SUMMED = ("calls", "replies", "batches", "rx_datagrams", "tx_datagrams", "errors", "drops")  # --stats-json
# Options a --processes parent sets for each child itself, or that only the parent honours.
_NOT_FORWARDED = ("target", "host", "port", "processes", "admin_port", "metrics_port", "reuse_port", "stats_json",
                  "verbose")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               caps: list[Capability]) -> argparse.ArgumentParser:
    # Options left out take the library's defaults (the C core's, srpc_*_config_init): None here.
    s = sub.add_parser("serve", help="serve vecadd, matmul, echo and head (and models of the zoo), or your own "
                                     "server: splitrpc serve MODULE:ATTR")
    s.add_argument("target", nargs="?", metavar="MODULE:ATTR",
                   help="serve your own server instead of the built-ins: ATTR of MODULE (imported with the current "
                        "directory on the path) is a splitrpc.Server, a function returning one, or a function "
                        "taking a Server to register functions on; the options below apply to it")
    s.add_argument("--host", help=f"address to bind (default: {SERVER_DEFAULTS['host']})")
    s.add_argument("--port", type=int, help=f"UDP port (default: {SERVER_DEFAULTS['port']})")
    s.add_argument("--wait", choices=tuple(WAIT_MODES),
                   help="poll: lowest latency, burns a core; block: idle-efficient "
                        f"(default: {SERVER_DEFAULTS['wait']})")
    s.add_argument("--sched", choices=tuple(SCHED_POLICIES),
                   help="which function's batch runs next: rr, priority, fair, edf (docs/serving.md; "
                        f"default: {SERVER_DEFAULTS['sched']})")
    s.add_argument("--max-batch", type=int,
                   help=f"calls per batch at most (default: {FUNCTION_DEFAULTS['max_batch']})")
    s.add_argument("--max-delay-us", type=int,
                   help=f"how long a batch may wait for more calls (default: {FUNCTION_DEFAULTS['max_delay_us']})")
    s.add_argument("--segment-size", type=int, help="reply segment size to non-loopback clients "
                                                     f"(default: {SERVER_DEFAULTS['segment_size']})")
    helps = [c.models_help for c in caps if c.models_help]
    s.add_argument("--models", metavar="NAMES", help="also serve these: a comma list of " + "; ".join(helps))
    s.add_argument("--device", default="cpu", help="where the models run: cpu, cuda, cuda:N")
    s.add_argument("--small", action="store_true", help="the models' small configurations (same I/O sizes)")
    s.add_argument("--admin-port", type=int, metavar="PORT",
                   help="admin HTTP endpoint: /metrics (Prometheus), /healthz, /readyz at http://HOST:PORT "
                        "(0: any free port)")
    s.add_argument("--admin-host", default="127.0.0.1", help="address of the admin endpoint (default: %(default)s)")
    s.add_argument("--metrics-port", type=int, metavar="PORT", help=argparse.SUPPRESS)  # the older --admin-port
    s.add_argument("--grace", type=float, default=run.DEFAULT_GRACE, metavar="S",
                   help="on SIGTERM or Ctrl-C: take no new calls (DRAINING), answer those received for up to S "
                        "seconds, then stop; a second signal stops at once (default: %(default)s)")
    s.add_argument("--drain-linger", type=float, default=DRAIN_LINGER, metavar="S",
                   help="after the drain has answered every call received, keep the port open answering DRAINING "
                        "until no datagram has come for S seconds (within --grace), so that calls still in a "
                        "client's window get DRAINING, not silence; 0: stop at once (default: %(default)s)")
    s.add_argument("--log-format", choices=run.LOG_FORMATS, default="text",
                   help="start, ready, drain and stop lines as text or one JSON object per line")
    s.add_argument("--allow", metavar="NETS", help="serve only these client networks, e.g. 10.0.0.0/8,127.0.0.1 "
                                                   "(others are dropped and counted as not_allowed)")
    s.add_argument("--keys", metavar="FILE",
                   help="take only authenticated calls (sessions, docs/PROTOCOL-v5.md) made with a key of this table "
                        "(splitrpc keys new; docs/security.md); SIGHUP reads it again without a restart (with "
                        "--processes: SIGHUP the parent)")
    s.add_argument("--legacy-v4", action="store_true",
                   help="with --keys, also take version 4's signed datagrams (docs/PROTOCOL-v4.md): a legacy mode "
                        "whose captured calls run again after a restart and on other replicas")
    s.add_argument("--processes", type=int, default=1, metavar="N",
                   help="N server processes on one port (SO_REUSEPORT; --admin-port P: process i on P+i)")
    s.add_argument("--reuse-port", action="store_true", help="let other processes bind the same port")
    s.add_argument("--stats-json", action="store_true", help=argparse.SUPPRESS)  # a --processes child's
    for cap in caps:
        cap.add_serve_options(s)
    s.set_defaults(func=cmd_serve, serve_parser=s)
    return s


def _claim(caps: Iterable[Capability], spec: str) -> dict[str, list[str]]:
    """--models: {capability name: [names]} in the order given; CapabilityError for an unknown name."""
    out: dict[str, list[str]] = {}
    for n in dict.fromkeys(n.strip() for n in spec.split(",") if n.strip()):
        owner = next((c for c in caps if c.claims(n)), None)
        if owner is None:
            known = ", ".join(n for c in caps for n in c.callee_names() if c.claims(n))
            raise CapabilityError(f"--models: unknown model {n!r}; known: {known}, or all")
        out.setdefault(owner.name, []).append(n)
    return out


def cmd_serve(a: argparse.Namespace) -> int:
    caps = a.capabilities
    if a.metrics_port is not None:  # the older name of --admin-port
        a.admin_port = a.admin_port if a.admin_port is not None else a.metrics_port
    try:
        for cap in caps:
            cap.check_serve_args(a)
        claimed = _claim(caps, a.models) if a.models else {}
    except CapabilityError as e:
        print(e, file=sys.stderr)
        return e.code
    if a.processes != 1:
        return _serve_processes(a)
    if a.stats_json:  # a --processes child
        _die_with_parent()
    options = dict(host=a.host, port=a.port, wait=a.wait, sched=a.sched, segment_size=a.segment_size, allow=a.allow,
                   keys=a.keys, legacy_v4=a.legacy_v4)
    if a.target:
        if a.models:
            print("splitrpc serve: --models serves the model zoo: not with MODULE:ATTR", file=sys.stderr)
            return 2
        try:
            srv = run.load_target(a.target, dict(options, reuse_port=a.reuse_port or None))
        except (run.TargetError, ValueError, SplitRPCError) as e:
            print(f"splitrpc serve: {e}", file=sys.stderr)
            return 2
        rc, st = _serve_loop(a, srv, " ".join(f"{f.name}({f.func_id})" for f in srv.functions()), "")
        if rc == 0 and a.stats_json:  # for the parent of --processes
            print("STATS " + json.dumps({k: st[k] for k in SUMMED}), flush=True)
        return rc
    try:
        srv = Server(**options, reuse_port=a.reuse_port)
    except (ValueError, SplitRPCError) as e:
        print(f"splitrpc serve: {e}", file=sys.stderr)
        return 2
    servings: list[Serving] = []

    def close_all() -> None:
        for s in servings:
            s.close()

    try:
        for cap in caps:
            s = cap.serve(srv, claimed.get(cap.name, []), a)
            if s is not None:
                servings.append(s)
    except CapabilityError as e:
        srv.close()
        close_all()
        print(e, file=sys.stderr)
        return e.code
    served = " ".join(f for s in servings for f in s.served)
    rc, st = _serve_loop(a, srv, served, "".join(s.banner for s in servings), cleanup=close_all)
    if rc:
        return rc
    for s in servings:
        for line in s.stop_lines(a):
            print(line, flush=True)
    if a.stats_json:  # for the parent of --processes
        print("STATS " + json.dumps({k: st[k] for k in SUMMED}), flush=True)
    return 0


def _serve_loop(a: argparse.Namespace, srv: Server, served: str, extra: str,
                cleanup: Callable[[], None] | None = None) -> tuple[int, dict[str, Any]]:
    """Serves srv until a signal (a drain of --grace seconds; a second one stops at once), with
    the admin endpoint of --admin-port and the start, ready, drain and stop lines of
    --log-format. (exit code, the server's last stats); 2 when the admin port cannot be had."""
    events = run.EventLog(a.log_format)
    admin = None
    if a.admin_port is not None:
        from splitrpc.admin import AdminServer

        try:
            admin = AdminServer(srv, a.admin_port, a.admin_host)
        except OSError as e:
            srv.close()
            if cleanup:
                cleanup()
            print(f"--admin-port: cannot listen on {a.admin_host}:{a.admin_port}: {e}", file=sys.stderr)
            return 2, {}
    settings = {"wait": a.wait or SERVER_DEFAULTS["wait"], "sched": a.sched or SERVER_DEFAULTS["sched"],
                "grace_s": a.grace, "allow": a.allow, "processes": 1, "keys": a.keys}
    events.event("start", f"splitrpc {__version__} serving {served} on {srv.host}:{srv.port} "
                          f"(wait={settings['wait']}{extra}); Ctrl-C or SIGTERM drains, a second one stops",
                 version=__version__, host=srv.host, port=srv.port, functions=[
                     {"id": f.func_id, "name": f.name} for f in srv.functions()], settings=settings)

    if a.keys:  # SIGHUP: the key table read again, in a thread (not in the handler: reload takes the server's lock)
        def reload_keys() -> None:
            try:
                t = srv.reload_keys()
                events.event("keys", f"keys: {len(t)} reloaded from {a.keys}", keys=len(t), file=a.keys)
            except (SplitRPCError, ValueError) as e:
                events.event("keys", f"keys: not reloaded, the table in use stays: {e}", error=str(e), file=a.keys)

        signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=reload_keys, daemon=True).start())
        # A --processes parent starts its children with SIGHUP blocked (_serve_processes): one sent while
        # this process was starting waited, pending, instead of killing it. Taken here, the table is read
        # again before the server takes a call (the table read at its start may be older than the signal).
        if signal.sigtimedwait({signal.SIGHUP}, 0) is not None:
            reload_keys()
    # From here SIGHUP has its meaning (with --keys a reload; without, the default: the process ends, as a
    # lone `splitrpc serve` does on a hangup), a pending one too.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})

    def ready() -> None:
        events.event("ready", f"ready: {len(srv.functions())} functions" +
                     (f"; admin: {admin.url('/metrics')} {admin.url('/healthz')} {admin.url('/readyz')}"
                      if admin else ""), admin=admin.url() if admin else None)
        if admin:  # the line scripts look for (older name)
            events.event("metrics", f"metrics: {admin.url('/metrics')}", url=admin.url("/metrics"))

    try:
        left, forced = run.serve_until_stopped(srv, grace=a.grace, linger=a.drain_linger, events=events,
                                               on_ready=ready)
        if forced:  # a callback that does not return holds the worker: leave without it
            os._exit(1)
    finally:
        if admin:
            admin.close()
        st = srv.stats()
        srv.close()
        if cleanup:
            cleanup()
    events.event("stop", f"stopped: {stats_line(st)}" + (f"; {left} calls unanswered" if left else ""),
                 calls=st["calls"], batches=st["batches"], errors=st["errors"], unanswered=left)
    return 0, st


def stats_line(st: dict[str, Any]) -> str:
    errors = ", ".join(f"{name} {n}" for name, n in st["errors"].items() if n) or "none"
    return f"{st['calls']} calls in {st['batches']} batches; errors sent: {errors}"


def _child_argv(a: argparse.Namespace) -> list[str]:
    """This command's options as a --processes child's arguments, the capabilities' too, but for
    those the parent sets itself: a flag (store_true/false/const, --x/--no-x) where it differs from
    its default, every value given or defaulted (as --opt=VALUE, so that a value may start with
    "-"), a list option once per value."""
    out: list[str] = []
    for act in a.serve_parser._actions:
        if not act.option_strings or act.dest in _NOT_FORWARDED or act.dest == "help":
            continue
        v = getattr(a, act.dest, None)
        long = next((o for o in act.option_strings if o.startswith("--")), act.option_strings[0])
        if isinstance(act, argparse.BooleanOptionalAction):
            if v is not None and v != act.default:
                out.append(long if v else next(o for o in act.option_strings if o.startswith("--no-")))
        elif act.nargs == 0:  # store_true, store_false, store_const, count-less flags
            if v != act.default:
                out.append(long)
        elif v is None:
            continue
        elif isinstance(act, argparse._AppendAction) or isinstance(v, (list, tuple)):
            items = v if isinstance(act, argparse._AppendAction) else [v]
            for item in items:
                out += [long, *map(str, item)] if isinstance(item, (list, tuple)) else [f"{long}={item}"]
        else:
            out.append(f"{long}={v}")
    return out


_PARENT_ENV = "SPLITRPC_SERVE_PARENT"  # a --processes child's parent, for _die_with_parent
_PR_SET_PDEATHSIG = 1                  # linux/prctl.h


def _die_with_parent() -> None:
    """A --processes child drains (SIGTERM) when its parent dies, however it dies (SIGKILL, the
    OOM killer): a child left alone would go on serving with a key table that no SIGHUP reaches
    (the parent passes them on), and bind beside a new server's children. Linux's
    PR_SET_PDEATHSIG; where there is none, nothing changes. A parent gone before it was set: the
    child stops at once."""
    parent = int(os.environ.get(_PARENT_ENV, "0") or 0)
    if not parent or not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


def _serve_processes(a: argparse.Namespace) -> int:
    """`splitrpc serve --processes N`: N server processes on one port (SO_REUSEPORT); their
    output prefixed [i]; on SIGINT/SIGTERM they stop and each one's counters and the sum are
    printed; SIGHUP is passed on to each (with --keys: each reloads its table)."""
    if a.processes < 1:
        print("--processes must be >= 1", file=sys.stderr)
        return 2
    host = a.host or SERVER_DEFAULTS["host"]
    port = SERVER_DEFAULTS["port"] if a.port is None else a.port
    if port == 0:  # one free port for all: found, then let go before the children bind it
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(fam, socket.SOCK_DGRAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            s.bind((host, 0))
            port = s.getsockname()[1]
    base = [sys.executable, "-m", "splitrpc", *(["-v"] if a.verbose else []), "serve", "--reuse-port", "--stats-json",
            "--host", host, "--port", str(port), *_child_argv(a)]
    if a.target:
        base.append(a.target)
    procs: list[subprocess.Popen[str]]
    stats: dict[int, dict[str, Any]]
    procs, stats, ready = [], {}, threading.Semaphore(0)
    signalled = {"hup": 0, "stop": 0}  # signals handled so far, for children started meanwhile

    def relay(i: int, p: subprocess.Popen[str]) -> None:
        assert p.stdout is not None  # stdout=subprocess.PIPE
        for line in p.stdout:
            if line.startswith("STATS "):
                stats[i] = json.loads(line[6:])
                continue
            print(f"[{i}] {line}", end="", flush=True)
            if line.startswith("ready:") or line.startswith('{"event": "ready"'):
                ready.release()

    def forward(sig: signal.Signals) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)

    def stop(*_: object) -> None:  # SIGINT/SIGTERM: each child drains (a second one: each stops at once)
        signalled["stop"] += 1
        forward(signal.SIGTERM)

    def hup(*_: object) -> None:  # SIGHUP: each child does with it what a lone `splitrpc serve` does
        signalled["hup"] += 1
        forward(signal.SIGHUP)

    # The parent must never die of a signal its children are left serving after (with an old key
    # table, or for ever), so its handlers come before the first child. SIGHUP is passed on whether or
    # not there are --keys: without, each child ends of it as a lone `splitrpc serve` does, and so does
    # the parent once they have; only a SIGHUP ignored already (nohup) stays ignored, by all.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    if a.keys or signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        signal.signal(signal.SIGHUP, hup)
    # A child runs Python's default SIGHUP action (death) until _serve_loop has set its own: a handler
    # does not survive exec, and SIG_IGN would lose a reload asked for after the child had read its
    # table. So the children start with SIGHUP blocked (a thread's signal mask survives fork and exec):
    # one sent meanwhile stays pending, and _serve_loop unblocks it once it has its handler. (The relay
    # threads started meanwhile keep it blocked: harmless, Python runs a handler in the main thread.)
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        for i in range(a.processes):
            if signalled["stop"]:  # stopped while starting: start no more
                break
            admin = [] if a.admin_port is None else ["--admin-port", str(a.admin_port and a.admin_port + i)]
            seen = dict(signalled)
            # a session of its own: a terminal's Ctrl-C reaches the parent alone, which passes on one SIGTERM
            # (a child that got both would take the second for "stop at once")
            p = subprocess.Popen(base + admin, stdout=subprocess.PIPE, text=True, start_new_session=True,
                                 env={**os.environ, _PARENT_ENV: str(os.getpid())})
            procs.append(p)
            # A handler that ran while Popen did found p not yet in procs: p gets its signal now. (One that
            # ran just after the append reached p already: a second reload, or a second SIGTERM to a child
            # that has no calls yet to drain, does no harm.)
            if signalled["hup"] != seen["hup"]:
                p.send_signal(signal.SIGHUP)
            if signalled["stop"] != seen["stop"]:
                p.send_signal(signal.SIGTERM)
            threading.Thread(target=relay, args=(i, p), daemon=True).start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    up = 0
    while up < a.processes and len(procs) == a.processes and all(p.poll() is None for p in procs):
        up += ready.acquire(timeout=0.2)
    if up == a.processes:
        print(f"{a.processes} processes serving on {host}:{port} (SO_REUSEPORT: each client address goes to "
              "one of them); Ctrl-C stops", flush=True)
    elif not signalled["stop"]:  # one of them could not start: the others stop too
        forward(signal.SIGTERM)
    codes = [p.wait() for p in procs]
    time.sleep(0.1)  # the relays print the last lines
    for i in sorted(stats):
        print(f"process {i}: {stats_line(stats[i])}")
    if stats:
        total = {k: sum(s[k] for s in stats.values()) for k in ("calls", "replies", "batches")}
        total["errors"] = {n: sum(s["errors"].get(n, 0) for s in stats.values()) for n in next(iter(stats.values()))["errors"]}
        print(f"together: {stats_line(total)}", flush=True)
    return 0 if up == a.processes and not any(codes) else 1

