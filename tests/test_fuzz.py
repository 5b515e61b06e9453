"""The libFuzzer harness over the server's datagram path (native/fuzz/fuzz_datagrams.c), built with clang under ASan+UBSan and run for a bounded number of inputs from the seed corpus in tests/fuzz_corpus; skips, saying why, without clang's libFuzzer."""
import pathlib
import shutil
import subprocess
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUNS = 40000


def _clang() -> str | None:
    for name in ("clang", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14"):
        cc = shutil.which(name)
        if not cc:
            continue
        with tempfile.TemporaryDirectory() as d:
            src = pathlib.Path(d, "probe.c")
            src.write_text("int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n")
            r = subprocess.run([cc, "-fsanitize=fuzzer,address", str(src), "-o", str(pathlib.Path(d, "probe"))],
                               capture_output=True, text=True)
            if r.returncode == 0:
                return cc
    return None


def test_fuzz_datagram_path(tmp_path):
    cc = _clang()
    if cc is None:
        pytest.skip("no clang with libFuzzer (apt-get install clang-14 libclang-rt-14-dev, as .ci/run does)")
    cmake = shutil.which("cmake")
    build = tmp_path / "build"
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    cfg = subprocess.run([cmake, "-S", str(ROOT), "-B", str(build), *gen, f"-DCMAKE_C_COMPILER={cc}",
                          "-DSPLITRPC_FUZZ=ON", "-DSPLITRPC_PYTHON=OFF", "-DSPLITRPC_CUDA=OFF", "-DSPLITRPC_DPDK=OFF"],
                         capture_output=True, text=True)
    assert cfg.returncode == 0, cfg.stdout[-3000:] + cfg.stderr[-3000:]
    bld = subprocess.run([cmake, "--build", str(build), "-j", "2", "--target", "fuzz_datagrams"],
                         capture_output=True, text=True)
    assert bld.returncode == 0, bld.stdout[-3000:] + bld.stderr[-3000:]
    corpus = tmp_path / "corpus"  # a copy: the fuzzer adds what it finds, the repository's stays as is
    shutil.copytree(ROOT / "tests" / "fuzz_corpus", corpus)
    seeds = len(list(corpus.iterdir()))
    r = subprocess.run([str(build / "fuzz_datagrams"), f"-runs={RUNS}", "-seed=1", "-max_len=300000",
                        "-rss_limit_mb=2048", "-max_total_time=120", f"-artifact_prefix={tmp_path}/", str(corpus)],
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "ERROR: AddressSanitizer" not in out and "runtime error" not in out, out[-6000:]
    assert f"Done {RUNS} runs" in out, out[-3000:]
    assert seeds >= 10 and len(list(corpus.iterdir())) > seeds, "the fuzzer found no new coverage at all"
