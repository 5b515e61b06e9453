"""stubgen.py: the text of a typed stub module from a server's description (`splitrpc stub`): a NamedTuple of outputs and a typed method per function, on stubs.StubBase, with the description's digest it checks on first use. Like protoc for gRPC, but from the running service (or its Server object)."""
from __future__ import annotations

import builtins
import keyword
import re
from datetime import datetime, timezone
from typing import Iterable

from splitrpc import describe as describe_
from splitrpc.spec import TensorSpec

# Names a method, parameter or field may not take: the stub module's own names and Python's
# builtins (a method named `float` would hide the type from later annotations in its class),
# StubBase's, a method's own (self, timeout), and a NamedTuple's (count, index, _fields...).
_MODULE = {"annotations", "NamedTuple", "np", "npt", "ArrayIn", "StubBase", "DIGEST"}
_RESERVED_METHODS = _MODULE | set(dir(builtins)) | {"check", "client", "digest", "functions"}
_RESERVED_PARAMS = _MODULE | set(dir(builtins)) | {"self", "timeout"}
_RESERVED_FIELDS = _MODULE | set(dir(builtins)) | set(dir(tuple))


def _ident(name: str, taken: set[str], fallback: str) -> str:
    """name as an ASCII Python identifier (the server's names are its word: anything else
    becomes `_`, so no Unicode folding can make two names one), not a keyword and not in taken;
    recorded in taken."""
    out = re.sub(r"[^0-9A-Za-z_]", "_", name).strip("_")
    if not out or out[0].isdigit() or keyword.iskeyword(out) or out in taken:
        out = f"{fallback}_{out}" if out else fallback
    base, i = out, 2
    while out in taken or keyword.iskeyword(out):
        out, i = f"{base}_{i}", i + 1
    taken.add(out)
    return out


def _safe(text: object, limit: int = 120) -> str:
    """A server's text, for a comment or a docstring: printable ASCII without quotes or
    backslashes (anything else becomes ?), at most limit characters."""
    t = "".join(ch if " " <= ch <= "~" and ch not in "\\\"'" else "?" for ch in str(text))
    return t if len(t) <= limit else t[:limit - 3] + "..."


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^0-9A-Za-z]+", name) if p) or "Function"


def _np_type(s: TensorSpec) -> str:
    dt = s.np_dtype
    return "np.bool_" if dt.kind == "b" else f"np.{dt.type.__name__}"


def _text(s: TensorSpec) -> str:
    return f"{s.np_dtype.name}[{', '.join(map(str, s.shape))}]"


def render(functions: Iterable[describe_.FunctionInfo], *, source: str, software: str,
           class_name: str = "Service", digest: str | None = None) -> str:
    """The stub module's text for these functions (as describe gives them), from `source` (the
    address or MODULE:ATTR, said in the docstring). digest: the server's (Amendment 2), which the
    stub checks against; None: computed here (a server module read without starting it, or a
    server older than the amendment), as splitrpc's server would send it. Every name and text of
    the server's goes into the module as a string literal (repr) or through _safe: nothing it
    says is ever code."""
    funcs = sorted(functions, key=lambda f: f.func_id)
    digest = digest if digest is not None else describe_.digest(funcs)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [f'"""Typed stub of the splitrpc service at {_safe(source)}: {len(funcs)} functions, description '
           f'{_safe(digest)}.',
           "",
           f"Written by `splitrpc stub` ({_safe(software)}) on {when}, from its describe. Do not edit: write it "
           "again.",
           f"Use: svc = {class_name}(splitrpc.Client(host, port)); svc.<function>(...). On first use the stub",
           "checks that the server still describes these functions (stubs.StubOutOfDate if not).",
           '"""', "from __future__ import annotations", "", "from typing import NamedTuple", "", "import numpy as np",
           "import numpy.typing as npt", "", "from splitrpc.stubs import ArrayIn, StubBase", "",
           f"DIGEST = {digest!r}"]
    classes: set[str] = set(_RESERVED_METHODS) | {class_name}
    outs_of = {f.func_id: _ident(_camel(f.name) + "Outputs", classes, "Outputs") for f in funcs if not f.raw}
    methods: set[str] = set(_RESERVED_METHODS) | classes  # a method named like a class would hide it
    body: list[str] = []
    for f in funcs:
        meth = _ident(f.name, methods, "fn")
        where = f"{_safe(f.name, 60)} (id {f.func_id}"
        if f.raw:
            body += ["", f"    def {meth}(self, data: bytes | bytearray | memoryview | npt.NDArray[np.uint8], *,",
                     "            timeout: float | None = None) -> bytes:",
                     f'        """{where}, raw): requests of up to {int(f.max_request or 0)} bytes, replies of up '
                     f'to {int(f.max_response or 0)}; the bytes are its own format."""',
                     f"        return self._raw({f.name!r}, data, timeout=timeout)"]
            continue
        cls = outs_of[f.func_id]
        fields: set[str] = set(_RESERVED_FIELDS)
        out += ["", "", f"class {cls}(NamedTuple):", f'    """{_safe(f.name, 60)}\'s outputs."""', ""]
        for i, s in enumerate(f.outputs):
            out.append(f"    {_ident(s.name, fields, f'out{i}')}: npt.NDArray[{_np_type(s)}]  "
                       f"# {_safe(s.name, 40)}: {_text(s)}")
        params: set[str] = set(_RESERVED_PARAMS)
        names = [_ident(s.name, params, f"in{i}") for i, s in enumerate(f.inputs)]
        args = ", ".join(f"{n}: ArrayIn" for n in names)
        ins = "; ".join(f"{n}: {_text(s)}" for n, s in zip(names, f.inputs)) or "no inputs"
        outs = ", ".join(f"{_safe(s.name, 40)} {_text(s)}" for s in f.outputs)
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
