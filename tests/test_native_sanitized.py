"""Builds the native C test programs with ASan+UBSan and with TSan (CMake options) and runs them; the GPU ones again on the emulated driver (native/tests/fake_libcuda.c)."""
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


SANITIZERS = {"asan-ubsan": "-DSPLITRPC_SANITIZE=ON", "tsan": "-DSPLITRPC_TSAN=ON"}


@pytest.fixture(scope="module", params=list(SANITIZERS))
def sanitized_build(request, tmp_path_factory) -> pathlib.Path:
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.fail("cmake is needed for the native tests: pip install '.[test]' provides it")
    build = tmp_path_factory.mktemp(f"native-{request.param}")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    cfg = subprocess.run([cmake, "-S", str(ROOT), "-B", str(build), *gen, "-DCMAKE_BUILD_TYPE=Debug",
                          "-DSPLITRPC_TESTS=ON", SANITIZERS[request.param], "-DSPLITRPC_PYTHON=OFF",
                          "-DSPLITRPC_CUDA=AUTO", "-DSPLITRPC_DPDK=OFF"], capture_output=True, text=True)
    assert cfg.returncode == 0, cfg.stdout[-4000:] + cfg.stderr[-4000:]
    bld = subprocess.run([cmake, "--build", str(build), "-j", "2"], capture_output=True, text=True)
    assert bld.returncode == 0, bld.stdout[-4000:] + bld.stderr[-4000:]
    return build


def _run_sanitized(exe, env_extra=None):
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1",
               TSAN_OPTIONS="halt_on_error=1")
    env.update(env_extra or {})
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    for marker in ("ERROR: AddressSanitizer", "runtime error", "WARNING: ThreadSanitizer"):
        assert marker not in out, out[-6000:]
    last = [line for line in r.stdout.splitlines() if line.strip()][-1]
    assert last.endswith(" 0 failed") and not last.startswith("0 passed"), last
    return r


@pytest.mark.parametrize("program", ["test_gpu", "test_fake_cuda"])
def test_gpu_programs_on_the_emulated_driver_under_sanitizers(sanitized_build, program):
    """EMULATED: the GPU half of test_gpu (device Tensor Queues by virtual memory management,
    copies through the double mapping, pinned memory, completion flags) and the emulated driver's
    own checks, with the emulated libcuda.so.1 of this build (instrumented as well). Where nvcc
    exists the kernels are compiled in, so the mirror self-test and O2 run on the emulated
    kernels' threads under the sanitizers too."""
    r = _run_sanitized(sanitized_build / program, {"LD_LIBRARY_PATH": str(sanitized_build / "fake_cuda")})
    if program == "test_gpu":
        assert "GPU 0: fake GPU" in r.stdout, r.stdout[-2000:]


@pytest.mark.parametrize("program", ["test_core", "test_engine", "test_defer", "test_gpu", "test_frame", "test_faults",
                                     "test_reply", "test_flow", "test_cost", "test_sched", "test_gnn",
                                     "test_embed", "test_auth", "test_session", "test_sessions",
                                     "test_client_sessions"])
def test_native_program_under_sanitizers(sanitized_build, program):
    _run_sanitized(sanitized_build / program)


def _pynacl_libsodium_env():
    """What a C test program needs to load PyNaCl's libsodium (1.0.19 on: AEGIS-128L) in place of the
    system's: its path, and libpython preloaded (PyNaCl's extension module leaves Python's symbols
    to the process). None when PyNaCl has none new enough."""
    import sysconfig

    from splitrpc._native import sodium_pick
    lib = sodium_pick.pynacl_library()
    libpython = pathlib.Path(sysconfig.get_config_var("LIBDIR") or "") / (sysconfig.get_config_var("LDLIBRARY") or "")
    if not lib or not libpython.is_file():
        return None
    return {"SPLITRPC_LIBSODIUM": lib, "LD_PRELOAD": str(libpython),
            "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:verify_asan_link_order=0"}


@pytest.mark.parametrize("program", ["test_session", "test_client_sessions"])
def test_session_programs_with_aegis_under_sanitizers(sanitized_build, program):
    """The session programs again on PyNaCl's newer libsodium, so that the AEGIS-128L suite's code
    (the page's example byte for byte, its split tag, a client's sessions under it) runs under
    ASan+UBSan and TSan too; the system's libsodium (1.0.18 on Debian 12) has no AEGIS-128L."""
    env = _pynacl_libsodium_env()
    if env is None:
        pytest.skip("PyNaCl carries no libsodium with AEGIS-128L here, or libpython is not a shared library")
    with open("/proc/cpuinfo") as f:
        if "aes" not in next((ln for ln in f if ln.startswith("flags")), "").split():
            pytest.skip("no AES-NI: AEGIS-128L is neither offered nor granted here")
    r = _run_sanitized(sanitized_build / program, env)
    if program == "test_session":
        assert "# AEGIS-128L available: the page's AEGIS example tested" in r.stdout, r.stdout[-2000:]
