#!/usr/bin/env bash
# Installs the Debian packages (scripts/install-deps.sh) and the project venv
# with PyPI's torch (scripts/pyenv.sh, shared by the clones on a machine),
# then builds into build/ (or $BUILD_DIR) with CMake (Ninja, and ccache when
# installed) against that torch's LibTorch. Prints each phase's seconds and
# appends them to $BUILD_DIR/phase-times.tsv (scripts/test.sh sums them up).
#
# To build against a torch that is already installed (2.10 or newer, e.g. on
# a GPU machine), set TRAINYARD_PYTHON to its interpreter: the venv is then
# neither created nor used. Targets to build may follow as arguments
# (default: all).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
mkdir -p "$build"
phases=$build/phase-times.tsv
phase_start=$SECONDS
phase() {  # phase NAME: the seconds since the last phase ended
  local took=$((SECONDS - phase_start))
  printf '%s\t%s\n' "$1" "$took" >>"$phases"
  echo "build: $1 took ${took} s"
  phase_start=$SECONDS
}
bash "$root/scripts/install-deps.sh"
if [ -z "${TRAINYARD_PYTHON:-}" ]; then
  python=$(bash "$root/scripts/pyenv.sh")/bin/python
else
  python=$TRAINYARD_PYTHON
fi
phase setup
# Ninja where it is installed (install-deps.sh installs it), unless the build
# directory was configured with another generator.
generator=()
if ! grep -q '^CMAKE_GENERATOR:' "$build/CMakeCache.txt" 2>/dev/null && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
echo "build: configuring $build (LibTorch from $python)"
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINYARD_PYTHON="$python" \
  > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
phase configure
targets=()
for t in "$@"; do targets+=(--target "$t"); done
echo "build: compiling ${*:-everything} with ${JOBS:-2} jobs"
if command -v ccache >/dev/null; then ccache --zero-stats >/dev/null 2>&1 || true; fi
cmake --build "$build" -j "${JOBS:-2}" "${targets[@]}"
phase compile
if command -v ccache >/dev/null && grep -q '^TRAINYARD_CCACHE_PROGRAM:' "$build/CMakeCache.txt"; then
  ccache --print-stats 2>/dev/null | awk -F'\t' '$1 ~ /^(direct_cache_hit|preprocessed_cache_hit|cache_miss)$/ {
    s = s sprintf(" %s %s", $1, $2) } END { if (s != "") print "build: ccache" s }'
fi
