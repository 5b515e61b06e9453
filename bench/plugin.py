"""plugin.py: the benchmark suites as a capability of the core: `splitrpc bench` and every `splitrpc bench-*` (each imports what it measures when it runs)."""
from importlib import import_module

from splitrpc.plugins import Capability

SUITES = ("sidebyside", "indep", "models_e2e", "orchestration", "dpdk_veth", "overload", "gnn", "colocate", "embedding",
          "fleet", "colocate_sim")  # modules of splitrpc.bench.suites with add_parser(sub), in --help's order


class Benchmarks(Capability):
    name = "bench"
    order = 90

    def add_commands(self, sub) -> None:
        for mod in SUITES:
            import_module(f"splitrpc.bench.suites.{mod}").add_parser(sub)


CAPABILITY = Benchmarks()
