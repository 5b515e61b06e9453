"""The GPU code paths on the emulated driver (native/tests/fake_libcuda.c, issue 21), in a build with the CUDA compiler where there is one (kernels compiled in): test_gpu's GPU half, the device Tensor Queue mirror self-test run by the emulated kernels, and the emulated driver's own checks. EMULATED: nothing here ran on a GPU."""
import os
import pathlib
import re
import subprocess
import sys

import pytest
from conftest import emulated_gpu_env

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def build(emulated_gpu_build) -> pathlib.Path:
    return emulated_gpu_build


def _run(exe, build) -> str:
    env = dict(os.environ, LD_LIBRARY_PATH=str(build / "fake_cuda"))
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    last = [ln for ln in r.stdout.splitlines() if ln.strip()][-1] if r.stdout.strip() else ""
    assert r.returncode == 0 and last.endswith(" 0 failed") and not last.startswith("0 passed"), \
        r.stdout[-4000:] + r.stderr[-4000:]
    return r.stdout


def test_gpu_half_of_test_gpu_on_the_emulated_driver(build):
    out = _run(build / "test_gpu", build)
    assert "GPU 0: fake GPU, VMM granularity 2097152 bytes" in out, out[-2000:]
    if "kernels compiled in" in out:  # the mirror self-test ran through the emulated kernels
        assert "FAIL" not in out
    else:
        print("no CUDA compiler here: the mirror self-test's kernels are not compiled in (checked: ENOTSUP)")


def test_emulated_driver_checks(build):
    _run(build / "test_fake_cuda", build)


def test_embedding_cache_on_the_emulated_driver(build):
    """EMULATED: the GPU embedding cache's host side (staging, launches, chunks, counts, a failed
    kernel) with the kernels' host implementations, against the host cache batch for batch."""
    out = _run(build / "test_embed_gpu", build)
    if "no GPU cache here" in out:
        pytest.fail("the kernels are not compiled in (no nvcc?): " + out[-500:])
    assert "EMULATED driver" in out, out[-1000:]


# tests/test_gpu.py's tests that need a GPU and CuPy, and tests/test_gpu_emulation_cases.py (the
# emulated driver's accounting and fault injection), run here on the emulated driver and the
# emulated cupy (tests/emu/cupy).
GPU_TESTS = ["tests/test_gpu.py::test_gpu_vecadd_many_batches_in_flight[o1]",
             "tests/test_gpu.py::test_gpu_vecadd_many_batches_in_flight[graph]",
             "tests/test_gpu.py::test_gpu_vecadd_many_batches_in_flight[o2]",
             "tests/test_gpu.py::test_gpu_callback_error_answers_internal",
             "tests/test_gpu_emulation_cases.py", "tests/test_embed_device.py"]
# the 4 of tests/test_gpu.py, and the emulation cases: O2 10,000 calls; O2 with its ring full; a failed O2
# doorbell; a failed add_function (a full device, no stream); out of device memory in a callback; per-call results from a device
# callback; a failed copy, each way; out of order across streams; a graceful stop with 8 batches in flight; a
# failed O2 launch; a failed launch in a callback (O1, graph); a failed stream store, then a failed wait; a driver
# without stream stores; a callback the graph capture refuses (cuBLAS), run as O1; a stream that makes no
# progress, its wait failed at its deadline
# ... and the embedding cache on the device (issue 36): 5 tests, lookup_device 3, DLRM on the device 2;
# ... and typed functions given CuPy arrays (issue 53): vecadd, and every built-in and zoo function.
GPU_TESTS_N = 4 + 18 + 5 + 3 + 2 + 2


def test_device_functions_on_the_emulated_gpu(build):
    """EMULATED: device functions (device="cuda:0") end to end through the server: requests staged
    into the device Tensor Queue by the driver's copies, the callback on the function's stream
    with cupy arrays over the device queue, outputs back and done words, batches in flight on an
    asynchronous stream, CUDA-graph capture and replay, the O2 persistent kernel (10,000 calls,
    then nothing left in the driver's accounting), a callback's error and a failed copy each way
    answered INTERNAL with the next call served, 8 batches in flight completing out of order
    across two functions' streams with each function's replies in order, a done word that cannot
    be stored on the stream (the worker waits instead; a failed wait answers INTERNAL), and a driver
    without stream stores (host functions signal instead; O2 refuses to start), O2 with its ring
    full, a failed O2 doorbell, a full device (at add_function, and in a callback), a stream that cannot be created at
    add_function, per-call results from a device callback, and a graceful stop with device batches
    in flight."""
    env = emulated_gpu_env(build)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *GPU_TESTS],
                       capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert re.search(rf"\b{GPU_TESTS_N} passed\b", out) and "skipped" not in out, out[-3000:]
