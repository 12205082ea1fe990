#!/usr/bin/env bash
# Checks what trainyard-worker is linked against: the LibTorch of the torch
# package it was built for (TORCH_DIR: the package directory of
# TRAINYARD_PYTHON's torch), not another torch or a system libtorch, and in a
# CUDA build libtorch_cuda and NCCL, every one of them resolved.
set -euo pipefail
worker=${1:?usage: worker_linkage.sh WORKER WITH_CUDA TORCH_DIR}
with_cuda=${2:?usage: worker_linkage.sh WORKER WITH_CUDA TORCH_DIR}
torch_dir=${3:?usage: worker_linkage.sh WORKER WITH_CUDA TORCH_DIR}
libs=$(ldd "$worker")
echo "$libs"
fail() { echo "worker_linkage: $*" >&2; exit 1; }
! grep -q "not found" <<<"$libs" || fail "unresolved libraries"
want=$(readlink -f "$torch_dir/lib/libtorch_cpu.so") || fail "no $torch_dir/lib/libtorch_cpu.so"
[ -f "$want" ] || fail "no $torch_dir/lib/libtorch_cpu.so"
got=$(sed -nE 's/^[[:space:]]*libtorch_cpu\.so => ([^ ]+) .*/\1/p' <<<"$libs")
[ -n "$got" ] || fail "libtorch_cpu is not linked in"
[ "$(readlink -f "$got")" = "$want" ] || fail "libtorch_cpu is $got, not $want (the torch of TRAINYARD_PYTHON)"
if [ "$with_cuda" = ON ] || [ "$with_cuda" = 1 ] || [ "$with_cuda" = TRUE ]; then
  grep -qE 'libtorch_cuda\.so => /' <<<"$libs" || fail "libtorch_cuda is not linked in"
  grep -qE 'libnccl\.so\.[0-9]+ => /' <<<"$libs" || fail "libnccl is not linked in"
  grep -qE 'libc10_cuda\.so => /' <<<"$libs" || fail "libc10_cuda is not linked in"
fi
! grep -qE '=> /usr/lib/.*libtorch' <<<"$libs" || fail "a system libtorch is linked"
echo "worker_linkage: ok"
