"""Protocol version 5 (docs/PROTOCOL-v5.md) against real servers, as a foreign client and an attacker meet them: datagrams made by tests/foreign_v5.py over a raw socket. Handshakes, calls in authenticating and encrypting sessions (one and several segments), FORBIDDEN under a session; and issue 52's replays: a captured request sent again to the same server, to a second server with the same key table, to a restarted server, a captured INIT replayed, a request under another session's id; with a function that counts its runs, and no answer ever larger than its trigger."""
import os
import socket
import time

import pytest

pytest.importorskip("cryptography", reason="tests/foreign_v5.py needs the cryptography package ('.[test]')")
import foreign_v5 as v5  # noqa: E402

import splitrpc  # noqa: E402
from conftest import wait_for  # noqa: E402
from splitrpc import Key, KeyTable  # noqa: E402
from splitrpc._native import auth as _auth  # noqa: E402

pytestmark = pytest.mark.skipif(not _auth.available(), reason="libsodium's shared library is not installed")

ECHO, OTHER = 10, 11
HDR_LEN_ = v5.HDR_LEN
FORBIDDEN = 8


@pytest.fixture
def keys():
    return {"all": Key.generate(7), "echo_only": Key.generate(8, functions=["echo"])}


def _setup(runs):
    def setup(srv):
        def raw(name):
            def fn(reqs, resps):
                runs[name] += len(reqs)
                for q, r in zip(reqs, resps):
                    r[:len(q)] = q
                return [len(q) for q in reqs]
            return fn
        srv.add_function(raw("echo"), ECHO, "echo", raw=True, max_request=70000, max_response=70000)
        srv.add_function(raw("other"), OTHER, "other", raw=True, max_request=64, max_response=64)
    return setup


@pytest.fixture
def servers(make_server, keys):
    """Two servers (two replicas) with the same key table, each counting its functions' runs."""
    table = KeyTable([keys["all"], keys["echo_only"]], skew=5.0)
    runs_a, runs_b = {"echo": 0, "other": 0}, {"echo": 0, "other": 0}
    a = make_server(_setup(runs_a), keys=table)
    b = make_server(_setup(runs_b), keys=table)
    return (a, runs_a), (b, runs_b), table


def _sock(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("127.0.0.1", port))
    s.settimeout(2.0)
    return s


def _recv(s, timeout=2.0):
    s.settimeout(timeout)
    try:
        return s.recv(65535)
    except socket.timeout:
        return None


def _handshake(s, key, flags=0, prev=None):
    """A session with the server at s (following prev: resume): (its Session, the INIT, the ACCEPT)."""
    e = v5.private_key()
    init = v5.make_init(key.secret, key.id, e, v5.random_id(), flags=flags, prev=prev)
    s.send(init)
    acc = _recv(s)
    assert acc is not None and len(acc) <= len(init), "no ACCEPT, or one larger than the INIT"
    sess = v5.open_accept(key.secret, init, e, acc)
    assert sess is not None, "an ACCEPT the client does not take"
    return sess, init, acc


def _request(sess, func_id, req_id, data, seg=1400):
    """The REQUEST datagrams of one call, sealed under sess (new counters)."""
    chunks = [data[i:i + seg] for i in range(0, len(data), seg)] or [b""]
    return [v5.seal(sess, v5.header(v5.REQUEST, func_id, req_id, len(data), seq=i, nseg=len(chunks)), c, True)
            for i, c in enumerate(chunks)]


def _reply(s, sess, timeout=2.0):
    """The whole reply (type, aux, data) to the call in flight, every datagram opened under sess."""
    parts, want, typ, aux = {}, None, None, None
    while want is None or len(parts) < want:
        d = _recv(s, timeout)
        if d is None:
            return None
        data = v5.open_(sess, d, False)
        assert data is not None, f"a reply datagram that does not open under the session: {d[:40].hex()}"
        _, vt, _, _, seq, nseg, _, aux = v5.HDR.unpack_from(d)
        typ, want, parts[seq] = vt & 0xF, nseg, data
    return typ, aux, b"".join(parts[i] for i in range(want))


def _call(s, sess, func_id, req_id, data, seg=1400):
    for d in _request(sess, func_id, req_id, data, seg):
        s.send(d)
    return _reply(s, sess)


def _cpu_has_aes() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln for ln in f if ln.startswith("flags")), "").split()
        return "aes" in flags and "pclmulqdq" in flags
    except OSError:
        return False


@pytest.mark.parametrize("flags", [0, v5.FLAG_ENCRYPT, v5.FLAG_AES, v5.FLAG_AES | v5.FLAG_ENCRYPT,
                                   v5.FLAG_AEGIS, v5.FLAG_AEGIS | v5.FLAG_ENCRYPT,
                                   v5.FLAG_AES | v5.FLAG_AEGIS | v5.FLAG_ENCRYPT],
                         ids=["authenticating", "encrypting", "aes-authenticating", "aes-encrypting",
                              "aegis-authenticating", "aegis-encrypting", "both-offered-encrypting"])
def test_calls_in_a_session(servers, keys, flags):
    """Calls of one and several segments (out of order) in a session of each kind; the AES-256-GCM
    suite is granted where offered and the server's CPU has AES-NI (cryptography's AESGCM checks
    splitrpc's libsodium), AEGIS-128L where offered and the server's libsodium has it (PyNaCl's
    checks), and AEGIS-128L over AES-256-GCM where both are offered."""
    (a, runs), _, _ = servers
    server_suites = _auth.suites()
    if flags & v5.FLAG_AEGIS and "aegis-128l" not in server_suites:
        pytest.skip(f"this process's libsodium has no AEGIS-128L ({_auth.library()})")
    s = _sock(a.port)
    sess, _, _ = _handshake(s, keys["all"], flags)
    assert sess.encrypt == bool(flags & v5.FLAG_ENCRYPT)
    assert sess.aegis == bool(flags & v5.FLAG_AEGIS)
    assert sess.aes == (bool(flags & v5.FLAG_AES) and not flags & v5.FLAG_AEGIS and _cpu_has_aes())
    assert _call(s, sess, ECHO, 1, b"hello") == (v5.RESPONSE, 0, b"hello")
    big = os.urandom(5000)
    reqs = _request(sess, ECHO, 2, big, seg=1200)
    assert len(reqs) == 5
    if flags & v5.FLAG_ENCRYPT:
        assert all(big[i * 1200:i * 1200 + 50] not in d for i, d in enumerate(reqs)), "the data is on the wire"
    for d in reversed(reqs):  # out of order
        s.send(d)
    assert _reply(s, sess) == (v5.RESPONSE, 0, big)
    bad = bytearray(_request(sess, ECHO, 3, b"changed", seg=1200)[0])
    bad[HDR_LEN_ + 1] ^= 1
    s.send(bytes(bad))
    assert wait_for(lambda: a.stats()["drops"]["auth_bad_tag"] >= 1)
    assert runs["echo"] == 2
    if sess.aegis:  # a trailer of the session with no room for the tag's first half: short, never run
        short0 = a.stats()["drops"]["short"]
        whole = _request(sess, ECHO, 4, b"")[0]  # 70 bytes: header, tag half, trailer
        s.send(whole[:HDR_LEN_] + whole[HDR_LEN_ + 1:])  # 69
        assert wait_for(lambda: a.stats()["drops"]["short"] == short0 + 1)
        assert runs["echo"] == 2


def test_a_key_gets_forbidden_under_its_session(servers, keys):
    (a, runs), _, _ = servers
    s = _sock(a.port)
    sess, _, _ = _handshake(s, keys["echo_only"])
    typ, aux, _ = _call(s, sess, OTHER, 3, b"x")
    assert (typ, aux) == (v5.ERROR, FORBIDDEN) and runs["other"] == 0


def test_a_captured_request_never_runs_twice_anywhere(servers, keys, make_server):
    """Issue 52, findings 1 and 2: the capture sent again to the same server (dropped: its
    counter was taken), to a second server with the same key table (NO_SESSION, not run), and
    to the same port after the server restarted (NO_SESSION, not run). Every NO_SESSION is
    smaller than the datagram that brought it."""
    (a, runs_a), (b, runs_b), table = servers
    s = _sock(a.port)
    sess, _, _ = _handshake(s, keys["all"])
    [captured] = _request(sess, ECHO, 9, b"pay once")
    s.send(captured)
    assert _reply(s, sess) == (v5.RESPONSE, 0, b"pay once") and runs_a["echo"] == 1
    s.send(captured)  # the same server: the window took its counter
    assert _recv(s, 0.3) is None and runs_a["echo"] == 1
    [again] = _request(sess, ECHO, 9, b"pay once")  # the client's own retransmission: the cached reply
    s.send(again)
    assert _reply(s, sess) == (v5.RESPONSE, 0, b"pay once") and runs_a["echo"] == 1
    # Another replica, same key table.
    sb = _sock(b.port)
    sb.send(captured)
    ns = _recv(sb)
    assert ns is not None and len(ns) == 30 < len(captured) and ns[1] == (5 << 4 | v5.NO_SESSION)
    assert int.from_bytes(ns[22:30], "big") == sess.id
    assert runs_b["echo"] == 0
    # The server restarts on its port.
    port = a.port
    a.close()
    runs_c = {"echo": 0, "other": 0}
    c = splitrpc.Server("127.0.0.1", port, keys=table, wait="block")
    try:
        _setup(runs_c)(c)
        c.start()
        s.send(captured)
        ns = _recv(s)
        assert ns is not None and len(ns) < len(captured) and ns[1] == (5 << 4 | v5.NO_SESSION)
        time.sleep(0.2)
        assert runs_c["echo"] == 0
        # The client, told so, makes a new session there and its call is served once.
        new, _, _ = _handshake(s, keys["all"])
        assert _call(s, new, ECHO, 10, b"after the restart") == (v5.RESPONSE, 0, b"after the restart")
        assert runs_c["echo"] == 1
    finally:
        c.close()


def test_a_request_held_back_and_delivered_late_never_runs_twice(make_server, keys):
    """An outside attacker's finding (issue 52, re-run): the first datagram of a call held back on
    the way, the client's retransmission (a new counter) run and answered, then the held one
    delivered after the server forgot the call (its reply cache's time): it ran again. Now a
    datagram is taken only within half that time of a later counter of its session, or of a
    session that follows its own; later it is refused as stale. Both: the same session, and a
    session the client has since moved on from (a rekey), directly or two sessions back."""
    runs = {"echo": 0, "other": 0}
    table = KeyTable([keys["all"]], skew=5.0)
    srv = make_server(_setup(runs), keys=table, reply_cache_ttl=0.4)
    s = _sock(srv.port)
    sess, _, _ = _handshake(s, keys["all"])
    held = _request(sess, ECHO, 50, b"held back")[0]              # counter 1: the attacker keeps it
    for d in _request(sess, ECHO, 50, b"held back"):              # the client's retransmission
        s.send(d)
    assert _reply(s, sess) == (v5.RESPONSE, 0, b"held back") and runs["echo"] == 1
    assert _call(s, sess, ECHO, 51, b"more") == (v5.RESPONSE, 0, b"more")
    time.sleep(3.0)  # the reply cache (0.4 s) has forgotten call 50; the sweeps have moved the floor
    s.send(held)
    time.sleep(0.3)
    assert runs["echo"] == 2, "the held datagram ran its call again"
    assert srv.stats()["drops"]["auth_stale"] >= 1
    # A session the client moved on from: its held datagram, delivered late, is refused too.
    held = _request(sess, ECHO, 60, b"old session")[0]
    new, _, _ = _handshake(s, keys["all"], prev=sess)              # a rekey: the line goes on
    assert _call(s, new, ECHO, 60, b"old session") == (v5.RESPONSE, 0, b"old session") and runs["echo"] == 3
    time.sleep(3.0)
    s.send(held)
    time.sleep(0.3)
    assert runs["echo"] == 3, "the old session's held datagram ran its call again"
    # A line moved on twice with nothing taken under the middle session (an outside reviewer's
    # attack on this stop's change: the attacker drops the middle session's datagrams and forges a
    # NO_SESSION for each): resuming the middle one proves its client had it, so the first is moved
    # on from then, and its held datagram is refused.
    while _recv(s, 0.2) is not None:  # (the NO_SESSION the late datagram of a forgotten session got)
        pass
    held = _request(new, ECHO, 70, b"two moves")[0]
    mid, _, _ = _handshake(s, keys["all"], prev=new)                # its datagrams: all dropped
    last, _, _ = _handshake(s, keys["all"], prev=mid)
    assert _call(s, last, ECHO, 70, b"two moves") == (v5.RESPONSE, 0, b"two moves") and runs["echo"] == 4
    time.sleep(3.0)
    s.send(held)
    time.sleep(0.3)
    assert runs["echo"] == 4, "a held datagram of a session two moves back ran its call again"


@pytest.mark.parametrize("flags", [0, v5.FLAG_AEGIS], ids=["chacha", "aegis"])
def test_a_last_retransmission_held_back_never_runs_twice(make_server, keys, flags):
    """An outside attacker's probe (stop 63): the client's original runs and is answered, its
    retransmission (its last datagram: a higher counter than any the server took) is held on the
    way and delivered after the reply cache forgot the call, the client silent meanwhile. No
    later counter moved the session's floor past it, so it was taken and ran the call again. Now
    the line remembers which req_ids ran (PROTOCOL-v5.md, "Calls a line ran"): refused as stale."""
    if flags & v5.FLAG_AEGIS and "aegis-128l" not in _auth.suites():
        pytest.skip("no AEGIS-128L in this process's libsodium")
    runs = {"echo": 0, "other": 0}
    srv = make_server(_setup(runs), keys=KeyTable([keys["all"]], skew=5.0), reply_cache_ttl=0.4)
    s = _sock(srv.port)
    sess, _, _ = _handshake(s, keys["all"], flags)
    for d in _request(sess, ECHO, 70, b"once"):
        s.send(d)
    assert _reply(s, sess) == (v5.RESPONSE, 0, b"once") and runs["echo"] == 1
    held = _request(sess, ECHO, 70, b"once")[0]  # the retransmission, sent before the reply came: held
    stale0 = srv.stats()["drops"]["auth_stale"]
    time.sleep(2.0)  # the reply cache (0.4 s) forgot call 70; the client sent nothing more
    s.send(held)
    assert wait_for(lambda: srv.stats()["drops"]["auth_stale"] == stale0 + 1)
    assert _recv(s, 0.3) is None and runs["echo"] == 1, "the held retransmission ran its call again"
    assert _call(s, sess, ECHO, 71, b"next") == (v5.RESPONSE, 0, b"next") and runs["echo"] == 2  # new calls run


def test_a_session_is_taken_only_from_its_address(servers, keys):
    """A version 5 session is its INIT's address's (PROTOCOL-v5.md, "Address"): the client's reply
    lost, its retransmission relayed from another port (an attacker on the path racing it from a
    spoofed source, or a NAT that rebound) is answered there only by a NO_SESSION, no larger than
    it, and runs nothing; the reply (which may be far larger) never goes there. A client that did
    move makes a new session from its new address that follows the old one: the same call, its
    cached reply there, still one run; and the old address is still served under the old session."""
    (a, runs), _, _ = servers
    s = _sock(a.port)
    sess, _, _ = _handshake(s, keys["all"])
    big = os.urandom(20000)
    for d in _request(sess, ECHO, 31, big):
        s.send(d)
    assert _reply(s, sess) == (v5.RESPONSE, 0, big) and runs["echo"] == 1
    moved = _sock(a.port)  # another source port
    moved0 = a.stats()["drops"]["auth_address"]
    relayed = _request(sess, ECHO, 31, big)  # the retransmission: new counters, from elsewhere
    for d in relayed:
        moved.send(d)
    got = []
    while (d := _recv(moved, 0.5)) is not None:
        got.append(d)
    assert got, "no NO_SESSION at the new address"
    assert all(len(d) == v5.HDR_LEN + v5.NO_SESSION_BODY and d[1] & 0xF == v5.NO_SESSION for d in got), \
        "something other than a NO_SESSION went to an address the session was not made from"
    assert sum(len(d) for d in got) <= sum(len(d) for d in relayed)
    assert wait_for(lambda: a.stats()["drops"]["auth_address"] >= moved0 + len(relayed))
    # The client that moved: a new session from its new address, following the old one (resume).
    sess2, _, _ = _handshake(moved, keys["all"], prev=sess)
    for d in _request(sess2, ECHO, 31, big):
        moved.send(d)
    assert _reply(moved, sess2) == (v5.RESPONSE, 0, big)
    for d in _request(sess, ECHO, 31, big):  # and from the old address, under the old session
        s.send(d)
    assert _reply(s, sess) == (v5.RESPONSE, 0, big)
    time.sleep(0.1)
    assert runs["echo"] == 1


def test_a_forged_no_session_never_makes_a_call_run_twice(servers, keys):
    """Held-out attacker W2: an on-path attacker answers a call with a forged NO_SESSION (all it
    needs is in the clear). The client does what the page says: a new session that follows the
    old one, the call sent again under it. The server still has the old session, so it is the
    same call: the cached reply, no second run. Another holder of the same key naming that
    session without its keys gets a line of its own, and never the call's reply."""
    (a, runs), _, _ = servers
    s = _sock(a.port)
    sess, _, _ = _handshake(s, keys["all"])
    for d in _request(sess, ECHO, 41, b"once, please"):
        s.send(d)
    assert _reply(s, sess) == (v5.RESPONSE, 0, b"once, please") and runs["echo"] == 1
    # The forged NO_SESSION reached the client first; it makes a session following sess.
    new, _, _ = _handshake(s, keys["all"], prev=sess)
    assert new.id != sess.id
    for d in _request(new, ECHO, 41, b"once, please"):
        s.send(d)
    assert _reply(s, new) == (v5.RESPONSE, 0, b"once, please")
    time.sleep(0.1)
    assert runs["echo"] == 1
    # An insider (the same key) claims to follow sess without its keys: a line of its own.
    t = _sock(a.port)
    fake = v5.Session(sess.id, bytes(32), bytes(32), False)
    mine, _, _ = _handshake(t, keys["all"], prev=fake)
    for d in _request(mine, ECHO, 41, b"the insider's own"):
        t.send(d)
    assert _reply(t, mine) == (v5.RESPONSE, 0, b"the insider's own")
    assert runs["echo"] == 2  # its own call, run once; the victim's reply was never its


def test_a_resume_naming_a_forgotten_session_finds_its_call(make_server, keys):
    """Stop 64's outside attacker: a client moved from session A to B; the server forgot A (moved on
    from) while A's call was still in its reply cache; then the client, against the page, resumed
    from A (a late datagram of A got a NO_SESSION) and resent the call: a new line, and the call
    ran again. The server now keeps a tombstone of a session it forgets while its line ran calls:
    the resume naming A follows the line, and the resend is the cached call. Stop 65's: once the
    call left the reply cache, the tombstone went too, and the resend ran again; now the tombstone
    stays while A's time (180 s) is not up, and the resend is refused as a call that ran."""
    runs = {"echo": 0, "other": 0}
    srv = make_server(_setup(runs), keys=KeyTable([keys["all"]], skew=5.0), reply_cache_ttl=5.0)  # stale_ms 2.5 s
    s = _sock(srv.port)
    a, _, _ = _handshake(s, keys["all"])
    assert _call(s, a, ECHO, 90, b"once, even so") == (v5.RESPONSE, 0, b"once, even so") and runs["echo"] == 1
    b, _, _ = _handshake(s, keys["all"], prev=a)  # a rekey (or a forged NO_SESSION): the line goes on
    assert _call(s, b, ECHO, 91, b"under b") == (v5.RESPONSE, 0, b"under b") and runs["echo"] == 2
    auth = lambda: srv.stats()["auth"]  # noqa: E731
    # moved on from when b's datagram was taken; forgotten stale_ms (2.5 s) later, at a sweep; call 90 cached
    assert wait_for(lambda: auth()["sessions_forgotten"] >= 1, timeout=6.0), auth()
    assert auth()["tombstones"] == 1, auth()
    c, _, _ = _handshake(s, keys["all"], prev=a)  # the client resumes from A, not from its current B
    assert _call(s, c, ECHO, 90, b"once, even so") == (v5.RESPONSE, 0, b"once, even so")
    time.sleep(0.1)
    assert runs["echo"] == 2, "the resend under a resume from the forgotten session ran the call again"
    assert auth()["tomb_resumes"] == 1, auth()
    # The call leaves the reply cache (5 s): the tombstone stays, and a resend is refused, not run.
    stale0 = srv.stats()["drops"]["auth_stale"]
    assert wait_for(lambda: srv.stats()["cached_replies"] == 0, timeout=8.0), srv.stats()["cached_replies"]
    d, _, _ = _handshake(s, keys["all"], prev=a)
    for dg in _request(d, ECHO, 90, b"once, even so"):
        s.send(dg)
    assert wait_for(lambda: srv.stats()["drops"]["auth_stale"] > stale0)
    assert _recv(s, 0.3) is None and runs["echo"] == 2, "the resend ran again once the call left the cache"
    assert auth()["tombstones"] == 1 and auth()["tomb_resumes"] == 2, auth()


def test_a_replayed_init_makes_nothing_usable(servers, keys):
    """The same INIT to the same server: the same ACCEPT, no new session. To another server: a
    new session whose keys the replayer lacks, so a request sealed with the first session's keys
    under it is dropped unanswered."""
    (a, runs_a), (b, runs_b), _ = servers
    s = _sock(a.port)
    sess, init, acc = _handshake(s, keys["all"])
    s.send(init)
    assert _recv(s) == acc
    sb = _sock(b.port)
    sb.send(init)
    other = _recv(sb)
    assert other is not None and other != acc and len(other) <= len(init)
    other_id = int.from_bytes(other[26:34], "big")
    forged = v5.Session(other_id, sess.k_c2s, sess.k_s2c, False)
    for d in _request(forged, ECHO, 11, b"with keys it does not have"):
        sb.send(d)
    assert _recv(sb, 0.3) is None
    time.sleep(0.1)
    assert runs_b["echo"] == 0
    st = b.stats()
    assert st["drops"]["auth_bad_tag"] >= 1


def test_stale_and_wrapped_inits_are_dropped_unanswered(servers, keys):
    """INIT's time is whole milliseconds: 2^32 ms ahead is not 'now' again (finding 3)."""
    (a, _), _, _ = servers
    s = _sock(a.port)
    now = int(time.time() * 1000)
    for t in (now - 6000, now + 6000, now + (1 << 32), now - (1 << 32)):
        s.send(v5.make_init(keys["all"].secret, 7, v5.private_key(), v5.random_id(), time_ms=t))
        assert _recv(s, 0.3) is None, t
    assert wait_for(lambda: a.stats()["drops"]["auth_stale"] >= 4)


def test_version_4_served_beside_only_in_its_legacy_mode(servers, keys, make_client, make_server):
    """A keyed server drops version 4 (auth_v4_off) unless its legacy mode is on; then it serves
    both versions, and a captured version 5 request still runs once there."""
    (a, runs), _, table = servers
    c = make_client(a.port, key=keys["all"], protocol=4, timeout=0.3)
    with pytest.raises(splitrpc.CallTimeout):
        c.call(ECHO, b"v4")
    assert runs["echo"] == 0 and wait_for(lambda: a.stats()["drops"]["auth_v4_off"] >= 1)
    legacy_runs = {"echo": 0, "other": 0}
    legacy = make_server(_setup(legacy_runs), keys=table, legacy_v4=True)
    c = make_client(legacy.port, key=keys["all"], protocol=4)
    assert c.call(ECHO, b"v4") == b"v4" and legacy_runs["echo"] == 1
    s = _sock(legacy.port)
    sess, _, _ = _handshake(s, keys["all"])
    assert _call(s, sess, ECHO, 3, b"v5") == (v5.RESPONSE, 0, b"v5") and legacy_runs["echo"] == 2


def test_a_capture_sent_from_many_addresses_to_servers_sharing_a_port_runs_once(make_server, keys):
    """`serve --processes N` (finding 2): servers sharing one port (SO_REUSEPORT), each with its
    own sessions. The capture, sent again from 40 source ports (so the kernel spreads them over
    both), runs nowhere again: the server that has the session drops it as a replay, the other
    answers NO_SESSION."""
    table = KeyTable([keys["all"]], skew=5.0)
    runs_a, runs_b = {"echo": 0, "other": 0}, {"echo": 0, "other": 0}
    a = make_server(_setup(runs_a), keys=table, reuse_port=True)
    port = a.port
    b = splitrpc.Server("127.0.0.1", port, keys=table, wait="block", reuse_port=True)
    try:
        _setup(runs_b)(b)
        b.start()
        s = _sock(port)
        sess, _, _ = _handshake(s, keys["all"])  # to whichever server the kernel picks for s, the call too
        [captured] = _request(sess, ECHO, 21, b"once")
        s.send(captured)
        assert _reply(s, sess) == (v5.RESPONSE, 0, b"once")
        assert runs_a["echo"] + runs_b["echo"] == 1
        answered = 0
        for _ in range(40):
            t = _sock(port)
            t.send(captured)
            d = _recv(t, 0.3)
            if d is not None:
                assert len(d) == 30 and d[1] == (5 << 4 | v5.NO_SESSION)
                answered += 1
            t.close()
        time.sleep(0.2)
        assert runs_a["echo"] + runs_b["echo"] == 1
        assert answered >= 1, "the kernel sent none of 40 source ports to the other server"
        # Held-out attacker W2 over processes: a NO_SESSION from the other server relayed to the
        # client makes it handshake again from its own address (the server holding its session):
        # following the old session, the call sent again is the same call there.
        new, _, _ = _handshake(s, keys["all"], prev=sess)
        for d in _request(new, ECHO, 21, b"once"):
            s.send(d)
        assert _reply(s, new) == (v5.RESPONSE, 0, b"once")
        time.sleep(0.1)
        assert runs_a["echo"] + runs_b["echo"] == 1
    finally:
        b.close()
