"""dpdk_calls.py: what the DPDK tests' child processes run: CALLS, once they hold a client `c`: every built-in service with varied inputs, then echo from 0 B to 1 MiB around the 1450-byte segment size; STATS_FUNCTION, once they hold a server `srv` (and json): function 99 answers the DPDK port's counters as JSON."""

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

STATS_FUNCTION = """

def dpdk_stats(requests, responses):  # the port's counters (and the server's authentication ones), for the client
    st = srv.stats()  # (no braces here: the tests format this text)
    d = dict(st["dpdk"])
    d["auth"] = st["auth"]
    d["auth_drops"] = dict((k, v) for k, v in st["drops"].items() if k.startswith("auth_"))
    body = json.dumps(d).encode()
    for r in responses:
        r[:len(body)] = body
    return [len(body)] * len(responses)


srv.add_function(dpdk_stats, 99, "dpdk_stats", raw=True, max_request=16, max_response=4096)
"""
