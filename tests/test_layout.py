"""The package layout: absolute imports only, every installed module importable by its installed name, and cffi's ffi/lib touched only in splitrpc/_native."""
import ast
import importlib
import importlib.util
import pathlib
import pkgutil
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Source folder -> the name it is installed under (CMakeLists.txt install(DIRECTORY) and the package itself).
INSTALLED = {"splitrpc": "splitrpc", "client": "splitrpc.loadgen", "server": "splitrpc.services",
             "bench": "splitrpc.bench"}
HAVE_TORCH = importlib.util.find_spec("torch") is not None
NEEDS_TORCH = ("splitrpc.services.models.adapter", "splitrpc.services.models.bert", "splitrpc.services.models.lenet",
               "splitrpc.services.models.lstm", "splitrpc.services.models.resnet")


def sources(*folders: str) -> list[pathlib.Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py"))


@pytest.mark.parametrize("folder", ["client", "server", "bench", "splitrpc"])
def test_no_relative_imports(folder):
    """A module imports correctly as written from its installed name only with absolute imports:
    client/ is installed as splitrpc.loadgen, so `from ..client import` would mean another thing."""
    bad = []
    for path in sources(folder):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {'.' * node.level}{node.module or ''} import")
    assert not bad, "relative imports:\n" + "\n".join(bad)


def _installed_modules(package: str) -> list[str]:
    pkg = importlib.import_module(package)
    return [package] + [m.name for m in pkgutil.walk_packages(pkg.__path__, prefix=f"{package}.")]


@pytest.mark.parametrize("package", ["splitrpc.loadgen", "splitrpc.services", "splitrpc.bench"])
def test_every_module_imports_by_its_installed_name(package):
    names = _installed_modules(package)
    assert len(names) > 1
    for name in names:
        if name in NEEDS_TORCH and not HAVE_TORCH:
            continue
        importlib.import_module(name)


def test_each_source_module_is_installed():
    """Every .py of the installed folders is there under its installed name (bench/micro is not installed)."""
    installed = {n for p in ("splitrpc.loadgen", "splitrpc.services", "splitrpc.bench") for n in _installed_modules(p)}
    for folder in ("client", "server", "bench"):
        for path in sources(folder):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            if rel.parts[0] == "micro":
                continue
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            assert ".".join((INSTALLED[folder], *parts)) in installed, path


def _ffi_lib_lines() -> list[str]:
    """`git grep -nIE "(^|[^A-Za-z0-9_])(ffi|lib)\\." -- splitrpc client server bench` (binary
    files skipped; whole names only: `contextlib.` is not `lib.`), or the same over the files when
    this is not a git checkout."""
    folders = ("splitrpc", "client", "server", "bench")
    if shutil.which("git") and (ROOT / ".git").exists():
        r = subprocess.run(["git", "grep", "-nIE", r"(^|[^A-Za-z0-9_])(ffi|lib)\.", "--", *folders], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode in (0, 1), r.stderr  # 1: nothing found
        return r.stdout.splitlines()
    pattern = re.compile(r"(?<![A-Za-z0-9_])(ffi|lib)\.")
    out = []
    for path in sources(*folders):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                out.append(f"{path.relative_to(ROOT)}:{i}:{line}")
    return out


def test_only_the_binding_layer_touches_ffi_and_lib():
    """splitrpc/_native is the only code that uses cffi's ffi/lib (pyzmq's backend/cffi layout)."""
    outside = [line for line in _ffi_lib_lines() if not line.startswith("splitrpc/_native/")]
    assert not outside, "ffi/lib outside splitrpc/_native:\n" + "\n".join(outside)


def test_nothing_imports_ffi_or_lib_outside_the_binding_layer():
    bad = []
    for path in sources("splitrpc", "client", "server", "bench"):
        if path.is_relative_to(ROOT / "splitrpc" / "_native"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and any(a.name in ("ffi", "lib") for a in node.names):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.Import) and any(a.name.endswith("_splitrpc_cffi") for a in node.names):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, "imports of ffi/lib outside splitrpc/_native: " + ", ".join(bad)


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, module) of every import in path, `from splitrpc import x` as splitrpc.x."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def _importers(folders: tuple[str, ...], prefixes: tuple[str, ...]) -> list[str]:
    return [f"{p.relative_to(ROOT)}:{line}: {mod}" for p in sources(*folders) for line, mod in _imports(p)
            if any(mod == pre or mod.startswith(pre + ".") for pre in prefixes)]


def test_the_binding_layer_stays_private():
    """Nothing outside splitrpc/ imports splitrpc._native: the services, the load generator and the
    benchmarks use its public faces (splitrpc.wire, .raw_udp, .neighbour_sampler, .embedding_cache,
    .load_run, .arrivals). The tests of the binding layer itself may."""
    bad = _importers(("client", "server", "bench", "examples"), ("splitrpc._native",))
    assert not bad, "splitrpc._native imported outside splitrpc/:\n" + "\n".join(bad)


def test_services_import_neither_the_load_generator_nor_the_benchmarks():
    bad = _importers(("server",), ("splitrpc.loadgen", "splitrpc.bench"))
    assert not bad, "server/ imports the load generator or the benchmarks:\n" + "\n".join(bad)


def test_the_core_names_no_capability():
    """splitrpc/ imports neither the services, nor the load generator, nor the benchmarks: they are
    plug-ins of the core (splitrpc/plugins.py), found through entry points."""
    bad = _importers(("splitrpc",), ("splitrpc.services", "splitrpc.loadgen", "splitrpc.bench"))
    assert not bad, "the core imports its plug-ins:\n" + "\n".join(bad)


def test_the_core_defines_no_capabilitys_metric():
    """A capability's Prometheus metrics are defined in the capability (Server.add_stats_source's
    metrics=): no string in the core names a metric after one of server/'s capability folders."""
    caps = sorted(p.name for p in (ROOT / "server").iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert "colocation" in caps and "embedding" in caps
    bad = []
    for path in sources("splitrpc"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                bad += [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}" for c in caps
                        if re.fullmatch(rf"{c}_[a-z_]+", node.value)]
    assert not bad, "the core defines capabilities' metrics:\n" + "\n".join(bad)


def test_the_load_generator_imports_no_service():
    bad = _importers(("client",), ("splitrpc.services", "splitrpc.bench"))
    assert not bad, "client/ imports a service or a benchmark:\n" + "\n".join(bad)


def test_the_command_line_is_a_dispatcher():
    lines = (ROOT / "splitrpc" / "cli.py").read_text().count("\n")
    assert lines < 200, f"splitrpc/cli.py has {lines} lines: a command belongs in splitrpc/commands or a plug-in"


PAPERS = ("splitrpc", "quiver", "gnnsched", "hps", "hugectr", "hercules")


def test_no_folder_of_the_services_is_named_after_a_paper():
    named = [p.name for p in (ROOT / "server").iterdir() if p.is_dir() and p.name.lower() in PAPERS]
    assert not named, f"server/ folders named after papers: {named} (name them for what they do)"


def test_no_doc_points_outside_the_repository():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = [f"{p.relative_to(ROOT)}:{i}" for p in docs for i, line in enumerate(p.read_text().splitlines(), 1)
           if "../shared" in line]
    assert not bad, "paths outside the repository (cite the paper instead): " + ", ".join(bad)


def test_benchmark_suites_and_their_helpers_are_apart():
    """bench/: suites in suites/, what they share in helpers/, the plug-in that registers their
    commands at the top; a helper imports no suite."""
    top = sorted(p.name for p in (ROOT / "bench").glob("*.py"))
    assert top == ["__init__.py", "plugin.py"], top
    assert (ROOT / "bench" / "suites").is_dir() and (ROOT / "bench" / "helpers").is_dir()
    bad = _importers(("bench/helpers",), ("splitrpc.bench.suites",))
    assert not bad, "a helper imports a suite:\n" + "\n".join(bad)


def test_a_capability_brings_its_check_sections_through_its_plugin():
    """One entry-point group for the plug-ins (no second one for the check): every check_sections.py
    of the services and the bench's GPU check is given by its capability's check_sections()."""
    from importlib import import_module

    from splitrpc.check import registry

    groups = re.findall(r'^\[project\.entry-points\."([^"]+)"\]', (ROOT / "pyproject.toml").read_text(), re.M)
    assert groups == ["splitrpc.capabilities"], groups
    found, broken = registry.plugin_sections()
    assert not broken, broken
    given = {s.name for s in found}
    mods = ["splitrpc.services." + ".".join(p.relative_to(ROOT / "server").with_suffix("").parts)
            for p in sorted((ROOT / "server").rglob("check_sections.py"))]
    assert len(mods) >= 4, mods  # builtin, models, colocation, embedding
    for m in [*mods, "splitrpc.bench.suites.gpu_check"]:
        names = {s.name for s in import_module(m).SECTIONS}
        assert names and names <= given, (m, names - given)


def _only_reexports(path: pathlib.Path) -> list[str] | None:
    """The modules a module re-exports from when its body is nothing but its docstring, imports
    and __all__; None when it has a body of its own."""
    sources_ = []
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.ImportFrom):
            if node.module != "__future__":
                sources_.append(node.module or "")
            continue
        if isinstance(node, ast.Import):
            sources_ += [a.name for a in node.names]
            continue
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            continue
        return None
    return sources_


# The one kind of re-export allowed: the public face of one module of the binding layer, for the
# services, the load generator and the benchmarks, which may not import splitrpc._native (pyzmq's
# zmq.backend behind zmq); the list may only shrink.
_BINDING_FACES = {"splitrpc/wire.py": "splitrpc._native.wire", "splitrpc/raw_udp.py": "splitrpc._native.raw",
                  "splitrpc/embedding_cache.py": "splitrpc._native.embed",
                  "splitrpc/neighbour_sampler.py": "splitrpc._native.gnn"}


def test_no_module_exists_only_to_re_export():
    """A module that only re-exports another's names is a second place to look for them (issue 54).
    A package's __init__.py may: it is the package's face; and so may the binding layer's public
    faces, each of one binding module alone."""
    bad = []
    for p in sources("splitrpc", "client", "server", "bench", "examples"):
        rel = str(p.relative_to(ROOT))
        if p.name == "__init__.py" or "results" in p.parts:
            continue
        mods = _only_reexports(p)
        if mods is not None and (rel not in _BINDING_FACES or mods != [_BINDING_FACES[rel]]):
            bad.append(f"{rel} (from {', '.join(mods) or 'nothing'})")
    assert not bad, "modules that only re-export: " + ", ".join(bad)
    assert all(_only_reexports(ROOT / f) is not None for f in _BINDING_FACES), "a face has grown a body: drop it here"


def test_the_re_export_check_can_fail(tmp_path):
    shim = tmp_path / "shim.py"
    shim.write_text('"""shim.py: a face."""\nfrom x import a, b\n\n__all__ = ["a", "b"]\n')
    real = tmp_path / "real.py"
    real.write_text('"""real.py."""\nfrom x import a\n\nB = a + 1\n')
    assert _only_reexports(shim) == ["x"] and _only_reexports(real) is None
