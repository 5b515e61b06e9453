#!/usr/bin/env bash
# bench/gpu/run.sh: the whole GPU check on a bare device machine in one command: the carried wheels, splitrpc built with nvcc for this GPU's architecture (and the native test_gpu), then `splitrpc check --bench` into $OUT, each step timed, all inside a time budget.
#
#   bash bench/gpu/run.sh [splitrpc check options, e.g. --only device-o2 --merge bench/results/gpu/check.json]
#
# Environment: OUT (results folder; the device tool sets it), PYTHON (default python3: on the device,
# the image's Python 3.12 with torch, CuPy, numpy, rich), SPLITRPC_GPU_BUDGET_S (the whole
# script's seconds, default 420: 7 minutes), SPLITRPC_CUDA_ARCHS (else the GPU's compute capability
# from nvidia-smi, else 90), SPLITRPC_CHECK_EMULATED=1 (a dry run on a machine without a GPU: the
# tests' emulated driver and CuPy stand in, and every result says EMULATED).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$REPO/gpu-check-out}
PY=${PYTHON:-python3}
BUDGET=${SPLITRPC_GPU_BUDGET_S:-420}
WORK=${SPLITRPC_GPU_WORK:-/tmp/splitrpc-gpu}
SITE=$WORK/site        # splitrpc, installed here (pip --target): the image's own environment is left alone
DEPS=$WORK/deps        # the carried wheels (cffi, pycparser)
NATIVE=$WORK/native    # the native test programs' build tree
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/run.log") 2>&1
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
step() { echo "=== [$(elapsed) s] $*"; }
step "splitrpc GPU check in $REPO; results to $OUT; budget ${BUDGET} s; $(nproc) CPUs; $($PY --version 2>&1)"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>/dev/null \
  | sed 's/^/    nvidia-smi: /' || echo "    nvidia-smi: not here"

# 1. The Python packages the bare image lacks (bench/gpu/fetch_wheels.sh put them in .whl/).
export PYTHONPATH=$SITE:$DEPS${PYTHONPATH:+:$PYTHONPATH}
if $PY -c "import cffi, pycparser" 2>/dev/null; then
  step "cffi and pycparser are already importable: no wheels to install"
elif ls "$REPO"/.whl/*.whl >/dev/null 2>&1; then
  step "installing the carried wheels: $(cd "$REPO/.whl" && ls *.whl | tr '\n' ' ')"
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$DEPS" \
    "$REPO"/.whl/*.whl || { step "FAILED: the carried wheels did not install"; exit 3; }
else
  step "FAILED: no cffi here and no carried wheels: run bench/gpu/fetch_wheels.sh first and carry .whl"; exit 3
fi

if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

# 2. The GPU's architecture: its SASS (and PTX of it) is all the kernels need here.
ARCH=${SPLITRPC_CUDA_ARCHS:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')}
ARCH=${ARCH:-90}
step "kernels for sm_$ARCH (+ compute_$ARCH PTX)"
native_targets=(test_gpu)
if [ "${SPLITRPC_CHECK_EMULATED:-0}" = 1 ]; then
  native_targets+=(fake_cuda)
fi

# 3. The native test programs, built beside the package (no Python headers needed).
step "building the native test_gpu in the background"
( cmake -S "$REPO" -B "$NATIVE" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPLITRPC_TESTS=ON -DSPLITRPC_PYTHON=OFF \
    -DSPLITRPC_DPDK=OFF -DSPLITRPC_CUDA=ON "-DSPLITRPC_CUDA_ARCHS=$ARCH" >"$WORK/native-configure.log" 2>&1 \
  && cmake --build "$NATIVE" -j "$(nproc)" --target "${native_targets[@]}" >"$WORK/native-build.log" 2>&1 ) &
native_pid=$!

# 4. splitrpc itself, with nvcc, into $SITE.
step "building and installing splitrpc (pip, scikit-build-core, nvcc)"
if $PY -m pip install -q --no-deps --no-build-isolation --no-index --no-cache-dir --upgrade --target "$SITE" \
     -C "build-dir=$WORK/build" -C cmake.define.SPLITRPC_CUDA=ON -C cmake.define.SPLITRPC_DPDK=OFF \
     -C "cmake.define.SPLITRPC_CUDA_ARCHS=$ARCH" "$REPO" >"$WORK/build.log" 2>&1; then
  step "built and installed"
else
  step "the build FAILED; its last lines:"
  tail -25 "$WORK/build.log"
  prebuilt=$(ls "$REPO"/.whl/prebuilt/splitrpc-*.whl 2>/dev/null | head -1)
  if [ -n "$prebuilt" ]; then
    step "installing the prebuilt fallback $(basename "$prebuilt") (built by fetch_wheels.sh, kernels for sm_90)"
    $PY -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "$prebuilt" \
      || { step "FAILED: the fallback did not install either"; exit 4; }
  else
    exit 4
  fi
fi
if wait "$native_pid"; then
  step "native test_gpu built"
else
  step "the native build FAILED (the check reports its section skipped); last lines:"
  tail -15 "$WORK/native-build.log" "$WORK/native-configure.log" 2>/dev/null
fi

if [ "${SPLITRPC_CHECK_EMULATED:-0}" = 1 ]; then
  step "EMULATED dry run: the tests' libcuda.so.1 and CuPy stand in for a GPU"
  export LD_LIBRARY_PATH=$NATIVE/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PYTHONPATH=$REPO/tests/emu:$PYTHONPATH
fi

# 5. The check, from the repository root (its tests) through the installed command (which, unlike
# `python -m`, does not put the source folder first on the path).
left=$(( BUDGET - $(elapsed) - 15 ))
step "splitrpc check --bench (the check's budget: ${left} s)"
cd "$REPO"
PYTHONUNBUFFERED=1 $PY "$SITE/bin/splitrpc" check --bench --out "$OUT" --native "$NATIVE" --budget-s "$left" "$@"
rc=$?
step "done: splitrpc check exited $rc; files in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
exit $rc
