"""indep_client.py: the independent client (bench/clients/indep_client.c, written from docs/PROTOCOL.md alone, built and installed by CMake): where its binary is, and one closed-loop run of it, for the suites that measure with it (bench-indep, bench)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from splitrpc.loadgen.reporting import SuiteFailed

CLIENT_ENV = "SPLITRPC_INDEP_CLIENT"  # a client binary to use instead of the installed one
CLIENT_SRC = "indep_client.c"         # its source, installed beside it (bench/clients)
DISCIPLINE = ("closed loop, one sendmmsg per call, replies by recvmmsg (spin: MSG_DONTWAIT; block: "
              "MSG_WAITFORONE), latency from a call's first send, every reply checked")


def client_path(given: str | None = None) -> str:
    """The client's binary: given, $SPLITRPC_INDEP_CLIENT, or the one installed with the package.
    Raises SuiteFailed when there is none."""
    here = Path(__file__).resolve().parent.parent / "clients"
    for c in (given, os.environ.get(CLIENT_ENV), str(here / "indep_client")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise SuiteFailed(f"no independent client binary (looked in {here}); build it with "
                      f"`cc -O2 -std=gnu11 -o indep_client bench/clients/{CLIENT_SRC}` and pass --client")


def run(path: str, port: int, mode: str, outstanding: int, calls: int, warmup: int, func: int = 1,
        size: int = 1024) -> dict:
    """One closed-loop run against 127.0.0.1:port, every reply checked: the client's JSON report.
    Raises RuntimeError when it could not run."""
    r = subprocess.run([path, "--port", str(port), "--mode", mode, "--outstanding", str(outstanding), "--calls",
                        str(calls), "--warmup", str(warmup), "--func", str(func), "--size", str(size), "--check",
                        "--json"], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"client exited {r.returncode}: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout)
