"""Version 3 (docs/PROTOCOL-v3.md) against a real server: the data check end to end, from raw bytes to chaos."""
import socket
import threading

import numpy as np
import pytest
from chaos_proxy import ChaosProxy, Faults
from foreign_client import ForeignClient

import wire_ref as ref
from conftest import settled, wait_for
from splitrpc.services import SERVICES, register_builtin_services

VEC, ECHO, HEAD = SERVICES["vecadd"], SERVICES["echo"], SERVICES["head"]


def datagram_data(d: bytes) -> bytes:
    """The data of a version 3 reply, its header and data check verified by the reference
    (not by the code under test)."""
    h = ref.decode(d)
    assert h.version == 3 and d[1] >> 4 == 3, d[:2].hex()
    assert ref.data_check_ok(d), d[:22].hex()
    return ref.data_of(d, h)


# ------------------------------------------------------------------ a client from the pages alone


@pytest.mark.parametrize("server_seg", [None, 1000], ids=["server_default_S", "server_S_1000"])
def test_foreign_client_version_3_gets_right_replies_all_checked(make_server, server_seg):
    """vecadd, a 10,000-byte echo cut at 1450 (1446 data bytes a datagram) and head: right
    replies, and every reply datagram the client received is version 3 with a valid data check
    (on the raw bytes, by the reference), cut at the server's segment size less 4."""
    srv = make_server(register_builtin_services, segment_size_loopback=server_seg)
    s = (server_seg or 65000) - ref.CHECK_LEN  # the server's S: its budget (default 65000 on loopback) less the check
    c = ForeignClient("127.0.0.1", srv.port, seg_size=1450, version=3, record=True, timeout=5.0)
    try:
        rng = np.random.default_rng(3)
        blob = rng.bytes(10_000)
        for svc, req, n_req in ((VEC, VEC.example(rng), 1), (ECHO, blob, 7), (HEAD, HEAD.example(rng), 417)):
            k = len(c.received)
            rx0 = srv.stats()["rx_datagrams"]
            assert c.call(svc.func_id, req) == svc.expected(req), svc.name
            assert srv.stats()["rx_datagrams"] - rx0 == n_req  # ceil(len / 1446): the request cut at 1450 - 4
            got = c.received[k:]
            want = svc.expected(req)
            assert len(got) == -(-len(want) // s), (svc.name, len(got))  # the reply cut at S, each datagram once
            parts = {}
            for d in got:
                data = datagram_data(d)
                assert len(d) == ref.HDR_LEN + len(data) + ref.CHECK_LEN <= ref.HDR_LEN + s + ref.CHECK_LEN
                parts[ref.decode(d).seq] = data
            assert b"".join(parts[i] for i in range(len(got))) == want
        assert c.describe()["protocols"] == [1, 2, 3]
        assert c.bad_data_check == 0 and len(c.received) >= 3
        assert all(d[1] >> 4 == 3 and ref.data_check_ok(d) for d in c.received)  # describe's reply too
        assert srv.stats()["drops"]["bad_data_check"] == 0
    finally:
        c.close()


# ------------------------------------------------------------------ damaged datagrams on a raw socket


@pytest.fixture
def raw():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    try:
        yield s
    finally:
        s.close()


def silent(sock, wait: float = 0.2) -> bool:
    """True when nothing arrives within `wait` seconds."""
    sock.settimeout(wait)
    try:
        sock.recv(70000)
    except socket.timeout:
        return True
    return False


def flip(d: bytes, i: int, x: int = 0x01) -> bytes:
    b = bytearray(d)
    b[i] ^= x
    return bytes(b)


def test_damaged_data_is_dropped_and_counted_and_the_undamaged_request_answered(make_server, raw):
    srv = make_server(register_builtin_services)
    addr = ("127.0.0.1", srv.port)
    req = VEC.example(np.random.default_rng(5))
    rid = 0x33_0000_0001
    (good,) = ref.segments(VEC.func_id, rid, req, 65000, version=3)
    before = srv.stats()

    raw.sendto(flip(good, ref.HDR_LEN + 100), addr)  # one data byte changed, the check unchanged
    assert silent(raw)
    st = settled(srv, lambda st: st["drops"]["bad_data_check"] > before["drops"]["bad_data_check"])
    assert st["drops"]["bad_data_check"] == before["drops"]["bad_data_check"] + 1
    assert st["calls"] == before["calls"] and st["functions"]["vecadd"] == 0  # it never reached vecadd
    assert st["partial_messages"] == 0

    raw.sendto(good, addr)  # the same request undamaged (a retransmission): answered
    raw.settimeout(5.0)
    reply = raw.recv(70000)
    h = ref.decode(reply)
    assert (h.version, h.type, h.func_id, h.req_id) == (3, ref.RESPONSE, VEC.func_id, rid)
    assert datagram_data(reply) == VEC.expected(req)
    assert silent(raw)  # one reply, once

    # relabelled version 2 (byte 1: 0x30 -> 0x20): the header check, computed with 3, fails
    (other,) = ref.segments(VEC.func_id, rid + 1, req, 65000, version=3)
    raw.sendto(bytes([other[0], 0x20 | (other[1] & 0xF)]) + other[2:], addr)
    assert silent(raw)
    # and with a version 2 header check forged for it: as version 2 its 4 check bytes are data,
    # so its length is not msg_len
    forged = bytearray(other)
    forged[1] = 0x20
    forged[4:6] = ref.check16(bytes(forged[:22])).to_bytes(2, "big")
    assert ref.classify(bytes(forged)) == "bad_segment"
    raw.sendto(bytes(forged), addr)
    assert silent(raw)
    after = settled(srv, lambda st: st["drops"]["bad_segment"] > before["drops"]["bad_segment"])
    assert after["drops"]["bad_check"] == before["drops"]["bad_check"] + 1
    assert after["drops"]["bad_segment"] == before["drops"]["bad_segment"] + 1
    assert after["drops"]["bad_data_check"] == before["drops"]["bad_data_check"] + 1
    assert after["functions"]["vecadd"] == 1 and after["calls"] == before["calls"] + 1


def test_damaged_segment_of_a_multi_segment_request_is_recovered_by_its_retransmission(make_server, raw):
    """A 10,000-byte echo in 7 segments, one of them with a data byte changed: the message stays
    partial (no reply, nothing run), the good copy completes it with the right bytes."""
    srv = make_server(register_builtin_services)
    addr = ("127.0.0.1", srv.port)
    blob = np.random.default_rng(8).bytes(10_000)
    rid = 0x33_0000_0100
    segs = ref.segments(ECHO.func_id, rid, blob, 1446, version=3)
    assert len(segs) == 7
    for i, d in enumerate(segs):
        raw.sendto(flip(d, ref.HDR_LEN + 7, 0x80) if i == 3 else d, addr)
    assert silent(raw)
    st = settled(srv, lambda st: st["rx_datagrams"] == 7)
    assert st["drops"]["bad_data_check"] == 1 and st["partial_messages"] == 1 and st["calls"] == 0
    raw.sendto(segs[3], addr)
    raw.settimeout(5.0)
    reply = raw.recv(70000)  # one datagram: the server's S on loopback is 65000 - 4
    assert silent(raw)
    assert ref.decode(reply).req_id == rid and datagram_data(reply) == blob
    st = srv.stats()
    assert st["functions"]["echo"] == 1 and st["partial_messages"] == 0 and st["drops"]["bad_data_check"] == 1


# ------------------------------------------------------------------ versions 1, 2 and 3 side by side


class VersionSniffer(ChaosProxy):
    """A proxy without faults that notes the version nibble of every datagram, each direction."""

    def __init__(self, server):
        super().__init__(server)
        self.versions = {0: set(), 1: set()}  # 0 up to the server, 1 down to the client

    def _pass(self, data, faults, send, key):
        if len(data) > 1:
            self.versions[key].add(data[1] >> 4)
        super()._pass(data, faults, send, key)


def test_version_1_2_and_3_clients_at_once(make_server, make_client):
    srv = make_server(register_builtin_services)
    assert make_client(srv.port, timeout=5.0).describe().protocols == (1, 2, 3)
    calls0 = srv.stats()["calls"]
    n = 500
    results, errors = {}, []
    start = threading.Barrier(3)
    with VersionSniffer(("127.0.0.1", srv.port)) as p1, VersionSniffer(("127.0.0.1", srv.port)) as p2, \
            VersionSniffer(("127.0.0.1", srv.port)) as p3:
        proxies = {1: p1, 2: p2, 3: p3}
        clients = {v: make_client(p.port, timeout=10.0, protocol=v, segment_size=1450) for v, p in proxies.items()}

        def run(v):
            try:
                rng = np.random.default_rng(v)
                c, right = clients[v], 0
                start.wait(10)
                for i in range(n):
                    svc = ECHO if i % 10 == 0 else VEC
                    req = rng.bytes(5000) if svc is ECHO else svc.example(rng)  # echo: 4 segments at 1450
                    right += c.call(svc.func_id, req) == svc.expected(req)
                results[v] = right
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append((v, repr(e)))

        threads = [threading.Thread(target=run, args=(v,)) for v in proxies]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert results == {1: n, 2: n, 3: n}
    for v, p in proxies.items():  # each client spoke its version, and was answered in it
        assert p.versions == {0: {v}, 1: {v}}, (v, p.versions)
        assert clients[v].stats()["dropped"] == 0 and clients[v].stats()["bad_data_check"] == 0
    st = settled(srv, lambda st: st["calls"] - calls0 == 3 * n)
    assert st["calls"] - calls0 == 3 * n
    assert st["drops"]["bad_check"] == st["drops"]["bad_data_check"] == st["drops"]["bad_segment"] == 0


# ------------------------------------------------------------------ silent data corruption


def _run(c, reqs, wave: int = 16) -> tuple[int, int]:
    """(right, wrong) replies of vecadd calls, `wave` outstanding at a time; a failed call raises."""
    right = wrong = 0
    for i in range(0, len(reqs), wave):
        futs = [(r, c.call_async(VEC.func_id, r)) for r in reqs[i:i + wave]]
        for r, f in futs:
            if f.result() == VEC.expected(r):
                right += 1
            else:
                wrong += 1
    return right, wrong


CORRUPT = dict(corrupt_data=0.02)  # one byte past the header of 2% of datagrams, each way
RETRY = dict(retries=12, rto_min=0.005, rto_initial=0.05, rto_max=0.2)


def test_version_3_calls_are_all_right_through_data_corruption(make_server, make_client):
    """5,000 vecadd calls with 2% of datagrams each way getting a data byte changed after UDP's
    checksum: no wrong reply, no failed call; every damaged request datagram is counted by the
    server, every damaged reply datagram by the client, exactly (the proxy neither loses nor
    duplicates, and each damaged datagram reaches its receiver once and is checked there)."""
    srv = make_server(register_builtin_services)
    rng = np.random.default_rng(33)
    reqs = [VEC.example(rng) for _ in range(5000)]
    with ChaosProxy(("127.0.0.1", srv.port), to_server=Faults(**CORRUPT), to_client=Faults(**CORRUPT), seed=3) as px:
        c = make_client(px.port, timeout=10.0, protocol=3, **RETRY)
        assert _run(c, reqs) == (len(reqs), 0)
        st = c.stats()
        assert st["errors"] == 0 and st["timeouts"] == 0 and st["retransmits"] > 0
        up, down = px.up.counts, px.down.counts
        assert up["data_corrupted"] > 40 and down["data_corrupted"] > 40, (up, down)  # ~100 each
        assert up["corrupted"] == down["corrupted"] == up["lost"] == up["dup"] == down["dup"] == 0
        # a damaged request is never answered: its call was completed by another send of it
        assert st["retransmits"] >= up["data_corrupted"]
        # late datagrams (a reply to a retransmission that crossed the first reply) may still be
        # on their way: the counts agree once they have all arrived
        wait_for(lambda: srv.stats()["drops"]["bad_data_check"] == up["data_corrupted"]
                 and c.stats()["bad_data_check"] == down["data_corrupted"], timeout=3.0)
        assert srv.stats()["drops"]["bad_data_check"] == up["data_corrupted"]
        assert c.stats()["bad_data_check"] == down["data_corrupted"]
        assert c.stats()["dropped"] >= down["data_corrupted"]
    drops = srv.stats()["drops"]
    assert drops["bad_check"] == drops["bad_segment"] == drops["short"] == 0, drops  # headers never damaged


def test_version_2_control_run_through_data_corruption_gets_wrong_replies(make_server, make_client):
    """The same proxy with version 2: the damage goes through unseen (the test above can fail)."""
    srv = make_server(register_builtin_services)
    rng = np.random.default_rng(34)
    reqs = [VEC.example(rng) for _ in range(2000)]
    with ChaosProxy(("127.0.0.1", srv.port), to_server=Faults(**CORRUPT), to_client=Faults(**CORRUPT), seed=4) as px:
        c = make_client(px.port, timeout=10.0, protocol=2, **RETRY)
        right, wrong = _run(c, reqs)
        assert right + wrong == len(reqs)
        damaged = px.up.counts["data_corrupted"] + px.down.counts["data_corrupted"]
        assert 0 < wrong <= damaged, (wrong, px.up.counts, px.down.counts)  # ~4% wrong, each from a damaged datagram
        assert c.stats()["bad_data_check"] == 0 and c.stats()["errors"] == 0
    drops = srv.stats()["drops"]
    assert drops["bad_data_check"] == drops["bad_check"] == 0, drops  # nothing was caught
