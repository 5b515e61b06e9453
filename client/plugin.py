"""plugin.py: the load generator as a capability of the core: `splitrpc load`, which finds the functions it may load by name through the other capabilities (splitrpc.plugins), never by importing them."""
from splitrpc.loadgen import load_cli
from splitrpc.plugins import Capability


class LoadGenerator(Capability):
    name = "loadgen"
    order = 60

    def add_commands(self, sub) -> None:
        load_cli.add_parser(sub)


CAPABILITY = LoadGenerator()
