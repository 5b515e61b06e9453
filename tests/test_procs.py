"""bench/helpers/procs.py's Forked: benchmark servers forked from a fork server with a preload: ready once the target says so, a target that fails named with its error, SIGTERM ends one, each is a process of its own, and the preload is the installed package's even from a source checkout."""
import json
import os

import pytest
from forked_targets import fails_at_start, reports_what_was_preloaded, serves_until_sigterm

from splitrpc.bench.helpers.procs import Forked, ServerDied


def test_a_forked_server_is_ready_then_stopped_by_sigterm(tmp_path):
    p1, p2 = tmp_path / "a", tmp_path / "b"
    with Forked(serves_until_sigterm, (str(p1),)) as a:
        a.wait_ready(60)
        with Forked(serves_until_sigterm, (str(p2),)) as b:
            b.wait_ready(60)
            pids = {int(p1.read_text()), int(p2.read_text())}
            assert len(pids) == 2 and os.getpid() not in pids  # a process each
    assert p1.read_text().endswith(" stopped") and p2.read_text().endswith(" stopped")  # SIGTERM, handled


def test_a_target_that_fails_is_named_and_not_waited_for():
    f = Forked(fails_at_start)
    with pytest.raises(ServerDied, match=r"(?s)fails_at_start exited with 1: .*RuntimeError: no such model"):
        f.wait_ready(60)
    f.stop()
    f.stop()  # twice: nothing


def test_the_fork_server_preloads_the_installed_package_even_from_a_source_checkout(tmp_path, monkeypatch):
    """Started from the repository root (where pytest runs), the fork server still imports the
    installed splitrpc's modules (it starts in the temporary directory, not before the source
    folder): the servers forked from it have them already."""
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = tmp_path / "pre.json"
    with Forked(reports_what_was_preloaded, (str(out),)) as f:
        f.wait_ready(120)
    pre = json.loads(out.read_text())["preloaded"]
    assert pre["splitrpc.cli"] and pre["splitrpc.services.embedding.dlrm"], pre
