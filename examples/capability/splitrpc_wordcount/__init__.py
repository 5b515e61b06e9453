"""splitrpc_wordcount: an example capability of splitrpc (examples/capability/README.md): `serve --models wordcount` serves a function that counts the words of a UTF-8 text (its reply: the count as a little-endian uint32), with a Prometheus counter of the words it counted, a `splitrpc wordcount` command, a `splitrpc check` section and a `splitrpc bench wordcount` suite. Like every capability's module it imports only the standard library, numpy and splitrpc at module level."""
from __future__ import annotations

import struct
import threading
import time

from splitrpc.check import Section
from splitrpc.plugins import Callee, Capability, Serving

NAME = "wordcount"
FUNC_ID = 310
MAX_TEXT = 4096  # bytes of text a call may send


def count(text: bytes) -> int:
    """The words of a UTF-8 text (runs of non-whitespace); a text that is not UTF-8 counts as bytes."""
    return len(text.decode("utf-8", "replace").split())


class Counter:
    """The served function's state: words counted, read by the stats source on another thread."""

    def __init__(self) -> None:
        self.words = 0
        self.lock = threading.Lock()

    def function(self, requests, responses):
        """The raw batch callback: one uint32 count per request."""
        n = 0
        for req, resp in zip(requests, responses):
            c = count(bytes(req))
            resp[:4] = struct.pack("<I", c)
            n += c
        with self.lock:
            self.words += n
        return [4] * len(requests)

    def stats(self) -> dict:
        with self.lock:
            return {"words": self.words}


def metrics(st: dict, prefix: str):
    """The capability's metric families for /metrics (Server.add_stats_source's metrics=)."""
    from splitrpc.metrics import family

    f = family(prefix, "counter", "wordcount_words", "Words counted by the wordcount function.")
    f.add_metric([], int(st["words"]))
    yield f


def register(server) -> Counter:
    """The function and its stats source on server."""
    c = Counter()
    server.add_function(c.function, FUNC_ID, NAME, raw=True, max_request=MAX_TEXT, max_response=4)
    server.add_stats_source(NAME, c.stats, metrics=metrics)
    return c


def run_check(ctx):
    """The check section: a loopback server with the function; replies and the stats checked."""
    import splitrpc
    from splitrpc.check import Result, expect
    from splitrpc.check.serving import loopback_server, settled

    texts = [b"", b"one", b"two words", "drei Wörter hier".encode(), b" \t spaced   out \n"]
    with loopback_server(register) as srv:
        with splitrpc.Client("127.0.0.1", srv.port, timeout=10.0) as c:
            for t in texts:
                got = struct.unpack("<I", c.call(FUNC_ID, t))[0]
                expect(got == count(t), f"{t!r}: {got} words, not {count(t)}")
        st = settled(srv, lambda s: s.get(NAME, {}).get("words") == sum(map(count, texts)))
    expect(st[NAME]["words"] == sum(map(count, texts)), f"the stats counted {st[NAME]} words")
    return Result(summary=f"{len(texts)} texts counted right, {st[NAME]['words']} words in the stats")


def bench(a) -> int:
    """`splitrpc bench wordcount`: calls/s of the function over loopback, one call at a time."""
    import splitrpc

    srv = splitrpc.Server("127.0.0.1", 0)
    register(srv)
    srv.start()
    try:
        with splitrpc.Client("127.0.0.1", srv.port, timeout=5.0) as c:
            text = b"the quick brown fox jumps over the lazy dog"
            t0 = time.perf_counter()
            for _ in range(a.calls):
                c.call(FUNC_ID, text)
            dt = time.perf_counter() - t0
    finally:
        srv.close()
    print(f"wordcount: {a.calls} calls in {dt:.2f} s, {a.calls / dt:,.0f} calls/s (one at a time, loopback)")
    return 0


# The check runs each section in a child process, which finds it by name in its module's SECTIONS.
SECTIONS = [Section(NAME, "the example capability: its function over loopback, replies and stats checked", run_check,
                    cap_s=20, stage="host")]


class WordCount(Capability):
    name = NAME
    order = 80
    models_help = f"{NAME} (the example capability's)"

    def add_commands(self, sub) -> None:
        p = sub.add_parser(NAME, help="count the words of a text (the example capability's command)")
        p.add_argument("words", nargs="+")
        p.set_defaults(func=lambda a: print(f"{count(' '.join(a.words).encode())} words") or 0)

    def add_bench_suites(self, suites) -> None:
        p = suites.add_parser(NAME, help="the example capability's function, one call at a time")
        p.add_argument("--calls", type=int, default=2000)
        p.set_defaults(func=bench)

    def check_sections(self) -> list:
        return SECTIONS

    def claims(self, name: str) -> bool:
        return name == NAME

    def serve(self, server, names, args):
        if NAME not in names:
            return None
        register(server)
        return Serving([f"{NAME}({FUNC_ID})"])

    def callee_names(self) -> tuple:
        return (NAME,)

    def callee(self, name, args, checked=True):
        if name != NAME:
            return None
        return Callee(NAME, FUNC_ID, example=lambda rng: b"an example text of six words",
                      expected=lambda q: struct.pack("<I", count(q)),
                      show=lambda reply: [f"{struct.unpack('<I', reply)[0]} words"] if len(reply) == 4 else None)


CAPABILITY = WordCount()
