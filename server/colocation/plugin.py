"""plugin.py: co-location (after GNNSched, Sun et al., PPoPP 2023) as a capability of the core: its sections of `splitrpc check` (its PMC estimates against the CUDA allocator, co-location on the GPU). Its serving API is server/colocation/colocate.py's CoLocation, which a program calls (bench colocate's servers do); its Prometheus families (metrics.py) come with the server's stats source it adds."""
from __future__ import annotations

from splitrpc.plugins import Capability


class CoLocation(Capability):
    name = "colocation"
    order = 25

    def check_sections(self) -> list:
        from splitrpc.services.colocation.check_sections import SECTIONS

        return list(SECTIONS)


CAPABILITY = CoLocation()
