"""device.py: where co-located calls run: the host (the budget is the scheduler's reservation only) or a CUDA device, where each call of a group runs on its own stream, a group's memory comes from its calls' torch.cuda.MemPools (one per call: PyTorch lets one thread at a time allocate to a pool), released together when the group ends, and the process's caching allocator is capped at the budget (plus what the models hold and the allocator's rounding per stream), so the device itself refuses an allocation past it (after GNNSched, Sun et al., 2024).

A Place is used by one CoLocation:
- prepare(model): the model on the place (moved to the GPU there);
- start(): after every model is prepared (the CUDA place sets its cap then: the models' memory
  plus the budget);
- group(reserved, size): a context manager around one group's calls; its Group holds the
  group's memory pools and, on exit, records what the group took (on the GPU: the bytes of the
  pools' segments, compared with the reservation) and releases them;
- forward(model, x, edge_index, group, slot): one call's forward pass, on this thread (a thread
  of the CoLocation's pool), its result as a float32 numpy array; slot (0 .. size - 1) picks
  the call's stream;
- report(): what it did.

Threads: forward runs on many threads at once (one per call of the running group); group(),
start() and report() on the dispatcher's or any one thread. The CUDA place has never run on a
GPU in this project's CI (no GPU there): the `device-colocate` section of `splitrpc check`
runs it on one.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

import numpy as np

GROUPS_KEPT = 256  # groups whose reservation and measured memory report() keeps
SEGMENT_SLACK = (20 + 2) << 20  # bytes per stream the caching allocator may round up past what a call uses
WARM_SIDE = 8  # a warm-up's matrices are this square: enough for cuBLAS and cuBLASLt to make their workspaces


class DeviceBudgetExceeded(RuntimeError):
    """The device refused an allocation past the co-location budget (its cap): that call fails."""


@dataclass
class Group:
    """One group on a place: its calls, the bytes the scheduler reserved for it, and (on a GPU)
    its calls' memory pools and the bytes their segments held when it ended."""
    size: int
    reserved: int
    pools: list = field(default_factory=list)  # one torch.cuda.MemPool per call (see CudaPlace.forward)
    measured: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


@dataclass
class _Tally:
    groups: int = 0
    over: int = 0            # groups whose measured memory exceeded their reservation
    refused: int = 0         # calls the device refused (out of memory under the cap)
    recent: list = field(default_factory=list)  # (reserved, measured) of the last GROUPS_KEPT groups
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class HostPlace:
    """The host: the models run on the CPU with PyTorch; the budget is the CoScheduler's
    reservation (an accountant: nothing on the host enforces it)."""

    kind = "host"

    def __init__(self, total: int):
        self.device, self.total = "cpu", total

    def prepare(self, model):
        return model

    def start(self) -> None:
        """Nothing to set on the host."""

    @contextlib.contextmanager
    def group(self, reserved: int, size: int):
        yield Group(size, reserved)

    def forward(self, model, x: np.ndarray, edge_index: np.ndarray, group: Group | None, slot: int) -> np.ndarray:
        import torch

        with torch.inference_mode():
            out = model(torch.from_numpy(x), torch.from_numpy(edge_index))
        return out.detach().to(torch.float32).contiguous().numpy()

    def report(self) -> dict:
        return {"kind": self.kind, "device": self.device, "enforced": "reservation (the host does not enforce it)"}


class CudaPlace:
    """A CUDA device through PyTorch: `streams` streams (a call's slot in its group picks one, so
    the calls of a group never share one), a MemPool per call released with its group, and the allocator's cap (torch's
    per-process memory fraction) at the models' memory plus the budget, set by start().
    ValueError when PyTorch sees no such device or the budget does not fit on it."""

    kind = "cuda"

    def __init__(self, device: str, budget: int, streams: int):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"co-location on {device!r}: torch {torch.__version__} sees no CUDA device")
        self.torch, self.dev = torch, torch.device(device)
        if self.dev.index is None:
            self.dev = torch.device("cuda", torch.cuda.current_device())
        if self.dev.index >= torch.cuda.device_count():
            raise ValueError(f"co-location on {device!r}: torch sees {torch.cuda.device_count()} CUDA device(s)")
        self.device = str(self.dev)
        self.total = int(torch.cuda.get_device_properties(self.dev).total_memory)
        self.budget = budget
        self.streams = [torch.cuda.Stream(self.dev) for _ in range(streams)]
        self.resident = 0   # bytes the models hold, measured by start()
        self._warmed: set[tuple[int, int]] = set()  # (thread, stream) pairs whose workspaces exist
        self._warm_lock = threading.Lock()
        # The libraries' workspaces: PyTorch gives cuBLAS one per handle (a thread's) and stream,
        # from the caching allocator (32 MiB on Hopper), made at a pair's first matrix product
        # and kept: measured here on this thread and stream 0 (the first GPU run found a call's
        # 32 MiB workspace refused past a cap that had no room for it: bench/results/gpu/).
        self.workspace = self._warm(0)
        # the allocator's rounding: blocks are not shared across streams, and a stream's first
        # allocation of 1-10 MiB takes a 20 MiB segment, of under 1 MiB a 2 MiB one; and each
        # slot's (thread, stream) workspaces, made by its first call
        self.slack = streams * (SEGMENT_SLACK + self.workspace)
        self.cap = None     # bytes the allocator may hold (resident + budget + slack), set by start()
        self._tally = _Tally()

    def _warm(self, k: int) -> int:
        """Makes this thread's workspaces for stream k (a matrix product and a linear layer on it,
        outside any memory pool: a workspace is kept for good, and would pin a pool's segment);
        the device memory that took, or 0 when this thread had them already."""
        torch = self.torch
        key = (threading.get_ident(), k)
        with self._warm_lock:
            if key in self._warmed:
                return 0
            self._warmed.add(key)  # before the work: this thread alone warms this pair
        try:
            stream = self.streams[k]
            stream.synchronize()
            before = torch.cuda.memory_reserved(self.dev)
            with torch.cuda.stream(stream), torch.inference_mode():
                a = torch.ones((WARM_SIDE, WARM_SIDE), device=self.dev)
                torch.mm(a, a)
                torch.nn.functional.linear(a, a, a[0])
            stream.synchronize()
        except BaseException:
            with self._warm_lock:  # not warmed after all: the next call on this slot tries again
                self._warmed.discard(key)
            raise
        return max(0, int(torch.cuda.memory_reserved(self.dev)) - int(before))

    def prepare(self, model):
        return model.to(self.dev)

    def start(self) -> None:
        """Caps the caching allocator at the models' memory, the budget and the slack (per stream
        the allocator's rounding and a slot's workspaces): an allocation past it raises
        OutOfMemoryError in the call that made it (forward says DeviceBudgetExceeded)."""
        torch = self.torch
        torch.cuda.synchronize(self.dev)
        torch.cuda.empty_cache()
        self.resident = int(torch.cuda.memory_reserved(self.dev))  # the cap counts segments, not tensors
        cap = self.resident + self.budget + self.slack
        if cap > self.total:
            raise ValueError(f"the models hold {self.resident} B of {self.device}; with the budget {self.budget} B "
                             f"and {self.slack} B for the allocator's rounding and the slots' workspaces that is "
                             f"over its {self.total} B")
        torch.cuda.set_per_process_memory_fraction(cap / self.total, self.dev)
        self.cap = cap

    @contextlib.contextmanager
    def group(self, reserved: int, size: int):
        torch = self.torch
        g = Group(size, reserved)
        try:
            yield g
        finally:
            try:  # the segments the group's calls took from the device, all in its pools
                g.measured = sum(int(seg["total_size"]) for pool in g.pools for seg in pool.snapshot())
            except Exception:  # noqa: BLE001 - a PyTorch without pool snapshots: not measured, said so
                g.measured = None
            g.pools.clear()  # the pools' segments go back to the device with them
            torch.cuda.empty_cache()
            t = self._tally
            with t.lock:
                t.groups += 1
                if g.measured is not None:
                    t.over += g.measured > reserved
                    t.recent = (t.recent + [(reserved, g.measured)])[-GROUPS_KEPT:]

    def forward(self, model, x: np.ndarray, edge_index: np.ndarray, group: Group | None, slot: int) -> np.ndarray:
        torch = self.torch
        k = slot % len(self.streams)
        stream = self.streams[k]
        pool = contextlib.nullcontext()
        if group is not None:  # a pool per call: PyTorch lets one thread at a time allocate to a pool
            mine = torch.cuda.MemPool()
            with group.lock:
                group.pools.append(mine)
            pool = torch.cuda.use_mem_pool(mine, self.dev)
        try:
            self._warm(k)  # a slot's first call on its thread: its workspaces, in the slack, not in its pool
            with torch.cuda.stream(stream), pool, torch.inference_mode():
                xd = torch.from_numpy(x).to(self.dev)
                ed = torch.from_numpy(edge_index).to(self.dev)
                out = model(xd, ed).to(torch.float32)
                y = out.to("cpu")
                stream.synchronize()
        except torch.cuda.OutOfMemoryError as e:
            with self._tally.lock:
                self._tally.refused += 1
            raise DeviceBudgetExceeded(f"{self.device} refused memory past the co-location cap ({self.cap} B: the "
                                       f"models' {self.resident} B, the budget {self.budget} B and {self.slack} B "
                                       f"for the allocator's rounding and the slots' workspaces): {e}") from None
        return y.contiguous().numpy()

    def report(self) -> dict:
        t = self._tally
        with t.lock:
            ratios = [m / r for r, m in t.recent if r > 0]
            return {"kind": self.kind, "device": self.device, "enforced": "the caching allocator's cap",
                    "cap": self.cap, "resident": self.resident, "slack": self.slack, "workspace": self.workspace,
                    "streams": len(self.streams),
                    "groups": t.groups,
                    "groups_over_reservation": t.over, "refused_calls": t.refused,
                    "measured_over_reserved": {"min": min(ratios), "median": float(np.median(ratios)),
                                               "max": max(ratios)} if ratios else None}


def place_for(device: str, budget: int, streams: int, host_total: int):
    """The Place of a CoLocation: "cpu" or "cuda[:N]"; ValueError for anything else."""
    if device == "cpu":
        return HostPlace(host_total)
    if device == "cuda" or device.startswith("cuda:"):
        return CudaPlace(device, budget, streams)
    raise ValueError(f"co-location device must be 'cpu' or 'cuda:N', got {device!r}")
