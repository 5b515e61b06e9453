"""The tiers below L1 (the L2 hash map, L2 in a real redis-server on loopback, the L3 RocksDB) against one contract (server/embedding/tier.py): lookups, inserts and updates, tables apart, dump, stats, and bad input refused before anything is written."""

import numpy as np
import pytest
from conftest import require_redis_server

pytest.importorskip("rocksdict")
pytest.importorskip("redis")
require_redis_server()

from splitrpc.services.embedding import tables  # noqa: E402
from splitrpc.services.embedding.hashmap import HashMapTier  # noqa: E402
from splitrpc.services.embedding.redis_tier import LocalRedis, RedisTier  # noqa: E402
from splitrpc.services.embedding.rocks import RocksTier  # noqa: E402
from splitrpc.services.embedding.tier import Tier  # noqa: E402

ADS = tables.TableSpec("ads", rows=5000, dim=6, seed=3)
USERS = tables.TableSpec("users", rows=100, dim=2)
SPECS = [ADS, USERS]


@pytest.fixture(scope="module")
def redis_server():
    with LocalRedis() as srv:
        yield srv


@pytest.fixture(params=["hashmap", "redis", "rocksdb"])
def tier(request, tmp_path, redis_server):
    if request.param == "hashmap":
        t = HashMapTier(SPECS, capacity=100_000)
    elif request.param == "redis":
        t = RedisTier(SPECS, port=redis_server.port, prefix=f"contract-{request.node.name}")
        t.clear()
    else:
        t = RocksTier(str(tmp_path / "l3"), SPECS)
    yield t
    t.close()


def _vec(spec, keys, bump=0.0):
    return tables.truth(spec, keys) + np.float32(bump)


def test_declares_the_interface(tier):
    assert isinstance(tier, Tier)
    assert tier.stats()["name"] == tier.name and tier.stats()["keys"] == {"ads": 0, "users": 0}


def test_a_key_never_written_is_not_found(tier):
    v, f = tier.get("ads", np.array([0, 7, -3, 2**62], np.int64))
    assert v.shape == (4, ADS.dim) and v.dtype == np.float32 and not f.any() and not v.any()
    v, f = tier.get("ads", np.zeros(0, np.int64))
    assert v.shape == (0, ADS.dim) and f.shape == (0,)


def test_reads_what_it_wrote_and_the_last_write_wins(tier):
    keys = np.array([5, 1, 4999, -8, 77], np.int64)
    tier.put("ads", keys, _vec(ADS, keys))
    tier.put("ads", keys[:2], _vec(ADS, keys[:2], bump=1.0))  # an update of two of them
    v, f = tier.get("ads", np.array([1, 77, 6, 5], np.int64))
    assert f.tolist() == [True, True, False, True]
    assert np.array_equal(v[0], _vec(ADS, [1], 1.0)[0]) and np.array_equal(v[3], _vec(ADS, [5], 1.0)[0])
    assert np.array_equal(v[1], _vec(ADS, [77])[0]) and not v[2].any()
    assert tier.stats()["keys"] == {"ads": 5, "users": 0}


def test_tables_are_apart_and_put_many_writes_each(tier):
    k = np.arange(10, dtype=np.int64)
    tier.put_many({"ads": (k, _vec(ADS, k)), "users": (k[:4], _vec(USERS, k[:4]))})
    va, fa = tier.get("ads", k)
    vu, fu = tier.get("users", k)
    assert fa.all() and np.array_equal(va, _vec(ADS, k))
    assert fu.tolist() == [True] * 4 + [False] * 6 and np.array_equal(vu[:4], _vec(USERS, k[:4]))


def test_dump_holds_exactly_what_was_written(tier):
    rng = np.random.default_rng(1)
    keys = rng.choice(np.arange(-1000, 1000, dtype=np.int64), 300, replace=False)
    tier.put("ads", keys, _vec(ADS, keys))
    dk, dv = tier.dump("ads")
    assert np.array_equal(dk, np.sort(keys)) and np.array_equal(dv, _vec(ADS, np.sort(keys)))
    uk, uv = tier.dump("users")
    assert uk.dtype == np.int64 and uk.size == 0 and uv.shape == (0, USERS.dim)


@pytest.mark.parametrize("call", ["get", "put", "put_many", "dump"])
def test_an_unknown_table_is_a_key_error(tier, call):
    k = np.array([1], np.int64)
    args = {"get": ("clicks", k), "put": ("clicks", k, np.zeros((1, 6), np.float32)),
            "put_many": ({"ads": (k, _vec(ADS, k)), "clicks": (k, np.zeros((1, 6), np.float32))},),
            "dump": ("clicks",)}[call]
    with pytest.raises(KeyError, match="clicks"):
        getattr(tier, call)(*args)
    assert not tier.get("ads", k)[1].any()  # put_many wrote nothing of its good table either


@pytest.mark.parametrize("keys, vectors", [
    (np.array([1, 2], np.int64), np.zeros((2, 5), np.float32)),         # wrong dimension
    (np.array([1, 2], np.int64), np.zeros((3, 6), np.float32)),         # a row too many
    (np.array([[1, 2]], np.int64), np.zeros((2, 6), np.float32)),       # keys not 1-D
    (np.array([1.5, 2.0]), np.zeros((2, 6), np.float32)),               # keys not integers
    (np.array([1, 2], np.int64), np.array([["a"] * 6] * 2)),            # vectors not numbers
])
def test_a_bad_batch_is_refused_before_anything_is_written(tier, keys, vectors):
    with pytest.raises(ValueError):
        tier.put("ads", keys, vectors)
    with pytest.raises(ValueError):
        tier.put_many({"users": (np.array([3], np.int64), _vec(USERS, [3])), "ads": (keys, vectors)})
    assert tier.stats()["keys"] == {"ads": 0, "users": 0}
