"""plugin.py: offline planning under an SLA (after Hercules, Ke et al., HPCA 2022) as a capability of the core: `splitrpc tune` (the configuration search, measured on this machine) and `splitrpc provision` (a plan over a day of load)."""
from splitrpc.plugins import Capability
from splitrpc.services.planning import provision_command, tune_command


class Planning(Capability):
    name = "planning"
    order = 40

    def add_commands(self, sub) -> None:
        tune_command.add_parser(sub)
        provision_command.add_parser(sub)


CAPABILITY = Planning()
