"""The DLRM service over the embedding store (issue 18): replies equal the model over the exact tables, one batch's keys looked up once per table, unknown keys per table (default vector or BAD_REQUEST for that call alone), store configurations, and `splitrpc serve --models dlrm` with `splitrpc call dlrm`."""
import json
import subprocess

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("rocksdict")

import splitrpc  # noqa: E402
from conftest import free_udp_port, settled, splitrpc_cmd  # noqa: E402
from splitrpc.services.embedding import dlrm  # noqa: E402

ROWS = 3000


@pytest.fixture(scope="module")
def served():
    svc = dlrm.DLRMService(small=True, config=dlrm.StoreConfig(rows=ROWS, unknown="default"))
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    svc.register(srv, max_batch=64)
    srv.start()
    cl = splitrpc.Client("127.0.0.1", srv.port, timeout=20.0)
    yield svc, cl
    cl.close()
    srv.close()
    svc.close()


def test_replies_equal_the_model_over_the_exact_tables(served):
    svc, cl = served
    rng = np.random.default_rng(4)
    for _ in range(2):  # the second round finds the hot keys in L1
        reqs = [svc.example(rng) for _ in range(60)]
        futs = [cl.call_async(dlrm.FUNC_ID, r) for r in reqs]
        for r, f in zip(reqs, futs):
            assert svc.check_reply(r, f.result())
    st = svc.store.stats()["c0"]
    assert st["lookups"] <= 120 and st["keys"] >= 120      # one lookup per table per batch
    assert st["unique"] <= st["keys"]
    assert st["l1_hits"] > 0


def test_unknown_keys_get_the_default_vector(served):
    svc, cl = served
    req = bytearray(svc.example(np.random.default_rng(1)))
    np.frombuffer(memoryview(req)[4 * dlrm.DENSE:], "<i8")[3] = ROWS + 5  # table c3 does not know it
    before = svc.store.stats()["c3"]["unknown"]
    assert svc.check_reply(bytes(req), cl.call(dlrm.FUNC_ID, bytes(req)))  # the reference uses the default too
    assert svc.store.stats()["c3"]["unknown"] == before + 1


@pytest.mark.parametrize("pipeline", [None, (2, 1)], ids=["model-based", "sparse-dense"])
def test_unknown_keys_fail_their_call_alone_where_the_table_says_so(pipeline):
    """Also through Hercules's sparse-dense pipeline (issue 32): the lookups on one of two
    threads, the MLPs on another; exact replies, and a bad key fails its call alone."""
    svc = dlrm.DLRMService(small=True, config=dlrm.StoreConfig(rows=500, unknown="error", l2="none"))
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    svc.register(srv, max_batch=16, pipeline=pipeline)
    srv.start()
    try:
        with splitrpc.Client("127.0.0.1", srv.port, timeout=20.0) as cl:
            good = svc.example(np.random.default_rng(2))
            bad = bytearray(good)
            np.frombuffer(memoryview(bad)[4 * dlrm.DENSE:], "<i8")[7] = -1
            fb, fg = cl.call_async(dlrm.FUNC_ID, bytes(bad)), cl.call_async(dlrm.FUNC_ID, good)
            with pytest.raises(splitrpc.BadRequest, match="key -1 of table c7 is not in 0 .. 499"):
                fb.result()
            assert svc.check_reply(good, fg.result())
            reqs = [svc.example(np.random.default_rng(10 + i)) for i in range(40)]
            futs = [cl.call_async(dlrm.FUNC_ID, r) for r in reqs]
            assert all(svc.check_reply(r, f.result()) for r, f in zip(reqs, futs))
        if pipeline is None:
            assert "dlrm" not in srv.stats()["executors"]
        else:  # the last batch's tally is counted just after its replies leave
            ex = settled(srv, lambda s: s["executors"]["dlrm"]["stages"][1]["running"] == 0)["executors"]["dlrm"]
            assert ex["kind"] == "stages" and ex["stages"][0]["batches"] == ex["stages"][1]["batches"] >= 2
    finally:
        srv.close()
        svc.close()


def test_store_configurations_are_checked(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"l2": "hashmap", "l1_fraction": 0.01}))
    assert dlrm.load_config(str(p)).l1_fraction == 0.01
    p.write_text(json.dumps({"l2": "memcached"}))
    with pytest.raises(ValueError, match="l2 must be"):
        dlrm.load_config(str(p))
    p.write_text(json.dumps({"l4": 1}))
    with pytest.raises(ValueError, match="unknown key"):
        dlrm.load_config(str(p))
    p.write_text("[1]")
    with pytest.raises(ValueError, match="JSON object"):
        dlrm.load_config(str(p))


def test_serve_and_call_dlrm_from_the_command_line(tmp_path, run_env):
    cfg = tmp_path / "store.json"
    cfg.write_text(json.dumps({"l3": str(tmp_path / "l3"), "l2": "hashmap", "l1_fraction": 0.02}))
    port = free_udp_port()
    srv = subprocess.Popen(splitrpc_cmd("serve", "--port", str(port), "--models", "dlrm", "--small",
                                        "--embedding-store", str(cfg), "--wait", "block", "--dlrm-pipeline", "2,1",
                                        "--drain-linger", "0"),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **run_env)
    try:
        line = ""
        for line in srv.stdout:
            if "serving" in line:
                break
        assert "dlrm(17)" in line and "26 tables x 40000 keys" in line, line
        assert "sparse-dense pipeline: 2 lookup threads, 1 MLP threads" in line, line
        out = subprocess.run(splitrpc_cmd("call", "dlrm", "--small", "--port", str(port)), capture_output=True,
                             text=True, timeout=120, **run_env)
        assert out.returncode == 0 and "reply matches the model over the exact tables: True" in out.stdout, \
            out.stdout + out.stderr
    finally:
        srv.terminate()
        rest = srv.communicate(timeout=60)[0]
    assert "dlrm:" in rest and "L1 hit rate" in rest, rest


def test_the_whole_tables_baseline_answers_the_same():
    svc = dlrm.DLRMService(small=True, config=dlrm.StoreConfig(rows=ROWS, whole_tables=True))
    try:
        rng = np.random.default_rng(8)
        reqs = [svc.example(rng) for _ in range(4)]
        dense = np.stack([np.frombuffer(r[:4 * dlrm.DENSE], "<f4") for r in reqs])
        keys = np.stack([np.frombuffer(r[4 * dlrm.DENSE:], "<i8") for r in reqs])
        prob = np.empty((4, 1), np.float32)
        assert svc.callback(dense, keys, prob) is None
        assert np.allclose(prob, svc.reference(dense, keys), atol=1e-6)
        assert "whole in memory" in dlrm.serve_banner(svc)
    finally:
        svc.close()
