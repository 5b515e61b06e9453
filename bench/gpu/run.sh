#!/usr/bin/env bash
# bench/gpu/run.sh: the whole GPU check on a bare device machine in one command: the carried wheels, splitrpc built with nvcc for this GPU's architecture (and the native test_gpu, test_embed_gpu), then `splitrpc check --bench` into $OUT, each step timed, all inside a time budget.
#
#   bash bench/gpu/run.sh [splitrpc check options, e.g. --only device-o2 --merge bench/results/gpu/check.json]
#
# Environment: OUT (results folder; the device tool sets it), PYTHON (default python3: on the device,
# the image's Python 3.12 with torch, CuPy, numpy, rich), SPLITRPC_GPU_BUDGET_S (the whole
# script's seconds, default 300), SPLITRPC_CUDA_ARCHS (else the GPU's compute capability from
# nvidia-smi, else 90), SPLITRPC_GPU_PREBUILT=1 (install .whl/prebuilt instead of building),
# SPLITRPC_CHECK_EMULATED=1 (a dry run on a machine without a GPU: the tests' emulated driver and
# CuPy stand in, and every result says EMULATED).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$REPO/gpu-check-out}
PY=${PYTHON:-python3}
BUDGET=${SPLITRPC_GPU_BUDGET_S:-300}
MIN_CHECK_S=60         # the check gets at least this long, even after a slow build
WORK=${SPLITRPC_GPU_WORK:-/tmp/splitrpc-gpu}
SITE=$WORK/site        # splitrpc, installed here (pip --target): the image's own environment is left alone
DEPS=$WORK/deps        # the carried wheels (cffi, pycparser; rocksdict)
NATIVE=$WORK/native    # the native test programs' build tree
mkdir -p "$OUT" "$WORK"
if [ -z "${_SPLITRPC_GPU_LOGGED:-}" ]; then  # everything also into $OUT/run.log; the pipe ends when both do
  _SPLITRPC_GPU_LOGGED=1 bash "$0" "$@" 2>&1 | tee -a "$OUT/run.log"
  exit "${PIPESTATUS[0]}"
fi
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
step() { echo "=== [$(elapsed) s] $*"; }
native_pid=""
quit() { [ -n "$native_pid" ] && kill "$native_pid" 2>/dev/null; exit "$1"; }

step "splitrpc GPU check in $REPO; results to $OUT; budget ${BUDGET} s; $(nproc) CPUs"
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
pyh=$($PY -c "import os, sysconfig; print(int(os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))))" 2>/dev/null || echo 0)
echo "    python: $($PY --version 2>&1) ($(command -v "$PY")), Python.h: $([ "$pyh" = 1 ] && echo yes || echo NO)"
echo "    cmake: $(cmake --version 2>/dev/null | head -1 || echo none); ninja: $(ninja --version 2>/dev/null || echo none)"
echo "    nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo none); cc: $(cc --version 2>/dev/null | head -1 || echo none)"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>/dev/null \
  | sed 's/^/    nvidia-smi: /' || echo "    nvidia-smi: not here"

# 1. The Python packages the bare image lacks (bench/gpu/fetch_wheels.sh put them in .whl/).
export PYTHONPATH=$SITE:$DEPS${PYTHONPATH:+:$PYTHONPATH}
if $PY -c "import cffi, pycparser" 2>/dev/null; then
  step "cffi and pycparser are already importable: their wheels are not installed"
elif ls "$REPO"/.whl/cffi-*.whl "$REPO"/.whl/pycparser-*.whl >/dev/null 2>&1; then
  step "installing the carried wheels: $(cd "$REPO/.whl" && ls ./cffi-*.whl ./pycparser-*.whl | tr '\n' ' ')"
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$DEPS" \
    "$REPO"/.whl/cffi-*.whl "$REPO"/.whl/pycparser-*.whl || { step "FAILED: the carried wheels did not install"; quit 3; }
else
  step "FAILED: no cffi here and no carried wheels: run bench/gpu/fetch_wheels.sh first and carry .whl"; quit 3
fi
# rocksdict, for the bench-embedding section alone: optional (the section skips without it)
if ! $PY -c "import rocksdict" 2>/dev/null && ls "$REPO"/.whl/rocksdict-*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$DEPS" \
    "$REPO"/.whl/rocksdict-*.whl && step "rocksdict installed (bench-embedding)" \
    || step "rocksdict did not install: the bench-embedding section will skip"
fi

# 2. The GPU's architecture: its SASS (and PTX of it) is all the kernels need here.
ARCH=${SPLITRPC_CUDA_ARCHS:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')}
if ! [[ "$ARCH" =~ ^[0-9]+[a-z]?$ ]]; then
  [ -n "$ARCH" ] && echo "    no usable compute capability from nvidia-smi ('$ARCH'): 90"
  ARCH=90
fi
step "kernels for sm_$ARCH (+ compute_$ARCH PTX)"
native_targets=(test_gpu test_embed_gpu)
if [ "${SPLITRPC_CHECK_EMULATED:-0}" = 1 ]; then
  native_targets+=(fake_cuda)
fi

# 3. The native test programs, built beside the package (no Python headers needed).
step "building the native test_gpu and test_embed_gpu in the background"
( cmake -S "$REPO" -B "$NATIVE" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPLITRPC_TESTS=ON -DSPLITRPC_PYTHON=OFF \
    -DSPLITRPC_DPDK=OFF -DSPLITRPC_CUDA=ON "-DSPLITRPC_CUDA_ARCHS=$ARCH" >"$WORK/native-configure.log" 2>&1 \
  && cmake --build "$NATIVE" -j "$(nproc)" --target "${native_targets[@]}" >"$WORK/native-build.log" 2>&1 ) &
native_pid=$!

# 4. splitrpc itself, with nvcc, into $SITE; else the wheel fetch_wheels.sh built (cp312, sm_90).
install_prebuilt() {
  local prebuilt
  prebuilt=$(ls "$REPO"/.whl/prebuilt/splitrpc-*.whl 2>/dev/null | head -1)
  if [ -z "$prebuilt" ]; then
    step "FAILED: no prebuilt fallback in .whl/prebuilt either"; quit 4
  fi
  local want have
  want=$(cat "$REPO/.whl/prebuilt/SOURCES.sha256" 2>/dev/null)
  have=$(cd "$REPO" && sha256sum $(cat .whl/prebuilt/SOURCES 2>/dev/null) 2>/dev/null | sha256sum | cut -c1-16)
  if [ -n "$want" ] && [ "$want" = "$have" ]; then
    step "installing the prebuilt fallback $(basename "$prebuilt"): built from these very sources"
  else
    step "installing the prebuilt fallback $(basename "$prebuilt"): WARNING, built from other sources than this tree's ($want, here $have)"
  fi
  $PY -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "$prebuilt" \
    || { step "FAILED: the fallback did not install either"; quit 4; }
}
if [ "${SPLITRPC_GPU_PREBUILT:-0}" = 1 ]; then
  step "SPLITRPC_GPU_PREBUILT=1: no build here"
  install_prebuilt
elif [ "$pyh" != 1 ]; then
  step "no Python.h for $PY: the extension cannot be built here"
  install_prebuilt
else
  step "building and installing splitrpc (pip, scikit-build-core, nvcc)"
  if $PY -m pip install -q --no-deps --no-build-isolation --no-index --no-cache-dir --upgrade --target "$SITE" \
       -C "build-dir=$WORK/build" -C cmake.define.SPLITRPC_CUDA=ON -C cmake.define.SPLITRPC_DPDK=OFF \
       -C "cmake.define.SPLITRPC_CUDA_ARCHS=$ARCH" "$REPO" >"$WORK/build.log" 2>&1; then
    step "built and installed"
  else
    step "the build FAILED; its last lines:"
    tail -25 "$WORK/build.log"
    install_prebuilt
  fi
fi
if wait "$native_pid"; then
  step "native test_gpu and test_embed_gpu built"
else
  step "the native build FAILED (the check reports its section skipped); last lines:"
  tail -15 "$WORK/native-build.log" "$WORK/native-configure.log" 2>/dev/null
fi
native_pid=""

if [ "${SPLITRPC_CHECK_EMULATED:-0}" = 1 ]; then
  step "EMULATED dry run: the tests' libcuda.so.1 and CuPy stand in for a GPU"
  export LD_LIBRARY_PATH=$NATIVE/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PYTHONPATH=$REPO/tests/emu:$PYTHONPATH
fi

# 5. The check, from the repository root (its tests) through the installed command (which, unlike
# `python -m`, does not put the source folder first on the path).
left=$(( BUDGET - $(elapsed) - 10 ))
if [ "$left" -lt "$MIN_CHECK_S" ]; then left=$MIN_CHECK_S; fi
step "splitrpc check --bench (the check's budget: ${left} s)"
cd "$REPO" || quit 5
PYTHONUNBUFFERED=1 $PY "$SITE/bin/splitrpc" check --bench --out "$OUT" --native "$NATIVE" --budget-s "$left" "$@"
rc=$?
step "done: splitrpc check exited $rc; files in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
exit $rc
