#!/usr/bin/env bash
# Checks what trainyard-worker is linked against: the wheel's LibTorch
# (libtorch_cpu from a torch package, not a system libtorch), and in a CUDA
# build libtorch_cuda and NCCL, every one of them resolved.
set -euo pipefail
worker=${1:?usage: worker_linkage.sh WORKER WITH_CUDA}
with_cuda=${2:-ON}
libs=$(ldd "$worker")
echo "$libs"
fail() { echo "worker_linkage: $*" >&2; exit 1; }
! grep -q "not found" <<<"$libs" || fail "unresolved libraries"
grep -qE 'libtorch_cpu\.so => .*/torch/lib/libtorch_cpu\.so' <<<"$libs" ||
  fail "libtorch_cpu does not come from a torch package's lib/"
if [ "$with_cuda" = ON ] || [ "$with_cuda" = 1 ] || [ "$with_cuda" = TRUE ]; then
  grep -qE 'libtorch_cuda\.so => /' <<<"$libs" || fail "libtorch_cuda is not linked in"
  grep -qE 'libnccl\.so\.[0-9]+ => /' <<<"$libs" || fail "libnccl is not linked in"
  grep -qE 'libc10_cuda\.so => /' <<<"$libs" || fail "libc10_cuda is not linked in"
fi
! grep -qE '=> /usr/lib/.*libtorch' <<<"$libs" || fail "a system libtorch is linked"
echo "worker_linkage: ok"
