"""plugin.py: offline planning under an SLA (after Hercules, Ke et al., HPCA 2022) as a capability of the core: `splitrpc plan tune` (the configuration search, measured on this machine) and `splitrpc plan provision` (a plan over a day of load)."""
from splitrpc.plugins import Capability
from splitrpc.loadgen.planning import provision_command, tune_command


class Planning(Capability):
    name = "planning"
    order = 40

    def add_commands(self, sub) -> None:
        g = sub.add_parser("plan", help="planning under an SLA: splitrpc plan tune | provision",
                           description="Offline planning (after Hercules): tune searches a model's serving "
                                       "configuration on this machine; provision plans servers over a day of load.")
        cmds = g.add_subparsers(dest="plan_cmd", required=True, metavar="COMMAND")
        tune_command.add_parser(cmds)
        provision_command.add_parser(cmds)

    def renamed(self) -> dict[str, tuple[str, ...]]:
        return {"tune": ("plan", "tune"), "provision": ("plan", "provision")}


CAPABILITY = Planning()
