"""stubgen.py: the text of a typed stub module from a server's description (`splitrpc stub`): a NamedTuple of outputs and a typed method per function, on stubs.StubBase, with the description's digest it checks on first use. Like protoc for gRPC, but from the running service (or its Server object)."""
from __future__ import annotations

import keyword
import re
from datetime import datetime, timezone
from typing import Iterable

import numpy as np

from splitrpc import describe as describe_
from splitrpc.spec import TensorSpec

RESERVED = {"self", "timeout", "client", "check", "digest", "functions"}  # taken in a method or by StubBase
_BASE_NAMES = {"check", "client", "digest", "functions"}


def _ident(name: str, taken: set[str], fallback: str) -> str:
    """name as a Python identifier not in taken (and recorded there)."""
    out = re.sub(r"\W", "_", name)
    if not out or out[0].isdigit():
        out = f"{fallback}_{out}" if out else fallback
    if keyword.iskeyword(out) or out.startswith("_"):
        out = f"{fallback}_{out.lstrip('_')}"
    base, i = out, 2
    while out in taken:
        out, i = f"{base}_{i}", i + 1
    taken.add(out)
    return out


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^0-9A-Za-z]+", name) if p) or "Function"


def _np_type(s: TensorSpec) -> str:
    dt = s.np_dtype
    return "np.bool_" if dt.kind == "b" else f"np.{dt.type.__name__}"


def _text(s: TensorSpec) -> str:
    return f"{s.np_dtype.name}[{', '.join(map(str, s.shape))}]"


def render(functions: Iterable[describe_.FunctionInfo], *, source: str, software: str,
           class_name: str = "Service") -> str:
    """The stub module's text for these functions (as describe gives them), from `source` (the
    address or MODULE:ATTR, said in the docstring)."""
    funcs = sorted(functions, key=lambda f: f.func_id)
    digest = describe_.digest(funcs)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [f'"""Typed stub of the splitrpc service at {source}: {len(funcs)} functions, description {digest}.',
           "",
           f"Written by `splitrpc stub` ({software}) on {when}, from its describe. Do not edit: write it again.",
           f"Use: svc = {class_name}(splitrpc.Client(host, port)); svc.<function>(...). On first use the stub",
           "checks that the server still describes these functions (stubs.StubOutOfDate if not).",
           '"""', "from __future__ import annotations", "", "from typing import NamedTuple", "", "import numpy as np",
           "import numpy.typing as npt", "", "from splitrpc.stubs import ArrayIn, StubBase", "",
           f'DIGEST = "{digest}"']
    methods: set[str] = set(_BASE_NAMES)
    classes: set[str] = {class_name, "StubBase", "NamedTuple", "ArrayIn"}
    body: list[str] = []
    for f in funcs:
        meth = _ident(f.name, methods, "fn")
        where = f"{f.name} (id {f.func_id}"
        if f.raw:
            body += ["", f"    def {meth}(self, data: bytes | bytearray | memoryview | npt.NDArray[np.uint8], *,",
                     "            timeout: float | None = None) -> bytes:",
                     f'        """{where}, raw): requests of up to {f.max_request} bytes, replies of up to '
                     f'{f.max_response}; the bytes are its own format."""',
                     f"        return self._raw({f.name!r}, data, timeout=timeout)"]
            continue
        cls = _ident(_camel(f.name) + "Outputs", classes, "Outputs")
        fields: set[str] = set()
        out += ["", "", f"class {cls}(NamedTuple):", f'    """{f.name}\'s outputs."""', ""]
        for i, s in enumerate(f.outputs):
            out.append(f"    {_ident(s.name, fields, f'out{i}')}: npt.NDArray[{_np_type(s)}]  # {_text(s)}")
        params: set[str] = set(RESERVED)
        names = [_ident(s.name, params, f"in{i}") for i, s in enumerate(f.inputs)]
        args = ", ".join(f"{n}: ArrayIn" for n in names)
        ins = "; ".join(f"{n}: {_text(s)}" for n, s in zip(names, f.inputs)) or "no inputs"
        outs = ", ".join(f"{s.name} {_text(s)}" for s in f.outputs)
        body += ["", f"    def {meth}(self{', ' + args if args else ''}, *, timeout: float | None = None) -> {cls}:",
                 f'        """{where}): {ins} -> {outs}.',
                 "",
                 '        A leading [N] on every input makes N concurrent calls and [N, ...] outputs."""',
                 f"        return {cls}(*self._call({f.name!r}{''.join(', ' + n for n in names)}, timeout=timeout))"]
    table = ", ".join(f"{f.name!r}: {f.func_id}" for f in funcs)
    out += ["", "", f"class {class_name}(StubBase):",
            f'    """The service\'s functions as typed methods ({len(funcs)})."""', "",
            "    digest = DIGEST", f"    functions = {{{table}}}", *body, ""]
    return "\n".join(out)
