"""serving.py: what the serving sections of `splitrpc check` share: a loopback server that is always closed, waves of calls whose every reply is checked, and stats read once the server has counted its last reply."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import splitrpc
from splitrpc.check.section import Cut, Skipped, expect, failing

LOOPBACK = "127.0.0.1"


@contextmanager
def loopback_server(setup: Callable[[splitrpc.Server], object], **kw: Any) -> Iterator[splitrpc.Server]:
    """A started server on 127.0.0.1 (a free port) with setup(srv)'s functions; closed on exit."""
    srv = splitrpc.Server(LOOPBACK, 0, **kw)
    try:
        setup(srv)
        srv.start()
        yield srv
    except (Skipped, Cut):
        raise  # not a failure, should the close then hang
    except BaseException as e:
        failing(f"{type(e).__name__}: {e}")  # said before the close, which may be what hangs
        raise
    finally:
        srv.close()


def settled(srv: splitrpc.Server, pred: Callable[[dict[str, Any]], bool], timeout: float = 10.0) -> dict[str, Any]:
    """srv.stats() once pred(stats) holds, or the last one after timeout seconds (a reply's
    counters are bumped just after it is sent, so a client can hold it a moment earlier)."""
    end = time.monotonic() + timeout
    st = srv.stats()
    while not pred(st) and time.monotonic() < end:
        time.sleep(0.01)
        st = srv.stats()
    return st


def wave(c: splitrpc.Client, func_id: int, requests: list[bytes], right: Callable[[bytes, bytes], bool],
         what: str) -> int:
    """Sends every request at once (the server batches them) and checks each reply with
    right(request, reply); Failed names the first wrong one. Returns the calls made."""
    futs = [c.call_async(func_id, r) for r in requests]
    for i, (r, f) in enumerate(zip(requests, futs)):
        rep = f.result()
        expect(right(r, rep), f"{what}: the reply to call {i} of {len(requests)} is wrong ({len(rep)} B)")
    return len(requests)


def errors_sent(st: dict[str, Any]) -> dict[str, int]:
    """The error answers a server sent (its stats), but BUSY: a wave larger than a function's
    queue is flow-controlled (the client waits and sends again within the call's deadline)."""
    return {k: v for k, v in st["errors"].items() if v and k != "BUSY"}
