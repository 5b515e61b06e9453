"""config.py: where the installed C client library is, for building C programs against it: `python -m splitrpc.config --cflags --libs` (or `splitrpc --cflags --libs`); also --includedir, --libdir, --pkgconfigdir (for PKG_CONFIG_PATH and `pkg-config splitrpc_client`)."""
from __future__ import annotations

import os
import shlex
import sys
from typing import Callable

NATIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native")
INCLUDEDIR = os.path.join(NATIVE, "include")
LIBDIR = os.path.join(NATIVE, "lib")
PKGCONFIGDIR = os.path.join(LIBDIR, "pkgconfig")
LIBRARY = "splitrpc_client"
OPTIONS = ("--cflags", "--libs", "--includedir", "--libdir", "--pkgconfigdir")


class NotInstalled(RuntimeError):
    """This installation of splitrpc has no C client library (a sanitizer build, or a source tree)."""


def _check() -> None:
    if not os.path.exists(os.path.join(INCLUDEDIR, "splitrpc_client.h")) or not any(
            f.startswith(f"lib{LIBRARY}.so") for f in (os.listdir(LIBDIR) if os.path.isdir(LIBDIR) else ())):
        raise NotInstalled(f"no C client library under {NATIVE}: install splitrpc with `pip install .` (sanitizer "
                           "builds leave it out)")


def cflags() -> list[str]:
    _check()
    return [f"-I{INCLUDEDIR}"]


def libs() -> list[str]:
    """Linker flags, with an rpath so that the program finds the library where the package is."""
    _check()
    return [f"-L{LIBDIR}", f"-Wl,-rpath,{LIBDIR}", f"-l{LIBRARY}"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or any(a not in OPTIONS for a in args):
        print(f"usage: python -m splitrpc.config {' '.join(f'[{o}]' for o in OPTIONS)}", file=sys.stderr)
        return 2
    try:
        out: list[str] = []
        for a in args:
            option: dict[str, Callable[[], list[str]]] = {
                "--cflags": cflags, "--libs": libs, "--includedir": lambda: [_checked(INCLUDEDIR)],
                "--libdir": lambda: [_checked(LIBDIR)], "--pkgconfigdir": lambda: [_checked(PKGCONFIGDIR)]}
            out += option[a]()
    except NotInstalled as e:
        print(f"splitrpc.config: {e}", file=sys.stderr)
        return 1
    print(" ".join(shlex.quote(x) for x in out))
    return 0


def _checked(path: str) -> str:
    _check()
    return path


if __name__ == "__main__":
    sys.exit(main())
