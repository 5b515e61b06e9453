"""`splitrpc check`: on this machine without a GPU (exit 0, "no GPU", GPU sections skipped), on the emulated device (an injected driver error fails its section and the exit status; every emulatable section passing, the benchmarks, a hung O2 kernel: tests/test_gpu_check_script.py's dry run, which runs them through bench/gpu/run.sh), the runner's time caps, crashes and budget, --only/--merge, the plug-in seam, and the report's files."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import emulated_gpu_env, splitrpc_cmd

import check_sections
import splitrpc
import splitrpc._native.auth
from splitrpc.check import Context, Failed, Section, runner
from splitrpc.check import Skipped as check_section_skipped
from splitrpc.check import device as check_device
from splitrpc.check import report as check_report
from splitrpc.check import registry
from splitrpc.check.facts import _cc_has_code, gpudirect

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
CORE = ["build", "machine", "auth", "host", "device-tq", "device-o1", "device-graph", "device-o2", "device-embedding",
        "device-zoo", "device-pmc", "device-colocate", "tests-gpu", "tests-zoo", "native"]
# The order they run in with --bench: the core path (the native programs, the device paths, the GPU
# tests, the seed's benchmarks, then the host path), then the capabilities' sections (issue 50), by
# stage and then in the capabilities' order (models, colocation, embedding, bench)
RUN_ORDER = ["build", "machine", "native", "device-tq", "device-o1", "device-graph", "device-o2", "tests-gpu",
             "bench-orchestration", "bench-e2e", "bench-batching", "auth", "host",
             "device-zoo", "device-pmc", "device-colocate", "device-embedding", "tests-zoo", "bench-tune",
             "bench-embedding"]
HAS_KERNELS = splitrpc.features()["cuda"]
HAS_AUTH = splitrpc._native.auth.available()  # the auth section needs libsodium (else it skips, saying why)


def check(args, env=None, cwd=None, timeout=600):
    """`splitrpc check ARGS` in a child; (exit status, stdout, stderr)."""
    env = dict(env if env is not None else os.environ)
    r = subprocess.run(splitrpc_cmd("check", *args), capture_output=True, text=True, timeout=timeout, env=env,
                       cwd=cwd)
    return r.returncode, r.stdout, r.stderr


def verdicts(out_dir) -> dict:
    with open(os.path.join(out_dir, "check.json")) as f:
        return {n: r["verdict"] for n, r in json.load(f)["sections"].items()}


def doc(out_dir) -> dict:
    with open(os.path.join(out_dir, "check.json")) as f:
        return json.load(f)


# ------------------------------------------------------------------ this machine: no GPU


def test_without_a_gpu_exits_0_and_says_no_gpu(tmp_path, run_env):
    out = tmp_path / "out"
    rc, so, se = check(["--out", str(out)], **run_env)
    assert rc == 0, so + se
    assert "no GPU" in so
    for name in CORE:  # every section named, with its verdict, as it ends
        assert re.search(rf"^\s+{re.escape(name)}\s+(PASSED|SKIPPED)\b", so, re.M), (name, so)
    v = verdicts(out)
    assert {v[n] for n in ("build", "machine", "host")} == {"passed"}
    assert v["auth"] == ("passed" if HAS_AUTH else "skipped"), v
    assert all(v[n] == "skipped" for n in CORE[4:]), v
    d = doc(out)
    assert all("no GPU" in d["sections"][n]["why"] for n in CORE[4:13]), d["sections"]
    summary = (out / "summary.md").read_text().splitlines()
    assert summary[0].startswith("Device: none: no GPU (")  # the first line says which device ran it
    assert summary[2].startswith(f"# splitrpc check: {3 + HAS_AUTH} passed, 0 failed, {11 + (not HAS_AUTH)} skipped")
    assert sorted(os.listdir(out)) == ["check.json", "summary.md"]  # no benchmark, no plot


# ------------------------------------------------------------------ the emulated device


@pytest.fixture(scope="module")
def emu_env(emulated_gpu_build):
    env = emulated_gpu_env(emulated_gpu_build)
    env.pop("FAKE_CUDA_INJECT", None)
    return env


@pytest.mark.parametrize("inject,section,why", [
    ("break_mapping=2", "device-tq", "mirror"),          # the double mapping shows other pages
    ("fail_launches=1", "device-o2", "cuLaunchKernel"),  # the persistent kernel cannot start
    ("fail_copies=1:1", "device-o1", "InternalError"),   # a reply copy fails: that call answers INTERNAL
])
def test_an_injected_driver_error_fails_its_section(tmp_path, emu_env, inject, section, why):
    if section == "device-o2" and not HAS_KERNELS:
        pytest.skip("O2 needs the kernels compiled in (nvcc at build time)")
    out = tmp_path / "out"
    rc, so, se = check(["--only", f"{section},host", "--out", str(out)], env={**emu_env, "FAKE_CUDA_INJECT": inject},
                       cwd=tmp_path)
    assert rc == 1, so + se
    assert f"FAILED: {section} " in se, se  # the exit names it
    v = verdicts(out)
    assert v == {"build": "passed", "machine": "passed", "host": "passed", section: "failed"}, v
    assert why in doc(out)["sections"][section]["why"], doc(out)["sections"][section]
    assert f"| {section} | FAILED |" in (out / "summary.md").read_text()


# ------------------------------------------------------------------ the runner


@pytest.fixture
def sections_env(monkeypatch):
    """Children that can import tests/check_sections.py."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    return {s.name: s for s in check_sections.SECTIONS}


def test_runner_verdicts_crash_hang_and_exit(sections_env):
    s = sections_env
    lines = []
    res = runner.run([s[n] for n in ("t-pass", "t-fail", "t-skip", "t-partial", "t-raise", "t-crash", "t-hang",
                                     "t-exit-hang")],
                     Context(device="cuda:7", seed=5), cap_s=8, progress=lambda m, **kw: lines.append(m))
    v = {n: (r["verdict"], r.get("why", "")) for n, r in res.items()}
    assert v["t-pass"] == ("passed", "") and res["t-pass"]["summary"] == "fine on cuda:7"
    assert res["t-pass"]["facts"] == {"seed": 5}  # the context travels to the child
    assert v["t-fail"] == ("failed", "the reply was wrong")
    assert v["t-skip"] == ("skipped", "no such hardware here")
    assert v["t-partial"] == ("failed", "one cell broke")  # and what it measured is kept for the report
    assert res["t-partial"]["markdown"] == ["| a | 1.0 |"] and res["t-partial"]["facts"] == {"rows": 2}
    assert v["t-raise"][0] == "failed" and v["t-raise"][1].startswith("KeyError: 'missing' (at check_sections.py:")
    assert "some output before the error" in res["t-raise"]["output_tail"]
    assert v["t-crash"] == ("failed", f"crashed: {signal.SIGSEGV.name}")
    assert v["t-hang"] == ("failed", "no verdict within its own cap of 8 s (a hang that no deadline of its own "
                                     "caught, or a cap too small for this machine); it had noted nothing finished")
    assert res["t-hang"]["seconds"] < 14
    assert v["t-exit-hang"][0] == "failed" and "did not exit (its cap)" in v["t-exit-hang"][1]
    assert sum(1 for ln in lines if ln.startswith("[")) == 8  # a line as each starts
    assert lines[0].startswith("plan: 8 sections, no budget")  # the plan before anything runs


def test_cut_is_the_budget_s_and_says_what_finished_a_hang_past_its_own_cap_fails(sections_env):
    s = sections_env
    quiet = {"progress": lambda *a, **k: None}
    # the budget leaves it 6 s of its 60 s cap: cut, with the parts it noted done
    res = runner.run([s["t-progress-hang"]], Context(), budget_s=6, **quiet)["t-progress-hang"]
    assert res["verdict"] == "cut" and res["finished"] == ["cell a", "cell b"], res
    assert res["why"].endswith("(what was left of the check's 6 s budget) ran out before it finished; it had finished: "
                               "cell a; cell b"), res["why"]
    # its own cap (no budget): a hang, failed, still saying what it finished
    res = runner.run([s["t-progress-hang"], s["t-failing-hang"], s["t-cut"]], Context(), cap_s=6, **quiet)
    v = {n: (r["verdict"], r.get("why", "")) for n, r in res.items()}
    assert v["t-progress-hang"][0] == "failed" and v["t-progress-hang"][1].endswith("it had finished: cell a; cell b")
    assert v["t-failing-hang"][0] == "failed"  # the error it noted first: its teardown then hung
    assert v["t-failing-hang"][1].startswith("the reply was wrong; then it did not end within 6 s (its cap)")
    assert v["t-cut"] == ("cut", "too little time for cell c")  # a section may cut itself (bench-tune's search)
    assert res["t-cut"]["facts"] == {"cells": 2}  # what it finished, kept
    assert runner.counts(res) == {"passed": 0, "failed": 2, "skipped": 0, "cut": 1}
    assert runner.failed_names(res) == ["t-progress-hang", "t-failing-hang"]  # cut does not fail the check


def test_a_check_stopped_from_outside_kills_its_section_and_still_reports(tmp_path, sections_env):
    """SIGTERM (a `timeout` around the check, the device tool's limit): the running section's
    processes are killed, it and the rest are cut, and the results come back."""
    code = ("import json, sys\n"
            "from splitrpc.check import Context, runner\n"
            "import check_sections as cs\n"
            "runner.install_stop_handlers()\n"
            "secs = {x.name: x for x in cs.SECTIONS}\n"
            "res = runner.run([secs['t-pass'], secs['t-hang'], secs['t-fail']], Context(), progress=print)\n"
            f"json.dump(res, open({str(tmp_path / 'res.json')!r}, 'w'))\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=TESTS,
                         env={**os.environ, "PYTHONPATH": TESTS})
    for ln in p.stdout:
        if ln.startswith("[2/3] t-hang"):  # the hanging section has started
            break
    time.sleep(1.0)
    p.send_signal(signal.SIGTERM)
    out = p.communicate(timeout=30)[0]
    assert p.returncode == 0, out
    res = json.loads((tmp_path / "res.json").read_text())
    assert res["t-pass"]["verdict"] == "passed"
    assert res["t-hang"] == {**res["t-hang"], "verdict": "cut"} and "stopped from outside (SIGTERM) while it ran" \
        in res["t-hang"]["why"], res["t-hang"]
    assert res["t-fail"]["verdict"] == "cut" and "not started" in res["t-fail"]["why"]
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "check_sections t-hang" not in ps  # nothing of the killed section is left


@pytest.mark.parametrize("fault,sections,want", [
    ("stream-hang", "device-tq,native", {"device-tq": "waiting for the mirror self-test's kernels",
                                         "native": "had not finished"}),
    ("launch-error", "device-tq,device-o1", {"device-tq": "CUDA_ERROR_LAUNCH_FAILED",
                                             "device-o1": "CUDA_ERROR_LAUNCH_FAILED"}),
])
def test_each_emulated_fault_fails_the_sections_it_hits_saying_why(tmp_path, emu_env, emulated_gpu_build, fault,
                                                                   sections, want):
    if not HAS_KERNELS:
        pytest.skip("the device sections need the kernels compiled in (nvcc at build time)")
    out = tmp_path / "out"
    # --cap-s 21: a hung native program waits about (21 - MARGIN_S) / 2 = 5.5 s (a program is started
    # with 5 s at least) instead of native's own cap's 10 s: the same hang, caught the same way
    rc, so, se = check(["--only", sections, "--out", str(out), "--native", str(emulated_gpu_build), "--cap-s", "21"],
                       env={**emu_env, "SPLITRPC_EMULATED_FAULT": fault}, cwd=tmp_path)
    assert rc == 1, so + se
    d = doc(out)["sections"]
    for name, text in want.items():
        assert d[name]["verdict"] == "failed" and text in d[name]["why"], (name, d[name])


def test_runner_budget_cuts_what_does_not_fit(sections_env):
    s = sections_env
    lines: list = []
    res = runner.run([s["t-hang"], s["t-pass"]], Context(), budget_s=8, progress=lambda m, **k: lines.append(m))
    assert res["t-hang"]["verdict"] == "cut" and 5 <= res["t-hang"]["cap_s"] <= 8
    assert "what was left of the check's 8 s budget" in res["t-hang"]["why"]
    assert res["t-pass"]["verdict"] == "cut" and "not started: the check's budget (8 s) was spent" in res["t-pass"]["why"]
    # the plan: each cap and the running total against the budget
    assert lines[0] == "plan: 2 sections, budget 8 s"
    assert re.search(r"t-hang\s+capability\s+60\s+60\s+may be cut", lines[2]), lines
    assert re.search(r"t-pass\s+capability\s+60\s+120\s+past the budget at full caps", lines[3]), lines


def test_the_plan_adds_up_the_caps_against_the_budget(sections_env):
    s = sections_env
    secs = [s["t-pass"], s["t-fail"], s["t-skip"]]
    rows = runner.plan(secs, cap_s=10, budget_s=25)
    assert [(r["total_s"], r["fit"]) for r in rows] == [(10, "fits"), (20, "fits"), (30, "may be cut")]
    assert [r["fit"] for r in runner.plan(secs, cap_s=10, budget_s=16)] == ["fits", "may be cut",
                                                                             "past the budget at full caps"]
    assert {r["fit"] for r in runner.plan(secs)} == {"fits"}  # no budget


def test_a_child_that_does_not_exit_after_its_verdict_is_killed_soon(sections_env, monkeypatch):
    monkeypatch.setattr(runner, "EXIT_GRACE_S", 3.0)  # 15 s in a check: the same rule, sooner
    res = runner.run([sections_env["t-exit-hang"]], Context(), cap_s=60, progress=lambda *a, **k: None)
    r = res["t-exit-hang"]
    assert r["verdict"] == "failed" and "did not exit (3 s after its verdict)" in r["why"]
    assert r["seconds"] < 3.0 + 10  # not the whole 60 s cap


PYTEST_FAILED = """..F.s
=========================== short test summary info ============================
SKIPPED [1] tests/test_gpu.py:135: needs a CUDA GPU and CuPy
FAILED tests/test_gpu.py::test_gpu_callback_error_answers_internal - AssertionError: boom
1 failed, 3 passed, 1 skipped in 2.10s
"""
PYTEST_PASSED = """....ss
SKIPPED [2] tests/test_gpu.py:88: checks the behaviour without a GPU
4 passed, 2 skipped in 1.00s
"""


def test_pytest_sections_name_what_failed_and_what_skipped():
    from splitrpc.check import suites

    assert suites._counts(PYTEST_FAILED) == {"failed": 1, "passed": 3, "skipped": 1}
    with pytest.raises(Failed, match="test_gpu_callback_error_answers_internal - AssertionError: boom"):
        suites._verdict(1, PYTEST_FAILED, "t", gpu_skips_fail=False)
    ok = suites._verdict(0, PYTEST_PASSED, "t", gpu_skips_fail=True)  # not a GPU skip: passes
    assert ok.facts["counts"] == {"passed": 4, "skipped": 2} and ok.summary.endswith("t: 4 passed, 2 skipped")
    gpu_skip = PYTEST_FAILED.replace("FAILED tests", "x").replace("1 failed, ", "")
    with pytest.raises(Failed, match="GPU test\\(s\\) skipped on a machine with a usable GPU"):
        suites._verdict(0, gpu_skip, "t", gpu_skips_fail=True)
    with pytest.raises(check_section_skipped, match="no test ran"):
        suites._verdict(0, "1 skipped in 0.1s\n", "t", gpu_skips_fail=False)


def test_merge_keeps_the_earlier_sections_and_marks_the_rerun():
    before = {"sections": {"host": {"verdict": "failed", "why": "x"}, "device-o2": {"verdict": "passed"}}}
    merged = runner.merge(before, {"host": {"verdict": "passed", "summary": "ok"}})
    assert merged == {"host": {"verdict": "passed", "summary": "ok", "rerun": True}, "device-o2": {"verdict": "passed"}}


def test_only_and_merge_from_the_command_line(tmp_path, run_env):
    prev = tmp_path / "prev.json"
    prev.write_text(json.dumps({"sections": {"host": {"verdict": "failed", "why": "earlier", "seconds": 1},
                                             "device-o2": {"verdict": "failed", "why": "a real GPU said so",
                                                           "seconds": 2}}}))
    out = tmp_path / "out"
    rc, so, se = check(["--only", "host", "--merge", str(prev), "--out", str(out)], **run_env)
    d = doc(out)
    assert d["sections"]["host"]["verdict"] == "passed" and d["sections"]["host"]["rerun"]
    assert d["sections"]["device-o2"] == {"verdict": "failed", "why": "a real GPU said so", "seconds": 2}
    assert rc == 1 and "FAILED: device-o2" in se  # what still fails after the merge
    assert "| host | PASSED (rerun) |" in (out / "summary.md").read_text()


@pytest.mark.parametrize("args,msg", [(["--only", "host,nosuch"], "unknown section(s) nosuch"),
                                      (["--device", "gpu0"], "device must be"),
                                      (["--bench-calls", "0"], "--bench-calls must be at least 1"),
                                      (["--merge", "/no/such.json"], "no such file")])
def test_bad_arguments_exit_2(args, msg, run_env):
    rc, so, se = check(args, **run_env)
    assert rc == 2 and msg in se, se


def test_list_names_the_core_path_first_then_the_capabilities(run_env):
    rc, so, se = check(["--list"], **run_env)
    assert rc == 0, se
    names = [ln.split()[0] for ln in so.splitlines()]
    # the benchmarks come from the bench capability (bench/suites/gpu_check.py): the seed's three
    # with the core, the tuning and embedding ones with the capabilities
    assert names == RUN_ORDER
    tiers = {s.name: s.tier for s in registry.all_sections()[0]}
    assert [tiers[n] for n in RUN_ORDER] == ["core"] * 13 + ["capability"] * 7


# ------------------------------------------------------------------ sections, plug-ins, report


class _FakeGPU:
    """splitrpc.gpu as the leak check sees it: free memory and holdings that a body changes."""

    def __init__(self):
        self.free, self.held = 10 << 30, 0

    def install(self, monkeypatch):
        monkeypatch.setattr(check_device.gpu, "device_info", lambda o: {"granularity": 2 << 20})
        monkeypatch.setattr(check_device.gpu, "mem_info", lambda o: (self.free, 80 << 30))
        monkeypatch.setattr(check_device.gpu, "live", lambda: {"dtqs": self.held, "streams": 0})
        monkeypatch.setattr(check_device, "driver_emulated", lambda: False)
        monkeypatch.setattr(check_device, "release", lambda: None)


@pytest.mark.parametrize("case,fails", [("clean", None), ("caches once", None), ("small drops", None),
                                        ("leaks a queue a run", "device memory fell after every run"),
                                        ("keeps a queue", "dtqs went 0 -> 1 -> 1 -> 1"),
                                        ("keeps a queue from the second run", "dtqs went 0 -> 0 -> 1 -> 1")])
def test_the_leak_check_tells_a_leak_from_a_cache(monkeypatch, case, fails):
    g, runs = _FakeGPU(), []
    g.install(monkeypatch)

    def body():
        runs.append(1)
        if case == "caches once" and len(runs) == 1:
            g.free -= 64 << 20     # module loads, a library's workspace: the first run only
        if case == "small drops":
            g.free -= 1 << 20      # less than a granule each time
        if case == "leaks a queue a run":
            g.free -= 2 << 20
        if (case == "keeps a queue" and len(runs) == 1) or (case == "keeps a queue from the second run"
                                                            and len(runs) == 2):
            g.held += 1
        return len(runs)

    acct = check_device.Accounting(0)
    if fails is None:
        out, facts = acct.repeated(body, "x")
        assert out == 3 and len(facts["free_drops"]) == 2
    else:
        with pytest.raises(Failed, match=fails):
            acct.repeated(body, "x")


def test_section_names_are_checked():
    with pytest.raises(ValueError, match="lower-case"):
        Section("Bad Name", "x", check_sections.passes)
    assert Section("ok-1", "x", check_sections.passes).module == "check_sections"


def test_a_broken_plugin_is_reported_not_raised(monkeypatch):
    """A capability's check sections: a good one's taken; one whose check_sections() raises, or
    gives something other than Sections, fails its own line; capabilities that cannot be loaded
    at all, one line."""
    from splitrpc import plugins

    class Good(plugins.Capability):
        name = "good"

        def check_sections(self):
            return check_sections.SECTIONS

    class Missing(plugins.Capability):
        name = "missing"

        def check_sections(self):
            import no_such_module_x  # noqa: F401

    class Wrong(plugins.Capability):
        name = "wrong"

        def check_sections(self):
            return [check_sections.passes]

    monkeypatch.setattr(plugins, "capabilities", lambda: [Good(), Missing(), Wrong(), plugins.Capability()])
    found, broken = registry.plugin_sections()
    assert [s.name for s in found] == [s.name for s in check_sections.SECTIONS]
    assert [b[0] for b in broken] == ["missing", "wrong"]
    assert "ModuleNotFoundError" in broken[0][1] and "TypeError" in broken[1][1]

    def unloadable():
        raise plugins.CapabilityError("SPLITRPC_PLUGINS: cannot load the capability 'x:y'")

    monkeypatch.setattr(plugins, "capabilities", unloadable)
    assert registry.plugin_sections() == ([], [("capabilities", "SPLITRPC_PLUGINS: cannot load the capability 'x:y'")])


@pytest.mark.parametrize("archs,cc,ok", [("sm_80 sm_90 compute_90", 90, True), ("sm_80 sm_90 compute_90", 100, True),
                                         ("sm_80 compute_80", 89, True), ("sm_90 compute_90", 80, False),
                                         ("sm_80", 90, False), ("sm_90a compute_90a", 90, True), ("", 90, False)])
def test_which_gpus_the_kernels_load_on(archs, cc, ok):
    assert _cc_has_code(archs, cc) is ok


def test_gpudirect_needs_a_nic_a_module_and_the_gpu(monkeypatch):
    from splitrpc.check import facts

    monkeypatch.setattr(facts, "_rdma_nics", lambda: [])
    monkeypatch.setattr(facts, "_peer_memory_module", lambda: None)
    assert gpudirect({"gpudirect_rdma": 1}) == {**gpudirect({"gpudirect_rdma": 1}), "capable": False}
    assert "no RDMA NIC" in gpudirect({"gpudirect_rdma": 1})["why"]
    monkeypatch.setattr(facts, "_rdma_nics", lambda: [{"name": "mlx5_0", "pci": "0000:17:00.0"}])
    assert "no peer-memory module" in gpudirect({"gpudirect_rdma": 1})["why"]
    monkeypatch.setattr(facts, "_peer_memory_module", lambda: "nvidia_peermem")
    assert gpudirect({"gpudirect_rdma": 0})["capable"] is False
    assert gpudirect({"gpudirect_rdma": 1})["capable"] is True


def test_report_puts_the_device_line_first_and_caps_the_plots(tmp_path):
    plot = {"name": "p", "title": "t", "ylabel": "y", "categories": ["a", "b"], "series": {"s": [1.0, None]}}
    sections = {"machine": {"verdict": "passed", "summary": "m", "facts": {"line": "Device: X (cuda:0)"},
                            "seconds": 0.1, "markdown": ["- facts"]},
                "b1": {"verdict": "passed", "summary": "ok", "seconds": 1, "plots": [dict(plot, name=f"p{i}")
                                                                                     for i in range(5)]},
                "f1": {"verdict": "failed", "why": "it | broke", "seconds": 2, "output_tail": "Traceback\nboom",
                       "markdown": ["| cell | 1.5 |"]},
                "s1": {"verdict": "skipped", "why": "no GPU", "seconds": 0}}
    d = {"date": "2026-11-26", "command": "splitrpc check", "version": "0", "wall_s": 3.0,
         "host": {"host": "h", "cpu": "c", "cpus": 2, "kernel": "k", "python": "3"}, "sections": sections}
    paths = check_report.write(str(tmp_path), d)
    assert len(paths) == 2 + check_report.MAX_PLOTS and all(os.path.getsize(p) > 0 for p in paths)
    md = (tmp_path / "summary.md").read_text().splitlines()
    assert md[0] == "Device: X (cuda:0)" and md[2] == "# splitrpc check: 2 passed, 1 failed, 1 skipped, 0 cut"
    assert "| f1 | FAILED | 2.0 | it \\| broke |" in md and "boom" in md and "| cell | 1.5 |" in md
    assert check_report.device_line({}) == "Device: not looked at (the machine section did not run)"


def test_python_m_splitrpc_check_is_the_same_command(run_env):
    r = subprocess.run([sys.executable, "-m", "splitrpc", "check", "--list"], capture_output=True, text=True,
                       timeout=120, **run_env)
    assert r.returncode == 0 and r.stdout.split()[0] == "build", r.stderr


def test_a_section_its_child_cannot_find_and_a_former_entry_point_are_reported(monkeypatch):
    """A capability's section missing from its module's SECTIONS (where the check's child looks)
    fails its capability's line at once; entry points of the former splitrpc.check group are named,
    not dropped in silence."""
    from importlib import metadata

    from splitrpc import plugins
    from splitrpc.check import Section

    class Adrift(plugins.Capability):
        name = "adrift"

        def check_sections(self):
            return [Section("t-elsewhere", "built on the fly", check_sections.passes)]

    monkeypatch.setattr(plugins, "capabilities", lambda: [Adrift()])
    old = [metadata.EntryPoint("legacy", "pkg.mod:SECTIONS", registry.FORMER_GROUP)]
    monkeypatch.setattr(metadata, "entry_points", lambda group=None: [e for e in old if e.group == group])
    found, broken = registry.plugin_sections()
    assert found == [] and [b[0] for b in broken] == [registry.FORMER_GROUP, "adrift"], broken
    assert "legacy" in broken[0][1] and "check_sections()" in broken[0][1]
    assert "'t-elsewhere' is not in check_sections.SECTIONS" in broken[1][1], broken[1]
