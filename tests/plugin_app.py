"""plugin_app.py: a capability defined outside splitrpc (SPLITRPC_PLUGINS=plugin_app:CAPABILITY), for tests/test_plugins.py: a subcommand, a benchmark suite under `splitrpc bench`, former names of both, a serve option, a --models name with its function, a callee, a banner and stop lines; it touches no file of the core."""
from splitrpc.plugins import Callee, Capability, CapabilityError, Serving

FUNC_ID = 300
NAME = "shout"


class ShoutServing(Serving):
    def __init__(self, suffix: str):
        super().__init__([f"{NAME}({FUNC_ID})"], f", shouting with {suffix!r}")
        self.calls = 0
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def stop_lines(self, args) -> list:
        return [f"{NAME}: {self.calls} calls, closed {self.closed}"]


class Shout(Capability):
    name = "shout"
    order = 70
    models_help = f"{NAME} (the test plug-in's)"

    def add_commands(self, sub) -> None:
        p = sub.add_parser("hello", help="the test plug-in's command")
        p.add_argument("who")
        p.set_defaults(func=lambda a: print(f"hello {a.who} from {len(a.capabilities)} capabilities") or 0)

    def add_bench_suites(self, suites) -> None:
        p = suites.add_parser("shout", help="the test plug-in's benchmark suite")
        p.add_argument("--times", type=int, default=1)
        p.set_defaults(func=lambda a: print(f"shout suite x{a.times}") or 0)

    def renamed(self) -> dict:
        return {"holler": ("hello",), "bench-shout": ("bench", "shout")}

    def add_serve_options(self, parser) -> None:
        parser.add_argument("--shout-suffix", default="!", help="what the shout function appends")

    def check_serve_args(self, args) -> None:
        if args.models and NAME in args.models and not args.shout_suffix:
            raise CapabilityError("--shout-suffix: empty", code=3)

    def claims(self, name: str) -> bool:
        return name == NAME

    def serve(self, server, names, args):
        if not names:
            return None
        serving = ShoutServing(args.shout_suffix)
        suffix = args.shout_suffix.encode()

        def shout(requests, responses):
            serving.calls += len(requests)
            out = []
            for req, resp in zip(requests, responses):
                r = bytes(req).upper() + suffix
                resp[:len(r)] = r
                out.append(len(r))
            return out

        server.add_function(shout, FUNC_ID, NAME, raw=True, max_request=1024, max_response=1100)
        return serving

    def callee_names(self) -> tuple:
        return (NAME,)

    def callee(self, name, args, checked=True):
        if name != NAME:
            return None
        return Callee(NAME, FUNC_ID, example=lambda rng: bytes(rng.integers(97, 123, 12, dtype="u1")),
                      expected=lambda q: q.upper() + b"!")


CAPABILITY = Shout()
