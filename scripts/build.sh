#!/usr/bin/env bash
# Installs the Debian packages (scripts/install-deps.sh) and the project venv
# with PyPI's torch (scripts/pyenv.sh), then builds into build/ (or
# $BUILD_DIR) with CMake against that torch's LibTorch.
#
# To build against a torch that is already installed (2.10 or newer, e.g. on
# a GPU machine), set TRAINYARD_PYTHON to its interpreter: the venv is then
# neither created nor used. Targets to build may follow as arguments
# (default: all).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
bash "$root/scripts/install-deps.sh"
if [ -z "${TRAINYARD_PYTHON:-}" ]; then
  bash "$root/scripts/pyenv.sh"
  python=${TRAINYARD_VENV:-$root/.venv}/bin/python
else
  python=$TRAINYARD_PYTHON
fi
mkdir -p "$build"
echo "build: configuring $build (LibTorch from $python)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINYARD_PYTHON="$python" \
  > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
targets=()
for t in "$@"; do targets+=(--target "$t"); done
echo "build: compiling ${*:-everything} with ${JOBS:-2} jobs"
cmake --build "$build" -j "${JOBS:-2}" "${targets[@]}"
