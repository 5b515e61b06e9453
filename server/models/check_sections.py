"""check_sections.py: the model zoo's sections of `splitrpc check` (the models capability's, plugin.py): the zoo served on the GPU against the CPU reference, and its CUDA-vs-CPU test file by pytest."""
from __future__ import annotations

import numpy as np

import splitrpc
from splitrpc.check import Context, Result, Section, expect
from splitrpc.check.probes import need_cupy, need_gpu, need_torch_cuda
from splitrpc.check.serving import errors_sent, loopback_server, settled, wave
from splitrpc.check.suites import run_test_file
from splitrpc.services import models as zoo

# ------------------------------------------------------------------ the model zoo on the GPU

ZOO = ("lenet", "bert-like")
ZOO_CALLS = 8


def run_device_zoo(ctx: Context) -> Result:
    ordinal = need_gpu(ctx.device)
    need_cupy()
    need_torch_cuda()
    device = f"cuda:{ordinal}"
    rng = np.random.default_rng(ctx.seed)
    done = {}
    with loopback_server(lambda s: zoo.register_models(s, list(ZOO), device=device, small=True, max_batch=8),
                         wait="poll") as srv:
        where = {n: d for n, d in srv.stats()["devices"].items() if n in ZOO}
        expect(set(where.values()) == {device}, f"the models run on {where}, not {device}")
        with splitrpc.Client("127.0.0.1", srv.port, timeout=30.0) as c:
            for name in ZOO:
                info = zoo.MODELS[name]
                first = info.example(rng)
                expect(zoo.check_reply(name, first, c.call(info.func_id, first, timeout=120.0), small=True),
                       f"{name}: the first reply differs from the CPU reference")
                done[name] = 1 + wave(c, info.func_id, [info.example(rng) for _ in range(ZOO_CALLS)],
                                      lambda q, r, n=name: zoo.check_reply(n, q, r, small=True), name)
        st = settled(srv, lambda s: s["in_flight"] == 0)
    errors = errors_sent(st)
    expect(not errors, f"the server sent errors {errors}")
    return Result(summary=f"{', '.join(f'{k} {v} calls' for k, v in done.items())} served on {device} (small), "
                          "every reply within tolerance of the CPU reference",
                  facts={"calls": done, "mean_batch": st["mean_batch"]},
                  markdown=[f"- the model zoo served on {device} (PyTorch on CuPy views of the device Tensor Queues): "
                            f"{', '.join(f'{k} {v} calls' for k, v in done.items())}, replies checked against the CPU "
                            "reference"])


def run_tests_zoo(ctx: Context) -> Result:
    need_gpu(ctx.device)
    need_torch_cuda()
    return run_test_file(ctx, "test_models.py", ("-k", "cuda_matches_the_cpu"),
                         "tests/test_models.py::test_cuda_matches_the_cpu")


SECTIONS = [
    Section("device-zoo", "the model zoo (LeNet, BERT-like) served on the GPU, replies against the CPU reference",
            run_device_zoo, cap_s=90, stage="device"),
    Section("tests-zoo", "tests/test_models.py: the zoo's CUDA-vs-CPU agreement by pytest", run_tests_zoo, cap_s=120,
            stage="suites"),
]
