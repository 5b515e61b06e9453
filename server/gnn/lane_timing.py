"""lane_timing.py: calibration measurements for PSGS routing: batches of known PSGS run on each lane at full load without queueing, and `splitrpc gnn calibrate`, which turns them into a calibration file and its plot (after Quiver, Tan et al., arXiv 2023).

Quiver measures latency against PSGS "when both CPUs and GPUs are near full utilization, with no
queuing": here each lane's thread runs its own list of batches back to back, both lanes at once
(each busy all the time, no batch ever waits), and every batch's service time (sampling,
feature gathering, model) is one measurement. Batches have 1 .. 1024 seeds drawn in proportion to
degree, so their summed PSGS spans one small request to a full batch of large ones (bench-gnn's
largest: 8 calls of 128 seeds); a server's routing threshold should lie inside the measured range.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np

from splitrpc.services.gnn import calibrate
from splitrpc.services.gnn.serve import GNNService, draw_seeds, lane_options

SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # seeds per calibration batch
# Batches of each size per lane. A bin's max over n samples is exceeded by a further batch with
# probability about 1/(n+1): 100 per size keeps that near 1% (a bound meant to hold for 99%).
PER_SIZE = 100
BINS = 12  # log-spaced PSGS bins before thin neighbours are merged (calibrate.adaptive_edges)


def batches(service: GNNService, per_size: int, seed: int, sizes=SIZES) -> list[np.ndarray]:
    """per_size batches of each size, seeds drawn by degree, in a shuffled order."""
    rng = np.random.default_rng(seed)
    out = [draw_seeds(service.graph, rng, s) for s in sizes for _ in range(per_size)]
    order = rng.permutation(len(out))
    return [out[i] for i in order]


def measure(service: GNNService, *, per_size: int = PER_SIZE, seed: int = 1, warmup: int = 3, sizes=SIZES,
            progress=None) -> calibrate.Measurements:
    """Runs per_size batches of every size on each lane, both lanes at once; returns the
    measurements (lane, batch PSGS, latency). progress(done, total) is called now and then."""
    lanes = list(service.lanes)
    work = {ln: batches(service, per_size, seed + i, sizes) for i, ln in enumerate(lanes)}
    if service.emulated is not None:  # its answers computed ahead: what it measures is its model's time
        service.emulated.warm(np.concatenate(work["emulated"]))
    total = sum(len(w) for w in work.values())
    rows: dict[str, list] = {ln: [] for ln in lanes}
    done = [0]
    errors: list = []

    def run(lane: str) -> None:
        try:
            for b in work[lane][:warmup]:
                service.infer(b, lane)  # first-touch costs (allocations, code paths) not measured
            for b in work[lane]:
                t0 = time.perf_counter()
                service.infer(b, lane)
                rows[lane].append((float(service.psgs[b].sum()), time.perf_counter() - t0))
                done[0] += 1
        except BaseException as e:  # reported by the caller
            errors.append(e)

    threads = [threading.Thread(target=run, args=(ln,), name=f"calibrate-{ln}") for ln in lanes]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.5)
        if progress:
            progress(done[0], total)
    if errors:
        raise errors[0]
    lane_col = [ln for ln in lanes for _ in rows[ln]]
    psgs = [r[0] for ln in lanes for r in rows[ln]]
    lat = [r[1] for ln in lanes for r in rows[ln]]
    return calibrate.Measurements(np.array(lane_col), np.array(psgs), np.array(lat))


def calibration(service: GNNService, *, per_size: int = PER_SIZE, seed: int = 1, bins: int = BINS,
                progress=None) -> calibrate.Calibration:
    """Measures both lanes (measure) and derives the service's calibration over log-spaced bins,
    thin neighbours merged; CalibrationError when a bin still has too few samples."""
    meas = measure(service, per_size=per_size, seed=seed, progress=progress)
    labels = {ln: service.lanes[ln].label for ln in service.lanes}
    return calibrate.calibrate(meas, calibrate.adaptive_edges(meas, bins), fanouts=service.fanouts,
                               graph=service.graph.name, labels=labels)


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("calibrate", help="measure the GNN lanes' latency against PSGS and write a calibration file",
                       description="Runs batches of known PSGS on both sampling lanes at full load without "
                                   "queueing, derives the four crossing points (Quiver: strict, loose, "
                                   "CPU-preferred, GPU-preferred) and writes them with a plot.")
    p.add_argument("--model", default="graphsage", choices=("graphsage", "gat"))
    p.add_argument("--small", action="store_true", help="the small graph (fast; for trying it out)")
    p.add_argument("--per-size", type=int, default=PER_SIZE, help="batches of each size per lane (default: %(default)s)")
    p.add_argument("--bins", type=int, default=BINS, help="PSGS bins, log-spaced (default: %(default)s)")
    p.add_argument("--out", default="gnn_calibration.json", help="the calibration file (a PNG is written beside it)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lane", default="auto", choices=("auto", "bulk", "emulated", "gpu"),
                   help="the non-CPU lane to measure against the CPU lane: the GPU, the bulk stand-in, or the "
                        "EMULATED lane (its cost model's time: a calibration of it tells where routing would cross, "
                        "given that model); auto: the GPU where torch sees one, else bulk (default: %(default)s)")
    p.add_argument("--lane-model", metavar="FILE", help="--lane emulated: its model fitted to this GPU calibration")
    p.set_defaults(func=cmd_calibrate)
    return p


def cmd_calibrate(a) -> int:
    try:
        import torch
    except ImportError as e:
        print(f"splitrpc gnn calibrate: {e}; pip install 'splitrpc[gnn]'", file=sys.stderr)
        return 2

    torch.set_num_threads(1)  # one core per lane, as served (register_gnn)
    print(f"building {a.model} on the {'small' if a.small else 'reddit-like'} graph ...", flush=True)
    try:
        svc = GNNService(a.model, small=a.small, **lane_options(a.lane, a.lane_model))
    except ValueError as e:  # no CUDA for --lane gpu; --lane-model without emulated, or one that cannot fit
        print(f"splitrpc gnn calibrate: {e}", file=sys.stderr)
        return 2
    print("lanes: " + "; ".join(f"{k}: {ln.label}" for k, ln in svc.lanes.items()), flush=True)

    def progress(done: int, total: int) -> None:
        print(f"\r  {done}/{total} batches", end="", flush=True)

    try:
        cal = calibration(svc, per_size=a.per_size, seed=a.seed, bins=a.bins, progress=progress)
    except calibrate.CalibrationError as e:
        print(f"\nsplitrpc gnn calibrate: {e}", file=sys.stderr)
        return 1
    print()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    cal.save(a.out)
    png = a.out.rsplit(".", 1)[0] + ".png"
    calibrate.plot(cal, png)
    for k in calibrate.POINTS:
        print(f"  {k:14s} PSGS {cal.threshold(k):10.0f}")
    print(f"wrote {a.out} and {png}")
    return 0
