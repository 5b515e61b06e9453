#!/usr/bin/env bash
# bench/gpu/fetch_wheels.sh: run HERE (not on the device) before a device run: puts into .whl/ (git-ignored) the wheels the bare GPU machine lacks (cffi for CPython 3.10 to 3.13, pycparser; rocksdict for the embedding benchmark, 3.12), and a prebuilt splitrpc wheel for it (kernels for sm_90 + PTX) that run.sh installs only if its own build fails.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WHL=$REPO/.whl
PY=3.12                                  # the device machine's Python (the device tool's KINDS.md)
CFFI_PYS="3.10 3.11 3.12 3.13"           # cffi for each: run.sh installs the one of the Python it finds
ARCHS=${SPLITRPC_CUDA_ARCHS:-90}         # H100 and H200: compute capability 9.0
CFFI=${CFFI_VERSION:-2.0.0}
PYCPARSER=${PYCPARSER_VERSION:-2.23}
ROCKSDICT=${ROCKSDICT_VERSION:-0.3.29}   # bench-embedding's L3 (4 MiB)
mkdir -p "$WHL" "$WHL/prebuilt"
rm -f "$WHL"/*.whl "$WHL"/prebuilt/*

echo "== cffi $CFFI for CPython ${CFFI_PYS// /, } (the device's Python may change), pycparser $PYCPARSER, rocksdict $ROCKSDICT for CPython $PY; x86_64"
for v in $CFFI_PYS; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$v" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHL" "cffi==$CFFI"
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$WHL" "pycparser==$PYCPARSER" "rocksdict==$ROCKSDICT"

# The fallback: the same tree built here for CPython 3.12 (cp312, linux_x86_64), in case the device
# cannot build (no Python headers there, say). Needs python3.12 and nvcc here; skipped without them.
py312=""
for c in ${PYTHON312:-} python$PY $(ls -d "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/$PY*/bin/python$PY 2>/dev/null); do
  if "$c" -c "import sys; assert sys.version_info[:2] == tuple(map(int, '$PY'.split('.')))" 2>/dev/null; then py312=$c; break; fi
done
if [ -n "$py312" ] && command -v nvcc >/dev/null; then
  echo "== prebuilt splitrpc for CPython $PY ($py312), kernels for $ARCHS (fallback only)"
  "$py312" -m pip wheel -q --no-deps -w "$WHL/prebuilt" -C build-dir=/tmp/splitrpc-prebuilt-$PY \
    -C cmake.define.SPLITRPC_CUDA=ON -C cmake.define.SPLITRPC_DPDK=OFF \
    -C "cmake.define.SPLITRPC_CUDA_ARCHS=$ARCHS" "$REPO"
  # What it was built from, so run.sh can say whether the fallback matches the tree it runs in.
  (cd "$REPO" && git ls-files --cached --others --exclude-standard -- splitrpc native server client 'bench/*.py' \
     CMakeLists.txt cmake pyproject.toml > "$WHL/prebuilt/SOURCES" \
   && sha256sum $(cat "$WHL/prebuilt/SOURCES") | sha256sum | cut -c1-16 > "$WHL/prebuilt/SOURCES.sha256")
  # The commit it was built at (run.sh records it in the report as what was checked)
  (cd "$REPO" && echo "$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- && echo '' || echo ' with uncommitted changes')") \
    > "$WHL/prebuilt/COMMIT"
  echo "== built from $(wc -l < "$WHL/prebuilt/SOURCES") files at $(cat "$WHL/prebuilt/COMMIT"), sources hash $(cat "$WHL/prebuilt/SOURCES.sha256")"
else
  echo "== no python$PY or no nvcc here: no prebuilt fallback wheel (run.sh then depends on its own build)"
fi
ls -l "$WHL" "$WHL/prebuilt"
tree_kib=$(cd "$REPO" && { git ls-files -z; git ls-files -z --others --exclude-standard; } | du -ck --files0-from=- | tail -1 | cut -f1)
whl_kib=$(du -sk "$WHL" | cut -f1)
echo "== what travels: tree ${tree_kib} KiB + .whl ${whl_kib} KiB = $(( (tree_kib + whl_kib) / 1024 )) MiB of the 64 MiB limit"
bash "$REPO/bench/gpu/run.sh" --preflight
