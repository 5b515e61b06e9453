"""plugin.py: the model zoo as a capability of the core: `serve --models lenet,...|all` registers the zoo's PyTorch models on --device, `splitrpc call MODEL` checks a reply against a local run within tolerance and shows each output."""
from __future__ import annotations

import numpy as np

from splitrpc.plugins import Callee, Capability, CapabilityError, Serving
from splitrpc.services.models.registry import MODELS, check_reply, register_models, resolve, split

ALL = "all"


def _show(info):
    def show(reply: bytes):
        if len(reply) != info.reply_size:
            return None
        lines = []
        for spec, v in zip(info.outputs, split(info.outputs, reply)):
            v = v.ravel()
            lines.append(f"{spec.name} {spec.np_dtype.name}{list(spec.shape)}: {np.array2string(v[:8], precision=4)}"
                         + (" ..." if v.size > 8 else ""))
        return lines

    return show


class Zoo(Capability):
    name = "models"
    order = 10

    def check_sections(self) -> list:
        from splitrpc.services.models.check_sections import SECTIONS

        return list(SECTIONS)
    models_help = (f"the zoo's PyTorch models {', '.join(MODELS)}, or {ALL} (needs pip install 'splitrpc[models]'; "
                   "--device, --small)")

    def claims(self, name: str) -> bool:
        return name in MODELS or name == ALL

    def serve(self, server, names, args) -> Serving | None:
        if not names:
            return None
        names = resolve(ALL if ALL in names else names)
        try:
            register_models(server, names, device=args.device, small=args.small, max_batch=args.max_batch,
                            max_delay_us=args.max_delay_us)
        except Exception as e:  # no torch (ImportError names the extra), an unusable device, ...
            raise CapabilityError(f"--models: {type(e).__name__}: {e}") from e
        where = ", ".join(sorted({d for n, d in server.stats()["devices"].items() if n in names}))  # after any fallback
        return Serving([f"{n}({MODELS[n].func_id})" for n in names],
                       f", models on {where}{' (small)' if args.small else ''}")

    def callee_names(self) -> tuple:
        return tuple(MODELS)

    def callee(self, name, args, checked=True):
        info = MODELS.get(name)
        if info is None:
            return None
        small = getattr(args, "small", False)
        return Callee(name, info.func_id, example=info.example,
                      check=lambda data, reply: check_reply(name, data, reply, small=small),
                      check_label="reply matches the model's output within tolerance:", show=_show(info))


CAPABILITY = Zoo()
