"""The embedding store (issue 18): synchronous lookups return exactly the ground truth, asynchronous ones the default vector for a miss and the truth after insertion; duplicate keys, separate tables, unknown keys, the L2 hash map's partitions and eviction, refresh after an L3 change, and an L3 path that cannot be written."""

import numpy as np
import pytest

pytest.importorskip("rocksdict")
xxhash = pytest.importorskip("xxhash")

from splitrpc.services.embedding import tables  # noqa: E402
from splitrpc.services.embedding.hashmap import HashMapTier  # noqa: E402
from splitrpc.services.embedding.rocks import RocksTier, StoreError  # noqa: E402
from splitrpc.services.embedding.store import EmbeddingStore  # noqa: E402
from splitrpc.services.embedding.tables import TableSpec, UnknownKey  # noqa: E402

T1 = TableSpec("clicks", rows=5000, dim=8, default=-7.0, seed=1)
T2 = TableSpec("items", rows=800, dim=4, unknown="error", seed=2)


@pytest.fixture(scope="module")
def l3(tmp_path_factory):
    r = RocksTier(str(tmp_path_factory.mktemp("l3")), [T1, T2])
    r.fill("clicks")
    r.fill("items")
    yield r
    r.close()


def _store(l3, **kw):
    return EmbeddingStore([T1, T2], l3, l2=HashMapTier([T1, T2], 2000), **kw)


def test_synchronous_lookups_return_exactly_the_ground_truth(l3):
    with _store(l3, l1_fraction=0.05, hit_rate_threshold=1.0) as s:
        for seed in range(5):
            keys = tables.zipf_keys(T1.rows, 3000, seed=seed)
            assert np.array_equal(s.lookup("clicks", keys), tables.truth(T1, keys))
        st = s.stats()["clicks"]
        assert st["defaults_missing"] == 0 and st["not_found"] == 0
        assert st["l1_hits"] > 0 and st["l2_hits"] + st["l3_hits"] == st["inserted"]
        assert 0 < st["l1_size"] <= st["l1_slots"]


def test_asynchronous_misses_get_the_default_then_the_truth(l3):
    with _store(l3, l1_capacity=4096, hit_rate_threshold=0.0) as s:
        keys = np.array([5, 17, 5, 4999], np.int64)
        first = s.lookup("clicks", keys)
        assert (first == -7.0).all()
        s.flush()
        assert np.array_equal(s.lookup("clicks", keys), tables.truth(T1, keys))
        st = s.stats()["clicks"]
        assert st["defaults_missing"] == 3 and st["inserted"] == 3 and st["l1_hits"] == 3


def test_the_threshold_decides_per_lookup(l3):
    with _store(l3, l1_capacity=4096, hit_rate_threshold=0.5) as s:
        s.lookup("clicks", np.arange(10))   # hit rate 0 < 0.5: synchronous, inserted
        mixed = np.arange(5, 15)            # 5 of 10 cached: 0.5 >= 0.5: the 5 new ones get the default
        got = s.lookup("clicks", mixed)
        assert np.array_equal(got[:5], tables.truth(T1, mixed[:5])) and (got[5:] == -7.0).all()
        s.flush()
        assert np.array_equal(s.lookup("clicks", mixed), tables.truth(T1, mixed))


def test_duplicate_keys_and_separate_tables(l3):
    with _store(l3, hit_rate_threshold=1.0) as s:
        keys = np.array([3, 3, 3, 7, 3], np.int64)
        got = s.lookup("clicks", keys)
        assert np.array_equal(got, tables.truth(T1, keys)) and (got[0] == got[4]).all()
        assert s.stats()["clicks"]["unique"] == 2
        a, b = s.lookup("clicks", [3]), s.lookup("items", [3])
        assert a.shape == (1, 8) and b.shape == (1, 4)
        assert np.array_equal(b, tables.truth(T2, [3])) and not np.array_equal(a[0, :4], b[0])


def test_unknown_keys_get_the_default_or_an_error_per_table(l3):
    with _store(l3) as s:
        got = s.lookup("clicks", [-1, 2, T1.rows])
        assert (got[0] == -7.0).all() and (got[2] == -7.0).all() and np.array_equal(got[1], tables.truth(T1, [2])[0])
        with pytest.raises(UnknownKey, match="key 800 is not in 0 .. 799"):
            s.lookup("items", [1, 800])
        assert s.stats()["items"]["unknown"] == 1 and s.stats()["clicks"]["unknown"] == 2
        with pytest.raises(KeyError, match="unknown table"):
            s.lookup("nope", [1])


def test_an_unfilled_l3_answers_the_default_and_counts_it(tmp_path):
    spec = TableSpec("empty", rows=100, dim=2, default=1.5)
    r = RocksTier(str(tmp_path / "l3"), [spec])
    try:
        with EmbeddingStore([spec], r, hit_rate_threshold=1.0) as s:
            assert (s.lookup("empty", [1, 2]) == 1.5).all()
            assert s.stats()["empty"]["not_found"] == 2
    finally:
        r.close()


def test_refresh_brings_l3_changes_into_l1(l3, tmp_path):
    spec = TableSpec("live", rows=50, dim=3)
    r = RocksTier(str(tmp_path / "l3"), [spec])
    try:
        r.fill("live")
        with EmbeddingStore([spec], r, l1_capacity=64) as s:
            keys = np.arange(10)
            assert np.array_equal(s.lookup("live", keys), tables.truth(spec, keys))
            r.put("live", keys[:4], np.full((4, 3), 9.0, np.float32))
            assert not (s.lookup("live", keys[:4]) == 9.0).all()   # L1 still holds the old rows
            assert s.refresh() == 10
            assert (s.lookup("live", keys[:4]) == 9.0).all()
    finally:
        r.close()


def test_l3_path_that_cannot_be_written_fails_at_start(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match="cannot be written"):
        RocksTier(str(blocker / "db"), [T1])


def test_hashmap_partitions_by_xxh64_and_evicts_to_its_share():
    keys = np.array([0, 1, -1, 2**63 - 1, -2**63, 99], np.int64)
    want = [xxhash.xxh64_intdigest(int(k).to_bytes(8, "little", signed=True)) for k in keys]
    assert tables.xxh64(keys).tolist() == want
    spec = TableSpec("h", rows=10**6, dim=2)
    for eviction in ("lru", "random"):
        h = HashMapTier([spec], 160, partitions=16, overflow_margin=0.5, eviction=eviction)
        for a in range(0, 2000, 100):
            k = np.arange(a, a + 100)
            h.put("h", k, tables.truth(spec, k))
        assert h.size("h") <= 16 * h.limit and h.evicted > 0
        last = np.arange(1900, 2000)
        v, f = h.get("h", last)
        assert np.array_equal(v[f], tables.truth(spec, last[f]))
        if eviction == "lru":
            assert f.mean() > 0.5  # the newest keys stay
    with pytest.raises(ValueError):
        HashMapTier([spec], 10, eviction="fifo")


def test_bad_store_settings(l3):
    with pytest.raises(ValueError):
        EmbeddingStore([T1, T1], l3)
    with pytest.raises(ValueError):
        EmbeddingStore([T1], l3, hit_rate_threshold=1.5)
    with pytest.raises(ValueError):
        TableSpec("bad name", 10, 2)
    with pytest.raises(ValueError):
        TableSpec("t", 10, 2, unknown="drop")


def test_without_l1_every_lookup_reads_below_and_whole_tables_index_the_truth(l3):
    from splitrpc.services.embedding.store import WholeTables

    keys = tables.zipf_keys(T1.rows, 500, seed=9)
    with EmbeddingStore([T1], l3, l1_capacity=0) as s:
        for _ in range(2):
            assert np.array_equal(s.lookup("clicks", keys), tables.truth(T1, keys))
        st = s.stats()["clicks"]
        assert st["l1_hits"] == 0 and st["l3_hits"] == st["unique"] and st["l1_slots"] == 0
        assert s.refresh() == 0
    w = WholeTables([T1, T2])
    assert np.array_equal(w.lookup("clicks", keys), tables.truth(T1, keys))
    assert (w.lookup("clicks", [-4])[0] == -7.0).all()
    with pytest.raises(UnknownKey):
        w.lookup("items", [800])
