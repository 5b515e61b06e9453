"""bench/helpers/procs.py's Forked: benchmark servers forked from a fork server with a preload: ready once the target says so, a target that fails named, SIGTERM ends one, and each is a process of its own."""
import os

import pytest
from forked_targets import fails_at_start, serves_until_sigterm

from splitrpc.bench.helpers.procs import Forked, ServerDied


def test_a_forked_server_is_ready_then_stopped_by_sigterm(tmp_path):
    p1, p2 = tmp_path / "a", tmp_path / "b"
    with Forked(serves_until_sigterm, (str(p1),), preload=("json",)) as a:
        a.wait_ready(60)
        with Forked(serves_until_sigterm, (str(p2),)) as b:
            b.wait_ready(60)
            pids = {int(p1.read_text()), int(p2.read_text())}
            assert len(pids) == 2 and os.getpid() not in pids  # a process each
    assert p1.read_text().endswith(" stopped") and p2.read_text().endswith(" stopped")  # SIGTERM, handled


def test_a_target_that_fails_is_named_and_not_waited_for():
    f = Forked(fails_at_start)
    with pytest.raises(ServerDied, match="fails_at_start exited with 1"):
        f.wait_ready(60)
    f.stop()
    f.stop()  # twice: nothing
