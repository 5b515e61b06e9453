"""check_sections.py: the sections of `splitrpc check` that serve this package's services (a plug-in of the check, through the `splitrpc.check` entry point): the host path with every built-in service, and the model zoo served on the GPU."""
from __future__ import annotations

import numpy as np

import splitrpc
from splitrpc.check import Context, Result, Section, expect
from splitrpc.check.probes import need_cupy, need_gpu, need_torch_cuda
from splitrpc.check.serving import errors_sent, loopback_server, settled, wave
from splitrpc.services import SERVICES, register_builtin_services
from splitrpc.services import models as zoo
from splitrpc.services.builtin import ECHO_MAX

# ------------------------------------------------------------------ the host path

WAVE = 64  # calls sent at once per service, batched by the server


def run_host(ctx: Context) -> Result:
    rng = np.random.default_rng(ctx.seed)
    done = {}
    with loopback_server(register_builtin_services) as srv:
        with splitrpc.Client("127.0.0.1", srv.port, timeout=10.0) as c:
            for name, svc in SERVICES.items():
                req = svc.example(rng)
                expect(c.call(svc.func_id, req) == svc.expected(req), f"{name}: the reply to one call is wrong")
                n = WAVE if name != "head" else WAVE // 4  # 588 KiB each
                done[name] = 1 + wave(c, svc.func_id, [svc.example(rng) for _ in range(n)],
                                      lambda q, r, svc=svc: r == svc.expected(q), name)
            big = rng.bytes(ECHO_MAX)
            expect(c.call(3, big) == big, f"echo: a {ECHO_MAX} B request did not come back whole")
            try:
                c.call(3, big + b"x")
                too_large = "answered"
            except splitrpc.TooLarge:
                too_large = "TOO_LARGE"
            expect(too_large == "TOO_LARGE", f"echo: a {ECHO_MAX + 1} B request was {too_large}, not TOO_LARGE")
        st = settled(srv, lambda s: s["in_flight"] == 0 and s["errors"].get("TOO_LARGE", 0) == 1)
    calls = sum(done.values()) + 1  # and the 1 MiB echo; the TOO_LARGE one is answered but never counted as a call
    errors = {k: v for k, v in st["errors"].items() if v}
    expect(errors == {"TOO_LARGE": 1}, f"the server sent errors {errors}, expected only the one TOO_LARGE")
    expect(st["calls"] >= calls, f"the server counted {st['calls']} calls of the {calls} made")
    facts = {"calls": done, "mean_batch": st["mean_batch"], "devices": st["devices"]}
    return Result(summary=f"{len(done)} services ({', '.join(done)}), {calls + 1} calls (the TOO_LARGE one too), every reply right, mean batch "
                          f"{st['mean_batch']:.1f}; {ECHO_MAX} B echo whole, one byte more TOO_LARGE",
                  facts=facts,
                  markdown=[f"- built-in services on the CPU over loopback: {', '.join(f'{k} {v} calls' for k, v in done.items())}; "
                            f"mean batch {st['mean_batch']:.2f}; a {ECHO_MAX} B echo and its TOO_LARGE neighbour"])



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


SECTIONS = [
    Section("host", "the host path: a loopback server with every built-in service, replies checked", run_host,
            cap_s=90, stage="host"),
    Section("device-zoo", "the model zoo (LeNet, BERT-like) served on the GPU, replies against the CPU reference",
            run_device_zoo, cap_s=240, stage="device"),
]
