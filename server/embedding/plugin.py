"""plugin.py: the embedding store (after HugeCTR's HPS, Wei et al., RecSys 2022) as a capability of the core: `serve --models dlrm` over a store configured by --embedding-store, and `splitrpc call dlrm` checked against the model over the exact tables."""
from __future__ import annotations

import argparse

import numpy as np

from splitrpc.plugins import Callee, Capability, CapabilityError, Serving
from splitrpc.services.embedding import dlrm

NAME = "dlrm"
EXTRA = "it needs pip install 'splitrpc[models,embedding]'"


def parse_pipeline(text: str) -> tuple[int, int]:
    """SPARSE,DENSE: two thread counts >= 1; ValueError otherwise."""
    try:
        sparse, dense = (int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"{text!r}: expected SPARSE,DENSE, two thread counts") from None
    if sparse < 1 or dense < 1:
        raise ValueError(f"{text!r}: both thread counts must be >= 1")
    return sparse, dense


def pipeline_arg(text: str) -> str:
    """--dlrm-pipeline SPARSE,DENSE, checked and kept as text (so that `serve --processes`
    forwards it as it came)."""
    try:
        return "{},{}".format(*parse_pipeline(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


class DLRMServing(Serving):
    def __init__(self, svc):
        super().__init__([f"{NAME}({dlrm.FUNC_ID})"], dlrm.serve_banner(svc))
        self.svc, self.emb = svc, {}

    def close(self) -> None:
        if self.svc is not None:
            self.emb.update(self.svc.store.stats())
            self.svc.close()
            self.svc = None

    def stop_lines(self, args) -> list:
        looked = sum(t["unique"] for t in self.emb.values())
        hits = sum(t["l1_hits"] for t in self.emb.values())
        return [f"dlrm: {sum(t['lookups'] for t in self.emb.values())} table lookups, L1 hit rate "
                f"{hits / looked if looked else 0:.3f}"]


class Embedding(Capability):
    name = "embedding"
    order = 30

    def check_sections(self) -> list:
        from splitrpc.services.embedding.check_sections import SECTIONS

        return list(SECTIONS)
    models_help = f"{NAME} over the embedding store (pip install 'splitrpc[models,embedding]'; --embedding-store)"

    def add_serve_options(self, s) -> None:
        s.add_argument("--embedding-store", metavar="CONFIG.json",
                       help="dlrm: the embedding store's configuration (docs/embedding.md); default: an embedded "
                            "store (RocksDB in a temporary directory, host hash map, L1 at 5%%, exact lookups)")
        s.add_argument("--dlrm-pipeline", metavar="SPARSE,DENSE", type=pipeline_arg,
                       help="dlrm: Hercules's sparse-dense pipeline scheduling, a batch's embedding lookups on one of "
                            "SPARSE threads and its MLPs on one of DENSE threads, pipelined (default: the whole model "
                            "inline, model-based scheduling)")

    def check_serve_args(self, args) -> None:
        """--processes with a store whose L3 is one RocksDB path: RocksDB lets one process open it;
        --dlrm-pipeline without dlrm."""
        served = bool(args.models and NAME in (n.strip() for n in args.models.split(",")))
        if args.dlrm_pipeline and not served:
            raise CapabilityError("--dlrm-pipeline: it schedules dlrm, which --models does not name")
        if args.processes == 1 or not args.embedding_store or not served:
            return
        try:
            l3 = dlrm.load_config(args.embedding_store).l3
        except Exception as e:  # a bad file: serve says so in the one process that reads it
            raise CapabilityError(f"--embedding-store: {type(e).__name__}: {e}") from e
        if l3:
            raise CapabilityError(f"--models dlrm --processes {args.processes}: the store's L3 {l3!r} is one RocksDB "
                                  "directory, which one process may open; leave l3 out of the configuration (each "
                                  "process then fills one of its own) or serve one process")

    def claims(self, name: str) -> bool:
        return name == NAME

    def serve(self, server, names, args) -> Serving | None:
        if not names:
            return None
        try:
            cfg = dlrm.load_config(args.embedding_store) if args.embedding_store else None
            print(f"dlrm: filling the embedding tables ({'small' if args.small else 'default'}) ...", flush=True)
            svc = dlrm.DLRMService(small=args.small, config=cfg, progress=True)
        except ImportError as e:
            raise CapabilityError(f"--models dlrm: {e}; {EXTRA}") from e
        except Exception as e:  # a bad store configuration, an L3 path that cannot be written, ...
            raise CapabilityError(f"--models dlrm: {type(e).__name__}: {e}") from e
        pipeline = parse_pipeline(args.dlrm_pipeline) if args.dlrm_pipeline else None
        try:
            svc.register(server, max_batch=args.max_batch or 1024, max_delay_us=args.max_delay_us, pipeline=pipeline)
        except Exception as e:
            svc.close()
            raise CapabilityError(f"--models dlrm: {type(e).__name__}: {e}") from e
        serving = DLRMServing(svc)
        if pipeline:
            serving.banner += " (sparse-dense pipeline: {} lookup threads, {} MLP threads)".format(*pipeline)
        return serving

    def callee_names(self) -> tuple:
        return (NAME,)

    def stage_args(self, name, first, second):
        """dlrm's sparse-dense pipeline: `first` lookup threads, `second` MLP threads."""
        return ["--dlrm-pipeline", f"{first},{second}"] if name == NAME else None

    def callee(self, name, args, checked=True):
        if name != NAME:
            return None
        if not checked:
            return Callee(NAME, dlrm.FUNC_ID)
        try:
            model = dlrm.DLRM(small=args.small)  # imports torch
        except ImportError as e:
            raise CapabilityError(f"{e}; dlrm needs pip install 'splitrpc[models,embedding]'") from e

        def summary(data, reply, dt):
            keys = np.frombuffer(data[4 * dlrm.DENSE:], "<i8")
            line = (f"function {dlrm.FUNC_ID}: {dlrm.DENSE} dense features, {dlrm.SPARSE} keys {keys[:6].tolist()}... "
                    f"-> {len(reply)} B reply in {dt:.0f} us (one cold call)")
            if len(reply) == 4:
                line += f"\nclick probability {float(np.frombuffer(reply, '<f4')[0]):.6f}"
            return line

        return Callee(NAME, dlrm.FUNC_ID, example=model.example, check=model.check_reply, summary=summary,
                      show=lambda reply: [], check_label="reply matches the model over the exact tables:", strict=True)


CAPABILITY = Embedding()
