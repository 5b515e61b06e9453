"""The kept copy of filled L3 tables (server/embedding/l3_cache.py): a second temporary L3 of the same tables is a clone (no fill), reads the ground truth, and its writes reach neither the kept copy nor another clone; tables or code that differ fill anew; SPLITRPC_L3_CACHE=off fills each time; a folder others can write is not used; an incomplete copy is filled again; the least recently used copy goes past KEEP; two processes at once fill once."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("rocksdict")

from splitrpc.services.embedding import l3_cache  # noqa: E402
from splitrpc.services.embedding.rocks import RocksTier  # noqa: E402
from splitrpc.services.embedding.tables import TableSpec, truth  # noqa: E402


def specs(rows=300, seed=0):
    return [TableSpec("a", rows, 8, seed=seed), TableSpec("b", rows, 4, seed=seed)]


class Filler:
    """fill(path) as DLRMService's, counting its calls."""

    def __init__(self, sp):
        self.sp, self.calls = sp, 0

    def __call__(self, path):
        self.calls += 1
        t = RocksTier(path, self.sp)
        try:
            t.fill_all()
        finally:
            t.close()


def read_all(path, sp):
    t = RocksTier(path, sp)
    try:
        return {s.name: t.get(s.name, np.arange(s.rows))[0] for s in sp}
    finally:
        t.close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv(l3_cache.CACHE_ENV, str(root))
    return root


def test_a_second_temporary_is_a_clone_with_the_truth_and_its_writes_stay_its_own(cache, tmp_path):
    sp = specs()
    fill = Filler(sp)
    one = l3_cache.filled_temporary(sp, fill, prefix=str(tmp_path / "t-"))
    two = l3_cache.filled_temporary(sp, fill, prefix=str(tmp_path / "t-"))
    assert fill.calls == 1 and one != two
    for path in (one, two):
        got = read_all(path, sp)
        for s in sp:
            assert np.array_equal(got[s.name], truth(s, np.arange(s.rows))), s.name
    kept = cache / l3_cache.key(sp)
    assert any(n.endswith(".sst") and os.stat(kept / n).st_nlink >= 3 for n in os.listdir(kept))  # linked, not copied
    t = RocksTier(one, sp)  # a write into one clone, then compacted: its SSTs are rewritten
    t.put("a", np.array([5]), np.full((1, 8), 7.0, np.float32))
    t.compact()
    t.close()
    assert read_all(one, sp)["a"][5].tolist() == [7.0] * 8
    assert np.array_equal(read_all(two, sp)["a"][5], truth(sp[0], np.array([5]))[0])
    three = l3_cache.filled_temporary(sp, fill, prefix=str(tmp_path / "t-"))
    assert fill.calls == 1 and np.array_equal(read_all(three, sp)["a"], truth(sp[0], np.arange(300)))


def test_other_tables_fill_anew_and_the_least_recently_used_goes(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(l3_cache, "KEEP", 2)
    sets = [specs(rows=100 + i) for i in range(3)]
    assert len({l3_cache.key(s) for s in sets}) == 3 and l3_cache.key(specs(seed=1)) != l3_cache.key(specs())
    fills = [Filler(s) for s in sets]
    l3_cache.filled_temporary(sets[0], fills[0], prefix=str(tmp_path / "t-"))
    l3_cache.filled_temporary(sets[1], fills[1], prefix=str(tmp_path / "t-"))
    os.utime(cache / l3_cache.key(sets[0]) / l3_cache.DONE, (1, 1))  # sets[0] used longest ago
    l3_cache.filled_temporary(sets[2], fills[2], prefix=str(tmp_path / "t-"))
    assert [f.calls for f in fills] == [1, 1, 1]
    assert sorted(n for n in os.listdir(cache) if n.startswith("tables-") and "." not in n) == \
        sorted(l3_cache.key(s) for s in sets[1:])
    l3_cache.filled_temporary(sets[0], fills[0], prefix=str(tmp_path / "t-"))  # gone: filled again
    assert fills[0].calls == 2


def test_off_fills_each_time(tmp_path, monkeypatch):
    monkeypatch.setenv(l3_cache.CACHE_ENV, "off")
    sp = specs()
    fill = Filler(sp)
    for _ in range(2):
        p = l3_cache.filled_temporary(sp, fill, prefix=str(tmp_path / "t-"))
        assert np.array_equal(read_all(p, sp)["b"], truth(sp[1], np.arange(300)))
    assert fill.calls == 2


def test_a_folder_others_can_write_is_not_used(cache, tmp_path, caplog):
    cache.mkdir(mode=0o777)
    os.chmod(cache, 0o777)
    sp = specs()
    fill = Filler(sp)
    p = l3_cache.filled_temporary(sp, fill, prefix=str(tmp_path / "t-"))
    assert fill.calls == 1 and os.listdir(cache) == [] and "cannot be used" in caplog.text
    assert np.array_equal(read_all(p, sp)["a"], truth(sp[0], np.arange(300)))


def test_an_incomplete_copy_is_filled_again(cache, tmp_path):
    sp = specs()
    (cache / l3_cache.key(sp)).mkdir(parents=True, mode=0o700)
    (cache / l3_cache.key(sp) / "CURRENT").write_text("garbage\n")  # a fill that died before its marker
    os.chmod(cache, 0o700)
    fill = Filler(sp)
    p = l3_cache.filled_temporary(sp, fill, prefix=str(tmp_path / "t-"))
    assert fill.calls == 1 and np.array_equal(read_all(p, sp)["a"], truth(sp[0], np.arange(300)))


def test_two_processes_at_once_fill_once(cache, tmp_path):
    log = tmp_path / "fills"
    code = textwrap.dedent(f"""
        import sys, time
        from splitrpc.services.embedding import l3_cache
        from splitrpc.services.embedding.rocks import RocksTier
        from splitrpc.services.embedding.tables import TableSpec
        sp = [TableSpec("a", 300, 8), TableSpec("b", 300, 4)]
        def fill(path):
            with open({str(log)!r}, "a") as f:
                f.write("fill\\n")
            time.sleep(1.0)  # long enough for the other process to wait on the lock
            t = RocksTier(path, sp)
            t.fill_all()
            t.close()
        print(l3_cache.filled_temporary(sp, fill, prefix={str(tmp_path / "p-")!r}))
    """)
    env = {**os.environ, l3_cache.CACHE_ENV: str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
             for _ in range(2)]
    paths = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs) and len(set(paths)) == 2
    assert log.read_text().splitlines() == ["fill"]
    for p in paths:
        assert np.array_equal(read_all(p, specs())["b"], truth(specs()[1], np.arange(300)))
