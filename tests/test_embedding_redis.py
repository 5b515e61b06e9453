"""The Redis tier (issue 18) against a real redis-server on loopback: reads what it wrote, partitions apart, serves as the store's L2, and when the server is killed mid-run the lookups fall back to L3 with no failed call."""
import threading

import numpy as np
import pytest
from conftest import require_redis_server

pytest.importorskip("redis")
pytest.importorskip("rocksdict")
require_redis_server()

from splitrpc.services.embedding import tables  # noqa: E402
from splitrpc.services.embedding.redis_tier import LocalRedis, RedisTier  # noqa: E402
from splitrpc.services.embedding.rocks import RocksTier  # noqa: E402
from splitrpc.services.embedding.store import EmbeddingStore  # noqa: E402

SPEC = tables.TableSpec("ads", rows=3000, dim=6, seed=3)
OTHER = tables.TableSpec("users", rows=100, dim=2)


def test_reads_what_it_wrote_and_keeps_tables_apart():
    with LocalRedis() as srv:
        r = RedisTier([SPEC, OTHER], port=srv.port)
        keys = np.array([1, 2, 3, 2999, -5], np.int64)
        r.put("ads", keys, tables.truth(SPEC, keys))
        v, f = r.get("ads", np.array([3, 1, 7], np.int64))
        assert f.tolist() == [True, True, False] and np.array_equal(v[:2], tables.truth(SPEC, [3, 1]))
        assert not r.get("users", keys)[1].any()
        assert r.size("ads") == 5 and r.errors == 0
        r.clear()
        assert r.size("ads") == 0
        r.close()


def test_killing_redis_mid_run_falls_back_to_l3_without_a_failed_call(tmp_path):
    l3 = RocksTier(str(tmp_path / "l3"), [SPEC])
    l3.fill("ads")
    srv = LocalRedis()
    l2 = RedisTier([SPEC], port=srv.port, timeout=0.2, retry_after=0.2)
    failures, wrong, done = [], [], threading.Event()
    try:
        with EmbeddingStore([SPEC], l3, l2=l2, l1_capacity=64, hit_rate_threshold=1.0) as store:
            def work():
                for i in range(300):
                    keys = tables.zipf_keys(SPEC.rows, 200, seed=i)
                    try:
                        if not np.array_equal(store.lookup("ads", keys), tables.truth(SPEC, keys)):
                            wrong.append(i)
                    except Exception as e:  # noqa: BLE001 - any failure is the test's failure
                        failures.append(repr(e))
                done.set()

            t = threading.Thread(target=work)
            t.start()
            while store.stats()["ads"]["l2_hits"] == 0 and not done.is_set():
                done.wait(0.01)
            srv.stop()  # mid-run
            t.join()
            st = store.stats()["ads"]
        assert not failures and not wrong
        assert st["l2_hits"] > 0 and st["l3_hits"] > 0 and l2.errors > 0
    finally:
        srv.stop()
        l2.close()
        l3.close()
