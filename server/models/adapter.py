"""adapter.py: a torch module as a splitrpc tensor callback (zero-copy in and out, stream-ordered on CUDA)."""
from __future__ import annotations

try:
    import torch
except ImportError as e:  # the registry (specs, examples) works without torch; building a model does not
    raise ImportError("the splitrpc model zoo needs PyTorch: pip install 'splitrpc[models]'") from e

import numpy as np


def init_params(module: "torch.nn.Module", seed: int) -> None:
    """Deterministic random weights for `seed`, independent of torch's global RNG and of the device.

    Conv: He normal (fan in); Linear and LSTM: uniform +-1/sqrt(fan in) (PyTorch's default
    scale); Embedding: normal(0, 0.02) as BERT; LayerNorm: 1/0; BatchNorm: random affine and
    running statistics, so eval mode really normalises (see resnet.py for its residual scale)."""
    g = torch.Generator().manual_seed(int(seed))
    nn = torch.nn
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.Conv2d):
                fan_in = m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]
                m.weight.normal_(0.0, (2.0 / fan_in) ** 0.5, generator=g)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.Linear):
                bound = 1.0 / m.in_features ** 0.5
                m.weight.uniform_(-bound, bound, generator=g)
                if m.bias is not None:
                    m.bias.uniform_(-bound, bound, generator=g)
            elif isinstance(m, nn.LSTM):
                bound = 1.0 / m.hidden_size ** 0.5
                for p in m.parameters():
                    p.uniform_(-bound, bound, generator=g)
            elif isinstance(m, nn.Embedding):
                m.weight.normal_(0.0, 0.02, generator=g)
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.0, generator=g)
                m.bias.normal_(0.0, 0.1, generator=g)
                m.running_mean.normal_(0.0, 0.1, generator=g)
                m.running_var.uniform_(0.5, 1.5, generator=g)


def construct(cls, *args, seed: int = 0, **kw) -> "torch.nn.Module":
    """cls(*args, **kw) with init_params(seed), in eval mode, on the CPU; torch's global RNG is left as it was."""
    with torch.random.fork_rng(devices=[]):
        module = cls(*args, **kw)
    init_params(module, seed)
    if hasattr(module, "reset_residual_scale"):
        module.reset_residual_scale()
    return module.eval().requires_grad_(False)


def usable_device(device: str) -> str:
    """`device`, or "cpu" when it names CUDA and torch sees no CUDA device (the server then
    serves the function from host memory too)."""
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        return "cpu"
    return device


def _cupy():
    try:
        import cupy
    except ImportError:
        return None
    return cupy


class TorchCallback:
    """The serving callback of a model: ``callback(*inputs, *outputs)``.

    Each argument is a (B, *shape) array: numpy (CPU), CuPy (a function registered with
    device="cuda:N") or a torch tensor (a benchmark peer that moved the request itself).

    Inputs are read-only, outputs writable. Nothing here writes to an input: the module's forward
    gets the inputs as tensors under torch.inference_mode and computes new ones; each result is
    copied into a torch view of its output array (``.copy_()``), in place. An input becomes a
    torch tensor without a copy (torch.from_numpy, torch.from_dlpack) and moves only if it is not
    on the model's device. torch has no read-only tensors, so an input in read-only memory (a
    numpy view of immutable request bytes, as the benchmark peers decode them) is not handed to
    torch as writable memory: it is copied into a tensor torch owns, on the model's device. The
    server's Tensor Queue views are writable memory and go in without a copy.

    On CUDA the work is queued on the CuPy current stream (torch.cuda.ExternalStream), or on
    torch's current stream when the arguments are torch tensors, and nothing synchronizes: the
    caller orders its reply after that stream. ``module`` is the torch module (its forward takes
    the input tensors and returns the output tensors, batch first)."""

    def __init__(self, module: "torch.nn.Module", n_inputs: int, device: str = "cpu"):
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.module = module.to(self.device)
        self.n_inputs = n_inputs
        self._streams: dict = {}

    def __call__(self, *arrays) -> None:
        ins, outs = arrays[:self.n_inputs], arrays[self.n_inputs:]
        if self.device.type != "cuda":
            with torch.inference_mode():
                self._run(ins, outs)
            return
        with torch.cuda.device(self.device), torch.cuda.stream(self._stream(arrays[0])), torch.inference_mode():
            self._run(ins, outs)

    def _stream(self, first) -> "torch.cuda.Stream":
        """The stream to run on: the CuPy current stream for CuPy (or numpy) arrays, torch's for tensors."""
        cupy = None if isinstance(first, torch.Tensor) else _cupy()
        if cupy is None:
            return torch.cuda.current_stream(self.device)
        with cupy.cuda.Device(self.device.index):
            ptr = cupy.cuda.get_current_stream().ptr
        if ptr == 0:  # CuPy's null stream is the legacy default stream, which is torch's default stream
            return torch.cuda.default_stream(self.device)
        s = self._streams.get(ptr)
        if s is None:
            s = self._streams[ptr] = torch.cuda.ExternalStream(ptr, device=self.device)
        return s

    @staticmethod
    def _tensor(a) -> "torch.Tensor":
        """A torch tensor on a's memory (no copy): an output, or a writable input."""
        if isinstance(a, torch.Tensor):
            return a
        if isinstance(a, np.ndarray):
            return torch.from_numpy(a)
        return torch.from_dlpack(a)  # CuPy or any DLPack producer, ordered on the current stream

    def _run(self, ins, outs) -> None:
        dev = self.device
        xs = []
        for a in ins:
            if isinstance(a, np.ndarray) and not a.flags.writeable:
                xs.append(torch.tensor(a, device=dev))  # read-only memory: a copy torch owns (see the class)
                continue
            t = self._tensor(a)
            xs.append(t if t.device == dev else t.to(dev))
        ys = self.module(*xs)
        if len(ys) != len(outs):
            raise RuntimeError(f"model gave {len(ys)} outputs for {len(outs)} output arrays")
        for out, y in zip(outs, ys):
            self._tensor(out).copy_(y)
