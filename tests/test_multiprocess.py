"""Multi-process serving (issue 15, item 5): servers sharing one port with SO_REUSEPORT; `splitrpc serve --processes 2` serves 32 clients' multi-segment requests, every segment of a message in the process that has the others, and reports each process's counters and their sum."""
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import splitrpc
from splitrpc.errors import NativeError
from splitrpc.services import SERVICES

ECHO = SERVICES["echo"]


def test_two_servers_bind_one_port_only_with_reuse_port():
    a = splitrpc.Server("127.0.0.1", 0, reuse_port=True)
    try:
        port = a.port
        b = splitrpc.Server("127.0.0.1", port, reuse_port=True)
        b.close()
        with pytest.raises(NativeError):
            splitrpc.Server("127.0.0.1", port)  # one without the option is refused
    finally:
        a.close()
    with pytest.raises(ValueError, match="kernel UDP"):
        splitrpc.Server("127.0.0.1", 0, reuse_port=True, transport="dpdk", dpdk_port="x")


def test_serve_processes_32_clients_multi_segment_all_complete(tmp_path):
    env = dict(os.environ)
    p = subprocess.Popen([sys.executable, "-m", "splitrpc", "serve", "--processes", "2", "--port", "0",
                          "--wait", "block"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=tmp_path)
    lines = []
    try:
        for line in p.stdout:
            lines.append(line)
            m = re.search(r"2 processes serving on 127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        else:
            pytest.fail("no ready line: " + "".join(lines) + p.stderr.read()[-3000:])
        bad, rng_lock = [], threading.Lock()

        def client(k: int) -> None:
            rng = np.random.default_rng(k)
            # 40 KB in 1,450-byte segments: 28 datagrams per request, 28 per reply
            with splitrpc.Client("127.0.0.1", port, timeout=20.0, segment_size=1450) as c:
                for _ in range(4):
                    req = rng.bytes(40_000)
                    if c.call(ECHO.func_id, req) != req:
                        with rng_lock:
                            bad.append(k)

        ts = [threading.Thread(target=client, args=(k,)) for k in range(32)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not bad
    finally:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    out = "".join(lines) + out
    assert p.returncode == 0, out + err
    per = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"^process (\d+): (\d+) calls", out, re.M)}
    total = int(re.search(r"^together: (\d+) calls", out, re.M).group(1))
    assert sorted(per) == [0, 1] and total == sum(per.values()) == 128, out
    assert min(per.values()) > 0, per  # 32 client addresses over two sockets: both served some
    assert "errors sent: none" in out.split("together:")[1]


def _children(pid: int) -> list[int]:
    """The processes whose parent is pid (from /proc)."""
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return kids


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_serve_processes_children_stop_when_the_parent_is_killed(tmp_path):
    """Issue 52 (an outside attacker's finding): the parent of `serve --processes 2` killed with
    SIGKILL left its children serving, with a key table no SIGHUP could reach any more. Now each
    child drains and stops when its parent dies, however it dies."""
    p = subprocess.Popen([sys.executable, "-m", "splitrpc", "serve", "--processes", "2", "--port", "0",
                          "--wait", "block", "--grace", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=dict(os.environ), cwd=tmp_path)
    kids = []
    try:
        for line in p.stdout:
            if re.search(r"2 processes serving on 127\.0\.0\.1:\d+", line):
                break
        else:
            pytest.fail("no ready line: " + p.stderr.read()[-3000:])
        kids = _children(p.pid)
        assert len(kids) == 2, kids
        p.kill()
        p.wait(timeout=10)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(os.path.exists(f"/proc/{k}") and
                                                  open(f"/proc/{k}/stat").read().split(") ", 1)[1][0] != "Z"
                                                  for k in kids):
            time.sleep(0.1)
        alive = [k for k in kids if os.path.exists(f"/proc/{k}") and
                 open(f"/proc/{k}/stat").read().split(") ", 1)[1][0] != "Z"]
        assert not alive, f"children still serving after their parent was killed: {alive}"
    finally:
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if p.poll() is None:
            p.kill()
