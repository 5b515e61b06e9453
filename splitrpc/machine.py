"""machine.py: the facts of the host a run happened on (name, CPU model, CPUs, kernel, Python), for every report that quotes its machine."""
from __future__ import annotations

import os
import platform
from typing import Any


def describe() -> dict[str, Any]:
    """{"host", "cpu", "cpus", "kernel", "python"} of this machine."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"host": platform.node(), "cpu": cpu, "cpus": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version()}
