"""splitrpc's own client on protocol version 5 (docs/PROTOCOL-v5.md): Client(key=) makes a session before its first call and speaks sessions by default, with encryption when asked; a restarted server's NO_SESSION makes it handshake again and its calls run once there; rekeys happen under a steady load without a failed or doubled call; a wrong key fails with Unavailable; Pool, the asyncio client and the CLI's key= speak sessions too; version 4 only when asked."""
import asyncio
import contextlib
import re
import socket
import threading
import time

import numpy as np
import pytest

import splitrpc
import splitrpc.aio
from splitrpc import Key, KeyTable
from splitrpc._native import auth as _auth
from splitrpc.errors import Forbidden, Unavailable

pytestmark = pytest.mark.skipif(not _auth.available(), reason="libsodium's shared library is not installed")

ECHO, OTHER = 10, 11


def _setup(runs):
    def setup(srv):
        def raw(name):
            def fn(reqs, resps):
                for q, r in zip(reqs, resps):
                    runs[name].append(bytes(q[:64]))
                    r[:len(q)] = q
                return [len(q) for q in reqs]
            return fn
        srv.add_function(raw("echo"), ECHO, "echo", raw=True, max_request=70000, max_response=70000)
        srv.add_function(raw("other"), OTHER, "other", raw=True, max_request=64, max_response=64)
    return setup


@pytest.fixture
def keys():
    return {"all": Key.generate(7), "echo_only": Key.generate(8, functions=["echo"])}


@pytest.fixture
def table(keys):
    return KeyTable([keys["all"], keys["echo_only"]], skew=5.0)


@pytest.mark.parametrize("encrypt", [False, True])
def test_keyed_client_speaks_sessions(make_server, make_client, keys, table, encrypt):
    runs = {"echo": [], "other": []}
    srv = make_server(_setup(runs), keys=table)
    c = make_client(srv.port, key=keys["all"], encrypt=encrypt, timeout=5)
    assert c.call(ECHO, b"hello") == b"hello"
    big = np.random.default_rng(1).bytes(60000)  # one large datagram on loopback
    assert c.call(ECHO, big) == big
    futs = [c.call_async(ECHO, bytes([i]) * 100) for i in range(50)]
    assert [f.result(5) for f in futs] == [bytes([i]) * 100 for i in range(50)]
    st = c.stats()
    assert st["handshakes"] == 1 and st["bad_auth"] == 0 and st["no_sessions"] == 0
    assert len(runs["echo"]) == 52, "each call ran once"
    assert srv.stats()["drops"].get("auth_missing", 0) == 0
    e = make_client(srv.port, key=keys["echo_only"], encrypt=encrypt, timeout=5)
    with pytest.raises(Forbidden):
        e.call(OTHER, b"x")
    assert not runs["other"]


def test_segments_under_a_session(make_server, make_client, keys, table):
    """A request and a reply of many datagrams each (segment size 1000), encrypted."""
    runs = {"echo": [], "other": []}
    srv = make_server(_setup(runs), keys=table)
    c = make_client(srv.port, key=keys["all"], encrypt=True, segment_size=1000, timeout=5)
    data = np.random.default_rng(2).bytes(50_000)
    assert c.call(ECHO, data) == data
    assert len(runs["echo"]) == 1


def test_restarted_server_costs_one_round_trip_and_runs_each_call_once(make_client, keys, table):
    runs_a = {"echo": [], "other": []}
    a = splitrpc.Server("127.0.0.1", 0, keys=table, wait="block")
    _setup(runs_a)(a)
    a.start()
    port = a.port
    c = make_client(port, key=keys["all"], timeout=5)
    try:
        assert c.call(ECHO, b"before") == b"before"
    finally:
        a.close()
    runs_b = {"echo": [], "other": []}
    b = splitrpc.Server("127.0.0.1", port, keys=table, wait="block")
    try:
        _setup(runs_b)(b)
        b.start()
        assert c.call(ECHO, b"after the restart") == b"after the restart"
        st = c.stats()
        assert st["no_sessions"] == 1 and st["handshakes"] == 2, st
        assert runs_b["echo"] == [b"after the restart"], "the call ran once on the new server"
        for i in range(20):
            assert c.call(ECHO, b"%d" % i) == b"%d" % i
        assert len(runs_b["echo"]) == 21 and c.stats()["handshakes"] == 2
    finally:
        b.close()


def test_rekeys_under_load_lose_and_double_no_call(make_server, make_client, keys, table):
    """A session followed by a new one every 0.3 s while two threads keep calls going: no call
    fails, none runs twice, and the server's sessions follow one another (one line)."""
    runs = {"echo": [], "other": []}
    srv = make_server(_setup(runs), keys=table)
    c = make_client(srv.port, key=keys["all"], rekey=0.3, timeout=5)
    sent, errors = [], []
    stop = time.monotonic() + 2.0

    def worker(t):
        i = 0
        while time.monotonic() < stop:
            m = b"%d-%d" % (t, i)
            try:
                assert c.call(ECHO, m) == m
                sent.append(m)
            except Exception as e:  # noqa: BLE001 - any failure is the test's finding
                errors.append(repr(e))
            i += 1

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    st = c.stats()
    assert not errors, errors[:5]
    assert st["rekeys"] >= 4 and st["handshakes"] >= 5, st
    assert sorted(runs["echo"]) == sorted(sent), "every call ran exactly once"
    assert st["no_sessions"] == 0


def test_sessions_moved_on_from_are_forgotten_by_a_serving_server(make_server, make_client, keys, table):
    """A serving server forgets the sessions a client has moved on from, stale_ms (half the reply
    cache's time) after it is seen on the new one, idle included: its gauge falls back to the
    client's current session, which it keeps (the sweep once read the clock on every receive step;
    it runs from the timers and after receives now, so this shows they do run it)."""
    runs = {"echo": [], "other": []}
    srv = make_server(_setup(runs), keys=table, reply_cache_ttl=1.0)
    c = make_client(srv.port, key=keys["all"], rekey=0.3, timeout=5)
    stop = time.monotonic() + 1.6
    while time.monotonic() < stop:
        assert c.call(ECHO, b"x") == b"x"
    made = srv.stats()["auth"]["sessions_made"]
    assert made >= 4 and c.stats()["rekeys"] >= 3, (srv.stats()["auth"], c.stats())
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and srv.stats()["auth"]["sessions"] > 2:
        time.sleep(0.1)
    a = srv.stats()["auth"]
    assert a["sessions"] <= 2 and a["sessions_forgotten"] >= made - 2, a
    assert c.call(ECHO, b"y") == b"y"
    assert c.stats()["no_sessions"] == 0, c.stats()  # its current session was still there
    metrics = pytest.importorskip("splitrpc.metrics")
    text = metrics.prometheus_text(srv.stats())
    assert re.search(r"^splitrpc_auth_sessions \d+\.0$", text, re.M), text  # (the call may have rekeyed)
    assert re.search(r"^splitrpc_auth_sessions_forgotten_total (\d+)\.0$", text, re.M), text


def test_wrong_key_fails_with_unavailable(make_server, make_client, table):
    srv = make_server(_setup({"echo": [], "other": []}), keys=table)
    stranger = Key.generate(7)  # the right id, another secret
    c = make_client(srv.port, key=stranger, timeout=30)
    t0 = time.monotonic()
    with pytest.raises(Unavailable, match="answered none of the handshake's INITs"):
        c.call(ECHO, b"x")
    took = time.monotonic() - t0
    assert 12.0 < took < 20.0, took
    assert c.stats()["handshakes_failed"] == 1
    assert srv.stats()["drops"].get("auth_bad_tag", 0) >= 6  # every INIT refused, none answered


def test_pool_and_asyncio_speak_sessions(make_server, keys, table):
    runs_a, runs_b = {"echo": [], "other": []}, {"echo": [], "other": []}
    a = splitrpc.Server("127.0.0.1", 0, keys=table, wait="block")
    b = splitrpc.Server("127.0.0.1", 0, keys=table, wait="block")
    _setup(runs_a)(a)
    _setup(runs_b)(b)
    a.start()
    b.start()
    try:
        with splitrpc.Pool([("127.0.0.1", a.port), ("127.0.0.1", b.port)], key=keys["all"], encrypt=True,
                           timeout=5) as p:
            for i in range(20):
                assert p.call(ECHO, b"p%d" % i) == b"p%d" % i

        async def go():
            async with splitrpc.aio.Client("127.0.0.1", a.port, key=keys["all"], timeout=5) as c:
                got = await asyncio.gather(*(c.call(ECHO, b"a%d" % i) for i in range(30)))
                return got, c.stats()

        got, st = asyncio.run(go())
        assert got == [b"a%d" % i for i in range(30)] and st["handshakes"] == 1
        assert len(runs_a["echo"]) + len(runs_b["echo"]) == 50
    finally:
        a.close()
        b.close()


def test_version_4_only_when_asked(make_server, make_client, keys, table):
    """A keyed server takes version 4 only in its legacy mode (legacy_v4=True); by default it drops
    it (auth_v4_off) and describes protocol 5 alone. A keyed client speaks 4 only with protocol=4."""
    runs = {"echo": [], "other": []}
    srv = make_server(_setup(runs), keys=table)
    c4 = make_client(srv.port, key=keys["all"], protocol=4, timeout=0.5)
    with pytest.raises(splitrpc.CallTimeout):
        c4.call(ECHO, b"legacy")
    assert srv.stats()["drops"]["auth_v4_off"] >= 1 and not runs["echo"]
    c5 = make_client(srv.port, key=keys["all"], timeout=5)
    assert list(c5.describe().protocols) == [5]
    legacy = make_server(_setup(runs), keys=table, legacy_v4=True)
    c4 = make_client(legacy.port, key=keys["all"], protocol=4, timeout=5)
    assert c4.call(ECHO, b"legacy") == b"legacy"
    assert c4.stats()["handshakes"] == 0 and list(c4.describe().protocols) == [4, 5]
    with pytest.raises(ValueError, match="encrypt=True needs sessions"):
        splitrpc.Client("127.0.0.1", srv.port, key=keys["all"], protocol=4, encrypt=True)
    with pytest.raises(ValueError, match="needs key="):
        splitrpc.Client("127.0.0.1", srv.port, protocol=5)
    with pytest.raises(ValueError, match="rekey"):
        splitrpc.Client("127.0.0.1", srv.port, key=keys["all"], rekey=121)
    with pytest.raises(ValueError, match="rto_max must be at most 1 s"):  # the page: a session's client
        splitrpc.Client("127.0.0.1", srv.port, key=keys["all"], rto_max=2.0)  # sends at least once a second
    splitrpc.Client("127.0.0.1", srv.port, key=keys["all"], protocol=4, rto_max=2.0).close()  # no sessions
    with pytest.raises(ValueError, match="needs keys="):
        splitrpc.Server("127.0.0.1", 0, legacy_v4=True)


def test_thousands_of_short_lived_clients_all_get_sessions(make_server, keys, table):
    """3,000 clients of one key, one call each, at about 500 a second (each `splitrpc call` is such
    a client; issue 52's churn: 10,000 a minute is 167 a second): the server's table of sessions
    (4,096 places; a key may hold a quarter of it once it is half full) makes room with the
    sessions of clients gone silent, so every client gets its session at its first INIT."""
    runs = {"echo": [], "other": []}
    srv = make_server(_setup(runs), keys=table)
    slow, t0 = 0, time.monotonic()
    for i in range(3000):
        wait = t0 + i / 500 - time.monotonic()
        if wait > 0:  # (read once: two reads may straddle the moment)
            time.sleep(wait)
        with splitrpc.Client("127.0.0.1", srv.port, key=keys["all"], timeout=5) as c:
            t = time.monotonic()
            assert c.call(ECHO, b"%d" % i) == b"%d" % i
            slow += time.monotonic() - t > 0.15  # an INIT resent (200 ms): the first went unanswered
            assert c.stats()["handshakes"] == 1
    assert len(runs["echo"]) == 3000
    assert slow == 0, f"{slow} clients waited for an INIT's resend"
    st = srv.stats()
    assert st["drops"].get("table_full", 0) == 0, st["drops"]


@contextlib.contextmanager
def _page_server(on_datagram):
    """A server written from the page (tests/foreign_v5.py), on 127.0.0.1: a thread that hands each
    datagram to on_datagram(sock, data, source). Yields its port; stopped and closed at the end."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.1)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                d, src = sock.recvfrom(4096)
            except OSError:
                continue
            on_datagram(sock, d, src)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield sock.getsockname()[1]
    finally:
        stop.set()
        t.join(5)
        sock.close()


def test_a_server_that_will_not_encrypt_fails_even_calls_waiting_for_ready(keys):
    """A server (here one written from the page: tests/foreign_v5.py) whose ACCEPT leaves ENCRYPT
    unset though the client asked for it: the client makes no session and fails its calls with
    Unavailable at once, those that wait for ready too (they waited until their deadline before:
    the refusal is the server's answer, not a server still starting)."""
    pytest.importorskip("cryptography", reason="tests/foreign_v5.py needs the cryptography package ('.[test]')")
    import foreign_v5 as v5

    k, accepts = keys["all"], []

    def on(sock, d, src):
        if len(d) == v5.HDR_LEN + v5.INIT_BODY and d[1] & 0x0F == v5.INIT:
            acc, _ = v5.make_accept(k.secret, d, v5.private_key(), v5.random_id(), 0)  # flags 0: no ENCRYPT
            accepts.append(acc)
            sock.sendto(acc, src)

    with _page_server(on) as port, splitrpc.Client("127.0.0.1", port, key=k, encrypt=True, timeout=10,
                                                   wait_for_ready=True) as c:
        t0 = time.monotonic()
        with pytest.raises(Unavailable, match="would not encrypt"):
            c.call(ECHO, b"secret")
        assert time.monotonic() - t0 < 3.0
        assert accepts and c.stats()["handshakes"] == 0


@pytest.mark.parametrize("retries", [0, 3])
def test_a_restart_right_after_the_handshake_costs_100_ms_at_most(keys, retries):
    """A server (written from the page: tests/foreign_v5.py) that loses its first session right
    after its ACCEPT and answers its calls with one NO_SESSION (the page's rate: one per 100 ms
    per address). The session is then 1 ms old: the client defers the NO_SESSION (a forger's flood
    would make it handshake for every forgery) but ends the session at 100 ms of age, with no reply
    under it since, and resumes: the call is answered, with no retransmission (retries=0) and with
    fast ones that all fall under 100 ms (an outside reviewer's case: the call timed out when the
    young session's NO_SESSION was ignored)."""
    pytest.importorskip("cryptography", reason="tests/foreign_v5.py needs the cryptography package ('.[test]')")
    import foreign_v5 as v5

    k, sessions, last, runs = keys["all"], {}, {}, []

    def on(sock, d, src):
        if d[1] & 0x0F == v5.INIT and len(d) == v5.HDR_LEN + v5.INIT_BODY:
            acc, s = v5.make_accept(k.secret, d, v5.private_key(), 0x1000 + len(sessions) + 1, 0)
            sessions[s.id] = s
            sock.sendto(acc, src)
        elif d[1] & 0x0F == v5.REQUEST:
            sid, fid, rid = int.from_bytes(d[-32:-24], "big"), int.from_bytes(d[2:4], "big"), \
                int.from_bytes(d[6:12], "big")
            if sid == 0x1001:  # lost in the restart
                if time.monotonic() - last.get(src, -1.0) >= 0.1:
                    last[src] = time.monotonic()
                    sock.sendto(v5.header(v5.NO_SESSION, fid, rid, v5.NO_SESSION_BODY) + sid.to_bytes(8, "big"), src)
                return
            data = v5.open_(sessions[sid], d, True)
            if data is not None:
                runs.append(data)
                sock.sendto(v5.seal(sessions[sid], v5.header(v5.RESPONSE, fid, rid, len(data)), data, False), src)

    with _page_server(on) as port:
        with splitrpc.Client("127.0.0.1", port, key=k, timeout=2, retries=retries, rto_min=0.005,
                             rto_initial=0.01) as c:
            t0 = time.monotonic()
            assert c.call(ECHO, b"x") == b"x"
            took = time.monotonic() - t0
            st = c.stats()
    assert took < 0.6, took  # 100 ms and a handshake, not the 2 s deadline
    assert st["no_sessions"] == 1 and st["no_sessions_deferred"] >= 1 and st["handshakes"] == 2, st
    assert runs == [b"x"]


def test_waiting_for_a_slow_handshake_spends_no_retransmission(keys):
    """A server (written from the page: tests/foreign_v5.py) that answers only the third INIT (the
    client's INITs go at 0, 0.2 and 0.6 s) and loses the first REQUEST it gets. The call waited
    for the session with nothing sent; its retransmissions are all still its own once the session
    is made, so the lost REQUEST is sent again at once. (Each retransmission timer that fired while
    there was no session used to spend a try: with retries=3 and a 10 ms timeout all three were
    gone before the ACCEPT, the one REQUEST sent under the session was lost, and the call timed
    out.)"""
    pytest.importorskip("cryptography", reason="tests/foreign_v5.py needs the cryptography package ('.[test]')")
    import foreign_v5 as v5

    k, inits, sessions, requests, runs = keys["all"], [], {}, [], []

    def on(sock, d, src):
        if d[1] & 0x0F == v5.INIT and len(d) == v5.HDR_LEN + v5.INIT_BODY:
            inits.append(time.monotonic())
            if len(inits) >= 3:
                acc, s = v5.make_accept(k.secret, d, v5.private_key(), 0x2000 + len(inits), 0)
                sessions[s.id] = s
                sock.sendto(acc, src)
        elif d[1] & 0x0F == v5.REQUEST:
            requests.append(d)
            if len(requests) == 1:
                return  # lost on the way
            sid, fid, rid = int.from_bytes(d[-32:-24], "big"), int.from_bytes(d[2:4], "big"), \
                int.from_bytes(d[6:12], "big")
            data = v5.open_(sessions[sid], d, True) if sid in sessions else None
            if data is not None:
                runs.append(data)
                sock.sendto(v5.seal(sessions[sid], v5.header(v5.RESPONSE, fid, rid, len(data)), data, False), src)

    with _page_server(on) as port:
        with splitrpc.Client("127.0.0.1", port, key=k, timeout=3, retries=3, rto_min=0.005, rto_initial=0.01) as c:
            t0 = time.monotonic()
            assert c.call(ECHO, b"x") == b"x"
            took = time.monotonic() - t0
            st = c.stats()
    assert len(inits) >= 3 and 0.4 < took < 1.5, (len(inits), took)  # the third INIT's answer, then one resend
    assert st["retransmits"] == 1 and st["handshakes"] == 1, st
    assert len(requests) == 2 and runs == [b"x"]


class _Rebinding:
    """A NAT on loopback that rebinds: the client talks to its port, and it forwards to the server
    from one source port, then, once rebind() is called, from a new one (what a NAT does when its
    mapping expires), relaying the server's answers back to the client."""

    def __init__(self, server_port):
        self.server = ("127.0.0.1", server_port)
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", 0))
        self.port = self.front.getsockname()[1]
        self.client = None
        self.back = self._new_back()
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _new_back(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
        return s

    def rebind(self):
        self.back = self._new_back()  # the old mapping is gone: its answers are lost

    def _run(self):
        import select
        self.front.setblocking(False)
        while not self.stop:
            back = self.back
            r, _, _ = select.select([self.front, back], [], [], 0.05)
            for s in r:
                try:
                    d, src = s.recvfrom(70000)
                except BlockingIOError:
                    continue
                if s is self.front:
                    self.client = src
                    self.back.sendto(d, self.server)
                elif s is self.back and self.client:
                    self.front.sendto(d, self.client)

    def close(self):
        self.stop = True
        self.t.join(2)
        self.front.close()


def test_a_client_behind_a_rebinding_nat_goes_on_under_a_new_session(make_server, make_client, keys, table):
    """PROTOCOL-v5.md, "Address": a session is taken only from the address its INIT came from. A
    client whose NAT rebinds (its datagrams now come from another port) gets a NO_SESSION there
    and makes a new session from the new address, following the old one: its calls go on, each
    run once, and nothing but a NO_SESSION went to the new address before it had a session there."""
    runs = {"echo": [], "other": []}
    srv = make_server(_setup(runs), keys=table)
    nat = _Rebinding(srv.port)
    try:
        c = make_client(nat.port, key=keys["all"], timeout=5)
        assert [c.call(ECHO, bytes([i]) * 10) for i in range(5)] == [bytes([i]) * 10 for i in range(5)]
        assert c.stats()["handshakes"] == 1
        nat.rebind()
        assert [c.call(ECHO, bytes([i]) * 2000) for i in range(5, 10)] == [bytes([i]) * 2000 for i in range(5, 10)]
        st, sst = c.stats(), srv.stats()
        assert st["handshakes"] == 2 and st["no_sessions"] + st["no_sessions_deferred"] >= 1, st
        assert sst["drops"]["auth_address"] >= 1
        assert len(runs["echo"]) == 10, "each call ran once"
    finally:
        nat.close()


@pytest.mark.parametrize("suites", [None, ["chacha20-poly1305"], ["aes-256-gcm", "chacha20-poly1305"],
                                    ["aegis-128l", "chacha20-poly1305"]])
def test_a_client_offers_the_suites_it_is_given(keys, suites):
    """Client(suites=) names the AEADs its INITs offer (all this process can use by default): the
    INIT's flags (PROTOCOL-v5.md: bit 1 AES, bit 2 AEGIS) carry exactly those, of what this process
    has; a list without ChaCha20-Poly1305, or a name not known, is refused."""
    bits = {"aes-256-gcm": 2, "aegis-128l": 4}
    have = _auth.suites()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(3)
    try:
        c = splitrpc.Client("127.0.0.1", s.getsockname()[1], timeout=0.5, key=keys["all"], suites=suites)
        try:
            c.call_async(ECHO, b"x")
            init, _ = s.recvfrom(2048)
        finally:
            c.close()
    finally:
        s.close()
    assert len(init) == 126 and init[1] == 0x53, "not an INIT"
    flags = int.from_bytes(init[22 + 44:22 + 48], "big")
    want = sum(b for n, b in bits.items() if n in have and (suites is None or n in suites))
    assert flags == want, (flags, want, have)


def test_suites_must_name_known_ones_and_chacha(keys):
    with pytest.raises(ValueError, match="chacha20-poly1305"):
        splitrpc.Client("127.0.0.1", 9, key=keys["all"], suites=["aegis-128l"])
    with pytest.raises(ValueError, match="suites"):
        splitrpc.Client("127.0.0.1", 9, key=keys["all"], suites=["rot13", "chacha20-poly1305"])
    with pytest.raises(ValueError, match="sessions"):
        splitrpc.Client("127.0.0.1", 9, suites=["chacha20-poly1305"])
