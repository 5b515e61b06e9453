"""The embedding cache on a GPU (issue 36's CUDA L1, splitrpc_embed.h's srpc_emb_dcache_*) against the host cache and the reference model, operation for operation; batches past the staging; device output; the store with device="cuda:0" answering DLRM exactly. Needs a GPU: on a machine without one these tests skip, and tests/test_gpu_emulated.py runs them on the emulated driver (EMULATED: the kernels' host implementations in native/tests/fake_libcuda.c, not the CUDA kernels)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_embed_cache import DIM, Reference, ops

from splitrpc.embedding_cache import SLAB, DeviceEmbeddingCache, EmbeddingCache
from splitrpc.errors import GPUUnavailable


def _device_cache(*args, **kw) -> DeviceEmbeddingCache:
    try:
        return DeviceEmbeddingCache(*args, **kw)
    except GPUUnavailable as e:
        pytest.skip(f"no GPU embedding cache here: {e}")


@pytest.fixture(scope="module", autouse=True)
def _need_gpu():
    _device_cache(DIM, 1).close()


@settings(max_examples=150, deadline=None)
@given(seq=ops, slabs=st.integers(1, 2), capacity=st.integers(1, 100), max_batch=st.sampled_from([0, 3]))
def test_random_operations_match_the_host_cache_and_the_model(seq, slabs, capacity, max_batch):
    """The same keys cached, the same hits and vectors, the same counts (replace's evictions as
    splitrpc_embed.h bounds them; update's: each key once), as the host cache and the model."""
    g = DeviceEmbeddingCache(DIM, capacity, slabs, max_batch=max_batch)
    h = EmbeddingCache(DIM, capacity, slabs)
    ref = Reference(h, slabs * SLAB)
    assert (g.slots, g.sets) == (h.slots, h.sets) and all(g.set_of(k) == h.set_of(k) for k in (-5, 0, 7, 2**62))
    rng = np.random.default_rng(len(seq))
    for what, keys in seq:
        k = np.array(keys, np.int64)
        vecs = rng.standard_normal((len(keys), DIM)).astype(np.float32)
        if what == "query":
            (got, hit), (want, want_hit) = g.query(k), h.query(k)
            ref.query(keys)
            assert np.array_equal(hit, want_hit) and np.array_equal(got, want)
        elif what == "replace":
            was = len(set(keys) & ref.keys())
            want = h.replace(k, vecs)
            assert ref.replace(keys, vecs) == want
            got = g.replace(k, vecs)
            if len(set(keys)) == len(keys):  # with repeats the count is unspecified (splitrpc_embed.h)
                assert want - was <= got <= want
        elif what == "update":
            h.update(k, vecs)
            ref.update(keys, vecs)
            assert g.update(k, vecs) == len(set(keys) & ref.keys())  # distinct keys cached
        elif what == "dump":
            assert sorted(g.dump().tolist()) == sorted(h.dump().tolist()) == sorted(ref.keys())
        else:
            g.clear()
            h.clear()
            ref.sets.clear()
        assert len(g) == len(h) == len(ref.keys())
    every = h.dump()
    assert np.array_equal(g.query(every)[0], h.query(every)[0])
    g.close()
    h.close()


def test_a_batch_larger_than_the_staging_and_device_output():
    g = _device_cache(8, 5000, 2, max_batch=100)
    h = EmbeddingCache(8, 5000, 2)
    rng = np.random.default_rng(3)
    keys = rng.integers(-10**6, 10**6, 4000)
    vecs = rng.standard_normal((4000, 8)).astype(np.float32)
    assert g.replace(keys, vecs) == h.replace(keys, vecs)
    q = rng.integers(-10**6, 10**6, 1500)
    q[:700] = keys[:700]
    (a, ha), (b, hb) = g.query(q), h.query(q)
    assert ha.sum() >= 700 and np.array_equal(ha, hb) and np.array_equal(a, b)
    assert sorted(g.dump()) == sorted(h.dump())

    import cupy  # the device output: the emulated CuPy on the emulated driver, CuPy on a GPU

    out = cupy.asarray(np.full((q.size, 8), -1.0, np.float32))
    cupy.cuda.get_current_stream().synchronize()  # the fill is done before the cache's stream writes
    hit = g.query_device(q, out.data.ptr)
    back = cupy.asnumpy(out)
    assert np.array_equal(hit, hb) and np.array_equal(back[hit], b[hb]) and (back[~hit] == -1.0).all()
    g.close()


def test_bad_arguments():
    for bad in (dict(device=-1), dict(device=True), dict(max_batch=-1), dict(max_batch=2**21)):
        with pytest.raises(ValueError):
            DeviceEmbeddingCache(4, 10, **bad)
    g = _device_cache(4, 10)
    with pytest.raises(ValueError, match="vectors must be"):
        g.replace([1], np.zeros((1, 3), np.float32))
    with pytest.raises(ValueError, match="no device output"):
        g.query_device([1, 2], 0)
    g.close()
    with pytest.raises(ValueError, match="closed"):
        g.query([1])


def test_the_store_on_the_device_answers_dlrm_exactly():
    """DLRM served over a store whose L1 is on cuda:0, its MLPs there too (CuPy), through the
    sparse-dense pipeline (lookups on two threads at once): every reply equals the torch model
    over the exact tables, L1 hits and fills, and the refresh pass runs through the device cache
    (dump, then update)."""
    pytest.importorskip("torch")
    pytest.importorskip("rocksdict")
    import splitrpc
    from splitrpc.services.embedding import dlrm

    cfg = dlrm.StoreConfig(rows=2000, l1_fraction=0.2, l1_device="cuda:0", l2="hashmap")
    svc = dlrm.DLRMService(small=True, config=cfg)
    try:
        assert isinstance(svc.store.l1["c0"], DeviceEmbeddingCache) and "on cuda:0" in dlrm.serve_banner(svc)
        assert svc.device_model is not None  # the MLPs on the L1's device too
        srv = splitrpc.Server("127.0.0.1", 0, wait="block")
        svc.register(srv, max_batch=64, pipeline=(2, 1))
        srv.start()
        cl = splitrpc.Client("127.0.0.1", srv.port, timeout=30.0)
        rng = np.random.default_rng(7)
        for _ in range(3):
            reqs = [svc.example(rng) for _ in range(80)]
            futs = [cl.call_async(dlrm.FUNC_ID, r) for r in reqs]
            assert all(svc.check_reply(r, f.result()) for r, f in zip(reqs, futs))
        st = svc.store.stats()["c0"]
        assert st["l1_hits"] > 0 and st["inserted"] > 0 and 0 < st["l1_size"] <= st["l1_slots"]
        assert svc.store.refresh() == sum(len(c) for c in svc.store.l1.values())
        reqs = [svc.example(rng) for _ in range(40)]
        assert all(svc.check_reply(r, cl.call(dlrm.FUNC_ID, r)) for r in reqs)
        cl.close()
        srv.close()
    finally:
        svc.close()


def test_a_bad_device_is_refused_at_start():
    from splitrpc.services.embedding.store import EmbeddingStore
    from splitrpc.services.embedding.tables import TableSpec

    with pytest.raises(ValueError, match="device must be"):
        EmbeddingStore([TableSpec("t", 10, 4)], None, device="gpu0")
    with pytest.raises(GPUUnavailable):
        EmbeddingStore([TableSpec("t", 100, 4)], None, l1_fraction=0.5, device="cuda:63")


@pytest.mark.parametrize("l1", ["device", "host", "none"])
def test_lookup_device_gathers_what_lookup_returns(tmp_path, l1):
    """EmbeddingStore.lookup_device: the hits written by the device cache in place (or a host
    L1's sent over), misses read from L3, unknown keys the default row; the same vectors as
    lookup(), and the same counts."""
    pytest.importorskip("rocksdict")
    import cupy

    from splitrpc.services.embedding.rocks import RocksTier
    from splitrpc.services.embedding.store import EmbeddingStore
    from splitrpc.services.embedding.tables import TableSpec

    specs = [TableSpec(f"t{j}", 500, 8, seed=j, default=0.5) for j in range(3)]
    l3 = RocksTier(str(tmp_path / "l3"), specs)
    for sp in specs:
        l3.fill(sp.name)
    kw = {"device": "cuda:0"} if l1 == "device" else {}
    rng = np.random.default_rng(5)
    with EmbeddingStore(specs, l3, l1_capacity=200 if l1 != "none" else 0, **kw) as a, \
            EmbeddingStore(specs, l3, l1_capacity=200 if l1 != "none" else 0) as b:
        for _ in range(4):
            cols = {sp.name: rng.integers(-20, 520, 64) for sp in specs}  # some unknown: the default row
            got = cupy.asnumpy(a.lookup_device(cols, cupy))
            want = np.stack([b.lookup(t, k) for t, k in cols.items()], axis=1)
            assert got.shape == (64, 3, 8) and np.array_equal(got, want)
        for t in a.stats():
            sa, sb = a.stats()[t], b.stats()[t]
            assert all(sa[k] == sb[k] for k in ("lookups", "keys", "unique", "l1_hits", "l3_hits", "unknown"))
    l3.close()


def test_whole_tables_on_the_device_answer_dlrm_exactly():
    """The baseline of the device rows: every table whole in GPU memory, the MLPs there too."""
    pytest.importorskip("torch")
    from splitrpc.services.embedding import dlrm

    svc = dlrm.DLRMService(small=True, config=dlrm.StoreConfig(rows=1000, whole_tables=True, l1_device="cuda:0"))
    try:
        rng = np.random.default_rng(9)
        reqs = [svc.example(rng) for _ in range(48)]
        dense = np.stack([np.frombuffer(q[:4 * dlrm.DENSE], "<f4") for q in reqs])
        keys = np.stack([np.frombuffer(q[4 * dlrm.DENSE:], "<i8") for q in reqs])
        keys[3, 5] = 10**6  # unknown: the default vector, as the reference has it
        prob = np.zeros((48, 1), np.float32)
        assert svc.callback(dense, keys, prob) is None
        np.testing.assert_allclose(prob, svc.reference(dense, keys), rtol=1e-4, atol=1e-5)
    finally:
        svc.close()


def test_an_unknown_key_fails_its_call_alone_on_the_device():
    pytest.importorskip("torch")
    from splitrpc.errors import BadRequest
    from splitrpc.services.embedding import dlrm

    svc = dlrm.DLRMService(small=True, config=dlrm.StoreConfig(rows=500, unknown="error", l2="none",
                                                               l1_device="cuda:0"))
    try:
        rng = np.random.default_rng(2)
        reqs = [svc.example(rng) for _ in range(8)]
        dense = np.stack([np.frombuffer(q[:4 * dlrm.DENSE], "<f4") for q in reqs])
        keys = np.stack([np.frombuffer(q[4 * dlrm.DENSE:], "<i8") for q in reqs])
        keys[2, 7] = 500
        prob = np.zeros((8, 1), np.float32)
        bad = svc.callback(dense, keys, prob)
        assert set(bad) == {2} and isinstance(bad[2], BadRequest) and "c7" in str(bad[2])
        ok = [i for i in range(8) if i != 2]
        np.testing.assert_allclose(prob[ok], svc.reference(dense[ok], keys[ok]), rtol=1e-4, atol=1e-5)
    finally:
        svc.close()
