"""zmq_peer.py: the benchmark services over pyzmq, a ROUTER server and a DEALER client with tagged requests in flight.

    python -m splitrpc.bench.helpers.peers.zmq_peer serve  --service vecadd --port 5555
    python -m splitrpc.bench.helpers.peers.zmq_peer client --service vecadd --port 5555 --concurrency 16 --calls 5000 --warmup 500

Over TCP on 127.0.0.1. The client sends [tag, request] (tag: 8 bytes, little-endian, unique in
the run) and the server answers [tag, reply], or [tag, b"ERR", message] when the request is not
valid; the tag matches a reply to its call and its send time. One thread keeps `--concurrency`
requests outstanding. `serve` prints READY once bound and stops on SIGTERM/SIGINT; `client`
prints one JSON line (see common.result).
"""
from __future__ import annotations

import sys
import time

from splitrpc.bench.helpers.peers import common

try:
    import zmq
    _IMPORT_ERROR = None
except ImportError as e:  # the orchestrator reports it instead of crashing
    zmq = None
    _IMPORT_ERROR = e

PEER = "pyzmq"
VARIANTS = ("router-dealer",)
ERR = b"ERR"


def available() -> tuple[bool, str]:
    """Whether pyzmq imports here, and why not."""
    if zmq is None:
        return False, f"pyzmq not installed ({_IMPORT_ERROR})"
    return True, f"pyzmq {zmq.__version__} (libzmq {zmq.zmq_version()})"


def serve(args) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.linger = 0
    # A receive that waits at most 100 ms, and the loop round it, let SIGTERM stop the server: the
    # kernel may deliver it to another thread (OpenBLAS's, which numpy starts unmasked), and then
    # nothing interrupts the main thread's wait in libzmq (it ran until killed, 60 s later in
    # test_peers). A message already queued is taken at once, so the timeout costs nothing per call.
    sock.rcvtimeo = 100
    sock.bind(f"tcp://{args.host}:{args.port}")
    common.interrupt_on_sigterm()
    try:
        common.ready()
        while True:
            try:
                frames = sock.recv_multipart(copy=False)
            except zmq.Again:
                continue
            if len(frames) != 3:  # [peer identity, tag, request]; anything else is not ours
                continue
            ident, tag, request = frames
            try:
                reply = [ident, tag, common.compute(args.service, request.buffer)]
            except ValueError as e:
                reply = [ident, tag, ERR, str(e).encode()]
            sock.send_multipart(reply, copy=False)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        ctx.term()


def run_phase(sock, tally, request: bytes, concurrency: int, timeout_s: float, tags) -> None:
    """Keeps `concurrency` requests in flight until the tally's calls are made; a request with no
    reply after timeout_s fails (its late reply, if any, is dropped: its tag is no longer known)."""
    n = len(tally.lat_ns)
    timeout_ns = int(timeout_s * 1e9)
    outstanding = {}  # tag -> (slot, send time); insertion order = send order, the first is the oldest
    next_slot = 0

    def fill() -> None:
        nonlocal next_slot
        while next_slot < n and len(outstanding) < concurrency and not tally.given_up:
            tag = next(tags)
            t0 = time.perf_counter_ns()
            try:
                sock.send_multipart([tag.to_bytes(8, "little"), request])
            except zmq.Again:
                tally.fail(next_slot, f"send timeout: not sent in {timeout_s} s")
            else:
                outstanding[tag] = (next_slot, t0)
            next_slot += 1

    fill()
    while outstanding and not tally.given_up:
        oldest = next(iter(outstanding.values()))[1]
        sock.rcvtimeo = max(1, -(-(oldest + timeout_ns - time.perf_counter_ns()) // 1_000_000))
        try:
            frames = sock.recv_multipart()
        except zmq.Again:
            now = time.perf_counter_ns()
            for tag in [t for t, (_, t0) in outstanding.items() if now - t0 >= timeout_ns]:
                tally.fail(outstanding.pop(tag)[0], f"timeout: no reply in {timeout_s} s")
            fill()
            continue
        t1 = time.perf_counter_ns()
        entry = outstanding.pop(int.from_bytes(frames[0], "little"), None)
        if entry is None:
            continue  # the reply of a call already counted as timed out
        slot, t0 = entry
        if len(frames) == 2:
            tally.reply(slot, t1 - t0, frames[1])
        else:
            tally.fail(slot, "server error: " + b" ".join(frames[1:]).decode(errors="replace"))
        fill()


def client(args) -> dict:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.sndtimeo = max(1, int(args.timeout_s * 1000))
    sock.connect(f"tcp://{args.host}:{args.port}")
    tags = iter(range(1, 1 << 62))  # shared by both phases: a late warm-up reply matches nothing
    try:
        return common.measure(args, PEER, lambda tally, request, conc:
                              run_phase(sock, tally, request, conc, args.timeout_s, tags))
    finally:
        sock.close()
        ctx.term()


def main(argv=None) -> int:
    p, _ = common.parser("zmq_peer", VARIANTS, __doc__)
    return common.run_cli(p, p.parse_args(argv), available, serve, client)


if __name__ == "__main__":
    sys.exit(main())
