#!/usr/bin/env bash
# bench/gpu/run.sh: the whole GPU check on a bare device machine in one command: the carried wheels, splitrpc built with nvcc for this GPU's architecture (and the native test_gpu, test_embed_gpu), then `splitrpc check --bench` into $OUT, each step timed, all inside a time budget that the script keeps, however it ends (a report comes back).
#
#   bash bench/gpu/run.sh [splitrpc check options, e.g. --only device-o2 --merge bench/results/gpu/check.json]
#   bash bench/gpu/run.sh --preflight     (HERE, before a device call: refuses what would waste device time)
#
# Environment: OUT (results folder; the device tool sets it), PYTHON (default python3: on the device,
# the image's Python 3.12 with torch, CuPy, numpy, rich), SPLITRPC_GPU_BUDGET_S (the whole script's
# seconds, the builds included; default 400: a first call's, see bench/gpu/README.md),
# SPLITRPC_CUDA_ARCHS (else the GPU's compute capability from nvidia-smi, else 90),
# SPLITRPC_GPU_PREBUILT=1 (install .whl/prebuilt instead of building), SPLITRPC_CHECK_EMULATED=1 (a
# dry run on a machine without a GPU: the tests' emulated driver and CuPy stand in, and every result
# says EMULATED), SPLITRPC_EMULATED_FAULT=o2-hang|stream-hang|launch-error (with the dry run: the
# emulated driver fails that way, to show each is reported), SPLITRPC_GPU_WORK (build folder, default
# /tmp/splitrpc-gpu: a second run there builds incrementally).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$REPO/gpu-check-out}
PY=${PYTHON:-python3}
BUDGET=${SPLITRPC_GPU_BUDGET_S:-400}
DEVICE_PY=3.12         # the device machine's Python (the device tool's KINDS.md): the prebuilt wheel's
CFFI_PYS="3.10 3.11 3.12 3.13"  # fetch_wheels.sh carries cffi for each (the device's Python may change)
REPORT_S=10            # kept back from the check's budget: its report, the script's last lines
WORK=${SPLITRPC_GPU_WORK:-/tmp/splitrpc-gpu}
SITE=$WORK/site        # splitrpc, installed here (pip --target): the image's own environment is left alone
DEPS=$WORK/deps        # the carried wheels (cffi, pycparser; rocksdict)
NATIVE=$WORK/native    # the native test programs' build tree

# The hash of the sources the prebuilt wheel was built from (.whl/prebuilt/SOURCES lists them), as
# they are in this tree: equal to .whl/prebuilt/SOURCES.sha256 when the wheel is of these sources.
sources_hash() {
  [ -f "$REPO/.whl/prebuilt/SOURCES" ] || { echo none; return; }
  (cd "$REPO" && sha256sum $(cat .whl/prebuilt/SOURCES) 2>/dev/null </dev/null | sha256sum | cut -c1-16)
}

# --preflight, here: what the device run needs from .whl, before any device time is spent on it.
if [ "${1:-}" = "--preflight" ]; then
  bad=0
  for v in $CFFI_PYS; do
    t=cp${v/./}
    ls "$REPO"/.whl/cffi-*-"$t"-*.whl >/dev/null 2>&1 || { echo "preflight: no cffi wheel for CPython $v in .whl/"; bad=1; }
  done
  ls "$REPO"/.whl/pycparser-*.whl >/dev/null 2>&1 || { echo "preflight: no pycparser wheel in .whl/"; bad=1; }
  t=cp${DEVICE_PY/./}
  if ! ls "$REPO"/.whl/prebuilt/splitrpc-*-"$t"-*.whl >/dev/null 2>&1; then
    echo "preflight: no prebuilt splitrpc wheel for CPython $DEVICE_PY in .whl/prebuilt (the fallback if the device cannot build)"; bad=1
  else
    want=$(cat "$REPO/.whl/prebuilt/SOURCES.sha256" 2>/dev/null)
    have=$(sources_hash)
    [ -n "$want" ] && [ "$want" = "$have" ] \
      || { echo "preflight: the prebuilt wheel was built from other sources ($want, this tree $have)"; bad=1; }
  fi
  ls "$REPO"/.whl/rocksdict-*.whl >/dev/null 2>&1 || echo "preflight: no rocksdict wheel: bench-embedding will skip (not fatal)"
  tree_kib=$(cd "$REPO" && { git ls-files -z; git ls-files -z --others --exclude-standard; } | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  whl_kib=$(du -sk "$REPO/.whl" 2>/dev/null | cut -f1)
  total_mib=$(( (${tree_kib:-0} + ${whl_kib:-0}) / 1024 ))
  [ "$total_mib" -lt 64 ] || { echo "preflight: the tree and .whl are $total_mib MiB, over the 64 MiB a device call carries"; bad=1; }
  if [ "$bad" = 0 ]; then
    echo "preflight: ready: .whl holds cffi for CPython $CFFI_PYS, pycparser, a prebuilt wheel of these sources for $DEVICE_PY; $total_mib MiB travel"
  else
    echo "preflight: NOT ready: run bash bench/gpu/fetch_wheels.sh (it needs python$DEVICE_PY and nvcc here)"
  fi
  exit "$bad"
fi

mkdir -p "$OUT" "$WORK"
if [ -z "${_SPLITRPC_GPU_LOGGED:-}" ]; then  # everything also into $OUT/run.log; the pipe ends when both do
  rm -f "$OUT/run.log" "$OUT/summary.md" "$OUT/check.json" "$OUT"/check_*.png  # no earlier run's report passes for this one
  _SPLITRPC_GPU_LOGGED=1 bash "$0" "$@" 2>&1 | tee -a "$OUT/run.log"
  exit "${PIPESTATUS[0]}"
fi
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET - $(elapsed) )); }
step() { echo "=== [$(elapsed) s] $*"; }
native_pid=""
# A report however the script ends: when the check never wrote one (the build was cut, nothing to
# run it with), summary.md and check.json say why.
no_check_report() {
  [ -f "$OUT/check.json" ] && return
  WHY="$1" OUTDIR="$OUT" BUDGET="$BUDGET" $PY - <<'EOF' 2>/dev/null || printf 'Device: not looked at\n\n# splitrpc check did not run: %s\n' "$1" >"$OUT/summary.md"
import json, os
why, out = os.environ["WHY"], os.environ["OUTDIR"]
doc = {"sections": {}, "budget_s": float(os.environ["BUDGET"]), "not_run": why}
with open(os.path.join(out, "check.json"), "w") as f:
    json.dump(doc, f, indent=1)
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write(f"Device: not looked at\n\n# splitrpc check did not run: {why}\n\nSee run.log beside this file.\n")
EOF
}
quit() {
  [ -n "$native_pid" ] && kill "$native_pid" 2>/dev/null
  [ -n "${2:-}" ] || [ "$1" != 0 ] && no_check_report "${2:-bench/gpu/run.sh stopped with status $1 before the check ran}"
  exit "$1"
}
build_cut=0
# Runs a build step for at most the budget's seconds left (at least 1): 124 when cut.
timed() { timeout --kill-after=5 "$(( $(left) > 1 ? $(left) : 1 ))" "$@"; }

step "splitrpc GPU check in $REPO; results to $OUT; budget ${BUDGET} s, builds included; $(nproc) CPUs"
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
pyh=$($PY -c "import os, sysconfig; print(int(os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))))" 2>/dev/null || echo 0)
pytag=$($PY -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')" 2>/dev/null || echo unknown)
echo "    python: $($PY --version 2>&1) ($(command -v "$PY"), $pytag), Python.h: $([ "$pyh" = 1 ] && echo yes || echo NO)"
echo "    cmake: $(cmake --version 2>/dev/null | head -1 || echo none); ninja: $(ninja --version 2>/dev/null || echo none)"
echo "    nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo none); cc: $(cc --version 2>/dev/null | head -1 || echo none)"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>/dev/null \
  | sed 's/^/    nvidia-smi: /' || echo "    nvidia-smi: not here"

# 1. The Python packages the bare image lacks (bench/gpu/fetch_wheels.sh put them in .whl/): the
# cffi wheel of this interpreter's version, not the others'.
export PYTHONPATH=$SITE:$DEPS${PYTHONPATH:+:$PYTHONPATH}
if $PY -c "import cffi, pycparser" 2>/dev/null; then
  step "cffi and pycparser are already importable: their wheels are not installed"
elif ls "$REPO"/.whl/cffi-*-"$pytag"-*.whl "$REPO"/.whl/pycparser-*.whl >/dev/null 2>&1; then
  step "installing the carried wheels: $(cd "$REPO/.whl" && ls ./cffi-*-"$pytag"-*.whl ./pycparser-*.whl | tr '\n' ' ')"
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$DEPS" \
    "$REPO"/.whl/cffi-*-"$pytag"-*.whl "$REPO"/.whl/pycparser-*.whl \
    || { step "FAILED: the carried wheels did not install"; quit 3 "the carried cffi and pycparser wheels did not install"; }
else
  step "FAILED: no cffi here and no carried wheel for $pytag: run bench/gpu/fetch_wheels.sh and bench/gpu/run.sh --preflight first, and carry .whl"
  quit 3 "no cffi for $pytag: .whl was not carried, or holds no wheel for this Python"
fi
# rocksdict, for the bench-embedding section alone: optional (the section skips without it)
if ! $PY -c "import rocksdict" 2>/dev/null && ls "$REPO"/.whl/rocksdict-*-"$pytag"-*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$DEPS" \
    "$REPO"/.whl/rocksdict-*-"$pytag"-*.whl && step "rocksdict installed (bench-embedding)" \
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

# 3. The native test programs, built beside the package (no Python headers needed), inside the budget.
step "building the native test_gpu and test_embed_gpu in the background (at most $(left) s)"
( timed cmake -S "$REPO" -B "$NATIVE" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPLITRPC_TESTS=ON -DSPLITRPC_PYTHON=OFF \
    -DSPLITRPC_DPDK=OFF -DSPLITRPC_CUDA=ON "-DSPLITRPC_CUDA_ARCHS=$ARCH" >"$WORK/native-configure.log" 2>&1 \
  && timed cmake --build "$NATIVE" -j "$(nproc)" --target "${native_targets[@]}" >"$WORK/native-build.log" 2>&1 ) &
native_pid=$!

# 4. splitrpc itself, with nvcc, into $SITE; else the wheel fetch_wheels.sh built (cp312, sm_90).
install_prebuilt() {
  local prebuilt
  prebuilt=$(ls "$REPO"/.whl/prebuilt/splitrpc-*-"$pytag"-*.whl 2>/dev/null | head -1)
  if [ -z "$prebuilt" ] && [ "$build_cut" = 1 ]; then  # the budget, not a fault: cut, exit 0
    step "CUT: the build used the budget and no prebuilt wheel for $pytag was carried: no section can run"
    quit 0 "cut: the build was cut by the ${BUDGET} s budget, and no prebuilt wheel for $pytag was carried; no section ran"
  elif [ -z "$prebuilt" ]; then
    step "FAILED: no prebuilt fallback for $pytag in .whl/prebuilt either"; quit 4 "the build failed, and no prebuilt wheel for $pytag was carried"
  fi
  local want have
  want=$(cat "$REPO/.whl/prebuilt/SOURCES.sha256" 2>/dev/null)
  have=$(sources_hash)
  if [ -n "$want" ] && [ "$want" = "$have" ]; then
    step "installing the prebuilt fallback $(basename "$prebuilt"): built from these very sources"
  else
    step "installing the prebuilt fallback $(basename "$prebuilt"): WARNING, built from other sources than this tree's ($want, here $have)"
  fi
  $PY -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "$prebuilt" \
    || { step "FAILED: the fallback did not install either"; quit 4 "the build and the prebuilt fallback both failed"; }
}
if [ "${SPLITRPC_GPU_PREBUILT:-0}" = 1 ]; then
  step "SPLITRPC_GPU_PREBUILT=1: no build here"
  install_prebuilt
elif [ "$pyh" != 1 ]; then
  step "no Python.h for $PY: the extension cannot be built here"
  install_prebuilt
else
  step "building and installing splitrpc (pip, scikit-build-core, nvcc; at most $(left) s)"
  timed $PY -m pip install -q --no-deps --no-build-isolation --no-index --no-cache-dir --upgrade --target "$SITE" \
       -C "build-dir=$WORK/build" -C cmake.define.SPLITRPC_CUDA=ON -C cmake.define.SPLITRPC_DPDK=OFF \
       -C "cmake.define.SPLITRPC_CUDA_ARCHS=$ARCH" "$REPO" >"$WORK/build.log" 2>&1
  rc=$?
  if [ "$rc" = 0 ]; then
    step "built and installed"
  else
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      build_cut=1; step "the build was CUT by the budget; its last lines:"
    else
      step "the build FAILED ($rc); its last lines:"
    fi
    tail -25 "$WORK/build.log"
    $PY -c "import scikit_build_core" 2>/dev/null || echo "    (scikit-build-core is not importable by $PY: pip install scikit-build-core cmake ninja, or the README's test extra)"
    install_prebuilt
  fi
fi
if wait "$native_pid"; then
  step "native test_gpu and test_embed_gpu built"
else
  step "the native build FAILED or was cut (the check reports its section skipped); last lines:"
  tail -15 "$WORK/native-build.log" "$WORK/native-configure.log" 2>/dev/null
fi
native_pid=""

if [ "${SPLITRPC_CHECK_EMULATED:-0}" = 1 ]; then
  step "EMULATED dry run: the tests' libcuda.so.1 and CuPy stand in for a GPU${SPLITRPC_EMULATED_FAULT:+; fault: $SPLITRPC_EMULATED_FAULT}"
  export LD_LIBRARY_PATH=$NATIVE/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PYTHONPATH=$REPO/tests/emu:$PYTHONPATH
elif [ -n "${SPLITRPC_EMULATED_FAULT:-}" ]; then
  step "SPLITRPC_EMULATED_FAULT is for the emulated dry run (SPLITRPC_CHECK_EMULATED=1): ignored here"
  unset SPLITRPC_EMULATED_FAULT
fi

# 5. The check, from the repository root (its tests) through the installed command (which, unlike
# `python -m`, does not put the source folder first on the path), with what is left of the budget:
# the sections it cannot reach say cut.
check_s=$(( $(left) - REPORT_S ))
[ "$check_s" -lt 1 ] && check_s=1
step "splitrpc check --bench (the check's budget: ${check_s} s of the ${BUDGET} s)"
cd "$REPO" || quit 5
# What was checked: the commit fetch_wheels.sh saw, and whether this tree's sources are the same.
src="$(cat .whl/prebuilt/COMMIT 2>/dev/null || echo 'commit unknown (no .whl/prebuilt/COMMIT)')"
[ "$(sources_hash)" = "$(cat .whl/prebuilt/SOURCES.sha256 2>/dev/null)" ] && src="$src, these sources" \
  || src="$src, then changed (sources $(sources_hash))"
export SPLITRPC_CHECK_SOURCE="$src"
echo "    source: $src"
PYTHONUNBUFFERED=1 timeout --kill-after=5 $(( check_s + REPORT_S )) $PY "$SITE/bin/splitrpc" check --bench --out "$OUT" \
  --native "$NATIVE" --budget-s "$check_s" "$@"
rc=$?
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  step "the check ran past the budget and was stopped (its report: the sections it finished, the rest cut)"
fi
no_check_report "splitrpc check ended with status $rc before it wrote a report"
step "done: splitrpc check exited $rc; files in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
exit $rc
