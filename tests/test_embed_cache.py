"""The native embedding cache (issue 18's L1): random operations against a Python reference model of the same slabsets and LRU rule, bad arguments, and threads using one cache at once."""
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splitrpc._native.embed import SLAB, EmbeddingCache

DIM = 4


class Reference:
    """The cache as a model: per slabset {key: (vector, counter)}, one clock, LRU eviction."""

    def __init__(self, cache: EmbeddingCache, per_set: int):
        self.set_of, self.per_set = cache.set_of, per_set
        self.sets: dict[int, dict[int, tuple[np.ndarray, int]]] = {}
        self.clock = 0

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def query(self, keys):
        out, hit = np.zeros((len(keys), DIM), np.float32), np.zeros(len(keys), bool)
        for i, k in enumerate(keys):
            d = self.sets.setdefault(self.set_of(k), {})
            if k in d:
                out[i], hit[i] = d[k][0], True
                d[k] = (d[k][0], self._tick())
        return out, hit

    def replace(self, keys, vecs) -> int:
        evicted = 0
        for k, v in zip(keys, vecs):
            d = self.sets.setdefault(self.set_of(k), {})
            if k not in d and len(d) == self.per_set:
                del d[min(d, key=lambda x: d[x][1])]
                evicted += 1
            d[k] = (v.copy(), self._tick())
        return evicted

    def update(self, keys, vecs) -> int:
        n = 0
        for k, v in zip(keys, vecs):
            d = self.sets.setdefault(self.set_of(k), {})
            if k in d:
                d[k] = (v.copy(), d[k][1])
                n += 1
        return n

    def keys(self) -> set:
        return {k for d in self.sets.values() for k in d}


ops = st.lists(st.tuples(st.sampled_from(["query", "replace", "update", "dump", "clear"]),
                         st.lists(st.integers(-40, 40) | st.sampled_from([-2**63, 2**63 - 1]), max_size=12)),
               max_size=60)


@settings(max_examples=200, deadline=None)
@given(seq=ops, slabs=st.integers(1, 2), capacity=st.integers(1, 100))
def test_random_operations_match_the_reference_model(seq, slabs, capacity):
    c = EmbeddingCache(DIM, capacity, slabs)
    ref = Reference(c, slabs * SLAB)
    rng = np.random.default_rng(len(seq))
    for what, keys in seq:
        k = np.array(keys, np.int64)
        vecs = rng.standard_normal((len(keys), DIM)).astype(np.float32)
        if what == "query":
            (got, hit), (want, want_hit) = c.query(k), ref.query(keys)
            assert np.array_equal(hit, want_hit) and np.array_equal(got, want)
        elif what == "replace":
            assert c.replace(k, vecs) == ref.replace(keys, vecs)
        elif what == "update":
            assert c.update(k, vecs) == ref.update(keys, vecs)
        elif what == "dump":
            assert sorted(c.dump().tolist()) == sorted(ref.keys())
        else:
            c.clear()
            ref.sets.clear()
        assert len(c) == len(ref.keys()) <= c.slots
    c.close()


def test_layout_and_arguments():
    c = EmbeddingCache(8, 100, 2)
    assert (c.slots, c.sets, c.dim) == (128, 2, 8)
    with pytest.raises(ValueError, match="vectors must be"):
        c.replace([1, 2], np.zeros((2, 7), np.float32))
    with pytest.raises(ValueError, match="1-D"):
        c.query([[1]])
    with pytest.raises(ValueError, match="out must be"):
        c.query([1], out=np.zeros((1, 8), np.float64))
    for bad in (dict(dim=0, capacity=1), dict(dim=4, capacity=0), dict(dim=4, capacity=1, slabs_per_set=0),
                dict(dim=4, capacity=1, slabs_per_set=65), dict(dim=True, capacity=1)):
        with pytest.raises(ValueError):
            EmbeddingCache(**bad)
    c.close()
    c.close()
    with pytest.raises(ValueError, match="closed"):
        c.query([1])


def test_threads_never_see_a_torn_vector():
    c = EmbeddingCache(16, 256, 1)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(300):
            k = rng.integers(0, 1000, 32)
            c.replace(k, np.repeat(k.astype(np.float32)[:, None], 16, axis=1))
            q = rng.integers(0, 1000, 32)
            v, hit = c.query(q)
            rows = v[hit]
            if rows.size and not ((rows == rows[:, :1]).all() and (rows[:, 0] == q[hit]).all()):
                errors.append("a torn row, or another key's vector")

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and len(c) <= c.slots
