"""plugin.py: the benchmark suites as a capability of the core: each `splitrpc bench SUITE` (each imports what it measures when it runs), and their former names `splitrpc bench-SUITE` for one release."""
from importlib import import_module

from splitrpc.plugins import Capability

# modules of splitrpc.bench.suites with add_parser(sub), in --help's order, and their suite names
SUITES = {"sidebyside": "sidebyside", "indep": "indep", "models_e2e": "models", "orchestration": "orchestration",
          "dpdk_veth": "dpdk", "overload": "overload", "gnn": "gnn", "colocate": "colocate", "embedding": "embedding",
          "fleet": "fleet", "colocate_sim": "colocate-sim"}


class Benchmarks(Capability):
    name = "bench"
    order = 90

    def check_sections(self) -> list:
        from splitrpc.bench.suites.gpu_check import SECTIONS  # the trimmed GPU benchmarks

        return list(SECTIONS)

    def add_bench_suites(self, suites) -> None:
        for mod in SUITES:
            import_module(f"splitrpc.bench.suites.{mod}").add_parser(suites)

    def renamed(self) -> dict[str, tuple[str, ...]]:
        old = {f"bench-{name}": ("bench", name) for name in SUITES.values() if name != "sidebyside"}
        return {**old, "bench": ("bench", "sidebyside")}  # `splitrpc bench --rounds 1` was the side-by-side run


CAPABILITY = Benchmarks()
