"""test_gnn_features.py: the tiered feature store (splitrpc.services.gnn.features): exact rows from all three tiers (a real LMDB disk tier), errors, hit counters, concurrent gathers and the hit_rate helper."""
import os
import threading

import numpy as np
import pytest

lmdb = pytest.importorskip("lmdb")

from splitrpc.services.gnn.features import (FeatureStoreError, TieredFeatureStore,  # noqa: E402
                                             _map_size, hit_rate)
from splitrpc.services.gnn.graph import node_features  # noqa: E402
from splitrpc.services.gnn.placement import place_tiers  # noqa: E402

N, DIM = 200, 16


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.fixture
def setup(tmp_path):
    feats = node_features(N, DIM, seed=5)
    order = np.random.default_rng(1).permutation(N)
    tp = place_tiers(order, {"device": 30, "host": 50, "disk": None})
    store = TieredFeatureStore.build(feats, tp, tmp_path / "disk")
    yield feats, tp, store, tmp_path / "disk"
    store.close()


def test_gather_returns_the_original_rows_from_every_tier(setup):
    feats, tp, store, _ = setup
    ids = np.concatenate([tp.ids("device")[:5], tp.ids("host")[:5], tp.ids("disk")[:5]])
    ids = np.concatenate([ids, ids[::-1], [ids[3]] * 4])  # request order mixed, with repeats
    got = store.gather(ids)
    assert got.dtype == np.float32 and got.shape == (ids.size, DIM)
    np.testing.assert_array_equal(got, feats[ids])
    everything = np.random.default_rng(2).permutation(N)
    np.testing.assert_array_equal(store.gather(everything), feats[everything])
    assert store.gather(np.empty(0, dtype=np.int64)).shape == (0, DIM)
    np.testing.assert_array_equal(store.gather([7]), feats[[7]])


def test_counters(setup):
    feats, tp, store, _ = setup
    ids = np.concatenate([tp.ids("device")[:3], tp.ids("host")[:4], tp.ids("disk")[:5], tp.ids("disk")[:2]])
    store.gather(ids)
    store.gather(tp.ids("host")[:1])
    st = store.stats()
    assert st == {"gathered": 15, "calls": 2, "hits": {"device": 3, "host": 5, "disk": 7}}
    store.reset_stats()
    assert store.stats() == {"gathered": 0, "calls": 0, "hits": {"device": 0, "host": 0, "disk": 0}}


@pytest.mark.parametrize("bad", [-1, N])
def test_out_of_range_ids_raise_index_error(setup, bad):
    _, _, store, _ = setup
    with pytest.raises(IndexError, match=f"node id {bad} out of range 0 .. {N - 1}"):
        store.gather([0, 1, bad, 2])
    assert store.stats()["gathered"] == 0  # nothing counted for a refused call


def test_bad_ids_and_closed_store(setup):
    _, _, store, _ = setup
    with pytest.raises(ValueError, match="1-D integer"):
        store.gather([[1, 2]])
    with pytest.raises(ValueError, match="1-D integer"):
        store.gather([1.5])
    store.close()
    with pytest.raises(ValueError, match="closed"):
        store.gather([1])
    store.close()  # twice is fine


def test_concurrent_gathers_return_the_right_rows(setup):
    feats, tp, store, _ = setup
    errors, per_thread = [], 40
    threads = 8

    def worker(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(per_thread):
                ids = rng.integers(0, N, size=int(rng.integers(1, 64)))
                got = store.gather(ids)
                if not np.array_equal(got, feats[ids]):
                    errors.append(f"thread {seed}: wrong rows")
        except Exception as e:  # reported below
            errors.append(repr(e))

    ts = [threading.Thread(target=worker, args=(s,)) for s in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    st = store.stats()
    assert st["calls"] == threads * per_thread
    assert sum(st["hits"].values()) == st["gathered"]
    expected = 0  # the same draws again
    for s in range(threads):
        rng = np.random.default_rng(s)
        for _ in range(per_thread):
            expected += rng.integers(0, N, size=int(rng.integers(1, 64))).size
    assert st["gathered"] == expected


def test_disk_tier_is_an_lmdb_with_one_raw_record_per_disk_node(setup):
    feats, tp, store, path = setup
    store.close()  # LMDB opens a file once per process
    disk = tp.ids("disk")
    with lmdb.open(str(path), readonly=True, lock=False) as env:
        with env.begin() as txn:
            assert env.stat()["entries"] == disk.size
            for k, v in txn.cursor():
                node = int.from_bytes(k, "big")
                assert len(k) == 8 and node in set(disk.tolist())
                np.testing.assert_array_equal(np.frombuffer(v, dtype=np.float32), feats[node])
            assert txn.get(int(tp.ids("device")[0]).to_bytes(8, "big")) is None
    # The map is sized from the data, not a huge fixed reservation.
    raw = disk.size * (DIM * 4 + 8)
    assert os.path.getsize(path / "data.mdb") <= 4 * raw + (1 << 20)


def test_device_tier_emulation_is_reported(setup, tmp_path):
    feats, tp, store, path = setup
    assert store.device_emulated == (not cuda_available())
    if store.device_emulated:
        assert "device_emulated=True" in repr(store) and "emulated in host memory" in repr(store)
    with TieredFeatureStore(feats, tp, path, device="cpu") as forced:  # shares the open disk tier
        assert forced.device_emulated and "device_emulated=True" in repr(forced)
        np.testing.assert_array_equal(forced.gather(tp.ids("device")), feats[tp.ids("device")])
        with pytest.raises(ValueError, match="is open in this process"):
            TieredFeatureStore.build(feats, tp, path)
    np.testing.assert_array_equal(store.gather(tp.ids("disk")), feats[tp.ids("disk")])  # still open for store
    if not cuda_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            TieredFeatureStore(feats, tp, path, device="cuda")


def test_rebuild_replaces_and_mismatch_is_detected(setup, tmp_path):
    feats, tp, store, path = setup
    store.close()
    tp2 = place_tiers(np.arange(N), {"device": 10, "host": 10, "disk": None})
    with pytest.raises(FeatureStoreError, match="holds 120 records but the placement puts 180"):
        TieredFeatureStore(feats, tp2, path)
    with TieredFeatureStore.build(feats, tp2, path) as s2:  # same directory: replaced
        np.testing.assert_array_equal(s2.gather(np.arange(N)), feats)
    with pytest.raises(ValueError, match="no disk tier"):
        TieredFeatureStore(feats, tp2, tmp_path / "elsewhere")


def test_bad_inputs(tmp_path):
    feats = node_features(10, 4)
    tp = place_tiers(np.arange(10), {"device": 2, "host": 3, "disk": None})
    with pytest.raises(ValueError, match="tiers"):
        TieredFeatureStore.build(feats, place_tiers(np.arange(10), {"gpu": 2, "cpu": None}), tmp_path)
    with pytest.raises(ValueError, match="float32"):
        TieredFeatureStore.build(feats.astype(np.float64), tp, tmp_path)
    with pytest.raises(ValueError, match="covers 10 nodes but the features have 9 rows"):
        TieredFeatureStore.build(feats[:9], tp, tmp_path)
    with pytest.raises(ValueError, match="device must be"):
        TieredFeatureStore.build(feats, tp, tmp_path, device="tpu")


def test_no_disk_tier_and_wide_rows(tmp_path):
    feats = node_features(40, 4)
    tp = place_tiers(np.arange(40)[::-1].copy(), {"device": 10, "host": None, "disk": None})
    with TieredFeatureStore.build(feats, tp, tmp_path / "a") as s:
        np.testing.assert_array_equal(s.gather(np.arange(40)), feats)
    # Rows bigger than half a page go to LMDB overflow pages: the map estimate must still hold them.
    wide = node_features(300, 900)
    tp = place_tiers(np.arange(300), {"device": 0, "host": 0, "disk": None})
    with TieredFeatureStore.build(wide, tp, tmp_path / "b") as s:
        ids = np.random.default_rng(0).integers(0, 300, 500)
        np.testing.assert_array_equal(s.gather(ids), wide[ids])
        assert s.stats()["hits"]["disk"] == 500
    assert _map_size(300, 3600) >= 300 * 4096  # one overflow page per record at least


def test_hit_rate():
    tp = place_tiers(np.array([3, 1, 0, 2]), {"device": 2, "host": None, "disk": None})
    assert hit_rate([3, 3, 1, 0], tp) == 0.75
    assert hit_rate([3, 3, 1, 0], tp, tier="host") == 0.25
    assert hit_rate(np.array([2, 0]), tp) == 0.0
    with pytest.raises(ValueError, match="non-empty"):
        hit_rate([], tp)
    with pytest.raises(IndexError, match="node id 4"):
        hit_rate([4], tp)
    with pytest.raises(ValueError, match="no tier 'gpu'"):
        hit_rate([1], tp, tier="gpu")
