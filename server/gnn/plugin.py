"""plugin.py: GNN serving (after Quiver, Tan et al., arXiv 2023) as a capability of the core: `serve --models graphsage,gat` with its --gnn-* options, `splitrpc call graphsage|gat` checked against a local run, and `splitrpc gnn calibrate`."""
from __future__ import annotations

import numpy as np

from splitrpc.plugins import Callee, Capability, CapabilityError, Serving
from splitrpc.services.gnn import lane_timing
from splitrpc.services.gnn.calibrate import POINTS
from splitrpc.services.gnn.serve import FUNC_IDS, POLICIES, ROUTE_BY, register_gnn

EXTRA = "the GNN models need pip install 'splitrpc[gnn]'"
LANES = {"auto": None, "on": True, "off": False}  # --gnn-concurrent-lanes


class GNNServing(Serving):
    def __init__(self, svcs: dict, args):
        svc = list(svcs.values())[-1]
        super().__init__([f"{n}({FUNC_IDS[n]})" for n in svcs],
                         f", GNN {svc.graph.name} graph ({svc.graph.num_nodes} nodes) policy {args.gnn_policy} "
                         f"threshold {svc.router.threshold:.0f} per {svc.route_by}"
                         + (f", spill at {svc.spill} CPU-lane calls" if svc.spill else "") + ", lanes "
                         f"{'together' if svc.concurrent_lanes else 'in turn'}: "
                         + "; ".join(ln.label for ln in svc.lanes.values()))
        self.svcs = svcs

    def stop_lines(self, args) -> list:
        out = []
        for n, svc in self.svcs.items():
            out.append(f"{n}: " + "; ".join(f"{k} lane {v['batches']} batches, {v['calls']} calls, busy {v['busy_s']:.1f} s"
                                            for k, v in svc.stats().items()))
            if args.gnn_trace:
                path = args.gnn_trace if len(self.svcs) == 1 else f"{args.gnn_trace.removesuffix('.npz')}.{n}.npz"
                svc.trace.save(path)
                out.append(f"{n}: wrote {svc.trace.n} batches to {path}"
                           + (f" ({svc.trace.dropped} more not kept)" if svc.trace.dropped else ""))
        return out


class GNN(Capability):
    name = "gnn"
    order = 20
    models_help = f"the GNN models {', '.join(FUNC_IDS)} (pip install 'splitrpc[gnn]'; the --gnn-* options)"

    def add_commands(self, sub) -> None:
        g = sub.add_parser("gnn", help="GNN serving's tools: splitrpc gnn calibrate",
                           description="The GNN capability's tools (its models are served by splitrpc serve "
                                       "--models graphsage,gat; its benchmark is splitrpc bench gnn).")
        lane_timing.add_parser(g.add_subparsers(dest="gnn_cmd", required=True, metavar="COMMAND"))

    def renamed(self) -> dict[str, tuple[str, ...]]:
        return {"calibrate": ("gnn", "calibrate")}

    def add_serve_options(self, s) -> None:
        s.add_argument("--gnn-policy", default="routed", choices=POLICIES,
                       help="GNN models (graphsage, gat): route each batch by its PSGS, or always one lane")
        s.add_argument("--gnn-threshold", type=float, metavar="PSGS",
                       help="GNN routing threshold (a call's PSGS, or a batch's summed PSGS with --gnn-route-by "
                            "batch); default: --gnn-calibration's, else built in")
        s.add_argument("--gnn-route-by", default="auto", choices=ROUTE_BY,
                       help="routed GNN models: route each call by its own PSGS to its lane's queue (request: "
                            "Quiver's rule, each lane's batches from its own calls) or each batch by its summed PSGS "
                            "(batch); auto: request where the lanes run together, else batch (default: %(default)s)")
        s.add_argument("--gnn-spill", type=int, metavar="CALLS",
                       help="routed GNN models, per request: while the CPU lane holds this many calls not yet "
                            "answered, a small call goes to the other lane instead (load-aware; default: never, "
                            "Quiver's static threshold)")
        s.add_argument("--gnn-calibration", metavar="FILE", help="a calibration file of `splitrpc gnn calibrate`")
        s.add_argument("--gnn-point", choices=tuple(POINTS),
                       help="which crossing point of the calibration routes (default: the one the file names)")
        s.add_argument("--gnn-concurrent-lanes", default="auto", choices=tuple(LANES),
                       help="routed GNN models: run a batch on each lane at once (on), or one batch at a time "
                            "(off); auto: on only where the other lane is separate hardware (a GPU, or the emulated "
                            "lane) (default: %(default)s)")
        s.add_argument("--gnn-lane", default="auto", choices=("auto", "bulk", "emulated", "gpu"),
                       help="GNN models: the non-CPU lane: the GPU (needs CUDA), the bulk PyTorch sampler on the CPU "
                            "(a stand-in sharing the CPU lane's cores), or an EMULATED separate lane (answers from "
                            "the CPU code, time from a cost model, no core held); auto: the GPU with --device cuda:N "
                            "where there is one, else bulk (default: %(default)s)")
        s.add_argument("--gnn-lane-model", metavar="FILE",
                       help="--gnn-lane emulated: fit its cost model to this calibration file, measured on a GPU "
                            "(default: the assumed numbers, said so)")
        s.add_argument("--gnn-lane-warm", action="store_true",
                       help="--gnn-lane emulated: compute every node's answer before serving (the lane's time is then "
                            "all its model's; without it a seed seen first is computed on the lane's thread)")
        s.add_argument("--gnn-trace", metavar="FILE.npz",
                       help="record every GNN batch (lane, summed PSGS, calls, service time) and write them here "
                            "when stopped (one file per GNN model: FILE.MODEL.npz when several)")

    def check_serve_args(self, args) -> None:
        if args.gnn_trace and args.processes != 1:
            raise CapabilityError("--gnn-trace: one process only (not with --processes)")
        if (args.gnn_lane_model or args.gnn_lane_warm) and args.gnn_lane != "emulated":
            raise CapabilityError("--gnn-lane-model and --gnn-lane-warm are the emulated lane's: give --gnn-lane emulated")

    def claims(self, name: str) -> bool:
        return name in FUNC_IDS

    def serve(self, server, names, args) -> Serving | None:
        if not names:
            return None
        svcs = {}
        try:
            from splitrpc.services.gnn.emulated_lane import LaneModel

            lane_model = LaneModel.load(args.gnn_lane_model)
            for n in names:
                svcs[n] = register_gnn(server, n, small=args.small, policy=args.gnn_policy,
                                       threshold=args.gnn_threshold, calibration=args.gnn_calibration,
                                       point=args.gnn_point, max_batch=args.max_batch or 8,
                                       max_delay_us=args.max_delay_us or 0, device=args.device,
                                       trace=bool(args.gnn_trace), concurrent_lanes=LANES[args.gnn_concurrent_lanes],
                                       lane=None if args.gnn_lane == "auto" else args.gnn_lane, lane_model=lane_model,
                                       warm=args.gnn_lane_warm, route_by=args.gnn_route_by, spill=args.gnn_spill)
        except ImportError as e:
            raise CapabilityError(f"--models: {e}; {EXTRA}") from e
        except Exception as e:  # a bad calibration file or threshold, ...
            raise CapabilityError(f"--models: {type(e).__name__}: {e}") from e
        return GNNServing(svcs, args)

    def callee_names(self) -> tuple:
        return tuple(FUNC_IDS)

    def callee(self, name, args, checked=True):
        if name not in FUNC_IDS:
            return None
        if not checked:
            return Callee(name, FUNC_IDS[name])
        from splitrpc.services.gnn.serve import GNNService

        print(f"building the {'small' if args.small else 'reddit-like'} graph and {name} to check the reply ...",
              flush=True)
        try:
            svc = GNNService(name, small=args.small)  # imports torch, scipy, torch-geometric
        except ImportError as e:
            raise CapabilityError(f"{e}; {EXTRA}") from e

        seen: dict = {}  # the seeds of the request summary() described, for show()

        def summary(data, reply, dt):
            seeds = seen["seeds"] = np.frombuffer(data, "<i8")
            return (f"function {FUNC_IDS[name]}: {len(seeds)} seeds {seeds.tolist()} "
                    f"(PSGS {float(svc.psgs[seeds].sum()):.0f}) -> {len(reply)} B reply in {dt:.0f} us (one cold call)")

        def show(reply):
            seeds = seen.get("seeds")
            if seeds is None or not reply or len(reply) % (4 * len(seeds)):
                return None
            v = np.frombuffer(reply, "<f4").reshape(len(seeds), -1)
            return [f"logits float32[{v.shape[0]}, {v.shape[1]}]: seed {seeds[0]}: "
                    f"{np.array2string(v[0, :6], precision=4)} ..."]

        return Callee(name, FUNC_IDS[name], example=svc.example, check=svc.check_reply, summary=summary, show=show,
                      check_label="reply matches the model's output within tolerance:", strict=True)


CAPABILITY = GNN()
