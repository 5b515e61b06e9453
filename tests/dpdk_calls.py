"""dpdk_calls.py: what the DPDK tests' child processes call once they hold a client `c`: every built-in service with varied inputs, then echo from 0 B to 1 MiB around the 1450-byte segment size."""

CALLS = """
import numpy as np
from splitrpc.services import SERVICES
rng = np.random.default_rng(5)
for name, svc in SERVICES.items():
    for _ in range(3):
        req = svc.example(rng)
        assert c.call(svc.func_id, req) == svc.expected(req), name
for n in (0, 1, 1449, 1450, 1451, 4096, 65536, 300000, 1 << 20):
    data = rng.bytes(n)
    assert c.call(3, data) == data, n
"""
