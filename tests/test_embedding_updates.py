"""Online updates (issue 18): records decoded or dropped by reason; a Redis stream consumed end to end after which L1 (refreshed), L2 and L3 agree; a Kafka topic on librdkafka's in-process mock broker; the rate limit."""
import shutil
import time

import numpy as np
import pytest

pytest.importorskip("redis")
pytest.importorskip("rocksdict")

from splitrpc.services.embedding import tables, updates  # noqa: E402
from splitrpc.services.embedding.hashmap import HashMapTier  # noqa: E402
from splitrpc.services.embedding.rocks import RocksTier  # noqa: E402
from splitrpc.services.embedding.store import EmbeddingStore  # noqa: E402
from splitrpc.services.embedding.updates import Malformed, Updater, decode, encode  # noqa: E402

A = tables.TableSpec("a", rows=1000, dim=4, seed=5)
B = tables.TableSpec("b", rows=200, dim=2, seed=6)
SPECS = {"a": A, "b": B}


def test_records_round_trip_and_malformed_ones_say_why():
    v = np.array([1, 2, 3, 4], np.float32)
    t, k, got = decode(encode("a", 7, v), SPECS)
    assert (t, k) == ("a", 7) and np.array_equal(got, v)
    cases = {"short": [b"", b"\x01", encode("a", 1, v)[:5]],
             "unknown_table": [encode("zz", 1, v), b"\x02\x00\xff\xfe" + bytes(8)],
             "wrong_dim": [encode("a", 1, v[:3]), encode("b", 1, v)],
             "unknown_key": [encode("a", 1000, v), encode("a", -1, v)],
             "not_finite": [encode("a", 1, [1, np.nan, 0, 0]), encode("a", 1, [np.inf, 0, 0, 0])]}
    for reason, blobs in cases.items():
        for b in blobs:
            with pytest.raises(Malformed) as e:
                decode(b, SPECS)
            assert e.value.reason == reason, (b, e.value.reason)


class _ListSource:
    def __init__(self, records):
        self.records = list(records)

    def poll(self, n):
        out, self.records = self.records[:n], self.records[n:]
        return out


def test_the_rate_limit_holds(tmp_path):
    l3 = RocksTier(str(tmp_path / "l3"), [A])
    try:
        with EmbeddingStore([A], l3) as store:
            recs = [encode("a", i % 1000, np.full(4, i, np.float32)) for i in range(300)]
            u = Updater(store, _ListSource(recs), rate=600.0, batch=100)
            t0 = time.monotonic()
            while u.applied < 300:
                u.run_once()
            assert time.monotonic() - t0 >= 0.4  # 300 records at 600/s: half a second, bucket empty at start
            assert u.applied == 300 and not u.malformed
        with pytest.raises(ValueError):
            Updater(store, _ListSource([]), rate=0)
    finally:
        l3.close()


def _agree(store, l2, l3, table, keys, want):
    """L1 after a refresh, L2 and L3 all hold `want` for keys."""
    store.refresh()
    v3, f3 = l3.get(table, keys)
    v2, f2 = l2.get(table, keys)
    assert f3.all() and np.array_equal(v3, want)
    assert f2.all() and np.array_equal(v2, want)
    v1, hit = store.l1[table].query(keys)
    assert np.array_equal(v1[hit], want[hit])
    assert np.array_equal(store.lookup(table, keys), want)


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server (apt-get install redis-server)")
def test_a_redis_stream_is_consumed_and_every_tier_agrees(tmp_path):
    from splitrpc.services.embedding.redis_tier import LocalRedis, RedisTier

    with LocalRedis() as srv:
        l3 = RocksTier(str(tmp_path / "l3"), [A, B])
        l3.fill("a")
        l3.fill("b")
        l2 = RedisTier([A, B], port=srv.port)
        try:
            with EmbeddingStore([A, B], l3, l2=l2, l1_capacity=512) as store:
                keys = np.arange(0, 1000, 7)
                store.lookup("a", keys)  # L1 and L2 hold the old vectors of these
                rng = np.random.default_rng(1)
                want = {}
                recs = []
                for i in range(600):
                    k = int(rng.choice(keys))
                    v = rng.standard_normal(4).astype(np.float32)
                    want[k] = v
                    recs.append(encode("a", k, v))
                recs += [encode("a", 3, np.zeros(3, np.float32))] * 4 + [encode("a", 3, [np.nan] * 4)] * 2 + \
                        [encode("c", 3, np.zeros(4, np.float32))] * 3 + [encode("b", 500, np.zeros(2, np.float32))] + [b"x"]
                src = updates.RedisStreamSource(port=srv.port, block_ms=50)
                src.publish(recs)
                u = Updater(store, src, batch=128)
                while u.run_once():
                    pass
                assert u.applied == 600
                assert dict(u.malformed) == {"wrong_dim": 4, "not_finite": 2, "unknown_table": 3, "unknown_key": 1,
                                             "short": 1}
                ks = np.array(sorted(want), np.int64)
                _agree(store, l2, l3, "a", ks, np.stack([want[k] for k in ks]))
                src.close()
        finally:
            l2.close()
            l3.close()


def test_a_kafka_topic_on_librdkafkas_mock_broker(tmp_path):
    """No Kafka broker can run here: librdkafka's in-process mock cluster (test.mock.num.brokers)
    listens on 127.0.0.1 and speaks the Kafka protocol; the consumer is the real confluent-kafka one."""
    ck = pytest.importorskip("confluent_kafka")
    producer = ck.Producer({"test.mock.num.brokers": 1, "log_level": 0})
    brokers = producer.list_topics(timeout=5).brokers
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers.values())
    assert all(b.host == "127.0.0.1" for b in brokers.values())
    l3 = RocksTier(str(tmp_path / "l3"), [B])
    try:
        with EmbeddingStore([B], l3) as store:
            want = {k: np.full(2, k + 0.5, np.float32) for k in range(40)}
            for k, v in want.items():
                producer.produce("emb-updates", encode("b", k, v))
            producer.produce("emb-updates", encode("b", 1, [np.nan, 0]))
            producer.flush(10)
            src = updates.KafkaSource("emb-updates", config={"bootstrap.servers": bootstrap, "log_level": 0}, timeout=0.5)
            u = Updater(store, src, batch=100)
            end = time.monotonic() + 30
            while u.applied + sum(u.malformed.values()) < 41 and time.monotonic() < end:
                u.run_once()
            src.close()
            assert u.applied == 40 and dict(u.malformed) == {"not_finite": 1}
            ks = np.arange(40)
            v3, f3 = l3.get("b", ks)
            assert f3.all() and np.array_equal(v3, np.stack([want[k] for k in ks]))
    finally:
        l3.close()


def test_bulk_decoding_agrees_with_record_by_record():
    rng = np.random.default_rng(3)
    blobs = []
    for i in range(400):
        r = rng.integers(0, 9)
        if r == 0:
            blobs.append(encode("a", int(rng.integers(0, 1000)), [np.nan, 1, 2, 3]))
        elif r == 1:
            blobs.append(encode("b", int(rng.integers(0, 1000)), rng.standard_normal(2)))  # some unknown keys
        elif r == 2:
            blobs.append(encode("zz", 1, rng.standard_normal(4)))
        elif r == 3:
            blobs.append(bytes(rng.integers(0, 256, int(rng.integers(0, 14)), dtype=np.uint8)))
        elif r == 4:
            blobs.append(encode("a", 5, rng.standard_normal(3)))
        else:
            blobs.append(encode("a", int(rng.integers(0, 40)), rng.standard_normal(4)))  # repeated keys
    bulk, bad = updates.decode_many(blobs, SPECS)
    want, want_bad = {}, {}
    for b in blobs:
        try:
            t, k, v = decode(b, SPECS)
        except Malformed as m:
            want_bad[m.reason] = want_bad.get(m.reason, 0) + 1
            continue
        ks, vs = want.setdefault(t, ([], []))
        ks.append(k)
        vs.append(v)
    assert dict(bad) == want_bad
    assert set(bulk) == set(want)
    for t, (ks, vs) in want.items():
        assert bulk[t][0].tolist() == ks and np.array_equal(bulk[t][1], np.stack(vs))


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server (apt-get install redis-server)")
@pytest.mark.parametrize("l2_kind", ["redis", "hashmap"])
def test_the_update_process_applies_a_stream_off_the_serving_process(tmp_path, l2_kind):
    """Issue 36: the stream read, decoded (and a Redis L2 written) in a child process; L3, an
    in-process L2 and the keys L1 holds written by this process's applier, L1 at once (no refresh);
    malformed records counted; CPU per update counted on both sides; stop() ends the child."""
    from splitrpc.services.embedding.redis_tier import LocalRedis, RedisTier
    from splitrpc.services.embedding.update_process import UpdateProcess

    with LocalRedis() as srv:
        l3 = RocksTier(str(tmp_path / "l3"), [A, B])
        l3.fill("a")
        l2 = RedisTier([A, B], port=srv.port) if l2_kind == "redis" else HashMapTier([A, B], 1000)
        try:
            with EmbeddingStore([A, B], l3, l2=l2, l1_capacity=512) as store:
                keys = np.arange(0, 1000, 7)
                store.lookup("a", keys)  # L1 holds the old vectors of these
                rng = np.random.default_rng(2)
                want, recs = {}, []
                for _ in range(3000):
                    k = int(rng.choice(keys))
                    want[k] = rng.standard_normal(4).astype(np.float32)
                    recs.append(encode("a", k, want[k]))
                recs += [encode("a", 3, np.zeros(3, np.float32))] * 4 + [encode("b", 500, np.zeros(2, np.float32))] + [b"x"]
                updates.RedisStreamSource(port=srv.port, stream="t").publish(recs)
                u = UpdateProcess(store, {"kind": "redis", "port": srv.port, "stream": "t"}, rate=20_000, batch=500)
                try:
                    end = time.monotonic() + 60
                    while (u.applied < 3000 or sum(u.malformed.values()) < 6) and time.monotonic() < end:
                        time.sleep(0.02)
                    assert u.applied == 3000 and u.error is None
                    assert dict(u.malformed) == {"wrong_dim": 4, "unknown_key": 1, "short": 1}
                    ks = np.array(sorted(want), np.int64)
                    w = np.stack([want[k] for k in ks])
                    v1, hit = store.l1["a"].query(ks)  # no refresh: L1 took the updates itself
                    assert hit.all() and np.array_equal(v1, w) and u.l1_updated >= ks.size
                    v, f = l3.get("a", ks)
                    assert f.all() and np.array_equal(v, w)
                    end = time.monotonic() + 10  # a Redis L2 is written by the child once a second
                    while not np.array_equal(l2.get("a", ks)[0], w) and time.monotonic() < end:
                        time.sleep(0.05)
                    v, f = l2.get("a", ks)
                    assert f.all() and np.array_equal(v, w)
                    st = u.stats()
                    assert st["child_cpu_s"] > 0 and st["apply_cpu_s"] > 0 and 0 < st["us_per_update"] < 10_000
                finally:
                    u.stop()
                assert not u._proc.is_alive() and u.error is None
        finally:
            l2.close()
            l3.close()


def test_an_update_process_retries_a_dead_stream_and_a_dead_process_is_reported(tmp_path):
    import os
    import signal

    from splitrpc.services.embedding.update_process import UpdateProcess

    l3 = RocksTier(str(tmp_path / "l3"), [B])
    try:
        with EmbeddingStore([B], l3) as store:
            u = UpdateProcess(store, {"kind": "redis", "port": 1, "stream": "nowhere"})  # nothing listens on port 1
            try:
                end = time.monotonic() + 30
                while u.source_errors < 2 and time.monotonic() < end:
                    time.sleep(0.05)
                assert u.source_errors >= 2 and "ConnectionError" in u.last_source_error  # retried, still alive
                assert u._proc.is_alive() and u.error is None
                os.kill(u._proc.pid, signal.SIGKILL)
                while u.error is None and time.monotonic() < end:
                    time.sleep(0.05)
                assert u.error and "ended" in u.error and u.applied == 0
            finally:
                u.stop()
            with pytest.raises(ValueError, match="kind"):
                UpdateProcess(store, {"port": 1})
    finally:
        l3.close()
