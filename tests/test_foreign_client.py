"""A client written from docs/PROTOCOL.md and docs/PROTOCOL-v2.md alone (tests/foreign_client.py) against a real `splitrpc serve`: both versions."""
import os
import struct
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import free_udp_port  # noqa: E402
from foreign_client import ForeignClient, RemoteError  # noqa: E402



@pytest.fixture(scope="module")
def served(tmp_path_factory):
    port = free_udp_port()
    cwd = tmp_path_factory.mktemp("serve")  # not the source tree: the installed package runs
    proc = subprocess.Popen([sys.executable, "-m", "splitrpc", "serve", "--port", str(port), "--wait", "block"],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    probe = ForeignClient("127.0.0.1", port, timeout=0.2)
    try:
        for _ in range(100):
            try:
                probe.call(3, b"ping")
                break
            except (TimeoutError, ConnectionRefusedError):
                time.sleep(0.1)
        else:
            proc.kill()
            pytest.fail("splitrpc serve did not answer: " + proc.stderr.read())
        yield port
    finally:
        probe.close()
        proc.terminate()
        proc.wait(10)


def f32(values) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("seg", [1450, 8950, 65485])
@pytest.mark.parametrize("shuffle", [False, True])
def test_builtin_services_from_the_protocol_page(served, seg, shuffle, version):
    c = ForeignClient("127.0.0.1", served, seg_size=seg, shuffle=shuffle, version=version)
    try:
        x = [float(i) / 8 for i in range(256)]  # exact in float32, so +1 is too
        assert c.call(1, f32(x)) == f32([v + 1 for v in x])
        a = [float((i * 3) % 11) for i in range(1024)]
        b = [float((i * 5) % 13) for i in range(1024)]
        want = [sum(a[r * 32 + k] * b[k * 32 + col] for k in range(32)) for r in range(32) for col in range(32)]
        assert c.call(2, f32(a) + f32(b)) == f32(want)
        blob = os.urandom(200_000)
        assert c.call(3, blob) == blob
        assert c.call(3, b"") == b""
        img = f32([float(i % 251) for i in range(3 * 224 * 224)])
        assert c.call(4, img) == img[:4000]
    finally:
        c.close()


@pytest.mark.parametrize("version", [1, 2])
def test_errors_from_the_protocol_page(served, version):
    c = ForeignClient("127.0.0.1", served, version=version)
    try:
        with pytest.raises(RemoteError) as e:
            c.call(77, b"x")
        assert e.value.code == 1
        with pytest.raises(RemoteError) as e:
            c.call(1, b"\0" * 1000)
        assert e.value.code == 2
        with pytest.raises(RemoteError) as e:
            c.call(3, b"\0" * ((1 << 20) + 1))
        assert e.value.code == 6
    finally:
        c.close()
