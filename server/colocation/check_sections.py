"""check_sections.py: co-location's sections of `splitrpc check` (the colocation capability's, plugin.py): the PMC estimates against the CUDA allocator's peak, and co-location served on the GPU (a stream per call, a memory pool per group, the allocator capped)."""
from __future__ import annotations

import numpy as np

import splitrpc
from splitrpc.check import Context, Result, Section, expect
from splitrpc.check.probes import need_gpu, need_torch_cuda
from splitrpc.check.serving import loopback_server

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
            peak, seconds, workspace = pmc.measured_cuda_peak(model, x, ei)
            rows.append({"kind": kind, "dims": list(model.dims), "nn": nn, "ne": ne, "estimated_peak": e.peak,
                         "pmc": e.pmc, "measured_peak": peak, "seconds": seconds, "workspace": workspace})
            del x, ei
        del model
        torch.cuda.empty_cache()
    over = [r for r in rows if r["measured_peak"] > r["pmc"]]
    ratio = np.array([r["measured_peak"] / r["estimated_peak"] for r in rows])
    ws = sorted({r["workspace"] for r in rows})  # the libraries' per-stream workspaces, counted apart
    facts = {"passes": rows, "measured_over_estimated": {"min": float(ratio.min()), "median": float(np.median(ratio)),
                                                         "max": float(ratio.max())},
             "workspace_bytes": ws}
    try:
        facts["device_fit"] = asdict(sim.fit_device(rows, name=f"fitted to device-pmc on {device}"))
    except ValueError as e:
        facts["device_fit"] = None
        facts["device_fit_error"] = str(e)
    expect(not over, f"{len(over)} of {len(rows)} passes used more than their PMC, e.g. {over[0]['kind']} "
                     f"NN={over[0]['nn']} NE={over[0]['ne']}: measured {over[0]['measured_peak']} B, PMC "
                     f"{over[0]['pmc']} B" if over else "")
    ws_text = f"workspaces kept from each first pass ({', '.join(f'{w:,}' for w in ws)} B) counted apart"
    return Result(summary=f"{len(rows)} passes (GCN, SAGE, GIN) on {device}: every measured peak within its PMC; "
                          f"measured/estimated peak {ratio.min():.2f}..{ratio.max():.2f} (median {np.median(ratio):.2f}); "
                          + ws_text,
                  facts=facts,
                  markdown=[f"- co-location's PMC estimates against the CUDA allocator's peak on {device}: {len(rows)} "
                            f"passes, measured/estimated {ratio.min():.2f}..{ratio.max():.2f}, none over its PMC "
                            f"({ws_text}: the co-location cap holds one per stream); the "
                            "simulator's device fitted to the passes' times: "
                            + (f"{facts['device_fit']['op_overhead'] * 1e6:.1f} us per operator, "
                               f"{facts['device_fit']['gather_bw'] / 1e9:.0f} GB/s gather, "
                               f"{facts['device_fit']['flops'] / 1e12:.1f} TFLOP/s" if facts["device_fit"]
                               else f"no fit ({facts['device_fit_error']})")])


# ------------------------------------------------------------------ co-location on the GPU

COLOC_F, COLOC_HIDDEN, COLOC_CLASSES = 32, 64, 8
COLOC_WAVE = 24        # calls sent at once, the two services alternating
COLOC_PARALLEL = 4     # calls of a group at most: its streams


def run_device_colocate(ctx: Context) -> Result:
    """GNNSched's co-location on the GPU (colocate.CoLocation(device="cuda:N"), device.CudaPlace):
    GCN and SAGE served together under BQT with a budget of three large calls; a wave of calls
    sent at once must come back equal to the CPU models' replies, the calls of each group must
    have run on distinct streams (a recorder around each model reads the current stream), and
    some group must hold more than one call. Then a service whose estimator says 1 byte sends one
    call far over the cap: the device must refuse it (INTERNAL, that call alone) and the next call
    must be answered. Each group's pool bytes against its reservation go in the facts."""
    ordinal = need_gpu(ctx.device)
    torch = need_torch_cuda()
    import copy
    import threading

    from splitrpc.services.colocation import colocate, op_models, pmc

    device = f"cuda:{ordinal}"
    rng = np.random.default_rng(ctx.seed)
    ran: list = []  # (group, stream) of each call in a group (the Group kept: its id stays its own)
    lock = threading.Lock()

    class Recorder(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, ei):
            call = getattr(colocate._here, "call", None)
            if call is not None and getattr(call, "group", None) is not None:
                with lock:
                    ran.append((call.group, torch.cuda.current_stream().cuda_stream))
            return self.inner(x, ei)

    class OneByte:
        def estimate(self, nn, ne):
            return 1

    kinds = ("gcn", "sage")
    cpu = {k: op_models.build(k, COLOC_F, hidden=COLOC_HIDDEN, layers=2, classes=COLOC_CLASSES, seed=i)
           for i, k in enumerate(kinds)}
    big = op_models.build("gcn", COLOC_F, hidden=512, layers=2, classes=COLOC_CLASSES, seed=9)
    est = {k: pmc.Estimator(m) for k, m in cpu.items()}
    max_nn, max_ne = 2000, 16000
    budget = 3 * max(e.estimate(max_nn, max_ne).pmc for e in est.values())
    co = colocate.CoLocation(budget, policy="bqt", device=device, max_parallel=COLOC_PARALLEL)
    cap_room = budget + co.place.slack
    liar_nn, liar_ne = 4000, 50_000  # grown until its true PMC is 3x past the cap's room
    big_est = pmc.Estimator(big)
    while big_est.estimate(liar_nn, liar_ne).pmc < 3 * cap_room:
        liar_ne *= 2
    limit = 1 << 25
    expect(colocate.request_size(liar_nn, liar_ne, COLOC_F) <= limit,
           f"the over-the-cap call needs {liar_ne} edges: past {limit} B")

    def setup(srv):
        for i, k in enumerate(kinds):
            co.add(srv, 40 + i, k, Recorder(copy.deepcopy(cpu[k])), features=COLOC_F, classes=COLOC_CLASSES,
                   max_nodes=max_nn, max_edges=max_ne, qos=1.0, estimator=est[k])
        co.add(srv, 42, "liar", big, features=COLOC_F, classes=COLOC_CLASSES, max_nodes=liar_nn, max_edges=liar_ne,
               qos=1.0, estimator=OneByte())

    ok, bad = 0, []
    with loopback_server(setup, max_message=limit) as srv:
        with splitrpc.Client("127.0.0.1", srv.port, timeout=60.0) as c:
            sent = []
            for i in range(COLOC_WAVE):
                k = kinds[i % 2]
                nn = int(rng.integers(200, max_nn))
                x, ei = op_models.random_request(nn, int(rng.integers(nn, max_ne)), COLOC_F, seed=i)
                sent.append((k, x, ei, c.call_async(40 + i % 2, colocate.pack_request(x.numpy(), ei.numpy()))))
            for k, x, ei, f in sent:
                got = np.frombuffer(f.result(), np.float32).reshape(x.shape[0], COLOC_CLASSES)
                with torch.inference_mode():
                    want = cpu[k](x, ei).numpy()
                if np.allclose(got, want, rtol=1e-3, atol=1e-4):
                    ok += 1
                else:
                    bad.append(f"{k} NN={x.shape[0]}: max |diff| {np.abs(got - want).max():.2e}")
            x, ei = op_models.random_request(liar_nn, liar_ne, COLOC_F, seed=99)
            try:
                c.call(42, colocate.pack_request(x.numpy(), ei.numpy()))
                refused = "answered"
            except splitrpc.InternalError as e:
                refused = str(e)
            k, (x, ei) = kinds[0], op_models.random_request(300, 2000, COLOC_F, seed=100)
            after = np.frombuffer(c.call(40, colocate.pack_request(x.numpy(), ei.numpy())), np.float32)
            with torch.inference_mode():
                after_ok = np.allclose(after.reshape(300, COLOC_CLASSES), cpu[k](x, ei).numpy(), rtol=1e-3, atol=1e-4)
        st = co.stats()
    co.stop()
    place = st["place"]
    groups: dict = {}
    for group, stream in ran:
        groups.setdefault(id(group), [group.size, []])[1].append(stream)
    shared = [(size, streams) for size, streams in groups.values() if len(set(streams)) != len(streams)]
    facts = {"budget": budget, "place": place, "groups": st["groups"], "mean_group_size": st["mean_group_size"],
             "calls_per_group": [len(v[1]) for v in groups.values()], "wave_ok": ok, "mismatches": bad,
             "refused": refused, "liar": {"nn": liar_nn, "ne": liar_ne,
                                          "true_pmc": big_est.estimate(liar_nn, liar_ne).pmc}}
    expect(not bad, f"{len(bad)} of {COLOC_WAVE} replies differ from the CPU model: {bad[:3]}")
    expect(st["mean_group_size"] > 1, f"no group held two calls (mean group size {st['mean_group_size']:.2f})")
    expect(len(ran) == COLOC_WAVE + 1, f"the recorder saw {len(ran)} calls in groups, not {COLOC_WAVE + 1}")
    expect(not shared, f"{len(shared)} groups ran two calls on one stream, e.g. {shared[:1]}")
    expect("refused memory past the co-location cap" in refused,
           f"the call 3x past the cap was not refused by the device: {refused[:200]}")
    expect(place["refused_calls"] == 1, f"the device refused {place['refused_calls']} calls, not 1")
    expect(after_ok, "the call after the refused one was not answered right")
    ratio = place["measured_over_reserved"] or {}
    return Result(summary=f"GCN + SAGE co-located on {device} (BQT, budget {budget / 1e6:.1f} MB): {ok} of "
                          f"{COLOC_WAVE} replies equal the CPU models', {st['groups']} groups (mean size "
                          f"{st['mean_group_size']:.2f}), a stream per call; a call 3x past the cap refused by the "
                          f"device alone; group pool bytes / reservation {ratio.get('min', float('nan')):.2f}.."
                          f"{ratio.get('max', float('nan')):.2f} ({place['groups_over_reservation']} groups over)",
                  facts=facts,
                  markdown=[f"- co-location on {device}: a stream per call, a MemPool per group, the allocator "
                            f"capped at models + budget + {place['slack'] >> 20} MiB rounding; {ok}/{COLOC_WAVE} "
                            f"replies right; groups over their reservation: {place['groups_over_reservation']} of "
                            f"{place['groups']}; the over-the-cap call refused by the device"])


SECTIONS = [
    Section("device-pmc", "co-location's PMC estimates against the CUDA allocator's peak, 20 shapes per GNN; "
            "the simulator's device fitted to their times", run_device_pmc, cap_s=90, stage="device"),
    Section("device-colocate", "co-location on the GPU: a stream per call, memory pools released per group, the allocator "
            "capped at the budget; replies against the CPU, a call past the cap refused alone", run_device_colocate,
            cap_s=90, stage="device"),
]
