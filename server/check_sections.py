"""check_sections.py: the built-in services' section of `splitrpc check` (the builtin capability's, server/builtin_plugin.py): the host path, a loopback server with every built-in service, replies checked."""
from __future__ import annotations

import numpy as np

import splitrpc
from splitrpc.check import Context, Result, Section, expect
from splitrpc.check.serving import loopback_server, settled, wave
from splitrpc.services import SERVICES, register_builtin_services
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


SECTIONS = [
    Section("host", "the host path: a loopback server with every built-in service, replies checked", run_host,
            cap_s=20, stage="host", tier="core"),
]
