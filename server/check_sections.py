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


# ------------------------------------------------------------------ co-location's memory estimates on the GPU

PMC_SHAPES = 20      # request shapes per model
PMC_FEATURES, PMC_HIDDEN, PMC_LAYERS, PMC_CLASSES = 100, 64, 3, 8


def run_device_pmc(ctx: Context) -> Result:
    """GNNSched's PMC estimate (pmc.Estimator, traced on meta tensors) against the CUDA caching
    allocator's measured peak for PMC_SHAPES request shapes per model (GCN, SAGE, GIN): the PMC
    (the estimate with its 1.1 safety factor), which the co-location scheduler reserves, must
    cover every measured peak. Each pass's time goes in the facts, and the simulator's device
    parameters are fitted to them (sim.fit_device), for bench-colocate-sim --device-from."""
    ordinal = need_gpu(ctx.device)
    torch = need_torch_cuda()
    from dataclasses import asdict

    from splitrpc.services.colocation import op_models, pmc, sim

    device = f"cuda:{ordinal}"
    rng = np.random.default_rng(ctx.seed)
    rows = []
    for kind in op_models.MODELS:
        model = op_models.build(kind, PMC_FEATURES, hidden=PMC_HIDDEN, layers=PMC_LAYERS, classes=PMC_CLASSES)
        est = pmc.Estimator(model)
        model = model.to(device)
        for i in range(PMC_SHAPES):
            nn = int(np.exp(rng.uniform(np.log(100), np.log(20_000))))
            ne = nn * int(rng.integers(2, 16))
            x, ei = op_models.random_request(nn, ne, PMC_FEATURES, seed=i, device=device)
            e = est.estimate(nn, ne)
            peak, seconds = pmc.measured_cuda_peak(model, x, ei)
            rows.append({"kind": kind, "dims": list(model.dims), "nn": nn, "ne": ne, "estimated_peak": e.peak,
                         "pmc": e.pmc, "measured_peak": peak, "seconds": seconds})
            del x, ei
        del model
        torch.cuda.empty_cache()
    over = [r for r in rows if r["measured_peak"] > r["pmc"]]
    ratio = np.array([r["measured_peak"] / r["estimated_peak"] for r in rows])
    facts = {"passes": rows, "measured_over_estimated": {"min": float(ratio.min()), "median": float(np.median(ratio)),
                                                         "max": float(ratio.max())}}
    try:
        facts["device_fit"] = asdict(sim.fit_device(rows, name=f"fitted to device-pmc on {device}"))
    except ValueError as e:
        facts["device_fit"] = None
        facts["device_fit_error"] = str(e)
    expect(not over, f"{len(over)} of {len(rows)} passes used more than their PMC, e.g. {over[0]['kind']} "
                     f"NN={over[0]['nn']} NE={over[0]['ne']}: measured {over[0]['measured_peak']} B, PMC "
                     f"{over[0]['pmc']} B" if over else "")
    return Result(summary=f"{len(rows)} passes (GCN, SAGE, GIN) on {device}: every measured peak within its PMC; "
                          f"measured/estimated peak {ratio.min():.2f}..{ratio.max():.2f} (median {np.median(ratio):.2f})",
                  facts=facts,
                  markdown=[f"- co-location's PMC estimates against the CUDA allocator's peak on {device}: {len(rows)} "
                            f"passes, measured/estimated {ratio.min():.2f}..{ratio.max():.2f}, none over its PMC; the "
                            "simulator's device fitted to the passes' times: "
                            + (f"{facts['device_fit']['op_overhead'] * 1e6:.1f} us per operator, "
                               f"{facts['device_fit']['gather_bw'] / 1e9:.0f} GB/s gather, "
                               f"{facts['device_fit']['flops'] / 1e12:.1f} TFLOP/s" if facts["device_fit"]
                               else f"no fit ({facts['device_fit_error']})")])


SECTIONS = [
    Section("host", "the host path: a loopback server with every built-in service, replies checked", run_host,
            cap_s=90, stage="host"),
    Section("device-zoo", "the model zoo (LeNet, BERT-like) served on the GPU, replies against the CPU reference",
            run_device_zoo, cap_s=240, stage="device"),
    Section("device-pmc", "co-location's PMC estimates against the CUDA allocator's peak, 20 shapes per GNN; "
            "the simulator's device fitted to their times", run_device_pmc, cap_s=180, stage="device"),
]
