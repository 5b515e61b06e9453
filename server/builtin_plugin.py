"""builtin_plugin.py: the built-in services (vecadd, matmul, echo, head; docs/PROTOCOL.md's table) as a capability of the core: served by every `splitrpc serve` and `splitrpc demo`, called by name by `splitrpc call` and `splitrpc load`, with `serve --batch-cost-us`."""
from __future__ import annotations

import numpy as np

from splitrpc.plugins import Callee, Capability, Serving
from splitrpc.services.builtin import SERVICES, register_builtin_services

FLOAT_REPLIES = ("vecadd", "matmul", "head")  # replies shown as float32
DEMO_SHARE = {"vecadd": 1.0, "matmul": 1.0, "echo": 1.0, "head": 0.1}  # head's 600 KB requests: a tenth of the calls


def _show_f32(reply: bytes):
    if len(reply) % 4:
        return None
    v = np.frombuffer(reply, "<f4")
    return ["float32[%d]: %s" % (v.size, np.array2string(v[:8], precision=4)) + (" ..." if v.size > 8 else "")]


class Builtin(Capability):
    name = "builtin"
    order = 0

    def check_sections(self) -> list:
        from splitrpc.services.check_sections import SECTIONS  # the host path

        return list(SECTIONS)

    def add_serve_options(self, parser) -> None:
        parser.add_argument("--batch-cost-us", type=int, default=0, metavar="US",
                            help="the built-in services sleep this long per batch (a fixed service time, as on a "
                                 "GPU): a server of known capacity, about max-batch * 1e6 / US calls/s")

    def serve(self, server, names, args) -> Serving:
        register_builtin_services(server, max_batch=getattr(args, "max_batch", None),
                                  max_delay_us=getattr(args, "max_delay_us", None),
                                  batch_cost_us=getattr(args, "batch_cost_us", 0))
        cost = getattr(args, "batch_cost_us", 0)
        return Serving([f"{s.name}({s.func_id})" for s in SERVICES.values()],
                       f", {cost} us per batch" if cost > 0 else "")

    def callee_names(self) -> tuple:
        return tuple(SERVICES)

    def callee(self, name, args, checked=True):
        s = SERVICES.get(name)
        if s is None:
            return None
        return Callee(s.name, s.func_id, example=s.example, expected=s.expected,
                      show=_show_f32 if name in FLOAT_REPLIES else None, demo_share=DEMO_SHARE[name])


CAPABILITY = Builtin()
