"""cli.py: the `splitrpc` command: serve the built-in services and models, make a call, run the demo, load a server."""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np

from splitrpc import Client, Server, __version__, features
from splitrpc.defaults import CLIENT_DEFAULTS
from splitrpc.client import split_address
from splitrpc.defaults import FUNCTION_DEFAULTS, SERVER_DEFAULTS
from splitrpc.errors import SplitRPCError
from splitrpc.hdr import percentiles
from splitrpc.server import SCHED_POLICIES, WAIT_MODES


def _services():
    from splitrpc.services import SERVICES, register_builtin_services

    return SERVICES, register_builtin_services


def _models():
    """The model zoo's table (imports numpy only; building a model imports torch)."""
    from splitrpc.services import models

    return models


def _gnn():
    """The GNN serving module: FUNC_IDS, POLICIES, register_gnn, GNNService (imports numpy only;
    building a service imports torch, scipy and torch-geometric)."""
    from splitrpc.services.gnn import serve

    return serve


DLRM = "dlrm"  # the recommendation model over the embedding store (splitrpc.services.embedding.dlrm)


def _split_models(spec: str) -> tuple[list, list]:
    """--models: (zoo names, GNN names and dlrm); ValueError for an unknown name."""
    gnn_ids = _gnn().FUNC_IDS
    parts = [n.strip() for n in spec.split(",") if n.strip()]
    gnn = [n for n in dict.fromkeys(parts) if n in gnn_ids or n == DLRM]
    rest = [n for n in parts if n not in gnn_ids and n != DLRM]
    zoo = _models().resolve(",".join(rest)) if rest else []
    return zoo, gnn


def _dlrm():
    """The DLRM service module (numpy at import; the service imports torch, rocksdict)."""
    from splitrpc.services.embedding import dlrm

    return dlrm


def cmd_serve(a) -> int:
    if a.metrics_port is not None:  # the older name of --admin-port
        a.admin_port = a.admin_port if a.admin_port is not None else a.metrics_port
    if a.processes != 1:
        if a.gnn_trace:
            print("--gnn-trace: one process only (not with --processes)", file=sys.stderr)
            return 2
        return _serve_processes(a)
    _, register = _services()
    names, gnn_names = [], []
    if a.target:
        if a.models:
            print("splitrpc serve: --models serves the model zoo: not with MODULE:ATTR", file=sys.stderr)
            return 2
        from splitrpc import run

        try:
            srv = run.load_target(a.target, dict(host=a.host, port=a.port, wait=a.wait, sched=a.sched,
                                                 segment_size=a.segment_size, allow=a.allow,
                                                 reuse_port=a.reuse_port or None))
        except (run.TargetError, ValueError, SplitRPCError) as e:
            print(f"splitrpc serve: {e}", file=sys.stderr)
            return 2
        rc, st = _serve_loop(a, srv, " ".join(f"{f.name}({f.func_id})" for f in srv.functions()), "")
        if rc == 0 and a.stats_json:  # for the parent of --processes
            print("STATS " + json.dumps({k: st[k] for k in _SUMMED}), flush=True)
        return rc
    if a.models:
        try:
            names, gnn_names = _split_models(a.models)
        except ValueError as e:
            print(f"--models: {e} (or the GNN models {', '.join(_gnn().FUNC_IDS)})", file=sys.stderr)
            return 2
    try:
        srv = Server(a.host, a.port, wait=a.wait, sched=a.sched, segment_size=a.segment_size, allow=a.allow,
                     reuse_port=a.reuse_port)
    except ValueError as e:
        print(f"splitrpc serve: {e}", file=sys.stderr)
        return 2
    register(srv, max_batch=a.max_batch, max_delay_us=a.max_delay_us, batch_cost_us=a.batch_cost_us)
    if names:
        try:
            _models().register_models(srv, names, device=a.device, small=a.small, max_batch=a.max_batch,
                                      max_delay_us=a.max_delay_us)
        except Exception as e:  # no torch (ImportError names the extra), an unusable device, ...
            srv.close()
            print(f"--models: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
    gnn_cfg, gnn_svcs, dlrm_svc = "", {}, None
    if DLRM in gnn_names:
        gnn_names.remove(DLRM)
        try:
            dl = _dlrm()
            cfg = dl.load_config(a.embedding_store) if a.embedding_store else None
            print(f"dlrm: filling the embedding tables ({'small' if a.small else 'default'}) ...", flush=True)
            dlrm_svc = dl.DLRMService(small=a.small, config=cfg, progress=True)
            dlrm_svc.register(srv, max_batch=a.max_batch or 1024, max_delay_us=a.max_delay_us)
            gnn_cfg += dl.serve_banner(dlrm_svc)
        except ImportError as e:
            srv.close()
            print(f"--models dlrm: {e}; it needs pip install 'splitrpc[models,embedding]'", file=sys.stderr)
            return 2
        except Exception as e:  # a bad store configuration, an L3 path that cannot be written, ...
            srv.close()
            print(f"--models dlrm: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
    if gnn_names:
        try:
            for n in gnn_names:
                svc = _gnn().register_gnn(srv, n, small=a.small, policy=a.gnn_policy, threshold=a.gnn_threshold,
                                   calibration=a.gnn_calibration, point=a.gnn_point,
                                   max_batch=a.max_batch or 8, max_delay_us=a.max_delay_us or 0, device=a.device,
                                   trace=bool(a.gnn_trace),
                                   concurrent_lanes={"auto": None, "on": True, "off": False}[a.gnn_concurrent_lanes])
                gnn_svcs[n] = svc
            gnn_cfg += (f", GNN {svc.graph.name} graph ({svc.graph.num_nodes} nodes) policy {a.gnn_policy} "
                       f"threshold {svc.router.threshold:.0f}, lanes {'together' if svc.concurrent_lanes else 'in turn'}: "
                       + "; ".join(ln.label for ln in svc.lanes.values()))
        except ImportError as e:
            srv.close()
            print(f"--models: {e}; the GNN models need pip install 'splitrpc[gnn]'", file=sys.stderr)
            return 2
        except Exception as e:  # a bad calibration file or threshold, ...
            srv.close()
            print(f"--models: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
    zoo = _models().MODELS if names else {}
    served = " ".join(["vecadd(1) matmul(2) echo(3) head(4)"] + [f"{n}({zoo[n].func_id})" for n in names]
                      + [f"{n}({_gnn().FUNC_IDS[n]})" for n in gnn_names]
                      + ([f"{DLRM}({_dlrm().FUNC_ID})"] if dlrm_svc else []))
    where = ", ".join(sorted({d for n, d in srv.stats()["devices"].items() if n in names}))  # after any fallback
    model_cfg = f", models on {where}{' (small)' if a.small else ''}" if names else ""
    cost = f", {a.batch_cost_us} us per batch" if a.batch_cost_us > 0 else ""
    extra = f"{model_cfg}{gnn_cfg}{cost}"
    emb: dict = {}

    def cleanup():
        if dlrm_svc is not None:
            emb.update(dlrm_svc.store.stats())
            dlrm_svc.close()

    rc, st = _serve_loop(a, srv, served, extra, cleanup=cleanup)
    if rc:
        return rc
    if dlrm_svc is not None:
        looked = sum(t["unique"] for t in emb.values())
        hits = sum(t["l1_hits"] for t in emb.values())
        print(f"dlrm: {sum(t['lookups'] for t in emb.values())} table lookups, L1 hit rate "
              f"{hits / looked if looked else 0:.3f}", flush=True)
    for n, svc in gnn_svcs.items():
        print(f"{n}: " + "; ".join(f"{k} lane {v['batches']} batches, {v['calls']} calls, busy {v['busy_s']:.1f} s"
                                   for k, v in svc.stats().items()), flush=True)
        if a.gnn_trace:
            path = a.gnn_trace if len(gnn_svcs) == 1 else f"{a.gnn_trace.removesuffix('.npz')}.{n}.npz"
            svc.trace.save(path)
            print(f"{n}: wrote {svc.trace.n} batches to {path}"
                  + (f" ({svc.trace.dropped} more not kept)" if svc.trace.dropped else ""), flush=True)
    if a.stats_json:  # for the parent of --processes
        print("STATS " + json.dumps({k: st[k] for k in _SUMMED}), flush=True)
    return 0


_SUMMED = ("calls", "replies", "batches", "rx_datagrams", "tx_datagrams", "errors", "drops")


def _serve_loop(a, srv, served: str, extra: str, cleanup=None) -> tuple[int, dict]:
    """Serves srv until a signal (a drain of --grace seconds; a second one stops at once), with
    the admin endpoint of --admin-port and the start, ready, drain and stop lines of
    --log-format. (exit code, the server's last stats); 2 when the admin port cannot be had."""
    from splitrpc import run

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
                "grace_s": a.grace, "allow": a.allow, "processes": 1}
    events.event("start", f"splitrpc {__version__} serving {served} on {srv.host}:{srv.port} "
                          f"(wait={settings['wait']}{extra}); Ctrl-C or SIGTERM drains, a second one stops",
                 version=__version__, host=srv.host, port=srv.port, functions=[
                     {"id": f.func_id, "name": f.name} for f in srv.functions()], settings=settings)

    def ready():
        events.event("ready", f"ready: {len(srv.functions())} functions" +
                     (f"; admin: {admin.url('/metrics')} {admin.url('/healthz')} {admin.url('/readyz')}"
                      if admin else ""), admin=admin.url() if admin else None)
        if admin:  # the line scripts look for (older name)
            events.event("metrics", f"metrics: {admin.url('/metrics')}", url=admin.url("/metrics"))

    try:
        left, forced = run.serve_until_stopped(srv, grace=a.grace, events=events, on_ready=ready)
        if forced:  # a callback that does not return holds the worker: leave without it
            os._exit(1)
    finally:
        if admin:
            admin.close()
        st = srv.stats()
        srv.close()
        if cleanup:
            cleanup()
    events.event("stop", f"stopped: {_stats_line(st)}" + (f"; {left} calls unanswered" if left else ""),
                 calls=st["calls"], batches=st["batches"], errors=st["errors"], unanswered=left)
    return 0, st


def _stats_line(st: dict) -> str:
    errors = ", ".join(f"{name} {n}" for name, n in st["errors"].items() if n) or "none"
    return f"{st['calls']} calls in {st['batches']} batches; errors sent: {errors}"


def _serve_processes(a) -> int:
    """`splitrpc serve --processes N`: N server processes on one port (SO_REUSEPORT); their
    output prefixed [i]; on SIGINT/SIGTERM they stop and each one's counters and the sum are
    printed."""
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
    opts = {"--host": host, "--port": port, "--wait": a.wait, "--sched": a.sched, "--max-batch": a.max_batch,
            "--max-delay-us": a.max_delay_us, "--batch-cost-us": a.batch_cost_us, "--segment-size": a.segment_size,
            "--models": a.models, "--device": a.device, "--admin-host": a.admin_host, "--allow": a.allow,
            "--grace": a.grace, "--log-format": a.log_format,
            "--gnn-policy": a.gnn_policy, "--gnn-threshold": a.gnn_threshold, "--gnn-calibration": a.gnn_calibration,
            "--gnn-point": a.gnn_point, "--gnn-concurrent-lanes": a.gnn_concurrent_lanes}
    base = [sys.executable, "-m", "splitrpc", *(["-v"] if a.verbose else []), "serve", "--reuse-port", "--stats-json"]
    for k, v in opts.items():
        if v is not None:
            base += [k, str(v)]
    if a.small:
        base.append("--small")
    if a.target:
        base.append(a.target)
    procs, stats, ready = [], {}, threading.Semaphore(0)

    def relay(i: int, p) -> None:
        for line in p.stdout:
            if line.startswith("STATS "):
                stats[i] = json.loads(line[6:])
                continue
            print(f"[{i}] {line}", end="", flush=True)
            if line.startswith("ready:") or line.startswith('{"event": "ready"'):
                ready.release()

    for i in range(a.processes):
        admin = [] if a.admin_port is None else ["--admin-port", str(a.admin_port and a.admin_port + i)]
        # a session of its own: a terminal's Ctrl-C reaches the parent alone, which passes on one SIGTERM
        # (a child that got both would take the second for "stop at once")
        p = subprocess.Popen(base + admin, stdout=subprocess.PIPE, text=True, start_new_session=True)
        procs.append(p)
        threading.Thread(target=relay, args=(i, p), daemon=True).start()
    stop = lambda *_: [p.send_signal(signal.SIGTERM) for p in procs if p.poll() is None]  # noqa: E731
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    up = 0
    while up < a.processes and all(p.poll() is None for p in procs):
        up += ready.acquire(timeout=0.2)
    if up == a.processes:
        print(f"{a.processes} processes serving on {host}:{port} (SO_REUSEPORT: each client address goes to "
              "one of them); Ctrl-C stops", flush=True)
    else:
        stop()
    codes = [p.wait() for p in procs]
    time.sleep(0.1)  # the relays print the last lines
    for i in sorted(stats):
        print(f"process {i}: {_stats_line(stats[i])}")
    if stats:
        total = {k: sum(s[k] for s in stats.values()) for k in ("calls", "replies", "batches")}
        total["errors"] = {n: sum(s["errors"].get(n, 0) for s in stats.values()) for n in next(iter(stats.values()))["errors"]}
        print(f"together: {_stats_line(total)}", flush=True)
    return 0 if up == a.processes and not any(codes) else 1


def _request_for(a, services) -> tuple[int, bytes, object]:
    svc = services.get(a.function) or _models().MODELS.get(a.function)
    func_id = svc.func_id if svc else int(a.function, 0)
    if a.file:
        with open(a.file, "rb") as f:
            data = f.read()
    elif a.text is not None:
        data = a.text.encode()
    elif svc:
        data = svc.example(np.random.default_rng(a.seed))
    else:
        data = b""
    return func_id, data, svc


def _timed_call(a, func_id: int, data: bytes) -> tuple:
    """One call to --host/--port: (reply, microseconds), or (None, None) after printing the error."""
    with Client(a.host, a.port, timeout=a.timeout) as c:
        t0 = time.perf_counter()
        try:
            reply = c.call(func_id, data)
        except SplitRPCError as e:
            print(f"error: {e}", file=sys.stderr)
            return None, None
        return reply, (time.perf_counter() - t0) * 1e6


def _call_gnn(a) -> int:
    """`splitrpc call graphsage|gat`: an example seed list, the reply checked against a local run."""
    print(f"building the {'small' if a.small else 'reddit-like'} graph and {a.function} to check the reply ...",
          flush=True)
    gnn = _gnn()
    try:
        svc = gnn.GNNService(a.function, small=a.small)  # imports torch, scipy, torch-geometric
    except ImportError as e:
        print(f"{e}; the GNN models need pip install 'splitrpc[gnn]'", file=sys.stderr)
        return 2
    func_id = gnn.FUNC_IDS[a.function]
    data = svc.example(np.random.default_rng(a.seed))
    reply, dt = _timed_call(a, func_id, data)
    if reply is None:
        return 1
    seeds = np.frombuffer(data, "<i8")
    print(f"function {func_id}: {len(seeds)} seeds {seeds.tolist()} "
          f"(PSGS {float(svc.psgs[seeds].sum()):.0f}) -> {len(reply)} B reply in {dt:.0f} us (one cold call)")
    ok = svc.check_reply(data, reply)
    print("reply matches the model's output within tolerance:", ok)
    if len(reply) % 4 == 0 and reply:
        v = np.frombuffer(reply, "<f4").reshape(len(seeds), -1)
        print(f"logits float32[{v.shape[0]}, {v.shape[1]}]: seed {seeds[0]}: {np.array2string(v[0, :6], precision=4)} ...")
    if a.output:
        with open(a.output, "wb") as f:
            f.write(reply)
    return 0 if ok else 1


def _call_dlrm(a) -> int:
    """`splitrpc call dlrm`: an example request (Zipf keys), the reply checked against the model
    over the exact tables."""
    try:
        model = _dlrm().DLRM(small=a.small)  # imports torch
    except ImportError as e:
        print(f"{e}; dlrm needs pip install 'splitrpc[models,embedding]'", file=sys.stderr)
        return 2
    data = model.example(np.random.default_rng(a.seed))
    reply, dt = _timed_call(a, _dlrm().FUNC_ID, data)
    if reply is None:
        return 1
    keys = np.frombuffer(data[4 * _dlrm().DENSE:], "<i8")
    print(f"function {_dlrm().FUNC_ID}: 13 dense features, 26 keys {keys[:6].tolist()}... -> {len(reply)} B reply "
          f"in {dt:.0f} us (one cold call)")
    ok = model.check_reply(data, reply)
    if len(reply) == 4:
        print(f"click probability {float(np.frombuffer(reply, '<f4')[0]):.6f}")
    print("reply matches the model over the exact tables:", ok)
    if a.output:
        with open(a.output, "wb") as f:
            f.write(reply)
    return 0 if ok else 1


def cmd_describe(a) -> int:
    """`splitrpc describe HOST:PORT`: the server's functions as a table (or its JSON)."""
    from splitrpc.describe import NotDescribed

    try:
        host, port = split_address(a.address)
    except ValueError:
        print(f"splitrpc describe: {a.address!r} is not HOST:PORT", file=sys.stderr)
        return 2
    try:
        with Client(host, port if port is not None else a.port, timeout=a.timeout) as c:
            d = c.describe()
    except (SplitRPCError, NotDescribed) as e:
        print(f"splitrpc describe: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if a.json:
        from splitrpc import describe as describe_

        print(json.dumps({"describe": describe_.LAYOUT, "software": d.software, "max_message": d.max_message,
                          "protocols": list(d.protocols), "functions": [f.to_json() for f in d.functions]}, indent=1))
        return 0
    print(f"{d.software}; protocols {', '.join(map(str, d.protocols))}; messages up to {d.max_message} B; "
          f"{len(d.functions)} functions")
    rows = [("id", "name", "version", "inputs", "outputs", "max_batch", "executor", "priority", "device")]

    def specs(fs) -> str:
        return ", ".join(f"{s.name}:{s.np_dtype.name}{list(s.shape)}" for s in fs)

    for f in d.functions:
        ins, outs = ((f"raw <= {f.max_request} B", f"raw <= {f.max_response} B") if f.raw
                     else (specs(f.inputs), specs(f.outputs)))
        rows.append((str(f.func_id), f.name, f.version or "-", ins, outs, str(f.max_batch), f.executor,
                     str(f.priority), f.device))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    return 0


def _call_described(a) -> int:
    """`splitrpc call NAME` for a function this command does not know: the server's describe gives
    its specs; random inputs (or --file/--text); the reply shown by its output specs."""
    from splitrpc.describe import NotDescribed

    try:
        with Client(a.host, a.port, timeout=a.timeout) as c:
            d = c.describe()
    except (SplitRPCError, NotDescribed) as e:
        print(f"splitrpc call: unknown function {a.function!r}: not a built-in name ({', '.join(_services()[0])}, "
              f"a model, or a number), and the server did not describe itself ({type(e).__name__}: {e})",
              file=sys.stderr)
        return 2
    try:
        info = d.by_name(a.function)
    except KeyError as e:
        print(f"splitrpc call: {e.args[0]}", file=sys.stderr)
        return 2
    if a.file:
        with open(a.file, "rb") as f:
            data = f.read()
    elif a.text is not None:
        data = a.text.encode()
    else:
        try:
            data = info.example(np.random.default_rng(a.seed), max_bytes=d.max_message)
        except ValueError as e:
            print(f"splitrpc call: {e} (--file or --text)", file=sys.stderr)
            return 2
    reply, dt = _timed_call(a, info.func_id, data)
    if reply is None:
        return 1
    print(f"{info.name} (function {info.func_id}): {len(data)} B request -> {len(reply)} B reply in {dt:.0f} us")
    if a.output:
        with open(a.output, "wb") as f:
            f.write(reply)
    elif not info.raw and len(reply) == sum(s.nbytes for s in info.outputs):
        at = 0
        for s in info.outputs:
            v = np.frombuffer(reply, s.np_dtype, count=int(np.prod(s.shape)), offset=at)
            at += s.nbytes
            print(f"{s.name} {s.np_dtype.name}{list(s.shape)}: {np.array2string(v[:8], precision=4)}"
                  + (" ..." if v.size > 8 else ""))
    else:
        print(repr(reply[:256]) + (" ..." if len(reply) > 256 else ""))
    return 0


def cmd_call(a) -> int:
    if a.function in _gnn().FUNC_IDS and not a.file and a.text is None:
        return _call_gnn(a)
    if a.function == DLRM and not a.file and a.text is None:
        return _call_dlrm(a)
    services, _ = _services()
    try:
        func_id, data, svc = _request_for(a, services)
    except ValueError:  # not a name this command knows: ask the server
        return _call_described(a)
    reply, dt = _timed_call(a, func_id, data)
    if reply is None:
        return 1
    print(f"function {func_id}: {len(data)} B request -> {len(reply)} B reply in {dt:.0f} us (one cold call)")
    model = svc if isinstance(svc, _models().ModelInfo) else None
    if model and not a.file and a.text is None:
        try:
            ok = _models().check_reply(model.name, data, reply, small=a.small)
        except ImportError as e:
            print(f"reply not checked: {e}")
        else:
            print("reply matches the model's output within tolerance:", ok)
    elif svc and not a.file and a.text is None:
        print("reply matches the expected output:", reply == svc.expected(data))
    if a.output:
        with open(a.output, "wb") as f:
            f.write(reply)
    elif model and len(reply) == model.reply_size:
        for spec, v in zip(model.outputs, _models().split(model.outputs, reply)):
            v = v.ravel()
            print(f"{spec.name} {spec.np_dtype.name}{list(spec.shape)}: {np.array2string(v[:8], precision=4)}"
                  + (" ..." if v.size > 8 else ""))
    elif len(reply) % 4 == 0 and func_id in (1, 2, 4):
        v = np.frombuffer(reply, "<f4")
        print("float32[%d]: %s" % (v.size, np.array2string(v[:8], precision=4)) + (" ..." if v.size > 8 else ""))
    else:
        try:
            print(repr(reply[:256].decode("utf-8")) + (" ..." if len(reply) > 256 else ""))
        except UnicodeDecodeError:
            print(reply[:256].hex() + (" ..." if len(reply) > 256 else ""))
    return 0


def _summary(name: str, conc: int, res: dict) -> str:
    lat = res["latency_ns"]
    ok = lat[lat > 0]
    if ok.size == 0:
        return f"{name:8s} {conc:5d}  all {res['errors']} calls failed"
    tput = ok.size / res["elapsed_s"] if res["elapsed_s"] else 0.0
    pct = percentiles(ok, (50, 99))  # ns; the tables of `splitrpc load` and the benchmarks use the same
    return (f"{name:8s} {conc:5d} {pct[50] / 1e3:9.1f} {pct[99] / 1e3:9.1f} "
            f"{tput:12.0f} {res['errors']:7d}")


def cmd_demo(a) -> int:
    services, register = _services()
    srv = Server(a.host, 0, wait=a.wait)
    register(srv)
    srv.start()
    port = srv.port
    wait = a.wait or SERVER_DEFAULTS["wait"]
    print(f"splitrpc {__version__} demo: server on {srv.host}:{port} (wait={wait}), features {features()}")
    print(f"closed loop, {a.calls} calls per row after {a.calls // 10} warm-up calls; latency in microseconds")
    print(f"{'service':8s} {'conc':>5s} {'p50':>9s} {'p99':>9s} {'calls/s':>12s} {'errors':>7s}")
    rng = np.random.default_rng(1)
    failed = 0
    try:
        with Client(srv.host, port, timeout=2.0, busy_poll=wait == "poll") as c:
            for name in ("vecadd", "matmul", "echo", "head"):
                svc = services[name]
                data = svc.example(rng)
                reply = c.call(svc.func_id, data)
                if reply != svc.expected(data):
                    print(f"{name}: WRONG REPLY", file=sys.stderr)
                    failed += 1
                    continue
                for conc in (1, 16):
                    n = a.calls if name != "head" else max(a.calls // 10, 20)
                    res = c.closed_loop(svc.func_id, data, concurrency=conc, calls=n, warmup=max(n // 10, 1))
                    failed += res["errors"]
                    print(_summary(name, conc, res), flush=True)
    finally:
        st = srv.stats()
        srv.close()
    drops = {k: v for k, v in st["drops"].items() if v}
    why = f" ({', '.join(f'{k} {v}' for k, v in drops.items())})" if drops else ""
    print(f"server: {st['calls']} calls in {st['batches']} batches (mean batch {st['mean_batch']:.2f}), "
          f"drops {sum(drops.values())}{why}, errors {sum(st['errors'].values())}")
    if drops.get("duplicate"):
        print("  (duplicate: the client sent a request again while the server still ran it: a reply that took "
              "longer than the retransmission timeout; the server never runs a call twice)")
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="splitrpc", description="splitrpc: low-latency RPC for ML inference",
                                epilog="splitrpc --cflags --libs: the flags to build a C program against the installed C client "
                                       "(python -m splitrpc.config; examples/c_client.c)")
    p.add_argument("--version", action="version", version=f"splitrpc {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log what the server does")
    sub = p.add_subparsers(dest="cmd", required=True)

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
    s.add_argument("--batch-cost-us", type=int, default=0, metavar="US",
                   help="the built-in services sleep this long per batch (a fixed service time, as on a GPU): "
                        "a server of known capacity, about max-batch * 1e6 / US calls/s")
    s.add_argument("--segment-size", type=int, help="reply segment size to non-loopback clients "
                                                     f"(default: {SERVER_DEFAULTS['segment_size']})")
    s.add_argument("--models", metavar="NAMES",
                   help="also serve these PyTorch models: a comma list of lenet, lstm, resnet18, resnet50, "
                        "bert-like, or all (needs pip install 'splitrpc[models]'); the GNN models "
                        "graphsage, gat (pip install 'splitrpc[gnn]'); dlrm over the embedding store "
                        "(pip install 'splitrpc[models,embedding]')")
    from splitrpc.services.gnn.calibrate import POINTS

    s.add_argument("--gnn-policy", default="routed", choices=_gnn().POLICIES,
                   help="GNN models (graphsage, gat): route each batch by its PSGS, or always one lane")
    s.add_argument("--gnn-threshold", type=float, metavar="PSGS",
                   help="GNN routing threshold (a batch's summed PSGS); default: --gnn-calibration's, else built in")
    s.add_argument("--gnn-calibration", metavar="FILE", help="a calibration file of `splitrpc calibrate`")
    s.add_argument("--gnn-point", choices=tuple(POINTS),
                   help="which crossing point of the calibration routes (default: the one the file names)")
    s.add_argument("--gnn-concurrent-lanes", default="auto", choices=("auto", "on", "off"),
                   help="routed GNN models: run a batch on each lane at once (on), or one batch at a time "
                        "(off); auto: on only where the other lane is a GPU (default: %(default)s)")
    s.add_argument("--gnn-trace", metavar="FILE.npz",
                   help="record every GNN batch (lane, summed PSGS, calls, service time) and write them here "
                        "when stopped (one file per GNN model: FILE.MODEL.npz when several)")
    s.add_argument("--embedding-store", metavar="CONFIG.json",
                   help="dlrm: the embedding store's configuration (docs/embedding.md); default: an embedded "
                        "store (RocksDB in a temporary directory, host hash map, L1 at 5%%, exact lookups)")
    s.add_argument("--device", default="cpu", help="where the models run: cpu, cuda, cuda:N")
    s.add_argument("--small", action="store_true", help="the models' small configurations (same I/O sizes)")
    s.add_argument("--admin-port", type=int, metavar="PORT",
                   help="admin HTTP endpoint: /metrics (Prometheus), /healthz, /readyz at http://HOST:PORT "
                        "(0: any free port)")
    s.add_argument("--admin-host", default="127.0.0.1", help="address of the admin endpoint (default: %(default)s)")
    s.add_argument("--metrics-port", type=int, metavar="PORT", help=argparse.SUPPRESS)  # the older --admin-port
    s.add_argument("--grace", type=float, default=30.0, metavar="S",
                   help="on SIGTERM or Ctrl-C: take no new calls (DRAINING), answer those received for up to S "
                        "seconds, then stop; a second signal stops at once (default: %(default)s)")
    s.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="start, ready, drain and stop lines as text or one JSON object per line")
    s.add_argument("--allow", metavar="NETS", help="serve only these client networks, e.g. 10.0.0.0/8,127.0.0.1 "
                                                   "(others are dropped and counted as not_allowed)")
    s.add_argument("--processes", type=int, default=1, metavar="N",
                   help="N server processes on one port (SO_REUSEPORT; --admin-port P: process i on P+i)")
    s.add_argument("--reuse-port", action="store_true", help="let other processes bind the same port")
    s.add_argument("--stats-json", action="store_true", help=argparse.SUPPRESS)  # a --processes child's
    s.set_defaults(func=cmd_serve)

    c = sub.add_parser("call", help="make one call and print the reply")
    c.add_argument("function", help="vecadd, matmul, echo, head, a model (lenet, lstm, resnet18, resnet50, "
                                    "bert-like, graphsage, gat, dlrm), a numeric func_id, or the name of any "
                                    "function the server describes (random inputs from its specs)")
    c.add_argument("--host", help=f"the server's address (default: {CLIENT_DEFAULTS['host']})")
    c.add_argument("--port", type=int, help=f"the server's UDP port (default: {CLIENT_DEFAULTS['port']})")
    c.add_argument("--file", help="request bytes from this file")
    c.add_argument("--text", help="request bytes: this UTF-8 text")
    c.add_argument("--output", help="write the reply bytes to this file")
    c.add_argument("--timeout", type=float, default=2.0, help="seconds (default: %(default)s)")
    c.add_argument("--seed", type=int, default=0, help="seed of the example input")
    c.add_argument("--small", action="store_true", help="a model's reply is checked against its small configuration")
    c.set_defaults(func=cmd_call)

    ds = sub.add_parser("describe", help="what a server serves: its functions, their specs and settings")
    ds.add_argument("address", metavar="HOST:PORT", help="the server (HOST alone: --port)")
    ds.add_argument("--port", type=int, help=f"the server's UDP port (default: {CLIENT_DEFAULTS['port']})")
    ds.add_argument("--timeout", type=float, default=2.0, help="seconds (default: %(default)s)")
    ds.add_argument("--json", action="store_true", help="the description as JSON")
    ds.set_defaults(func=cmd_describe)

    d = sub.add_parser("demo", help="start a server, load each service, print p50/p99 and throughput")
    d.add_argument("--host", help=f"the server's address (default: {SERVER_DEFAULTS['host']})")
    d.add_argument("--calls", type=int, default=2000)
    d.add_argument("--wait", choices=tuple(WAIT_MODES),
                   help=f"the server's wait mode (default: {SERVER_DEFAULTS['wait']})")
    d.set_defaults(func=cmd_demo)

    from splitrpc.check.cli import add_parser as add_check_parser

    add_check_parser(sub)
    from splitrpc.loadgen.load_cli import add_parser as add_load_parser

    add_load_parser(sub)
    from splitrpc.bench.dpdk_veth import add_parser as add_bench_dpdk_parser
    from splitrpc.bench.models_e2e import add_parser as add_bench_models_parser
    from splitrpc.bench.orchestration import add_parser as add_bench_orchestration_parser
    from splitrpc.bench.overload import add_parser as add_bench_overload_parser
    from splitrpc.bench.sidebyside import add_parser as add_bench_parser

    add_bench_parser(sub)
    add_bench_models_parser(sub)
    add_bench_orchestration_parser(sub)
    add_bench_dpdk_parser(sub)
    add_bench_overload_parser(sub)
    from splitrpc.bench.gnn import add_parser as add_bench_gnn_parser
    from splitrpc.bench.colocate import add_parser as add_bench_colocate_parser
    from splitrpc.bench.embedding import add_parser as add_bench_embedding_parser
    from splitrpc.bench.colocate_sim import add_parser as add_bench_colocate_sim_parser
    from splitrpc.services.planning.provision_command import add_parser as add_provision_parser
    from splitrpc.bench.fleet import add_parser as add_bench_fleet_parser
    from splitrpc.services.planning.tune_command import add_parser as add_tune_parser
    from splitrpc.services.fleet.commands import add_parser as add_fleet_parser  # ray only when run
    from splitrpc.services.gnn.lane_timing import add_parser as add_calibrate_parser  # numpy only until run

    add_bench_gnn_parser(sub)
    add_bench_colocate_parser(sub)
    add_bench_embedding_parser(sub)
    add_provision_parser(sub)
    add_fleet_parser(sub)
    add_tune_parser(sub)
    add_bench_fleet_parser(sub)
    add_bench_colocate_sim_parser(sub)
    add_calibrate_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    from splitrpc import config

    if args and args[0] in config.OPTIONS:  # `splitrpc --cflags --libs`: the C client's build flags
        return config.main(args)
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="%(name)s: %(message)s")
    return a.func(a)


if __name__ == "__main__":
    sys.exit(main())
