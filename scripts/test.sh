#!/usr/bin/env bash
# Sets up everything on a fresh Debian 12 machine and runs every test (ctest):
# unit tests (spec, store, scheduler, launcher, safetensors, the worker's
# linkage), distributed ones over real Gloo (DDP, comm hooks, FSDP,
# collectives, checkpoints), and end-to-end server + workers + trainctl on
# loopback. The CUDA and NCCL paths compile and link in every build; the gpu
# tests skip without a GPU (docs/gpu-status.md). Arguments go to ctest
# (bash scripts/test.sh -L unit).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
ctest --test-dir "$build" --output-on-failure --timeout 1200 "$@"
