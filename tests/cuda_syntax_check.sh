#!/usr/bin/env bash
# Compiles the CUDA/NCCL-only worker sources with -fsyntax-only against the
# CUDA toolkit headers, so GPU code that cannot be linked or run on a CPU-only
# machine still compiles. Exits 77 (skipped) when no CUDA toolkit is present.
set -euo pipefail
src=${1:?usage: cuda_syntax_check.sh SOURCE_DIR}
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda/include/cuda_runtime_api.h" ] || [ ! -f "$cuda/include/nccl.h" ]; then
  echo "cuda_syntax: no CUDA toolkit with NCCL under $cuda; skipped"
  exit 77
fi
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
# Debian's CPU LibTorch ships the c10/cuda headers but not this generated one.
mkdir -p "$stub/c10/cuda/impl"
echo '#define C10_CUDA_BUILD_SHARED_LIBS' > "$stub/c10/cuda/impl/cuda_cmake_macros.h"
files=("$src/worker/process_group_nccl.cc" "$src/worker/process_group.cc")
for f in "${files[@]}"; do
  echo "cuda_syntax: $f"
  g++ -std=c++17 -fsyntax-only -DTRAINYARD_WITH_NCCL -DUSE_C10D_NCCL -DUSE_DISTRIBUTED -DUSE_C10D_GLOO \
    -I"$stub" -I"$src" -I"$src/worker/compat" -I/usr/include/torch/csrc/api/include -I"$cuda/include" "$f"
done
echo "cuda_syntax: ${#files[@]} files compile against $cuda"
