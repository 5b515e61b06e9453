"""power.py: a GPU's board power while a measurement runs, read through nvidia-smi (NVML's power.draw), for the power half of Hercules's efficiency tuples; None, said so, where there is no NVIDIA GPU (after Hercules, Ke et al., HPCA 2022).

A PowerMeter samples `nvidia-smi --query-gpu=power.draw` every `interval_s` on a thread between
start() and stop(), and stop() returns the mean watts over the samples (the GPU's whole board,
whatever else runs on it). nvidia-smi rather than the NVML bindings: it ships with the driver, so
the reading needs no extra package on a GPU machine. Without nvidia-smi, or when it cannot read a
power (no GPU, "[N/A]"), there is no reading: stop() returns None and `why` says why.
"""
from __future__ import annotations

import shutil
import subprocess
import threading

QUERY = ["--query-gpu=power.draw", "--format=csv,noheader,nounits"]


def read_watts(gpu: int = 0, timeout_s: float = 5.0) -> float:
    """One reading of GPU `gpu`'s board power in watts; RuntimeError saying why there is none."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise RuntimeError("no nvidia-smi on PATH (no NVIDIA driver here)")
    try:
        r = subprocess.run([exe, *QUERY, "-i", str(gpu)], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"nvidia-smi failed: {type(e).__name__}: {e}") from None
    text = r.stdout.strip().splitlines()[0].strip() if r.stdout.strip() else ""
    if r.returncode != 0:
        raise RuntimeError(f"nvidia-smi exited {r.returncode}: {(r.stderr or r.stdout).strip()[:200]}")
    try:
        watts = float(text)
    except ValueError:
        raise RuntimeError(f"nvidia-smi reported no power for GPU {gpu}: {text!r}") from None
    if not watts > 0:
        raise RuntimeError(f"nvidia-smi reported {watts} W for GPU {gpu}")
    return watts


class PowerMeter:
    """Mean board power of one GPU over a window: with PowerMeter() as m: ...; m.watts (None, and
    m.why, where there is no reading). One thread samples; start/stop from one thread."""

    def __init__(self, gpu: int = 0, interval_s: float = 0.1):
        self.gpu, self.interval_s = gpu, interval_s
        self.samples: list[float] = []
        self.watts: float | None = None
        self.why: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "PowerMeter":
        try:
            self.samples.append(read_watts(self.gpu))
        except RuntimeError as e:
            self.why = str(e)
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="splitrpc-power", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.samples.append(read_watts(self.gpu))
            except RuntimeError as e:  # a reading lost mid-run: the window's other samples stand
                self.why = str(e)

    def stop(self) -> float | None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self.watts = sum(self.samples) / len(self.samples) if self.samples else None
        return self.watts

    def __enter__(self) -> "PowerMeter":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
