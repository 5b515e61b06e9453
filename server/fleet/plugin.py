"""plugin.py: the running fleet (after Hercules, Ke et al., HPCA 2022) as a capability of the core: `splitrpc fleet up|status|down` (Ray is imported when a command runs)."""
from splitrpc.plugins import Capability
from splitrpc.services.fleet import commands


class Fleet(Capability):
    name = "fleet"
    order = 50

    def add_commands(self, sub) -> None:
        commands.add_parser(sub)


CAPABILITY = Fleet()
