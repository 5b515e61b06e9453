"""emulated_lane.py: an EMULATED separate accelerator lane for GNN serving where there is no GPU: it answers from the CPU implementation (per-seed results kept) and holds the lane for the time a cost model gives the batch (fixed + per-PSGS seconds), sleeping, so it occupies no CPU core for that time: routing where the two lanes do not share cores, Quiver's regime (after Quiver, Tan et al., arXiv 2023).

What is emulated, and what is not:
- The answer is real: each seed's logits come from the CPU lane's code (sampling is a function of
  (salt, node, hop) and one seed's sample tree does not depend on the other seeds of its batch,
  so a seed's logits are the same in any batch; tests/test_gnn_emulated_lane.py checks it). A
  seed seen before is answered from its kept row; a new one is computed on the lane's thread,
  and that CPU time is counted apart (``miss_s``), since a real GPU would not spend it there.
- The time is modelled: a batch of summed PSGS P holds the lane from its start to
  ``fixed_s + per_psgs_s * P`` later (longer only if computing new seeds took longer: counted in
  ``late``). The model's numbers are ASSUMED (LaneModel's defaults) until a calibration measured
  on a GPU is given (``LaneModel.from_calibration``), which fits them to that GPU lane's mean
  latency by PSGS.
Nothing here touches a GPU; every label says "emulated".
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import numpy as np

@dataclass(frozen=True)
class LaneModel:
    """Seconds a batch of summed PSGS P takes on the emulated lane: fixed_s + per_psgs_s * P.
    source says where the numbers come from ("assumed", or the calibration file they were fitted
    to)."""

    # ASSUMED, not measured (no GPU has run this project's GNN lanes): 2 ms per batch (kernel
    # launches, the seeds' and logits' copies, the model's small layers) and 20 ns per sampled node
    # instance (sampling and gathering 50 M instances a second).
    fixed_s: float = 2e-3
    per_psgs_s: float = 2e-8
    source: str = "assumed"

    def __post_init__(self):
        for what, v in (("fixed_s", self.fixed_s), ("per_psgs_s", self.per_psgs_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"LaneModel.{what} must be a finite number of seconds >= 0, got {v!r}")
        if self.fixed_s == 0 and self.per_psgs_s == 0:
            raise ValueError("LaneModel: a lane that takes no time at all is not a model")

    def seconds(self, psgs: float) -> float:
        return self.fixed_s + self.per_psgs_s * max(float(psgs), 0.0)

    @classmethod
    def from_calibration(cls, path: str) -> "LaneModel":
        """The model fitted (least squares, mean latency against PSGS, each bin weighted by its
        batches) to the GPU lane of a calibration file (`splitrpc gnn calibrate`) measured on a GPU.
        CalibrationError for a file whose GPU lane was not a GPU (the bulk stand-in, or this
        emulated lane: fitting a model to itself proves nothing) or that fits no positive line."""
        from splitrpc.services.gnn.calibrate import Calibration, CalibrationError

        cal = Calibration.load(path)
        label = cal.labels.get("gpu", "")
        if "GPU sampler" not in label or "EMULATED" in label.upper():
            raise CalibrationError(f"{path}: its GPU lane is {label!r}, not a GPU: the emulated lane is fitted to "
                                   "a calibration measured on a GPU")
        c = cal.curves
        used = c.used
        x = np.asarray(c.centres, float)[used]
        y = np.asarray(c.mean["gpu"], float)[used]
        w = np.asarray(c.count["gpu"], float)[used]
        ok = np.isfinite(y) & (w > 0)
        if ok.sum() < 2:
            raise CalibrationError(f"{path}: fewer than two bins with GPU measurements")
        per, fixed = np.polyfit(x[ok], y[ok], 1, w=np.sqrt(w[ok]))
        if not (per >= 0 and fixed >= 0) or (per == 0 and fixed == 0):
            raise CalibrationError(f"{path}: the GPU lane's latency does not fit fixed + per-PSGS >= 0 "
                                   f"(got {fixed:.3g} s + {per:.3g} s per PSGS)")
        return cls(float(fixed), float(per), source=f"fitted to {path}")

    @classmethod
    def load(cls, path: str | None) -> "LaneModel | None":
        """from_calibration(path), or None (the assumed numbers) for no path: what a --lane-model
        option gives."""
        return None if path is None else cls.from_calibration(path)


class EmulatedLane:
    """The emulated lane's work for a GNNService: run(seeds, psgs) -> logits, holding the caller
    (the lane's thread) for the model's time. compute(seeds) is the CPU lane's code (logits of
    those seeds, rows in order). Thread-safe: one lane runs one batch at a time (its lock, in
    GNNService), and the kept rows have their own lock for warm()."""

    def __init__(self, compute, model: LaneModel | None = None):
        self.model = model or LaneModel()
        self._compute = compute
        self._rows: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()
        self.batches = self.misses = self.late = 0
        self.miss_s = 0.0     # CPU seconds spent computing seeds not seen before
        self.modelled_s = 0.0

    def _logits(self, seeds: np.ndarray) -> np.ndarray:
        with self._lock:
            missing = np.unique(np.array([s for s in seeds.tolist() if s not in self._rows], dtype=np.int64))
        if missing.size:
            t0 = time.perf_counter()
            rows = self._compute(missing)
            with self._lock:
                for s, r in zip(missing.tolist(), rows):
                    self._rows[s] = np.array(r, copy=True)
                self.misses += int(missing.size)
                self.miss_s += time.perf_counter() - t0
        with self._lock:
            return np.stack([self._rows[s] for s in seeds.tolist()])

    def warm(self, seeds, chunk: int = 1024) -> int:
        """Computes and keeps the rows of `seeds` not seen yet, `chunk` seeds at a time (before
        serving: no lane time); returns how many were new."""
        seeds = np.unique(np.ascontiguousarray(seeds, dtype=np.int64))
        before = len(self._rows)
        for i in range(0, seeds.size, chunk):
            self._logits(seeds[i:i + chunk])
        return len(self._rows) - before

    def run(self, seeds: np.ndarray, psgs: float) -> np.ndarray:
        """The logits of `seeds`, returned no sooner than the model's time for `psgs` after the
        call began."""
        t0 = time.perf_counter()
        due = t0 + self.model.seconds(psgs)
        out = self._logits(np.ascontiguousarray(seeds, dtype=np.int64))
        left = due - time.perf_counter()
        if left > 0:
            time.sleep(left)
        else:
            self.late += 1
        self.batches += 1
        self.modelled_s += due - t0
        return out

    def stats(self) -> dict:
        return {"model": {"fixed_s": self.model.fixed_s, "per_psgs_s": self.model.per_psgs_s,
                          "source": self.model.source},
                "batches": self.batches, "late": self.late, "seeds_kept": len(self._rows), "misses": self.misses,
                "miss_s": round(self.miss_s, 6), "modelled_s": round(self.modelled_s, 6)}
