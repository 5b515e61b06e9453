"""registry.py: the zoo's table (ModelInfo: func_id, specs, example, builder), registration, reply checks."""
from __future__ import annotations

import functools
import logging
from importlib import import_module
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from splitrpc.function_config import FUNCTION_DEFAULTS
from splitrpc.spec import TensorSpec

log = logging.getLogger("splitrpc.models")

# Relative tolerance of float replies against the unbatched CPU reference, also scaled by the
# reference's largest magnitude for the absolute part: batching changes the order of float32
# sums (~1e-6), and on a GPU cuDNN convolutions run in TF32 by default (~1e-3 of the scale).
RTOL = 1e-2


@dataclass(frozen=True)
class ModelInfo:
    """One model of the zoo. inputs/outputs: the TensorSpecs it is registered with (per call,
    without the batch dimension); example(rng): a valid random request; build(device, small,
    seed): its serving callback (``.module`` is the torch module)."""

    name: str
    func_id: int
    inputs: tuple
    outputs: tuple
    example: Callable[[np.random.Generator], bytes]
    factory: str        # "module:callable" in this package, called with small=...
    summary: str
    capacity: int = FUNCTION_DEFAULTS["capacity"]  # request Tensor Queue elements (ResNet's are 588 KiB: fewer)
    # extra check of integer outputs, which are not compared to the reference:
    # consistent(request_arrays, reply_arrays, atol) -> bool
    consistent: Callable | None = None

    @property
    def request_size(self) -> int:
        return sum(s.nbytes for s in self.inputs)

    @property
    def reply_size(self) -> int:
        return sum(s.nbytes for s in self.outputs)

    def build(self, device: str = "cpu", small: bool = False, seed: int = 0):
        """The serving callback on `device` ("cpu", "cuda", "cuda:N"), weights fixed by `seed`."""
        from splitrpc.services.models import adapter  # ImportError naming the `models` extra without torch

        mod, fn = self.factory.split(":")
        make = getattr(import_module(f"splitrpc.services.models.{mod}"), fn)
        module = adapter.construct(make, small=small, seed=seed)
        return adapter.TorchCallback(module, len(self.inputs), device)


def split(specs: Iterable[TensorSpec], data) -> list[np.ndarray]:
    """The arrays of one call that `data` (their concatenation) holds: views, no copy (read-only
    for bytes); ValueError when the size is wrong."""
    specs = list(specs)
    mv = memoryview(data).cast("B")
    want = sum(s.nbytes for s in specs)
    if mv.nbytes != want:
        raise ValueError(f"{mv.nbytes} bytes, expected {want}")
    arrays, at = [], 0
    for s in specs:
        arrays.append(np.frombuffer(mv[at:at + s.nbytes], dtype=s.np_dtype).reshape(s.shape))
        at += s.nbytes
    return arrays


# ------------------------------------------------------------------ example requests


def _lenet_example(rng: np.random.Generator) -> bytes:
    return rng.integers(0, 256, 28 * 28, dtype=np.uint8).tobytes()


def _f32_example(n: int) -> Callable[[np.random.Generator], bytes]:
    return lambda rng: rng.standard_normal(n).astype("<f4").tobytes()


def _bert_example(rng: np.random.Generator) -> bytes:
    """[CLS] question [SEP] context [SEP] padding: random word ids, segment 0 then 1."""
    seq = 384
    valid = int(rng.integers(16, seq + 1))
    question = int(rng.integers(4, 33))
    ids = np.zeros(seq, "<i8")
    ids[:valid] = rng.integers(1000, 30522, valid)
    ids[0], ids[question + 1], ids[valid - 1] = 101, 102, 102
    seg = np.zeros(seq, "<i8")
    seg[question + 2:valid] = 1
    return ids.tobytes() + seg.tobytes() + np.array([valid], "<i8").tobytes()


def _bert_consistent(req: list, rep: list, atol: float) -> bool:
    """best_span is an allowed span and scores the most under the reply's own logits."""
    from splitrpc.services.models.bert import MAX_ANSWER, SPAN, SPAN_PACK

    logits, span = rep[0], int(rep[1][0])
    valid = min(max(int(req[2][0]), 1), 384)
    s, e = divmod(span, SPAN_PACK)
    if not (0 <= s <= e < min(valid, SPAN) and e - s < MAX_ANSWER):
        return False
    start, end = logits[0].astype(np.float32), logits[1].astype(np.float32)
    scores = start[:, None] + end[None, :]
    pos = np.arange(SPAN)
    ok = (pos[None, :] >= pos[:, None]) & (pos[None, :] - pos[:, None] < MAX_ANSWER) & (pos[None, :] < valid)
    best = scores[ok].max()
    # The server took the argmax of these same float32 sums (torch, on the same logits): equal,
    # up to a last-bit difference in how the sum is rounded.
    return bool(scores[s, e] >= best - 1e-6 * max(1.0, abs(float(best))))


_F32 = "float32"
MODELS: dict[str, ModelInfo] = {
    m.name: m
    for m in (
        ModelInfo("lenet", 10, (TensorSpec("image", "uint8", (1, 28, 28)),), (TensorSpec("logits", _F32, (10,)),),
                  _lenet_example, "lenet:LeNet", "LeNet-5, uint8 28x28 image -> 10 logits"),
        ModelInfo("lstm", 11, (TensorSpec("seq", _F32, (8, 256)),), (TensorSpec("hidden", _F32, (256,)),),
                  _f32_example(8 * 256), "lstm:LSTMModel", "2-layer LSTM, 8 steps x 256 features -> last hidden state"),
        ModelInfo("resnet18", 12, (TensorSpec("image", _F32, (3, 224, 224)),), (TensorSpec("logits", _F32, (1000,)),),
                  _f32_example(3 * 224 * 224), "resnet:resnet18", "ResNet-18, 3x224x224 image -> 1000 logits",
                  capacity=64),
        ModelInfo("resnet50", 13, (TensorSpec("image", _F32, (3, 224, 224)),), (TensorSpec("logits", _F32, (1000,)),),
                  _f32_example(3 * 224 * 224), "resnet:resnet50", "ResNet-50, 3x224x224 image -> 1000 logits",
                  capacity=64),
        ModelInfo("bert-like", 14,
                  (TensorSpec("input_ids", "int64", (384,)), TensorSpec("segment_ids", "int64", (384,)),
                   TensorSpec("valid_length", "int64", (1,))),
                  (TensorSpec("logits", _F32, (2, 256)), TensorSpec("best_span", "int64", (1,))),
                  _bert_example, "bert:BertLike",
                  "BERT-like encoder (4 layers, hidden 256), 384 tokens -> start/end logits and best span",
                  consistent=_bert_consistent),
    )
}


def resolve(names) -> list[str]:
    """Model names from "all", a comma-separated string or an iterable of names; ValueError for an unknown one."""
    if isinstance(names, str):
        names = list(MODELS) if names.strip() == "all" else [n.strip() for n in names.split(",") if n.strip()]
    names = list(dict.fromkeys(names))
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise ValueError(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    return names


def register_models(server, names, *, device: str = "cpu", small: bool = False, max_batch: int | None = None,
                    max_delay_us: int | None = None, seed: int = 0) -> dict:
    """Builds the named models and registers them on a splitrpc.Server under their func_ids;
    returns {name: callback}. names: "all", "lenet,lstm" or a list. device="cuda:N" is passed
    on to add_function (CuPy views of GPU Tensor Queues); where torch sees no CUDA device the
    models run on the CPU (add_function falls back to host memory the same way). max_batch and
    max_delay_us left None take the library's defaults."""
    names = resolve(names)
    run_on = device
    if device != "cpu" and names:
        from splitrpc.services.models.adapter import usable_device

        run_on = usable_device(device)
        if run_on != device:
            log.warning("models %s: torch sees no CUDA device, running them on the CPU", ", ".join(names))
    callbacks = {}
    for name in names:
        info = MODELS[name]
        cb = info.build(device=run_on, small=small, seed=seed)
        kw = {"device": device} if device != "cpu" else {}
        server.add_function(cb, info.func_id, name, list(info.inputs), list(info.outputs), max_batch=max_batch,
                            max_delay_us=max_delay_us, capacity=info.capacity, **kw)
        callbacks[name] = cb
    return callbacks


# ------------------------------------------------------------------ reference and checks


@functools.lru_cache(maxsize=16)
def _cpu_callback(name: str, small: bool, seed: int):
    return MODELS[name].build("cpu", small=small, seed=seed)


def run_batch(callback, info: ModelInfo, requests: list) -> list[bytes]:
    """Replies of `callback` for requests run as one batch, on (B, ...) numpy arrays as the server gives them."""
    batch = len(requests)
    per_call = [split(info.inputs, r) for r in requests]
    ins = [np.stack([arrays[k] for arrays in per_call]) for k in range(len(info.inputs))]  # one array per TQ
    outs = [np.empty((batch, *s.shape), s.np_dtype) for s in info.outputs]
    callback(*ins, *outs)
    return [b"".join(o[i].tobytes() for o in outs) for i in range(batch)]


def reference(name: str, request, *, small: bool = False, seed: int = 0) -> bytes:
    """The reply the model gives `request` alone (batch of 1) on the CPU, with seed's weights."""
    info = MODELS[name]
    return run_batch(_cpu_callback(name, bool(small), int(seed)), info, [request])[0]


def check_reply(name: str, request, reply, small: bool = False, seed: int = 0) -> bool:
    """Whether `reply` is the model's answer to `request`: float outputs close to reference()
    (rtol RTOL, atol RTOL x the reference's largest magnitude), integer outputs consistent with
    the float ones (bert-like: the best span of the reply's own logits) or else equal."""
    info = MODELS[name]
    try:
        got = split(info.outputs, reply)
        req = split(info.inputs, request)
    except ValueError:
        return False
    want = split(info.outputs, reference(name, request, small=small, seed=seed))
    scale = max([1.0] + [float(np.abs(w).max()) for w, s in zip(want, info.outputs) if s.np_dtype.kind == "f"])
    atol = RTOL * scale
    for g, w, s in zip(got, want, info.outputs):
        if s.np_dtype.kind == "f":
            if not (np.all(np.isfinite(g)) and np.allclose(g, w, rtol=RTOL, atol=atol)):
                return False
        elif info.consistent is None and not np.array_equal(g, w):
            return False
    return info.consistent is None or info.consistent(req, got, atol)
