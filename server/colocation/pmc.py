"""pmc.py: a request's peak memory consumption (PMC) before it runs: a model traced on `meta` tensors (no memory, any machine) with GNNSched's liveness rules, Table 2's closed forms as a cross-check, and the measured peak of PyTorch's CPU allocator (after GNNSched, Sun et al., 2024).

Rules (GNNSched §3.3): walk the operators in execution (topological) order; an operator's new
tensors live from it to their last use by a later operator (a tensor no later operator uses, a
temporary, dies with its operator); the model's output lives to the end; weights and the request's
inputs live throughout. The peak is the largest sum of live tensors at any operator, each tensor
rounded up to ALIGN bytes (the CUDA caching allocator's granularity, to which the paper pads too);
the PMC is the peak times SAFETY (1.1, the paper's factor), rounded up.

Tracing records every ATen operator a forward pass dispatches (TorchDispatchMode) and tells tensors
apart by their storage, so views and in-place results allocate nothing. It sees what the model
really runs: any PyTorch model whose forward works on meta tensors can be estimated, not only the
Table 2 ones.
"""
from __future__ import annotations

import copy
import json
import math
import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

ALIGN = 512    # bytes: every tensor is rounded up to this (the CUDA caching allocator's block granularity)
SAFETY = 1.1   # the PMC is the traced peak times this (GNNSched §4.5)
F32, I64 = 4, 8


def _aligned(nbytes: int, align: int) -> int:
    return -(-int(nbytes) // align) * align if align > 1 else int(nbytes)


@dataclass(frozen=True)
class Estimate:
    """One request's memory: bytes, each tensor rounded up to `align`."""
    peak: int          # weights + inputs + the largest sum of live intermediates
    pmc: int           # ceil(peak * safety): what the scheduler reserves
    weights: int
    inputs: int
    operators: int     # ATen operators traced (0 for a closed form)


class _Recorder(TorchDispatchMode):
    """Records (storages used, storages produced with their bytes) per ATen operator. Holds every
    tensor it sees, so that no storage dies and lends its address to a later one."""

    def __init__(self):
        super().__init__()
        self.ops: list[tuple[list[int], list[tuple[int, int]]]] = []
        self.keep: list[torch.Tensor] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = [t for t in tree_flatten((args, kwargs or {}))[0] if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self.keep += ins + outs
        self.ops.append(([_sid(t) for t in ins], [(_sid(t), t.untyped_storage().nbytes()) for t in outs]))
        return out


def _sid(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _live_peak(ops, fixed: set, outputs: set, align: int) -> int:
    """The largest sum of live produced storages over ops, by the rules of this module's docstring
    (storages in `fixed` are counted elsewhere; those in `outputs` live to the end)."""
    born, last, size = {}, {}, {}
    for i, (uses, made) in enumerate(ops):
        for s in uses:
            if s in born:
                last[s] = i
        for s, n in made:
            if s not in fixed and s not in born:
                born[s], last[s], size[s] = i, i, _aligned(n, align)
    for s in outputs:
        if s in born:
            last[s] = len(ops)
    delta = [0] * (len(ops) + 2)
    for s, b in born.items():
        delta[b] += size[s]
        delta[last[s] + 1] -= size[s]
    peak = live = 0
    for d in delta:
        live += d
        peak = max(peak, live)
    return peak


def _check_shape(nn: int, ne: int, features: int) -> None:
    for what, v in (("NN (nodes)", nn), ("NE (edges)", ne), ("F (features)", features)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{what} must be a positive integer, got {v!r}")


class Estimator:
    """PMC estimates of one model for request shapes (NN, NE, F): x (NN, F) float32 and
    edge_index (2, NE) int64, traced on a meta copy of the model (made once; the model is not
    touched). Estimates are cached by shape. Thread-safe only under the GIL's one-at-a-time: call
    it from one thread (the scheduler's)."""

    def __init__(self, model: torch.nn.Module, *, safety: float = SAFETY, align: int = ALIGN, cache: int = 4096):
        if not (safety >= 1.0 and math.isfinite(safety)):
            raise ValueError(f"safety must be a finite factor >= 1, got {safety!r}")
        if align < 1:
            raise ValueError(f"align must be at least 1 byte, got {align}")
        self.safety, self.align = float(safety), int(align)
        self.in_dim = getattr(model, "dims", [None])[0]
        self._meta = copy.deepcopy(model).to("meta").eval()
        self._tensors = [*self._meta.parameters(), *self._meta.buffers()]
        self.weights = sum(_aligned(t.untyped_storage().nbytes(), self.align) for t in self._tensors)
        self.estimate = lru_cache(maxsize=cache)(self._estimate)

    def _estimate(self, nn: int, ne: int, features: int | None = None) -> Estimate:
        """The Estimate for a request of nn nodes, ne edges and `features` input features (None:
        the model's input width)."""
        features = self.in_dim if features is None else features
        _check_shape(nn, ne, features)
        x = torch.empty(nn, features, device="meta")
        ei = torch.empty(2, ne, dtype=torch.int64, device="meta")
        rec = _Recorder()
        with torch.inference_mode(), rec:
            out = self._meta(x, ei)
        fixed = {_sid(t) for t in (*self._tensors, x, ei)}
        outputs = {_sid(t) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)}
        inputs = _aligned(nn * features * F32, self.align) + _aligned(2 * ne * I64, self.align)
        peak = self.weights + inputs + _live_peak(rec.ops, fixed, outputs, self.align)
        return Estimate(peak, math.ceil(peak * self.safety), self.weights, inputs, len(rec.ops))


def table2(kind: str, dims: list[int], nn: int, ne: int, *, safety: float = SAFETY, align: int = ALIGN) -> Estimate:
    """The closed form of Table 2 for the models of models.py (kind gcn, sage or gin; dims the
    widths, input first): per layer of width Fin -> Fout, with h = NN x Fin its input (0 for the
    first layer: the request's x is counted among the inputs), T = NE x Fin Propagate's temporary,
    A = NN x Fin its output and Y, Y1, Y2, Z = NN x Fout Linear or Matmul outputs, the layer's peak of
    live intermediates is
        GCN  max(h + T + A, A + Y)                 Propagate (self-loop added in it), Matmul
        SAGE max(h + T + A, h + A + Y1, h + Y1 + Y2) Propagate, Linear_l, Linear_r, summed in place
        GIN  max(h + T + A, A + Z, Z + Y)           Propagate, Linear, ReLU in place, Linear
    and the whole peak is weights + inputs + the largest layer peak (a layer's tensors die before
    the next begins but for its output). Weights: Fin x Fout per Matmul or Linear, plus Fout per bias."""
    if kind not in ("gcn", "sage", "gin"):
        raise ValueError(f"unknown model {kind!r}")
    _check_shape(nn, ne, dims[0])
    a = lambda n: _aligned(n * F32, align)  # noqa: E731  (float32 tensor of n elements)
    weights = 0
    worst = 0
    for i, (fin, fout) in enumerate(zip(dims, dims[1:])):
        h = a(nn * fin) if i else 0
        t, agg, y = a(ne * fin), a(nn * fin), a(nn * fout)
        if kind == "gcn":
            weights += a(fin * fout)
            layer = max(h + t + agg, agg + y)
        elif kind == "sage":
            weights += a(fin * fout) + a(fout) + a(fin * fout)
            layer = max(h + t + agg, h + agg + y, h + y + y)
        else:
            weights += a(fin * fout) + a(fout) + a(fout * fout) + a(fout)
            layer = max(h + t + agg, agg + y, y + y)
        worst = max(worst, layer)
    inputs = a(nn * dims[0]) + _aligned(2 * ne * I64, align)
    peak = weights + inputs + worst
    return Estimate(peak, math.ceil(peak * safety), weights, inputs, 0)


def measured_cpu_peak(model: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor) -> int:
    """The peak bytes PyTorch's CPU allocator held for one forward pass of model on (x,
    edge_index): the weights and inputs (already allocated) plus the highest "Total Allocated" the
    profiler's memory events report during the pass, over where it started. Unrounded (the CPU
    allocator does not round sizes), so compare it with an estimate made with align=1."""
    from torch.profiler import ProfilerActivity, profile

    base = sum(t.untyped_storage().nbytes() for t in (*model.parameters(), *model.buffers(), x, edge_index))
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model(x, edge_index)
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = [e["args"] for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    finally:
        os.unlink(path)
    events = [e for e in events if e.get("Device Type") == 0]  # the CPU's
    if not events:
        raise RuntimeError("the profiler reported no CPU memory events: cannot read the allocator's peak")
    start = events[0]["Total Allocated"] - events[0]["Bytes"]
    return base + max(e["Total Allocated"] for e in events) - start


def measured_cuda_peak(model: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor, *,
                       repeats: int = 3) -> tuple[int, float, int]:
    """(peak bytes, seconds, workspace bytes) of one forward pass of model on (x, edge_index) on
    their CUDA device. The peak is what an Estimate counts: the weights and inputs (each storage
    as the caching allocator rounds it) plus the most the pass allocated on top of what was
    allocated before it (max_memory_allocated after its peak was reset), after a first pass that
    made the libraries' workspaces. The workspace is what is allocated then beyond the weights and
    inputs: per-stream workspaces (cuBLAS takes 32 MiB per handle and stream on Hopper, from the
    caching allocator) made once and kept, not the request's; the first GPU run counted them in
    every pass (bench/results/gpu/). seconds: the median of `repeats` synchronised passes. model,
    x and edge_index must be on one CUDA device. Compare the peak with an estimate made with
    align=ALIGN (the allocator's rounding)."""
    dev = x.device
    if dev.type != "cuda" or edge_index.device != dev:
        raise ValueError(f"measured_cuda_peak needs x and edge_index on one CUDA device, got {x.device} and "
                         f"{edge_index.device}")
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in [*model.parameters(), *model.buffers(), x, edge_index] if t.device == dev}
    own = sum(-(-n // ALIGN) * ALIGN for n in storages.values())
    times = []
    with torch.inference_mode():
        model(x, edge_index)  # kernels loaded, workspaces made: not the request's
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        for _ in range(max(1, repeats)):
            t0 = torch.cuda.Event(enable_timing=True)
            t1 = torch.cuda.Event(enable_timing=True)
            t0.record()
            out = model(x, edge_index)
            t1.record()
            torch.cuda.synchronize(dev)
            times.append(t0.elapsed_time(t1) / 1e3)
            del out
    peak = own + int(torch.cuda.max_memory_allocated(dev)) - base
    return peak, float(sorted(times)[len(times) // 2]), max(0, int(base) - own)
